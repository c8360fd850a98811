//! The same checks on both stores, continued: plan slots, start-up errors, MCP sessions, leases,
//! reconciliation's guard, payment identifiers, channels and their writes, webhook endpoints.

use super::*;

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
async fn a_payment_is_written_over_only_as_it_was_read() {
    use paygate_store::PaymentGuard;
    let both = Both::new().await;
    for (name, s) in both.each() {
        let mut p = payment("pay_c", "n_c");
        p.status = PaymentStatus::Settled;
        s.reserve_payment(&p).await.unwrap();
        let read = s.get_payment("pay_c").await.unwrap().unwrap();
        // Two writers that read the same version: the first wins, the second writes nothing.
        let mut first = read.clone();
        first.failure = Some("first".into());
        first.updated_at = "2026-11-28T00:00:01.000001Z".into();
        let mut second = read.clone();
        second.failure = Some("second".into());
        second.updated_at = "2026-11-28T00:00:01.000002Z".into();
        let at = PaymentGuard::Unchanged(&read.updated_at);
        assert!(s.write_payment_if(&first, at).await.unwrap(), "{name}");
        assert!(!s.write_payment_if(&second, at).await.unwrap(), "{name}");
        let kept = s.get_payment("pay_c").await.unwrap().unwrap();
        assert_eq!(kept.failure.as_deref(), Some("first"), "{name}");
        // Settled is not open: a reconciliation-style write is refused too.
        assert!(
            !s.write_payment_if(&second, PaymentGuard::StillOpen)
                .await
                .unwrap(),
            "{name}"
        );
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
