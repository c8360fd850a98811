//! End-to-end payments on a real chain: anvil with Circle's USDC, the real binary settling through
//! its embedded facilitator, a real upstream on loopback.

use crate::common;

use base64::Engine;
use common::chain::{address, Chain, PaymentSpec};
use common::upstream::Upstream;
use common::*;
use serde_json::{json, Value};

const PRICE: u64 = 10_000; // $0.01

struct Setup {
    chain: Chain,
    gw: Gateway,
    upstream: Upstream,
    receiver: alloy_primitives::Address,
}

async fn setup() -> Setup {
    let chain = Chain::start();
    let (gw, upstream, receiver) = gateway_with_echo(chain.gateway_env()).await;
    Setup {
        chain,
        gw,
        upstream,
        receiver,
    }
}

/// Issue 52: another sender using the relayer's key (README's `paygate devchain fund` does) must
/// not make the next payments fail as the payer's rejection: the relayer takes the chain's
/// nonce again and sends once more.
#[tokio::test]
async fn a_transaction_sent_from_the_relayers_key_elsewhere_does_not_fail_the_next_payment() {
    let s = setup().await;
    let payer = address(2);
    let before = s.chain.balance(payer).await;
    // The first payment makes the relayer count its nonce itself.
    let r = pay_v1(&s.gw, &PaymentSpec::new(2, s.receiver, PRICE)).await;
    assert_eq!(r.status(), 200, "{}", s.gw.log());
    for round in 1..=3u64 {
        // Another program sends from the relayer's key (account 0), as `devchain fund` does.
        s.chain
            .send(0, address(8), Vec::new())
            .await
            .expect("a plain transaction from the relayer's key");
        let r = pay_v1(&s.gw, &PaymentSpec::new(2, s.receiver, PRICE)).await;
        assert_eq!(r.status(), 200, "round {round}: {}", s.gw.log());
        assert_eq!(s.chain.balance(payer).await, before - PRICE * (round + 1));
    }
    assert_eq!(s.upstream.hits(), 4);
}

#[tokio::test]
async fn paid_request_settles_on_chain_then_reaches_the_upstream_once() {
    let s = setup().await;
    let payer = address(1);
    let (payer_before, recv_before) = (
        s.chain.balance(payer).await,
        s.chain.balance(s.receiver).await,
    );

    let spec = PaymentSpec::new(1, s.receiver, PRICE);
    let r = pay_v1(&s.gw, &spec).await;
    assert_eq!(r.status(), 200, "{}", s.gw.log());
    let rec = receipt(&r, "x-payment-response");
    assert_eq!(rec["success"], true);
    assert_eq!(rec["network"], "base-sepolia");
    assert_eq!(rec["payer"], json!(payer.to_checksum(None)));
    assert!(rec["transaction"].as_str().unwrap().starts_with("0x"));
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["path"], "/echo");
    assert_eq!(body["query"], "fixed=1&q=1");
    assert!(
        body["headers"].get("x-payment").is_none(),
        "payment header not forwarded"
    );
    assert_eq!(s.upstream.hits(), 1);
    assert_eq!(s.chain.balance(payer).await, payer_before - PRICE);
    assert_eq!(s.chain.balance(s.receiver).await, recv_before + PRICE);

    // The same payment again: 402 NONCE_REPLAY with the challenge, no upstream call, no transfer.
    let r = pay_v1(&s.gw, &spec).await;
    assert_eq!(r.status(), 402);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], "NONCE_REPLAY");
    assert_eq!(body["accepts"][0]["maxAmountRequired"], "10000");
    assert_eq!(s.upstream.hits(), 1);
    assert_eq!(s.chain.balance(payer).await, payer_before - PRICE);
}

#[tokio::test]
async fn one_payment_sent_twenty_times_at_once_is_served_once() {
    let s = setup().await;
    let payer = address(2);
    let before = s.chain.balance(payer).await;
    let spec = PaymentSpec::new(2, s.receiver, PRICE);
    let header = spec.v1_header();
    let sends = (0..20).map(|_| {
        s.gw.http
            .get(s.gw.url("/gateway/acme/echo"))
            .header("X-PAYMENT", header.clone())
            .send()
    });
    let results = futures_util::future::join_all(sends).await;
    let statuses: Vec<u16> = results
        .iter()
        .map(|r| r.as_ref().unwrap().status().as_u16())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );
    // The others are told the payment is taken: `504 SETTLEMENT_PENDING` while the first one
    // is still settling ("do not pay again"), `402 NONCE_REPLAY` once it has settled.
    for r in results.into_iter().map(Result::unwrap) {
        if r.status() == 200 {
            continue;
        }
        let (status, code, _) = error_of(r).await;
        assert!(
            matches!(
                (status, code.as_str()),
                (504, "SETTLEMENT_PENDING") | (402, "NONCE_REPLAY")
            ),
            "{status} {code} in {statuses:?}"
        );
    }
    assert_eq!(s.upstream.hits(), 1);
    assert_eq!(s.chain.balance(payer).await, before - PRICE);
}

#[tokio::test]
async fn v2_payment_gets_the_v2_receipt() {
    let s = setup().await;
    let r = s.gw.get("/gateway/acme/echo").await;
    let raw = r.headers()["payment-required"]
        .to_str()
        .unwrap()
        .to_string();
    let doc: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(raw)
            .unwrap(),
    )
    .unwrap();
    let accepted = doc["accepts"][0].clone();
    let spec = PaymentSpec::new(3, s.receiver, PRICE);
    let r =
        s.gw.http
            .get(s.gw.url("/gateway/acme/echo"))
            .header("PAYMENT-SIGNATURE", spec.v2_header(&accepted))
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 200, "{}", s.gw.log());
    let rec = receipt(&r, "payment-response");
    assert_eq!(rec["network"], "eip155:84532");
    assert!(r.headers().get("x-payment-response").is_none());

    // An `accepted` that differs from the route's requirement is refused.
    let mut cheaper = accepted.clone();
    cheaper["amount"] = json!("1");
    let spec = PaymentSpec::new(3, s.receiver, PRICE);
    let r =
        s.gw.http
            .get(s.gw.url("/gateway/acme/echo"))
            .header("PAYMENT-SIGNATURE", spec.v2_header(&cheaper))
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 402);
}

