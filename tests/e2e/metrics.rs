//! Metrics operators can trust, plan limits and facilitator health, through the real binary.

use crate::common;

use common::chain::{address, Chain, PaymentSpec};
use common::upstream::Upstream;
use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const PRICE: u64 = 10_000;

/// Polls until `total` requests are counted (counters are written every second in tests).
async fn metrics_with_total(gw: &Gateway, key: &str, total: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let m = gw.org_metrics(key, "24h").await;
        if m["metrics"]["totalRequests"] == total || Instant::now() > deadline {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn pay(gw: &Gateway, path: &str, spec: &PaymentSpec) -> reqwest::Response {
    gw.http
        .get(gw.url(path))
        .header("X-PAYMENT", spec.v1_header())
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_scripted_mix_is_counted_exactly_and_survives_restart() {
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.push(("PAYGATE_METRICS_TOKEN".into(), "scrape-me".into()));
    let mut gw = Gateway::start_with_owned(env).await;
    let up = Upstream::start().await;
    let receiver = address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    let (_, other_key) = gw
        .create_org("globex", Some(&receiver.to_checksum(None)))
        .await;
    gw.create_paid_route(&key, "echo", &format!("{}/echo", up.url), false)
        .await;
    gw.create_route(
        &key,
        json!({"path": "down", "priceUSD": 0.01,
        "targetUrl": format!("http://127.0.0.1:{}/", free_port()), "network": "base-sepolia"}),
    )
    .await;

    // Bad queries and keys first (they are not gateway requests and count nothing).
    for q in ["", "?window=1h", "?window=24h&x=1"] {
        let r = gw
            .api(&key, Method::GET, &format!("/api/gateway/metrics{q}"), None)
            .await;
        let (status, code, _) = error_of(r).await;
        assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"), "{q}");
    }
    let r = gw.get("/api/gateway/metrics?window=24h").await;
    assert_eq!(r.status(), 401);

    // The mix: 3 unpaid, 2 paid, 1 rejected payment, 1 paid to a dead upstream, 1 unknown path.
    for _ in 0..3 {
        assert_eq!(gw.get("/gateway/acme/echo").await.status(), 402);
    }
    for _ in 0..2 {
        let r = pay(
            &gw,
            "/gateway/acme/echo",
            &PaymentSpec::new(1, receiver, PRICE),
        )
        .await;
        assert_eq!(r.status(), 200);
    }
    let r = pay(
        &gw,
        "/gateway/acme/echo",
        &PaymentSpec::new(1, receiver, PRICE + 1),
    )
    .await;
    assert_eq!(r.status(), 402);
    let r = pay(
        &gw,
        "/gateway/acme/down",
        &PaymentSpec::new(1, receiver, PRICE),
    )
    .await;
    assert_eq!(r.status(), 503);
    assert_eq!(gw.get("/gateway/acme/nope").await.status(), 404);

    let m = metrics_with_total(&gw, &key, 8).await;
    let mm = &m["metrics"];
    assert_eq!(mm["window"], "24h");
    assert_eq!(mm["totalRequests"], 8, "{m}");
    assert_eq!(mm["unpaid402"], 4, "{m}");
    assert_eq!(mm["paid"], 2, "{m}");
    assert_eq!(mm["errors"], 1, "{m}");
    assert_eq!(mm["errorRate"], 0.125, "{m}");
    assert!(mm["avgChallengeMs"].as_f64().unwrap() > 0.0);
    assert!(mm["avgSettleMs"].as_f64().unwrap() > 0.0);
    assert!(mm["orgId"].as_str().unwrap().starts_with("org_"));
    let f = &m["facilitator"];
    assert_eq!(f["status"], "up", "{m}");
    // The facilitator is named, never its RPC URL (which may carry a provider's key).
    assert_eq!(f["facilitatorUrl"], "embedded:base-sepolia", "{m}");
    assert!(!m.to_string().contains(&chain.rpc));
    assert!(f["checkedAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        gw.org_metrics(&key, "7d").await["metrics"]["totalRequests"],
        8
    );

    // Another org sees only its own (nothing).
    let o = gw.org_metrics(&other_key, "24h").await;
    assert_eq!(o["metrics"]["totalRequests"], 0);
    assert_eq!(o["metrics"]["avgChallengeMs"], Value::Null);
    assert_eq!(o["metrics"]["errorRate"], 0.0);

    // Prometheus exposition of the same, for a scraper with a token only.
    let (status, code, _) = send_error(gw.http.get(gw.url("/metrics"))).await;
    assert_eq!((status, code.as_str()), (401, "UNAUTHORIZED"));
    let (status, _, _) = send_error(gw.http.get(gw.url("/metrics")).bearer_auth(&key)).await;
    assert_eq!(status, 401, "an organisation's key is not a scrape token");
    gw.prometheus(ADMIN_TOKEN).await;
    let text = gw.prometheus("scrape-me").await;
    assert!(text.contains("paygate_gateway_requests_total"), "{text}");
    assert!(text.contains("outcome=\"paid\""));
    // The payment for the upstream that was down was never taken: a 5xx that is not a paid request.
    let requests = |outcome: &str, class: &str| {
        text.lines().any(|l| {
            l.starts_with("paygate_gateway_requests_total")
                && l.contains(&format!("outcome=\"{outcome}\""))
                && l.contains(&format!("status_class=\"{class}\""))
        })
    };
    assert!(
        requests("other", "5xx") && !requests("paid", "5xx"),
        "{text}"
    );
    assert!(text.contains(&format!(
        "paygate_revenue_base_units_total{{org=\"{}\"",
        mm["orgId"].as_str().unwrap()
    )));
    assert!(text.contains("paygate_challenge_latency_seconds_bucket"));
    assert!(text.contains("paygate_facilitator_up 2"));

    gw.restart().await;
    let m = gw.org_metrics(&key, "24h").await;
    assert_eq!(
        m["metrics"]["totalRequests"], 8,
        "counters survive a restart: {m}"
    );
    assert_eq!(m["metrics"]["paid"], 2);
}

#[tokio::test]
async fn plan_limit_refuses_before_payment_and_survives_restart() {
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.push(("PAYGATE__PLANS__FREE__MONTHLY_REQUESTS".into(), "2".into()));
    let mut gw = Gateway::start_with_owned(env).await;
    let up = Upstream::start().await;
    let receiver = address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    gw.create_paid_route(&key, "echo", &format!("{}/echo", up.url), false)
        .await;
    for _ in 0..2 {
        let r = pay(
            &gw,
            "/gateway/acme/echo",
            &PaymentSpec::new(2, receiver, PRICE),
        )
        .await;
        assert_eq!(r.status(), 200);
    }
    let before = chain.balance(address(2)).await;
    let r = pay(
        &gw,
        "/gateway/acme/echo",
        &PaymentSpec::new(2, receiver, PRICE),
    )
    .await;
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (402, "PLAN_LIMIT_EXCEEDED"));
    assert_eq!(chain.balance(address(2)).await, before, "nothing charged");
    assert_eq!(up.hits(), 2);

    gw.restart().await;
    let r = pay(
        &gw,
        "/gateway/acme/echo",
        &PaymentSpec::new(2, receiver, PRICE),
    )
    .await;
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (402, "PLAN_LIMIT_EXCEEDED"));
    assert_eq!(up.hits(), 2);

    // Upgrading the plan lifts the limit at once.
    let r = gw
        .admin(
            Method::PATCH,
            "/admin/orgs/acme",
            Some(json!({"plan": "pro"})),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = pay(
        &gw,
        "/gateway/acme/echo",
        &PaymentSpec::new(2, receiver, PRICE),
    )
    .await;
    assert_eq!(r.status(), 200);
}

/// The facilitator health after the first probe (which names the facilitator it checked).
async fn facilitator_status(env: Vec<(String, String)>) -> Value {
    let gw = Gateway::start_with_owned(env).await;
    let (_, key) = gw.create_org("acme", None).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let f = gw.org_metrics(&key, "24h").await["facilitator"].clone();
        if f["facilitatorUrl"].as_str().is_some_and(|u| !u.is_empty()) {
            return f;
        }
        assert!(std::time::Instant::now() < deadline, "{f}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn facilitator_health_is_down_when_stopped_and_degraded_when_slow() {
    let remote = |url: String| {
        vec![
            (
                "PAYGATE__FACILITATOR__KIND".to_string(),
                "remote".to_string(),
            ),
            ("PAYGATE__FACILITATOR__URL".to_string(), url),
            (
                "PAYGATE__METRICS__DEGRADED_LATENCY_MS".to_string(),
                "100".to_string(),
            ),
        ]
    };
    let stopped = format!("http://127.0.0.1:{}", free_port());
    let f = facilitator_status(remote(stopped.clone())).await;
    assert_eq!(f["status"], "down", "{f}");
    assert_eq!(f["facilitatorUrl"], stopped);

    // A facilitator that answers /supported, slowly.
    let app = axum::Router::new().route(
        "/supported",
        axum::routing::get(|| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            axum::Json(json!({"kinds": [{"x402Version": 1, "scheme": "exact", "network": "base-sepolia"}]}))
        }),
    );
    let (url, _) = common::upstream::serve(app).await;
    let f = facilitator_status(remote(url)).await;
    assert_eq!(f["status"], "degraded", "{f}");
    assert!(f["latencyMs"].as_u64().unwrap() >= 300);
}
