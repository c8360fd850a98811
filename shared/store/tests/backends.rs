//! What every store backend must do, checked on the sled store (temp dir) and on PostgreSQL (a
//! throwaway cluster) alike: the same calls, the same answers. Checked here: every aggregate but
//! the payouts' (the payout engine's tests run on both stores in `payout_engine.rs`), and the
//! cluster's leases and MCP sessions.

use paygate_domain::ids::new_id;
use paygate_domain::model::{
    ApiKeyRecord, GatewayPayment, IdempotencyRecord, MetricBucket, Org, PaymentStatus, Route,
};
use paygate_domain::rollup::{CountBatch, COUNT_BATCH_PREFIX};
use paygate_domain::StoreError;
use paygate_store::postgres::{PgStore, StartError};
use paygate_store::testing::PgCluster;
use paygate_store::{ClusterStore, PaymentReservation, SpendReservation};
use paygate_x402::money::UsdcAmount;

mod common;
use common::{channel, payment, reopened, settings, Backend, Both};

fn org(id: &str, slug: &str) -> Org {
    Org {
        id: id.into(),
        slug: slug.into(),
        name: slug.into(),
        receiver_wallet: None,
        plan: "free".into(),
        suspended: false,
        payer_wallet: None,
        payer_key: None,
        mcp_daily_cap: None,
        platform_fee_bps: None,
        origin_secret_generation: 0,
        origin_secret_rotated_at: None,
        created_at: "t".into(),
        updated_at: "t".into(),
    }
}

fn key(id: &str, org: &str, at: &str) -> ApiKeyRecord {
    ApiKeyRecord {
        key_id: id.into(),
        org_id: org.into(),
        secret_sha256: "00".into(),
        created_at: at.into(),
        revoked_at: None,
        role: Default::default(),
        expires_at: None,
    }
}

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
        pricing: paygate_domain::model::Pricing::Fixed,
        access_window_seconds: None,
        access_window_calls: None,
        token: paygate_domain::model::usdc(),
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
async fn organisations_have_unique_slugs_and_their_keys() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        s.create_org(&org("o1", "acme"), &key("k1", "o1", "2"))
            .await
            .unwrap();
        assert!(
            matches!(
                s.create_org(&org("o2", "acme"), &key("k2", "o2", "1"))
                    .await,
                Err(StoreError::DuplicateSlug)
            ),
            "{name}"
        );
        assert!(
            s.get_api_key("k2").await.unwrap().is_none(),
            "{name}: nothing of o2 kept"
        );
        let mut o = s.get_org_by_slug("acme").await.unwrap().unwrap();
        o.suspended = true;
        // Any text a client may send is kept as sent, NUL included (jsonb would refuse it).
        o.name = "a\u{0}b \u{1F980}".into();
        s.update_org(&o).await.unwrap();
        let stored = s.get_org("o1").await.unwrap().unwrap();
        assert!(stored.suspended, "{name}");
        assert_eq!(stored.name, "a\u{0}b \u{1F980}", "{name}");
        assert!(
            matches!(
                s.update_org(&org("nope", "x")).await,
                Err(StoreError::NotFound)
            ),
            "{name}"
        );
        s.put_api_key(&key("k0", "o1", "1")).await.unwrap();
        let mut revoked = key("k1", "o1", "2");
        revoked.revoked_at = Some("3".into());
        s.put_api_key(&revoked).await.unwrap();
        let keys = s.list_api_keys("o1").await.unwrap();
        let ids: Vec<_> = keys.iter().map(|k| k.key_id.as_str()).collect();
        assert_eq!(ids, ["k0", "k1"], "{name}: oldest first");
        assert_eq!(keys[1].revoked_at.as_deref(), Some("3"), "{name}");
        assert_eq!(s.list_orgs().await.unwrap().len(), 1, "{name}");
    }
}

