//! Payment channels (x402 `batch-settlement`) on the hot path: a request is *admitted* (its
//! voucher checked against the channel, a deposit sent on chain first when the payload carries
//! one) before it is forwarded, and *finished* once the origin answered: the charge is committed
//! only for an answer that succeeded, so a failed upstream leaves the channel as it was and the
//! same voucher can be sent again.
//!
//! Requests of one channel are serialized by a per-channel lock on the node serving it. Across
//! nodes a channel is leased to one node (`owner`, `lease_until_ms` in its record): the lease is
//! renewed by the write that commits each voucher, so the common case (one agent on one node)
//! costs one store write per voucher and no read; another node takes the channel over once the
//! lease has run out (a compare-and-set on the record's version, so two nodes never both move a
//! channel from the same state). ARCHITECTURE.md has the design.

use alloy_primitives::{Address, B256};
use alloy_signer_local::PrivateKeySigner;
use paygate_config::ChannelsConfig;
use paygate_domain::channel::{ChannelOpening, ChannelRecord};
use paygate_store::Store;
use paygate_x402::batch::{
    ChannelAction, ChannelConfigWire, ChannelOffer, ChannelPayloadWire, ChannelPayment,
    ChannelRejection, KnownConfig,
};
use paygate_x402::facilitator::ChainCalls;
use paygate_x402::{BatchTerms, PaymentRequirements};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, OwnedMutexGuard};

mod chain;
mod claims;
mod events;
pub mod facilitated;
mod receipts;
pub mod refunds;
mod withdrawals;

pub use receipts::{state_wire, voucher_wire, ChannelReceipt};

/// Gas for a deposit through the ERC-3009 collector (measured about 110k on the dev chain).
const DEPOSIT_GAS: u64 = 250_000;
/// Gas per channel of a claim, and for the transaction around it.
const CLAIM_GAS_PER_CHANNEL: u64 = 40_000;
const CLAIM_GAS_BASE: u64 = 150_000;
/// A deposit authorization must stay valid this long after it reaches the gateway.
const DEPOSIT_MIN_VALIDITY: u64 = 6;
/// How long a request waits for the channel's previous request on this node.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Why a channel payment was not admitted. Nothing was charged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChannelRefusal {
    /// The payload could not be decoded.
    #[error("{0}")]
    Malformed(String),
    /// The payer must sign again; `state` is the channel as the gateway has it (the corrective
    /// 402 carries it, so an honest client resyncs).
    #[error("{rejection}")]
    Rejected {
        rejection: ChannelRejection,
        state: Option<Box<ChannelRecord>>,
    },
    /// The deposit's transfer failed on chain (nothing moved).
    #[error("the deposit failed on chain: {0}")]
    DepositFailed(String),
    /// The contract refused a claim, settlement or refund another server asked for through the
    /// facilitator API (nothing moved).
    #[error("the contract refused the transaction: {0}")]
    ContractRefused(String),
    /// Another request of this channel is still being served.
    #[error("another request of this channel is being served; retry it")]
    Busy,
    /// The store or the chain cannot be reached: nothing was charged, retry later.
    #[error("payment channels are unavailable now ({0}); nothing was charged, retry later")]
    Unavailable(String),
}

impl ChannelRefusal {
    /// The x402 reason word.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "invalid_batch_settlement_evm_payload_type",
            Self::Rejected { rejection, .. } => rejection.reason(),
            Self::DepositFailed(_) => "invalid_batch_settlement_evm_deposit_failed",
            Self::ContractRefused(_) => "invalid_batch_settlement_evm_transaction_failed",
            Self::Busy => "invalid_batch_settlement_evm_channel_busy",
            Self::Unavailable(_) => "unexpected_settle_error",
        }
    }

    /// Whether the refusal is a `402` (the payer can do something about it) rather than a `503`.
    pub fn payment_required(&self) -> bool {
        !matches!(self, Self::Unavailable(_))
    }

    fn rejected(rejection: ChannelRejection) -> Self {
        Self::Rejected {
            rejection,
            state: None,
        }
    }
}

