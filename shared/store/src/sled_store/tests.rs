//! The sled store on a real database in a temp dir.

use super::*;
use paygate_domain::model::PaymentStatus;
use paygate_x402::money::UsdcAmount;

fn route(org: &str, id: &str, path: &str) -> Route {
    Route {
        id: id.into(),
        org_id: org.into(),
        path: path.into(),
        price: UsdcAmount(10_000),
        target_url: "http://example.com/".into(),
        network: "base".into(),
        active: true,
        streaming: false,
        discoverable: false,
        description: String::new(),
        bazaar_category: None,
        created_at_ns: 1,
        created_at: "t".into(),
        updated_at: "t".into(),
    }
}

fn idem(org: &str, key: &str) -> IdempotencyRecord {
    IdempotencyRecord {
        org_id: org.into(),
        key: key.into(),
        fingerprint: "f".into(),
        status: 201,
        body: "{}".into(),
        created_at_unix: 100,
    }
}

#[tokio::test]
async fn path_index_is_unique_per_org_and_follows_updates() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    s.insert_route(&route("o1", "r1", "/a"), None)
        .await
        .unwrap();
    // Same path in another org is fine.
    s.insert_route(&route("o2", "r2", "/a"), None)
        .await
        .unwrap();
    assert!(matches!(
        s.insert_route(&route("o1", "r3", "/a"), None).await,
        Err(StoreError::DuplicatePath)
    ));
    // Moving r1 to /b frees /a.
    let old = s.get_route("o1", "r1").await.unwrap().unwrap();
    let mut new = old.clone();
    new.path = "/b".into();
    s.replace_route(&old, &new, None).await.unwrap();
    s.insert_route(&route("o1", "r3", "/a"), None)
        .await
        .unwrap();
    // A stale replace is refused.
    assert!(matches!(
        s.replace_route(&old, &new, None).await,
        Err(StoreError::Conflict)
    ));
    s.delete_route("o1", "r1").await.unwrap();
    assert!(matches!(
        s.delete_route("o1", "r1").await,
        Err(StoreError::NotFound)
    ));
    s.insert_route(&route("o1", "r4", "/b"), None)
        .await
        .unwrap();
    assert_eq!(s.list_routes("o1").await.unwrap().len(), 2);
    assert_eq!(s.list_routes("o2").await.unwrap().len(), 1);
}

#[tokio::test]
async fn idempotency_key_blocks_second_insert_and_nothing_else_changes() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    s.insert_route(&route("o1", "r1", "/a"), Some(&idem("o1", "k")))
        .await
        .unwrap();
    match s
        .insert_route(&route("o1", "r2", "/b"), Some(&idem("o1", "k")))
        .await
    {
        Err(StoreError::IdempotencyKeyUsed(rec)) => assert_eq!(rec.status, 201),
        other => panic!("unexpected {other:?}"),
    }
    assert!(s.get_route("o1", "r2").await.unwrap().is_none());
    // Keys are scoped per org.
    s.insert_route(&route("o2", "r2", "/b"), Some(&idem("o2", "k")))
        .await
        .unwrap();
    assert_eq!(s.purge_idempotency(101).await.unwrap(), 2);
    assert!(s.get_idempotency("o1", "k").await.unwrap().is_none());
}

#[tokio::test]
async fn records_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = SledStore::open(dir.path()).unwrap();
        s.insert_route(&route("o1", "r1", "/a"), None)
            .await
            .unwrap();
    }
    let s = SledStore::open(dir.path()).unwrap();
    assert_eq!(s.get_route("o1", "r1").await.unwrap().unwrap().path, "/a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_spend_never_passes_the_cap_under_concurrency_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = std::sync::Arc::new(SledStore::open(dir.path()).unwrap());
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move {
                    s.reserve_mcp_spend("o1", "2026-11-22", 10, 200)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut reserved = 0;
        for t in tasks {
            if matches!(t.await.unwrap(), SpendReservation::Reserved { .. }) {
                reserved += 1;
            }
        }
        assert_eq!(reserved, 20);
        assert_eq!(s.mcp_spent("o1", "2026-11-22").await.unwrap(), 200);
        assert_eq!(
            s.reserve_mcp_spend("o1", "2026-11-22", 1, 200)
                .await
                .unwrap(),
            SpendReservation::OverCap { total: 200 }
        );
        // Other days and organisations are separate.
        assert_eq!(s.mcp_spent("o2", "2026-11-22").await.unwrap(), 0);
        assert_eq!(s.mcp_spent("o1", "2026-11-23").await.unwrap(), 0);
        s.release_mcp_spend("o1", "2026-11-22", 30).await.unwrap();
    }
    let s = SledStore::open(dir.path()).unwrap();
    assert_eq!(s.mcp_spent("o1", "2026-11-22").await.unwrap(), 170);
    assert_eq!(
        s.reserve_mcp_spend("o1", "2026-11-22", 30, 200)
            .await
            .unwrap(),
        SpendReservation::Reserved { total: 200 }
    );
}

