//! Every decision of the payment service, on a real sled store in a temp dir with real signed
//! payments. The facilitator is the trait's seam: a scripted one answers each settlement with
//! the outcome a test names (the chain itself is exercised end to end in `tests/`).

use super::*;
use alloy_primitives::B256;
use alloy_signer_local::PrivateKeySigner;
use async_trait::async_trait;
use paygate_domain::error::ErrorCode;
use paygate_store::SledStore;
use paygate_x402::facilitator::{Settlement, SupportedKind};
use paygate_x402::money::UsdcAmount;
use paygate_x402::network::{builtin_networks, Networks};
use paygate_x402::payment::DecodeError;
use paygate_x402::sign;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use tokio::sync::Semaphore;

/// Settles with the scripted outcomes in order (success once the script is empty); with a
/// gate, each settlement waits for a permit, so a test can hold one open.
struct Scripted {
    outcomes: Mutex<VecDeque<Result<Settlement, FacilitatorError>>>,
    /// Answers to `verify`, in order (the payer once the script is empty).
    verdicts: Mutex<VecDeque<FacilitatorError>>,
    settles: AtomicUsize,
    gate: Option<Arc<Semaphore>>,
    entered: Arc<Semaphore>,
}

impl Default for Scripted {
    fn default() -> Self {
        Self {
            outcomes: Mutex::default(),
            verdicts: Mutex::default(),
            settles: AtomicUsize::new(0),
            gate: None,
            entered: Arc::new(Semaphore::new(0)),
        }
    }
}

impl Scripted {
    fn with(outcomes: Vec<Result<Settlement, FacilitatorError>>) -> Self {
        Self {
            outcomes: Mutex::new(outcomes.into()),
            ..Self::default()
        }
    }
}

#[async_trait]
impl Facilitator for Scripted {
    async fn verify(&self, req: &PaymentRequest<'_>) -> Result<Address, FacilitatorError> {
        match self.verdicts.lock().unwrap().pop_front() {
            Some(e) => Err(e),
            None => Ok(req.auth.from),
        }
    }
    async fn settle(&self, req: &PaymentRequest<'_>) -> Result<Settlement, FacilitatorError> {
        self.settles.fetch_add(1, Ordering::SeqCst);
        self.entered.add_permits(1);
        if let Some(gate) = &self.gate {
            gate.acquire().await.expect("gate open").forget();
        }
        let next = self.outcomes.lock().unwrap().pop_front();
        next.unwrap_or(Ok(Settlement {
            transaction: B256::repeat_byte(0xab),
            payer: req.auth.from,
        }))
    }
    async fn supported(&self) -> Result<Vec<SupportedKind>, FacilitatorError> {
        Ok(Vec::new())
    }
    fn url(&self) -> String {
        "scripted".into()
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    facilitator: Arc<Scripted>,
    service: Arc<PaymentService>,
    req: PaymentRequirements,
    org: Arc<str>,
}

impl Fixture {
    fn new(facilitator: Scripted) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
        let facilitator = Arc::new(facilitator);
        let usage = Arc::new(PlanUsage::new(store.clone()));
        let f: Arc<dyn Facilitator> = facilitator.clone();
        let networks = Networks::from_config(&builtin_networks());
        let service = Arc::new(PaymentService::new(
            store.clone(),
            Some(f),
            usage,
            networks.clone(),
        ));
        let req = PaymentRequirements {
            network: networks.resolve("base-sepolia").unwrap().clone(),
            amount: UsdcAmount(10_000),
            pay_to: Address::repeat_byte(9),
            resource: "http://127.0.0.1/gateway/acme/echo".into(),
            description: String::new(),
            mime_type: String::new(),
            max_timeout_seconds: 60,
            token: Default::default(),
        };
        Self {
            _dir: dir,
            store,
            facilitator,
            service,
            req,
            org: Arc::from("org_1"),
        }
    }

