//! Access windows end to end (issue 31): the real binary on anvil with Circle's USDC, a real
//! upstream. A payment opens the payer's window on the route; within it the payer is served by
//! signing in (x402's sign-in-with-x: a SIWE message, EIP-191), each call counted and each
//! nonce spent once, across a restart; every bad sign-in is answered `402` with its reason and
//! charges nothing. The sign-in message is written here by hand from EIP-4361, apart from the
//! gateway's own (the `siwe` crate's) rendering; the official npm clients check it too.

use crate::common;

use common::chain::{address, Chain, PaymentSpec, KEYS};
use common::upstream::Upstream;
use common::windows::{challenge_at, sign_in};
use common::*;
use reqwest::Method;
use serde_json::{json, Value};

const PRICE: u64 = 10_000;

struct Setup {
    chain: Chain,
    gw: Gateway,
    upstream: Upstream,
    key: String,
    receiver: alloy_primitives::Address,
}

/// A gateway with organisation `acme` (its key) and an echo upstream.
async fn acme(chain: &Chain) -> (Gateway, Upstream, String, alloy_primitives::Address) {
    let gw = Gateway::start_with_owned(chain.gateway_env()).await;
    let upstream = Upstream::start().await;
    let receiver = address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    (gw, upstream, key, receiver)
}

/// A gateway with route `/data` granting a window of `seconds` (and `calls` beyond the paid one).
async fn setup(seconds: u64, calls: Option<u32>) -> Setup {
    let chain = Chain::start();
    let (gw, upstream, key, receiver) = acme(&chain).await;
    let mut body = json!({"path": "data", "priceUSD": 0.01,
        "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia",
        "accessWindowSeconds": seconds});
    if let Some(c) = calls {
        body["accessWindowCalls"] = c.into();
    }
    let route = gw.create_route(&key, body).await;
    assert_eq!(route["accessWindowSeconds"], seconds, "{route}");
    Setup {
        chain,
        gw,
        upstream,
        key,
        receiver,
    }
}

/// The `402` of `/data`, decoded.
async fn challenge(gw: &Gateway) -> Value {
    challenge_at(gw, "/gateway/acme/data").await
}

async fn call_signed_in(gw: &Gateway, header: &str) -> reqwest::Response {
    gw.http
        .get(gw.url("/gateway/acme/data"))
        .header("SIGN-IN-WITH-X", header)
        .send()
        .await
        .unwrap()
}

async fn pay(s: &Setup, payer: usize) -> reqwest::Response {
    let spec = PaymentSpec::new(payer, s.receiver, PRICE);
    s.gw.http
        .get(s.gw.url("/gateway/acme/data"))
        .header("X-PAYMENT", spec.v1_header())
        .send()
        .await
        .unwrap()
}

/// `402 SIGN_IN_REFUSED` with `reason` as the x402 `error`, and a fresh declaration.
async fn refused(r: reqwest::Response, reason: &str) {
    let doc = paygate_x402::b64_json(r.headers()["payment-required"].to_str().unwrap()).unwrap();
    let (status, code, body) = error_of(r).await;
    assert_eq!((status, code.as_str()), (402, "SIGN_IN_REFUSED"), "{body}");
    assert_eq!(body["error"], reason, "{body}");
    assert_eq!(doc["error"], reason);
    assert!(doc["extensions"]["sign-in-with-x"]["info"]["nonce"].is_string());
}