#[tokio::test]
async fn path_index_is_unique_per_org_and_follows_updates() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        s.insert_route(&route("o1", "r1", "/a"), None)
            .await
            .unwrap();
        // Same path in another org is fine.
        s.insert_route(&route("o2", "r2", "/a"), None)
            .await
            .unwrap();
        assert!(
            matches!(
                s.insert_route(&route("o1", "r3", "/a"), None).await,
                Err(StoreError::DuplicatePath)
            ),
            "{name}"
        );
        // Moving r1 to /b frees /a.
        let old = s.get_route("o1", "r1").await.unwrap().unwrap();
        let mut new = old.clone();
        new.path = "/b".into();
        s.replace_route(&old, &new, None).await.unwrap();
        s.insert_route(&route("o1", "r3", "/a"), None)
            .await
            .unwrap();
        // A stale replace is refused; a move onto a taken path too.
        assert!(
            matches!(
                s.replace_route(&old, &new, None).await,
                Err(StoreError::Conflict)
            ),
            "{name}"
        );
        let mut onto = new.clone();
        onto.path = "/a".into();
        assert!(
            matches!(
                s.replace_route(&new, &onto, None).await,
                Err(StoreError::DuplicatePath)
            ),
            "{name}"
        );
        s.delete_route("o1", "r1").await.unwrap();
        assert!(
            matches!(s.delete_route("o1", "r1").await, Err(StoreError::NotFound)),
            "{name}"
        );
        s.insert_route(&route("o1", "r4", "/b"), None)
            .await
            .unwrap();
        assert_eq!(s.list_routes("o1").await.unwrap().len(), 2, "{name}");
        assert_eq!(s.list_routes("o2").await.unwrap().len(), 1, "{name}");
    }
}