    /// A fresh signed v2 payment header for the fixture's route.
    fn header(&self) -> String {
        sign::payment_header(
            &self.req,
            &PrivateKeySigner::random(),
            paygate_domain::unix_now(),
        )
        .unwrap()
    }

    fn charge(&self, plan_limit: Option<u64>) -> Charge<'_> {
        Charge {
            org_id: &self.org,
            route_id: "rt_1",
            requirements: &self.req,
            plan_limit,
            redeliver: false,
        }
    }

    fn verified(&self, header: &str) -> Result<Verified, Refusal> {
        self.service.verify_header(
            header.as_bytes(),
            ProtocolVersion::V2,
            &self.req,
            paygate_domain::unix_now(),
        )
    }

    async fn pay(&self, header: &str, plan_limit: Option<u64>) -> Result<Paid, Refusal> {
        let v = self.verified(header)?;
        self.service.take(v, &self.charge(plan_limit)).await
    }

    /// `header` paid while the facilitator lost track of it (`504`), then found settled by
    /// reconciliation (the record as it leaves it).
    async fn reconciled_as_settled(&self, header: &str) -> GatewayPayment {
        assert_eq!(
            self.pay(header, Some(0)).await.err(),
            Some(Refusal::Pending)
        );
        let mut held = self.holder(header).await.unwrap();
        held.status = PaymentStatus::Settled;
        held.settled_by_reconciliation = true;
        self.store.update_payment(&held).await.unwrap();
        held
    }

    /// The payment holding `header`'s nonce, if any.
    async fn holder(&self, header: &str) -> Option<GatewayPayment> {
        let p = PaymentPayload::decode(header.as_bytes(), ProtocolVersion::V2).unwrap();
        let key = paygate_domain::model::nonce_key(
            self.req.network.config.chain_id,
            self.req.network.config.asset,
            &p.authorization().unwrap(),
        );
        self.store.payment_for_nonce(&key).await.unwrap()
    }
}

fn settled() -> Scripted {
    Scripted::default()
}

