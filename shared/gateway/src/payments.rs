//! The payment service, apart from any HTTP server. Its door is two calls (`registry.rs`):
//! `admit` a paid request before it is forwarded and `finish` it with the answer, each way of
//! paying one module behind the `Way` trait (`way.rs`, `ways/`). Here is the settlement step the
//! settling ways share: verify a payment locally, take a plan slot, reserve its nonce durably,
//! settle it through the facilitator and record the outcome. It returns [`Paid`] or a
//! [`Refusal`]; each caller (the Pingora hot path, the facilitator API) turns a refusal into its
//! own wire answer through the one mapping on [`Refusal`].

use crate::settleable::Settleable;
use crate::usage::{PlanUsage, Slot};
use alloy_primitives::Address;
use base64::Engine;
use paygate_domain::model::{GatewayPayment, PaymentStatus, PaymentTransfer};
use paygate_store::{PaymentReservation, Store};
use paygate_x402::facilitator::wire::SettleResponse;
use paygate_x402::facilitator::{Facilitator, FacilitatorError, PaymentRequest};
use paygate_x402::payment::{PaymentPayload, ProtocolVersion, SignedAuthorization};
use paygate_x402::verify::{self, Rejection};
use paygate_x402::PaymentRequirements;
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

/// A payment decoded and verified locally; nothing is reserved yet.
pub struct Verified {
    payment: PaymentPayload,
    auth: SignedAuthorization,
    verify_us: u64,
    /// Well signed but too close to its expiry (or past it) to be settled now: only a retry of a
    /// payment already taken (its nonce held) goes on, answered by that payment's record.
    expiring: bool,
    /// Who vouches for the signature: a smart wallet's is asked before anything is reserved
    /// ([`PaymentService::ask_wallet`]).
    signed: verify::Signed,
    /// The protocol it came in (its record says so).
    protocol: paygate_domain::model::PaymentProtocol,
}

impl Verified {
    pub fn payer(&self) -> Address {
        self.auth.from
    }

    /// The same payment, having come in `protocol` (an MPP credential carries an EIP-3009
    /// authorization settled as `exact`'s).
    pub(crate) fn came_in(mut self, protocol: paygate_domain::model::PaymentProtocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// The same payment, answered only as the retry of one already taken (what it pays for can
    /// no longer be paid: an MPP challenge about to expire).
    pub(crate) fn only_as_retry(mut self) -> Self {
        self.expiring = true;
        self
    }
}

/// What a payment is taken for.
pub struct Charge<'a> {
    pub org_id: &'a Arc<str>,
    pub route_id: &'a str,
    pub requirements: &'a PaymentRequirements,
    /// The org's monthly paid-request limit (0 = unlimited); `None` when the payment serves no
    /// gateway request (the facilitator API), so no plan slot is taken.
    pub plan_limit: Option<u64>,
    /// The route's origin deduplicates by payment id: a retry of a settled payment its origin
    /// never answered is forwarded again ([`GatewayPayment::redeliverable_by`]).
    pub redeliver: bool,
}

/// A settled payment: its record, the receipt for the answer and the plan slot it holds until
/// [`PaymentService::delivered`].
pub struct Paid {
    pub record: GatewayPayment,
    pub receipt_header: &'static str,
    pub receipt: String,
    slot: Option<Slot>,
}

/// A nonce reservation's outcome: this payment's (with its plan slot), or the payment that
/// holds the nonce already.
enum Reserve {
    Fresh(Option<Slot>),
    Held(Box<GatewayPayment>, Option<Slot>),
}

