//! The payout engine's decisions (`paygate_payouts::engine`) on each real store: sled in a temp
//! dir and a throwaway PostgreSQL cluster. Here, beside the stores, since the engine's crate
//! sits below the store's. The provider is the
//! trait's seam: a scripted one that, like a real provider, makes one payout per reference and
//! answers a repeat with the payout it made (the HTTP provider against the sandbox is exercised
//! end to end in `tests/e2e/corridors.rs`).

use paygate_domain::ErrorCode;
use paygate_payouts::engine::{Accepted, PayoutEngine, PayoutError, PayoutOrder};
use paygate_payouts::provider::ProviderError;
use paygate_payouts::store::{BeginPayout, EventOutcome};
use paygate_payouts::webhook;
use paygate_payouts::PayoutStatus;
use paygate_x402::money::UsdcAmount;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::Semaphore;

mod support;
use support::*;

async fn a_payout_is_made_once_and_its_key_answers_with_the_same_body(kind: Kind) {
    let f = Fixture::new(kind, ok()).await;
    let new = f.request("k1", "fp").await;
    let id = new.payout.id.clone();
    let first = f.engine.start(new).await.unwrap();
    assert!(!first.replayed);
    let body: serde_json::Value = serde_json::from_str(&first.body).unwrap();
    assert_eq!(body["paymentId"], id.as_str());
    assert_eq!(body["cpnPaymentId"], "cpn_0");
    assert_eq!(f.status(&id).await, PayoutStatus::Pending);

    let again = f.engine.repeat("org_1", "k1", "fp").await.unwrap().unwrap();
    assert_eq!(
        again,
        Accepted {
            body: first.body,
            replayed: true
        }
    );
    let other = f.engine.repeat("org_1", "k1", "another body").await;
    assert!(matches!(other, Err(PayoutError::KeyReused)));
    assert_eq!(other.unwrap_err().code(), ErrorCode::DuplicateRequest);
    assert_eq!(f.provider.calls.load(Ordering::SeqCst), 1);
    assert!(f.key_unused("k2").await);
    assert_eq!(
        f.told.of(&id),
        [PayoutStatus::Pending],
        "a repeat tells nothing"
    );
}

async fn concurrent_requests_with_one_key_make_one_payout(kind: Kind) {
    let gate = Arc::new(Semaphore::new(0));
    let f = Arc::new(Fixture::new(kind, Scripted::new(Vec::new(), Some(gate.clone()))).await);
    let new = f.request("k1", "fp").await;
    let quote_id = new.payout.quote_id.clone();
    let first = {
        let f = f.clone();
        tokio::spawn(async move { f.engine.start(new).await })
    };
    // The first request is at the provider, its claim held.
    f.provider.entered.acquire().await.unwrap().forget();
    for _ in 0..5 {
        // A twin of the same request: another payout record for the same key and quote.
        let mut twin = f.request("k1", "fp").await;
        twin.payout.quote_id = quote_id.clone();
        twin.key.payment_id = twin.payout.id.clone();
        let r = f.engine.start(twin).await;
        assert!(matches!(r, Err(PayoutError::InFlight)), "{r:?}");
        let r = f.engine.repeat("org_1", "k1", "fp").await;
        assert!(matches!(r, Err(PayoutError::InFlight)), "{r:?}");
    }
    gate.add_permits(1);
    assert!(first.await.unwrap().is_ok());
    assert_eq!(f.provider.calls.load(Ordering::SeqCst), 1);
    assert_eq!(f.provider.made(), 1);
}

async fn a_quote_used_by_another_key_is_refused(kind: Kind) {
    let f = Fixture::new(kind, ok()).await;
    let new = f.request("k1", "fp").await;
    let quote_id = new.payout.quote_id.clone();
    f.engine.start(new).await.unwrap();
    let mut other = f.request("k2", "fp2").await;
    other.payout.quote_id = quote_id;
    let r = f.engine.start(other).await;
    assert!(matches!(r, Err(PayoutError::QuoteUsed)), "{r:?}");
    assert_eq!(f.provider.made(), 1);
}