#[tokio::test]
async fn idempotency_key_blocks_second_insert_and_nothing_else_changes() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        s.insert_route(&route("o1", "r1", "/a"), Some(&idem("o1", "k")))
            .await
            .unwrap();
        match s
            .insert_route(&route("o1", "r2", "/b"), Some(&idem("o1", "k")))
            .await
        {
            Err(StoreError::IdempotencyKeyUsed(rec)) => assert_eq!(rec.status, 201, "{name}"),
            other => panic!("{name}: unexpected {other:?}"),
        }
        assert!(s.get_route("o1", "r2").await.unwrap().is_none(), "{name}");
        // A refused insert leaves its key unused.
        assert!(matches!(
            s.insert_route(&route("o1", "r5", "/a"), Some(&idem("o1", "k2")))
                .await,
            Err(StoreError::DuplicatePath)
        ));
        assert!(
            s.get_idempotency("o1", "k2").await.unwrap().is_none(),
            "{name}"
        );
        // Keys are scoped per org.
        s.insert_route(&route("o2", "r2", "/b"), Some(&idem("o2", "k")))
            .await
            .unwrap();
        // A record kept on its own (a channel refund's): once per key, the first one stays.
        let mut refund = idem("o2", "k3");
        refund.status = 200;
        s.put_idempotency(&refund).await.unwrap();
        let mut other = refund.clone();
        other.body = "{\"refundedAmount\":\"1\"}".into();
        match s.put_idempotency(&other).await {
            Err(StoreError::IdempotencyKeyUsed(rec)) => assert_eq!(*rec, refund, "{name}"),
            other => panic!("{name}: unexpected {other:?}"),
        }
        match s
            .insert_route(&route("o2", "r9", "/z"), Some(&idem("o2", "k3")))
            .await
        {
            Err(StoreError::IdempotencyKeyUsed(rec)) => assert_eq!(rec.status, 200, "{name}"),
            other => panic!("{name}: unexpected {other:?}"),
        }
        assert_eq!(s.purge_idempotency(101).await.unwrap(), 3, "{name}");
        assert!(
            s.get_idempotency("o1", "k").await.unwrap().is_none(),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_idempotency_key_sent_concurrently_inserts_one_route() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        let tasks: Vec<_> = (0..20)
            .map(|i| {
                let s = s.clone();
                tokio::spawn(async move {
                    s.insert_route(
                        &route("o1", &format!("r{i}"), "/same"),
                        Some(&idem("o1", "k")),
                    )
                    .await
                })
            })
            .collect();
        let mut ok = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(()) => ok += 1,
                Err(StoreError::IdempotencyKeyUsed(_)) => {}
                Err(e) => panic!("{name}: {e:?}"),
            }
        }
        assert_eq!(ok, 1, "{name}");
        assert_eq!(s.list_routes("o1").await.unwrap().len(), 1, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_spend_never_passes_the_cap_under_concurrency() {
    let both = Both::new().await;
    for (name, s) in both.each() {
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
        assert_eq!(reserved, 20, "{name}");
        assert_eq!(
            s.mcp_spent("o1", "2026-11-22").await.unwrap(),
            200,
            "{name}"
        );
        assert_eq!(
            s.reserve_mcp_spend("o1", "2026-11-22", 1, 200)
                .await
                .unwrap(),
            SpendReservation::OverCap { total: 200 },
            "{name}"
        );
        assert_eq!(
            s.reserve_mcp_spend("o9", "2026-11-22", 300, 200)
                .await
                .unwrap(),
            SpendReservation::OverCap { total: 0 },
            "{name}: more than the cap at once"
        );
        // Other days and organisations are separate.
        assert_eq!(s.mcp_spent("o2", "2026-11-22").await.unwrap(), 0, "{name}");
        assert_eq!(s.mcp_spent("o1", "2026-11-23").await.unwrap(), 0, "{name}");
        s.release_mcp_spend("o1", "2026-11-22", 30).await.unwrap();
        assert_eq!(
            s.reserve_mcp_spend("o1", "2026-11-22", 30, 200)
                .await
                .unwrap(),
            SpendReservation::Reserved { total: 200 },
            "{name}"
        );
    }
}

#[tokio::test]
async fn plan_usage_only_grows_and_metric_buckets_add_up() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        s.put_plan_usage("o1", "2026-11", 5).await.unwrap();
        s.put_plan_usage("o1", "2026-11", 3).await.unwrap();
        assert_eq!(s.plan_usage("o1", "2026-11").await.unwrap(), 5, "{name}");
        assert_eq!(s.plan_usage("o1", "2026-12").await.unwrap(), 0, "{name}");
        let b = MetricBucket {
            total: 3,
            unpaid402: 1,
            paid: 2,
            errors: 0,
            challenge_us_sum: 30,
            challenge_count: 1,
            settle_ms_sum: 400,
            settle_count: 2,
            revenue: 20_000,
        };
        let batch = |minutes: &[(&str, u64)]| CountBatch {
            id: new_id(COUNT_BATCH_PREFIX),
            minutes: minutes
                .iter()
                .map(|(org, m)| (org.to_string(), *m, b.clone()))
                .collect(),
            rollups: vec![],
        };
        s.merge_counts(&batch(&[("o1", 100), ("o1", 99)]))
            .await
            .unwrap();
        let again = batch(&[("o1", 100), ("o2", 100)]);
        assert!(!s.count_batch_stored(&again.id).await.unwrap(), "{name}");
        s.merge_counts(&again).await.unwrap();
        // A batch retried (its first answer lost) is added once.
        s.merge_counts(&again).await.unwrap();
        assert!(s.count_batch_stored(&again.id).await.unwrap(), "{name}");
        let sum = s.metrics_since("o1", 100).await.unwrap();
        assert_eq!(
            (sum.total, sum.paid, sum.settle_ms_sum, sum.revenue),
            (6, 4, 800, 40_000),
            "{name}"
        );
        assert_eq!(s.metrics_since("o1", 0).await.unwrap().total, 9, "{name}");
        assert_eq!(
            s.metrics_since("o3", 0).await.unwrap(),
            MetricBucket::default()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_starting_together_migrate_once() {
    let cluster = PgCluster::start();
    let url = cluster.url();
    let nodes: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let s = PgStore::connect_lazy(&settings(url)).unwrap();
                s.migrate().await
            })
        })
        .collect();
    for n in nodes {
        n.await.unwrap().unwrap();
    }
    let s = PgStore::connect_lazy(&settings(url)).unwrap();
    s.migrate().await.unwrap();
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(s.pool())
        .await
        .unwrap();
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .count();
    assert_eq!(applied as usize, files, "each migration applied once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_nonce_names_its_payment_and_a_reconciled_one_is_claimed_once() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        let first = payment("pay_1", "84532:a:p:1");
        let retry = payment("pay_2", "84532:a:p:1");
        assert_eq!(
            s.reserve_payment(&first).await.unwrap(),
            PaymentReservation::Reserved,
            "{name}"
        );
        // The retry stores nothing and learns which payment holds the nonce.
        assert_eq!(
            s.reserve_payment(&retry).await.unwrap(),
            PaymentReservation::Held(Box::new(first.clone())),
            "{name}"
        );
        assert!(s.get_payment("pay_2").await.unwrap().is_none(), "{name}");
        assert_eq!(
            s.payment_for_nonce("84532:a:p:1").await.unwrap(),
            Some(first.clone())
        );

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
        assert_eq!(claimed, 1, "{name}");
        let stored = s.get_payment("pay_1").await.unwrap().unwrap();
        assert!(stored.redeemed_at.is_some(), "{name}");

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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_nonce_reserved_concurrently_is_held_by_one_payment() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        let tasks: Vec<_> = (0..24)
            .map(|i| {
                let s = s.clone();
                tokio::spawn(async move {
                    s.reserve_payment(&payment(&format!("pay_{i}"), "n"))
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut reserved = 0;
        let mut holders = std::collections::HashSet::new();
        for t in tasks {
            match t.await.unwrap() {
                PaymentReservation::Reserved => reserved += 1,
                PaymentReservation::Held(p) => {
                    holders.insert(p.id);
                }
                PaymentReservation::OverPlan => panic!("{name}: no plan slot was asked for"),
            }
        }
        assert_eq!(reserved, 1, "{name}");
        assert!(
            holders.len() <= 1,
            "{name}: every replay names the one holder"
        );
        let holder = s.payment_for_nonce("n").await.unwrap().unwrap();
        assert!(holders.iter().all(|h| *h == holder.id), "{name}");
    }
}

#[tokio::test]
async fn unfinished_payments_follow_every_write() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        let (a, b, c) = (
            payment("pay_a", "n_a"),
            payment("pay_b", "n_b"),
            payment("pay_c", "n_c"),
        );
        for p in [&a, &b, &c] {
            s.reserve_payment(p).await.unwrap();
        }
        let ids = |v: Vec<GatewayPayment>| {
            let mut ids: Vec<String> = v.into_iter().map(|p| p.id).collect();
            ids.sort();
            ids
        };
        assert_eq!(
            ids(s.unfinished_payments().await.unwrap()),
            ["pay_a", "pay_b", "pay_c"],
            "{name}"
        );
        // Settled leaves them; Unknown stays; a release (Failed) leaves and frees the nonce.
        let mut settled = a.clone();
        settled.status = PaymentStatus::Settled;
        s.update_payment(&settled).await.unwrap();
        let mut unknown = b.clone();
        unknown.status = PaymentStatus::Unknown;
        s.update_payment(&unknown).await.unwrap();
        let mut failed = c.clone();
        failed.status = PaymentStatus::Failed;
        s.release_payment(&failed).await.unwrap();
        assert_eq!(
            ids(s.unfinished_payments().await.unwrap()),
            ["pay_b"],
            "{name}"
        );
        assert!(
            s.payment_for_nonce("n_c").await.unwrap().is_none(),
            "{name}"
        );
        assert_eq!(
            s.reserve_payment(&payment("pay_e", "n_c")).await.unwrap(),
            PaymentReservation::Reserved,
            "{name}: a released nonce may be used again"
        );
        assert_eq!(
            s.get_payment("pay_a").await.unwrap(),
            Some(settled),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_slots_taken_concurrently_never_pass_the_limit() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move { s.take_plan_slot("o1", "2026-11", 5).await.unwrap() })
            })
            .collect();
        let mut taken = 0;
        for t in tasks {
            if t.await.unwrap() {
                taken += 1;
            }
        }
        assert_eq!(taken, 5, "{name}");
        assert_eq!(s.plan_usage("o1", "2026-11").await.unwrap(), 5, "{name}");
        assert!(
            !s.take_plan_slot("o1", "2026-11", 5).await.unwrap(),
            "{name}"
        );
        // A slot given back (the request was not paid) can be taken again.
        s.release_plan_slot("o1", "2026-11").await.unwrap();
        assert!(
            s.take_plan_slot("o1", "2026-11", 5).await.unwrap(),
            "{name}"
        );
        // 0 = unlimited, still counted.
        assert!(
            s.take_plan_slot("o2", "2026-11", 0).await.unwrap(),
            "{name}"
        );
        assert_eq!(s.plan_usage("o2", "2026-11").await.unwrap(), 1, "{name}");
    }
}