/// The paid step's service: built once, shared by every caller.
pub struct PaymentService {
    store: Arc<dyn Store>,
    facilitator: Option<Arc<dyn Facilitator>>,
    usage: Arc<PlanUsage>,
    settleable: Settleable,
    /// Seller webhook events (`payment.settled`).
    events: Option<Arc<crate::events::Events>>,
    /// The relayer's contract calls, where it has a key: smart wallets' signature checks and
    /// deployments, the ledger audit.
    chain: Option<Arc<dyn paygate_x402::facilitator::ChainCalls>>,
    /// The key receipts are signed with (x402 `offer-and-receipt`).
    receipt_key: Option<Arc<alloy_signer_local::PrivateKeySigner>>,
    /// Routes' signed offers, with the same key.
    offers: Option<offers::Offers>,
    /// Payers the chain said hold no code (forgeries in their name cost no further call).
    eoas: eoas::KnownEoas,
    /// The receipts signed this second for requests served without a record of their own.
    recent_receipts: recent_receipts::RecentReceipts,
}

impl PaymentService {
    /// Decodes a payment header (`version` is the header's own) and verifies it locally, for
    /// the proxy: a payment too close to its expiry passes as `expiring`, so that a retry of a
    /// payment already taken (on this node or another, before a crash) is answered by its record
    /// in [`Self::take`] instead of being refused as expired (a payment reconciliation found
    /// settled is still owed its request).
    pub fn verify_header(
        &self,
        raw: &[u8],
        version: ProtocolVersion,
        requirements: &PaymentRequirements,
        now: u64,
    ) -> Result<Verified, Refusal> {
        let json = paygate_x402::payment::header_json(raw)?;
        self.verify_header_json(&json, version, requirements, now)
    }

    /// [`Self::verify_header`] of a header already decoded to its JSON.
    pub fn verify_header_json(
        &self,
        json: &[u8],
        version: ProtocolVersion,
        requirements: &PaymentRequirements,
        now: u64,
    ) -> Result<Verified, Refusal> {
        self.check(
            PaymentPayload::from_json(json, version)?,
            requirements,
            now,
            true,
            None,
        )
    }

    /// Verifies a decoded payment against `requirements` at `now` (unix seconds): signature,
    /// payee, amount, window. Fails too when no facilitator could settle it.
    pub fn verify(
        &self,
        payment: PaymentPayload,
        requirements: &PaymentRequirements,
        now: u64,
    ) -> Result<Verified, Refusal> {
        self.check(payment, requirements, now, false, None)
    }

    /// Verifies `payment` for its scheme: `exact`, or `upto` for the facilitator at `upto`.
    fn check(
        &self,
        payment: PaymentPayload,
        requirements: &PaymentRequirements,
        now: u64,
        retry_may_expire: bool,
        upto: Option<Address>,
    ) -> Result<Verified, Refusal> {
        let _verify = paygate_x402::span!("verify").entered();
        let auth = payment.authorization()?;
        let t0 = Instant::now();
        let (expiring, signed) =
            match verify::verify_scheme(&payment, &auth, requirements, now, upto) {
                Ok(signed) => (false, signed),
                // Too late to settle: only answered by a payment already taken for it.
                Err(r) if r.is_expiry() && retry_may_expire => (true, verify::Signed::ByKey),
                Err(r) => return Err(Refusal::Rejected(r)),
            };
        // A Permit2 payer's permit to Permit2 (`eip2612GasSponsoring`) is its own, for its token.
        paygate_x402::gas_sponsoring::Eip2612Permit::checked(&payment, auth.from, now)
            .map_err(Refusal::Rejected)?;
        let verify_us = t0.elapsed().as_micros() as u64;
        if self.facilitator.is_none() {
            return Err(Refusal::NoFacilitator);
        }
        Ok(Verified {
            payment,
            auth,
            verify_us,
            expiring,
            signed,
            protocol: Default::default(),
        })
    }

    /// Asks the facilitator whether `v` would settle now (balance, nonce unused on-chain);
    /// changes nothing.
    pub async fn verify_on_chain(
        &self,
        v: &Verified,
        requirements: &PaymentRequirements,
    ) -> Result<Address, Refusal> {
        let f = self.facilitator.as_ref().ok_or(Refusal::NoFacilitator)?;
        self.vouched(v, requirements).await?;
        let req = PaymentRequest {
            payment: &v.payment,
            auth: &v.auth,
            requirements,
        };
        let verified = f
            .verify(&req)
            .instrument(paygate_x402::span!("verify.chain"));
        verified.await.map_err(|e| match e {
            FacilitatorError::Rejected(r) => Refusal::Rejected(r),
            // Verification sends nothing: a facilitator that did not answer clearly is down,
            // never "settlement pending".
            FacilitatorError::Unavailable(m)
            | FacilitatorError::Ambiguous(m)
            | FacilitatorError::Pending { message: m, .. } => {
                tracing::warn!(error = %m, "facilitator unavailable");
                Refusal::FacilitatorDown
            }
        })
    }

