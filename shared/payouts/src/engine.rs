//! The exactly-once payout engine, apart from any HTTP handler. A payout is exactly-once because
//! (1) the `Idempotency-Key`, the quote's use and the payout record are written in one durable
//! transaction *before* the provider is called, (2) the provider is given our payout id as its
//! idempotency reference, so calling it again (after a crash, a timeout, a retry) returns the
//! payout it already made, and (3) only one task drives a given payout at a time in this process
//! ([`Claims`]). Webhook events are applied here too, and kept ones adopted once their payout is
//! known; [`PayoutEngine::reconcile`] finishes what a crash or an outage left mid-way.

use super::provider::{FundingWire, PayoutProvider, PayoutRequest, ProviderError};
use super::webhook::ProviderEvent;
use super::{Beneficiary, Currency, PayIdempotency, Payout, PayoutStatus};
use crate::funding::{FundingError, PayoutFunding};
use crate::store::{BeginPayout, EventOutcome, PayoutStore};
use paygate_domain::ErrorCode;
use paygate_domain::StoreError;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// Why a payout request was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum PayoutError {
    #[error("no payout provider is configured on this server")]
    NoProvider,
    #[error("a payout with this Idempotency-Key is still in flight; retry shortly")]
    InFlight,
    #[error("Idempotency-Key was already used with a different request")]
    KeyReused,
    #[error("the quote was already used; fetch a fresh quote")]
    QuoteUsed,
    #[error("quoteId is not a quote of this corridor")]
    UnknownQuote,
    #[error("the quote has expired; fetch a fresh quote")]
    QuoteExpired,
    #[error("amountUSDC must equal the quoted amount")]
    AmountMismatch,
    /// The payout wallet cannot cover the USDC the provider is to receive: nothing was signed.
    #[error(
        "the payout wallet {wallet} holds {have} USDC, less than the {need} USDC this payout \
         sends the provider; fund it (GET /api/payout-wallet) and retry"
    )]
    InsufficientFunds {
        wallet: String,
        have: String,
        need: String,
    },
    /// With on-chain funding the USDC comes from the organisation's payout wallet.
    #[error("fromAddress must be this organisation's payout wallet {0} (GET /api/payout-wallet)")]
    NotPayoutWallet(String),
    /// The chain could not be read before anything was signed: nothing changed.
    #[error("the payout wallet's balance could not be read: {0}; retry later")]
    FundingUnavailable(String),
    /// The provider refused: the payout is `FAILED` and the key free again.
    #[error("the payout provider refused the payout: {0}")]
    Refused(String),
    /// The provider did not answer: the payout is kept and retried.
    #[error(
        "the payout provider did not answer; the payout is kept and retried \
         (repeat the request with the same Idempotency-Key to learn the outcome)"
    )]
    Unanswered,
    #[error("storage: {0}")]
    Store(#[from] StoreError),
    /// A stored idempotency key names a payout that is not stored (never written apart).
    #[error("idempotency key without its payout")]
    Inconsistent,
}

impl PayoutError {
    pub const fn code(&self) -> ErrorCode {
        match self {
            Self::NoProvider => ErrorCode::Misconfigured,
            Self::InFlight | Self::KeyReused => ErrorCode::DuplicateRequest,
            Self::QuoteUsed => ErrorCode::QuoteAlreadyUsed,
            Self::UnknownQuote => ErrorCode::InvalidQuote,
            Self::QuoteExpired => ErrorCode::QuoteExpired,
            Self::AmountMismatch => ErrorCode::InvalidAmount,
            Self::InsufficientFunds { .. } => ErrorCode::InsufficientFunds,
            Self::NotPayoutWallet(_) => ErrorCode::BadRequest,
            Self::FundingUnavailable(_) => ErrorCode::UpstreamError,
            Self::Refused(_) | Self::Unanswered => ErrorCode::UpstreamError,
            Self::Store(_) | Self::Inconsistent => ErrorCode::InternalError,
        }
    }
}

/// The `202` body of an accepted payout, and whether it answers a repeat of the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub body: String,
    pub replayed: bool,
}

