//! Crash safety of `auth-capture` payments: the real binary is SIGKILLed at a random moment
//! while a call paid by the official client's escrow authorization is in flight (before its
//! nonce is reserved, while it is held, while the origin answers, while it is captured),
//! restarted on the same data, and the client sends the same authorization again for a while.
//! Once every authorization's deadline has passed and reconciliation has run, counted over all
//! trials: a call served twice (must be 0), a payment captured more than its price (0), money
//! captured without a `SETTLED` record of it (lost, 0), a record claiming a capture that never
//! happened (phantom, 0), funds still held in escrow (0: a crash's hold is voided), records
//! still open (stuck, 0); and, reported, calls served whose hold was voided (the seller's loss:
//! a kill between the origin's answer and the capture, the payer protected).
//!
//! `PAYGATE_CRASH_TRIALS` sets the number of trials (20 by default).

use crate::common;

use alloy_primitives::{Address, B256, U256};
use common::chain::{address, now, Chain, USDC};
use common::crash::retry_until_final;
use common::upstream::Upstream;
use common::windows::challenge_at;
use common::*;
use paygate_domain::model::PaymentStatus;
use paygate_x402::auth_capture::{self, ESCROW_ADDRESS};
use rand::Rng;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PATH: &str = "/gateway/acme/report";
const PRICE: u64 = 10_000;
/// Authorizations expire this long after signing (the route's `maxTimeoutSeconds`), so
/// reconciliation closes within the test what a kill left unheld.
const VALIDITY_SECS: u64 = 12;

#[derive(Default, Debug)]
struct Tally {
    served_twice: usize,
    over_captured: usize,
    lost: usize,
    phantom: usize,
    still_held: usize,
    stuck: usize,
    captured_and_served: usize,
    /// Served, the hold voided: the seller's loss.
    served_voided: usize,
    neither: usize,
    first: BTreeMap<String, usize>,
    retry: BTreeMap<String, usize>,
}