    /// Takes the payment for `charge`: a plan slot (so a request over the limit is never
    /// charged), the nonce reserved durably with the `Reserved` record, then settlement. A
    /// nonce already held answers by the holder's state (see [`Self::retried`]).
    pub async fn take(&self, mut v: Verified, charge: &Charge<'_>) -> Result<Paid, Refusal> {
        if self.facilitator.is_none() {
            return Err(Refusal::NoFacilitator);
        }
        if v.expiring {
            return self.expiring_retry(v, charge).await;
        }
        self.ask_wallet(&mut v, charge.requirements).await?;
        let req = charge.requirements;
        let mut record =
            GatewayPayment::reserved(charge.org_id, charge.route_id, req, &v.auth, v.verify_us);
        record.protocol = v.protocol;
        let slot = match self.reserve(&mut record, charge).await? {
            Reserve::Held(held, slot) => {
                let redeemed = self.retried(&record, *held, charge.redeliver).await?;
                return Ok(self.paid(v.payment.version(), req, redeemed, slot));
            }
            Reserve::Fresh(slot) => slot,
        };
        let preq = PaymentRequest {
            payment: &v.payment,
            auth: &v.auth,
            requirements: req,
        };
        let slot = self.settle_with_slot(&mut record, &preq, slot).await?;
        tracing::info!(payment = %record.id, settle_ms = record.settle_ms, "payment settled");
        Ok(self.paid(v.payment.version(), req, record, slot))
    }

    /// [`Self::settle_reserved`] through the facilitator, for a payment holding `slot`: given
    /// back when nothing moved; left to reconciliation when the outcome is unknown.
    async fn settle_with_slot(
        &self,
        record: &mut GatewayPayment,
        preq: &PaymentRequest<'_>,
        slot: Option<Slot>,
    ) -> Result<Option<Slot>, Refusal> {
        let facilitator = self.facilitator.as_ref().ok_or(Refusal::NoFacilitator)?;
        if let Err(e) = self
            .settle_reserved(facilitator.as_ref(), record, preq)
            .await
        {
            if let (true, Some(s)) = (e.may_land(), slot) {
                // Sent, outcome unknown: reconciliation decides the payment and its slot.
                s.leave_to_reconciliation();
            }
            return Err(Refusal::of_settlement(e, preq.auth.from));
        }
        Ok(slot)
    }

    /// Takes a plan slot for `record` and reserves its nonce durably (on a cluster the slot is
    /// taken with the reservation, in its transaction; on one node in memory, first). A nonce
    /// another payment holds answers that payment, for the caller to judge.
    async fn reserve(
        &self,
        record: &mut GatewayPayment,
        charge: &Charge<'_>,
    ) -> Result<Reserve, Refusal> {
        let in_store = charge.plan_limit.and_then(|l| self.usage.store_slot(l));
        let slot = match (charge.plan_limit, &in_store) {
            (Some(limit), None) => Some(self.plan_slot(charge.org_id, limit).await?),
            _ => None,
        };
        record.plan_slot = in_store.clone();
        let reserving = self.store.reserve_payment(record);
        match reserving
            .instrument(paygate_x402::span!("store.reserve"))
            .await
        {
            Ok(PaymentReservation::Reserved) => {}
            Ok(PaymentReservation::OverPlan) => return Err(Refusal::PlanLimit),
            Ok(PaymentReservation::Held(held)) => return Ok(Reserve::Held(held, slot)),
            // The slot, dropped, is given back.
            Err(e) => return Err(Refusal::store(&e, "could not reserve payment nonce")),
        }
        Ok(Reserve::Fresh(slot.or_else(|| {
            in_store
                .as_ref()
                .map(|s| self.usage.adopt(charge.org_id, s))
        })))
    }