#[tokio::test]
async fn a_bad_url_an_absent_database_and_a_newer_schema_are_told_apart() {
    // A mistake in the URL: stop at once.
    let e = PgStore::connect_lazy(&settings("postgres://paygate@localhost:notaport/db".into()))
        .err()
        .expect("refused");
    assert!(matches!(e, StartError::Url(_)) && !e.is_transient(), "{e}");
    // No server on the socket: the node waits and tries again.
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "postgres://paygate@localhost/paygate?host={}",
        dir.path().display()
    );
    let e = PgStore::connect_lazy(&settings(url))
        .unwrap()
        .migrate()
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
    // A database a newer build migrated: refused with the version it has.
    let cluster = PgCluster::start();
    let s = PgStore::connect_lazy(&settings(cluster.url())).unwrap();
    s.migrate().await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from a newer build', true, '\\x00', 0)",
    )
    .execute(s.pool())
    .await
    .unwrap();
    let e = s.migrate().await.unwrap_err();
    assert!(matches!(e, StartError::NewerSchema(9999)), "{e}");
}

#[tokio::test]
async fn mcp_sessions_are_kept_read_forgotten_and_purged() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        assert_eq!(s.get_mcp_session("s1").await.unwrap(), None, "{name}");
        s.put_mcp_session("s1", r#"{"a":1}"#, 100).await.unwrap();
        s.put_mcp_session("s2", r#"{"b":2}"#, 200).await.unwrap();
        assert_eq!(
            s.get_mcp_session("s1").await.unwrap().as_deref(),
            Some(r#"{"a":1}"#),
            "{name}"
        );
        s.delete_mcp_session("s1").await.unwrap();
        assert_eq!(s.get_mcp_session("s1").await.unwrap(), None, "{name}");
        assert_eq!(s.purge_mcp_sessions(150).await.unwrap(), 0, "{name}");
        assert_eq!(s.purge_mcp_sessions(201).await.unwrap(), 1, "{name}");
        assert_eq!(s.get_mcp_session("s2").await.unwrap(), None, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_has_one_holder_among_the_nodes_and_passes_on_when_it_goes() {
    let both = Both::new().await;
    // One process opens a sled database: it holds every lease.
    assert!(both.sled.hold_lease("duty").await.unwrap());
    assert_eq!(both.sled.leases_held(), vec!["duty".to_string()]);
    // Nodes on one database: the first to ask holds it, and keeps it while it asks again.
    let url = both.cluster.url();
    let a = PgStore::connect_lazy(&settings(url.clone())).unwrap();
    let b = PgStore::connect_lazy(&settings(url)).unwrap();
    assert!(a.hold_lease("duty").await.unwrap());
    assert!(!b.hold_lease("duty").await.unwrap());
    assert!(a.hold_lease("duty").await.unwrap());
    assert!(b.hold_lease("other").await.unwrap(), "leases are by name");
    assert_eq!(a.leases_held(), vec!["duty".to_string()]);
    assert_eq!(b.leases_held(), vec!["other".to_string()]);
    // The holder goes (its connections close): the next node to ask takes it.
    drop(a);
    let start = std::time::Instant::now();
    while !b.hold_lease("duty").await.unwrap() {
        assert!(start.elapsed() < std::time::Duration::from_secs(10));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        b.leases_held(),
        vec!["duty".to_string(), "other".to_string()]
    );
}

#[tokio::test]
async fn reconciliation_decides_only_a_payment_still_open() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        let (a, b) = (payment("pay_a", "n_a"), payment("pay_b", "n_b"));
        s.reserve_payment(&a).await.unwrap();
        s.reserve_payment(&b).await.unwrap();
        // The request that took `a` recorded its outcome first, with its transaction.
        let mut by_request = a.clone();
        by_request.status = PaymentStatus::Settled;
        by_request.transaction = Some("0xabc".into());
        s.update_payment(&by_request).await.unwrap();
        let mut by_reconciliation = a.clone();
        by_reconciliation.status = PaymentStatus::Settled;
        by_reconciliation.settled_by_reconciliation = true;
        assert!(
            !s.decide_open_payment(&by_reconciliation).await.unwrap(),
            "{name}"
        );
        let kept = s.get_payment("pay_a").await.unwrap().unwrap();
        assert_eq!(kept.transaction.as_deref(), Some("0xabc"), "{name}");
        assert!(!kept.settled_by_reconciliation, "{name}");
        // `b` is still open: the decision is written, and it leaves the unfinished list.
        let mut decided = b.clone();
        decided.status = PaymentStatus::Failed;
        assert!(s.decide_open_payment(&decided).await.unwrap(), "{name}");
        let stored = s.get_payment("pay_b").await.unwrap().unwrap();
        assert_eq!(stored.status, PaymentStatus::Failed, "{name}");
        assert!(s.unfinished_payments().await.unwrap().is_empty(), "{name}");
        // An unknown payment is not created by a decision.
        assert!(
            !s.decide_open_payment(&payment("pay_x", "n_x"))
                .await
                .unwrap(),
            "{name}"
        );
        assert!(s.get_payment("pay_x").await.unwrap().is_none(), "{name}");
    }
}

#[tokio::test]
async fn payment_identifiers_are_claimed_once_kept_and_purged() {
    use paygate_domain::model::{PaidAnswer, PaymentIdRecord};
    let both = Both::new().await;
    for (name, s) in both.each() {
        let rec = |key: &str, fp: &str, at: i64| PaymentIdRecord {
            org_id: "o1".into(),
            key: key.into(),
            fingerprint: fp.into(),
            created_at_unix: at,
            result: None,
        };
        assert_eq!(
            s.claim_payment_id(&rec("id-1", "a", 1000), 0)
                .await
                .unwrap(),
            None
        );
        // Held: the holder comes back, whatever the fingerprint.
        let held = s
            .claim_payment_id(&rec("id-1", "b", 1001), 0)
            .await
            .unwrap();
        assert_eq!(held.unwrap().fingerprint, "a", "{name}");
        // Another organisation's id of the same name is its own.
        let mut other = rec("id-1", "c", 1000);
        other.org_id = "o2".into();
        assert_eq!(s.claim_payment_id(&other, 0).await.unwrap(), None, "{name}");
        // The answer is kept with it.
        let mut answered = rec("id-1", "a", 1000);
        answered.result = Some(PaidAnswer {
            payment_id: "pay_1".into(),
            status: 200,
            content_type: Some("application/json".into()),
            body: "e30=".into(),
            receipt_header: "payment-response".into(),
            receipt: "r".into(),
        });
        s.put_payment_id(&answered).await.unwrap();
        let held = s
            .claim_payment_id(&rec("id-1", "a", 1002), 0)
            .await
            .unwrap();
        assert_eq!(held, Some(answered.clone()), "{name}");
        // Older than the window: claimed anew.
        assert_eq!(
            s.claim_payment_id(&rec("id-1", "d", 5000), 2000)
                .await
                .unwrap(),
            None,
            "{name}"
        );
        assert_eq!(s.purge_payment_ids(4000).await.unwrap(), 1, "{name}");
        assert_eq!(s.purge_payment_ids(6000).await.unwrap(), 1, "{name}");
    }
}

/// A channel is written only from the version read: of two writers that read the same version
/// one wins, the other changes nothing; the unclaimed index follows every write; organisations
/// see only their own channels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_move_only_from_the_version_read() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        let mut c = channel(&format!("0x{name}01"));
        assert!(s.put_channel_if(0, &c).await.unwrap(), "{name}");
        assert!(
            !s.put_channel_if(0, &c).await.unwrap(),
            "{name}: created twice"
        );
        assert!(s.unclaimed_channels().await.unwrap().is_empty(), "{name}");
        // Two nodes read version 1 and charge: one write lands.
        let mut a = c.clone();
        a.charged = 1_000;
        a.version = 2;
        let mut b = c.clone();
        b.charged = 2_000;
        b.owner = Some("n2".into());
        b.version = 2;
        let (ra, rb) = tokio::join!(s.put_channel_if(1, &a), s.put_channel_if(1, &b));
        assert!(ra.unwrap() ^ rb.unwrap(), "{name}: exactly one writer wins");
        let stored = s.get_channel(&c.id).await.unwrap().unwrap();
        assert!(stored == a || stored == b, "{name}");
        assert_eq!(
            s.unclaimed_channels().await.unwrap(),
            vec![stored.clone()],
            "{name}"
        );
        // Claimed: out of the unclaimed index.
        c = stored;
        c.total_claimed = c.charged;
        c.version = 3;
        assert!(s.put_channel_if(2, &c).await.unwrap(), "{name}");
        assert!(s.unclaimed_channels().await.unwrap().is_empty(), "{name}");
        assert_eq!(
            s.list_channels("o1").await.unwrap(),
            vec![c.clone()],
            "{name}"
        );
        assert!(s.list_channels("o2").await.unwrap().is_empty(), "{name}");

        // Vouchers: writes of the charges alone, from the version read, between full writes.
        let mut v = c.clone();
        for _ in 0..3 {
            let mut next = v.clone();
            next.charged += 100;
            next.voucher_max = next.charged;
            next.voucher_signature = format!("0x{:02x}", next.version);
            next.requests += 1;
            next.lease_until_ms += 1;
            next.version += 1;
            assert!(
                s.put_channel_charges_if(v.version, &next).await.unwrap(),
                "{name}"
            );
            assert!(
                !s.put_channel_charges_if(v.version, &next).await.unwrap(),
                "{name}: a charge written twice from one version"
            );
            v = next;
            assert_eq!(
                s.get_channel(&c.id).await.unwrap(),
                Some(v.clone()),
                "{name}"
            );
        }
        // The first charge after the claim put the channel back among the unclaimed.
        assert_eq!(
            s.unclaimed_channels().await.unwrap(),
            vec![v.clone()],
            "{name}"
        );
        assert_eq!(
            s.list_channels("o1").await.unwrap(),
            vec![v.clone()],
            "{name}"
        );
        // A full write (a claim) from a stale version loses; from the current one it keeps the
        // charges it read and moves the rest.
        let mut claim = v.clone();
        claim.total_claimed = v.charged;
        claim.claim_transaction = Some("0xabc".into());
        claim.version = v.version;
        assert!(
            !s.put_channel_if(v.version - 1, &claim).await.unwrap(),
            "{name}"
        );
        claim.version = v.version + 1;
        assert!(s.put_channel_if(v.version, &claim).await.unwrap(), "{name}");
        assert_eq!(
            s.get_channel(&c.id).await.unwrap(),
            Some(claim.clone()),
            "{name}"
        );
        assert!(s.unclaimed_channels().await.unwrap().is_empty(), "{name}");
        // A voucher from before the claim cannot land over it.
        let mut late = v.clone();
        late.charged += 100;
        late.version += 1;
        assert!(
            !s.put_channel_charges_if(v.version, &late).await.unwrap(),
            "{name}"
        );
        // Racing voucher writes from one version: exactly one lands.
        let mut a = claim.clone();
        a.charged += 1;
        a.version += 1;
        let mut b = claim.clone();
        b.charged += 2;
        b.version += 1;
        let (ra, rb) = tokio::join!(
            s.put_channel_charges_if(claim.version, &a),
            s.put_channel_charges_if(claim.version, &b)
        );
        assert!(
            ra.unwrap() ^ rb.unwrap(),
            "{name}: exactly one voucher wins"
        );
        let stored = s.get_channel(&c.id).await.unwrap().unwrap();
        assert!(stored == a || stored == b, "{name}");
    }
}

