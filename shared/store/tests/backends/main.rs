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

#[path = "../common/mod.rs"]
mod common;
use common::{channel, payment, reopened, settings, Backend, Both};

mod coordination;

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
            refunded: 700,
            paid_mpp: 1,
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
            (
                sum.total,
                sum.paid,
                sum.settle_ms_sum,
                sum.revenue,
                sum.refunded,
                sum.paid_mpp
            ),
            (6, 4, 800, 40_000, 1_400, 2),
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
