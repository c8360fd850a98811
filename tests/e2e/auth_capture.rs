//! `auth-capture` end to end (issue 44, items 1 and 3): the real binary on anvil with Circle's
//! USDC and paygate's build of the escrow and its collectors at the v1.1 addresses. The official
//! npm client (@x402/evm's `AuthCaptureEvmScheme` through @x402/fetch) pays; a served answer is
//! captured, an origin that fails costs the payer nothing (the hold is voided), and bad
//! authorizations get the scheme's reason words and move nothing.

use crate::common;

use alloy_primitives::{Address, U256};
use common::chain::{address, Chain, KEYS, USDC};
use common::upstream::Upstream;
use common::windows::challenge_at;
use common::*;
use paygate_x402::auth_capture::ESCROW_ADDRESS;
use serde_json::{json, Value};

struct Setup {
    chain: Chain,
    gw: Gateway,
    upstream: Upstream,
    key: String,
    receiver: Address,
}

async fn setup() -> Setup {
    setup_with(&[]).await
}

/// [`setup`] with more of the gateway's environment.
async fn setup_with(extra: &[(&str, &str)]) -> Setup {
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let gw = Gateway::start_with_owned(env).await;
    let upstream = Upstream::start().await;
    let receiver = address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    Setup {
        chain,
        gw,
        upstream,
        key,
        receiver,
    }
}

async fn usdc_of(s: &Setup, who: Address) -> U256 {
    let usdc: Address = USDC.parse().unwrap();
    paygate_x402::facilitator::embedded::balance_of(&s.chain.rpc, usdc, who)
        .await
        .expect("balanceOf")
}

/// An `auth-capture` route at `path`, priced 0.01 USD.
async fn route(s: &Setup, path: &str) -> Value {
    let route =
        s.gw.create_route(
            &s.key,
            json!({"path": path, "priceUSD": 0.01, "schemes": ["auth-capture"],
                "targetUrl": format!("{}/echo", s.upstream.url), "network": "base-sepolia"}),
        )
        .await;
    assert_eq!(route["schemes"], json!(["auth-capture"]), "{route}");
    route
}

/// An `auth-capture` route at `path`, priced 0.01 USD, refundable for `window` seconds.
async fn refundable_route(s: &Setup, path: &str, window: u64) -> Value {
    common::escrow::refundable_route(&s.gw, &s.key, path, window, &s.upstream).await
}

/// The official client pays `url` once as account `payer`.
fn official_pay(s: &Setup, url: &str, payer: usize) -> Value {
    let input = json!({"url": url, "key": KEYS[payer], "rpc": s.chain.rpc, "calls": 1});
    node_json("x402_permit2_pay.cjs", &input)["results"][0].clone()
}

