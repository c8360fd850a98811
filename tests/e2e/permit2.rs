//! Permit2 payments end to end (issue 31, items 2 and 3): the real binary on anvil with the dev
//! chain's Permit2, x402 Permit2 proxies and a test token without EIP-3009 (`TDOL`). A route
//! priced in that token is paid with `exact` through Permit2; a usage-priced route offers
//! `upto` and settles what its origin states. The official npm clients pay (@x402/fetch with
//! @x402/evm's `exact` and `upto`); every bad authorization is refused with x402's reason and
//! charges nothing.

use crate::common;

use alloy_primitives::{Address, U256};
use common::chain::{address, Chain, KEYS, USDC};
use common::upstream::Upstream;
use common::windows::challenge_at;
use common::*;
use paygate_x402::permit2::DEV_TEST_TOKEN_ADDRESS as TDOL;
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
    env.extend(common::permit2::token_env());
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

async fn balance(s: &Setup, token: Address, who: Address) -> U256 {
    paygate_x402::facilitator::embedded::balance_of(&s.chain.rpc, token, who)
        .await
        .expect("balanceOf")
}

fn usdc() -> Address {
    USDC.parse().unwrap()
}

/// The official client pays `path` `calls` times as account `payer`, approving Permit2 for
/// `approve` first when given.
fn official_pay(
    s: &Setup,
    path: &str,
    payer: usize,
    approve: Option<Address>,
    calls: u32,
) -> Vec<Value> {
    let mut input = json!({"url": s.gw.url(path), "key": KEYS[payer], "rpc": s.chain.rpc,
        "calls": calls, "allow": [TDOL.to_checksum(None)]});
    if let Some(t) = approve {
        input["approve"] = t.to_checksum(None).into();
    }
    node_json("x402_permit2_pay.cjs", &input)["results"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_eip3009_is_paid_through_permit2_by_the_official_client() {
    let s = setup().await;
    let route =
        s.gw.create_route(
            &s.key,
            json!({"path": "report", "priceUSD": 0.01, "token": "tdol",
                "targetUrl": format!("{}/echo", s.upstream.url), "network": "base-sepolia"}),
        )
        .await;
    assert_eq!(route["token"], "TDOL", "{route}");
    let challenge = challenge_at(&s.gw, "/gateway/acme/report").await;
    let accepted = &challenge["accepts"][0];
    assert_eq!(accepted["asset"], TDOL.to_checksum(None), "{challenge}");
    assert_eq!(accepted["amount"], "10000");
    assert_eq!(accepted["extra"]["assetTransferMethod"], "permit2");
    assert_eq!(accepted["extra"]["name"], "Test Dollar");

    let payer = address(4);
    let before = balance(&s, TDOL, payer).await;
    // No approval of Permit2 yet: `412`, the client learns to approve; nothing moved.
    let first = official_pay(&s, "/gateway/acme/report", 4, None, 1);
    assert_eq!(first[0]["status"], 412, "{first:?}");
    assert_eq!(first[0]["error"], "permit2_allowance_required");
    assert_eq!(balance(&s, TDOL, payer).await, before);
    // Approved once, then paid: twice, each its own settlement.
    let paid = official_pay(&s, "/gateway/acme/report", 4, Some(TDOL), 2);
    for p in &paid {
        assert_eq!(p["status"], 200, "{paid:?}");
        assert_eq!(p["receipt"]["success"], true);
        assert!(p["receipt"]["transaction"]
            .as_str()
            .unwrap()
            .starts_with("0x"));
    }
    assert_eq!(
        balance(&s, TDOL, payer).await,
        before - U256::from(20_000u64)
    );
    assert_eq!(balance(&s, TDOL, s.receiver).await, U256::from(20_000u64));
    // The ledger shows them in the token, for the route's USD price.
    let list: Value =
        s.gw.api(&s.key, reqwest::Method::GET, "/api/payments", None)
            .await
            .json()
            .await
            .unwrap();
    let settled: Vec<&Value> = list["payments"]
        .as_array()
        .or(list["items"].as_array())
        .unwrap()
        .iter()
        .filter(|p| p["status"] == "SETTLED")
        .collect();
    assert_eq!(settled.len(), 2, "{list}");
    assert!(settled.iter().all(|p| p["asset"]
        .as_str()
        .unwrap()
        .eq_ignore_ascii_case(&TDOL.to_string())));
}

/// A usage-priced `upto` route in USDC, on an origin that states its cost per call.
async fn upto_route(s: &Setup) {
    let route =
        s.gw.create_route(
            &s.key,
            json!({"path": "llm", "priceUSD": 0.01, "schemes": ["upto"], "pricing": "usage",
                "targetUrl": format!("{}/echo", s.upstream.url), "network": "base-sepolia"}),
        )
        .await;
    assert_eq!(route["schemes"], json!(["upto"]), "{route}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upto_settles_what_the_origin_states_at_most_the_ceiling() {
    let s = setup().await;
    upto_route(&s).await;
    let challenge = challenge_at(&s.gw, "/gateway/acme/llm").await;
    let accepted = &challenge["accepts"][0];
    assert_eq!(accepted["scheme"], "upto", "{challenge}");
    assert_eq!(accepted["amount"], "10000", "the ceiling");
    assert_eq!(accepted["extra"]["assetTransferMethod"], "permit2");
    assert_eq!(
        accepted["extra"]["facilitatorAddress"],
        address(0).to_checksum(None),
        "the embedded facilitator's relayer settles"
    );
    let payer = address(5);
    let before = balance(&s, usdc(), payer).await;
    let receiver_before = balance(&s, usdc(), s.receiver).await;
    // The LLM-like origin states $0.00042: that is what moves.
    let r = official_pay(
        &s,
        "/gateway/acme/llm?upstream_charge=0.00042",
        5,
        Some(usdc()),
        1,
    );
    assert_eq!(r[0]["status"], 200, "{r:?}\n{}", s.gw.log());
    assert_eq!(r[0]["receipt"]["amount"], "420", "{r:?}");
    assert!(r[0]["receipt"]["transaction"]
        .as_str()
        .unwrap()
        .starts_with("0x"));
    assert_eq!(
        balance(&s, usdc(), payer).await,
        before - U256::from(420u64)
    );
    // Above the ceiling: the ceiling.
    let r = official_pay(&s, "/gateway/acme/llm?upstream_charge=5", 5, None, 1);
    assert_eq!(r[0]["receipt"]["amount"], "10000", "{r:?}");
    // Zero: no transaction; an origin failure: nothing either.
    let r = official_pay(&s, "/gateway/acme/llm?upstream_charge=0", 5, None, 1);
    assert_eq!(r[0]["status"], 200, "{r:?}");
    assert_eq!(r[0]["receipt"]["amount"], "0");
    assert_eq!(r[0]["receipt"]["transaction"], "");
    let r = official_pay(&s, "/gateway/acme/llm?upstream_status=500", 5, None, 1);
    assert_eq!(r[0]["status"], 500, "{r:?}");
    assert_eq!(
        balance(&s, usdc(), payer).await,
        before - U256::from(10_420u64)
    );
    assert_eq!(
        balance(&s, usdc(), s.receiver).await,
        receiver_before + U256::from(10_420u64)
    );
    // The origin's charge header never reaches the caller.
    assert!(!r[0]["body"].as_str().unwrap().contains("x-paygate-charge"));
}

/// `upto` on a streamed answer whose origin states its cost in a trailer (reached over HTTP/2):
/// nothing settles at the answer's head; once the whole answer passed the gateway, the trailer's
/// amount settles on chain, and the trailer never reaches the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upto_on_a_streamed_answer_settles_what_its_trailer_states() {
    let s = setup_with(&[("PAYGATE__UPSTREAM__HTTP2_HOSTS", r#"["127.0.0.1"]"#)]).await;
    let origin = common::upstream::trailer_origin().await;
    s.gw.create_route(
        &s.key,
        json!({"path": "tokens", "priceUSD": 0.01, "schemes": ["upto"], "pricing": "usage",
            "streaming": true, "targetUrl": format!("{origin}/tokens"), "network": "base-sepolia"}),
    )
    .await;
    let payer = address(6);
    let before = balance(&s, usdc(), payer).await;
    let receiver_before = balance(&s, usdc(), s.receiver).await;
    let r = official_pay(&s, "/gateway/acme/tokens", 6, Some(usdc()), 1);
    assert_eq!(r[0]["status"], 200, "{r:?}\n{}", s.gw.log());
    assert_eq!(r[0]["body"], "tok tok", "{r:?}");
    // The trailer's $0.0003 settles once the stream has passed: polled for, up to a deadline.
    let want = before - U256::from(300u64);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while balance(&s, usdc(), payer).await != want && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(balance(&s, usdc(), payer).await, want, "{}", s.gw.log());
    assert_eq!(
        balance(&s, usdc(), s.receiver).await,
        receiver_before + U256::from(300u64)
    );
}

/// The official client's signature over `requirements` (changed from the route's), sent with
/// the route's own `accepted`: what a payer who signed something else presents.
async fn pay_altered(
    s: &Setup,
    path: &str,
    payer: usize,
    alter: impl Fn(&mut Value),
) -> (u16, String) {
    let challenge = challenge_at(&s.gw, path).await;
    let accepted = challenge["accepts"][0].clone();
    let mut signed_for = accepted.clone();
    alter(&mut signed_for);
    let payload = node_json(
        "x402_permit2_sign.cjs",
        &json!({"scheme": signed_for["scheme"], "key": KEYS[payer], "requirements": signed_for}),
    )["payload"]
        .clone();
    pay_with(s, path, &accepted, payload).await
}

async fn pay_with(s: &Setup, path: &str, accepted: &Value, payload: Value) -> (u16, String) {
    let header = json!({"x402Version": 2, "accepted": accepted, "payload": payload});
    send_payment(&s.gw, path, &header).await
}

/// How a bad case changes the requirement the payer signs.
type Alter<'a> = Box<dyn Fn(&mut Value) + 'a>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_permit2_authorizations_are_refused_with_their_reason_and_charge_nothing() {
    let s = setup().await;
    s.gw.create_route(
        &s.key,
        json!({"path": "report", "priceUSD": 0.01, "token": "TDOL",
            "targetUrl": format!("{}/echo", s.upstream.url), "network": "base-sepolia"}),
    )
    .await;
    upto_route(&s).await;
    let payer = address(6);
    let (tdol, usd) = (
        balance(&s, TDOL, payer).await,
        balance(&s, usdc(), payer).await,
    );
    let other = address(8).to_checksum(None);
    let exact = "/gateway/acme/report";
    let cases: Vec<(&str, &str, Alter<'_>)> = vec![
        (
            exact,
            "invalid_permit2_recipient_mismatch",
            Box::new(|r: &mut Value| r["payTo"] = other.clone().into()),
        ),
        (
            exact,
            "permit2_amount_mismatch",
            Box::new(|r: &mut Value| r["amount"] = "9999".into()),
        ),
        (
            exact,
            "permit2_token_mismatch",
            Box::new(|r: &mut Value| r["asset"] = USDC.into()),
        ),
        // An `upto` ceiling below the route's price.
        (
            "/gateway/acme/llm",
            "permit2_amount_mismatch",
            Box::new(|r: &mut Value| r["amount"] = "5000".into()),
        ),
        (
            "/gateway/acme/llm",
            "upto_facilitator_mismatch",
            Box::new(|r: &mut Value| {
                r["extra"]["facilitatorAddress"] = address(7).to_checksum(None).into()
            }),
        ),
        (
            "/gateway/acme/llm",
            "invalid_permit2_recipient_mismatch",
            Box::new(|r: &mut Value| r["payTo"] = other.clone().into()),
        ),
    ];
    for (path, reason, alter) in cases {
        let (status, got) = pay_altered(&s, path, 6, alter).await;
        assert_eq!((status, got.as_str()), (402, reason), "{path}");
    }
    // Another spender: the exact proxy's authorization presented to the upto route, and one
    // whose spender was rewritten after signing.
    let challenge = challenge_at(&s.gw, exact).await;
    let accepted = challenge["accepts"][0].clone();
    let mut payload = node_json(
        "x402_permit2_sign.cjs",
        &json!({"scheme": "exact", "key": KEYS[6], "requirements": accepted}),
    )["payload"]
        .clone();
    payload["permit2Authorization"]["spender"] = json!(address(8).to_checksum(None));
    assert_eq!(
        pay_with(&s, exact, &accepted, payload.clone()).await,
        (402, "invalid_permit2_spender".to_string())
    );
    // A forged signature (another payer's `from`).
    payload["permit2Authorization"]["spender"] =
        json!(paygate_x402::permit2::EXACT_PROXY_ADDRESS.to_checksum(None));
    payload["permit2Authorization"]["from"] = json!(address(7).to_checksum(None));
    assert_eq!(
        pay_with(&s, exact, &accepted, payload).await,
        (402, "invalid_permit2_signature".to_string())
    );
    // A token the network does not list: the route is refused.
    let r =
        s.gw.api(
            &s.key,
            reqwest::Method::POST,
            "/api/routes",
            Some(json!({"path": "x",
            "priceUSD": 0.01, "token": "DAI", "targetUrl": format!("{}/echo", s.upstream.url),
            "network": "base-sepolia"})),
        )
        .await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], "VALIDATION_ERROR", "{body}");
    assert!(
        body.to_string().contains("does not list the token"),
        "{body}"
    );
    // `upto` needs usage pricing.
    let r =
        s.gw.api(
            &s.key,
            reqwest::Method::POST,
            "/api/routes",
            Some(json!({"path": "y",
            "priceUSD": 0.01, "schemes": ["upto"], "targetUrl": format!("{}/echo", s.upstream.url),
            "network": "base-sepolia"})),
        )
        .await;
    assert_eq!(r.status(), 400);
    // Nothing moved for any of them.
    assert_eq!(balance(&s, TDOL, payer).await, tdol);
    assert_eq!(balance(&s, usdc(), payer).await, usd);
}

/// Gas sponsoring (`eip2612GasSponsoring`, issue 44 item 6): a payer that never approved
/// Permit2 pays a USDC `upto` route with the official client and no transaction of its own:
/// the client reads the extension in the `402`, signs USDC's permit to Permit2 with its
/// payment, and the relayer submits both in one `settleWithPermit`. A permit that is not the
/// payer's, not for the token, not to Permit2, expired or not in the format is refused with the
/// extension's reason, and nothing moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payer_that_never_approved_permit2_pays_with_its_permit() {
    use alloy_provider::Provider;
    let s = setup().await;
    upto_route(&s).await;
    let challenge = challenge_at(&s.gw, "/gateway/acme/llm").await;
    let declared = &challenge["extensions"]["eip2612GasSponsoring"];
    assert_eq!(declared["info"]["version"], "1", "{challenge}");
    assert!(declared["schema"]["required"].as_array().unwrap().len() == 8);
    // A TDOL (no EIP-2612) route declares nothing of it.
    s.gw.create_route(
        &s.key,
        json!({"path": "report", "priceUSD": 0.01, "token": "TDOL",
            "targetUrl": format!("{}/echo", s.upstream.url), "network": "base-sepolia"}),
    )
    .await;
    let tdol_challenge = challenge_at(&s.gw, "/gateway/acme/report").await;
    assert!(tdol_challenge["extensions"]["eip2612GasSponsoring"].is_null());

    // Bad permits, each with the official client's Permit2 authorization: refused by reason.
    let accepted = challenge["accepts"][0].clone();
    let payer = address(3);
    let payload = node_json(
        "x402_permit2_sign.cjs",
        &json!({"scheme": "upto", "key": KEYS[3], "requirements": accepted}),
    )["payload"]
        .clone();
    let permit = json!({"from": payer.to_checksum(None), "asset": USDC,
        "spender": paygate_x402::permit2::PERMIT2_ADDRESS.to_checksum(None),
        "amount": "10000", "nonce": "0", "deadline": (paygate_domain::unix_now() + 300).to_string(),
        "signature": format!("0x{}1b", "11".repeat(64)), "version": "1"});
    let other = address(8).to_checksum(None);
    let cases: Vec<(&str, Value, &str)> = vec![
        ("from", json!(other), "eip2612_from_mismatch"),
        (
            "asset",
            json!(TDOL.to_checksum(None)),
            "eip2612_asset_mismatch",
        ),
        ("spender", json!(other), "eip2612_spender_not_permit2"),
        ("deadline", json!("1"), "eip2612_deadline_expired"),
        ("amount", json!("ten"), "invalid_eip2612_extension_format"),
        // Well formed, but not signed by the payer: the token refuses it, the transfer has no
        // allowance (answered 412 like any missing approval), nothing is forwarded.
        ("version", json!("1"), "permit2_allowance_required"),
    ];
    let usd = balance(&s, usdc(), payer).await;
    for (field, value, reason) in cases {
        let mut info = permit.clone();
        info[field] = value;
        let header = json!({"x402Version": 2, "accepted": accepted, "payload": payload,
            "extensions": {"eip2612GasSponsoring": {"info": info}}});
        let r = send_payment(&s.gw, "/gateway/acme/llm?upstream_charge=0.004", &header).await;
        let status = if reason == "permit2_allowance_required" {
            412
        } else {
            402
        };
        assert_eq!(r, (status, reason.to_string()), "{field}");
    }
    assert_eq!(s.upstream.hits(), 0);

    // The official client, no approval first: one call served and charged, the payer's
    // transaction count still zero.
    let r = official_pay(&s, "/gateway/acme/llm?upstream_charge=0.00042", 3, None, 1);
    assert_eq!(r[0]["status"], 200, "{r:?}\n{}", s.gw.log());
    assert_eq!(r[0]["receipt"]["amount"], "420", "{r:?}");
    assert_eq!(balance(&s, usdc(), payer).await, usd - U256::from(420u64));
    let sent = s
        .chain
        .provider(3)
        .get_transaction_count(payer)
        .await
        .unwrap();
    assert_eq!(sent, 0, "the payer sent no transaction");
    // Permit2 holds the rest of the permitted allowance: the next call needs no permit.
    let r = official_pay(&s, "/gateway/acme/llm?upstream_charge=0.001", 3, None, 1);
    assert_eq!(r[0]["status"], 200, "{r:?}");
    assert_eq!(balance(&s, usdc(), payer).await, usd - U256::from(1420u64));
}

/// Sends `header` (a payment document) to `path`: the status and the `402`'s reason.
async fn send_payment(gw: &Gateway, path: &str, header: &Value) -> (u16, String) {
    let (status, reason) = send_paid(gw, path, &b64_header(header)).await;
    (status, reason.unwrap_or_default())
}