/// What a route asks of a channel payment.
pub struct ChannelCharge<'a> {
    pub org_id: &'a str,
    pub route_id: &'a str,
    pub requirements: &'a PaymentRequirements,
    pub terms: &'a BatchTerms,
}

/// The cached record of one channel on this node, behind the lock that serializes its requests.
type Slot = Arc<Mutex<Option<ChannelRecord>>>;

/// What this node keeps of a channel it served: the record's slot (locked while one of the
/// channel's requests is served) and the channel's configuration, parsed once.
#[derive(Default)]
struct Kept {
    slot: Slot,
    known: Option<Arc<KnownConfig>>,
}

/// A channel payment admitted: the channel's lock is held until [`Channels::finish`] (or until
/// this is dropped, which charges nothing).
pub struct Admitted {
    slot: OwnedMutexGuard<Option<ChannelRecord>>,
    payment: ChannelPayment,
    price: u128,
    /// The deposit's transaction and amount, when the request carried one.
    deposit: Option<(B256, u128)>,
}

impl Admitted {
    pub fn payer(&self) -> Address {
        self.payment.config.payer
    }

    pub fn channel_id(&self) -> B256 {
        self.payment.channel_id
    }

    /// The most this request may be charged (the route's price).
    pub fn price(&self) -> u128 {
        self.price
    }
}

/// The payment channels service: one per process.
pub struct Channels {
    store: Arc<dyn Store>,
    chain: Arc<dyn ChainCalls>,
    authorizer: PrivateKeySigner,
    cfg: ChannelsConfig,
    /// This process's name in channel leases.
    node: String,
    slots: std::sync::Mutex<HashMap<B256, Kept>>,
    /// The last block whose withdrawal events were read, per chain (`withdrawals`).
    watched: std::sync::Mutex<HashMap<u64, u64>>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    /// Seller webhook events (`channel.claimed`, `payment.refunded`).
    events: Option<Arc<crate::events::Events>>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn unavailable(e: impl std::fmt::Display) -> ChannelRefusal {
    ChannelRefusal::Unavailable(e.to_string())
}

impl Channels {
    pub fn new(
        store: Arc<dyn Store>,
        chain: Arc<dyn ChainCalls>,
        authorizer: PrivateKeySigner,
        cfg: ChannelsConfig,
    ) -> Self {
        Self {
            store,
            chain,
            authorizer,
            cfg,
            node: paygate_domain::ids::new_id("node"),
            slots: Default::default(),
            watched: Default::default(),
            metrics: None,
            events: None,
        }
    }

    /// Counts what the channels do in `metrics` (Prometheus `paygate_channel_*`).
    pub fn with_events(mut self, events: Arc<crate::events::Events>) -> Self {
        self.events = Some(events);
        self
    }

    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn count(&self, org: &str, event: &'static str, amount: u128) {
        if let Some(m) = &self.metrics {
            m.channel_event(org, event, amount);
        }
    }

    pub fn receiver_authorizer(&self) -> Address {
        self.authorizer.address()
    }