/// Many channels' vouchers written at once (PostgreSQL sends them in shared statements): each
/// lands once from the version read, a second write of a channel from the same version and a
/// write naming another organisation change nothing, and two nodes on one database racing for
/// the same channels never both win a step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_voucher_writes_land_once_each() {
    use std::sync::Arc;
    let both = Both::new().await;
    let second_node: Arc<dyn Backend> =
        Arc::new(PgStore::connect_lazy(&settings(both.cluster.url())).unwrap());
    for (name, s) in both.each() {
        // The other node, or (sled: one process) the same store.
        let other = if name == "postgres" {
            second_node.clone()
        } else {
            s.clone()
        };
        let channels: Vec<_> = (0..24)
            .map(|i| channel(&format!("0x{name}c{i:02}")))
            .collect();
        for c in &channels {
            assert!(s.put_channel_if(0, c).await.unwrap(), "{name}");
        }
        let tasks: Vec<_> = channels
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, c)| {
                let (s, other) = (s.clone(), other.clone());
                tokio::spawn(async move {
                    let mut v = c;
                    let mut landed = 0;
                    for step in 0..5u64 {
                        let mut next = v.clone();
                        next.charged += 10;
                        next.requests += 1;
                        next.version += 1;
                        let mut rival = next.clone();
                        rival.charged += 1;
                        let mut foreign = next.clone();
                        foreign.org_id = "o2".into();
                        let (mine, theirs, wrong_org) = tokio::join!(
                            s.put_channel_charges_if(v.version, &next),
                            other.put_channel_charges_if(v.version, &rival),
                            s.put_channel_charges_if(v.version, &foreign),
                        );
                        assert!(!wrong_org.unwrap(), "channel {i} step {step}: other org");
                        let (mine, theirs) = (mine.unwrap(), theirs.unwrap());
                        assert!(
                            mine ^ theirs,
                            "channel {i} step {step}: one step, one writer"
                        );
                        v = if mine { next } else { rival };
                        landed += 1;
                    }
                    (v, landed)
                })
            })
            .collect();
        for t in tasks {
            let (last, landed) = t.await.unwrap();
            assert_eq!(landed, 5, "{name}");
            assert_eq!(last.version, 6, "{name}");
            assert_eq!(
                s.get_channel(&last.id).await.unwrap(),
                Some(last),
                "{name}: the last step stored"
            );
        }
        assert_eq!(s.unclaimed_channels().await.unwrap().len(), 24, "{name}");
    }
}

