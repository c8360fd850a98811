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
        origin_deduplicates: false,
        targets: Vec::new(),
        balancing: Default::default(),
        health_check: None,
        description: String::new(),
        bazaar_category: None,
        mime_type: None,
        input_schema: None,
        output_schema: None,
        public_tool: false,
        schemes: paygate_domain::model::exact_only(),
        protocols: paygate_domain::model::both_protocols(),
        pricing: paygate_domain::model::Pricing::Fixed,
        access_window_seconds: None,
        access_window_calls: None,
        refund_window_seconds: None,
        token: paygate_domain::model::usdc(),
        created_at_ns: 1,
        created_at: "t".into(),
        updated_at: "t".into(),
    }
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
    let s = reopen(dir.path());
    assert_eq!(s.get_route("o1", "r1").await.unwrap().unwrap().path, "/a");
}

/// Opens the store in `dir` again once the previous instance let go of it: sled's background
/// flusher can hold the database's lock a moment after the last handle is dropped.
fn reopen(dir: &std::path::Path) -> SledStore {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match SledStore::open(dir) {
            Ok(s) => return s,
            Err(e) if std::time::Instant::now() > deadline => panic!("reopen: {e}"),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}

#[tokio::test]
async fn mcp_spend_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = SledStore::open(dir.path()).unwrap();
        for _ in 0..17 {
            s.reserve_mcp_spend("o1", "2026-11-22", 10, 200)
                .await
                .unwrap();
        }
    }
    let s = reopen(dir.path());
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
        resource: String::new(),
        amount: UsdcAmount(10_000),
        transfer: Default::default(),
        protocol: Default::default(),
        status: PaymentStatus::Reserved,
        transaction: None,
        failure: None,
        verify_us: 0,
        settle_ms: None,
        upstream_status: None,
        valid_before: 0,
        settled_by_reconciliation: false,
        redeemed_at: None,
        plan_slot: None,
        escrow: None,
        created_at: "t".into(),
        updated_at: "t".into(),
    }
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
    let s = reopen(dir.path());
    assert_eq!(ids(s.unfinished_payments().await.unwrap()), ["pay_r"]);
    // Built once: a later open does not walk the records again (an index emptied by hand
    // stays empty, which is how the marker is seen to hold).
    s.payments_open.clear().unwrap();
    s.flush().await.unwrap();
    drop(s);
    let s = reopen(dir.path());
    assert!(s.unfinished_payments().await.unwrap().is_empty());
}