/// An order's quote is checked before anything is reserved: another organisation's or
/// corridor's quote, or none, is unknown; an expired one and another amount are refused; a quote
/// used by another key is refused, by the same key answered as its repeat. Then a valid order
/// makes one payout of the quote's breakdown.
async fn a_pay_order_is_checked_against_its_quote(kind: Kind) {
    let f = Fixture::new(kind, ok()).await;
    let quote = f.quote(i64::MAX).await;
    let refused = |o: PayoutOrder| {
        let engine = f.engine.clone();
        async move { engine.pay(o).await.unwrap_err() }
    };
    let mut o = f.order(&quote, "k1", "fp");
    o.org_id = "org_2".into();
    let e = refused(o).await;
    assert!(matches!(e, PayoutError::UnknownQuote), "{e:?}");
    assert_eq!(e.code(), ErrorCode::InvalidQuote);
    let mut o = f.order(&quote, "k1", "fp");
    o.corridor_id = "cor_2".into();
    assert!(matches!(refused(o).await, PayoutError::UnknownQuote));
    let mut o = f.order(&quote, "k1", "fp");
    o.quote_id = "qt_missing".into();
    assert!(matches!(refused(o).await, PayoutError::UnknownQuote));
    let expired = f.quote(paygate_domain::unix_now() as i64 - 1).await;
    let e = refused(f.order(&expired, "k1", "fp")).await;
    assert!(matches!(e, PayoutError::QuoteExpired), "{e:?}");
    assert_eq!(e.code(), ErrorCode::QuoteExpired);
    let mut o = f.order(&quote, "k1", "fp");
    o.amount = UsdcAmount(o.amount.0 + 1);
    let e = refused(o).await;
    assert!(matches!(e, PayoutError::AmountMismatch), "{e:?}");
    assert_eq!(e.code(), ErrorCode::InvalidAmount);
    assert_eq!(
        f.provider.calls.load(Ordering::SeqCst),
        0,
        "nothing reserved"
    );
    assert!(f.key_unused("k1").await);

    let made = f.engine.pay(f.order(&quote, "k1", "fp")).await.unwrap();
    assert!(!made.replayed);
    let body: serde_json::Value = serde_json::from_str(&made.body).unwrap();
    let payout = f
        .store
        .get_payout(body["paymentId"].as_str().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(payout.breakdown, quote.breakdown);
    assert_eq!(payout.quote_id, quote.id);
    assert_eq!(payout.idempotency_key, "k1");
    // The same key again: its repeat; another key: the quote is used.
    let again = f.engine.pay(f.order(&quote, "k1", "fp")).await.unwrap();
    assert!(again.replayed && again.body == made.body);
    let e = refused(f.order(&quote, "k2", "fp2")).await;
    assert!(matches!(e, PayoutError::QuoteUsed), "{e:?}");
    assert_eq!(f.provider.made(), 1);
}

async fn a_crash_between_the_reservation_and_the_provider_is_finished_by_reconciliation(
    kind: Kind,
) {
    let f = Fixture::new(kind, ok()).await;
    let new = f.request("k1", "fp").await;
    let id = new.payout.id.clone();
    // What a process killed right after the durable reservation leaves behind.
    assert_eq!(
        f.store.begin_payout(&new.key, &new.payout).await.unwrap(),
        BeginPayout::Started
    );
    assert_eq!(f.status(&id).await, PayoutStatus::Initiating);
    // The restarted process (a new engine: no claims) finishes it, and tells of it.
    let told = Arc::new(Told::default());
    let restarted = PayoutEngine::new(f.store.clone(), Some(f.provider.clone()))
        .with_observer(Some(told.clone()));
    restarted.reconcile().await;
    assert_eq!(f.status(&id).await, PayoutStatus::Pending);
    assert_eq!(told.of(&id), [PayoutStatus::Pending]);
    assert_eq!(f.provider.made(), 1);
    // The client's retry gets the stored answer; a second pass changes nothing.
    let again = restarted
        .repeat("org_1", "k1", "fp")
        .await
        .unwrap()
        .unwrap();
    assert!(again.replayed);
    restarted.reconcile().await;
    assert_eq!(f.provider.calls.load(Ordering::SeqCst), 1);
}

async fn the_clients_retry_finishes_a_payout_left_in_flight(kind: Kind) {
    let f = Fixture::new(kind, ok()).await;
    let new = f.request("k1", "fp").await;
    f.store.begin_payout(&new.key, &new.payout).await.unwrap();
    let a = f.engine.repeat("org_1", "k1", "fp").await.unwrap().unwrap();
    assert!(a.replayed);
    assert_eq!(f.status(&new.payout.id).await, PayoutStatus::Pending);
    assert_eq!(f.provider.made(), 1);
}

async fn an_unanswered_provider_keeps_the_payout_and_the_same_reference_is_retried(kind: Kind) {
    let f = Fixture::new(
        kind,
        Scripted::new(vec![ProviderError::Unavailable("timeout".into())], None),
    )
    .await;
    let new = f.request("k1", "fp").await;
    let id = new.payout.id.clone();
    let r = f.engine.start(new).await;
    assert!(matches!(r, Err(PayoutError::Unanswered)), "{r:?}");
    assert_eq!(r.unwrap_err().code().status(), 502);
    assert_eq!(f.status(&id).await, PayoutStatus::Initiating);
    f.engine.reconcile().await;
    assert_eq!(f.status(&id).await, PayoutStatus::Pending);
    assert_eq!(f.provider.calls.load(Ordering::SeqCst), 2);
    assert_eq!(f.provider.made(), 1, "one payout for the one reference");
}

async fn a_refused_payout_fails_and_frees_its_key(kind: Kind) {
    let f = Fixture::new(
        kind,
        Scripted::new(vec![ProviderError::Rejected("quote expired".into())], None),
    )
    .await;
    let new = f.request("k1", "fp").await;
    let id = new.payout.id.clone();
    let r = f.engine.start(new).await;
    assert!(
        matches!(&r, Err(PayoutError::Refused(why)) if why == "quote expired"),
        "{r:?}"
    );
    assert_eq!(f.status(&id).await, PayoutStatus::Failed);
    assert!(f.key_unused("k1").await);
    f.engine.reconcile().await;
    assert_eq!(f.provider.calls.load(Ordering::SeqCst), 1, "never retried");
    assert_eq!(f.told.of(&id), [PayoutStatus::Failed]);
}

async fn an_event_before_its_payout_is_kept_and_adopted_once_the_payout_is_known(kind: Kind) {
    let f = Fixture::new(kind, ok()).await;
    let raw = completed("cpn_0");
    let event = webhook::parse_event(&raw).unwrap();
    assert_eq!(
        f.engine.apply_event(&event, &raw).await.unwrap(),
        EventOutcome::Orphaned
    );
    // The payout the event was about: the provider gives it the id `cpn_0`, and accepting it
    // adopts the kept event.
    let new = f.request("k1", "fp").await;
    let id = new.payout.id.clone();
    f.engine.start(new).await.unwrap();
    assert_eq!(f.status(&id).await, PayoutStatus::Settled);
    assert!(f.store.adoptable_orphans().await.unwrap().is_empty());
    // The same event delivered again changes nothing.
    assert_eq!(
        f.engine.apply_event(&event, &raw).await.unwrap(),
        EventOutcome::Duplicate
    );
    // Accepted, then settled by the kept event: both told, in that order.
    assert_eq!(
        f.told.of(&id),
        [PayoutStatus::Pending, PayoutStatus::Settled]
    );
}

/// A `cpn.rfi.*` notification about RFI `rfi` of payment `cpn`.
fn rfi_note(kind: &str, status: &str, rfi: &str, cpn: &str) -> Vec<u8> {
    serde_json::json!({
        "subscriptionId": "s", "notificationId": format!("{kind}-{rfi}"),
        "notificationType": kind, "timestamp": "2026-11-26T00:00:00Z", "version": 2,
        "notification": {"id": rfi, "paymentId": cpn, "status": status, "level": "LEVEL_1",
            "fieldRequirements": {"type": "object", "required": ["SOURCE_OF_FUNDS"],
                "properties": {"SOURCE_OF_FUNDS": {"type": "string"}}}}
    })
    .to_string()
    .into_bytes()
}

async fn rfi_notifications_move_an_rfi_forward_only(kind: Kind) {
    let f = Fixture::new(kind, ok()).await;
    let new = f.request("k1", "fp").await;
    let id = new.payout.id.clone();
    f.engine.start(new).await.unwrap();
    let apply = |raw: Vec<u8>| {
        let engine = f.engine.clone();
        async move {
            let event = paygate_payouts::cpn::parse_notification(&raw).unwrap();
            engine.apply_event(&event, &raw).await.unwrap()
        }
    };
    let rfi = |f: &Fixture| {
        let store = f.store.clone();
        let id = id.clone();
        async move { store.get_payout(&id).await.unwrap().unwrap().rfi.unwrap() }
    };
    let answer = |org: &'static str, v: serde_json::Value| {
        let (engine, id) = (f.engine.clone(), id.clone());
        async move { engine.answer_rfi(org, "cor_1", &id, &v).await }
    };
    apply(rfi_note(
        "cpn.rfi.informationRequired",
        "INFORMATION_REQUIRED",
        "r1",
        "cpn_0",
    ))
    .await;
    assert_eq!(f.status(&id).await, PayoutStatus::ComplianceHold);
    assert_eq!(rfi(&f).await.status, "INFORMATION_REQUIRED");
    assert!(rfi(&f).await.open());
    // The seller's answer needs a provider that takes one: this one does not; a bad answer is
    // named before any provider is asked; nothing changes either way.
    let bad = answer("org_1", serde_json::json!({"OTHER": 1})).await;
    assert!(
        matches!(bad, Err(paygate_payouts::rfi::RfiError::Invalid(ref p)) if p.iter().any(|p| p.field == "answers.SOURCE_OF_FUNDS")),
        "{bad:?}"
    );
    let refused = answer("org_1", serde_json::json!({"SOURCE_OF_FUNDS": "sales"})).await;
    assert!(
        matches!(refused, Err(paygate_payouts::rfi::RfiError::Refused(_))),
        "{refused:?}"
    );
    let elsewhere = answer("org_2", serde_json::json!({"SOURCE_OF_FUNDS": "sales"})).await;
    assert!(matches!(
        elsewhere,
        Err(paygate_payouts::rfi::RfiError::NotFound)
    ));
    assert!(rfi(&f).await.open());
    // Approval arriving before the review: taken; the late review is kept in the timeline and
    // moves the RFI back to nothing.
    apply(rfi_note("cpn.rfi.approved", "APPROVED", "r1", "cpn_0")).await;
    assert_eq!(rfi(&f).await.status, "APPROVED");
    assert!(rfi(&f).await.answered_at.is_some());
    apply(rfi_note("cpn.rfi.inReview", "IN_REVIEW", "r1", "cpn_0")).await;
    assert_eq!(rfi(&f).await.status, "APPROVED");
    let closed = answer("org_1", serde_json::json!({"SOURCE_OF_FUNDS": "sales"})).await;
    assert!(matches!(
        closed,
        Err(paygate_payouts::rfi::RfiError::NotOpen)
    ));
    // A second RFI replaces the first; the payment completing settles the payout, and an RFI
    // after that changes nothing.
    apply(rfi_note(
        "cpn.rfi.informationRequired",
        "INFORMATION_REQUIRED",
        "r2",
        "cpn_0",
    ))
    .await;
    assert_eq!(rfi(&f).await.id, "r2");
    assert_eq!(f.status(&id).await, PayoutStatus::ComplianceHold);
    let raw = completed("cpn_0");
    f.engine
        .apply_event(&webhook::parse_event(&raw).unwrap(), &raw)
        .await
        .unwrap();
    assert_eq!(f.status(&id).await, PayoutStatus::Settled);
    assert!(matches!(
        apply(rfi_note("cpn.rfi.approved", "APPROVED", "r2", "cpn_0")).await,
        EventOutcome::Ignored(PayoutStatus::Settled)
    ));
    assert_eq!(rfi(&f).await.status, "INFORMATION_REQUIRED");
}