    /// A payment too close to its expiry to settle: a retry of one already taken is answered
    /// by that payment's state (no new plan slot: the first attempt took it); any other is
    /// refused as expired.
    async fn expiring_retry(&self, v: Verified, charge: &Charge<'_>) -> Result<Paid, Refusal> {
        let req = charge.requirements;
        let record =
            GatewayPayment::reserved(charge.org_id, charge.route_id, req, &v.auth, v.verify_us);
        match self.store.payment_for_nonce(&record.nonce_key).await {
            Ok(Some(held)) => {
                let redeemed = self.retried(&record, held, charge.redeliver).await?;
                Ok(self.paid(v.payment.version(), req, redeemed, None))
            }
            Ok(None) => Err(Refusal::Rejected(Rejection::Expired)),
            Err(e) => Err(Refusal::store(&e, "could not read a retried payment")),
        }
    }

    /// The settled `record` as a [`Paid`], with the receipt for `version` (`transaction` is empty
    /// only for a payment reconciliation found settled, which knows the transfer happened but not
    /// its transaction).
    pub(crate) fn paid(
        &self,
        version: ProtocolVersion,
        req: &PaymentRequirements,
        record: GatewayPayment,
        slot: Option<Slot>,
    ) -> Paid {
        let network = req.network_name(version);
        let receipt = SettleResponse {
            success: true,
            error_reason: None,
            error_message: None,
            transaction: record.transaction.clone().unwrap_or_default(),
            network,
            payer: Some(record.payer.clone()),
            // `upto` says what it settled (in the token's units).
            amount: matches!(
                record.transfer,
                PaymentTransfer::Upto | PaymentTransfer::AuthCapture
            )
            .then(|| req.token_units(record.amount).to_string()),
            extra: None,
            extensions: self.signed_receipt(&record).map(|r| r.extension()),
        };
        let receipt = base64::engine::general_purpose::STANDARD
            .encode(serde_json::to_vec(&receipt).unwrap_or_default());
        Paid {
            record,
            receipt_header: version.receipt_header(),
            receipt,
            slot,
        }
    }

    /// The request a payment was taken for has been answered: the plan slot is kept and
    /// stored, and the origin's status (`None`: the origin never answered) recorded on the
    /// payment, off the response path.
    pub fn delivered(&self, p: Paid, upstream_status: Option<u16>) {
        if let Some(slot) = p.slot {
            let usage = self.usage.clone();
            tokio::spawn(async move { usage.commit(slot).await });
        }
        let mut record = p.record;
        record.upstream_status = upstream_status;
        record.updated_at = paygate_domain::now_rfc3339();
        let store = self.store.clone();
        tokio::spawn(async move {
            if let Err(e) = store.update_payment(&record).await {
                tracing::warn!(error = %e, payment = %record.id, "could not record upstream status");
            }
        });
    }

    async fn plan_slot(&self, org_id: &Arc<str>, limit: u64) -> Result<Slot, Refusal> {
        match self.usage.try_take(org_id, limit).await {
            Ok(Some(slot)) => Ok(slot),
            Ok(None) => Err(Refusal::PlanLimit),
            Err(e) => Err(Refusal::store(&e, "plan usage unavailable")),
        }
    }

