//! Crash safety of paid requests: the real binary is SIGKILLed at a random moment while a paid
//! request is in flight (before the nonce is reserved, while it settles on anvil, after it
//! settled, while the upstream answers), restarted on the same data, and the client retries
//! with the same payment as it would. Counted over all trials, every one must be zero:
//! requests served twice for one payment, payments that moved money without a `SETTLED` record,
//! and reservations still unfinished once reconciliation has run on its own.
//!
//! `PAYGATE_CRASH_TRIALS` sets the number of trials (20 in `make test`; `make crash` runs 120 and
//! prints the tally that RELIABILITY.md reports).

mod common;

use common::chain::{address, now, Chain, PaymentSpec};
use common::upstream::Upstream;
use common::*;
use paygate_shared::model::{nonce_key, PaymentStatus};
use paygate_shared::store::{SledStore, Store};
use rand::Rng;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The $0.01 of `create_paid_route`, in base units.
const PRICE: u64 = 10_000;
/// Authorizations expire this long after signing, so reconciliation can close the ones that
/// never reached the chain within the test (the gateway wants 6 s of validity left, so a retry
/// within a few seconds is still checked against the replay guard, not refused as expiring).
const VALIDITY_SECS: u64 = 12;

#[derive(Default, Debug)]
struct Tally {
    trials: usize,
    served_twice: usize,
    lost: usize,
    stuck: usize,
    /// Money moved and the request was served once (the normal outcome).
    paid_and_served: usize,
    /// Money moved, the request was not served: the kill came after settlement and before the
    /// upstream answered; the retry is refused as a replay (at most once delivery).
    paid_not_served: usize,
    /// Nothing moved (killed before the transfer was sent); the retry was refused or served.
    not_charged: usize,
    /// How the first attempt ended (status, or "cut" when the kill cut the connection).
    first: BTreeMap<String, usize>,
    /// How the retry after the restart ended.
    retry: BTreeMap<String, usize>,
}

#[tokio::test]
async fn sigkill_at_random_points_of_paid_requests_loses_nothing() {
    let trials: usize = std::env::var("PAYGATE_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.push((
        "PAYGATE__FACILITATOR__RECONCILE_INTERVAL_SECONDS".into(),
        "1".into(),
    ));
    env.push((
        "PAYGATE__FACILITATOR__SETTLE_TIMEOUT_SECONDS".into(),
        "5".into(),
    ));
    let mut gw = Gateway::start_with_owned(env).await;
    let upstream = Upstream::start().await;
    let receiver = address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    gw.create_paid_route(&key, "echo", &format!("{}/echo", upstream.url), false)
        .await;
    let net = paygate_shared::network::Networks::from_config(
        &paygate_shared::network::builtin_networks(),
    )
    .resolve("base-sepolia")
    .unwrap()
    .clone();

    // Paid requests without a crash: each must be served, and the quickest sets the window the
    // kills are spread over (uniformly over a request's life, from before the nonce is reserved
    // to after the upstream answered; the first one also pays for connections and caches).
    let mut quickest = Duration::MAX;
    for _ in 0..3 {
        let t0 = Instant::now();
        let r = gw
            .http
            .get(gw.url("/gateway/acme/echo"))
            .header(
                "X-PAYMENT",
                PaymentSpec::new(1, receiver, PRICE).v1_header(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", gw.log());
        quickest = quickest.min(t0.elapsed());
    }
    let window_ms = (quickest.as_millis() as u64 * 3 / 2).max(10);

    let mut rng = rand::thread_rng();
    let mut tally = Tally::default();
    let mut payments = Vec::new();
    let mut last_valid_before = 0;
    for i in 0..trials {
        let mut spec = PaymentSpec::new(1 + i % 6, receiver, PRICE);
        spec.valid_before = now() + VALIDITY_SECS;
        last_valid_before = spec.valid_before;
        let header = spec.v1_header();
        let hits_before = upstream.hits();

        let (http, url, h) = (
            gw.http.clone(),
            gw.url("/gateway/acme/echo"),
            header.clone(),
        );
        let first = tokio::spawn(async move {
            match http.get(url).header("X-PAYMENT", h).send().await {
                Ok(r) => r.status().as_u16().to_string(),
                Err(_) => "cut".to_string(),
            }
        });
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..=window_ms))).await;
        gw.kill();
        *tally.first.entry(first.await.unwrap()).or_default() += 1;
        gw.restart().await;

        // The client retries the same payment until the answer is not "try again later".
        let deadline = Instant::now() + Duration::from_secs(30);
        let retry = loop {
            let (status, code) = match gw
                .http
                .get(gw.url("/gateway/acme/echo"))
                .header("X-PAYMENT", &header)
                .send()
                .await
            {
                Ok(r) if r.status() == 200 => (200, String::new()),
                Ok(r) => {
                    let (status, code, _) = error_of(r).await;
                    (status, code)
                }
                Err(_) => (0, String::new()),
            };
            let pending = status >= 500 || code == "SETTLEMENT_PENDING";
            if !pending || Instant::now() > deadline {
                break if code.is_empty() {
                    status.to_string()
                } else {
                    format!("{status} {code}")
                };
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        *tally.retry.entry(retry).or_default() += 1;
        let served = upstream.hits() - hits_before;
        let auth = spec.authorization();
        let moved = paygate_shared::facilitator::embedded::authorization_state(
            &chain.rpc,
            net.config.asset,
            auth.from,
            auth.nonce,
        )
        .await
        .expect("authorizationState");
        tally.trials += 1;
        if served > 1 {
            tally.served_twice += 1;
        }
        match (moved, served) {
            (true, 0) => tally.paid_not_served += 1,
            (true, _) => tally.paid_and_served += 1,
            (false, _) => tally.not_charged += 1,
        }
        payments.push((
            nonce_key(net.config.chain_id, net.config.asset, &auth),
            moved,
        ));
    }

    // Reconciliation finishes on its own: once every authorization has expired, one pass
    // (every second here) closes what never reached the chain.
    let wait = last_valid_before.saturating_sub(now()) + 3;
    tokio::time::sleep(Duration::from_secs(wait)).await;
    assert!(gw.stop(), "paygate did not stop:\n{}", gw.log());
    let store = SledStore::open(&gw.dir.path().join("data")).expect("open the store");
    tally.stuck = store.unfinished_payments().await.unwrap().len();
    for (key, moved) in &payments {
        let record = store.payment_for_nonce(key).await.unwrap();
        if *moved && !matches!(record.map(|r| r.status), Some(PaymentStatus::Settled)) {
            tally.lost += 1;
        }
    }
    println!("crash tally (kill window {window_ms} ms): {tally:?}");
    assert_eq!(tally.served_twice, 0, "{tally:?}");
    assert_eq!(tally.lost, 0, "{tally:?}");
    assert_eq!(tally.stuck, 0, "{tally:?}");
}