/// A pay request as its handler read it: the organisation and its own active corridor, the
/// `Idempotency-Key` and the request's fingerprint, then what the body asks (the quote, the
/// amount it states, where the USDC comes from, the beneficiary already validated for the
/// corridor's currency). [`PayoutEngine::pay`] checks the rest.
pub struct PayoutOrder {
    pub org_id: String,
    pub corridor_id: String,
    pub dest_currency: Currency,
    pub key: String,
    pub fingerprint: String,
    pub quote_id: String,
    pub amount: paygate_x402::money::UsdcAmount,
    pub from_address: String,
    pub beneficiary: Beneficiary,
}

/// The key's record and the `Initiating` payout of an order whose quote was checked.
pub struct NewPayout {
    pub key: PayIdempotency,
    pub payout: Payout,
}

/// Payouts being driven by a task of this process, by `org \0 Idempotency-Key`.
#[derive(Default)]
pub struct Claims(Mutex<HashSet<String>>);

/// Held while a payout is driven; releases the claim when dropped.
pub struct Claim {
    claims: Arc<Claims>,
    key: String,
}

impl Claims {
    fn try_claim(self: &Arc<Self>, org_id: &str, key: &str) -> Option<Claim> {
        let k = format!("{org_id}\0{key}");
        let mut set = self.0.lock().unwrap_or_else(|p| p.into_inner());
        set.insert(k.clone()).then(|| Claim {
            claims: self.clone(),
            key: k,
        })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut set = self.claims.0.lock().unwrap_or_else(|p| p.into_inner());
        set.remove(&self.key);
    }
}

/// Told of every status change the engine records, once it is recorded, whatever made it (a
/// request, the provider's webhook, a status read, reconciliation): the seller's
/// `payout.updated` webhook. Awaited, so one payout's changes are told in their order.
#[async_trait::async_trait]
pub trait PayoutObserver: Send + Sync {
    async fn changed(&self, payout: &Payout);
}

/// The engine: built once, shared by the corridor handlers and the reconciliation loop.
#[derive(Clone)]
pub struct PayoutEngine {
    pub(crate) store: Arc<dyn PayoutStore>,
    provider: Option<Arc<dyn PayoutProvider>>,
    claims: Arc<Claims>,
    /// Payout wallets and their on-chain funding (`None`: no USDC moves, as with a provider
    /// that does not ask for it).
    funding: Option<Arc<dyn PayoutFunding>>,
    observer: Option<Arc<dyn PayoutObserver>>,
}

impl PayoutEngine {
    pub fn new(store: Arc<dyn PayoutStore>, provider: Option<Arc<dyn PayoutProvider>>) -> Self {
        Self {
            store,
            provider,
            claims: Arc::default(),
            funding: None,
            observer: None,
        }
    }

    /// Tells `observer` of every status change recorded from now on.
    pub fn with_observer(mut self, observer: Option<Arc<dyn PayoutObserver>>) -> Self {
        self.observer = observer;
        self
    }

    async fn changed(&self, payout: &Payout) {
        if let Some(o) = &self.observer {
            o.changed(payout).await;
        }
    }

    /// Funds payouts on chain from each organisation's payout wallet, where the quote names a
    /// funding address.
    pub fn with_funding(mut self, funding: Option<Arc<dyn PayoutFunding>>) -> Self {
        self.funding = funding;
        self
    }

    pub fn funding(&self) -> Option<&Arc<dyn PayoutFunding>> {
        self.funding.as_ref()
    }

    pub fn provider(&self) -> Result<&Arc<dyn PayoutProvider>, PayoutError> {
        self.provider.as_ref().ok_or(PayoutError::NoProvider)
    }

    /// The answer for a key used before, if it was: its stored `202` for the same request, a
    /// payout left in flight by a crash or an outage finished now, `InFlight` while another
    /// task drives it, `KeyReused` for a different request.
    pub async fn repeat(
        &self,
        org_id: &str,
        key: &str,
        fingerprint: &str,
    ) -> Result<Option<Accepted>, PayoutError> {
        match self.store.get_pay_key(org_id, key).await? {
            Some(prev) => self.answer_used_key(prev, fingerprint).await.map(Some),
            None => Ok(None),
        }
    }