/// A sled store from before the per-organisation channel index lists its channels after the
/// index is built at open; channels opened afterwards are listed from the index, per
/// organisation.
#[tokio::test]
async fn sled_lists_an_organisations_channels_from_its_index() {
    use paygate_store::ChannelStore;
    let dir = tempfile::tempdir().unwrap();
    {
        let s = reopened(|| paygate_store::SledStore::open(dir.path())).await;
        assert!(s.put_channel_if(0, &channel("0x01")).await.unwrap());
    }
    {
        // As a store written before the index: no index tree, no marker.
        let db = reopened(|| sled::open(dir.path())).await;
        db.drop_tree("channels_by_org").unwrap();
        db.open_tree("meta")
            .unwrap()
            .remove("channels_by_org.v1")
            .unwrap();
        db.flush().unwrap();
    }
    let s = reopened(|| paygate_store::SledStore::open(dir.path())).await;
    let ids = |v: Vec<paygate_domain::channel::ChannelRecord>| {
        let mut ids: Vec<String> = v.into_iter().map(|c| c.id).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(s.list_channels("o1").await.unwrap()), ["0x01"]);
    let mut other = channel("0x02");
    other.org_id = "o2".into();
    assert!(s.put_channel_if(0, &other).await.unwrap());
    assert!(s.put_channel_if(0, &channel("0x03")).await.unwrap());
    assert_eq!(ids(s.list_channels("o1").await.unwrap()), ["0x01", "0x03"]);
    assert_eq!(ids(s.list_channels("o2").await.unwrap()), ["0x02"]);
    assert!(s.list_channels("o").await.unwrap().is_empty());
}