#[tokio::test]
async fn an_undecodable_header_is_invalid_payment_and_stores_nothing() {
    let f = Fixture::new(settled());
    let r = f.pay("not base64 at all", None).await.err().unwrap();
    assert!(matches!(r, Refusal::Malformed(DecodeError::Base64)));
    assert_eq!(r.code(), ErrorCode::InvalidPayment);
    assert_eq!(r.code().status(), 400);
    assert_eq!(r.x402_reason(), Some("invalid_payload"));
    assert_eq!(r.rejection(), None);
    assert_eq!(f.facilitator.settles.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_payment_for_another_price_is_rejected_with_the_challenge_reason() {
    let f = Fixture::new(settled());
    let mut cheaper = f.req.clone();
    cheaper.amount = UsdcAmount(1);
    // `accepted` echoes the route's requirement; the signed value is another.
    let offered = serde_json::to_value(f.req.to_v2()).unwrap();
    let header = sign::payment_header_echoing(
        &cheaper,
        offered,
        &PrivateKeySigner::random(),
        paygate_domain::unix_now(),
    )
    .unwrap();
    let r = f.pay(&header, Some(0)).await.err().unwrap();
    assert_eq!(r, Refusal::Rejected(Rejection::WrongAmount));
    assert_eq!(
        (r.code(), r.code().status()),
        (ErrorCode::PaymentRejected, 402)
    );
    assert_eq!(r.rejection(), Some(Rejection::WrongAmount));
    assert!(f.holder(&header).await.is_none(), "nothing reserved");
    assert_eq!(f.facilitator.settles.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn without_a_facilitator_a_valid_payment_is_503_before_anything_is_reserved() {
    let f = Fixture::new(settled());
    let service = PaymentService::new(
        f.store.clone(),
        None,
        Arc::new(PlanUsage::new(f.store.clone())),
        Networks::from_config(&builtin_networks()),
    );
    let header = f.header();
    let r = service
        .verify_header(
            header.as_bytes(),
            ProtocolVersion::V2,
            &f.req,
            paygate_domain::unix_now(),
        )
        .err()
        .unwrap();
    assert_eq!(r, Refusal::NoFacilitator);
    assert_eq!(r.code().status(), 503);
    assert!(f.holder(&header).await.is_none());
}

#[tokio::test]
async fn a_settled_payment_carries_its_receipt_and_its_replay_is_nonce_replay() {
    let f = Fixture::new(settled());
    let header = f.header();
    let paid = f.pay(&header, Some(0)).await.unwrap();
    assert_eq!(paid.receipt_header, "payment-response");
    let receipt: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(&paid.receipt)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(receipt["success"], true);
    assert_eq!(receipt["network"], "eip155:84532");
    assert_eq!(
        receipt["transaction"],
        format!("{:#x}", B256::repeat_byte(0xab))
    );
    let stored = f.store.get_payment(&paid.record.id).await.unwrap().unwrap();
    assert_eq!(stored.status, PaymentStatus::Settled);
    assert_eq!(stored.route_id, "rt_1");

    let r = f.pay(&header, Some(0)).await.err().unwrap();
    assert_eq!(r, Refusal::Rejected(Rejection::NonceReplay));
    assert_eq!((r.code(), r.code().status()), (ErrorCode::NonceReplay, 402));
    assert_eq!(r.x402_reason(), Some("nonce_already_used"));
    assert_eq!(f.facilitator.settles.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn over_the_plan_limit_nothing_is_reserved_and_a_refused_payment_gives_its_slot_back() {
    let f = Fixture::new(Scripted::with(vec![Err(FacilitatorError::Unavailable(
        "down".into(),
    ))]));
    // The first payment fails at the facilitator: its slot comes back.
    let r = f.pay(&f.header(), Some(1)).await.err().unwrap();
    assert_eq!(r, Refusal::FacilitatorDown);
    let first = f.pay(&f.header(), Some(1)).await.unwrap();
    let over = f.header();
    let r = f.pay(&over, Some(1)).await.err().unwrap();
    assert_eq!(r, Refusal::PlanLimit);
    assert_eq!(
        (r.code(), r.code().status()),
        (ErrorCode::PlanLimitExceeded, 402)
    );
    assert_eq!(r.rejection(), None, "paying again cannot help");
    assert!(
        f.holder(&over).await.is_none(),
        "never reserved, never charged"
    );
    assert_eq!(f.facilitator.settles.load(Ordering::SeqCst), 2);

    // Delivered: the slot is kept and its count stored.
    f.service.delivered(first, Some(200));
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    let month = crate::usage::current_month();
    while f.store.plan_usage(&f.org, &month).await.unwrap() != 1 {
        assert!(Instant::now() < deadline, "plan usage never stored");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn delivered_records_the_upstream_status_on_the_payment() {
    let f = Fixture::new(settled());
    let paid = f.pay(&f.header(), Some(0)).await.unwrap();
    let id = paid.record.id.clone();
    f.service.delivered(paid, Some(201));
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let p = f.store.get_payment(&id).await.unwrap().unwrap();
        if p.upstream_status == Some(201) {
            break;
        }
        assert!(Instant::now() < deadline, "upstream status never recorded");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn an_unreachable_facilitator_frees_the_nonce_so_the_same_payment_can_be_retried() {
    let f = Fixture::new(Scripted::with(vec![Err(FacilitatorError::Unavailable(
        "connection refused".into(),
    ))]));
    let header = f.header();
    let r = f.pay(&header, None).await.err().unwrap();
    assert_eq!(
        (r.code(), r.code().status()),
        (ErrorCode::FacilitatorUnavailable, 503)
    );
    assert!(f.holder(&header).await.is_none(), "nonce freed");
    assert!(f.pay(&header, None).await.is_ok());
}

#[tokio::test]
async fn a_refused_transfer_frees_the_nonce_but_a_used_authorization_keeps_it() {
    let f = Fixture::new(Scripted::with(vec![
        Err(FacilitatorError::Rejected(Rejection::InsufficientFunds)),
        Err(FacilitatorError::Rejected(Rejection::NonceReplay)),
    ]));
    let poor = f.header();
    let r = f.pay(&poor, None).await.err().unwrap();
    assert_eq!(r, Refusal::Rejected(Rejection::InsufficientFunds));
    assert_eq!(r.x402_reason(), Some("insufficient_funds"));
    assert!(f.holder(&poor).await.is_none());

    let used = f.header();
    let r = f.pay(&used, None).await.err().unwrap();
    assert_eq!(r.code(), ErrorCode::NonceReplay);
    let held = f.holder(&used).await.expect("nonce kept");
    assert_eq!(held.status, PaymentStatus::Failed);
}

#[tokio::test]
async fn an_ambiguous_settlement_is_504_and_its_retry_is_told_to_wait_not_to_pay_again() {
    let f = Fixture::new(Scripted::with(vec![Err(FacilitatorError::Ambiguous(
        "timed out after broadcast".into(),
    ))]));
    let header = f.header();
    let r = f.pay(&header, Some(0)).await.err().unwrap();
    assert_eq!(r, Refusal::Pending);
    assert_eq!(
        (r.code(), r.code().status()),
        (ErrorCode::SettlementPending, 504)
    );
    assert_eq!(r.x402_reason(), None);
    let held = f.holder(&header).await.expect("nonce kept");
    assert_eq!(held.status, PaymentStatus::Unknown);

    let r = f.pay(&header, Some(0)).await.err().unwrap();
    assert_eq!(r, Refusal::StillSettling);
    assert_eq!(r.code().status(), 504);
    assert_eq!(f.facilitator.settles.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn concurrent_copies_of_one_payment_settle_once_and_the_rest_wait() {
    let gate = Arc::new(Semaphore::new(0));
    let f = Fixture::new(Scripted {
        gate: Some(gate.clone()),
        ..Scripted::default()
    });
    let f = Arc::new(f);
    let header = f.header();
    let first = {
        let (f, header) = (f.clone(), header.clone());
        tokio::spawn(async move { f.pay(&header, Some(0)).await.map(|p| p.record.id) })
    };
    // The first copy is inside the facilitator, its nonce reserved.
    f.facilitator.entered.acquire().await.unwrap().forget();
    let copies: Vec<_> = (0..9)
        .map(|_| {
            let (f, header) = (f.clone(), header.clone());
            tokio::spawn(async move { f.pay(&header, Some(0)).await.err() })
        })
        .collect();
    for c in copies {
        assert_eq!(c.await.unwrap(), Some(Refusal::StillSettling));
    }
    gate.add_permits(1);
    assert!(first.await.unwrap().is_ok());
    assert_eq!(f.facilitator.settles.load(Ordering::SeqCst), 1);
    let r = f.pay(&header, Some(0)).await.err().unwrap();
    assert_eq!(r, Refusal::Rejected(Rejection::NonceReplay));
}

#[tokio::test]
async fn a_payment_reconciliation_settled_is_served_to_exactly_one_retry() {
    let f = Arc::new(Fixture::new(Scripted::with(vec![Err(
        FacilitatorError::Ambiguous("lost receipt".into()),
    )])));
    let header = f.header();
    let held = f.reconciled_as_settled(&header).await;

    let retries: Vec<_> = (0..8)
        .map(|_| {
            let (f, header) = (f.clone(), header.clone());
            tokio::spawn(async move { f.pay(&header, Some(0)).await })
        })
        .collect();
    let mut served = Vec::new();
    for r in retries {
        match r.await.unwrap() {
            Ok(p) => served.push(p.record.id),
            Err(r) => assert_eq!(r, Refusal::Rejected(Rejection::NonceReplay)),
        }
    }
    assert_eq!(served, vec![held.id.clone()], "exactly one retry is served");
    assert_eq!(f.facilitator.settles.load(Ordering::SeqCst), 1);
    let stored = f.store.get_payment(&held.id).await.unwrap().unwrap();
    assert!(stored.redeemed_at.is_some());
}

#[tokio::test]
async fn a_retry_for_another_route_never_redeems_a_reconciled_payment() {
    let f = Fixture::new(Scripted::with(vec![Err(FacilitatorError::Ambiguous(
        "lost receipt".into(),
    ))]));
    let header = f.header();
    f.reconciled_as_settled(&header).await;
    let v = f.verified(&header).unwrap();
    let other = Charge {
        route_id: "rt_other",
        ..f.charge(Some(0))
    };
    let r = f.service.take(v, &other).await.err().unwrap();
    assert_eq!(r, Refusal::Rejected(Rejection::NonceReplay));
}

#[tokio::test]
async fn verify_on_chain_maps_the_facilitator_outcome() {
    let f = Fixture::new(Scripted {
        verdicts: Mutex::new(
            vec![
                FacilitatorError::Rejected(Rejection::InsufficientFunds),
                FacilitatorError::Unavailable("rpc down".into()),
                FacilitatorError::Ambiguous("timeout".into()),
            ]
            .into(),
        ),
        ..Scripted::default()
    });
    let header = f.header();
    let v = f.verified(&header).unwrap();
    let r = f.service.verify_on_chain(&v, &f.req).await.unwrap_err();
    assert_eq!(r, Refusal::Rejected(Rejection::InsufficientFunds));
    assert_eq!(r.x402_reason(), Some("insufficient_funds"));
    for _ in 0..2 {
        let r = f.service.verify_on_chain(&v, &f.req).await.unwrap_err();
        assert_eq!(r, Refusal::FacilitatorDown);
        assert_eq!(
            r.x402_reason(),
            None,
            "an outage is an error, not a verdict"
        );
    }
    assert_eq!(f.service.verify_on_chain(&v, &f.req).await, Ok(v.payer()));
    assert!(
        f.holder(&header).await.is_none(),
        "verification changes nothing"
    );
}

#[tokio::test]
async fn an_expired_retry_of_a_payment_taken_is_answered_by_its_record_and_nothing_else_passes() {
    let f = Fixture::new(Scripted::with(vec![Err(FacilitatorError::Ambiguous(
        "lost receipt".into(),
    ))]));
    let late = paygate_domain::unix_now() + 3600;
    let verify_late = |header: &str| {
        f.service
            .verify_header(header.as_bytes(), ProtocolVersion::V2, &f.req, late)
    };
    // A payment reconciliation found settled, retried after its authorization expired (the
    // node that took it died; reconciliation decided it late): still owed its request.
    let header = f.header();
    let held = f.reconciled_as_settled(&header).await;
    let v = verify_late(&header).unwrap();
    let paid = f.service.take(v, &f.charge(Some(0))).await.unwrap();
    assert_eq!(paid.record.id, held.id);
    let v = verify_late(&header).unwrap();
    let r = f.service.take(v, &f.charge(Some(0))).await.err();
    assert_eq!(r, Some(Refusal::Rejected(Rejection::NonceReplay)));
    // A new payment that late is refused as expired, and nothing is stored.
    let fresh = f.header();
    let v = verify_late(&fresh).unwrap();
    let r = f.service.take(v, &f.charge(Some(0))).await.err();
    assert_eq!(r, Some(Refusal::Rejected(Rejection::Expired)));
    assert!(f.holder(&fresh).await.is_none());
    // The facilitator API's verification keeps refusing it outright.
    let payload = PaymentPayload::decode(fresh.as_bytes(), ProtocolVersion::V2).unwrap();
    let r = f.service.verify(payload, &f.req, late).err();
    assert_eq!(r, Some(Refusal::Rejected(Rejection::Expired)));
    assert_eq!(f.facilitator.settles.load(Ordering::SeqCst), 1);
}

mod wallets;