    /// A pay order: its quote must be the corridor's and the organisation's, unexpired, unused
    /// (used by this very key: answered as a repeat) and for the amount the order states; then
    /// the payout and its key's record are built and [`Self::start`]ed.
    pub async fn pay(&self, order: PayoutOrder) -> Result<Accepted, PayoutError> {
        let quote = match self.store.get_quote(&order.quote_id).await? {
            Some(q) if q.corridor_id == order.corridor_id && q.org_id == order.org_id => q,
            _ => return Err(PayoutError::UnknownQuote),
        };
        if quote.expires_at_unix < paygate_domain::unix_now() as i64 {
            return Err(PayoutError::QuoteExpired);
        }
        if quote.used_by.is_some() {
            return self
                .quote_used(&order.org_id, &order.key, &order.fingerprint)
                .await;
        }
        if order.amount != quote.breakdown.amount {
            return Err(PayoutError::AmountMismatch);
        }
        let id = paygate_domain::ids::new_id("po");
        let funding = self.funding_for(&order, &quote, &id).await?;
        let now = paygate_domain::now_rfc3339();
        let payout = Payout {
            funding,
            id,
            org_id: order.org_id.clone(),
            corridor_id: order.corridor_id,
            quote_id: quote.id,
            provider_quote_id: quote.provider_quote_id,
            idempotency_key: order.key.clone(),
            from_address: order.from_address,
            dest_currency: order.dest_currency,
            breakdown: quote.breakdown,
            beneficiary: order.beneficiary,
            status: PayoutStatus::Initiating,
            cpn_payment_id: None,
            events: Vec::new(),
            encryption_key: quote.encryption_key,
            rfi: None,
            failure_code: None,
            failure_message: None,
            created_at: now.clone(),
            updated_at: now,
        };
        let key = PayIdempotency {
            org_id: order.org_id,
            key: order.key,
            fingerprint: order.fingerprint,
            payment_id: payout.id.clone(),
            response: None,
            created_at_unix: paygate_domain::unix_now() as i64,
        };
        self.start(NewPayout { key, payout }).await
    }

    /// The funding a payout of `order` makes when its quote names a funding address and this
    /// server funds payouts: the order must come from the organisation's payout wallet, which
    /// must cover what the provider receives (checked before anything is signed or written).
    async fn funding_for(
        &self,
        order: &PayoutOrder,
        quote: &super::Quote,
        payout_id: &str,
    ) -> Result<Option<FundingWire>, PayoutError> {
        let (Some(funding), Some(to)) = (&self.funding, &quote.funding_address) else {
            return Ok(None);
        };
        let wallet = funding.wallet(&order.org_id);
        let wallet_text = wallet.to_checksum(None);
        if !order.from_address.eq_ignore_ascii_case(&wallet_text) {
            return Err(PayoutError::NotPayoutWallet(wallet_text));
        }
        let need = quote.breakdown.provider_amount();
        let have = funding
            .balance(&order.org_id)
            .await
            .map_err(|e| PayoutError::FundingUnavailable(e.to_string()))?;
        if have < need {
            return Err(PayoutError::InsufficientFunds {
                wallet: wallet_text,
                have: super::money::usdc_string(have),
                need: super::money::usdc_string(need),
            });
        }
        Ok(Some(FundingWire {
            from: wallet_text,
            to: to.clone(),
            amount: super::money::usdc_string(need),
            nonce: crate::funding::funding_nonce(payout_id).to_string(),
            transaction: None,
            returned: false,
            returned_transaction: None,
        }))
    }