#[tokio::test]
async fn a_payer_signs_in_for_its_window_calls_then_pays_again() {
    let mut s = setup(3600, Some(5)).await;
    let doc = challenge(&s.gw).await;
    let decl = &doc["extensions"]["sign-in-with-x"];
    let base = s.gw.url("");
    let host = base.trim_start_matches("http://").trim_end_matches('/');
    assert_eq!(decl["info"]["domain"], host, "{decl}");
    assert_eq!(decl["info"]["uri"], s.gw.url("/gateway/acme/data"));
    assert_eq!(decl["supportedChains"][0]["chainId"], "eip155:84532");

    // Before paying, a sign-in opens nothing.
    refused(
        call_signed_in(&s.gw, &sign_in(&doc, 3, 3, |_| {})).await,
        "access_window_not_paid",
    )
    .await;
    assert_eq!(s.upstream.hits(), 0);

    let before = s.chain.balance(address(3)).await;
    let r = pay(&s, 3).await;
    assert_eq!(r.status(), 200, "{}", s.gw.log());
    assert_eq!(s.chain.balance(address(3)).await, before - PRICE);

    let mut left = Vec::new();
    for i in 0..5 {
        if i == 2 {
            // Windows live in the store: a restart keeps this one and its count.
            s.gw.restart().await;
        }
        let header = sign_in(&challenge(&s.gw).await, 3, 3, |_| {});
        let r = call_signed_in(&s.gw, &header).await;
        assert_eq!(r.status(), 200, "call {i}: {}", s.gw.log());
        let rec = receipt(&r, "payment-response");
        assert_eq!(rec["transaction"], "", "{rec}");
        assert_eq!(rec["amount"], "0");
        left.push(rec["accessWindow"]["callsLeft"].as_u64().unwrap());
        if i == 0 {
            // The same sign-in again: its nonce is spent.
            refused(call_signed_in(&s.gw, &header).await, "invalid_siwx_nonce").await;
            let w: Value =
                s.gw.api(
                    &s.key,
                    Method::GET,
                    &format!("/api/access-windows?payer={:#x}", address(3)),
                    None,
                )
                .await
                .json()
                .await
                .unwrap();
            let w = &w["windows"][0];
            assert_eq!(w["payer"], format!("{:#x}", address(3)), "{w}");
            // A call the origin fails is given back (its nonce stays spent).
            let failing = sign_in(&challenge(&s.gw).await, 3, 3, |_| {});
            let r =
                s.gw.http
                    .get(s.gw.url("/gateway/acme/data?upstream_status=503"))
                    .header("SIGN-IN-WITH-X", &failing)
                    .send()
                    .await
                    .unwrap();
            assert_eq!(r.status(), 503);
            assert_eq!(
                (w["callsUsed"].as_u64(), w["callsLeft"].as_u64()),
                (Some(1), Some(4))
            );
            assert!(w["paymentId"].as_str().unwrap().starts_with("pay_"));
        }
    }
    assert_eq!(left, [4, 3, 2, 1, 0]);
    assert_eq!(
        s.upstream.hits(),
        7,
        "one paid call, five signed in, one failed"
    );
    assert_eq!(
        s.chain.balance(address(3)).await,
        before - PRICE,
        "paid once"
    );
    refused(
        call_signed_in(&s.gw, &sign_in(&challenge(&s.gw).await, 3, 3, |_| {})).await,
        "access_window_calls_used",
    )
    .await;

    // Paying again opens a new window.
    assert_eq!(pay(&s, 3).await.status(), 200);
    let r = call_signed_in(&s.gw, &sign_in(&challenge(&s.gw).await, 3, 3, |_| {})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        receipt(&r, "payment-response")["accessWindow"]["callsLeft"],
        4
    );
    assert_eq!(s.chain.balance(address(3)).await, before - 2 * PRICE);
}

