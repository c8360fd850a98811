//! Crash safety of paid requests: the real binary is SIGKILLed at a random moment while a paid
//! request is in flight (before the nonce is reserved, while it settles on anvil, after it
//! settled, while the upstream answers), restarted on the same data, and the client retries
//! with the same payment as it would. Counted over all trials, every one must be zero:
//! requests served twice for one payment, payments that moved money without a `SETTLED` record,
//! and reservations still unfinished once reconciliation has run on its own.
//!
//! `PAYGATE_CRASH_TRIALS` sets the number of trials (20 in `make test`; `make crash` runs 120 and
//! prints the tally that RELIABILITY.md reports).

use crate::common;

use common::chain::{address, now, Chain, PaymentSpec};
use common::crash::{retry_until_final, Tally};
use common::upstream::Upstream;
use common::*;
use rand::Rng;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

mod vouchers;

/// The $0.01 of `create_paid_route`, in base units.
const PRICE: u64 = 10_000;
/// Authorizations expire this long after signing, so reconciliation can close the ones that
/// never reached the chain within the test (the gateway wants 6 s of validity left, so a retry
/// within a few seconds is still checked against the replay guard, not refused as expiring).
const VALIDITY_SECS: u64 = 12;

/// `PAYGATE_CRASH_TRIALS`, 20 by default.
fn trials() -> usize {
    trials_or(20)
}

