//! Three gateway nodes on one PostgreSQL database (issue 17): what one node changes, every node
//! serves; one `Idempotency-Key` sent to every node at once has one effect. Each propagation
//! time is printed (the bound README reports); the test fails only past a generous deadline.

use crate::common;

use common::chain::{address, Chain, PaymentSpec, KEYS};
use common::cluster::*;
use common::upstream::Upstream;
use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

mod escrow;
mod paid_across_nodes;

/// The master key every node shares (it decrypts the payer wallets).
const MCP_MASTER_KEY: &str = "5f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0";

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
    let org_path = format!("/admin/orgs/{}", org["slug"].as_str().unwrap());
    let suspend = |suspended: bool| {
        n[2].admin(
            Method::PATCH,
            &org_path,
            Some(json!({ "suspended": suspended })),
        )
    };
    assert_eq!(suspend(true).await.status(), 200);
    for node in [&n[0], &n[1]] {
        seen.push(until(node, path, "suspended", |s, _| s == 403).await);
    }
    assert_eq!(suspend(false).await.status(), 200);
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
        .admin(Method::DELETE, &format!("{org_path}/keys/{key_id}"), None)
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
    let chain = std::sync::Arc::new(Chain::start());
    let pg = paygate_store::testing::PgCluster::start();
    let n = paid_nodes(&chain, &pg.url(), &[]).await;
    let upstream = Upstream::start().await;
    let (_, receiver) = echo_route(&n, &upstream).await;
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
        let (status, code, body) = error_of(r).await;
        answers.push((status, code, body));
    }
    assert_eq!(served, 1, "{answers:?}");
    for (status, code, body) in &answers {
        assert!(
            matches!(
                (*status, code.as_str()),
                (504, "SETTLEMENT_PENDING") | (402, "NONCE_REPLAY")
            ),
            "{status} {code} {body}"
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
        let (status, code, _) = error_of(pay(node, &header).await).await;
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
    let chain = std::sync::Arc::new(Chain::start());
    let pg = paygate_store::testing::PgCluster::start();
    let limit = LIMIT.to_string();
    let n = paid_nodes(
        &chain,
        &pg.url(),
        &[("PAYGATE__PLANS__FREE__MONTHLY_REQUESTS", &limit)],
    )
    .await;
    let upstream = Upstream::start().await;
    let (_, receiver) = echo_route(&n, &upstream).await;
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
    // Every request either took one of the LIMIT slots and was served, or was refused for the
    // limit. (A settlement the chain refused would give its slot back; there is none here.)
    let (mut served, mut refused) = (0, 0);
    for r in results {
        let r = r.unwrap();
        if r.status() == 200 {
            served += 1;
            continue;
        }
        let (status, code, body) = error_of(r).await;
        match (status, code.as_str()) {
            (402, "PLAN_LIMIT_EXCEEDED") => refused += 1,
            other => panic!("unexpected {other:?} {body}"),
        }
    }
    assert_eq!(served, LIMIT, "exactly the limit served across nodes");
    assert_eq!(refused, 9 - LIMIT);
    assert_eq!(upstream.hits(), served);
    assert_eq!(
        chain.balance(receiver).await,
        before + 10_000 * served as u64,
        "only the served requests were charged"
    );
}

/// A JSON-RPC message POSTed to `node`'s Streamable HTTP endpoint, in `session` if given: the
/// status, the session id the answer names, and the JSON-RPC answer (from an SSE `data:` line or
/// a JSON body; `Null` for none).
async fn mcp_post(
    node: &Gateway,
    key: &str,
    session: Option<&str>,
    msg: Value,
) -> (u16, Option<String>, Value) {
    let mut req = node
        .http
        .post(node.url("/mcp"))
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .json(&msg);
    if let Some(s) = session {
        req = req
            .header("mcp-session-id", s)
            .header("mcp-protocol-version", "2025-06-18");
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let sid = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let text = r.text().await.unwrap();
    let answer = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
        .or_else(|| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    (status, sid, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sessions_and_the_daily_cap_hold_across_nodes() {
    const CAP_CALLS: usize = 3;
    let chain = std::sync::Arc::new(Chain::start());
    let pg = paygate_store::testing::PgCluster::start();
    // Every node decrypts the payer wallet: they share the master key.
    let master = ("PAYGATE_MASTER_KEY", MCP_MASTER_KEY);
    let n = paid_nodes(&chain, &pg.url(), &[master]).await;
    let upstream = Upstream::start().await;
    let (key, _) = echo_route(&n, &upstream).await;
    let r = n[1]
        .admin(
            Method::PUT,
            "/admin/orgs/acme/payer-wallet",
            Some(json!({"privateKey": KEYS[3]})),
        )
        .await;
    assert_eq!(r.status(), 200);
    // $0.03 a day: three $0.01 calls.
    let r = n[2]
        .admin(
            Method::PATCH,
            "/admin/orgs/acme",
            Some(json!({"mcpDailyCapUSD": "0.03"})),
        )
        .await;
    assert_eq!(r.status(), 200);

    // A Streamable HTTP session opened on node 0 ...
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "cluster-test", "version": "1"}}});
    let (status, sid, answer) = mcp_post(&n[0], &key, None, init).await;
    assert_eq!(status, 200, "{answer}");
    let sid = sid.expect("a session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, _) = mcp_post(&n[0], &key, Some(&sid), initialized).await;
    assert_eq!(status, 202);
    // ... is served by every node.
    for (i, node) in n.iter().enumerate() {
        let list = json!({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/list"});
        let (status, _, answer) = mcp_post(node, &key, Some(&sid), list).await;
        assert_eq!(status, 200, "node {i}: {answer}");
        assert_eq!(
            answer["result"]["tools"][0]["name"], "echo",
            "node {i}: {answer}"
        );
    }
    // Another organisation cannot use it on a node that restored it for acme.
    let (_, other_key) = n[0].create_org("other", Some(WALLET_A)).await;
    let list = json!({"jsonrpc": "2.0", "id": 20, "method": "tools/list"});
    let (_, _, answer) = mcp_post(&n[1], &other_key, Some(&sid), list).await;
    assert!(answer["result"].is_null(), "{answer}");

    // The daily cap across nodes: nine calls at once, three per node, in the one session.
    let payer = address(3);
    let before = chain.balance(payer).await;
    let calls = (0..9).map(|i| {
        let call = json!({"jsonrpc": "2.0", "id": 100 + i, "method": "tools/call",
                          "params": {"name": "echo", "arguments": {}}});
        mcp_post(&n[i % 3], &key, Some(&sid), call)
    });
    let answers = futures_util::future::join_all(calls).await;
    let (mut paid, mut capped) = (0, 0);
    for (status, _, a) in &answers {
        assert_eq!(*status, 200, "{a}");
        let result = &a["result"];
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        match result["isError"].as_bool() {
            Some(false) => paid += 1,
            Some(true) if text.contains("daily cap") => capped += 1,
            _ => panic!("unexpected answer: {a}"),
        }
    }
    assert_eq!(paid, CAP_CALLS, "exactly the cap spent across nodes");
    assert_eq!(capped, 9 - CAP_CALLS);
    assert_eq!(
        chain.balance(payer).await,
        before - 10_000 * paid as u64,
        "only what was paid for left the payer"
    );
    assert_eq!(upstream.hits(), paid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_sse_session_answers_on_its_own_node_and_says_so_elsewhere() {
    let pg = paygate_store::testing::PgCluster::start();
    let n = nodes(&pg.url()).await;
    let (_, key) = n[0].create_org("acme", Some(WALLET_A)).await;
    let mut stream = n[0]
        .http
        .get(n[0].url("/mcp/sse"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    // The first event names the message endpoint with the session id.
    let mut seen = String::new();
    let session = loop {
        let chunk = stream.chunk().await.unwrap().expect("endpoint event");
        seen.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(at) = seen.find("sessionId=") {
            let rest = &seen[at + "sessionId=".len()..];
            if let Some(end) = rest.find(|c: char| c.is_whitespace()) {
                break rest[..end].to_string();
            }
        }
    };
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let post = |node: &Gateway| {
        node.http
            .post(node.url(&format!("/mcp/message?sessionId={session}")))
            .bearer_auth(&key)
            .json(&ping)
            .send()
    };
    // On the node holding the stream (where a load balancer routing by client address sends
    // the client's every request): accepted.
    let r = post(&n[0]).await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    // Elsewhere: a clear 404 naming the cause, not a hang.
    let (status, code, body) = error_of(post(&n[1]).await.unwrap()).await;
    assert_eq!((status, code.as_str()), (404, "NOT_FOUND"));
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("node holding its stream"),
        "{body}"
    );
}

/// Three nodes on one PostgreSQL and one chain, sharing a master key, channels leased for
/// 300 ms (and `extra`), with org `acme`'s $0.001 route `search` offering `schemes`.
struct ChannelCluster {
    n: Vec<Gateway>,
    upstream: Upstream,
    key: String,
    receiver: alloy_primitives::Address,
    _pg: paygate_store::testing::PgCluster,
    chain: std::sync::Arc<Chain>,
}

impl ChannelCluster {
    /// The organisation's one channel as node `i` lists it.
    async fn channel(&self, i: usize) -> Value {
        let list: Value = self.n[i]
            .api(&self.key, Method::GET, "/api/channels", None)
            .await
            .json()
            .await
            .unwrap();
        list["channels"][0].clone()
    }
}

async fn channel_cluster(schemes: Value, extra: &[(&str, &str)]) -> ChannelCluster {
    let chain = std::sync::Arc::new(Chain::start());
    let pg = paygate_store::testing::PgCluster::start();
    let mut env = vec![
        ("PAYGATE_MASTER_KEY", MCP_MASTER_KEY),
        ("PAYGATE__CHANNELS__LEASE_MS", "300"),
    ];
    env.extend_from_slice(extra);
    let n = paid_nodes(&chain, &pg.url(), &env).await;
    let upstream = Upstream::start().await;
    let (key, receiver) = acme_route(
        &n,
        json!({"path": "search", "priceUSD": "0.001", "network": "base-sepolia",
               "targetUrl": format!("{}/search", upstream.url), "schemes": schemes}),
    )
    .await;
    ChannelCluster {
        n,
        upstream,
        key,
        receiver,
        _pg: pg,
        chain,
    }
}