/// The official client's payment header for the challenge, signed by account `payer`, and its
/// authorization's payer and nonce.
fn signed(challenge: &Value, payer: usize) -> (String, Address, B256) {
    let doc = common::escrow::signed_doc(challenge, payer);
    let auth = &doc["payload"]["authorization"];
    let from = auth["from"].as_str().unwrap().parse().unwrap();
    let nonce = auth["nonce"].as_str().unwrap().parse().unwrap();
    (b64_header(&doc), from, nonce)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_points_of_escrowed_payments_captures_each_at_most_once() {
    let trials = std::env::var("PAYGATE_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20usize);
    let chain = Chain::start();
    let mut env = chain.reconciling_env();
    env.push((
        "PAYGATE__X402__MAX_TIMEOUT_SECONDS".into(),
        VALIDITY_SECS.to_string(),
    ));
    let mut gw = Gateway::start_with_owned(env).await;
    let upstream = Upstream::start().await;
    report_route(&gw, &format!("{}/echo", upstream.url), None).await;

    // Calls without a crash: each served and captured; the quickest sets the kill window.
    let mut quickest = Duration::MAX;
    for _ in 0..3 {
        let challenge = challenge_at(&gw, PATH).await;
        let (header, _, _) = signed(&challenge, 1);
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
    let mut tally = Tally::default();
    let mut seen = Vec::new();
    let mut last_signed = 0;
    for i in 0..trials {
        let challenge = challenge_at(&gw, PATH).await;
        let (header, from, nonce) = signed(&challenge, 1 + i % 6);
        last_signed = now();
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
        seen.push((from, nonce, hits_before));
    }

    // Every authorization expires; reconciliation (every second) closes what a kill left.
    let wait = (last_signed + VALIDITY_SECS).saturating_sub(now()) + 4;
    tokio::time::sleep(Duration::from_secs(wait)).await;
    let hits_after: Vec<usize> = (0..seen.len())
        .map(|i| seen.get(i + 1).map_or(upstream.hits(), |s| s.2) - seen[i].2)
        .collect();
    assert!(gw.stop(), "paygate did not stop:\n{}", gw.log());
    let store = gw.store().await;
    tally.stuck = store.unfinished_payments().await.unwrap().len();
    let usdc: Address = USDC.parse().unwrap();
    for ((from, nonce, _), served) in seen.iter().zip(hits_after) {
        let key = format!("84532:{usdc:x}:{from:x}:{nonce:x}");
        let record = store.payment_for_nonce(&key).await.unwrap();
        let state = match record.as_ref().and_then(|r| r.escrow.as_ref()) {
            Some(e) => {
                let info = e.terms.info(*from).expect("escrow terms");
                let hash = auth_capture::payment_hash(84532, &info);
                let out = chain_view(&chain, auth_capture::state_call(hash)).await;
                auth_capture::decode_state(&out).expect("paymentState")
            }
            None => Default::default(),
        };
        // The authorization itself: used only by a hold.
        let used = paygate_x402::facilitator::embedded::authorization_state(
            &chain.rpc, usdc, *from, *nonce,
        )
        .await
        .expect("authorizationState");
        let captured = u64::try_from(state.refundable).unwrap_or(u64::MAX);
        let recorded = record
            .as_ref()
            .filter(|r| r.status == PaymentStatus::Settled)
            .map_or(0, |r| r.amount.0);
        tally.served_twice += usize::from(served > 1);
        tally.over_captured += usize::from(captured > PRICE);
        tally.lost += usize::from(captured != recorded || (used && record.is_none()));
        tally.phantom += usize::from(recorded > 0 && captured == 0);
        tally.still_held += usize::from(state.capturable > U256::ZERO);
        match (captured > 0, served > 0) {
            (true, _) => tally.captured_and_served += 1,
            (false, true) => tally.served_voided += 1,
            (false, false) => tally.neither += 1,
        }
    }
    println!("auth-capture crash tally ({trials} trials, kill window {window_ms} ms): {tally:?}");
    assert_eq!(tally.served_twice, 0, "{tally:?}");
    assert_eq!(tally.over_captured, 0, "{tally:?}");
    assert_eq!(tally.lost, 0, "{tally:?}");
    assert_eq!(tally.phantom, 0, "{tally:?}");
    assert_eq!(tally.still_held, 0, "{tally:?}");
    assert_eq!(tally.stuck, 0, "{tally:?}");
    let escrow = paygate_x402::facilitator::embedded::balance_of(&chain.rpc, usdc, ESCROW_ADDRESS)
        .await
        .expect("balanceOf");
    assert_eq!(escrow, U256::ZERO, "the escrow holds nothing at the end");
}

/// Organisation `acme` (its receiver account 9) with its escrowed route at [`PATH`], priced
/// [`PRICE`], forwarding to `target`, refundable for `refund_window` seconds (none: refunds
/// off): the organisation's API key.
async fn report_route(gw: &Gateway, target: &str, refund_window: Option<u64>) -> String {
    let (_, key) = gw
        .create_org("acme", Some(&address(9).to_checksum(None)))
        .await;
    let mut route = json!({"path": "report", "priceUSD": 0.01, "schemes": ["auth-capture"],
        "targetUrl": target, "network": "base-sepolia"});
    if let Some(window) = refund_window {
        route["refundWindowSeconds"] = window.into();
    }
    gw.create_route(&key, route).await;
    key
}

/// The newest payment of the organisation whose API key is `key`.
async fn first_payment(gw: &Gateway, key: &str) -> Value {
    let list: Value = gw
        .api(key, reqwest::Method::GET, "/api/payments", None)
        .await
        .json()
        .await
        .unwrap();
    list["payments"][0].clone()
}

/// A read-only call to the escrow.
async fn chain_view(chain: &Chain, data: Vec<u8>) -> Vec<u8> {
    use alloy_network::TransactionBuilder;
    use alloy_provider::Provider;
    let p = chain.provider(0);
    let tx = alloy_rpc_types_eth::TransactionRequest::default()
        .with_to(ESCROW_ADDRESS)
        .with_input(data);
    p.call(tx).await.expect("escrow call").to_vec()
}

/// Asks for a refund of `amount_usdc` of payment `id` under `key` until the answer is final (not
/// a cut connection, a 5xx or `SETTLEMENT_PENDING`) or `patience` is over: how it ended.
async fn refund_until_final(
    gw: &Gateway,
    org_key: &str,
    id: &str,
    key: &str,
    patience: Duration,
) -> String {
    let deadline = Instant::now() + patience;
    loop {
        let sent = gw
            .http
            .post(gw.url(&format!("/api/payments/{id}/refund")))
            .bearer_auth(org_key)
            .header("Idempotency-Key", key)
            .json(&json!({"amountUSDC": "0.004"}))
            .send()
            .await;
        let answer = match sent {
            Ok(r) if r.status() == 200 => "200".to_string(),
            Ok(r) => {
                let (status, code, _) = error_of(r).await;
                format!("{status} {code}")
            }
            Err(_) => "cut".into(),
        };
        let pending = answer == "cut" || answer.starts_with('5');
        if !pending || Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_points_of_refunds_refunds_each_once() {
    let trials = std::env::var("PAYGATE_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20usize);
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.push((
        "PAYGATE__FACILITATOR__SETTLE_TIMEOUT_SECONDS".into(),
        "3".into(),
    ));
    env.push((
        "PAYGATE__FACILITATOR__REQUEST_TIMEOUT_SECONDS".into(),
        "1".into(),
    ));
    let mut gw = Gateway::start_with_owned(env).await;
    let upstream = Upstream::start().await;
    let (_, key) = gw
        .create_org("acme", Some(&address(9).to_checksum(None)))
        .await;
    crate::common::escrow::refundable_route(&gw, &key, "report", 3600, &upstream).await;
    // The seller (the receiver, account 9) funds refunds: it approves the collector once.
    crate::common::escrow::approve_refunds(&chain, 9).await;
    // One captured payment a trial.
    for i in 0..trials {
        let challenge = challenge_at(&gw, PATH).await;
        let (header, _, _) = signed(&challenge, 2 + i % 5);
        let paid =
            retry_until_final(&gw, PATH, ("PAYMENT-SIGNATURE", &header), Duration::ZERO).await;
        assert_eq!(paid, "200", "{}", gw.log());
    }
    let ids: Vec<(String, Address)> = common::escrow::ledger_confirmed(&gw, &key)
        .await
        .iter()
        .map(|p| {
            assert_eq!(p["status"], "SETTLED", "{p}");
            (
                p["id"].as_str().unwrap().to_string(),
                p["payer"].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(ids.len(), trials);
    // The quickest refund sets the kill window (a refund of its own, on the first payment).
    let t0 = Instant::now();
    let warm = refund_until_final(&gw, &key, &ids[0].0, "warm", Duration::ZERO).await;
    assert_eq!(warm, "200", "{}", gw.log());
    let window_ms = (t0.elapsed().as_millis() as u64 * 3 / 2).max(10);

    let mut rng = rand::thread_rng();
    let mut first = BTreeMap::<String, usize>::new();
    let mut retried = BTreeMap::<String, usize>::new();
    for (i, (id, _)) in ids.iter().enumerate().skip(1) {
        let (http, url, k, org) = (
            gw.http.clone(),
            gw.url(&format!("/api/payments/{id}/refund")),
            format!("k{i}"),
            key.clone(),
        );
        let asked = tokio::spawn(async move {
            let sent = http
                .post(url)
                .bearer_auth(org)
                .header("Idempotency-Key", k)
                .json(&json!({"amountUSDC": "0.004"}))
                .send()
                .await;
            match sent {
                Ok(r) => r.status().as_u16().to_string(),
                Err(_) => "cut".to_string(),
            }
        });
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..=window_ms))).await;
        gw.kill();
        *first.entry(asked.await.unwrap()).or_default() += 1;
        gw.restart().await;
    }
    // As the seller would: each refund asked again under its key until its answer is final.
    // A refund a kill left pending with no transaction known is its request's own for the
    // refund lease (settle + 2 RPC timeouts + 5 s: 10 s here), then decided from the chain.
    for (i, (id, _)) in ids.iter().enumerate().skip(1) {
        let again =
            refund_until_final(&gw, &key, id, &format!("k{i}"), Duration::from_secs(20)).await;
        *retried.entry(again).or_default() += 1;
    }
    assert!(gw.stop(), "paygate did not stop:\n{}", gw.log());

    // Judged against the escrow: what it refunded of each payment is what the record says,
    // exactly one refund of $0.004 each, nothing left pending.
    let store = gw.store().await;
    let (mut refunded_twice, mut lost, mut phantom, mut pending, mut refunded) = (0, 0, 0, 0, 0);
    for (id, from) in &ids {
        let p = store.get_payment(id).await.unwrap().expect("payment");
        let e = p.escrow.as_ref().expect("escrow");
        let info = e.terms.info(*from).expect("terms");
        let out = chain_view(
            &chain,
            auth_capture::state_call(auth_capture::payment_hash(84532, &info)),
        )
        .await;
        let state = auth_capture::decode_state(&out).expect("paymentState");
        let on_chain = PRICE - u64::try_from(state.refundable).unwrap();
        let recorded = e.refunded().0;
        refunded_twice += usize::from(on_chain > 4_000);
        lost += usize::from(on_chain > recorded);
        phantom += usize::from(recorded > on_chain);
        pending += usize::from(e.pending_refund.is_some());
        refunded += usize::from(on_chain == 4_000);
    }
    println!(
        "refund crash tally ({trials} trials, kill window {window_ms} ms): refunded twice {refunded_twice}, \
         lost {lost}, phantom {phantom}, pending {pending}, refunded once {refunded}, first {first:?}, retry {retried:?}"
    );
    assert_eq!((refunded_twice, lost, phantom, pending), (0, 0, 0, 0));
    assert_eq!(refunded, trials, "every refund was made once in the end");
}

/// One JSON-RPC call to the chain at `rpc` (a test origin's, which holds no provider).
async fn rpc_call(rpc: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let answer: Value = reqwest::Client::new()
        .post(rpc)
        .json(&body)
        .send()
        .await
        .expect("chain reachable")
        .json()
        .await
        .expect("JSON-RPC answer");
    assert!(answer["error"].is_null(), "{method}: {answer}");
    answer["result"].clone()
}

/// An origin at `/report` that stops the chain mining on its own once it is reached (the hold
/// is mined by then), so the capture sent at its answer's head waits in the pool: its address,
/// how many times it was reached, its task.
async fn stops_mining_when_reached(
    chain: &Chain,
) -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let (rpc, reached) = (chain.rpc.clone(), Arc::new(AtomicUsize::new(0)));
    let seen = reached.clone();
    let origin = axum::Router::new().route(
        "/report",
        axum::routing::get(move || {
            let (rpc, seen) = (rpc.clone(), seen.clone());
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                rpc_call(&rpc, "evm_setAutomine", json!([false])).await;
                "served"
            }
        }),
    );
    let (url, task) = common::upstream::serve(origin).await;
    (url, reached, task)
}

/// [`PATH`] paid by account `payer` (answered `200`): its payment header and the answer.
async fn pay_report(gw: &Gateway, payer: usize) -> (String, reqwest::Response) {
    let (header, _, _) = signed(&challenge_at(gw, PATH).await, payer);
    let answer = gw
        .http
        .get(gw.url(PATH))
        .header("PAYMENT-SIGNATURE", header.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200, "{}", gw.log());
    (header, answer)
}

/// `who`'s USDC at the latest block (anvil answers a call without one from its pending state).
async fn mined_balance(chain: &Chain, who: Address) -> U256 {
    use alloy_sol_types::SolCall;
    let data = paygate_x402::permit2::IErc20Permit2::balanceOfCall { owner: who };
    let call = json!({"to": USDC, "data": format!("0x{}", hex::encode(data.abi_encode()))});
    let out = rpc_call(&chain.rpc, "eth_call", json!([call, "latest"])).await;
    U256::from_str_radix(out.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// A seller refunding a payment just served, while its capture (sent after the answer) is not
/// mined yet: the refund waits for the capture instead of sending the seller away, and is made
/// once the capture's block comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_asked_while_the_capture_is_unmined_waits_for_it() {
    let chain = Chain::start();
    let gw = Gateway::start_with_owned(chain.gateway_env()).await;
    let (origin_url, _, _task) = stops_mining_when_reached(&chain).await;
    let key = report_route(&gw, &format!("{origin_url}/report"), Some(3600)).await;
    crate::common::escrow::approve_refunds(&chain, 9).await;
    let payer = address(1);
    let before = mined_balance(&chain, payer).await;
    pay_report(&gw, 1).await;
    let p = first_payment(&gw, &key).await;
    assert_eq!(p["status"], "RESERVED", "the capture is not mined: {p}");
    let id = p["id"].as_str().unwrap().to_string();
    let asked = {
        let (http, url, key) = (
            gw.http.clone(),
            gw.url(&format!("/api/payments/{id}/refund")),
            key.clone(),
        );
        tokio::spawn(async move {
            let r = http
                .post(url)
                .bearer_auth(key)
                .header("Idempotency-Key", "just-served")
                .json(&json!({"amountUSDC": "0.004"}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !asked.is_finished(),
        "the refund did not wait for the capture"
    );
    rpc_call(&chain.rpc, "evm_setAutomine", json!([true])).await;
    rpc_call(&chain.rpc, "evm_mine", json!([])).await;
    let (status, body) = asked.await.unwrap();
    assert_eq!(status, 200, "{body}\n{}", gw.log());
    assert_eq!(body["payment"]["status"], "SETTLED", "{body}");
    assert_eq!(
        body["payment"]["escrow"]["refundedUSDC"], "0.004000",
        "{body}"
    );
    assert_eq!(
        mined_balance(&chain, payer).await,
        before - U256::from(6_000)
    );
}

/// Capture after the answer (issue 54): a paid answer goes out once its capture is sent, before
/// the capture's block, with the capture's transaction as its receipt; the record carries the
/// capture meanwhile. The node then dies and the chain loses the capture (dropped from its
/// pool): after the restart reconciliation captures what the answer served, so the seller is
/// paid and the payer charged the price once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_answer_whose_capture_was_lost_with_its_node_is_captured_by_reconciliation() {
    let chain = Chain::start();
    let mut gw = Gateway::start_with_owned(chain.reconciling_env()).await;
    let (origin_url, reached, _task) = stops_mining_when_reached(&chain).await;
    let receiver = address(9);
    let key = report_route(&gw, &format!("{origin_url}/report"), None).await;
    let balance = |who: Address| mined_balance(&chain, who);
    let payer = address(1);
    let before = balance(payer).await;

    let (header, answer) = pay_report(&gw, 1).await;
    let receipt = answer.headers()["payment-response"]
        .to_str()
        .unwrap()
        .to_string();
    let receipt: Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::STANDARD, receipt).unwrap(),
    )
    .unwrap();
    assert_eq!(answer.text().await.unwrap(), "served");
    let capture = receipt["transaction"].as_str().unwrap().to_string();
    // Answered before its capture was mined: nothing captured yet, the record says so.
    let mined = rpc_call(&chain.rpc, "eth_getTransactionReceipt", json!([capture])).await;
    assert!(
        mined.is_null(),
        "the capture was mined before the answer: {mined}"
    );
    assert_eq!(balance(receiver).await, U256::ZERO);
    let p = &first_payment(&gw, &key).await;
    assert_eq!(p["status"], "RESERVED", "{p}");
    assert_eq!(p["escrow"]["capturingTransaction"], json!(capture), "{p}");
    // Meanwhile the same authorization again is a replay (it was answered), and a refund waits
    // for the capture; neither moves anything or reaches the origin.
    let again = retry_until_final(&gw, PATH, ("PAYMENT-SIGNATURE", &header), Duration::ZERO).await;
    assert_eq!(again, "402 NONCE_REPLAY");
    let id = p["id"].as_str().unwrap();
    let refund = gw
        .http
        .post(gw.url(&format!("/api/payments/{id}/refund")))
        .bearer_auth(&key)
        .header("Idempotency-Key", "while-capturing")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let (status, code, _) = error_of(refund).await;
    assert_eq!((status, code.as_str()), (504, "SETTLEMENT_PENDING"));
    assert_eq!(reached.load(Ordering::SeqCst), 1);

    // The node dies and the chain forgets the capture.
    gw.kill();
    rpc_call(&chain.rpc, "anvil_dropTransaction", json!([capture])).await;
    rpc_call(&chain.rpc, "evm_setAutomine", json!([true])).await;
    rpc_call(&chain.rpc, "evm_mine", json!([])).await;
    assert_eq!(balance(receiver).await, U256::ZERO, "the capture is gone");
    gw.restart().await;

    let deadline = Instant::now() + Duration::from_secs(30);
    let p = loop {
        let p = first_payment(&gw, &key).await;
        if p["status"] != "RESERVED" || Instant::now() > deadline {
            break p;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(p["status"], "SETTLED", "{p}\n{}", gw.log());
    assert_eq!(p["escrow"]["capturedUSDC"], "0.010000", "{p}");
    assert!(p["escrow"]["capturingTransaction"].is_null(), "{p}");
    assert_ne!(
        p["transaction"],
        json!(capture),
        "reconciliation's own capture: {p}"
    );
    assert_eq!(balance(receiver).await, U256::from(PRICE));
    assert_eq!(balance(payer).await, before - U256::from(PRICE));
    assert_eq!(
        balance(ESCROW_ADDRESS).await,
        U256::ZERO,
        "nothing left held"
    );
}