/// The payments of the ledger, newest first.
async fn ledger(s: &Setup) -> Vec<Value> {
    common::escrow::ledger_confirmed(&s.gw, &s.key).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_client_pays_and_a_served_answer_is_captured() {
    let s = setup().await;
    route(&s, "report").await;
    let challenge = challenge_at(&s.gw, "/gateway/acme/report").await;
    let accepted = &challenge["accepts"][0];
    assert_eq!(accepted["scheme"], "auth-capture", "{challenge}");
    let extra = &accepted["extra"];
    assert_eq!(extra["captureAuthorizer"], address(0).to_checksum(None));
    assert_eq!(extra["authCaptureEscrow"], ESCROW_ADDRESS.to_checksum(None));
    assert_eq!(
        (&extra["minFeeBps"], &extra["maxFeeBps"]),
        (&json!(0), &json!(0))
    );
    let capture = extra["captureDeadline"].as_u64().unwrap();
    assert!(capture > paygate_domain::unix_now(), "{extra}");
    // Refunds off by default: refundable until the capture deadline only.
    assert_eq!(extra["refundDeadline"].as_u64(), Some(capture));

    let payer = address(4);
    let before = usdc_of(&s, payer).await;
    let paid = official_pay(&s, &s.gw.url("/gateway/acme/report"), 4);
    assert_eq!(paid["status"], 200, "{paid}");
    assert_eq!(paid["receipt"]["success"], true, "{paid}");
    assert_eq!(paid["receipt"]["amount"], "10000", "{paid}");
    assert_eq!(usdc_of(&s, payer).await, before - U256::from(10_000u64));
    assert_eq!(usdc_of(&s, s.receiver).await, U256::from(10_000u64));
    assert_eq!(
        usdc_of(&s, ESCROW_ADDRESS).await,
        U256::ZERO,
        "nothing left held"
    );
    let payments = ledger(&s).await;
    assert_eq!(payments.len(), 1, "{payments:?}");
    assert_eq!(payments[0]["status"], "SETTLED", "{payments:?}");
    assert_eq!(
        payments[0]["transaction"], paid["receipt"]["transaction"],
        "the capture's transaction"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_fails_costs_the_payer_nothing() {
    let s = setup().await;
    route(&s, "report").await;
    let payer = address(5);
    let before = usdc_of(&s, payer).await;
    let url = s.gw.url("/gateway/acme/report?upstream_status=500");
    let answered = official_pay(&s, &url, 5);
    assert_eq!(answered["status"], 500, "{answered}");
    assert_eq!(s.upstream.hits(), 1, "the origin was asked once");
    assert_eq!(usdc_of(&s, payer).await, before, "the hold was voided");
    assert_eq!(usdc_of(&s, s.receiver).await, U256::ZERO);
    assert_eq!(usdc_of(&s, ESCROW_ADDRESS).await, U256::ZERO);
    let payments = ledger(&s).await;
    assert_eq!(payments[0]["status"], "FAILED", "{payments:?}");

    // An origin that cannot be reached: refused before anything is held.
    let dead =
        s.gw.create_route(
            &s.key,
            json!({"path": "dead", "priceUSD": 0.01, "schemes": ["auth-capture"],
                "targetUrl": "http://127.0.0.1:9/x", "network": "base-sepolia"}),
        )
        .await;
    assert_eq!(dead["schemes"], json!(["auth-capture"]), "{dead}");
    let refused = official_pay(&s, &s.gw.url("/gateway/acme/dead"), 5);
    assert_ne!(refused["status"], 200, "{refused}");
    assert_eq!(usdc_of(&s, payer).await, before, "nothing moved");
}

/// The official client's signed payment for the route's offered requirement, as the header
/// it would send; `tamper` edits the header's JSON after signing.
fn header(challenge: &Value, payer: usize, tamper: impl FnOnce(&mut Value)) -> String {
    let mut doc = common::escrow::signed_doc(challenge, payer);
    tamper(&mut doc);
    b64_header(&doc)
}

/// An edit of a signed payment's header JSON.
type Tamper = Box<dyn FnOnce(&mut Value)>;

/// Sends `header` to `path`: the status and the refusal's reason word.
async fn send(s: &Setup, path: &str, header: &str) -> (u16, Option<String>) {
    send_paid(&s.gw, path, header).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_authorizations_get_the_schemes_reasons_and_move_nothing() {
    let s = setup().await;
    route(&s, "report").await;
    let path = "/gateway/acme/report";
    let challenge = challenge_at(&s.gw, path).await;
    let payer = address(6);
    let before = usdc_of(&s, payer).await;
    let cases: Vec<(&str, Tamper)> = vec![
        // Another escrow (the v1.0 deployment): not this server's terms.
        (
            "invalid_payment_requirements",
            Box::new(|d: &mut Value| {
                d["accepted"]["extra"]["authCaptureEscrow"] =
                    json!("0xBdEA0D1bcC5966192B070Fdf62aB4EF5b4420cff");
            }),
        ),
        // Another operator.
        (
            "invalid_payment_requirements",
            Box::new(|d: &mut Value| {
                d["accepted"]["extra"]["captureAuthorizer"] = json!(address(7).to_checksum(None));
            }),
        ),
        // A later capture deadline than the one signed: the nonce is not the terms' hash.
        (
            "invalid_auth_capture_nonce",
            Box::new(|d: &mut Value| {
                let c = d["accepted"]["extra"]["captureDeadline"].as_u64().unwrap();
                d["accepted"]["extra"]["captureDeadline"] = json!(c - 30);
                d["accepted"]["extra"]["refundDeadline"] = json!(c - 30);
            }),
        ),
        // Deadlines out of order.
        (
            "invalid_deadline_ordering",
            Box::new(|d: &mut Value| {
                let c = d["accepted"]["extra"]["captureDeadline"].as_u64().unwrap();
                d["accepted"]["extra"]["refundDeadline"] = json!(c - 1);
            }),
        ),
        // The authorization names another collector.
        (
            "invalid_auth_capture_collector",
            Box::new(|d: &mut Value| {
                d["payload"]["authorization"]["to"] = json!(address(8).to_checksum(None));
            }),
        ),
        // A start time: the collector signs the transfer valid from 0, so it could never pass.
        (
            "invalid_exact_evm_payload_authorization_valid_after",
            Box::new(|d: &mut Value| {
                d["payload"]["authorization"]["validAfter"] = json!("1");
            }),
        ),
        // Signed by someone else.
        (
            "invalid_exact_evm_payload_signature",
            Box::new(|d: &mut Value| {
                d["payload"]["authorization"]["from"] = json!(address(7).to_checksum(None));
            }),
        ),
    ];
    for (reason, tamper) in cases {
        let h = header(&challenge, 6, tamper);
        let (status, said) = send(&s, path, &h).await;
        assert_eq!((status, said.as_deref()), (402, Some(reason)));
    }
    assert_eq!(s.upstream.hits(), 0, "nothing was forwarded");
    assert_eq!(usdc_of(&s, payer).await, before, "nothing moved");

    // A good one is taken once; the same authorization again is a replay.
    let good = header(&challenge, 6, |_| {});
    assert_eq!(send(&s, path, &good).await.0, 200);
    let again = send(&s, path, &good).await;
    assert_eq!(
        (again.0, again.1.as_deref()),
        (402, Some("nonce_already_used"))
    );
    assert_eq!(usdc_of(&s, payer).await, before - U256::from(10_000u64));
    assert_eq!(s.upstream.hits(), 1);
}

/// Issue 52: the payer cannot choose the escrow's deadlines. A capture deadline sooner than the
/// one offered (a slow answer would be served free once it passed), a later one, or a refund
/// deadline the route does not offer (refunds turned on) is refused with the scheme's reason
/// word, signed or not, and nothing is held; the offered deadlines are taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_offered_deadlines_are_held() {
    let s = setup().await;
    route(&s, "report").await;
    let path = "/gateway/acme/report";
    // A route without `exact` offers no v1 form (v1 carries `exact` only): nothing refused.
    let unpaid = s.gw.http.get(s.gw.url(path)).send().await.unwrap();
    assert_eq!(unpaid.status(), 402);
    assert!(unpaid.headers().get("x-payment-requirements").is_none());
    let v1: Value = unpaid.json().await.unwrap();
    assert_eq!(v1["accepts"], json!([]), "{v1}");
    let challenge = challenge_at(&s.gw, path).await;
    let offered = challenge["accepts"][0]["extra"]["captureDeadline"]
        .as_u64()
        .unwrap();
    let payer = address(6);
    let before = usdc_of(&s, payer).await;
    // The official client signs whatever deadlines its requirement names.
    let signed_for = |capture: u64, refund: u64| {
        let mut c = challenge.clone();
        c["accepts"][0]["extra"]["captureDeadline"] = json!(capture);
        c["accepts"][0]["extra"]["refundDeadline"] = json!(refund);
        b64_header(&common::escrow::signed_doc(&c, 6))
    };
    let now = paygate_domain::unix_now();
    for (capture, refund) in [
        (now + 75, now + 75),
        (offered + 3_600, offered + 3_600),
        (offered, offered + 86_400),
    ] {
        let (status, said) = send(&s, path, &signed_for(capture, refund)).await;
        assert_eq!(
            (status, said.as_deref()),
            (402, Some("invalid_deadline_ordering")),
            "capture {capture}, refund {refund} (offered {offered})"
        );
    }
    assert_eq!(s.upstream.hits(), 0, "nothing was forwarded");
    assert_eq!(usdc_of(&s, payer).await, before, "nothing moved");
    assert_eq!(
        usdc_of(&s, ESCROW_ADDRESS).await,
        U256::ZERO,
        "nothing held"
    );
    let (status, _) = send(&s, path, &signed_for(offered, offered)).await;
    assert_eq!(status, 200);
    assert_eq!(usdc_of(&s, payer).await, before - U256::from(10_000u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_pricing_captures_the_stated_charge_and_gives_back_the_rest() {
    let s = setup().await;
    s.gw.create_route(
        &s.key,
        json!({"path": "llm", "priceUSD": 0.01, "schemes": ["auth-capture"], "pricing": "usage",
            "targetUrl": format!("{}/echo", s.upstream.url), "network": "base-sepolia"}),
    )
    .await;
    let payer = address(3);
    let before = usdc_of(&s, payer).await;
    // The origin states $0.004 of the $0.01 held: that is captured, the rest voided.
    let url = s.gw.url("/gateway/acme/llm?upstream_charge=0.004");
    let paid = official_pay(&s, &url, 3);
    assert_eq!(paid["status"], 200, "{paid}");
    assert_eq!(paid["receipt"]["amount"], "4000", "{paid}");
    // The rest is voided once the answer is over, before the payment is recorded captured.
    ledger(&s).await;
    assert_eq!(usdc_of(&s, payer).await, before - U256::from(4_000u64));
    assert_eq!(usdc_of(&s, s.receiver).await, U256::from(4_000u64));
    assert_eq!(
        usdc_of(&s, ESCROW_ADDRESS).await,
        U256::ZERO,
        "the rest went back"
    );
    // A charge of zero captures nothing: the whole hold goes back.
    let free = official_pay(&s, &s.gw.url("/gateway/acme/llm?upstream_charge=0"), 3);
    assert_eq!(free["status"], 200, "{free}");
    assert_eq!(usdc_of(&s, payer).await, before - U256::from(4_000u64));
    assert_eq!(usdc_of(&s, ESCROW_ADDRESS).await, U256::ZERO);
    let payments = ledger(&s).await;
    let statuses: Vec<_> = payments.iter().map(|p| p["status"].clone()).collect();
    assert_eq!(
        statuses,
        [json!("FAILED"), json!("SETTLED")],
        "{payments:?}"
    );
    assert_eq!(payments[1]["amountUSDC"], json!("0.004000"), "{payments:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routes_refund_window_sets_the_refund_deadline_and_is_checked() {
    let s = setup().await;
    let route = refundable_route(&s, "report", 86400).await;
    assert_eq!(route["refundWindowSeconds"], 86400, "{route}");
    let extra = &challenge_at(&s.gw, "/gateway/acme/report").await["accepts"][0]["extra"];
    let capture = extra["captureDeadline"].as_u64().unwrap();
    assert_eq!(
        extra["refundDeadline"].as_u64(),
        Some(capture + 86400),
        "{extra}"
    );

    let base = json!({"path": "other", "priceUSD": 0.01, "network": "base-sepolia",
        "targetUrl": format!("{}/echo", s.upstream.url)});
    for (extra, field) in [
        (json!({"refundWindowSeconds": 60}), "refundWindowSeconds"),
        (
            json!({"refundWindowSeconds": 0, "schemes": ["auth-capture"]}),
            "refundWindowSeconds",
        ),
        (
            json!({"refundWindowSeconds": 31_536_001u64, "schemes": ["auth-capture"]}),
            "refundWindowSeconds",
        ),
        (
            json!({"schemes": ["auth-capture"], "token": "tdol"}),
            "token",
        ),
    ] {
        let mut body = base.clone();
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let r =
            s.gw.api(&s.key, reqwest::Method::POST, "/api/routes", Some(body))
                .await;
        let (status, code, err) = error_of(r).await;
        assert_eq!(
            (status, code.as_str()),
            (400, "VALIDATION_ERROR"),
            "{extra}: {err}"
        );
        assert!(
            err["details"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["field"] == field),
            "{extra}: {err}"
        );
    }
}

/// `POST /api/payments/{id}/refund` with `key` (none: no header) and `body`: status, code, JSON.
async fn refund(s: &Setup, id: &str, key: Option<&str>, body: Value) -> (u16, String, Value) {
    let mut r =
        s.gw.http
            .post(s.gw.url(&format!("/api/payments/{id}/refund")))
            .bearer_auth(&s.key)
            .json(&body);
    if let Some(k) = key {
        r = r.header("Idempotency-Key", k);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let v: Value = r.json().await.unwrap();
    let code = v["code"].as_str().unwrap_or_default().to_string();
    (status, code, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_payment_is_refunded_once_per_key_up_to_its_capture_within_its_window() {
    use common::webhook_receiver::{register, Behave, Receiver};
    // A master key seals the webhook's secret; deliveries are polled often, and the endpoint's
    // first answer (to the payment's `payment.settled`) fails, retried 6 s later: the refunds'
    // events, made meanwhile, wait for it.
    let s = setup_with(&[
        (
            "PAYGATE_MASTER_KEY",
            "6c2e4a8b0d1f3e5a7c9b1d3f5e7a9c0b2d4f6e8a0c1e3b5d7f9a2c4e6b8d0f1a",
        ),
        ("PAYGATE__WEBHOOKS__POLL_INTERVAL_MS", "100"),
        ("PAYGATE__WEBHOOKS__RETRY_SECONDS", "[6]"),
    ])
    .await;
    let rx = Receiver::start(vec![Behave::Fail]).await;
    register(
        &s.gw,
        &s.key,
        &rx.url,
        json!(["payment.settled", "payment.refunded"]),
    )
    .await;
    refundable_route(&s, "refundable", 3600).await;
    route(&s, "final").await;
    let payer = address(4);
    let paid = official_pay(&s, &s.gw.url("/gateway/acme/refundable"), 4);
    assert_eq!(paid["status"], 200, "{paid}");
    let once = official_pay(&s, &s.gw.url("/gateway/acme/final"), 4);
    assert_eq!(once["status"], 200, "{once}");
    let payments = ledger(&s).await;
    let (final_id, id) = (
        payments[0]["id"].as_str().unwrap().to_string(),
        payments[1]["id"].as_str().unwrap().to_string(),
    );
    assert_eq!(
        payments[1]["escrow"]["capturedUSDC"], "0.010000",
        "{payments:?}"
    );
    let after_paying = usdc_of(&s, payer).await;

    // Refused, nothing moves: no key; above the capture; refunds off on its route; another
    // organisation's payment; the operator (the relayer) holding no USDC to fund it.
    let (status, code, _) = refund(&s, &id, None, json!({})).await;
    assert_eq!((status, code.as_str()), (400, "MISSING_IDEMPOTENCY_KEY"));
    let (status, code, _) = refund(&s, &id, Some("k0"), json!({"amountUSDC": "0.02"})).await;
    assert_eq!((status, code.as_str()), (400, "REFUND_EXCEEDS_CAPTURE"));
    let (status, code, _) = refund(&s, &final_id, Some("k0b"), json!({})).await;
    assert_eq!((status, code.as_str()), (409, "REFUND_WINDOW_CLOSED"));
    let (_, other_key) =
        s.gw.create_org("beta", Some(&address(8).to_checksum(None)))
            .await;
    let r =
        s.gw.http
            .post(s.gw.url(&format!("/api/payments/{id}/refund")))
            .bearer_auth(&other_key)
            .header("Idempotency-Key", "k-other")
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 404);
    // The seller funds its refunds, never the deployment: a seller's wallet that has not
    // approved the receiver refund collector, or holds too little, is told so; nothing moves.
    let relayer_before = usdc_of(&s, address(0)).await;
    let seller_before = usdc_of(&s, s.receiver).await;
    assert_eq!(seller_before, U256::from(20_000u64), "both captures");
    let (status, code, body) = refund(&s, &id, Some("k1"), json!({"amountUSDC": "0.004"})).await;
    assert_eq!(
        (status, code.as_str()),
        (409, "REFUND_NOT_COVERED"),
        "the seller has not approved the collector: {body}"
    );
    assert!(
        body["message"].as_str().unwrap().contains("0.004"),
        "amounts in USDC: {body}"
    );
    common::escrow::approve_refunds(&s.chain, 9).await;
    s.chain.send_usdc(9, address(7), 17_000).await;
    let (status, code, body) = refund(&s, &id, Some("k1"), json!({"amountUSDC": "0.004"})).await;
    assert_eq!(
        (status, code.as_str()),
        (409, "REFUND_NOT_COVERED"),
        "the seller holds 0.003: {body}"
    );
    assert_eq!(usdc_of(&s, payer).await, after_paying);
    s.chain.send_usdc(7, s.receiver, 17_000).await;

    // Covered, a partial refund moves exactly its amount back from the seller, once per key.
    let (status, _, first) = refund(&s, &id, Some("k1"), json!({"amountUSDC": "0.004"})).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["refund"]["amountUSDC"], "0.004000", "{first}");
    assert!(first["refund"]["transaction"]
        .as_str()
        .unwrap()
        .starts_with("0x"));
    assert_eq!(
        first["payment"]["escrow"]["refundedUSDC"], "0.004000",
        "{first}"
    );
    assert_eq!(
        usdc_of(&s, payer).await,
        after_paying + U256::from(4_000u64)
    );
    let (status, _, again) = refund(&s, &id, Some("k1"), json!({"amountUSDC": "0.004"})).await;
    assert_eq!(
        (status, &again["refund"]["id"]),
        (200, &first["refund"]["id"])
    );
    let (status, code, _) = refund(&s, &id, Some("k1"), json!({"amountUSDC": "0.005"})).await;
    assert_eq!((status, code.as_str()), (409, "DUPLICATE_REQUEST"));
    assert_eq!(
        usdc_of(&s, payer).await,
        after_paying + U256::from(4_000u64)
    );
    // The rest, from the command line, then nothing is left.
    let (ok, out, err) = cli(
        &s.gw,
        Some(&s.key),
        &["payments", "refund", &id, "--idempotency-key", "k2"],
    )
    .await;
    assert!(ok, "{err}");
    let rest: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rest["refund"]["amountUSDC"], "0.006000", "{rest}");
    assert_eq!(
        usdc_of(&s, payer).await,
        after_paying + U256::from(10_000u64)
    );
    let (status, code, _) = refund(&s, &id, Some("k3"), json!({})).await;
    assert_eq!((status, code.as_str()), (409, "NOT_REFUNDABLE"));
    assert_eq!(
        usdc_of(&s, s.receiver).await,
        seller_before - U256::from(10_000u64),
        "the seller paid both refunds"
    );
    assert_eq!(
        usdc_of(&s, address(0)).await,
        relayer_before,
        "the deployment paid none of them"
    );
    let shown: Value =
        s.gw.api(
            &s.key,
            reqwest::Method::GET,
            &format!("/api/payments/{id}"),
            None,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(shown["escrow"]["refundedUSDC"], "0.010000", "{shown}");
    assert_eq!(
        shown["escrow"]["refunds"].as_array().unwrap().len(),
        2,
        "{shown}"
    );
    assert_eq!(shown["escrow"]["pendingRefund"], Value::Null, "{shown}");
    // The seller's webhook hears of each refund once, after the payment's settlement (which
    // needed a retry) and in the order they were made: one payment's events keep their order.
    rx.accepted("payment.refunded", 2).await;
    let heard: Vec<_> = rx
        .got()
        .into_iter()
        .filter(|r| r.accepted)
        .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
        .filter(|v| v["data"]["id"] == id.as_str())
        .map(|v| {
            let d = &v["data"];
            (
                v["type"].clone(),
                d["refund"]["amountUSD"].clone(),
                d["netUSD"].clone(),
            )
        })
        .collect();
    assert_eq!(
        heard,
        [
            (json!("payment.settled"), Value::Null, Value::Null),
            (json!("payment.refunded"), json!("0.004"), json!("0.006")),
            (json!("payment.refunded"), json!("0.006"), json!("0")),
        ],
        "{:?}",
        rx.got()
    );
    // The seller's figures are net of refunds: two captures of 0.01, one of them refunded whole.
    let net = revenue_settles(&s, |m| m["metrics"]["refundedUSDC"] == "0.010000").await;
    assert_eq!(net["metrics"]["revenueUSDC"], "0.010000", "{net}");
    let routes = net["routes"].as_array().unwrap();
    let of = |path: &str| routes.iter().find(|r| r["path"] == path).unwrap().clone();
    assert_eq!(
        (
            &of("/refundable")["revenueUSDC"],
            &of("/refundable")["refundedUSDC"]
        ),
        (&json!("0.000000"), &json!("0.010000")),
        "{net}"
    );
    assert_eq!(of("/final")["revenueUSDC"], "0.010000", "{net}");
    let scraped = s.gw.prometheus(common::ADMIN_TOKEN).await;
    assert!(
        scraped
            .lines()
            .any(|l| l.starts_with("paygate_refunded_base_units_total{") && l.ends_with(" 10000")),
        "{scraped}"
    );
}

/// The organisation's metrics once `done` says they show what was made (counted within a
/// drain of the aggregator).
async fn revenue_settles(s: &Setup, done: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..50 {
        last = s.gw.org_metrics(&s.key, "24h").await;
        if done(&last) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    last
}

/// Issue 52: a deployment names its own receiver refund collector (`[facilitator]
/// refund_collector`, for a chain where the dev chain's address holds nothing); the refund goes
/// through that one, and a seller that approved only another is told which to approve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_go_through_the_configured_refund_collector() {
    let collector: Address = "0x00000000000000000000000000000000c011ec70"
        .parse()
        .unwrap();
    let s = setup_with(&[(
        "PAYGATE__FACILITATOR__REFUND_COLLECTOR",
        "0x00000000000000000000000000000000c011ec70",
    )])
    .await;
    s.chain
        .copy_code(
            paygate_x402::auth_capture::RECEIVER_REFUND_COLLECTOR_ADDRESS,
            collector,
        )
        .await;
    refundable_route(&s, "refundable", 3600).await;
    let paid = official_pay(&s, &s.gw.url("/gateway/acme/refundable"), 4);
    assert_eq!(paid["status"], 200, "{paid}");
    let id = ledger(&s).await[0]["id"].as_str().unwrap().to_string();
    common::escrow::approve_refunds(&s.chain, 9).await;
    let (status, code, body) = refund(&s, &id, Some("k1"), json!({})).await;
    assert_eq!(
        (status, code.as_str()),
        (409, "REFUND_NOT_COVERED"),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains(&format!("{collector:#x}")),
        "names the collector to approve: {body}"
    );
    common::escrow::approve_collector(&s.chain, 9, collector).await;
    let payer_before = usdc_of(&s, address(4)).await;
    let (status, _, body) = refund(&s, &id, Some("k1"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        usdc_of(&s, address(4)).await,
        payer_before + U256::from(10_000u64)
    );
}

/// Issue 52: a refund asked again while its transaction is unmined (the documented answer to
/// `504 SETTLEMENT_PENDING`; anvil's automine off) waits for that transaction's outcome and never
/// sends a second: once mined, the same key answers the one refund, and the payer got it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_asked_again_while_its_transaction_is_unmined_is_sent_once() {
    use alloy_provider::Provider;
    let s = setup_with(&[("PAYGATE__FACILITATOR__SETTLE_TIMEOUT_SECONDS", "2")]).await;
    refundable_route(&s, "refundable", 3600).await;
    let paid = official_pay(&s, &s.gw.url("/gateway/acme/refundable"), 4);
    assert_eq!(paid["status"], 200, "{paid}");
    let id = ledger(&s).await[0]["id"].as_str().unwrap().to_string();
    common::escrow::approve_refunds(&s.chain, 9).await;
    let payer = address(4);
    let (payer_before, seller_before) = (usdc_of(&s, payer).await, usdc_of(&s, s.receiver).await);
    let p = s.chain.provider(0);
    let _: Value = p
        .raw_request("evm_setAutomine".into(), (false,))
        .await
        .unwrap();
    let body = json!({"amountUSDC": "0.004"});
    for attempt in 0..3 {
        let (status, code, said) = refund(&s, &id, Some("k1"), body.clone()).await;
        assert_eq!(
            (status, code.as_str()),
            (504, "SETTLEMENT_PENDING"),
            "attempt {attempt}: {said}"
        );
    }
    let _: Value = p.raw_request("evm_mine".into(), ()).await.unwrap();
    let (status, _, done) = refund(&s, &id, Some("k1"), body.clone()).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["refund"]["amountUSDC"], "0.004000", "{done}");
    assert_eq!(
        done["payment"]["escrow"]["refundedUSDC"], "0.004000",
        "{done}"
    );
    // Anything else in the pool would land with the next block.
    let _: Value = p.raw_request("evm_mine".into(), ()).await.unwrap();
    assert_eq!(
        usdc_of(&s, payer).await,
        payer_before + U256::from(4_000u64)
    );
    assert_eq!(
        usdc_of(&s, s.receiver).await,
        seller_before - U256::from(4_000u64)
    );
    let _: Value = p
        .raw_request("evm_setAutomine".into(), (true,))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smart_wallet_pays_and_one_that_says_no_is_refused() {
    let s = setup().await;
    route(&s, "report").await;
    // The wallet: its code at a fixed address, its owner (account 6) in slot 0, and USDC.
    let wallet: Address = "0x0000000000000000000000000000000000001271"
        .parse()
        .unwrap();
    s.chain.place_eip1271_wallet(wallet, address(6)).await;
    s.chain.send_usdc(6, wallet, 50_000).await;
    let pay_as = |owner: usize| {
        let input = json!({"url": s.gw.url("/gateway/acme/report"), "key": KEYS[owner],
            "rpc": s.chain.rpc, "calls": 1, "wallet": wallet.to_checksum(None)});
        node_json("x402_permit2_pay.cjs", &input)["results"][0].clone()
    };
    // Signed by another key than its owner's: the wallet says no, nothing moves.
    let refused = pay_as(5);
    assert_eq!(refused["status"], 402, "{refused}");
    assert_eq!(
        refused["error"], "invalid_exact_evm_payload_signature",
        "{refused}"
    );
    assert_eq!(usdc_of(&s, wallet).await, U256::from(50_000u64));
    assert_eq!(s.upstream.hits(), 0);
    // Its owner's signature: held, served, captured from the wallet.
    let paid = pay_as(6);
    assert_eq!(paid["status"], 200, "{paid}");
    assert_eq!(usdc_of(&s, wallet).await, U256::from(40_000u64));
    assert_eq!(usdc_of(&s, s.receiver).await, U256::from(10_000u64));
    let payments = ledger(&s).await;
    assert!(
        payments[0]["payer"]
            .as_str()
            .unwrap()
            .eq_ignore_ascii_case(&wallet.to_string()),
        "{payments:?}"
    );
}
