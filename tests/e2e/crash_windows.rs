//! Crash safety of access windows: the real binary is SIGKILLed at a random moment while a call
//! that signed in is in flight (before its nonce is spent, while the store step commits, while
//! the upstream answers), restarted on the same data, and the client sends the same sign-in
//! again until the answer is final. Counted over all trials: a sign-in served twice (must be 0),
//! and the window's count, which must equal the sign-ins that were spent (served, or spent by
//! the attempt the crash cut: then the retry is told `invalid_siwx_nonce`, and that call is
//! lost to the payer; how often is reported, not required to be 0: a call is counted when
//! admitted, as README says).
//!
//! `PAYGATE_CRASH_TRIALS` sets the number of trials (20 by default).

use crate::common;

use common::chain::{address, Chain, PaymentSpec};
use common::upstream::Upstream;
use common::windows::{challenge_at, sign_in};
use common::*;
use rand::Rng;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const PATH: &str = "/gateway/acme/data";

#[derive(Default, Debug)]
struct WindowTally {
    /// Sign-ins the upstream served more than once (must be 0).
    served_twice: usize,
    /// Sign-ins spent: served, or spent by a cut attempt.
    spent: usize,
    /// Spent by an attempt the crash cut before the upstream's answer reached the payer.
    lost_calls: usize,
    first: BTreeMap<String, usize>,
    retry: BTreeMap<String, usize>,
}

/// Sends the sign-in until the answer is final: `200`, or a `402`'s reason.
async fn until_final(gw: &Gateway, header: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let sent = gw
            .http
            .get(gw.url(PATH))
            .header("SIGN-IN-WITH-X", header)
            .send()
            .await;
        match sent {
            Ok(r) if r.status() == 200 => return "200".into(),
            Ok(r) if r.status() == 402 => {
                let body: Value = r.json().await.unwrap_or_default();
                return body["error"].as_str().unwrap_or("402").to_string();
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    "no final answer".into()
}

async fn calls_used(gw: &Gateway, key: &str) -> u64 {
    let v: Value = gw
        .api(key, reqwest::Method::GET, "/api/access-windows", None)
        .await
        .json()
        .await
        .unwrap();
    v["windows"][0]["callsUsed"].as_u64().expect("the window")
}

#[tokio::test]
async fn sigkill_at_random_points_of_window_sign_ins_spends_each_once() {
    let trials = std::env::var("PAYGATE_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20usize);
    let chain = Chain::start();
    let mut gw = Gateway::start_with_owned(chain.gateway_env()).await;
    let upstream = Upstream::start().await;
    let receiver = address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    gw.create_route(
        &key,
        json!({"path": "data", "priceUSD": 0.01, "targetUrl": format!("{}/echo", upstream.url),
               "network": "base-sepolia", "accessWindowSeconds": 3600,
               "accessWindowCalls": trials + 10}),
    )
    .await;
    let paid = gw
        .http
        .get(gw.url(PATH))
        .header(
            "X-PAYMENT",
            PaymentSpec::new(1, receiver, 10_000).v1_header(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(paid.status(), 200, "{}", gw.log());

    // Sign-ins without a crash set the window the kills are spread over.
    let mut quickest = Duration::MAX;
    for _ in 0..3 {
        let header = sign_in(&challenge_at(&gw, PATH).await, 1, 1, |_| {});
        let t0 = Instant::now();
        assert_eq!(until_final(&gw, &header).await, "200");
        quickest = quickest.min(t0.elapsed());
    }
    let window_ms = (quickest.as_millis() as u64 * 3 / 2).max(5);

    let mut rng = rand::thread_rng();
    let mut tally = WindowTally::default();
    for _ in 0..trials {
        let header = sign_in(&challenge_at(&gw, PATH).await, 1, 1, |_| {});
        let hits_before = upstream.hits();
        let (http, url, h) = (gw.http.clone(), gw.url(PATH), header.clone());
        let first = tokio::spawn(async move {
            match http.get(url).header("SIGN-IN-WITH-X", h).send().await {
                Ok(r) => r.status().as_u16().to_string(),
                Err(_) => "cut".to_string(),
            }
        });
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..=window_ms))).await;
        gw.kill();
        let first = first.await.unwrap();
        gw.restart().await;
        let retry = until_final(&gw, &header).await;
        let served = upstream.hits() - hits_before;
        tally.served_twice += usize::from(served > 1);
        let spent = first == "200" || retry == "200" || retry == "invalid_siwx_nonce";
        tally.spent += usize::from(spent);
        tally.lost_calls += usize::from(spent && first != "200" && retry != "200");
        *tally.first.entry(first).or_default() += 1;
        *tally.retry.entry(retry).or_default() += 1;
    }
    let counted = calls_used(&gw, &key).await;
    println!("window crash tally ({trials} trials, kill window {window_ms} ms): {tally:?}, counted {counted}");
    assert_eq!(tally.served_twice, 0, "{tally:?}");
    assert_eq!(
        counted,
        3 + tally.spent as u64,
        "the window counts every spent sign-in once: {tally:?}"
    );
    assert!(
        tally
            .retry
            .keys()
            .all(|r| r == "200" || r == "invalid_siwx_nonce"),
        "every retry is served or told its nonce is spent: {tally:?}"
    );
}
