//! The money invariants (`docs/design/invariants.md`, "The money invariants") checked against
//! the chain by a model test (issue 52): one gateway (on `make test`'s backend: sled, or
//! PostgreSQL in the second pass) on anvil mining a block every second (automine off, so
//! settlements wait and some outlive their request), driven by a seeded random interleaving of
//! `exact` payments (EIP-3009 in USDC, and Permit2 in the dev chain's token without EIP-3009),
//! MPP `charge` payments of the same route (`Authorization: Payment`, as `mppx` signs them),
//! `upto` payments (the origin stating a charge, or none), `auth-capture`
//! payments (served, or refused by the origin), the same payments sent again, refunds (partial, too large, keys repeated, concurrent) and `kill -9`
//! with a restart, up to three at once. Then, as a client would, every payment and refund is
//! asked again until its answer is final, reconciliation closes what is open, and:
//!
//! 1. nothing served unpaid: every payment answered `200` is `SETTLED`;
//! 2. nothing paid unserved: every `SETTLED` `exact` or `upto` payment (charged) was answered
//!    `200` (a kill after
//!    its settlement is served on its retry); an escrowed payment captured and never answered
//!    (a kill between the capture and the answer) is counted and reported;
//! 3. the ledger equals the chain: `GET /api/ledger/audit` finds no difference, and in total
//!    (token by token) the payers lost and the seller gained exactly the ledger's settled
//!    amounts, captures less refunds; nothing is left held in escrow;
//! 4. refunds never above the capture, one per key;
//! 5. the deployment's own USDC (its relayer's) never falls;
//! 6. every receipt is for a served payment of the organisation's own route; none for a
//!    failed one;
//! 7. an access window serves no call unpaid: a payer's sign-ins answered `200` are at most
//!    the calls its settled payments for the window route bought (and none without one);
//! 8. a payment channel (`batch-settlement`, paid by `paygate pay --channel`: a deposit, then
//!    vouchers) serves nothing unpaid and charges nothing undeposited (its `200`s times the
//!    price <= charged <= its balance), and once the seller claimed, its record equals the
//!    settlement contract's channel (balance, claimed), the contract holds exactly the
//!    channels' unclaimed balances (no deposit the gateway lost track of), and the seller
//!    received what was claimed (in the token-by-token totals of 3).
//!
//! `PAYGATE_MODEL_RUNS` (default 1) interleavings of `PAYGATE_MODEL_OPS` (default 24) steps;
//! `PAYGATE_MODEL_SEED` replays one.

use crate::common;

