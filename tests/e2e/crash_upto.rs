//! Crash safety of `upto` payments: the real binary is SIGKILLed at a random moment while a
//! usage-priced call paid by a Permit2 `upto` authorization is in flight (before its nonce is
//! reserved, while the origin answers, while its charge settles), restarted on the same data,
//! and the client sends the same authorization again for a while. Once every authorization's
//! deadline has passed and reconciliation has run, counted over all trials: a call served twice
//! (must be 0) unless its first answer was lost to the kill and the retry was the one served
//! (a charge reconciliation recorded, redeemed once: counted apart, issue 52), money that moved without a `SETTLED` record of that charge (lost, must be 0), a
//! record claiming money that never moved (phantom, must be 0), records still open (stuck, must
//! be 0); and, reported, calls served whose charge never settled (the seller's loss: a kill
//! between the origin's answer and the settlement, as README says).
//!
//! `PAYGATE_CRASH_TRIALS` sets the number of trials (20 by default).

use crate::common;

use alloy_primitives::U256;
use alloy_sol_types::SolCall;
use common::chain::{address, now, Chain, USDC};
use common::crash::retry_until_final;
use common::permit2::UptoSpec;
use common::upstream::Upstream;
use common::windows::challenge_at;
use common::*;
use paygate_domain::model::{nonce_key, PaymentStatus};
use paygate_x402::permit2::{IErc20Permit2, PERMIT2_ADDRESS};
use rand::Rng;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const PATH: &str = "/gateway/acme/llm?upstream_charge=0.00042";
/// What the origin states each call cost, in base units.
const CHARGE: u64 = 420;
/// Authorizations expire this long after signing, so reconciliation closes within the test the
/// reservations a kill left (the gateway wants 6 s of validity left).
const VALIDITY_SECS: u64 = 12;

#[derive(Default, Debug)]
struct UptoTally {
    served_twice: usize,
    /// Charged by reconciliation after the kill cut the answer, then served on the retry (the
    /// origin answered twice, the payer once).
    redeemed: usize,
    lost: usize,
    phantom: usize,
    stuck: usize,
    /// Money moved and the call was served (the normal outcome).
    paid_and_served: usize,
    /// Served, never charged: the seller's loss.
    served_unpaid: usize,
    /// Neither served nor charged.
    neither: usize,
    first: BTreeMap<String, usize>,
    retry: BTreeMap<String, usize>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_points_of_upto_payments_charges_each_at_most_once() {
    let trials = std::env::var("PAYGATE_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20usize);
    let chain = Chain::start();
    let mut gw = Gateway::start_with_owned(chain.reconciling_env()).await;
    let upstream = Upstream::start().await;
    let receiver = address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    gw.create_route(
        &key,
        json!({"path": "llm", "priceUSD": 0.01, "schemes": ["upto"], "pricing": "usage",
               "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia"}),
    )
    .await;
    let approve = IErc20Permit2::approveCall {
        spender: PERMIT2_ADDRESS,
        amount: U256::MAX,
    }
    .abi_encode();
    for payer in 1..=6 {
        chain
            .send(payer, USDC.parse().unwrap(), approve.clone())
            .await
            .expect("approve Permit2");
    }
    let accepted: Value = challenge_at(&gw, "/gateway/acme/llm").await["accepts"][0].clone();
    let facilitator = address(0);

    // Calls without a crash: each served and charged; the quickest sets the kill window.
    let mut quickest = Duration::MAX;
    for _ in 0..3 {
        let header = UptoSpec::new(1, receiver, 10_000, facilitator).header(&accepted);
        let t0 = Instant::now();
        assert_eq!(
            retry_until_final(&gw, PATH, ("PAYMENT-SIGNATURE", &header), Duration::ZERO).await,
            "200",
            "{}",
            gw.log()
        );
        quickest = quickest.min(t0.elapsed());
    }
    let window_ms = (quickest.as_millis() as u64 * 3 / 2).max(10);

    let mut rng = rand::thread_rng();
    let mut tally = UptoTally::default();
    let mut seen = Vec::new();
    for i in 0..trials {
        let mut spec = UptoSpec::new(1 + i % 6, receiver, 10_000, facilitator);
        spec.deadline = now() + VALIDITY_SECS;
        let header = spec.header(&accepted);
        let hits_before = upstream.hits();
        let (http, url, h) = (gw.http.clone(), gw.url(PATH), header.clone());
        let first = tokio::spawn(async move {
            match http.get(url).header("PAYMENT-SIGNATURE", h).send().await {
                Ok(r) => r.status().as_u16().to_string(),
                Err(_) => "cut".to_string(),
            }
        });
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..=window_ms))).await;
        gw.kill();
        *tally.first.entry(first.await.unwrap()).or_default() += 1;
        gw.restart().await;
        let again = retry_until_final(
            &gw,
            PATH,
            ("PAYMENT-SIGNATURE", &header),
            Duration::from_secs(2),
        )
        .await;
        *tally.retry.entry(again).or_default() += 1;
        seen.push((spec, hits_before));
    }

    // Every deadline passes; reconciliation (every second) closes what never settled.
    let last = seen.last().map_or(0, |(s, _)| s.deadline);
    tokio::time::sleep(Duration::from_secs(last.saturating_sub(now()) + 3)).await;
    let hits_after: Vec<usize> = (0..seen.len())
        .map(|i| seen.get(i + 1).map_or(upstream.hits(), |(_, h)| *h) - seen[i].1)
        .collect();
    assert!(gw.stop(), "paygate did not stop:\n{}", gw.log());
    let store = gw.store().await;
    tally.stuck = store.unfinished_payments().await.unwrap().len();
    for ((spec, _), served) in seen.iter().zip(hits_after) {
        let auth = spec.authorization();
        let moved = paygate_x402::facilitator::embedded::permit2_nonce_used(
            &chain.rpc, auth.from, auth.nonce,
        )
        .await
        .expect("nonceBitmap");
        let record = store
            .payment_for_nonce(&nonce_key(84532, spec.token, &auth))
            .await
            .unwrap();
        let recorded = record
            .as_ref()
            .filter(|r| r.status == PaymentStatus::Settled)
            .map_or(0, |r| r.amount.0);
        let redeemed = record.as_ref().is_some_and(|r| r.redeemed_at.is_some());
        tally.served_twice += usize::from(served > 1 && !redeemed);
        tally.redeemed += usize::from(redeemed);
        tally.lost += usize::from(moved && recorded != CHARGE);
        tally.phantom += usize::from(!moved && recorded > 0);
        match (moved, served > 0) {
            (true, _) => tally.paid_and_served += 1,
            (false, true) => tally.served_unpaid += 1,
            (false, false) => tally.neither += 1,
        }
    }
    println!("upto crash tally ({trials} trials, kill window {window_ms} ms): {tally:?}");
    assert_eq!(tally.served_twice, 0, "{tally:?}");
    assert_eq!(tally.lost, 0, "{tally:?}");
    assert_eq!(tally.phantom, 0, "{tally:?}");
    assert_eq!(tally.stuck, 0, "{tally:?}");
}