    pub fn config(&self) -> &ChannelsConfig {
        &self.cfg
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<B256, Kept>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn slot(&self, id: B256) -> Slot {
        self.slots().entry(id).or_default().slot.clone()
    }

    /// Channel `id`'s configuration as a payment whose voucher was verified carried it.
    fn known(&self, id: B256) -> Option<Arc<KnownConfig>> {
        self.slots().get(&id).and_then(|kept| kept.known.clone())
    }

    /// Drops this node's cached record of channel `id` (another writer moved it), unless a
    /// request of the channel holds it now (its write then finds the new version).
    fn forget(&self, id: B256) {
        if let Ok(mut cached) = self.slot(id).try_lock() {
            *cached = None;
        }
    }

    /// Takes the lock serializing the requests of channel `id` on this node.
    async fn lock(
        &self,
        id: B256,
    ) -> Result<OwnedMutexGuard<Option<ChannelRecord>>, ChannelRefusal> {
        tokio::time::timeout(LOCK_WAIT, self.slot(id).lock_owned())
            .await
            .map_err(|_| ChannelRefusal::Busy)
    }

    /// The payload parsed for the route's chain, its channel one the route offers, its voucher
    /// signed by the payer authorizer (one recovery), or, for a channel without one, accepted by
    /// the payer's smart wallet (EIP-1271, one call to the chain).
    async fn checked(
        &self,
        wire: &ChannelPayloadWire,
        charge: &ChannelCharge<'_>,
    ) -> Result<ChannelPayment, ChannelRefusal> {
        let req = charge.requirements;
        let chain_id = req.network.config.chain_id;
        let id = wire.channel_id().map_err(ChannelRefusal::rejected)?;
        let known = self.known(id);
        let payment = ChannelPayment::parse_known(wire, chain_id, id, known.as_deref())
            .map_err(ChannelRefusal::rejected)?;
        let offer = ChannelOffer {
            receiver: req.pay_to,
            receiver_authorizer: charge.terms.receiver_authorizer,
            token: req.network.config.asset,
            withdraw_delay: charge.terms.withdraw_delay,
        };
        payment
            .check_offer(&offer)
            .map_err(ChannelRefusal::rejected)?;
        let check = payment
            .check_voucher(chain_id)
            .map_err(ChannelRefusal::rejected)?;
        self.chain_checked(chain_id, check, ChannelRejection::VoucherSignature)
            .await?;
        if known.is_none() {
            let kept = Arc::new(payment.known(wire, chain_id));
            self.slots().entry(id).or_default().known = Some(kept);
        }
        Ok(payment)
    }

    /// The payment's channel locked on this node and held ([`Self::hold`]).
    async fn take(
        &self,
        payment: &ChannelPayment,
        charge: &ChannelCharge<'_>,
    ) -> Result<(OwnedMutexGuard<Option<ChannelRecord>>, ChannelRecord), ChannelRefusal> {
        let mut guard = self.lock(payment.channel_id).await?;
        let record = self
            .hold(
                &mut guard,
                payment.channel_id,
                Some((payment, charge)),
                charge.org_id,
            )
            .await?;
        Ok((guard, record))
    }

    /// Admits a channel payment for `charge`: checks the payload, takes the channel's lock,
    /// loads (or takes over) the channel, sends a deposit on chain when the payload carries
    /// one, then checks the voucher's cumulative step.
    pub async fn admit(
        &self,
        wire: &ChannelPayloadWire,
        charge: &ChannelCharge<'_>,
    ) -> Result<Admitted, ChannelRefusal> {
        let req = charge.requirements;
        let chain_id = req.network.config.chain_id;
        let payment = self.checked(wire, charge).await?;
        if matches!(payment.action, ChannelAction::Refund(_)) {
            // A refund is not a request to serve: [`Channels::refund`] answers it.
            return Err(ChannelRefusal::rejected(ChannelRejection::Malformed));
        }
        let now = paygate_domain::unix_now();
        let domain = paygate_x402::verify::token_domain(req);
        let check = payment
            .check_deposit(&domain, now, DEPOSIT_MIN_VALIDITY)
            .map_err(ChannelRefusal::rejected)?;
        self.chain_checked(chain_id, check, ChannelRejection::DepositSignature)
            .await?;
        let (mut guard, mut record) = self.take(&payment, charge).await?;
        let mut deposit = None;
        if let ChannelAction::Deposit(d) = &payment.action {
            let (tx, on_chain) = self.deposit(&payment, d, chain_id).await?;
            deposit = Some((tx, d.amount));
            let mut next = record.clone();
            next.balance = on_chain.0;
            next.total_claimed = on_chain.1;
            next.deposited = next.deposited.saturating_add(d.amount);
            record = self.write(&mut guard, &record, next).await?;
            self.count(charge.org_id, "deposit", d.amount);
        }
        payment
            .check_step(
                &record.figures(),
                req.amount.0.into(),
                now,
                self.cfg.claim_lead_seconds,
            )
            .map_err(|rejection| ChannelRefusal::Rejected {
                rejection,
                state: Some(Box::new(record.clone())),
            })?;
        Ok(Admitted {
            slot: guard,
            payment,
            price: req.amount.0.into(),
            deposit,
        })
    }

    /// The channel's record with this node holding it: the cached one while its lease holds,
    /// else read from the store (waiting for another node's lease to run out) and taken over;
    /// a channel the store does not know is read from the chain when `discover` gives the
    /// payment (a deposit starts a new one), else it is missing.
    async fn hold(
        &self,
        guard: &mut OwnedMutexGuard<Option<ChannelRecord>>,
        channel_id: B256,
        discover: Option<(&ChannelPayment, &ChannelCharge<'_>)>,
        org_id: &str,
    ) -> Result<ChannelRecord, ChannelRefusal> {
        let margin = self.cfg.lease_ms / 4;
        if let Some(r) = guard
            .as_ref()
            .filter(|r| r.leased_to(&self.node, now_ms(), margin))
        {
            return Ok(r.clone());
        }
        let id = format!("{channel_id:#x}");
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.cfg.lease_ms + 1_000);
        loop {
            let stored = self.store.get_channel(&id).await.map_err(unavailable)?;
            let current = match (stored, discover) {
                (Some(r), _) => r,
                (None, Some((payment, charge))) => self.discover(&id, payment, charge).await?,
                (None, None) => {
                    return Err(ChannelRefusal::rejected(ChannelRejection::MissingChannel))
                }
            };
            if current.org_id != org_id {
                // Another organisation's channel: a payer reached the wrong seller, and to a
                // seller it does not exist.
                return Err(ChannelRefusal::rejected(if discover.is_some() {
                    ChannelRejection::ReceiverMismatch
                } else {
                    ChannelRejection::MissingChannel
                }));
            }
            let now = now_ms();
            if !current.servable_by(&self.node, now) {
                if tokio::time::Instant::now() >= deadline {
                    return Err(ChannelRefusal::Busy);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            let mut next = current.clone();
            next.owner = Some(self.node.clone());
            next.lease_until_ms = now + self.cfg.lease_ms;
            if current.version == 0 {
                // Not stored yet: the first write (the deposit's, or the first charge) creates
                // it, so a refused request leaves no record behind. Held in the slot like a
                // stored one: a channel found on chain alone (its deposit's request cut by a
                // crash, or opened elsewhere) is charged for the voucher it serves.
                return Ok(guard.insert(next).clone());
            }
            match self.write(guard, &current, next).await {
                Ok(r) => return Ok(r),
                Err(ChannelRefusal::Busy) if tokio::time::Instant::now() < deadline => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// A channel the store does not hold: new (version 0) for a deposit; otherwise what the
    /// chain holds for it (a channel opened before this store, or elsewhere), charged up to
    /// what was claimed.
    async fn discover(
        &self,
        id: &str,
        payment: &ChannelPayment,
        charge: &ChannelCharge<'_>,
    ) -> Result<ChannelRecord, ChannelRefusal> {
        let (balance, total_claimed) = match payment.action {
            ChannelAction::Deposit(_) => (0, 0),
            _ => {
                let chain_id = charge.requirements.network.config.chain_id;
                let on_chain = self.on_chain(chain_id, payment.channel_id).await?;
                if on_chain.0 == 0 {
                    return Err(ChannelRefusal::rejected(
                        ChannelRejection::CumulativeExceedsBalance,
                    ));
                }
                on_chain
            }
        };
        Ok(ChannelRecord::opened(ChannelOpening {
            id: id.to_string(),
            org_id: charge.org_id.to_string(),
            route_id: charge.route_id.to_string(),
            network: charge.requirements.network.caip2.clone(),
            config: ChannelConfigWire::from(&payment.config),
            balance,
            total_claimed,
            now: paygate_domain::now_rfc3339(),
        }))
    }

    /// Writes `next` over `read` (compare-and-set on its version), caching what was written.
    /// `Busy` when another writer moved the channel first (the cache is dropped).
    async fn write(
        &self,
        guard: &mut OwnedMutexGuard<Option<ChannelRecord>>,
        read: &ChannelRecord,
        next: ChannelRecord,
    ) -> Result<ChannelRecord, ChannelRefusal> {
        self.write_as(guard, read.version, next, false)
            .await
            .cloned()
    }

    /// [`Self::write`] over the record of version `read_version`; `charges_only`: `next` moves
    /// only what a served request moves of it (the store may write that part alone).
    async fn write_as<'g>(
        &self,
        guard: &'g mut OwnedMutexGuard<Option<ChannelRecord>>,
        read_version: u64,
        mut next: ChannelRecord,
        charges_only: bool,
    ) -> Result<&'g ChannelRecord, ChannelRefusal> {
        next.version = read_version + 1;
        next.updated_at = paygate_domain::now_rfc3339();
        let written = if charges_only {
            self.store.put_channel_charges_if(read_version, &next).await
        } else {
            self.store.put_channel_if(read_version, &next).await
        };
        match written {
            Ok(true) => Ok(guard.insert(next)),
            Ok(false) => {
                **guard = None;
                Err(ChannelRefusal::Busy)
            }
            Err(e) => {
                **guard = None;
                tracing::warn!(error = %e, channel = %next.id, "could not write a channel");
                Err(unavailable(e))
            }
        }
    }

    /// The origin answered: commits `charged` (at most the price) with the voucher and renews
    /// this node's lease, in one write. A record the claimer moved meanwhile (its version
    /// changed, this node still holding it) is read again and the charge applied to it.
    pub async fn finish(
        &self,
        mut a: Admitted,
        charged: u128,
    ) -> Result<ChannelReceipt, ChannelRefusal> {
        let charged = charged.min(a.price);
        // Taken out of the slot (no copy): the write puts what it wrote back.
        let Some(mut next) = a.slot.take() else {
            return Err(ChannelRefusal::Busy);
        };
        for _ in 0..4 {
            let (read_version, read_charged) = (next.version, next.charged);
            #[cfg(debug_assertions)]
            let read = next.clone();
            next.charged = read_charged + charged;
            if a.payment.max_claimable >= next.voucher_max {
                next.voucher_max = a.payment.max_claimable;
                // Claimed later through the contract's own check, when a counterfactual
                // wallet has been deployed: its inner signature is the one kept.
                next.voucher_signature =
                    paygate_x402::signature::unwrapped(&a.payment.signature).to_string();
            }
            next.requests += 1;
            if charged > 0 && next.unclaimed_since.is_none() {
                next.unclaimed_since = Some(paygate_domain::unix_now());
            }
            if next.owner.as_deref() != Some(&self.node) {
                next.owner = Some(self.node.clone());
            }
            next.lease_until_ms = now_ms() + self.cfg.lease_ms;
            #[cfg(debug_assertions)]
            debug_assert!(next.only_charges_moved_from(&read));
            // The first write of a channel found on chain alone creates its record whole.
            let charges_only = read_version != 0;
            match self
                .write_as(&mut a.slot, read_version, next, charges_only)
                .await
            {
                Ok(record) => {
                    self.count(&record.org_id, "voucher", charged);
                    return Ok(ChannelReceipt::new(charged, record, a.deposit));
                }
                Err(ChannelRefusal::Busy) => {
                    let id = format!("{:#x}", a.payment.channel_id);
                    let Some(fresh) = self.store.get_channel(&id).await.map_err(unavailable)?
                    else {
                        break;
                    };
                    if fresh.owner.as_deref() != Some(&self.node) || fresh.charged != read_charged {
                        break;
                    }
                    next = fresh;
                }
                Err(e) => return Err(e),
            }
        }
        tracing::warn!(channel = %a.payment.channel_id, "a served voucher's charge could not be committed: another node took the channel");
        Err(ChannelRefusal::Busy)
    }

    /// The organisation's channels.
    pub async fn list(&self, org_id: &str) -> Result<Vec<ChannelRecord>, ChannelRefusal> {
        self.store.list_channels(org_id).await.map_err(unavailable)
    }

    /// The organisation's channel `id` (`None`: no such channel, or another organisation's).
    pub async fn get(
        &self,
        org_id: &str,
        id: &str,
    ) -> Result<Option<ChannelRecord>, ChannelRefusal> {
        let Ok(id) = id.parse::<B256>() else {
            return Ok(None);
        };
        let record = self
            .store
            .get_channel(&format!("{id:#x}"))
            .await
            .map_err(unavailable)?;
        Ok(record.filter(|r| r.org_id == org_id))
    }
}
