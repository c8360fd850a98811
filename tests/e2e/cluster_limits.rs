//! Rate limits across a cluster (issue 32, item 2): three nodes on one PostgreSQL each enforce
//! their share of the configured per-client limit, learned from the nodes' heartbeats (no
//! request waits for the database), so one client spreading its requests over the three is held
//! to the cluster's limit within the stated tolerance, where a per-node limit admitted three
//! times as much.

use crate::common;

use common::chain::Chain;
use common::cluster::{paid_nodes, until};
use std::sync::Arc;
use std::time::Instant;

/// The per-client limit configured for the cluster: 30 a second, bursts of 30.
const RATE: u64 = 30;

#[tokio::test]
async fn three_nodes_hold_one_client_to_the_clusters_limit() {
    let pg = paygate_store::testing::PgCluster::start();
    let chain = Arc::new(Chain::start());
    let n = paid_nodes(
        &chain,
        &pg.url(),
        &[
            ("PAYGATE__LIMITS__CLIENT__PER_SECOND", "30"),
            ("PAYGATE__LIMITS__CLIENT__BURST", "30"),
            ("PAYGATE__STORAGE__RESYNC_INTERVAL_SECONDS", "1"),
        ],
    )
    .await;
    // Each node has heard of the three (its /healthz says how many share the limits).
    for node in &n {
        until(
            node,
            "/healthz",
            "three nodes sharing the limits",
            |s, b| s == 200 && b["limitNodes"] == 3,
        )
        .await;
    }
    // The polling above spent this client's allowance: a full bucket takes burst / rate = 1 s
    // to come back.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    // A burst of one client's requests over the three nodes, well above the limit.
    let t0 = Instant::now();
    let sends = (0..180).map(|i| n[i % 3].http.get(n[i % 3].url("/healthz")).send());
    let answers = futures_util::future::join_all(sends).await;
    let elapsed = t0.elapsed().as_secs_f64();
    let admitted = answers
        .iter()
        .filter(|r| r.as_ref().is_ok_and(|r| r.status() != 429))
        .count() as u64;
    let limited = answers
        .iter()
        .filter(|r| r.as_ref().is_ok_and(|r| r.status() == 429))
        .count() as u64;
    // Tolerance: the burst, what the rate refilled meanwhile, and each share's rounding up.
    let most = RATE + (RATE as f64 * elapsed).ceil() as u64 + 3;
    assert!(
        admitted <= most,
        "{admitted} admitted in {elapsed:.2} s; the cluster's limit allows {most}"
    );
    assert!(
        admitted >= RATE / 2,
        "{admitted} admitted: the limit is 30, not less"
    );
    assert_eq!(admitted + limited, 180, "every request answered");
}