#[tokio::test]
async fn bad_sign_ins_are_refused_with_their_reason_and_charge_nothing() {
    let s = setup(3, None).await;
    assert_eq!(pay(&s, 4).await.status(), 200);
    let hits = s.upstream.hits();
    let before = s.chain.balance(address(4)).await;
    let doc = challenge(&s.gw).await;
    let ago = |secs: i64| {
        let t = time::OffsetDateTime::now_utc() - time::Duration::seconds(secs);
        t.format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    let cases: Vec<(&str, String)> = vec![
        (
            "invalid_siwx_domain_mismatch",
            sign_in(&doc, 4, 4, |f| f["domain"] = "evil.example.com".into()),
        ),
        (
            "invalid_siwx_uri_mismatch",
            sign_in(&doc, 4, 4, |f| {
                f["uri"] = s.gw.url("/gateway/acme/echo").into();
            }),
        ),
        (
            "invalid_siwx_issued_at_too_old",
            sign_in(&doc, 4, 4, |f| {
                f["issuedAt"] = ago(600).into();
                f["expirationTime"] = Value::Null;
            }),
        ),
        (
            "invalid_siwx_issued_at_in_future",
            sign_in(&doc, 4, 4, |f| f["issuedAt"] = ago(-600).into()),
        ),
        (
            "invalid_siwx_expired",
            sign_in(&doc, 4, 4, |f| f["expirationTime"] = ago(1).into()),
        ),
        (
            "invalid_siwx_unsupported_chain",
            sign_in(&doc, 4, 4, |f| f["chainId"] = "eip155:1".into()),
        ),
        // Another key's signature for payer 4: payer 4 has no code, so no smart wallet accepts it.
        ("invalid_siwx_signature", sign_in(&doc, 4, 5, |_| {})),
        // A valid sign-in by someone who never paid.
        ("access_window_not_paid", sign_in(&doc, 5, 5, |_| {})),
        ("invalid_siwx_payload", "bm90IGpzb24=".to_string()),
    ];
    for (reason, header) in &cases {
        refused(call_signed_in(&s.gw, header).await, reason).await;
    }
    // Refusals spent nothing: the first valid sign-in still works; then the window ends.
    let fine = sign_in(&challenge(&s.gw).await, 4, 4, |_| {});
    let late = sign_in(&challenge(&s.gw).await, 4, 4, |_| {});
    assert_eq!(call_signed_in(&s.gw, &fine).await.status(), 200);
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    refused(call_signed_in(&s.gw, &late).await, "access_window_ended").await;
    assert_eq!(s.upstream.hits(), hits + 1);
    assert_eq!(s.chain.balance(address(4)).await, before, "nothing charged");
    let none: Value =
        s.gw.api(&s.key, Method::GET, "/api/access-windows", None)
            .await
            .json()
            .await
            .unwrap();
    assert_eq!(none["windows"], json!([]), "ended windows are not listed");
    let (status, code, _) = error_of(
        s.gw.api(&s.key, Method::GET, "/api/access-windows?payer=0x12", None)
            .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"));
}

#[tokio::test]
async fn a_window_needs_exact_fixed_pricing_and_sane_bounds() {
    let chain = Chain::start();
    let (gw, upstream, key, _) = acme(&chain).await;
    let base = json!({"path": "w", "priceUSD": 0.01, "targetUrl": format!("{}/echo", upstream.url),
                      "network": "base-sepolia"});
    let with = |extra: Value| {
        let mut b = base.clone();
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    for (extra, field) in [
        (json!({"accessWindowCalls": 3}), "accessWindowCalls"),
        (json!({"accessWindowSeconds": 0}), "accessWindowSeconds"),
        (
            json!({"accessWindowSeconds": 31_536_001u64}),
            "accessWindowSeconds",
        ),
        (
            json!({"accessWindowSeconds": 60, "accessWindowCalls": 0}),
            "accessWindowCalls",
        ),
        (
            json!({"accessWindowSeconds": 60, "pricing": "usage"}),
            "accessWindowSeconds",
        ),
        (
            json!({"accessWindowSeconds": 60, "schemes": ["batch-settlement"]}),
            "accessWindowSeconds",
        ),
    ] {
        let (status, code, body) = error_of(
            gw.api(&key, Method::POST, "/api/routes", Some(with(extra.clone())))
                .await,
        )
        .await;
        assert_eq!(
            (status, code.as_str()),
            (400, "VALIDATION_ERROR"),
            "{extra}: {body}"
        );
        assert_eq!(body["details"][0]["field"], field, "{extra}: {body}");
    }
    let r = gw
        .create_route(&key, with(json!({"accessWindowSeconds": 60})))
        .await;
    assert_eq!(r["accessWindowCalls"], Value::Null);
    let id = r["id"].as_str().unwrap();
    let cleared: Value = gw
        .api(
            &key,
            Method::PATCH,
            &format!("/api/routes/{id}"),
            Some(json!({"accessWindowSeconds": null})),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(cleared["accessWindowSeconds"], Value::Null, "{cleared}");
    let plain = gw.get("/gateway/acme/w").await;
    let doc =
        paygate_x402::b64_json(plain.headers()["payment-required"].to_str().unwrap()).unwrap();
    assert!(
        doc["extensions"].get("sign-in-with-x").is_none(),
        "no window, no sign-in: {doc}"
    );
}

/// The official npm clients (@x402/fetch paying `exact`, @x402/extensions signing in) pay once,
/// are served five more times by signing in, and pay again once the window's calls are used.
#[tokio::test]
async fn official_clients_pay_once_then_sign_in_until_the_window_is_used() {
    let s = setup(3600, Some(5)).await;
    let before = s.chain.balance(address(6)).await;
    let report =
        common::windows::official_pay(&s.gw.url("/gateway/acme/data"), 6, &s.chain.rpc, 7).await;
    assert_eq!(
        report["kinds"],
        json!(["paid", "window", "window", "window", "window", "window", "paid"]),
        "{report}\n{}",
        s.gw.log()
    );
    assert_eq!(report["callsLeft"], json!([4, 3, 2, 1, 0]));
    assert_eq!(s.chain.balance(address(6)).await, before - 2 * PRICE);
    assert_eq!(s.upstream.hits(), 7);
}

/// A smart wallet's sign-in: its owner's key signs, the wallet's EIP-1271 `isValidSignature`
/// (asked of anvil through the embedded facilitator's chain calls) accepts it, and the window
/// serves (a real sled store in a temp dir). Another key's signature for the wallet is refused.
/// (paygate's `exact` takes EOA payments only, so the window is opened in the store here.)
#[tokio::test]
async fn a_smart_wallets_sign_in_is_asked_of_the_chain() {
    use paygate_x402::network::{builtin_networks, Networks};
    use paygate_x402::siwx::Origin;
    use std::sync::Arc;
    let chain = Chain::start();
    let wallet: alloy_primitives::Address = "0x0000000000000000000000000000000000001271"
        .parse()
        .unwrap();
    chain.place_eip1271_wallet(wallet, address(6)).await;
    let mut configs = builtin_networks();
    configs.get_mut("base-sepolia").unwrap().rpc_url = chain.rpc.clone();
    let networks = Networks::from_config(&configs);
    let facilitator = paygate_x402::facilitator::embedded::EmbeddedFacilitator::new(
        &networks,
        KEYS[0],
        std::time::Duration::from_secs(10),
        std::time::Duration::from_secs(10),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn paygate_store::Store> =
        Arc::new(paygate_store::SledStore::open(dir.path()).unwrap());
    let origin = Origin::of("https://pay.example.com").unwrap();
    let windows = paygate_gateway::windows::Windows::new(
        store.clone(),
        Some(Arc::new(facilitator)),
        origin.clone(),
    );
    let uri = "https://pay.example.com/gateway/acme/data";
    let req = paygate_x402::PaymentRequirements {
        network: networks.resolve("base-sepolia").unwrap().clone(),
        amount: paygate_x402::money::UsdcAmount(PRICE),
        pay_to: address(9),
        resource: uri.into(),
        description: String::new(),
        mime_type: String::new(),
        max_timeout_seconds: 60,
        token: Default::default(),
    };
    let now = common::chain::now();
    store
        .open_window(&paygate_domain::window::AccessWindow {
            org_id: "org_1".into(),
            route_id: "rt_1".into(),
            payer: format!("{wallet:#x}"),
            payment_id: "pay_1".into(),
            opened_at: now,
            expires_at: now + 600,
            calls_allowed: None,
            calls_used: 0,
        })
        .await
        .unwrap();
    let doc = json!({"extensions": {"sign-in-with-x": paygate_x402::siwx::declaration(
        &origin, uri, "eip155:84532", time::OffsetDateTime::now_utc())}});
    let as_wallet = |f: &mut Value| f["address"] = wallet.to_checksum(None).into();
    let by_owner = sign_in(&doc, 6, 6, as_wallet);
    let w = windows
        .sign_in("org_1", "rt_1", &req, by_owner.as_bytes())
        .await
        .expect("the wallet accepts its owner's signature");
    assert_eq!(
        (w.payer.as_str(), w.calls_used),
        (format!("{wallet:#x}").as_str(), 1)
    );
    let doc = json!({"extensions": {"sign-in-with-x": paygate_x402::siwx::declaration(
        &origin, uri, "eip155:84532", time::OffsetDateTime::now_utc())}});
    let by_other = sign_in(&doc, 5, 5, as_wallet);
    let refused = windows
        .sign_in("org_1", "rt_1", &req, by_other.as_bytes())
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), "invalid_siwx_signature");
}

/// A call that signs in settles nothing, so it is served while the network's only facilitator
/// (a remote one, here a second paygate) is down and payments answer `503`.
#[tokio::test]
async fn a_window_serves_while_the_facilitator_is_down() {
    let chain = Chain::start();
    let mut facilitator = Gateway::start_with_owned(chain.gateway_env()).await;
    let (_, fkey) = facilitator.create_org("relay-customer", None).await;
    let mut env = remote_facilitator_env(&facilitator, fkey);
    env.push((
        "PAYGATE__METRICS__PROBE_INTERVAL_SECONDS".into(),
        "1".into(),
    ));
    let gw = Gateway::start_with_owned(env).await;
    let upstream = Upstream::start().await;
    let receiver = address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    gw.create_route(
        &key,
        json!({"path": "data", "priceUSD": 0.01, "targetUrl": format!("{}/echo", upstream.url),
               "network": "base-sepolia", "accessWindowSeconds": 3600}),
    )
    .await;
    let spec = PaymentSpec::new(5, receiver, PRICE);
    let paid = gw
        .http
        .get(gw.url("/gateway/acme/data"))
        .header("X-PAYMENT", spec.v1_header())
        .send()
        .await
        .unwrap();
    assert_eq!(paid.status(), 200, "{}", gw.log());
    // A challenge signed while the facilitator answers; then it stops.
    let doc = challenge(&gw).await;
    assert!(facilitator.stop());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let r = gw.get("/gateway/acme/data").await;
        if r.status() == 503 {
            let (_, code, _) = error_of(r).await;
            assert_eq!(code, "FACILITATOR_UNAVAILABLE");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still {}", r.status());
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let r = call_signed_in(&gw, &sign_in(&doc, 5, 5, |_| {})).await;
    assert_eq!(r.status(), 200, "the window serves: nothing to settle");
    let again = PaymentSpec::new(5, receiver, PRICE);
    let r = gw
        .http
        .get(gw.url("/gateway/acme/data"))
        .header("X-PAYMENT", again.v1_header())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503, "a payment cannot be settled now");
    assert_eq!(upstream.hits(), 2);
}