/// `PAYGATE_CRASH_TRIALS`, else `default`.
fn trials_or(default: usize) -> usize {
    std::env::var("PAYGATE_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Funded payouts run issue 30's 120 trials in every `make test` (about 50 s each).
const FUNDED_TRIALS: usize = 120;

/// A gateway on a new chain with `extra` environment, org `acme` (receiver: account 9) and an
/// upstream: the chain, gateway, upstream, receiver and the org's key.
async fn acme_on_chain(
    extra: &[(&str, &str)],
) -> (Chain, Gateway, Upstream, alloy_primitives::Address, String) {
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let gw = Gateway::start_with_owned(env).await;
    let upstream = Upstream::start().await;
    let receiver = address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    (chain, gw, upstream, receiver, key)
}

#[tokio::test]
async fn sigkill_at_random_points_of_paid_requests_loses_nothing() {
    paid_request_trials(Protocol::X402).await;
}

/// The same for MPP credentials (`Authorization: Payment`) whose challenges may be paid for
/// 10 s: a retry after a restart often comes when the challenge is too close to its end to be
/// settled, and must still be answered by the payment its first attempt took.
#[tokio::test]
async fn sigkill_at_random_points_of_mpp_payments_loses_nothing() {
    paid_request_trials(Protocol::Mpp).await;
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Protocol {
    X402,
    Mpp,
}

/// A new payment by `payer` of the echo route in `protocol`: its authorization and the header
/// carrying it.
async fn new_payment(
    gw: &Gateway,
    protocol: Protocol,
    payer: usize,
    receiver: alloy_primitives::Address,
) -> (PaymentSpec, (&'static str, String)) {
    match protocol {
        Protocol::X402 => {
            let mut spec = PaymentSpec::new(payer, receiver, PRICE);
            spec.valid_before = now() + VALIDITY_SECS;
            let header = spec.v1_header();
            (spec, ("X-PAYMENT", header))
        }
        Protocol::Mpp => {
            let c = crate::mpp::challenge_at(gw, "/gateway/acme/echo").await;
            let spec = crate::mpp::spec_for(&c, payer, receiver, PRICE);
            let header = crate::mpp::credential_for(&c, payer, receiver, PRICE, |_, _| {});
            (spec, ("Authorization", header))
        }
    }
}

async fn paid_request_trials(protocol: Protocol) {
    let trials = trials();
    let (chain, mut gw, upstream, receiver, key) = acme_on_chain(&[
        ("PAYGATE__FACILITATOR__RECONCILE_INTERVAL_SECONDS", "1"),
        ("PAYGATE__FACILITATOR__SETTLE_TIMEOUT_SECONDS", "5"),
        ("PAYGATE__FACILITATOR__MPP_CHALLENGE_SECONDS", "10"),
    ])
    .await;
    gw.create_paid_route(&key, "echo", &format!("{}/echo", upstream.url), false)
        .await;
    let net =
        paygate_x402::network::Networks::from_config(&paygate_x402::network::builtin_networks())
            .resolve("base-sepolia")
            .unwrap()
            .clone();

    // Paid requests without a crash: each must be served, and the quickest sets the window the
    // kills are spread over (uniformly over a request's life, from before the nonce is reserved
    // to after the upstream answered; the first one also pays for connections and caches).
    let mut quickest = Duration::MAX;
    for _ in 0..3 {
        let (_, header) = new_payment(&gw, protocol, 1, receiver).await;
        let t0 = Instant::now();
        let r = gw
            .http
            .get(gw.url("/gateway/acme/echo"))
            .header(header.0, header.1)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", gw.log());
        quickest = quickest.min(t0.elapsed());
    }
    let window_ms = (quickest.as_millis() as u64 * 3 / 2).max(10);

    let mut rng = rand::thread_rng();
    let mut tally = Tally::default();
    let mut last_valid_before = 0;
    for i in 0..trials {
        let (spec, header) = new_payment(&gw, protocol, 1 + i % 6, receiver).await;
        last_valid_before = spec.valid_before;
        let hits_before = upstream.hits();

        let (http, url, h) = (
            gw.http.clone(),
            gw.url("/gateway/acme/echo"),
            header.clone(),
        );
        let first = tokio::spawn(async move {
            match http.get(url).header(h.0, h.1).send().await {
                Ok(r) => r.status().as_u16().to_string(),
                Err(_) => "cut".to_string(),
            }
        });
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..=window_ms))).await;
        gw.kill();
        *tally.first.entry(first.await.unwrap()).or_default() += 1;
        gw.restart().await;

        // The client retries the same payment until the answer is not "try again later".
        let retry = retry_until_final(
            &gw,
            "/gateway/acme/echo",
            (header.0, &header.1),
            Duration::from_secs(30),
        )
        .await;
        *tally.retry.entry(retry).or_default() += 1;
        let served = upstream.hits() - hits_before;
        tally.judge(&chain.rpc, &net, &spec, served).await;
    }

    // Reconciliation finishes on its own: once every authorization has expired, one pass
    // (every second here) closes what never reached the chain.
    let wait = last_valid_before.saturating_sub(now()) + 3;
    tokio::time::sleep(Duration::from_secs(wait)).await;
    // Plan slots: on a cluster taken in the store with each reservation, so once every payment
    // is decided the month's count is the settled payments (a killed node's slot came back).
    let used = plan_used(&gw, &key).await;
    let settled = settled_count(&gw, &key).await;
    assert!(gw.stop(), "paygate did not stop:\n{}", gw.log());
    tally.close(gw.store().await.as_ref()).await;
    println!("crash tally ({protocol:?}, kill window {window_ms} ms): {tally:?}, plan slots {used} for {settled} settled");
    tally.assert_clean();
    if on_postgres() {
        assert_eq!(used, settled, "plan slots counted = payments settled");
    }
}

/// The organisation's paid requests this month, as its plan counts them.
async fn plan_used(gw: &Gateway, key: &str) -> u64 {
    let v: serde_json::Value = gw
        .api(key, reqwest::Method::GET, "/api/usage", None)
        .await
        .json()
        .await
        .unwrap();
    v["usedThisMonth"].as_u64().expect("usedThisMonth")
}

/// The organisation's settled payments (every page of the ledger).
async fn settled_count(gw: &Gateway, key: &str) -> u64 {
    let mut count = 0;
    let mut cursor = String::new();
    loop {
        let mut path = "/api/payments?status=SETTLED&limit=500".to_string();
        if !cursor.is_empty() {
            path += &format!("&cursor={cursor}");
        }
        let v: serde_json::Value = gw
            .api(key, reqwest::Method::GET, &path, None)
            .await
            .json()
            .await
            .unwrap();
        count += v["payments"].as_array().map_or(0, Vec::len) as u64;
        match v["nextCursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => return count,
        }
    }
}

#[derive(Default, Debug)]
struct PayoutTally {
    trials: usize,
    /// Provider payouts beyond the first for one pay request (one quote, one key).
    double_payouts: usize,
    /// Provider payouts whose reference is no payment paygate knows: money out, no record.
    unrecorded: usize,
    /// Pay requests that never got their `202` from the retries.
    unanswered: usize,
    /// Payments not `SETTLED` once the provider's webhooks and the payout reconciliation ran.
    stuck: usize,
    /// The `paymentId` of the retry differs from the first answer's (when the first answered).
    answer_changed: usize,
    /// With on-chain funding: USDC the payout wallet paid beyond one funding per provider
    /// payout (base units; must be 0), and USDC paid with no provider payout to show for it.
    funded_beyond_payouts: i64,
    first: BTreeMap<String, usize>,
    retry: BTreeMap<String, usize>,
}

/// Crash safety of payouts: the binary (with its sandbox provider, whose store survives) is
/// SIGKILLed at a random moment of a `POST /corridors/{id}/pay` (before the key is reserved,
/// while the provider records the payout, after it recorded it and before paygate heard back,
/// after the answer), restarted, and the client retries with the same `Idempotency-Key` and body
/// until it gets its `202`. Then every payout must settle, and the provider must hold exactly one
/// payout per pay request, each with a reference paygate knows.
#[tokio::test]
async fn sigkill_at_random_points_of_payouts_pays_once() {
    payout_trials(None, &[]).await;
}

/// The same with payouts funded on chain from the organisation's payout wallet (the sandbox
/// checks each funding on chain before it accepts the payout; a kill may land before, during or
/// after the transfer): the chain's balances are the judge. The payout wallet paid exactly one
/// funding per provider payout, and the provider's address received exactly that.
#[tokio::test]
async fn sigkill_at_random_points_of_funded_payouts_funds_once() {
    let chain = Chain::start();
    payout_trials(Some(&chain), &[]).await;
}

/// The same through the CPN adapter against the provider simulator: quotes and payments in
/// CPN's shapes, the beneficiary encrypted, the payment's `idempotencyKey` fixed by the payout.
#[tokio::test]
async fn sigkill_at_random_points_of_cpn_payouts_funds_once() {
    let chain = Chain::start();
    payout_trials(Some(&chain), &[("PAYGATE__PAYOUT__PROVIDER", "cpn")]).await;
}

/// The payout crash trials, on `chain` with on-chain funding when given, with `extra`
/// environment.
async fn payout_trials(chain: Option<&Chain>, extra: &[(&str, &str)]) {
    // The sandbox's funding address (account 8).
    let provider_address = address(8);
    let trials = if chain.is_some() {
        trials_or(FUNDED_TRIALS)
    } else {
        trials()
    };
    let mut env: Vec<(String, String)> = vec![
        (
            "PAYGATE__PAYOUT__SANDBOX__WEBHOOK_DELAY_MS".into(),
            "100".into(),
        ),
        // The provider takes a while before and after recording a payout, so kills land on
        // both sides of it.
        (
            "PAYGATE__PAYOUT__SANDBOX__ACCEPT_DELAY_MS".into(),
            "20".into(),
        ),
        (
            "PAYGATE__PAYOUT__SANDBOX__ANSWER_DELAY_MS".into(),
            "20".into(),
        ),
        (
            "PAYGATE__PAYOUT__RECONCILE_INTERVAL_SECONDS".into(),
            "1".into(),
        ),
        (
            "PAYGATE_WEBHOOK_SECRETS".into(),
            "crash-test-webhook-secret".into(),
        ),
    ];
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    if let Some(chain) = chain {
        env.extend(chain.gateway_env());
        for (k, v) in [
            (
                "PAYGATE_MASTER_KEY",
                "c0ffee00d15ea5e5c0ffee00d15ea5e5c0ffee00d15ea5e5c0ffee00d15ea5e5",
            ),
            ("PAYGATE__PAYOUT__FUNDING_NETWORK", "base-sepolia"),
        ] {
            env.push((k.into(), v.into()));
        }
        env.push((
            "PAYGATE__PAYOUT__SANDBOX__FUNDING_ADDRESS".into(),
            provider_address.to_checksum(None),
        ));
    }
    let mut gw = Gateway::start_with_owned(env).await;
    let (_, key) = gw.create_org("acme", Some(WALLET_A)).await;
    // Funded: the payout wallet gets 900 USDC from payer account 1.
    let mut from = WALLET_B.to_string();
    let mut balances = None;
    if let Some(chain) = chain {
        let r = gw
            .api(&key, reqwest::Method::GET, "/api/payout-wallet", None)
            .await;
        let w: serde_json::Value = r.json().await.unwrap();
        from = w["address"].as_str().unwrap().to_string();
        let wallet: alloy_primitives::Address = from.parse().unwrap();
        chain.send_usdc(1, wallet, 900_000_000).await;
        balances = Some((
            wallet,
            chain.balance(wallet).await,
            chain.balance(provider_address).await,
        ));
    }
    let corridor = gw.active_corridor(&key, "KES").await;
    let pay_url = gw.url(&format!("/corridors/{corridor}/pay"));
    let quote = |gw: &Gateway| {
        let r = gw
            .http
            .get(gw.url(&format!("/corridors/{corridor}/quote?amount=5")));
        r.bearer_auth(&key).send()
    };
    let body_for = |q: &serde_json::Value| {
        serde_json::json!({
            "quoteId": q["quoteId"], "fromAddress": from, "amountUSDC": q["amount"],
            "beneficiary": {"name": "Wanjiru K", "bankName": "Equity Bank",
                "accountNumber": "12345678", "country": "KE", "currency": "KES"},
        })
    };
    let pay = |http: &reqwest::Client, idem: &str, body: &serde_json::Value| {
        http.post(&pay_url)
            .bearer_auth(&key)
            .header("Idempotency-Key", idem)
            .json(body)
            .send()
    };

    // Pays without a crash: the quickest sets the kill window.
    let mut quickest = Duration::MAX;
    for i in 0..3 {
        let q: serde_json::Value = quote(&gw).await.unwrap().json().await.unwrap();
        let t0 = Instant::now();
        let r = pay(&gw.http, &format!("warm-{i}"), &body_for(&q))
            .await
            .unwrap();
        assert_eq!(r.status(), 202, "{}", gw.log());
        quickest = quickest.min(t0.elapsed());
    }
    let window_ms = (quickest.as_millis() as u64 * 3 / 2).max(10);

    let mut rng = rand::thread_rng();
    let mut tally = PayoutTally::default();
    // (quote id, payment id answered to the client)
    let mut answered: Vec<(String, String)> = Vec::new();
    for i in 0..trials {
        let q: serde_json::Value = quote(&gw).await.unwrap().json().await.unwrap();
        let quote_id = q["quoteId"].as_str().expect("quoteId").to_string();
        let body = body_for(&q);
        let idem = format!("trial-{i}");
        let (http, b, k) = (gw.http.clone(), body.clone(), idem.clone());
        let first = tokio::spawn({
            let fut = pay(&http, &k, &b);
            async move {
                match fut.await {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let v: serde_json::Value = r.json().await.unwrap_or_default();
                        (
                            status.to_string(),
                            v["paymentId"].as_str().map(str::to_string),
                        )
                    }
                    Err(_) => ("cut".to_string(), None),
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..=window_ms))).await;
        gw.kill();
        let (first_status, first_id) = first.await.unwrap();
        *tally.first.entry(first_status).or_default() += 1;
        gw.restart().await;

        // The client retries with the same key and body until it gets its 202.
        let deadline = Instant::now() + Duration::from_secs(30);
        let (retry, id) = loop {
            let (status, id) = match pay(&gw.http, &idem, &body).await {
                Ok(r) => {
                    let status = r.status().as_u16();
                    let v: serde_json::Value = r.json().await.unwrap_or_default();
                    (status, v["paymentId"].as_str().map(str::to_string))
                }
                Err(_) => (0, None),
            };
            // 409: still in flight; 5xx: provider outcome unknown yet.
            let again = status == 409 || status >= 500 || status == 0;
            if !again || Instant::now() > deadline {
                break (status.to_string(), id);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        *tally.retry.entry(retry).or_default() += 1;
        tally.trials += 1;
        match id {
            Some(id) => {
                if first_id.as_ref().is_some_and(|f| *f != id) {
                    tally.answer_changed += 1;
                }
                answered.push((quote_id, id));
            }
            None => tally.unanswered += 1,
        }
    }

    // Every payout settles (webhooks, or the payout reconciliation every second).
    let ids = answered.iter().map(|(_, id)| id.clone()).collect();
    let pending = gw
        .unsettled_payouts(&key, &corridor, ids, Duration::from_secs(60))
        .await;
    tally.stuck = pending.len();

    // The provider's side: one payout per pay request, each one paygate knows.
    let provider: Vec<serde_json::Value> = gw.provider_payouts().await;
    for id in &pending {
        let path = format!("/corridors/{corridor}/payments/{id}");
        let ours: serde_json::Value = gw
            .api(&key, reqwest::Method::GET, &path, None)
            .await
            .json()
            .await
            .unwrap_or_default();
        let theirs = provider.iter().find(|p| p["reference"] == id.as_str());
        let log = gw.log();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(id.as_str())).collect();
        println!(
            "stuck payout {id}:\n ours: {ours}\n provider's: {theirs:?}\n log:\n{}",
            lines.join("\n")
        );
    }
    let mut per_quote: BTreeMap<String, usize> = BTreeMap::new();
    for p in &provider {
        let reference = p["reference"].as_str().unwrap_or_default();
        let r = gw
            .api(
                &key,
                reqwest::Method::GET,
                &format!("/corridors/{corridor}/payments/{reference}"),
                None,
            )
            .await;
        if r.status() != 200 {
            tally.unrecorded += 1;
            continue;
        }
        let v: serde_json::Value = r.json().await.unwrap();
        let quote_id = v["quoteId"].as_str().unwrap_or_default().to_string();
        *per_quote.entry(quote_id).or_default() += 1;
    }
    tally.double_payouts = per_quote.values().map(|n| n.saturating_sub(1)).sum();
    for (quote_id, _) in &answered {
        assert!(
            per_quote.contains_key(quote_id),
            "an answered payout is not at the provider: {quote_id}"
        );
    }
    // The chain's judgement: one funding (5 USDC less the 0.50 % platform fee) per provider
    // payout, no more, no less, from the payout wallet to the provider.
    if let (Some(chain), Some((wallet, wallet_before, provider_before))) = (chain, balances) {
        let per_payout: u64 = 4_975_000;
        let paid = wallet_before - chain.balance(wallet).await;
        let received = chain.balance(provider_address).await - provider_before;
        assert_eq!(paid, received, "the wallet's USDC went to the provider");
        tally.funded_beyond_payouts = paid as i64 - (provider.len() as u64 * per_payout) as i64;
    }
    println!(
        "payout crash tally (kill window {window_ms} ms, funded on chain: {}): {tally:?}",
        chain.is_some()
    );
    assert_eq!(tally.funded_beyond_payouts, 0, "{tally:?}");
    assert_eq!(tally.double_payouts, 0, "{tally:?}");
    assert_eq!(tally.unrecorded, 0, "{tally:?}");
    assert_eq!(tally.unanswered, 0, "{tally:?}");
    assert_eq!(tally.stuck, 0, "{tally:?}");
    assert_eq!(tally.answer_changed, 0, "{tally:?}");
}

/// How the voucher trials ended.
#[derive(Default, Debug)]
struct ChannelTally {
    trials: usize,
    /// Requests the origin received (every one admitted with a valid voucher).
    served: usize,
    /// Steps the channel's record committed.
    charged: usize,
    /// Served, and the kill came between the origin's answer and the charge's write: the
    /// request is not charged (the documented loss of a crash, never a double charge).
    served_not_charged: usize,
    /// Charged without the origin having received the request. Must be 0.
    charged_not_served: usize,
    /// Answered 200 (a success receipt) and not charged after the restart: the charge's write
    /// did not outlive the process. Must be 0.
    answered_not_charged: usize,
    /// Charges the store held before a trial and not after it. Must be 0.
    charges_lost: usize,
    /// A trial after which the payer could not go on with the channel. Must be 0.
    stuck: usize,
    first: BTreeMap<String, usize>,
}

/// What the store says the organisation's one channel was charged.
async fn stored_charge(gw: &Gateway, key: &str) -> u128 {
    let stored = gw
        .api(key, reqwest::Method::GET, "/api/channels", None)
        .await
        .json::<serde_json::Value>()
        .await
        .unwrap();
    stored["channels"][0]["charged"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}