/// A sled store written before channels' charges were kept apart reads its channels as they
/// were, and its first voucher write (a full one) starts the charges entry; charges written
/// alone are there after a reopen; an entry on another version of the record is never applied.
#[tokio::test]
async fn sled_channels_from_before_the_charges_tree_and_after_a_reopen() {
    use paygate_store::ChannelStore;
    let dir = tempfile::tempdir().unwrap();
    let c = channel("0x01");
    {
        let s = reopened(|| paygate_store::SledStore::open(dir.path())).await;
        assert!(s.put_channel_if(0, &c).await.unwrap());
    }
    {
        let db = reopened(|| sled::open(dir.path())).await;
        db.drop_tree("channel_charges").unwrap();
        db.flush().unwrap();
    }
    let mut v = c.clone();
    {
        let s = reopened(|| paygate_store::SledStore::open(dir.path())).await;
        assert_eq!(s.get_channel(&c.id).await.unwrap(), Some(c.clone()));
        for _ in 0..3 {
            let mut next = v.clone();
            next.charged += 100;
            next.requests += 1;
            next.version += 1;
            assert!(s.put_channel_charges_if(v.version, &next).await.unwrap());
            v = next;
        }
    }
    {
        let s = reopened(|| paygate_store::SledStore::open(dir.path())).await;
        assert_eq!(s.get_channel(&c.id).await.unwrap(), Some(v.clone()));
        assert_eq!(s.unclaimed_channels().await.unwrap(), vec![v]);
    }
    // A charges entry sitting on another version of the record (what a reader sees when a full
    // write falls between its two reads, here made to stay) is never laid over that record:
    // the read gives up with an error rather than a record mixed from two writes.
    {
        let db = reopened(|| sled::open(dir.path())).await;
        let tree = db.open_tree("channel_charges").unwrap();
        let mut entry = tree.get(c.id.as_bytes()).unwrap().unwrap().to_vec();
        entry[..8].copy_from_slice(&99u64.to_be_bytes());
        tree.insert(c.id.as_bytes(), entry).unwrap();
        db.flush().unwrap();
    }
    let s = reopened(|| paygate_store::SledStore::open(dir.path())).await;
    assert!(s.get_channel(&c.id).await.is_err());
}

