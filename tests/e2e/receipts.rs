//! Signed offers and receipts (issue 44, item 4: x402 `offer-and-receipt`, EIP-712): every `402`
//! carries an offer per `accepts` entry and every settled paid request's `PAYMENT-RESPONSE` a
//! receipt signed by the deployment's key (derived from
//! the master key here), verified with the official npm helper (@x402/extensions'
//! `verifyReceiptSignatureEIP712`, no code of paygate's) against the key the deployment
//! publishes in its `did:web` document; `GET /api/payments/{id}/receipt` gives the same receipt
//! again; a changed receipt recovers to another signer.

use crate::common;

use common::chain::{address, Chain, KEYS};
use common::upstream::Upstream;
use common::*;
use serde_json::{json, Value};

const MASTER_KEY: &str = "7d1e5c8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f90112233445566778899aab";

/// The id of the organisation's newest payment.
async fn newest_payment(gw: &Gateway, key: &str) -> String {
    let list: Value = gw
        .api(key, reqwest::Method::GET, "/api/payments?limit=1", None)
        .await
        .json()
        .await
        .unwrap();
    list["payments"][0]["id"].as_str().unwrap().to_string()
}

/// The receipt key's address the deployment publishes in its `did:web` document (lowercase).
async fn published_key(gw: &Gateway) -> String {
    let did: Value = gw
        .http
        .get(gw.url("/.well-known/did.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let account = did["verificationMethod"][0]["blockchainAccountId"]
        .as_str()
        .unwrap();
    assert_eq!(
        did["assertionMethod"][0], did["verificationMethod"][0]["id"],
        "{did}"
    );
    account.rsplit(':').next().unwrap().to_ascii_lowercase()
}

/// A gateway signing with [`MASTER_KEY`]'s receipt key on a chain, with organisation `acme`
/// (its API key) and an echo origin.
async fn signing_gateway() -> (Chain, Gateway, Upstream, String) {
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.push(("PAYGATE_MASTER_KEY".into(), MASTER_KEY.into()));
    let gw = Gateway::start_with_owned(env).await;
    let upstream = Upstream::start().await;
    let (_, key) = gw
        .create_org("acme", Some(&address(9).to_checksum(None)))
        .await;
    (chain, gw, upstream, key)
}

/// The signed receipt a decoded payment response carries, checked by the official helper to
/// be signed by `published` for `url` and account `payer`: its payload.
fn verified_receipt(response: &Value, published: &str, url: &str, payer: usize) -> Value {
    let receipt = &response["extensions"]["offer-receipt"]["info"]["receipt"];
    assert_eq!(receipt["format"], "eip712", "{response}");
    let checked = node_json("x402_receipt_verify.cjs", &json!({ "receipt": receipt }));
    assert_eq!(
        checked["signer"].as_str().unwrap().to_ascii_lowercase(),
        published,
        "{checked}"
    );
    let payload = checked["payload"].clone();
    assert_eq!(payload["resourceUrl"], url, "{payload}");
    assert_eq!(payload["network"], "eip155:84532");
    assert_eq!(payload["transaction"], response["transaction"], "{payload}");
    assert!(payload["payer"]
        .as_str()
        .unwrap()
        .eq_ignore_ascii_case(&address(payer).to_string()));
    payload
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_request_gets_a_signed_receipt_anyone_can_verify() {
    let (chain, gw, upstream, key) = signing_gateway().await;
    for (path, schemes) in [
        ("exact", json!(["exact"])),
        ("escrowed", json!(["auth-capture"])),
    ] {
        gw.create_route(
            &key,
            json!({"path": path, "priceUSD": 0.01, "schemes": schemes,
                "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia"}),
        )
        .await;
    }
    let published = published_key(&gw).await;

    for path in ["exact", "escrowed"] {
        let url = gw.url(&format!("/gateway/acme/{path}"));
        // The 402's offer, one per accepts entry, signed by the same key.
        let challenge = common::windows::challenge_at(&gw, &format!("/gateway/acme/{path}")).await;
        let offers = &challenge["extensions"]["offer-receipt"]["info"]["offers"];
        assert_eq!(offers.as_array().map(Vec::len), Some(1), "{challenge}");
        let checked = node_json("x402_receipt_verify.cjs", &json!({"offer": offers[0]}));
        assert_eq!(
            checked["signer"].as_str().unwrap().to_ascii_lowercase(),
            published,
            "{checked}"
        );
        let (offer, accepted) = (&checked["payload"], &challenge["accepts"][0]);
        for field in ["scheme", "network", "asset", "payTo", "amount"] {
            assert_eq!(offer[field], accepted[field], "{field}: {checked}");
        }
        assert_eq!(offer["resourceUrl"], url);
        assert!(offer["validUntil"].as_u64().unwrap() > paygate_domain::unix_now());
        let paid = node_json(
            "x402_permit2_pay.cjs",
            &json!({"url": url, "key": KEYS[4], "rpc": chain.rpc, "calls": 1}),
        )["results"][0]
            .clone();
        assert_eq!(paid["status"], 200, "{paid}");
        verified_receipt(&paid["receipt"], &published, &url, 4);
        let receipt = paid["receipt"]["extensions"]["offer-receipt"]["info"]["receipt"].clone();

        // The same receipt again from the API (once the answer is recorded as served).
        let id = newest_payment(&gw, &key).await;
        let (status, again) = api_receipt(&gw, &key, &id).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(again["receipt"], receipt, "{again}");

        // A changed receipt (another payer) no longer recovers to the published key.
        let mut forged = receipt.clone();
        forged["payload"]["payer"] = json!(address(5).to_checksum(None));
        let checked = node_json("x402_receipt_verify.cjs", &json!({"receipt": forged}));
        assert_ne!(
            checked["signer"].as_str().unwrap().to_ascii_lowercase(),
            published,
            "{checked}"
        );
    }
    // Another organisation sees no receipt of acme's payments.
    let (_, other) = gw
        .create_org("beta", Some(&address(8).to_checksum(None)))
        .await;
    let id = newest_payment(&gw, &key).await;
    let r = gw
        .api(
            &other,
            reqwest::Method::GET,
            &format!("/api/payments/{id}/receipt"),
            None,
        )
        .await;
    assert_eq!(r.status(), 404);
}

/// `GET /api/payments/{id}/receipt`: its status and body, asked again for up to 5 s while the
/// answer is not recorded as served yet (the origin's status is written after the answer).
async fn api_receipt(gw: &Gateway, key: &str, id: &str) -> (u16, Value) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let r = gw
            .api(
                key,
                reqwest::Method::GET,
                &format!("/api/payments/{id}/receipt"),
                None,
            )
            .await;
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        let unrecorded = body["message"]
            .as_str()
            .is_some_and(|m| m.contains("not recorded as served"));
        if !unrecorded || std::time::Instant::now() > deadline {
            return (status, body);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Issue 52: the deployment signs a receipt only for a request it served for the organisation's
/// own route. A settlement through the facilitator API for another server (whose resource its
/// caller named, here another organisation's URL) gets none, nor does a payment whose origin
/// failed; each says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_receipt_for_what_this_deployment_did_not_serve() {
    let (_chain, gw, upstream, key) = signing_gateway().await;
    gw.create_route(
        &key,
        json!({"path": "exact", "priceUSD": 0.01, "schemes": ["exact"],
            "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia"}),
    )
    .await;
    let seller = address(9);
    // Through the facilitator API, naming a resource of the caller's choice.
    let spec = common::chain::PaymentSpec::new(3, seller, 10_000);
    let body = json!({"x402Version": 1, "paymentPayload": spec.v1_payload(),
        "paymentRequirements": {
            "scheme": "exact", "network": "base-sepolia", "maxAmountRequired": "10000",
            "resource": gw.url("/gateway/other-org/anything"), "description": "", "mimeType": "",
            "payTo": seller.to_checksum(None), "maxTimeoutSeconds": 60,
            "asset": common::chain::USDC, "extra": {"name": "USDC", "version": "2"}}});
    let settled: Value = gw
        .api(
            &key,
            reqwest::Method::POST,
            "/facilitator/settle",
            Some(body),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(settled["success"], true, "{settled}");
    assert!(settled["extensions"].is_null(), "no receipt: {settled}");
    let id = newest_payment(&gw, &key).await;
    let (status, said) = api_receipt(&gw, &key, &id).await;
    assert_eq!(status, 404, "{said}");
    assert!(
        said["message"]
            .as_str()
            .unwrap()
            .contains("facilitator API"),
        "{said}"
    );
    // Paid on the gateway, and the origin failed.
    let spec = common::chain::PaymentSpec::new(3, seller, 10_000);
    let r = gw
        .http
        .get(gw.url("/gateway/acme/exact?upstream_status=500"))
        .header("X-PAYMENT", spec.v1_header())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    let id = newest_payment(&gw, &key).await;
    let (status, said) = api_receipt(&gw, &key, &id).await;
    assert_eq!(status, 404, "{said}");
    assert!(
        said["message"].as_str().unwrap().contains("did not serve"),
        "{said}"
    );
}

/// Requests paid without a payment record of their own get signed receipts too: a channel's
/// vouchers (the first with its deposit's transaction, later ones with none) and calls served
/// by an access window, each verified with the official helper.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vouchers_and_window_calls_get_signed_receipts() {
    let (chain, gw, upstream, key) = signing_gateway().await;
    let published = published_key(&gw).await;
    gw.create_route(
        &key,
        json!({"path": "metered", "priceUSD": 0.01, "schemes": ["batch-settlement"],
            "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia"}),
    )
    .await;
    let window_route = gw
        .create_route(
            &key,
            json!({"path": "window", "priceUSD": 0.01, "accessWindowSeconds": 600,
            "accessWindowCalls": 3, "targetUrl": format!("{}/echo", upstream.url),
            "network": "base-sepolia"}),
        )
        .await;

    let url = gw.url("/gateway/acme/metered");
    let report = common::channel::official_pay(&url, 4, &chain.rpc, 3, 1, None).await;
    assert_eq!(report["statuses"], json!({"200": 3}), "{report}");
    let (first, last) = (&report["receipts"][0], &report["receipts"][1]);
    let deposit = verified_receipt(first, &published, &url, 4);
    assert!(deposit["transaction"].as_str().unwrap().starts_with("0x"));
    let voucher = verified_receipt(last, &published, &url, 4);
    assert_eq!(voucher["transaction"], "", "a voucher alone moved nothing");

    let url = gw.url("/gateway/acme/window");
    let report = common::windows::official_pay(&url, 5, &chain.rpc, 3).await;
    assert_eq!(
        report["kinds"],
        json!(["paid", "window", "window"]),
        "{report}"
    );
    for response in report["windowReceipts"].as_array().unwrap() {
        let served = verified_receipt(response, &published, &url, 5);
        assert_eq!(served["transaction"], "", "{served}");
    }

    // The origin fails the window's next call: given back, its receipt is not signed.
    let id = window_route["id"].as_str().unwrap();
    let failing = json!({"targetUrl": format!("{}/echo?upstream_status=500", upstream.url)});
    let r = gw
        .api(
            &key,
            reqwest::Method::PATCH,
            &format!("/api/routes/{id}"),
            Some(failing),
        )
        .await;
    assert_eq!(r.status(), 200);
    let report = common::windows::official_pay(&url, 5, &chain.rpc, 1).await;
    assert_eq!(report["kinds"], json!(["500"]), "{report}");
    let failed = &report["failedReceipts"][0];
    assert_eq!(failed["accessWindow"]["callsLeft"], 0, "{report}");
    assert!(failed.get("extensions").is_none(), "{failed}");
}