use alloy_primitives::Address;
use common::chain::{address, Chain, PaymentSpec, USDC};
use common::upstream::Upstream;
use common::*;
use paygate_domain::model::{GatewayPayment, PaymentStatus, PaymentTransfer};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const MASTER_KEY: &str = "3c5e7a9b1d2f4a6c8e0b2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a1c3e5b7d9f2a4c";
const PRICE: u64 = 10_000;
const EXACT: &str = "/gateway/acme/echo";
const HELD: &str = "/gateway/acme/held";
const UPTO: &str = "/gateway/acme/llm";
/// Priced in the dev chain's token without EIP-3009: `exact` through Permit2.
const PERMIT2: &str = "/gateway/acme/report";
const TDOL: Address = paygate_x402::permit2::DEV_TEST_TOKEN_ADDRESS;
/// An access window route: a payment buys `WINDOW_CALLS` calls by signing in.
const WINDOW: &str = "/gateway/acme/hourly";
const WINDOW_CALLS: usize = 2;
/// A route paid over payment channels (`batch-settlement`).
const CHANNEL: &str = "/gateway/acme/chan";
/// How long an `exact` or `upto` authorization is valid after signing.
const VALIDITY_SECS: u64 = 20;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One payment the model's client made: where, with which header, and what it was answered.
#[derive(Clone, Debug)]
struct Sent {
    path: String,
    header: (&'static str, String),
    nonce_key: String,
    answers: Vec<String>,
}

impl Sent {
    fn final_answer(&self) -> bool {
        self.answers.last().is_some_and(|a| !pending(a))
    }
}

fn pending(answer: &str) -> bool {
    answer == "cut" || answer.starts_with('5') && !answer.ends_with(" origin")
}

/// Sends `header` to `url`: `200`, `NNN origin` (the origin's own answer, forwarded), the
/// gateway's status and code, or `cut`.
async fn send(http: &reqwest::Client, url: &str, header: &(&'static str, String)) -> String {
    match http.get(url).header(header.0, &header.1).send().await {
        Ok(r) if r.status() == 200 => "200".into(),
        Ok(r) => {
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            match body["code"].as_str() {
                Some(code) => format!("{status} {code}"),
                // No error of the gateway's: the origin's own answer, forwarded.
                None => format!("{status} origin"),
            }
        }
        Err(_) => "cut".into(),
    }
}

/// The nonce key of a signed payment header (the ledger's replay key).
fn nonce_key_of(header: &str, version: paygate_x402::payment::ProtocolVersion) -> String {
    let payload = paygate_x402::payment::PaymentPayload::decode(header.as_bytes(), version)
        .expect("a payment header");
    let auth = payload.authorization().expect("an authorization");
    let usdc: Address = USDC.parse().unwrap();
    paygate_domain::model::nonce_key(84532, usdc, &auth)
}

/// A new `exact` payment by `payer` (EIP-3009, x402 v1) of the route at `path`.
fn exact(payer: usize, path: &str) -> Sent {
    let mut spec = PaymentSpec::new(payer, address(9), PRICE);
    // Short-lived, as an agent signs them: one never sent expires within the test, so
    // reconciliation can close it.
    spec.valid_before = common::chain::now() + VALIDITY_SECS;
    let header = spec.v1_header();
    Sent {
        path: path.into(),
        nonce_key: nonce_key_of(&header, paygate_x402::payment::ProtocolVersion::V1),
        header: ("X-PAYMENT", header),
        answers: Vec::new(),
    }
}

/// A new MPP `charge` payment by `payer` (an `Authorization: Payment` credential, as `mppx`
/// signs it) of the challenge in the `402` of the `exact` route (none while the gateway is
/// down).
async fn mpp(http: &reqwest::Client, base: &str, payer: usize) -> Option<Sent> {
    let r = http.get(format!("{base}{EXACT}")).send().await.ok()?;
    let c = crate::mpp::params_of(r.headers().get("www-authenticate")?.to_str().ok()?)?;
    let spec = crate::mpp::spec_for(&c, payer, address(9), PRICE);
    let usdc: Address = USDC.parse().unwrap();
    Some(Sent {
        path: EXACT.into(),
        nonce_key: paygate_domain::model::nonce_key(84532, usdc, &spec.authorization()),
        header: (
            "Authorization",
            crate::mpp::credential_for(&c, payer, address(9), PRICE, |_, _| {}),
        ),
        answers: Vec::new(),
    })
}

/// A new `upto` payment by `payer` (Permit2, naming `facilitator`) of the route's `accepted`
/// requirement; the origin states `charge` (USDC base units) or nothing (the ceiling).
fn upto(payer: usize, facilitator: Address, accepted: &Value, charge: Option<u64>) -> Sent {
    let mut spec = common::permit2::UptoSpec::new(payer, address(9), PRICE, facilitator);
    spec.deadline = common::chain::now() + VALIDITY_SECS;
    let usdc: Address = USDC.parse().unwrap();
    let path = match charge {
        Some(c) => format!("{UPTO}?upstream_charge=0.{c:06}"),
        None => UPTO.to_string(),
    };
    Sent {
        path,
        nonce_key: paygate_domain::model::nonce_key(84532, usdc, &spec.authorization()),
        header: ("PAYMENT-SIGNATURE", spec.header(accepted)),
        answers: Vec::new(),
    }
}

/// A new `exact` payment by `payer` through Permit2 (the route's token has no EIP-3009) of the
/// route's `accepted` requirement.
fn permit2_exact(payer: usize, accepted: &Value) -> Sent {
    let mut spec = common::permit2::UptoSpec::exact(payer, address(9), PRICE, TDOL);
    spec.deadline = common::chain::now() + VALIDITY_SECS;
    Sent {
        path: PERMIT2.into(),
        nonce_key: paygate_domain::model::nonce_key(84532, TDOL, &spec.authorization()),
        header: ("PAYMENT-SIGNATURE", spec.header(accepted)),
        answers: Vec::new(),
    }
}

/// A new `auth-capture` payment by `payer` of the `402` at `url` (paygate's own client of the
/// scheme), its origin failing when `fail`.
async fn escrowed(http: &reqwest::Client, base: &str, payer: usize, fail: bool) -> Option<Sent> {
    let r = http.get(format!("{base}{HELD}")).send().await.ok()?;
    let doc = paygate_x402::b64_json(r.headers().get("payment-required")?.to_str().ok()?)?;
    let networks =
        paygate_x402::network::Networks::from_config(&paygate_x402::network::builtin_networks());
    let offer =
        paygate_x402::auth_capture::client::EscrowOffer::read(&doc["accepts"][0], &networks)
            .ok()?;
    let header = offer
        .payment_header(&common::chain::signer(payer), paygate_domain::unix_now())
        .ok()?;
    let path = if fail {
        format!("{HELD}?upstream_status=500")
    } else {
        HELD.to_string()
    };
    Some(Sent {
        path,
        nonce_key: nonce_key_of(&header, paygate_x402::payment::ProtocolVersion::V2),
        header: ("PAYMENT-SIGNATURE", header),
        answers: Vec::new(),
    })
}

/// A refund the model's seller asked: payment, key, amount, and each answer's status.
#[derive(Clone, Debug)]
struct Asked {
    payment: String,
    key: String,
    amount: &'static str,
    answers: Vec<u16>,
}

async fn refund(http: &reqwest::Client, base: &str, api_key: &str, a: &Asked) -> u16 {
    let r = http
        .post(format!("{base}/api/payments/{}/refund", a.payment))
        .bearer_auth(api_key)
        .header("Idempotency-Key", &a.key)
        .json(&json!({"amountUSDC": a.amount}))
        .send()
        .await;
    r.map(|r| r.status().as_u16()).unwrap_or(0)
}

/// One step of an interleaving.
#[derive(Debug, Clone)]
enum Step {
    Exact(usize),
    /// An MPP `charge` of the `exact` route.
    Mpp(usize),
    Permit2(usize),
    /// A payment opening (or adding to) an access window.
    Window(usize),
    /// A call signing in to the window.
    SignIn(usize),
    /// A call paid over the payer's channel (`paygate pay --channel`).
    Channel(usize),
    Upto {
        payer: usize,
        charge: Option<u64>,
    },
    Escrow {
        payer: usize,
        fail: bool,
    },
    Again(usize),
    Refund {
        pick: usize,
        key: u8,
        amount: &'static str,
    },
}

async fn usdc(chain: &Chain, who: Address) -> u64 {
    balance(chain, USDC.parse().unwrap(), who).await
}

async fn balance(chain: &Chain, token: Address, who: Address) -> u64 {
    let b = paygate_x402::facilitator::embedded::balance_of(&chain.rpc, token, who)
        .await
        .expect("balanceOf");
    u64::try_from(b).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_interleavings_keep_the_money_invariants_on_a_slow_chain() {
    let runs = env_or("PAYGATE_MODEL_RUNS", 1);
    let ops = env_or("PAYGATE_MODEL_OPS", 24) as usize;
    let mut totals = (0usize, 0usize, 0usize, 0usize);
    for run in 0..runs {
        let seed = std::env::var("PAYGATE_MODEL_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(rand::random::<u64>);
        println!("money model run {run}: seed {seed}, {ops} steps");
        let t = one_interleaving(seed, ops).await;
        totals = (
            totals.0 + t.0,
            totals.1 + t.1,
            totals.2 + t.2,
            totals.3 + t.3,
        );
    }
    println!(
        "money model tally ({runs} interleavings of {ops} steps): payments {}, refunds {}, kills {}, \
         captured but never answered (reported) {}; invariants broken 0",
        totals.0, totals.1, totals.2, totals.3
    );
}

/// One seeded interleaving; (payments, refunds made, kills, captured-unanswered).
async fn one_interleaving(seed: u64, ops: usize) -> (usize, usize, usize, usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    for (k, v) in [
        ("PAYGATE_MASTER_KEY", MASTER_KEY),
        ("PAYGATE__FACILITATOR__SETTLE_TIMEOUT_SECONDS", "2"),
        ("PAYGATE__FACILITATOR__REQUEST_TIMEOUT_SECONDS", "1"),
        ("PAYGATE__FACILITATOR__RECONCILE_INTERVAL_SECONDS", "1"),
        // An MPP credential left unsent expires within the test, as `exact`'s do.
        ("PAYGATE__FACILITATOR__MPP_CHALLENGE_SECONDS", "20"),
    ] {
        env.push((k.into(), v.into()));
    }
    env.extend(common::permit2::token_env());
    let mut gw = Gateway::start_with_owned(env).await;
    let upstream = Upstream::start().await;
    let seller = address(9);
    let (org, key) = gw.create_org("acme", Some(&seller.to_checksum(None))).await;
    let org_id = org["id"].as_str().expect("the org's id").to_string();
    gw.create_route(
        &key,
        json!({"path": "echo", "priceUSD": 0.01, "targetUrl": format!("{}/echo", upstream.url),
               "network": "base-sepolia"}),
    )
    .await;
    common::escrow::refundable_route(&gw, &key, "held", 3600, &upstream).await;
    gw.create_route(
        &key,
        json!({"path": "llm", "priceUSD": 0.01, "schemes": ["upto"], "pricing": "usage",
               "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia"}),
    )
    .await;
    gw.create_route(
        &key,
        json!({"path": "report", "priceUSD": 0.01, "token": "tdol",
               "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia"}),
    )
    .await;
    gw.create_route(
        &key,
        json!({"path": "chan", "priceUSD": 0.01, "schemes": ["batch-settlement"],
               "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia"}),
    )
    .await;
    gw.create_route(
        &key,
        json!({"path": "hourly", "priceUSD": 0.01, "accessWindowSeconds": 3600,
               "accessWindowCalls": WINDOW_CALLS,
               "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia"}),
    )
    .await;
    let accepted_upto = common::windows::challenge_at(&gw, UPTO).await["accepts"][0].clone();
    let accepted_permit2 = common::windows::challenge_at(&gw, PERMIT2).await["accepts"][0].clone();
    common::escrow::approve_refunds(&chain, 9).await;
    // The relayer holds USDC of its own: a refund it fronted would show.
    chain.send_usdc(1, address(0), 1_000_000).await;
    let payers: Vec<usize> = (2..=6).collect();
    {
        use alloy_sol_types::SolCall;
        let approve = paygate_x402::permit2::IErc20Permit2::approveCall {
            spender: paygate_x402::permit2::PERMIT2_ADDRESS,
            amount: alloy_primitives::U256::MAX,
        }
        .abi_encode();
        for p in &payers {
            for token in [USDC.parse().unwrap(), TDOL] {
                chain
                    .send(*p, token, approve.clone())
                    .await
                    .expect("approve Permit2");
            }
        }
    }
    let mut before = BTreeMap::new();
    for token in [USDC.parse().unwrap(), TDOL] {
        for who in payers
            .iter()
            .map(|p| address(*p))
            .chain([seller, address(0)])
        {
            before.insert((token, who), balance(&chain, token, who).await);
        }
    }
    // The slow chain: a block a second, nothing mined on arrival.
    {
        use alloy_provider::Provider;
        let p = chain.provider(0);
        let _: Value = p
            .raw_request("evm_setAutomine".into(), (false,))
            .await
            .unwrap();
        let _: Value = p
            .raw_request("evm_setIntervalMining".into(), (1,))
            .await
            .unwrap();
    }

    let http = gw.http.clone();
    let base = gw.url("");
    let base = base.trim_end_matches('/').to_string();
    let mut sent: Vec<Sent> = Vec::new();
    let mut asked: Vec<Asked> = Vec::new();
    // Each sign-in to the window: its payer and its answer.
    let mut sign_ins: Vec<(usize, String)> = Vec::new();
    let mut kills = 0;
    let mut step = 0;
    while step < ops {
        let width = rng.gen_range(1..=3usize).min(ops - step);
        step += width;
        let batch: Vec<Step> = (0..width)
            .map(|_| match rng.gen_range(0..20) {
                18 | 19 => Step::Mpp(payers[rng.gen_range(0..payers.len())]),
                16 | 17 => Step::Channel(payers[3 + rng.gen_range(0..2)]),
                0..=2 => Step::Exact(payers[rng.gen_range(0..payers.len())]),
                12 => Step::Permit2(payers[rng.gen_range(0..payers.len())]),
                13 => Step::Window(payers[rng.gen_range(0..2)]),
                14 | 15 => Step::SignIn(payers[rng.gen_range(0..3)]),
                10 | 11 => Step::Upto {
                    payer: payers[rng.gen_range(0..payers.len())],
                    charge: [None, Some(0), Some(3_000)][rng.gen_range(0..3)],
                },
                3..=5 => Step::Escrow {
                    payer: payers[rng.gen_range(0..payers.len())],
                    fail: rng.gen_bool(0.25),
                },
                6 if !sent.is_empty() => Step::Again(rng.gen_range(0..sent.len())),
                _ if !sent.is_empty() => Step::Refund {
                    pick: rng.gen_range(0..1000),
                    key: rng.gen_range(0..2),
                    amount: ["0.002", "0.004", "0.006", "0.011"][rng.gen_range(0..4)],
                },
                _ => Step::Exact(payers[0]),
            })
            .collect();
        let kill_after = rng
            .gen_bool(0.2)
            .then(|| Duration::from_millis(rng.gen_range(0..1500)));
        // Each step of the batch as a task of its own, so a kill cuts them where they are.
        let mut tasks = Vec::new();
        for s in batch {
            let (http, base, key) = (http.clone(), base.clone(), key.clone());
            let (known, accepted_upto) = (sent.clone(), accepted_upto.clone());
            let accepted_permit2 = accepted_permit2.clone();
            tasks.push(tokio::spawn(async move {
                match s {
                    Step::Exact(payer) | Step::Window(payer) => {
                        let path = if matches!(s, Step::Window(_)) {
                            WINDOW
                        } else {
                            EXACT
                        };
                        let mut p = exact(payer, path);
                        let a = send(&http, &format!("{base}{}", p.path), &p.header).await;
                        p.answers.push(a);
                        (Some(p), None, None)
                    }
                    Step::Channel(payer) => {
                        let answer = channel_call(&base, payer).await;
                        (None, None, Some(Err((payer, answer))))
                    }
                    Step::SignIn(payer) => {
                        let url = format!("{base}{WINDOW}");
                        let Some(doc) = challenge(&http, &url).await else {
                            return (None, None, None);
                        };
                        let header = common::windows::sign_in(&doc, payer, payer, |_| {});
                        let a = send(&http, &url, &("SIGN-IN-WITH-X", header)).await;
                        (None, None, Some(Err((payer, a))))
                    }
                    Step::Mpp(payer) => {
                        let Some(mut p) = mpp(&http, &base, payer).await else {
                            return (None, None, None);
                        };
                        let a = send(&http, &format!("{base}{}", p.path), &p.header).await;
                        p.answers.push(a);
                        (Some(p), None, None)
                    }
                    Step::Permit2(payer) => {
                        let mut p = permit2_exact(payer, &accepted_permit2);
                        let a = send(&http, &format!("{base}{}", p.path), &p.header).await;
                        p.answers.push(a);
                        (Some(p), None, None)
                    }
                    Step::Upto { payer, charge } => {
                        let mut p = upto(payer, address(0), &accepted_upto, charge);
                        let a = send(&http, &format!("{base}{}", p.path), &p.header).await;
                        p.answers.push(a);
                        (Some(p), None, None)
                    }
                    Step::Escrow { payer, fail } => {
                        let Some(mut p) = escrowed(&http, &base, payer, fail).await else {
                            return (None, None, None);
                        };
                        let a = send(&http, &format!("{base}{}", p.path), &p.header).await;
                        p.answers.push(a);
                        (Some(p), None, None)
                    }
                    Step::Again(i) => {
                        let p = &known[i];
                        let a = send(&http, &format!("{base}{}", p.path), &p.header).await;
                        (None, Some((i, a)), None)
                    }
                    Step::Refund {
                        pick,
                        key: k,
                        amount,
                    } => {
                        let captured: Vec<String> = api_payments(&http, &base, &key)
                            .await
                            .into_iter()
                            .filter(|p| p["status"] == "SETTLED" && p["routePath"] == "/held")
                            .filter_map(|p| p["id"].as_str().map(str::to_string))
                            .collect();
                        if captured.is_empty() {
                            return (None, None, None);
                        }
                        let id = captured[pick % captured.len()].clone();
                        let mut a = Asked {
                            key: format!("{id}-{k}"),
                            payment: id,
                            amount,
                            answers: Vec::new(),
                        };
                        let status = refund(&http, &base, &key, &a).await;
                        a.answers.push(status);
                        (None, None, Some(Ok(a)))
                    }
                }
            }));
        }
        if let Some(after) = kill_after {
            tokio::time::sleep(after).await;
            gw.kill();
            kills += 1;
        }
        for t in tasks {
            let (new, again, refunded) = t.await.unwrap();
            sent.extend(new);
            if let Some((i, a)) = again {
                sent[i].answers.push(a);
            }
            match refunded {
                Some(Ok(a)) => asked.push(a),
                Some(Err(signed_in)) => sign_ins.push(signed_in),
                None => {}
            }
        }
        if kill_after.is_some() {
            gw.restart().await;
        }
    }

    // As a client would: every payment and refund asked again until its answer is final.
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        let mut open = 0;
        for p in sent.iter_mut().filter(|p| !p.final_answer()) {
            let a = send(&http, &format!("{base}{}", p.path), &p.header).await;
            open += usize::from(pending(&a));
            p.answers.push(a);
        }
        for a in asked
            .iter_mut()
            .filter(|a| matches!(a.answers.last(), Some(0 | 503 | 504)))
        {
            let status = refund(&http, &base, &key, a).await;
            open += usize::from(matches!(status, 0 | 503 | 504));
            a.answers.push(status);
        }
        // A channel call the kill cut is made again (its deposit may have landed).
        for payer in payers.iter().skip(3) {
            let last = sign_ins
                .iter()
                .rev()
                .find(|(p, a)| p == payer && a.starts_with("channel "));
            if last.is_some_and(|(_, a)| pending(a.trim_start_matches("channel "))) {
                let again = channel_call(&base, *payer).await;
                open += usize::from(pending(again.trim_start_matches("channel ")));
                sign_ins.push((*payer, again));
            }
        }
        if open == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still pending after 150 s: {sent:?}\n{asked:?}\n{}",
            gw.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Reconciliation closes what the requests left open.
    loop {
        let views = api_payments(&http, &base, &key).await;
        let open = views
            .iter()
            .filter(|p| p["status"] == "RESERVED" || p["status"] == "UNKNOWN")
            .count();
        if open == 0 && !views.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "open payments left: {views:?}\n{}",
            gw.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // 3. The ledger equals the chain, payment by payment (the ledger audit).
    let audit: Value = http
        .get(format!("{base}/api/ledger/audit"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        audit["differences"],
        json!([]),
        "seed {seed}: {audit}\nasked {asked:#?}\n{}",
        gw.log()
            .lines()
            .filter(|l| l.contains("refund") || l.contains("Killed") || l.contains("starting"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(audit["unreadable"], json!([]), "seed {seed}: {audit}");
    // The ledger as the store keeps it (a stopped node: sled locks its files).
    assert!(gw.stop());
    let ledger = {
        let store = gw.store().await;
        let q = paygate_store::PaymentQuery {
            limit: 100_000,
            ..Default::default()
        };
        store.list_payments(&org_id, &q).await.unwrap()
    };
    gw.restart().await;
    // 8. The seller claims its channels; each record then equals the contract's channel.
    let channels = claim_channels(&chain, &http, &base, &key, &sign_ins, seed).await;
    if let Err(e) = &channels {
        let log = gw.log();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("channel") || l.contains("deposit") || l.contains("starting"))
            .collect();
        panic!("{e}\n{}", lines.join("\n"));
    }
    let channels = channels.unwrap();
    check(
        &chain, &http, &base, &key, &sent, &asked, &ledger, &before, &channels, seed,
    )
    .await;
    // 7. The window served no call unpaid.
    for payer in payers.iter().take(3) {
        let bought = ledger
            .iter()
            .filter(|p| {
                p.status == PaymentStatus::Settled
                    && p.resource.ends_with(WINDOW)
                    && p.payer.parse::<Address>().ok() == Some(address(*payer))
            })
            .count();
        let served = sign_ins
            .iter()
            .filter(|(p, a)| p == payer && a == "200")
            .count();
        assert!(
            served <= bought * WINDOW_CALLS,
            "seed {seed}: payer {payer} signed in {served} times on {bought} payments: {sign_ins:?}"
        );
    }
    let mut kinds = BTreeMap::<String, usize>::new();
    for p in &ledger {
        *kinds
            .entry(format!(
                "{:?}{} {}",
                p.transfer,
                if p.protocol.is_x402() { "" } else { " (MPP)" },
                p.status.as_str()
            ))
            .or_default() += 1;
    }
    let signed_in = sign_ins.iter().filter(|(_, a)| a == "200").count();
    let voucher_calls = sign_ins.iter().filter(|(_, a)| a == "channel 200").count();
    println!("money model run, seed {seed}: channel calls served {voucher_calls} ({channels:?})");
    println!(
        "money model run, seed {seed}: ledger {kinds:?}; window sign-ins {} ({signed_in} served)",
        sign_ins.len()
    );
    let refunds: usize = ledger
        .iter()
        .filter_map(|p| p.escrow.as_ref())
        .map(|e| e.refunds.len())
        .sum();
    let unanswered = sent
        .iter()
        .filter(|s| {
            ledger.iter().any(|p| {
                p.nonce_key == s.nonce_key
                    && p.status == PaymentStatus::Settled
                    && p.transfer == PaymentTransfer::AuthCapture
            }) && !s.answers.iter().any(|a| a == "200")
        })
        .count();
    (sent.len(), refunds, kills, unanswered)
}

/// One call to the channel route by `payer` as `paygate pay --channel` makes it (a deposit
/// when the channel cannot cover it, else a voucher): `channel <status>`, or `channel cut`.
async fn channel_call(base: &str, payer: usize) -> String {
    let url = format!("{base}{CHANNEL}");
    let key = common::chain::KEYS[payer];
    let (_, out, _) = common::run_paygate(
        &[("PAYGATE_PAYER_KEY", key)],
        &["pay", "--channel", "--deposit-usd", "0.03", "--json", &url],
    )
    .await;
    let status = serde_json::from_str::<Value>(out.trim())
        .ok()
        .and_then(|v| v["status"].as_u64())
        .map_or("cut".to_string(), |s| s.to_string());
    format!("channel {status}")
}

/// What the channels hold and moved, from their records once claimed (USDC base units).
#[derive(Debug, Default)]
struct ChannelTotals {
    /// Deposited less refunded (the channels' balances): what left the payers' wallets.
    paid_in: u64,
    /// Claimed: what reached the seller.
    claimed: u64,
    /// Left in the channels (the settlement contract holds it).
    held: u64,
}

/// Invariant 8: the seller claims every channel (until nothing is unclaimed); each record then
/// equals the settlement contract's channel, and served calls, charges and deposits are in
/// order. The channels' totals, for invariant 3.
async fn claim_channels(
    chain: &Chain,
    http: &reqwest::Client,
    base: &str,
    key: &str,
    calls: &[(usize, String)],
    seed: u64,
) -> Result<ChannelTotals, String> {
    use paygate_x402::batch::{IBatchSettlement, SETTLEMENT_ADDRESS};
    let deadline = Instant::now() + Duration::from_secs(60);
    let list = loop {
        let _ = http
            .post(format!("{base}/api/channels/claim"))
            .bearer_auth(key)
            .send()
            .await;
        let r = http.get(format!("{base}/api/channels")).bearer_auth(key);
        let list: Value = r.send().await.unwrap().json().await.unwrap();
        let list = list["channels"].as_array().cloned().unwrap_or_default();
        if list.iter().all(|c| c["unclaimed"] == "0") {
            break list;
        }
        assert!(
            Instant::now() < deadline,
            "seed {seed}: unclaimed channels: {list:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let amount = |c: &Value, k: &str| c[k].as_str().and_then(|v| v.parse::<u64>().ok()).unwrap();
    let mut totals = ChannelTotals::default();
    for c in &list {
        let payer: Address = c["payer"].as_str().unwrap().parse().unwrap();
        let served = calls
            .iter()
            .filter(|(p, a)| address(*p) == payer && a == "channel 200")
            .count() as u64;
        // What the channel holds on chain (its deposits less refunds: the model withdraws
        // nothing), whether its deposits came through this gateway's records or were found on
        // chain after a crash cut their request.
        let (in_channel, charged) = (amount(c, "balance"), amount(c, "charged"));
        assert!(
            served * PRICE <= charged && charged <= in_channel,
            "seed {seed}: served {served}, charged {charged}, in the channel {in_channel}: {c}"
        );
        assert_eq!(amount(c, "claimed"), charged, "seed {seed}: {c}");
        let id: alloy_primitives::B256 = c["id"].as_str().unwrap().parse().unwrap();
        let call = IBatchSettlement::channelsCall { channelId: id };
        let on_chain = chain.view(SETTLEMENT_ADDRESS, call).await;
        assert_eq!(
            (
                u128::from(amount(c, "balance")),
                u128::from(amount(c, "claimed"))
            ),
            (on_chain.balance, on_chain.totalClaimed),
            "seed {seed}: the record and the contract: {c}"
        );
        totals.paid_in += in_channel;
        totals.claimed += charged;
        totals.held += amount(c, "balance") - amount(c, "claimed");
    }
    // Every deposit that landed is a channel's: the contract holds exactly what the records
    // say is left in them.
    let in_contract = usdc(chain, SETTLEMENT_ADDRESS).await;
    if in_contract != totals.held {
        return Err(format!(
            "seed {seed}: the settlement contract holds {in_contract}, the channels {}: {list:#?}\n{calls:?}",
            totals.held
        ));
    }
    Ok(totals)
}

/// The `402` of `url`, decoded (none while the gateway is down).
async fn challenge(http: &reqwest::Client, url: &str) -> Option<Value> {
    let r = http.get(url).send().await.ok()?;
    paygate_x402::b64_json(r.headers().get("payment-required")?.to_str().ok()?)
}

/// The organisation's payments as the API lists them (newest first).
async fn api_payments(http: &reqwest::Client, base: &str, key: &str) -> Vec<Value> {
    let list: Value = match http
        .get(format!("{base}/api/payments?limit=500"))
        .bearer_auth(key)
        .send()
        .await
    {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => return Vec::new(),
    };
    list["payments"].as_array().cloned().unwrap_or_default()
}

#[allow(clippy::too_many_arguments)]
async fn check(
    chain: &Chain,
    http: &reqwest::Client,
    base: &str,
    key: &str,
    sent: &[Sent],
    asked: &[Asked],
    ledger: &[GatewayPayment],
    before: &BTreeMap<(Address, Address), u64>,
    channels: &ChannelTotals,
    seed: u64,
) {
    let why = |what: &str| format!("seed {seed}: {what}\nsent {sent:#?}\nasked {asked:#?}");
    let by_key: BTreeMap<&str, &GatewayPayment> =
        ledger.iter().map(|p| (p.nonce_key.as_str(), p)).collect();
    // 1. Nothing served unpaid.
    for s in sent.iter().filter(|s| s.answers.iter().any(|a| a == "200")) {
        let p = by_key.get(s.nonce_key.as_str());
        assert!(
            p.is_some_and(|p| p.status == PaymentStatus::Settled),
            "{}",
            why(&format!("served unpaid: {s:?} -> {p:?}"))
        );
    }
    // 2. Nothing paid unserved (`exact`: served on its retry after a kill).
    for p in ledger.iter().filter(|p| {
        p.status == PaymentStatus::Settled
            && p.transfer != PaymentTransfer::AuthCapture
            && p.amount.0 > 0
    }) {
        let s = sent.iter().find(|s| s.nonce_key == p.nonce_key);
        assert!(
            s.is_some_and(|s| s.answers.iter().any(|a| a == "200")),
            "{}",
            why(&format!("paid unserved: {p:?}"))
        );
    }
    // 3. In total, token by token: the payers lost and the seller gained the ledger's settled
    // amounts.
    for token in [USDC.parse::<Address>().unwrap(), TDOL] {
        let mut net = 0u64;
        for p in ledger.iter().filter(|p| {
            p.status == PaymentStatus::Settled && p.asset.parse::<Address>().ok() == Some(token)
        }) {
            net += match &p.escrow {
                Some(e) => e.captured.0 - e.refunded().0,
                None => p.amount.0,
            };
        }
        let mut paid = 0;
        for ((t, who), was) in before {
            if *t == token && *who != address(9) && *who != address(0) {
                paid += was - balance(chain, token, *who).await;
            }
        }
        let seller = balance(chain, token, address(9)).await - before[&(token, address(9))];
        // Channels are in USDC: the payers paid in their deposits (less refunds), the seller
        // received what it claimed.
        let (into_channels, claimed) = match token == USDC.parse::<Address>().unwrap() {
            true => (channels.paid_in, channels.claimed),
            false => (0, 0),
        };
        assert_eq!(
            (paid, seller),
            (net + into_channels, net + claimed),
            "{}",
            why(&format!("payers, seller and ledger in {token}"))
        );
    }
    let held = usdc(chain, paygate_x402::auth_capture::ESCROW_ADDRESS).await;
    assert_eq!(held, 0, "{}", why("funds left in escrow"));
    // 4. Refunds never above the capture, one per key.
    let mut keys = BTreeSet::new();
    for p in ledger {
        if let Some(e) = &p.escrow {
            assert!(e.refunded() <= e.captured, "{}", why(&format!("{p:?}")));
            assert!(e.pending_refund.is_none(), "{}", why(&format!("{p:?}")));
            for r in &e.refunds {
                if let Some(k) = &r.idempotency_key {
                    assert!(
                        keys.insert(k.clone()),
                        "{}",
                        why(&format!("key twice: {k}"))
                    );
                }
            }
        }
    }
    // 5. The deployment's own USDC (and test token) never fell.
    for token in [USDC.parse::<Address>().unwrap(), TDOL] {
        assert!(
            balance(chain, token, address(0)).await >= before[&(token, address(0))],
            "{}",
            why("the relayer paid")
        );
    }
    // 6. Receipts only for what was served, naming the organisation's own route.
    for p in ledger {
        let r = http
            .get(format!("{base}/api/payments/{}/receipt", p.id))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        let served = p.status == PaymentStatus::Settled
            && p.upstream_status.is_some_and(|s| s < 400)
            && p.escrow.as_ref().is_none_or(|e| e.refundable().0 > 0);
        if served {
            assert_eq!(status, 200, "{}", why(&format!("{p:?}: {body}")));
            let url = body["receipt"]["payload"]["resourceUrl"]
                .as_str()
                .unwrap_or("");
            assert!(url.contains("/gateway/acme/"), "{}", why(&body.to_string()));
        } else if p.status != PaymentStatus::Settled {
            assert_eq!(status, 404, "{}", why(&format!("{p:?}: {body}")));
        }
    }
}