    /// Makes the payout's funding on chain (once: its nonce is the payout's) before the
    /// provider is asked for it. `Err` with the payout already settled as refused, or kept.
    async fn fund(&self, payout: &mut Payout) -> Result<(), PayoutError> {
        let (Some(funding), Some(wire)) = (&self.funding, payout.funding.clone()) else {
            return Ok(());
        };
        if wire.transaction.is_some() {
            return Ok(());
        }
        let parsed = (wire.to.parse(), super::money::parse_amount(&wire.amount));
        let (Ok(to), Ok(amount)) = parsed else {
            return Err(PayoutError::Inconsistent);
        };
        match funding.fund(&payout.org_id, &payout.id, to, amount).await {
            Ok(sent) => {
                let tx = sent.map(|t| t.to_string());
                tracing::info!(payout = %payout.id, transaction = ?tx, "payout funded on chain");
                // A funding an earlier attempt made has no transaction known here.
                if let Some(f) = payout.funding.as_mut() {
                    f.transaction = tx;
                }
                Ok(())
            }
            Err(FundingError::Refused(why)) => {
                payout.status = PayoutStatus::Failed;
                payout.failure_code = Some("FUNDING_FAILED".into());
                payout.failure_message = Some(format!(
                    "the payout wallet's transfer to the provider was refused: {why}; no USDC moved"
                ));
                payout.updated_at = paygate_domain::now_rfc3339();
                self.store.refuse_payout(payout).await?;
                self.changed(payout).await;
                tracing::warn!(payout = %payout.id, reason = %why, "payout funding refused");
                Err(PayoutError::Refused(why))
            }
            Err(FundingError::Unavailable(why)) => {
                tracing::warn!(payout = %payout.id, reason = %why, "payout funding unknown; will retry");
                Err(PayoutError::Unanswered)
            }
        }
    }

    /// Starts a payout whose order was checked: reserves the key and the quote with the
    /// `Initiating` record in one durable step, then drives it to the provider.
    pub async fn start(&self, new: NewPayout) -> Result<Accepted, PayoutError> {
        let NewPayout { key, payout } = new;
        let claim = self
            .claims
            .try_claim(&key.org_id, &key.key)
            .ok_or(PayoutError::InFlight)?;
        match self.store.begin_payout(&key, &payout).await? {
            BeginPayout::Started => {}
            BeginPayout::KeyUsed(prev) => {
                drop(claim);
                return self.answer_used_key(*prev, &key.fingerprint).await;
            }
            BeginPayout::QuoteUsed => {
                drop(claim);
                return self
                    .quote_used(&key.org_id, &key.key, &key.fingerprint)
                    .await;
            }
        }
        tracing::info!(org = %payout.org_id, payout = %payout.id, "payout reserved");
        let body = self.drive(payout, claim).await?;
        Ok(Accepted {
            body,
            replayed: false,
        })
    }

    /// The quote is used: by this very key (a concurrent twin that got there first: answer as
    /// a repeat), or by another payout.
    pub async fn quote_used(
        &self,
        org_id: &str,
        key: &str,
        fingerprint: &str,
    ) -> Result<Accepted, PayoutError> {
        self.repeat(org_id, key, fingerprint)
            .await?
            .ok_or(PayoutError::QuoteUsed)
    }

    async fn answer_used_key(
        &self,
        prev: PayIdempotency,
        fingerprint: &str,
    ) -> Result<Accepted, PayoutError> {
        if prev.fingerprint != fingerprint {
            return Err(PayoutError::KeyReused);
        }
        if let Some(body) = prev.response {
            return Ok(Accepted {
                body,
                replayed: true,
            });
        }
        // In flight: here, or left over by a crash or an outage (finish it now).
        let claim = self
            .claims
            .try_claim(&prev.org_id, &prev.key)
            .ok_or(PayoutError::InFlight)?;
        let payout = self
            .store
            .get_payout(&prev.payment_id)
            .await?
            .ok_or(PayoutError::Inconsistent)?;
        let body = self.drive(payout, claim).await?;
        Ok(Accepted {
            body,
            replayed: true,
        })
    }

