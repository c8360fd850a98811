//! Every way another x402 server can use through paygate's facilitator API (issue 52: each way
//! owns its facilitator kinds): the official x402 resource server (`@x402/core` with
//! `@x402/evm`'s `exact` and `upto` servers, pointed at `/facilitator`) and the official client
//! pay through it, on a real chain; `auth-capture` is charged into the escrow for another server
//! and refunded by its seller. Bad input moves nothing.

use crate::common;

use alloy_primitives::Address;
use common::chain::{address, Chain, KEYS, USDC};
use common::*;
use reqwest::Method;
use serde_json::{json, Value};

const PRICE: u64 = 10_000;

struct Setup {
    chain: Chain,
    gw: Gateway,
    key: String,
    /// The calling server's seller wallet (account 8).
    seller: Address,
}

async fn setup() -> Setup {
    let chain = Chain::start();
    let gw = Gateway::start_with_owned(chain.gateway_env()).await;
    let (_, key) = gw.create_org("other-server", None).await;
    Setup {
        chain,
        gw,
        key,
        seller: address(8),
    }
}

async fn call(s: &Setup, op: &str, body: &Value) -> Value {
    let r =
        s.gw.api(
            &s.key,
            Method::POST,
            &format!("/facilitator/{op}"),
            Some(body.clone()),
        )
        .await;
    assert_eq!(r.status(), 200, "{op}");
    r.json().await.unwrap()
}