fn payment(id: &str, nonce_key: &str) -> GatewayPayment {
    GatewayPayment {
        id: id.into(),
        org_id: "o1".into(),
        route_id: "r1".into(),
        nonce_key: nonce_key.into(),
        network: "eip155:84532".into(),
        asset: "0xA".into(),
        payer: "0xP".into(),
        pay_to: "0xQ".into(),
        amount: UsdcAmount(10_000),
        status: PaymentStatus::Reserved,
        transaction: None,
        failure: None,
        verify_us: 0,
        settle_ms: None,
        upstream_status: None,
        valid_before: 0,
        settled_by_reconciliation: false,
        redeemed_at: None,
        created_at: "t".into(),
        updated_at: "t".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_nonce_names_its_payment_and_a_reconciled_one_is_claimed_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = std::sync::Arc::new(SledStore::open(dir.path()).unwrap());
    let first = payment("pay_1", "84532:a:p:1");
    let retry = payment("pay_2", "84532:a:p:1");
    assert_eq!(
        s.reserve_payment(&first).await.unwrap(),
        PaymentReservation::Reserved
    );
    // The retry stores nothing and learns which payment holds the nonce.
    assert_eq!(
        s.reserve_payment(&retry).await.unwrap(),
        PaymentReservation::Held(Box::new(first.clone()))
    );
    assert!(s.get_payment("pay_2").await.unwrap().is_none());

    // Settled by the request itself: never redeemable.
    let mut settled = first.clone();
    settled.status = PaymentStatus::Settled;
    s.update_payment(&settled).await.unwrap();
    assert!(s
        .claim_redemption("pay_1", &retry, "t1")
        .await
        .unwrap()
        .is_none());

    // Settled by reconciliation: of 16 concurrent retries exactly one claims it.
    settled.settled_by_reconciliation = true;
    s.update_payment(&settled).await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (s, retry) = (s.clone(), retry.clone());
            tokio::spawn(async move {
                s.claim_redemption("pay_1", &retry, &format!("t{i}"))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut claimed = 0;
    for t in tasks {
        if t.await.unwrap().is_some() {
            claimed += 1;
        }
    }
    assert_eq!(claimed, 1);
    let stored = s.get_payment("pay_1").await.unwrap().unwrap();
    assert!(stored.redeemed_at.is_some());

    // Another route's retry of the same authorization may not claim a payment.
    let mut other = payment("pay_3", "84532:a:p:2");
    let mut elsewhere = other.clone();
    elsewhere.id = "pay_4".into();
    elsewhere.route_id = "r2".into();
    other.status = PaymentStatus::Settled;
    other.settled_by_reconciliation = true;
    assert_eq!(
        s.reserve_payment(&other).await.unwrap(),
        PaymentReservation::Reserved
    );
    assert!(s
        .claim_redemption("pay_3", &elsewhere, "t")
        .await
        .unwrap()
        .is_none());
}

fn ids(mut v: Vec<GatewayPayment>) -> Vec<String> {
    v.sort_by(|a, b| a.id.cmp(&b.id));
    v.into_iter().map(|p| p.id).collect()
}

#[tokio::test]
async fn reconciliation_reads_only_open_payments_and_the_index_follows_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    let (a, b, c) = (
        payment("pay_a", "n_a"),
        payment("pay_b", "n_b"),
        payment("pay_c", "n_c"),
    );
    for p in [&a, &b, &c] {
        assert_eq!(
            s.reserve_payment(p).await.unwrap(),
            PaymentReservation::Reserved
        );
    }
    assert_eq!(
        ids(s.unfinished_payments().await.unwrap()),
        ["pay_a", "pay_b", "pay_c"]
    );
    // Settled leaves the index; Unknown stays in it; a release (Failed) leaves it.
    let mut settled = a.clone();
    settled.status = PaymentStatus::Settled;
    s.update_payment(&settled).await.unwrap();
    let mut unknown = b.clone();
    unknown.status = PaymentStatus::Unknown;
    s.update_payment(&unknown).await.unwrap();
    let mut failed = c.clone();
    failed.status = PaymentStatus::Failed;
    s.release_payment(&failed).await.unwrap();
    assert_eq!(ids(s.unfinished_payments().await.unwrap()), ["pay_b"]);
    assert_eq!(s.payments_open.len(), 1);
    // A replay of a held nonce writes nothing, the index included.
    assert!(matches!(
        s.reserve_payment(&payment("pay_d", "n_b")).await.unwrap(),
        PaymentReservation::Held(_)
    ));
    assert_eq!(s.payments_open.len(), 1);
    // The record stays whole: the index only names it.
    assert_eq!(s.get_payment("pay_a").await.unwrap(), Some(settled));
}

#[tokio::test]
async fn a_store_written_before_the_open_index_gets_it_built_once_on_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = SledStore::open(dir.path()).unwrap();
        let mut settled = payment("pay_s", "n_s");
        settled.status = PaymentStatus::Settled;
        for p in [payment("pay_r", "n_r"), settled] {
            s.reserve_payment(&p).await.unwrap();
        }
        // What an older version left: no index, no marker.
        s.payments_open.clear().unwrap();
        s.db.open_tree("meta").unwrap().clear().unwrap();
        s.flush().await.unwrap();
    }
    let s = SledStore::open(dir.path()).unwrap();
    assert_eq!(ids(s.unfinished_payments().await.unwrap()), ["pay_r"]);
    // Built once: a later open does not walk the records again (an index emptied by hand
    // stays empty, which is how the marker is seen to hold).
    s.payments_open.clear().unwrap();
    s.flush().await.unwrap();
    drop(s);
    let s = SledStore::open(dir.path()).unwrap();
    assert!(s.unfinished_payments().await.unwrap().is_empty());
}