async fn without_a_provider_nothing_is_reserved_or_driven(kind: Kind) {
    let f = Fixture::new(kind, ok()).await;
    let engine = PayoutEngine::new(f.store.clone(), None);
    assert!(matches!(engine.provider(), Err(PayoutError::NoProvider)));
    let new = f.request("k1", "fp").await;
    f.store.begin_payout(&new.key, &new.payout).await.unwrap();
    engine.reconcile().await;
    assert_eq!(f.status(&new.payout.id).await, PayoutStatus::Initiating);
    assert_eq!(f.provider.calls.load(Ordering::SeqCst), 0);
}

async fn a_corridors_payouts_are_listed_newest_first_page_by_page(kind: Kind) {
    let f = Fixture::new(kind, ok()).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let new = f.request(&format!("k{i}"), "fp").await;
        ids.push(new.payout.id.clone());
        f.engine.start(new).await.unwrap();
    }
    ids.reverse();
    let mut listed = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let page = f
            .store
            .list_payouts("cor_1", before.as_deref(), 2)
            .await
            .unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        before = Some(last.id.clone());
        listed.extend(page.into_iter().map(|p| p.id));
    }
    assert_eq!(listed, ids);
    assert!(f
        .store
        .list_payouts("cor_2", None, 10)
        .await
        .unwrap()
        .is_empty());
}

/// Each test above, once per store.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sled() {
                super::$name(super::Kind::Sled).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(super::Kind::Postgres).await
            }
        }
    )*};
}

on_both_stores!(
    a_payout_is_made_once_and_its_key_answers_with_the_same_body,
    concurrent_requests_with_one_key_make_one_payout,
    a_quote_used_by_another_key_is_refused,
    a_pay_order_is_checked_against_its_quote,
    a_crash_between_the_reservation_and_the_provider_is_finished_by_reconciliation,
    the_clients_retry_finishes_a_payout_left_in_flight,
    an_unanswered_provider_keeps_the_payout_and_the_same_reference_is_retried,
    a_refused_payout_fails_and_frees_its_key,
    an_event_before_its_payout_is_kept_and_adopted_once_the_payout_is_known,
    without_a_provider_nothing_is_reserved_or_driven,
    rfi_notifications_move_an_rfi_forward_only,
    a_corridors_payouts_are_listed_newest_first_page_by_page,
);