/// The kind `/facilitator/supported` lists for `scheme` (v2).
async fn kind(s: &Setup, scheme: &str) -> Value {
    let supported: Value =
        s.gw.get("/facilitator/supported")
            .await
            .json()
            .await
            .unwrap();
    supported["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["scheme"] == scheme && k["x402Version"] == 2)
        .unwrap_or_else(|| panic!("{scheme} missing from {supported}"))
        .clone()
}

/// The official resource server settles `scheme` through paygate, paid by account `payer`.
fn official_server(s: &Setup, scheme: &str, payer: usize, settle_amount: Option<&str>) -> Value {
    let mut input = json!({"facilitator": s.gw.url("/facilitator"), "apiKey": s.key,
        "scheme": scheme, "network": "eip155:84532", "payTo": s.seller.to_checksum(None),
        "amount": PRICE.to_string(), "asset": USDC, "key": KEYS[payer], "rpc": s.chain.rpc});
    if let Some(a) = settle_amount {
        input["settleAmount"] = a.into();
    }
    node_json("x402_server_settle.cjs", &input)
}

/// The organisation's payments, newest first.
async fn ledger(s: &Setup) -> Vec<Value> {
    s.gw.payments(&s.key).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_server_settles_exact_and_part_of_an_upto_ceiling_through_paygate() {
    let s = setup().await;
    // `exact`: the whole price.
    let (payer, seller_before) = (address(2), s.chain.balance(s.seller).await);
    let before = s.chain.balance(payer).await;
    let out = official_server(&s, "exact", 2, None);
    assert_eq!(out["verify"]["isValid"], true, "{out}");
    assert_eq!(out["settle"]["success"], true, "{out}");
    assert_eq!(s.chain.balance(payer).await, before - PRICE);

    // `upto`: the server learns the facilitator payers let settle from `/supported`, and
    // settles 4,200 of the 10,000 ceiling; only that moves.
    let upto = kind(&s, "upto").await;
    let operator = upto["extra"]["facilitatorAddress"].clone();
    assert!(operator.is_string(), "{upto}");
    let (payer, before) = (address(3), s.chain.balance(address(3)).await);
    let out = official_server(&s, "upto", 3, Some("4200"));
    assert_eq!(
        out["requirements"]["extra"]["facilitatorAddress"], operator,
        "{out}"
    );
    assert_eq!(out["verify"]["isValid"], true, "{out}");
    assert_eq!(out["settle"]["success"], true, "{out}");
    assert_eq!(out["settle"]["amount"], "4200", "{out}");
    let tx = out["settle"]["transaction"].as_str().unwrap().to_string();
    assert!(tx.starts_with("0x"), "{out}");
    assert_eq!(s.chain.balance(payer).await, before - 4_200);
    assert_eq!(
        s.chain.balance(s.seller).await,
        seller_before + PRICE + 4_200
    );
    let recorded = ledger(&s).await;
    assert_eq!(recorded[0]["amountUSDC"], "0.004200", "{recorded:?}");
    assert_eq!(recorded[0]["status"], "SETTLED", "{recorded:?}");

    // The same settlement asked again (its answer lost) answers the first; a settle of another
    // amount for the spent authorization is a replay; nothing more moves.
    let mut asked = out["requirements"].clone();
    asked["amount"] = "4200".into();
    let body = json!({"x402Version": 2, "paymentPayload": out["payload"],
        "paymentRequirements": asked});
    let again = call(&s, "settle", &body).await;
    assert_eq!(
        (&again["success"], &again["transaction"]),
        (&json!(true), &json!(tx)),
        "{again}"
    );
    let mut more = body.clone();
    more["paymentRequirements"]["amount"] = "5000".into();
    let replay = call(&s, "settle", &more).await;
    assert_eq!(replay["success"], false, "{replay}");
    assert_eq!(s.chain.balance(payer).await, before - 4_200);
}

/// An `upto` payment the caller cannot settle: one naming another facilitator, and a settle
/// above the payer's ceiling; each refused with its reason word, nothing moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upto_payments_for_another_facilitator_or_above_their_ceiling_move_nothing() {
    let s = setup().await;
    let upto = kind(&s, "upto").await;
    let requirement = |facilitator: Value| {
        json!({"scheme": "upto", "network": "eip155:84532", "amount": PRICE.to_string(),
            "payTo": s.seller.to_checksum(None), "maxTimeoutSeconds": 60, "asset": USDC,
            "extra": {"name": "USDC", "version": "2", "assetTransferMethod": "permit2",
                "facilitatorAddress": facilitator}})
    };
    let signed = |req: &Value| {
        let doc = node_json(
            "x402_permit2_sign.cjs",
            &json!({"scheme": "upto", "key": KEYS[5], "requirements": req}),
        );
        json!({"x402Version": 2, "accepted": req, "payload": doc["payload"]})
    };
    let payer = address(5);
    let before = s.chain.balance(payer).await;
    // Signed for another facilitator (this deployment cannot settle it, and must not).
    let other = requirement(address(7).to_checksum(None).into());
    let body =
        json!({"x402Version": 2, "paymentPayload": signed(&other), "paymentRequirements": other});
    let v = call(&s, "verify", &body).await;
    assert_eq!(v["invalidReason"], "invalid_payment_requirements", "{v}");
    let r = call(&s, "settle", &body).await;
    assert_eq!(r["errorReason"], "invalid_payment_requirements", "{r}");
    // Ours, settled above its ceiling.
    let ours = requirement(upto["extra"]["facilitatorAddress"].clone());
    let mut above = ours.clone();
    above["amount"] = (PRICE + 1).to_string().into();
    let body =
        json!({"x402Version": 2, "paymentPayload": signed(&ours), "paymentRequirements": above});
    let r = call(&s, "settle", &body).await;
    assert_eq!(
        r["errorReason"], "invalid_upto_evm_payload_settlement_exceeds_amount",
        "{r}"
    );
    assert_eq!(s.chain.balance(payer).await, before);
    assert!(ledger(&s).await.is_empty());
}

/// `auth-capture` for another server: its requirement carries the terms `/supported` lists and
/// its own deadlines; `/settle` charges the escrow (held and captured at once) for the seller,
/// once; the seller refunds part of it through the payments API, funded by its own wallet.
/// A requirement whose deadlines are not the ones the payer signed is refused, nothing held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_capture_is_charged_for_another_server_and_refunded_by_its_seller() {
    let s = setup().await;
    let k = kind(&s, "auth-capture").await;
    let now = paygate_domain::unix_now();
    let mut extra = k["extra"].clone();
    extra["name"] = "USDC".into();
    extra["version"] = "2".into();
    extra["captureDeadline"] = (now + 600).into();
    extra["refundDeadline"] = (now + 600 + 3_600).into();
    let req = json!({"scheme": "auth-capture", "network": "eip155:84532",
        "amount": PRICE.to_string(), "payTo": s.seller.to_checksum(None),
        "maxTimeoutSeconds": 60, "asset": USDC, "extra": extra});
    let doc = common::escrow::signed_doc(
        &json!({"accepts": [req], "resource": {"url": "https://other.example/report"}}),
        4,
    );
    let body = json!({"x402Version": 2, "paymentPayload": doc, "paymentRequirements": req});
    let (payer, payer_before) = (address(4), s.chain.balance(address(4)).await);
    let seller_before = s.chain.balance(s.seller).await;

    // Deadlines the payer did not sign: refused, nothing held.
    let mut moved = body.clone();
    moved["paymentRequirements"]["extra"]["captureDeadline"] = (now + 900).into();
    moved["paymentRequirements"]["extra"]["refundDeadline"] = (now + 900 + 3_600).into();
    let r = call(&s, "settle", &moved).await;
    assert_eq!(r["errorReason"], "invalid_deadline_ordering", "{r}");
    assert_eq!(s.chain.balance(payer).await, payer_before);

    let v = call(&s, "verify", &body).await;
    assert_eq!(v["isValid"], true, "{v}");
    assert_eq!(v["payer"], payer.to_checksum(None), "{v}");
    let settled = call(&s, "settle", &body).await;
    assert_eq!(settled["success"], true, "{settled}\n{}", s.gw.log());
    assert_eq!(settled["amount"], PRICE.to_string(), "{settled}");
    assert_eq!(s.chain.balance(payer).await, payer_before - PRICE);
    assert_eq!(s.chain.balance(s.seller).await, seller_before + PRICE);
    // Asked again: the same settlement, nothing more moves.
    let again = call(&s, "settle", &body).await;
    assert_eq!(again["transaction"], settled["transaction"], "{again}");
    assert_eq!(s.chain.balance(payer).await, payer_before - PRICE);

    // The seller refunds 0.004 of it, from its own wallet (it approves the collector once).
    let payment = ledger(&s).await[0].clone();
    assert_eq!(payment["status"], "SETTLED", "{payment}");
    common::escrow::approve_refunds(&s.chain, 8).await;
    let seller_paid = s.chain.balance(s.seller).await;
    let id = payment["id"].as_str().unwrap();
    let r =
        s.gw.http
            .post(s.gw.url(&format!("/api/payments/{id}/refund")))
            .bearer_auth(&s.key)
            .header("Idempotency-Key", "refund-1")
            .json(&json!({"amountUSDC": "0.004"}))
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(s.chain.balance(payer).await, payer_before - PRICE + 4_000);
    assert_eq!(s.chain.balance(s.seller).await, seller_paid - 4_000);
}