/// An endpoint is read by its organisation and id: another organisation's id reads nothing, a
/// deleted endpoint nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_endpoint_is_read_by_its_organisation_and_id() {
    use paygate_domain::webhook::WebhookEndpoint;
    let both = Both::new().await;
    let endpoint = |org: &str, id: &str| WebhookEndpoint {
        id: id.into(),
        org_id: org.into(),
        url: format!("https://{org}.example/hooks"),
        events: vec!["payout.updated".into()],
        description: String::new(),
        secrets: Vec::new(),
        created_at: "t".into(),
        updated_at: "t".into(),
    };
    for (name, s) in both.each() {
        let (a, b) = (endpoint("o1", "whe_a"), endpoint("o2", "whe_b"));
        s.put_webhook_endpoint(&a).await.unwrap();
        s.put_webhook_endpoint(&b).await.unwrap();
        assert_eq!(
            s.webhook_endpoint("o1", "whe_a").await.unwrap(),
            Some(a.clone()),
            "{name}"
        );
        assert_eq!(
            s.webhook_endpoint("o1", "whe_b").await.unwrap(),
            None,
            "{name}"
        );
        assert_eq!(
            s.webhook_endpoint("o2", "whe_b").await.unwrap(),
            Some(b),
            "{name}"
        );
        assert!(s.delete_webhook_endpoint("o1", "whe_a").await.unwrap());
        assert_eq!(
            s.webhook_endpoint("o1", "whe_a").await.unwrap(),
            None,
            "{name}"
        );
    }
}
