//! The seller's ledger through the real binary and anvil: payments taken on chain are listed
//! newest first with their transaction, receipt and upstream answer, filtered, paged by cursor,
//! exported as CSV, and never shown to another organisation.

use crate::common;

use common::chain::{address, Chain, PaymentSpec};
use common::upstream::Upstream;
use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const PRICE: u64 = 10_000;

async fn ledger(gw: &Gateway, key: &str, query: &str) -> Value {
    let r = gw
        .api(key, Method::GET, &format!("/api/payments{query}"), None)
        .await;
    assert_eq!(r.status(), 200, "{query}");
    r.json().await.unwrap()
}

fn ids(page: &Value) -> Vec<String> {
    page["payments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn payments_are_listed_filtered_paged_exported_and_kept_to_their_org() {
    let chain = Chain::start();
    let gw = Gateway::start_with_owned(chain.gateway_env()).await;
    let up = Upstream::start().await;
    let receiver = address(9);
    let wallet = receiver.to_checksum(None);
    let (_, key) = gw.create_org("acme", Some(&wallet)).await;
    let (_, other_key) = gw.create_org("globex", Some(&wallet)).await;
    gw.create_paid_route(&key, "echo", &format!("{}/echo", up.url), false)
        .await;
    gw.create_paid_route(&key, "other", &format!("{}/other", up.url), false)
        .await;
    let down = gw
        .create_route(
            &key,
            json!({"path": "down", "priceUSD": 0.01, "network": "base-sepolia",
                   "targetUrl": format!("http://127.0.0.1:{}/", free_port())}),
        )
        .await;
    gw.create_paid_route(&other_key, "echo", &format!("{}/echo", up.url), false)
        .await;
    let echo_id = gw.route_id(&key, "/echo").await;

    let before = time::OffsetDateTime::now_utc();
    let pay = |path: &'static str, payer: usize| {
        let spec = PaymentSpec::new(payer, receiver, PRICE);
        let (http, url) = (gw.http.clone(), gw.url(path));
        async move {
            http.get(url)
                .header("X-PAYMENT", spec.v1_header())
                .send()
                .await
                .unwrap()
        }
    };
    // acme: three on /echo by payer 1, two on /other by payer 2, one on /down (no upstream);
    // globex: one.
    let mut receipts = Vec::new();
    for (path, payer) in [
        ("/gateway/acme/echo", 1),
        ("/gateway/acme/other", 2),
        ("/gateway/acme/echo", 1),
        ("/gateway/acme/other", 2),
        ("/gateway/acme/echo", 1),
    ] {
        let r = pay(path, payer).await;
        assert_eq!(r.status(), 200, "{path}");
        receipts.push(receipt(&r, "x-payment-response"));
    }
    assert_eq!(pay("/gateway/acme/down", 3).await.status(), 503);
    assert_eq!(pay("/gateway/globex/echo", 1).await.status(), 200);

    // Newest first; the upstream's answer is recorded as the request ends.
    let deadline = Instant::now() + Duration::from_secs(10);
    let all = loop {
        let all = ledger(&gw, &key, "").await;
        let answered = all["payments"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["upstreamStatus"] == 200)
            .count();
        if answered == 5 || Instant::now() > deadline {
            break all;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let list = all["payments"].as_array().unwrap();
    // The origin that refused connections was never paid: no row, nothing settled.
    assert_eq!(list.len(), 5, "{all}");
    assert!(list.iter().all(|p| p["routeId"] != down["id"]), "{all}");
    assert_eq!(all["nextCursor"], Value::Null);
    let newest = &list[0];
    assert_eq!(newest["routePath"], "/echo");
    for (p, r) in list.iter().rev().zip(&receipts) {
        assert_eq!(p["status"], "SETTLED", "{p}");
        assert_eq!(p["amountUSDC"], "0.010000");
        assert_eq!(p["network"], "eip155:84532");
        assert_eq!(p["payTo"], wallet.as_str());
        assert_eq!(p["upstreamStatus"], 200);
        let tx = p["transaction"].as_str().unwrap();
        assert_eq!(
            tx,
            r["transaction"].as_str().unwrap(),
            "the client's receipt"
        );
        assert_eq!(p["receipt"]["transaction"], tx);
        assert_eq!(
            p["explorerUrl"],
            format!("https://sepolia.basescan.org/tx/{tx}")
        );
        assert!(p["settleMs"].as_u64().is_some() && p["verifyMs"].as_f64().is_some());
    }
    let newest_id = newest["id"].as_str().unwrap();

    // The detail is the list's entry; another organisation gets 404 for it.
    let one: Value = gw
        .api(
            &key,
            Method::GET,
            &format!("/api/payments/{newest_id}"),
            None,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(&one, newest);
    let r = gw
        .api(
            &other_key,
            Method::GET,
            &format!("/api/payments/{newest_id}"),
            None,
        )
        .await;
    assert_eq!(error_of(r).await.0, 404);
    let theirs = ledger(&gw, &other_key, "").await;
    assert_eq!(ids(&theirs).len(), 1, "{theirs}");
    assert!(!ids(&theirs).iter().any(|i| ids(&all).contains(i)));

    // Filters.
    let payer1 = address(1).to_checksum(None).to_lowercase();
    assert_eq!(
        ids(&ledger(&gw, &key, &format!("?route={echo_id}")).await).len(),
        3
    );
    assert_eq!(
        ids(&ledger(&gw, &key, &format!("?payer={payer1}")).await).len(),
        3
    );
    assert_eq!(
        ids(&ledger(&gw, &key, &format!("?route={echo_id}&payer={}", address(2))).await).len(),
        0
    );
    assert_eq!(ids(&ledger(&gw, &key, "?status=FAILED").await).len(), 0);
    assert_eq!(ids(&ledger(&gw, &key, "?status=SETTLED").await).len(), 5);
    let rfc = |t: time::OffsetDateTime| {
        t.format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    let later = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    let q = format!("?from={}&to={}", rfc(before), rfc(later));
    assert_eq!(ids(&ledger(&gw, &key, &q).await), ids(&all));
    let q = format!("?to={}", rfc(before));
    assert_eq!(ids(&ledger(&gw, &key, &q).await).len(), 0);

    // Pages of two follow the cursor to the same list.
    let mut paged = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = ledger(&gw, &key, &format!("?limit=2{cursor}")).await;
        paged.extend(ids(&page));
        match page["nextCursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(paged, ids(&all));

    // CSV: a header and one row per payment, newest first; a cut-off export names the cursor.
    let r = gw
        .api(&key, Method::GET, "/api/payments?format=csv", None)
        .await;
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let text = r.text().await.unwrap();
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    assert!(lines[0].starts_with("id,createdAt,routeId,routePath,payer,amountUSDC"));
    assert!(lines[1].starts_with(newest_id), "{text}");
    assert!(lines[1].contains(",/echo,") && lines[2].contains(",/other,"));
    assert!(lines[2].contains(",0.010000,"));
    let r = gw
        .api(&key, Method::GET, "/api/payments?format=csv&limit=2", None)
        .await;
    let next = r.headers()["x-next-cursor"].to_str().unwrap().to_string();
    assert_eq!(next, ids(&all)[1]);

    // Bad filters: every problem named, nothing else.
    let r = gw
        .api(
            &key,
            Method::GET,
            "/api/payments?status=PAID&limit=0&payer=bob&from=yesterday&cursor=x",
            None,
        )
        .await;
    let (status, code, body) = error_of(r).await;
    assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"));
    let mut fields: Vec<_> = body["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap().to_string())
        .collect();
    fields.sort();
    assert_eq!(
        fields,
        ["cursor", "from", "limit", "payer", "status"],
        "{body}"
    );
    assert_eq!(error_of(gw.get("/api/payments").await).await.0, 401);
}

/// Per-route revenue, the series and plan usage include requests made a moment ago (counts the
/// aggregator has not stored: its flush is an hour away here), and are the same once stored.
#[tokio::test]
async fn revenue_per_route_over_time_and_usage_include_the_last_moment() {
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.push((
        "PAYGATE__METRICS__FLUSH_INTERVAL_SECONDS".into(),
        "3600".into(),
    ));
    let mut gw = Gateway::start_with_owned(env).await;
    let up = Upstream::start().await;
    let receiver = address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    gw.create_paid_route(&key, "echo", &format!("{}/echo", up.url), false)
        .await;
    gw.create_paid_route(&key, "other", &format!("{}/other", up.url), false)
        .await;
    gw.create_paid_route(&key, "idle", &format!("{}/idle", up.url), false)
        .await;
    let echo = gw.route_id(&key, "/echo").await;
    for path in ["echo", "echo", "other"] {
        let spec = PaymentSpec::new(1, receiver, PRICE);
        let r = gw
            .http
            .get(gw.url(&format!("/gateway/acme/{path}")))
            .header("X-PAYMENT", spec.v1_header())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    assert_eq!(gw.get("/gateway/acme/echo").await.status(), 402);

    // Counted within the aggregator's drain interval (50 ms), long before any flush.
    let deadline = Instant::now() + Duration::from_secs(5);
    let m = loop {
        let m = gw.org_metrics(&key, "24h").await;
        if m["metrics"]["totalRequests"] == 4 || Instant::now() > deadline {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let check = |m: &Value| {
        assert_eq!(m["metrics"]["totalRequests"], 4, "{m}");
        assert_eq!(m["metrics"]["revenueUSDC"], "0.030000", "{m}");
        let routes = m["routes"].as_array().unwrap();
        let paths: Vec<_> = routes.iter().map(|r| r["path"].clone()).collect();
        assert_eq!(
            paths,
            [json!("/echo"), json!("/other"), json!("/idle")],
            "{m}"
        );
        let e = &routes[0];
        assert_eq!(e["routeId"], echo.as_str());
        assert_eq!(
            (e["requests"].as_u64(), e["paid"].as_u64()),
            (Some(3), Some(2))
        );
        assert_eq!(e["revenueUSDC"], "0.020000");
        assert!(e["settleP50Ms"].as_u64().unwrap() <= e["settleP99Ms"].as_u64().unwrap());
        assert_eq!(routes[2]["revenueUSDC"], "0.000000");
        assert_eq!(routes[2]["settleP50Ms"], Value::Null);
        let s = &m["series"];
        let points = s["points"].as_array().unwrap();
        // Summed (a run across an hour's turn splits them over two points).
        let sum = |f: &str| points.iter().map(|p| p[f].as_u64().unwrap()).sum::<u64>();
        assert_eq!((sum("paid"), sum("requests")), (3, 4), "{s}");
        let revenue: Vec<_> = points
            .iter()
            .filter(|p| p["revenueUSDC"] != "0.000000")
            .collect();
        assert!(!revenue.is_empty() && revenue.len() <= 2, "{s}");
        points.len()
    };
    assert_eq!(check(&m), 24);
    assert_eq!(m["series"]["interval"], "hour");
    let week = gw.org_metrics(&key, "7d").await;
    assert_eq!(
        (check(&week), week["series"]["interval"].as_str()),
        (7, Some("day"))
    );
    assert_eq!(check(&gw.org_metrics(&key, "30d").await), 30);

    let usage = |gw: &Gateway| {
        let (http, url, key) = (gw.http.clone(), gw.url("/api/usage"), key.clone());
        async move {
            let r = http.get(url).bearer_auth(key).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    let u = usage(&gw).await;
    assert_eq!(u["plan"], "free");
    assert_eq!(u["monthlyLimit"], 10_000);
    assert_eq!(u["usedThisMonth"], 3, "{u}");
    assert_eq!(u["remaining"], 9_997);
    assert!(
        u["resetsAt"].as_str().unwrap().ends_with("-01T00:00:00Z"),
        "{u}"
    );
    assert_eq!(error_of(gw.get("/api/usage").await).await.0, 401);

    // Stopped, the aggregator stores what it counted; the figures come back from the store.
    gw.restart().await;
    check(&gw.org_metrics(&key, "24h").await);
    assert_eq!(usage(&gw).await["usedThisMonth"], 3);
}
