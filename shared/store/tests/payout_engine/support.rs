//! The payout engine tests' fixtures: the scripted provider, the stores, records and bodies.

use async_trait::async_trait;
use paygate_payouts::engine::{NewPayout, PayoutEngine, PayoutObserver, PayoutOrder};
use paygate_payouts::money::QuoteBreakdown;
use paygate_payouts::provider::{
    PayoutProvider, PayoutRequest, ProviderError, ProviderPayout, ProviderQuote,
};
use paygate_payouts::store::PayoutStore;
use paygate_payouts::{Beneficiary, Currency, PayIdempotency, Payout, PayoutStatus, Quote};
use paygate_store::postgres::PgStore;
use paygate_store::testing::PgCluster;
use paygate_store::SledStore;
use paygate_x402::money::UsdcAmount;
use rust_decimal::Decimal;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

/// Answers `create_payout` with the scripted errors first, then by making (or finding) the
/// payout of the reference. With a gate, each call waits for a permit.
pub(crate) struct Scripted {
    pub(crate) errors: Mutex<VecDeque<ProviderError>>,
    pub(crate) made: Mutex<HashMap<String, String>>,
    pub(crate) calls: AtomicUsize,
    pub(crate) gate: Option<Arc<Semaphore>>,
    pub(crate) entered: Semaphore,
}

impl Scripted {
    pub(crate) fn new(errors: Vec<ProviderError>, gate: Option<Arc<Semaphore>>) -> Self {
        Self {
            errors: Mutex::new(errors.into()),
            made: Mutex::default(),
            calls: AtomicUsize::new(0),
            gate,
            entered: Semaphore::new(0),
        }
    }

    pub(crate) fn made(&self) -> usize {
        self.made.lock().unwrap().len()
    }
}

#[async_trait]
impl PayoutProvider for Scripted {
    async fn quote(
        &self,
        _currency: Currency,
        _amount: UsdcAmount,
    ) -> Result<ProviderQuote, ProviderError> {
        Err(ProviderError::Unavailable("not scripted".into()))
    }
    async fn create_payout(&self, req: &PayoutRequest) -> Result<ProviderPayout, ProviderError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.entered.add_permits(1);
        if let Some(gate) = &self.gate {
            gate.acquire().await.expect("gate open").forget();
        }
        if let Some(e) = self.errors.lock().unwrap().pop_front() {
            return Err(e);
        }
        let mut made = self.made.lock().unwrap();
        let n = made.len();
        let id = made
            .entry(req.reference.clone())
            .or_insert_with(|| format!("cpn_{n}"))
            .clone();
        Ok(ProviderPayout {
            id,
            reference: req.reference.clone(),
            status: "pending".into(),
        })
    }
}

#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Sled,
    Postgres,
}

/// What keeps a store alive for the test (its temp dir, its cluster).
pub(crate) type Keep = Box<dyn std::any::Any + Send + Sync>;

pub(crate) async fn store(kind: Kind) -> (Arc<dyn PayoutStore>, Keep) {
    match kind {
        Kind::Sled => {
            let dir = tempfile::tempdir().unwrap();
            let s = SledStore::open(dir.path()).unwrap();
            (Arc::new(s), Box::new(dir))
        }
        Kind::Postgres => {
            let cluster = PgCluster::start();
            let s = PgStore::connect_lazy(&PgCluster::settings(&cluster.url())).unwrap();
            s.migrate().await.unwrap();
            (Arc::new(s), Box::new(cluster))
        }
    }
}

/// The status changes the engine told of, in order (what becomes `payout.updated`).
#[derive(Default)]
pub(crate) struct Told(Mutex<Vec<(String, PayoutStatus)>>);

#[async_trait]
impl PayoutObserver for Told {
    async fn changed(&self, payout: &Payout) {
        self.0
            .lock()
            .unwrap()
            .push((payout.id.clone(), payout.status));
    }
}

impl Told {
    pub(crate) fn of(&self, id: &str) -> Vec<PayoutStatus> {
        let told = self.0.lock().unwrap();
        told.iter()
            .filter(|(p, _)| p == id)
            .map(|(_, s)| *s)
            .collect()
    }
}

pub(crate) struct Fixture {
    pub(crate) _keep: Keep,
    pub(crate) store: Arc<dyn PayoutStore>,
    pub(crate) provider: Arc<Scripted>,
    pub(crate) engine: PayoutEngine,
    pub(crate) told: Arc<Told>,
}