    /// A verified payment whose nonce `held` already reserved: the same signed payment again.
    /// Still open (being settled, or left `RESERVED`/`UNKNOWN` by a crash or a timeout):
    /// [`Refusal::StillSettling`], so the client retries later instead of paying twice. Settled
    /// by reconciliation, so never served: this retry claims it (at most one does). Settled and
    /// never answered by an origin that deduplicates (`redeliver`): forwarded again under the
    /// same payment id. Anything else is a replay.
    pub(crate) async fn retried(
        &self,
        retry: &GatewayPayment,
        held: GatewayPayment,
        redeliver: bool,
    ) -> Result<GatewayPayment, Refusal> {
        if held.status.is_open() {
            return Err(Refusal::still_open(&held));
        }
        if redeliver && held.redeliverable_by(retry) {
            tracing::info!(payment = %held.id, "settled payment forwarded again to a deduplicating origin");
            return Ok(held);
        }
        if !held.redeemable_by(retry) {
            return Err(Refusal::Rejected(Rejection::NonceReplay));
        }
        let now = paygate_domain::now_rfc3339();
        match self.store.claim_redemption(&held.id, retry, &now).await {
            Ok(Some(claimed)) => {
                tracing::info!(payment = %claimed.id, "reconciled payment redeemed by its retry");
                Ok(claimed)
            }
            Ok(None) => Err(Refusal::Rejected(Rejection::NonceReplay)),
            Err(e) => Err(Refusal::store(&e, "could not claim a reconciled payment")),
        }
    }

    /// Settles a payment whose nonce `record` has reserved, and stores the outcome on it:
    /// `Settled` with the transaction; `Failed` with the nonce freed when nothing moved (so the
    /// same signed payment can be retried once the cause is fixed) or kept when the chain says
    /// the authorization was used; `Unknown` (kept reserved, reconciled later) when the
    /// transfer may still land. A failure to store the outcome is logged: the chain stays the
    /// source of truth and reconciliation re-reads it.
    async fn settle_reserved(
        &self,
        facilitator: &dyn Facilitator,
        record: &mut GatewayPayment,
        req: &PaymentRequest<'_>,
    ) -> Result<(), FacilitatorError> {
        let t = Instant::now();
        let result = facilitator
            .settle(req)
            .instrument(paygate_x402::span!("settle"))
            .await;
        record.settle_ms = Some(t.elapsed().as_millis() as u64);
        record.updated_at = paygate_domain::now_rfc3339();
        let store = self.store.as_ref();
        let record_span = paygate_x402::span!("store.record");
        let saved = async {
            match &result {
                Ok(s) => {
                    record.status = PaymentStatus::Settled;
                    record.transaction = Some(format!("{:#x}", s.transaction));
                    let saved = store.update_payment(record).await;
                    if let (Ok(()), Some(events)) = (&saved, &self.events) {
                        events.payment_settled(record);
                    }
                    saved
                }
                Err(FacilitatorError::Rejected(r)) => {
                    record.status = PaymentStatus::Failed;
                    record.failure = Some(r.reason().to_string());
                    if *r == Rejection::NonceReplay {
                        store.update_payment(record).await
                    } else {
                        store.release_payment(record).await
                    }
                }
                Err(FacilitatorError::Unavailable(m)) => {
                    tracing::warn!(payment = %record.id, error = %m, "facilitator unavailable");
                    record.status = PaymentStatus::Failed;
                    record.failure = Some(format!("facilitator unavailable: {m}"));
                    store.release_payment(record).await
                }
                Err(e @ (FacilitatorError::Ambiguous(_) | FacilitatorError::Pending { .. })) => {
                    tracing::warn!(payment = %record.id, error = %e, "settlement outcome unknown");
                    record.status = PaymentStatus::Unknown;
                    record.failure = Some(e.to_string());
                    if let FacilitatorError::Pending { transaction, .. } = e {
                        // Sent: the transaction the retry and the ledger are told of.
                        record.transaction = Some(format!("{transaction:#x}"));
                    }
                    store.update_payment(record).await
                }
            }
        }
        .instrument(record_span)
        .await;
        if let Err(e) = saved {
            tracing::error!(error = %e, payment = %record.id, "could not record settlement outcome");
        }
        result.map(|_| ())
    }
}

pub mod audit;
mod build;
pub mod ids;
mod offers;
mod receipts;
mod recent_receipts;
pub mod reconcile;
mod refusal;
pub mod reply;
pub use refusal::{Refusal, Stop};
mod eoas;
pub mod for_servers;
mod refund;
pub mod registry;
#[cfg(test)]
mod tests;
mod wallets;
pub mod way;
pub mod ways;
pub use refund::{RefundError, Refunded};
