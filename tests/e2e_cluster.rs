//! Three gateway nodes on one PostgreSQL database (issue 17): what one node changes, every node
//! serves; one `Idempotency-Key` sent to every node at once has one effect. Each propagation
//! time is printed (the bound README reports); the test fails only past a generous deadline.

mod common;

use common::chain::{address, Chain, PaymentSpec, KEYS};
use common::upstream::Upstream;
use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The most a change may take to reach another node before the test fails.
const DEADLINE: Duration = Duration::from_secs(10);

async fn nodes(url: &str) -> Vec<Gateway> {
    nodes_with(url, &[]).await
}

async fn nodes_with(url: &str, env: &[(&str, &str)]) -> Vec<Gateway> {
    let mut out = Vec::new();
    for _ in 0..3 {
        out.push(Gateway::start_on(url, env).await);
    }
    out
}

/// Polls `path` on `node` until `check` holds for the answer; the time it took.
async fn until<F>(node: &Gateway, path: &str, what: &str, check: F) -> Duration
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

fn price(body: &Value) -> Option<&str> {
    body["accepts"][0]["maxAmountRequired"].as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_on_one_node_is_served_by_every_node() {
    let pg = paygate_store::testing::PgCluster::start();
    let n = nodes(&pg.url()).await;
    let (org, key) = n[0].create_org("acme", Some(WALLET_A)).await;
    let route = n[0].create_route(&key, route_body("weather")).await;
    let id = route["id"].as_str().unwrap();
    let path = "/gateway/acme/weather";
    // The node that made the change serves it at once.
    assert_eq!(n[0].get(path).await.status(), 402);
    let mut seen = Vec::new();
    for node in &n[1..] {
        seen.push(until(node, path, "created", |s, _| s == 402).await);
    }
    // A price change.
    let r = n[1]
        .api(
            &key,
            Method::PATCH,
            &format!("/api/routes/{id}"),
            Some(json!({"priceUSD": 0.02})),
        )
        .await;
    assert_eq!(r.status(), 200);
    for node in [&n[0], &n[2]] {
        seen.push(
            until(node, path, "repriced", |s, b| {
                s == 402 && price(b) == Some("20000")
            })
            .await,
        );
    }
    // Suspension of the organisation (an admin change on a third node).
    let slug = org["slug"].as_str().unwrap();
    let r = n[2]
        .admin(
            Method::PATCH,
            &format!("/admin/orgs/{slug}"),
            Some(json!({"suspended": true})),
        )
        .await;
    assert_eq!(r.status(), 200);
    for node in [&n[0], &n[1]] {
        seen.push(until(node, path, "suspended", |s, _| s == 403).await);
    }
    let r = n[2]
        .admin(
            Method::PATCH,
            &format!("/admin/orgs/{slug}"),
            Some(json!({"suspended": false})),
        )
        .await;
    assert_eq!(r.status(), 200);
    // Deletion.
    let r = n[0]
        .api(&key, Method::DELETE, &format!("/api/routes/{id}"), None)
        .await;
    assert_eq!(r.status(), 204);
    for node in [&n[1], &n[2]] {
        seen.push(until(node, path, "deleted", |s, _| s == 404).await);
    }
    // A key revoked on one node is refused by every node from the next request on (keys are
    // read from the database on every request).
    let key_id = org["keyId"].as_str().unwrap();
    let r = n[1]
        .admin(
            Method::DELETE,
            &format!("/admin/orgs/{slug}/keys/{key_id}"),
            None,
        )
        .await;
    assert_eq!(r.status(), 204);
    for node in &n {
        let r = node.api(&key, Method::GET, "/api/routes", None).await;
        assert_eq!(r.status(), 401);
    }
    seen.sort();
    println!(
        "cluster propagation over {} changes: median {:?}, max {:?}",
        seen.len(),
        seen[seen.len() / 2],
        seen[seen.len() - 1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_was_down_catches_up_when_it_starts() {
    let pg = paygate_store::testing::PgCluster::start();
    let mut n = nodes(&pg.url()).await;
    let (_, key) = n[0].create_org("acme", Some(WALLET_A)).await;
    assert!(n[2].stop());
    n[0].create_route(&key, route_body("late")).await;
    n[2].restart().await;
    assert_eq!(n[2].get("/gateway/acme/late").await.status(), 402);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_idempotency_key_sent_to_every_node_at_once_has_one_effect() {
    let pg = paygate_store::testing::PgCluster::start();
    let n = nodes(&pg.url()).await;
    let (_, key) = n[0].create_org("acme", Some(WALLET_A)).await;
    let body = route_body("once");
    let mut sends = Vec::new();
    for i in 0..12 {
        let node = &n[i % 3];
        let req = node
            .http
            .post(node.url("/api/routes"))
            .bearer_auth(&key)
            .header("idempotency-key", "one-key")
            .json(&body);
        sends.push(req.send());
    }
    let answers = futures_util::future::join_all(sends).await;
    let mut ids = std::collections::HashSet::new();
    for a in answers {
        let a = a.unwrap();
        assert_eq!(a.status(), 201, "every copy answers the one result");
        let v: Value = a.json().await.unwrap();
        ids.insert(v["id"].as_str().unwrap().to_string());
    }
    assert_eq!(ids.len(), 1, "one route: {ids:?}");
    let listed: Value = n[2]
        .api(&key, Method::GET, "/api/routes", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    // The same key with another body, on any node: 409.
    let r = n[1]
        .http
        .post(n[1].url("/api/routes"))
        .bearer_auth(&key)
        .header("idempotency-key", "one-key")
        .json(&route_body("other"))
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(r).await.1, "DUPLICATE_REQUEST");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_payment_sent_to_every_node_at_once_is_settled_and_served_once() {
    let chain = Chain::start();
    let pg = paygate_store::testing::PgCluster::start();
    let env = chain.gateway_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let n = nodes_with(&pg.url(), &env).await;
    let upstream = Upstream::start().await;
    let receiver = address(9);
    let (_, key) = n[0]
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    n[0].create_route(
        &key,
        json!({"path": "echo", "priceUSD": 0.01, "targetUrl": format!("{}/echo", upstream.url),
               "network": "base-sepolia"}),
    )
    .await;
    for node in &n[1..] {
        until(node, "/gateway/acme/echo", "route", |s, _| s == 402).await;
    }
    let payer = address(2);
    let before = chain.balance(payer).await;
    let spec = PaymentSpec::new(2, receiver, 10_000);
    let header = spec.v1_header();
    let sends = (0..30).map(|i| {
        let node = &n[i % 3];
        node.http
            .get(node.url("/gateway/acme/echo"))
            .header("X-PAYMENT", header.clone())
            .send()
    });
    let results = futures_util::future::join_all(sends).await;
    let mut served = 0;
    let mut answers = Vec::new();
    for r in results {
        let r = r.unwrap();
        if r.status() == 200 {
            served += 1;
            continue;
        }
        let (status, code, _) = error_of(r).await;
        answers.push((status, code));
    }
    assert_eq!(served, 1, "{answers:?}");
    for (status, code) in &answers {
        assert!(
            matches!(
                (*status, code.as_str()),
                (504, "SETTLEMENT_PENDING") | (402, "NONCE_REPLAY")
            ),
            "{status} {code}"
        );
    }
    assert_eq!(upstream.hits(), 1, "one upstream request");
    assert_eq!(
        chain.balance(payer).await,
        before - 10_000,
        "one settlement"
    );
    // The same payment later, on any node: NONCE_REPLAY.
    for node in &n {
        let r = node
            .http
            .get(node.url("/gateway/acme/echo"))
            .header("X-PAYMENT", header.clone())
            .send()
            .await
            .unwrap();
        let (status, code, _) = error_of(r).await;
        assert_eq!((status, code.as_str()), (402, "NONCE_REPLAY"));
    }
    assert_eq!(upstream.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn org_metrics_count_every_nodes_requests() {
    let pg = paygate_store::testing::PgCluster::start();
    let n = nodes(&pg.url()).await;
    let (_, key) = n[0].create_org("acme", Some(WALLET_A)).await;
    n[0].create_route(&key, route_body("weather")).await;
    for node in &n[1..] {
        until(node, "/gateway/acme/weather", "route", |s, _| s == 402).await;
    }
    // Counted from here: what the polls above sent is in the counters already or soon; read
    // the baseline once every node has flushed it, then send a known number per node.
    let read = |node: &Gateway| {
        let key = key.clone();
        let req = node
            .http
            .get(node.url("/api/gateway/metrics?window=24h"))
            .bearer_auth(key);
        async move {
            let v: Value = req.send().await.unwrap().json().await.unwrap();
            v["metrics"]["unpaid402"].as_u64().unwrap()
        }
    };
    let settle = || async {
        let mut last = read(&n[0]).await;
        loop {
            // Flushes happen every second (test config): two equal reads 1.5 s apart.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let now = read(&n[0]).await;
            if now == last {
                return now;
            }
            last = now;
        }
    };
    let base = settle().await;
    for node in &n {
        for _ in 0..5 {
            assert_eq!(node.get("/gateway/acme/weather").await.status(), 402);
        }
    }
    let start = Instant::now();
    loop {
        // Read on each node: every node sees the whole cluster's count.
        let counts = [read(&n[0]).await, read(&n[1]).await, read(&n[2]).await];
        if counts.iter().all(|c| *c == base + 15) {
            break;
        }
        assert!(
            counts.iter().all(|c| *c <= base + 15),
            "{counts:?} over {base} + 15"
        );
        assert!(start.elapsed() < DEADLINE, "{counts:?}, want {base} + 15");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_limit_holds_exactly_across_nodes() {
    const LIMIT: usize = 3;
    let chain = Chain::start();
    let pg = paygate_store::testing::PgCluster::start();
    let limit = LIMIT.to_string();
    let mut n = Vec::new();
    // One relayer account per node: the nodes never share a chain nonce.
    for relayer in &KEYS[5..8] {
        let mut env = chain.gateway_env();
        env.retain(|(k, _)| k != "PAYGATE_RELAYER_KEY");
        env.push(("PAYGATE_RELAYER_KEY".into(), relayer.to_string()));
        env.push((
            "PAYGATE__PLANS__FREE__MONTHLY_REQUESTS".into(),
            limit.clone(),
        ));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        n.push(Gateway::start_on(&pg.url(), &env).await);
    }
    let upstream = Upstream::start().await;
    let receiver = address(9);
    let (_, key) = n[0]
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    n[0].create_route(
        &key,
        json!({"path": "echo", "priceUSD": 0.01, "targetUrl": format!("{}/echo", upstream.url),
               "network": "base-sepolia"}),
    )
    .await;
    for node in &n[1..] {
        until(node, "/gateway/acme/echo", "route", |s, _| s == 402).await;
    }
    let before = chain.balance(receiver).await;
    // Nine different payments at once, three per node.
    let specs: Vec<PaymentSpec> = (0..9)
        .map(|i| PaymentSpec::new(1 + i % 3, receiver, 10_000))
        .collect();
    let sends = specs.iter().enumerate().map(|(i, spec)| {
        let node = &n[i % 3];
        node.http
            .get(node.url("/gateway/acme/echo"))
            .header("X-PAYMENT", spec.v1_header())
            .send()
    });
    let results = futures_util::future::join_all(sends).await;
    // Every request either took one of the LIMIT slots (served, or its settlement failed on
    // the chain, which gives nothing and is counted apart) or was refused for the limit.
    let (mut served, mut settle_failed, mut refused) = (0, 0, 0);
    for r in results {
        let r = r.unwrap();
        if r.status() == 200 {
            served += 1;
            continue;
        }
        let (status, code, _) = error_of(r).await;
        match (status, code.as_str()) {
            (402, "PLAN_LIMIT_EXCEEDED") => refused += 1,
            (402, "PAYMENT_REJECTED") => settle_failed += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    if settle_failed > 0 {
        println!("{settle_failed} settlement(s) failed on the chain under load");
    }
    assert_eq!(
        served + settle_failed,
        LIMIT,
        "exactly the limit taken across nodes"
    );
    assert_eq!(refused, 9 - LIMIT);
    assert_eq!(upstream.hits(), served);
    assert_eq!(
        chain.balance(receiver).await,
        before + 10_000 * served as u64,
        "only the served requests were charged"
    );
}