impl Fixture {
    pub(crate) async fn new(kind: Kind, provider: Scripted) -> Self {
        let (store, keep) = store(kind).await;
        let provider = Arc::new(provider);
        let p: Arc<dyn PayoutProvider> = provider.clone();
        let told = Arc::new(Told::default());
        let engine = PayoutEngine::new(store.clone(), Some(p)).with_observer(Some(told.clone()));
        Self {
            _keep: keep,
            store,
            provider,
            engine,
            told,
        }
    }

    /// A stored quote of 100 USDC on `org_1`'s corridor `cor_1`, expiring at `expires_at_unix`.
    pub(crate) async fn quote(&self, expires_at_unix: i64) -> Quote {
        let breakdown =
            QuoteBreakdown::compute(UsdcAmount(100_000_000), 100, UsdcAmount(0), Decimal::ONE)
                .unwrap();
        let quote = Quote {
            id: paygate_domain::ids::new_id("qt"),
            org_id: "org_1".into(),
            corridor_id: "cor_1".into(),
            provider_quote_id: "pq_1".into(),
            dest_currency: Currency::Brl,
            breakdown,
            expires_at_unix,
            created_at: paygate_domain::now_rfc3339(),
            used_by: None,
            funding_address: None,
            encryption_key: None,
        };
        self.store.put_quote(&quote).await.unwrap();
        quote
    }

    /// An order of `quote`'s amount under `key`, as the pay handler hands it over.
    pub(crate) fn order(&self, quote: &Quote, key: &str, fingerprint: &str) -> PayoutOrder {
        PayoutOrder {
            org_id: "org_1".into(),
            corridor_id: "cor_1".into(),
            dest_currency: Currency::Brl,
            key: key.into(),
            fingerprint: fingerprint.into(),
            quote_id: quote.id.clone(),
            amount: quote.breakdown.amount,
            from_address: "0x0000000000000000000000000000000000000001".into(),
            beneficiary: beneficiary(),
        }
    }

    /// A stored quote and a validated payout request using it under `key`.
    pub(crate) async fn request(&self, key: &str, fingerprint: &str) -> NewPayout {
        let quote = self.quote(i64::MAX).await;
        let breakdown = quote.breakdown.clone();
        let payout = Payout {
            id: paygate_domain::ids::new_id("po"),
            org_id: "org_1".into(),
            corridor_id: "cor_1".into(),
            quote_id: quote.id.clone(),
            provider_quote_id: quote.provider_quote_id.clone(),
            idempotency_key: key.into(),
            from_address: "0x0000000000000000000000000000000000000001".into(),
            dest_currency: Currency::Brl,
            breakdown,
            beneficiary: beneficiary(),
            status: PayoutStatus::Initiating,
            cpn_payment_id: None,
            funding: None,
            events: Vec::new(),
            encryption_key: None,
            rfi: None,
            failure_code: None,
            failure_message: None,
            created_at: paygate_domain::now_rfc3339(),
            updated_at: paygate_domain::now_rfc3339(),
        };
        let key = PayIdempotency {
            org_id: "org_1".into(),
            key: key.into(),
            fingerprint: fingerprint.into(),
            payment_id: payout.id.clone(),
            response: None,
            created_at_unix: paygate_domain::unix_now() as i64,
        };
        NewPayout { key, payout }
    }

    /// Whether `org_1` never used `key`.
    pub(crate) async fn key_unused(&self, key: &str) -> bool {
        self.engine
            .repeat("org_1", key, "fp")
            .await
            .unwrap()
            .is_none()
    }

    pub(crate) async fn status(&self, id: &str) -> PayoutStatus {
        self.store.get_payout(id).await.unwrap().unwrap().status
    }
}

pub(crate) fn beneficiary() -> Beneficiary {
    Beneficiary::bank_account("Ana Souza", "Banco", "12345678", Currency::Brl)
}

pub(crate) fn ok() -> Scripted {
    Scripted::new(Vec::new(), None)
}

/// A `payments.payment_completed` webhook body for the provider payout `cpn` (SPEC.md 6.2).
pub(crate) fn completed(cpn: &str) -> Vec<u8> {
    serde_json::json!({
        "type": "payments.payment_completed", "clientId": "c1", "notificationType": "payments",
        "version": 1, "customAttributes": {"clientId": "c1"},
        "payment": {"id": cpn, "type": "payment", "status": "completed",
                    "amount": {"amount": "99.00", "currency": "BRL"},
                    "updateDate": "2026-11-23T00:00:00Z"}
    })
    .to_string()
    .into_bytes()
}