/// One rule for a refusal's body (issue 43): the x402 version the payer spoke. The same
/// refused payment (one unit short) sent as v2 gets a v2 body, sent as v1 a v1 body; both carry
/// the error's code and request id and move nothing.
#[tokio::test]
async fn a_refusal_is_written_in_the_version_the_payer_spoke() {
    let s = setup().await;
    let r = s.gw.get("/gateway/acme/echo").await;
    let accepted = decode_v2(&r)["accepts"][0].clone();
    let short = PaymentSpec::new(4, s.receiver, PRICE - 1);
    let r =
        s.gw.http
            .get(s.gw.url("/gateway/acme/echo"))
            .header("PAYMENT-SIGNATURE", short.v2_header(&accepted))
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 402);
    let v2: Value = r.json().await.unwrap();
    assert_eq!(v2["x402Version"], 2, "{v2}");
    assert_eq!(v2["code"], "PAYMENT_REJECTED", "{v2}");
    assert!(
        v2["requestId"].as_str().is_some_and(|id| !id.is_empty()),
        "{v2}"
    );
    assert_eq!(v2["accepts"][0]["amount"], PRICE.to_string(), "{v2}");
    assert!(v2["accepts"][0].get("maxAmountRequired").is_none(), "{v2}");
    let r = pay_v1(&s.gw, &short).await;
    assert_eq!(r.status(), 402);
    let v1: Value = r.json().await.unwrap();
    assert_eq!(v1["x402Version"], 1, "{v1}");
    assert_eq!(v1["code"], "PAYMENT_REJECTED", "{v1}");
    assert_eq!(
        v1["accepts"][0]["maxAmountRequired"],
        PRICE.to_string(),
        "{v1}"
    );
    assert_eq!(
        v1["error"], v2["error"],
        "one reason word, whatever the version"
    );
    assert_eq!(s.upstream.hits(), 0);
}

#[tokio::test]
async fn unacceptable_payments_are_refused_and_move_nothing() {
    let s = setup().await;
    let payer = address(4);
    let before = s.chain.balance(payer).await;
    let mut cases: Vec<(&str, PaymentSpec, &str)> = Vec::new();
    cases.push((
        "wrong payee",
        PaymentSpec::new(4, address(8), PRICE),
        "recipient",
    ));
    cases.push((
        "wrong amount",
        PaymentSpec::new(4, s.receiver, PRICE - 1),
        "value",
    ));
    let mut expired = PaymentSpec::new(4, s.receiver, PRICE);
    expired.valid_before = common::chain::now() + 2;
    cases.push(("expired", expired, "valid_before"));
    let mut forged = PaymentSpec::new(4, s.receiver, PRICE);
    forged.signer = Some(5);
    cases.push(("bad signature", forged, "signature"));
    // Account 7 holds no USDC: only the chain can tell.
    cases.push((
        "insufficient balance",
        PaymentSpec::new(7, s.receiver, PRICE),
        "insufficient",
    ));
    for (what, spec, reason) in cases {
        let r = pay_v1(&s.gw, &spec).await;
        assert_eq!(r.status(), 402, "{what}");
        assert!(r.headers().contains_key("payment-required"), "{what}");
        let body: Value = r.json().await.unwrap();
        assert!(
            body["error"].as_str().unwrap().contains(reason),
            "{what}: {body}"
        );
        assert_eq!(body["code"], "PAYMENT_REJECTED", "{what}");
    }
    assert_eq!(s.upstream.hits(), 0);
    assert_eq!(s.chain.balance(payer).await, before);

    // Malformed headers: 400 INVALID_PAYMENT.
    for bad in ["not base64 !!", "e30=", "eyJ4NDAyVmVyc2lvbiI6MX0="] {
        let r =
            s.gw.http
                .get(s.gw.url("/gateway/acme/echo"))
                .header("X-PAYMENT", bad)
                .send()
                .await
                .unwrap();
        let (status, code, _) = error_of(r).await;
        assert_eq!((status, code.as_str()), (400, "INVALID_PAYMENT"), "{bad}");
    }
    assert_eq!(s.upstream.hits(), 0);
}

#[tokio::test]
async fn a_relayer_without_gas_money_is_the_operators_503_not_the_payers_402() {
    let chain = Chain::start();
    // A key of no funded account: it cannot pay for gas.
    let unfunded = "0x1111111111111111111111111111111111111111111111111111111111111111";
    let mut env = chain.gateway_env();
    env.retain(|(k, _)| k != "PAYGATE_RELAYER_KEY");
    env.push(("PAYGATE_RELAYER_KEY".into(), unfunded.into()));
    let (gw, upstream, receiver) = gateway_with_echo(env).await;
    let spec = PaymentSpec::new(1, receiver, PRICE);
    let (status, code, _) = error_of(pay_v1(&gw, &spec).await).await;
    assert_eq!((status, code.as_str()), (503, "FACILITATOR_UNAVAILABLE"));
    assert_eq!(upstream.hits(), 0);
    assert_eq!(chain.balance(address(1)).await, 1_000_000_000);
    assert!(
        gw.log().contains("the relayer cannot pay for gas"),
        "an ERROR line for the operator:\n{}",
        gw.log()
    );
}