    /// Drives a claimed payout in a task of its own, so a client that disconnects does not cut
    /// it short.
    async fn drive(&self, payout: Payout, claim: Claim) -> Result<String, PayoutError> {
        let engine = self.clone();
        let task = tokio::spawn(async move {
            let _claim = claim;
            engine.call_provider(payout).await
        });
        task.await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "payout task failed");
            Err(PayoutError::Unanswered)
        })
    }

    /// Asks the provider for the payout (idempotent on our payout id) and records the answer.
    async fn call_provider(&self, mut payout: Payout) -> Result<String, PayoutError> {
        let provider = self.provider()?;
        self.fund(&mut payout).await?;
        let b = &payout.breakdown;
        let req = PayoutRequest {
            reference: payout.id.clone(),
            quote_id: payout.provider_quote_id.clone(),
            dest_currency: payout.dest_currency,
            source_amount: super::money::usdc_string(b.provider_amount()),
            dest_amount: super::money::minor_string(b.dest_amount),
            beneficiary: payout.beneficiary.clone(),
            funding: payout.funding.clone(),
            encryption_key: payout.encryption_key.clone(),
            originator: payout.org_id.clone(),
        };
        match provider.create_payout(&req).await {
            Ok(pp) => {
                payout.cpn_payment_id = Some(pp.id.clone());
                payout.status = PayoutStatus::Pending;
                payout.updated_at = paygate_domain::now_rfc3339();
                let body = serde_json::to_string(&super::views::PayoutAccepted::from(&payout))
                    .map_err(|_| PayoutError::Inconsistent)?;
                self.store.accept_payout(&payout, &body).await?;
                self.changed(&payout).await;
                tracing::info!(payout = %payout.id, cpn = %pp.id, "payout accepted by the provider");
                self.adopt_orphans().await;
                Ok(body)
            }
            Err(ProviderError::Rejected(why)) => {
                payout.status = PayoutStatus::Failed;
                payout.failure_code = Some("PROVIDER_REJECTED".into());
                payout.failure_message = Some(format!("the payout provider refused it: {why}"));
                payout.updated_at = paygate_domain::now_rfc3339();
                self.store.refuse_payout(&payout).await?;
                self.changed(&payout).await;
                tracing::warn!(payout = %payout.id, reason = %why, "payout refused by the provider");
                Err(PayoutError::Refused(why))
            }
            Err(ProviderError::Unavailable(why)) => {
                tracing::warn!(payout = %payout.id, reason = %why, "payout outcome unknown; will retry");
                Err(PayoutError::Unanswered)
            }
        }
    }

    /// Applies a verified webhook event, keyed by the provider's notification id when it has one
    /// (CPN keeps it across deliveries), else by its body's hash, so a repeat changes nothing.
    pub async fn apply_event(
        &self,
        event: &ProviderEvent,
        raw: &[u8],
    ) -> Result<EventOutcome, StoreError> {
        let key = match &event.notification_id {
            Some(id) => paygate_domain::apikey::sha256_hex(format!("cpn:{id}").as_bytes()),
            None => paygate_domain::apikey::sha256_hex(raw),
        };
        let outcome = self
            .store
            .apply_payout_event(&key, event, raw, &paygate_domain::now_rfc3339())
            .await?;
        tracing::info!(cpn = %event.payment_id, event = event.event_type.as_str(), outcome = ?outcome, "webhook");
        if let EventOutcome::Applied(_, payout) = &outcome {
            self.changed(payout).await;
        }
        Ok(outcome)
    }

    /// Applies kept events whose payout became known (its provider id was recorded).
    pub async fn adopt_orphans(&self) {
        let orphans = match self.store.adoptable_orphans().await {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(error = %e, "reading kept webhook events failed");
                return;
            }
        };
        for (cpn, key, raw) in orphans {
            if let Ok(event) = crate::cpn::parse_any(&raw) {
                if let Err(e) = self.apply_event(&event, &raw).await {
                    tracing::warn!(cpn = %cpn, error = %e, "kept event not applied");
                    continue;
                }
            }
            if let Err(e) = self.store.drop_orphan(&cpn, &key).await {
                tracing::warn!(cpn = %cpn, error = %e, "kept event not dropped");
            }
        }
    }

    /// One pass: drives every payout still `Initiating` that no task is driving, then applies
    /// kept events. Does nothing without a provider.
    pub async fn reconcile(&self) {
        if self.provider.is_none() {
            return;
        }
        let pending = match self.store.initiating_payouts().await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "payout reconciliation failed");
                return;
            }
        };
        for p in pending {
            let Some(claim) = self.claims.try_claim(&p.org_id, &p.idempotency_key) else {
                continue; // A request is driving it right now.
            };
            let id = p.id.clone();
            match self.drive(p, claim).await {
                Ok(_) => tracing::info!(payout = %id, "payout finished by reconciliation"),
                Err(e) => tracing::warn!(payout = %id, error = %e, "payout still unfinished"),
            }
        }
        self.adopt_orphans().await;
    }
}
