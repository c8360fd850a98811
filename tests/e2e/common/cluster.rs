//! Three nodes on one PostgreSQL database: starting them, polling them, a paid route they all
//! serve.

use super::chain::{address, Chain, KEYS};
use super::upstream::Upstream;
use super::Gateway;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most a change may take to reach another node before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Three nodes on the database `url`, settling on a local chain they share.
pub async fn nodes(url: &str) -> Vec<Gateway> {
    paid_nodes(&Arc::new(Chain::start()), url, &[]).await
}

/// Three nodes settling on `chain`, each with its own relayer account (a node refuses to start
/// with a relayer another live node holds), plus `extra` environment.
pub async fn paid_nodes(chain: &Arc<Chain>, url: &str, extra: &[(&str, &str)]) -> Vec<Gateway> {
    let mut n = Vec::new();
    for relayer in &KEYS[5..8] {
        n.push(Gateway::start_on_chain(url, chain, relayer, extra).await);
    }
    n
}

/// Org `acme` (receiver account 9) with a $0.01 route `echo` to `upstream`, served by every
/// node; its API key and the receiver.
pub async fn echo_route(n: &[Gateway], upstream: &Upstream) -> (String, alloy_primitives::Address) {
    acme_route(
        n,
        json!({"path": "echo", "priceUSD": 0.01, "targetUrl": format!("{}/echo", upstream.url),
               "network": "base-sepolia"}),
    )
    .await
}

/// Org `acme` (receiver account 9) with the route `route` (a `path` without its slash),
/// served by every node; its API key and the receiver.
pub async fn acme_route(n: &[Gateway], route: Value) -> (String, alloy_primitives::Address) {
    let receiver = address(9);
    let (_, key) = n[0]
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    let path = format!(
        "/gateway/acme/{}",
        route["path"].as_str().unwrap_or_default()
    );
    n[0].create_route(&key, route).await;
    for node in &n[1..] {
        until(node, &path, "route", |s, _| s == 402).await;
    }
    (key, receiver)
}

/// Polls `path` on `node` until `check` holds for the answer; the time it took.
pub async fn until<F>(node: &Gateway, path: &str, what: &str, check: F) -> Duration
where
    F: Fn(u16, &Value) -> bool,
{
    let start = Instant::now();
    loop {
        let r = node.get(path).await;
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        if check(status, &body) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: still {status} {body} after {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The cluster duties `node` does now (its `/healthz`); none while it does not answer (a node
/// being restarted, or starved of CPU on a loaded machine).
pub async fn duties(node: &Gateway) -> Vec<String> {
    let Ok(r) = node.http.get(node.url("/healthz")).send().await else {
        return Vec::new();
    };
    let v: Value = match r.json().await {
        Ok(v) => v,
        Err(_) => return Vec::new(),
    };
    v["duties"]
        .as_array()
        .map(|d| {
            d.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The index of the one node doing `duty`, once exactly one does.
pub async fn leader(n: &[Gateway], duty: &str) -> usize {
    let start = Instant::now();
    loop {
        let mut holders = Vec::new();
        for (i, node) in n.iter().enumerate() {
            if node.pid() != 0 && duties(node).await.iter().any(|d| d == duty) {
                holders.push(i);
            }
        }
        if holders.len() == 1 {
            return holders[0];
        }
        assert!(
            holders.len() < 2,
            "{duty} done by nodes {holders:?} at once"
        );
        assert!(start.elapsed() < DEADLINE, "no node took {duty}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `node`'s answer to a payment (an `X-PAYMENT` header) for the echo route of [`echo_route`].
pub async fn pay(node: &Gateway, header: &str) -> reqwest::Response {
    node.http
        .get(node.url("/gateway/acme/echo"))
        .header("X-PAYMENT", header)
        .send()
        .await
        .unwrap()
}
