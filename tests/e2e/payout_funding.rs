//! Payouts funded on chain (issue 30, item 2): the real binary on anvil with Circle's USDC, the
//! sandbox provider asking for the USDC at an address of its own and checking the transfer on
//! chain before it accepts a payout. The chain's balances are the judge.

use crate::common;

use alloy_primitives::Address;
use common::chain::{address, Chain, KEYS};
use common::*;
use reqwest::Method;
use serde_json::{json, Value};

const MASTER_KEY: &str = "7c2e9a41d0b35f86e1a47c09b2d58e3f6a1c4d7e0b93f25a8c6e1d4b7a0f3c92";

/// The sandbox's funding address (anvil account 8: never a payer here).
fn provider_address() -> Address {
    address(8)
}

async fn setup() -> (Chain, Gateway, String) {
    setup_with(&[]).await
}

/// The provider standing in for Circle Payments Network: paygate's CPN adapter against the
/// built-in simulator (CPN's wire shapes, encrypted beneficiary data, RFIs).
async fn setup_cpn() -> (Chain, Gateway, String) {
    setup_with(&[("PAYGATE__PAYOUT__PROVIDER", "cpn")]).await
}

async fn setup_with(extra: &[(&str, &str)]) -> (Chain, Gateway, String) {
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env.push(("PAYGATE_MASTER_KEY".into(), MASTER_KEY.into()));
    env.push((
        "PAYGATE__PAYOUT__FUNDING_NETWORK".into(),
        "base-sepolia".into(),
    ));
    env.push((
        "PAYGATE__PAYOUT__SANDBOX__FUNDING_ADDRESS".into(),
        provider_address().to_checksum(None),
    ));
    env.push((
        "PAYGATE__PAYOUT__SANDBOX__WEBHOOK_DELAY_MS".into(),
        "100".into(),
    ));
    // The sandbox signs as CPN does and holds its funding address's key: a failed payout's
    // USDC goes back to the payout wallet.
    env.push((
        "PAYGATE__PAYOUT__SANDBOX__WEBHOOK_SIGNING".into(),
        "circle".into(),
    ));
    env.push(("PAYGATE_SANDBOX_FUNDING_KEY".into(), KEYS[8].into()));
    let gw = Gateway::start_with_owned(env).await;
    let (_, key) = gw
        .create_org("acme", Some(&address(9).to_checksum(None)))
        .await;
    (chain, gw, key)
}

async fn wallet(gw: &Gateway, key: &str) -> Value {
    let r = gw.api(key, Method::GET, "/api/payout-wallet", None).await;
    assert_eq!(r.status(), 200, "{}", gw.log());
    r.json().await.unwrap()
}

fn pay_body(quote: &Value, from: &str) -> Value {
    pay_to(quote, from, "Ana Souza")
}

/// A pay body to `name` (the sandbox's outcome names: `Sandbox Fail` fails the fiat leg).
fn pay_to(quote: &Value, from: &str, name: &str) -> Value {
    json!({"quoteId": quote["quoteId"], "fromAddress": from, "amountUSDC": quote["amount"],
           "beneficiary": {"name": name, "bankName": "Nubank", "pixKey": "ana@example.com",
                           "country": "BR", "currency": "BRL"}})
}

async fn payout(gw: &Gateway, key: &str, corridor: &str, id: &str) -> Value {
    let path = format!("/corridors/{corridor}/payments/{id}");
    gw.api(key, Method::GET, &path, None)
        .await
        .json()
        .await
        .unwrap()
}

/// Field `name` of each object of the array `v`.
fn column<'a>(v: &'a Value, name: &str) -> Vec<&'a str> {
    v.as_array()
        .map(|a| a.iter().filter_map(|o| o[name].as_str()).collect())
        .unwrap_or_default()
}

/// Polls payout `id` until `done` holds for it (or 15 s pass); the last record.
async fn payout_until(
    gw: &Gateway,
    key: &str,
    corridor: &str,
    id: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let rec = payout(gw, key, corridor, id).await;
        if done(&rec) || std::time::Instant::now() > deadline {
            return rec;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn quote(gw: &Gateway, key: &str, corridor: &str, amount: &str) -> Value {
    let r = gw
        .api(
            key,
            Method::GET,
            &format!("/corridors/{corridor}/quote?amount={amount}"),
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn a_payout_moves_the_quoted_usdc_from_the_payout_wallet_once() {
    let (chain, gw, key) = setup().await;
    let w = wallet(&gw, &key).await;
    let from = w["address"].as_str().unwrap().to_string();
    let wallet_addr: Address = from.parse().unwrap();
    assert_eq!(w["usdcBalance"], "0.000000");
    assert_eq!(w["network"], "eip155:84532");
    let corridor = gw.active_corridor(&key, "BRL").await;

    // An empty wallet: refused before anything is signed; nothing moves.
    let q = quote(&gw, &key, &corridor, "10").await;
    let r = gw
        .pay_corridor(&key, &corridor, "k-empty", &pay_body(&q, &from))
        .await;
    let (status, code, body) = error_of(r).await;
    assert_eq!(
        (status, code.as_str()),
        (409, "INSUFFICIENT_FUNDS"),
        "{body}"
    );
    // Another wallet as fromAddress: refused too.
    let r = gw
        .pay_corridor(&key, &corridor, "k-other", &pay_body(&q, WALLET_B))
        .await;
    let (status, _, body) = error_of(r).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["message"].as_str().unwrap().contains(&from), "{body}");

    // 25 USDC into the payout wallet (from payer account 1).
    chain.send_usdc(1, wallet_addr, 25_000_000).await;
    assert_eq!(wallet(&gw, &key).await["usdcBalance"], "25.000000");
    let provider_before = chain.balance(provider_address()).await;

    // A payout of 10 USDC: the provider receives 10 less the 0.50 % platform fee (9.95), the
    // payout wallet pays exactly that; the payout records the transfer.
    let r = gw
        .pay_corridor(&key, &corridor, "k-1", &pay_body(&q, &from))
        .await;
    assert_eq!(r.status(), 202, "{}", gw.log());
    let accepted: Value = r.json().await.unwrap();
    let pid = accepted["paymentId"].as_str().unwrap();
    assert_eq!(chain.balance(wallet_addr).await, 25_000_000 - 9_950_000);
    assert_eq!(
        chain.balance(provider_address()).await,
        provider_before + 9_950_000
    );
    // The same key again: the same payout, no second transfer.
    let r = gw
        .pay_corridor(&key, &corridor, "k-1", &pay_body(&q, &from))
        .await;
    assert_eq!(r.status(), 202);
    assert_eq!(chain.balance(wallet_addr).await, 15_050_000);
    let rec = payout(&gw, &key, &corridor, pid).await;
    assert_eq!(rec["fromAddress"], from.as_str(), "{rec}");
    assert_eq!(rec["funding"]["amount"], "9.950000", "{rec}");
    assert_eq!(rec["funding"]["to"], provider_address().to_checksum(None));
    assert!(
        rec["funding"]["transaction"]
            .as_str()
            .unwrap()
            .starts_with("0x"),
        "{rec}"
    );

    // Not enough left for a 20 USDC payout: refused, the balance untouched.
    let q2 = quote(&gw, &key, &corridor, "20").await;
    let r = gw
        .pay_corridor(&key, &corridor, "k-2", &pay_body(&q2, &from))
        .await;
    assert_eq!(error_of(r).await.1, "INSUFFICIENT_FUNDS");
    assert_eq!(chain.balance(wallet_addr).await, 15_050_000);
    assert_eq!(
        wallet(&gw, &key).await["usdcBalance"],
        "15.050000",
        "the API reads the chain"
    );

    // A payout whose fiat leg fails: funded (9.95 leaves), then given back by the provider;
    // the payout shows both transfers and says where the USDC went.
    let q3 = quote(&gw, &key, &corridor, "10").await;
    let r = gw
        .pay_corridor(
            &key,
            &corridor,
            "k-fail",
            &pay_to(&q3, &from, "Sandbox Fail"),
        )
        .await;
    assert_eq!(r.status(), 202, "{}", gw.log());
    let accepted: Value = r.json().await.unwrap();
    let pid = accepted["paymentId"].as_str().unwrap();
    let rec = payout_until(&gw, &key, &corridor, pid, |r| r["status"] == "FAILED").await;
    assert_eq!(rec["status"], "FAILED", "{rec}\n{}", gw.log());
    assert!(
        rec["funding"]["returnedTransaction"]
            .as_str()
            .unwrap()
            .starts_with("0x"),
        "{rec}"
    );
    assert!(
        rec["failureMessage"]
            .as_str()
            .unwrap()
            .contains("returned to the payout wallet"),
        "{rec}"
    );
    assert_eq!(
        chain.balance(wallet_addr).await,
        15_050_000,
        "the USDC came back"
    );
}

/// The status of `POST /corridors/{its corridor}/payments/{pid}/{action}` sent by a new
/// organisation (`other`) to payout `pid` of another.
async fn from_another_org(gw: &Gateway, pid: &str, action: &str, body: Option<Value>) -> u16 {
    let (_, other) = gw.create_org("other", None).await;
    let corridor = gw.active_corridor(&other, "BRL").await;
    let path = format!("/corridors/{corridor}/payments/{pid}/{action}");
    error_of(gw.api(&other, Method::POST, &path, body).await)
        .await
        .0
}

/// A funded payout of `amount` through the CPN adapter: the wallet filled with `fill` USDC
/// first; the accepted payout's id, the wallet and its address.
async fn cpn_payout(
    chain: &Chain,
    gw: &Gateway,
    key: &str,
    corridor: &str,
    name: &str,
    idem: &str,
) -> (String, Address, Value) {
    let from = wallet(gw, key).await["address"]
        .as_str()
        .unwrap()
        .to_string();
    let wallet_addr: Address = from.parse().unwrap();
    chain.send_usdc(1, wallet_addr, 10_000_000).await;
    let q = quote(gw, key, corridor, "10").await;
    let r = gw
        .pay_corridor(key, corridor, idem, &pay_to(&q, &from, name))
        .await;
    assert_eq!(r.status(), 202, "{}", gw.log());
    let accepted: Value = r.json().await.unwrap();
    (
        accepted["paymentId"].as_str().unwrap().to_string(),
        wallet_addr,
        q,
    )
}

#[tokio::test]
async fn through_cpn_a_payout_is_quoted_funded_once_and_completed() {
    let (chain, gw, key) = setup_cpn().await;
    let corridor = gw.active_corridor(&key, "BRL").await;
    let provider_before = chain.balance(provider_address()).await;
    let (pid, wallet_addr, q) = cpn_payout(&chain, &gw, &key, &corridor, "Ana Souza", "c-1").await;
    // CPN quoted the USDC the provider receives (10 less the 0.50 % platform fee), its fee is
    // the rail fee, and the payout wallet paid exactly that, once.
    assert_eq!(
        q["fees"]["railFee"], "0.300000",
        "the simulator's BRL fee: {q}"
    );
    assert_eq!(chain.balance(wallet_addr).await, 10_000_000 - 9_950_000);
    assert_eq!(
        chain.balance(provider_address()).await,
        provider_before + 9_950_000
    );
    let rec = payout_until(&gw, &key, &corridor, &pid, |r| r["status"] == "SETTLED").await;
    assert_eq!(rec["status"], "SETTLED", "{rec}\n{}", gw.log());
    let cpn_id = rec["cpnPaymentId"].as_str().unwrap();
    assert!(paygate_payouts::cpn::is_uuid(cpn_id), "{rec}");
    // Its notifications came to the webhook endpoint (the access log names the path).
    assert!(gw.log().contains("/webhooks/provider"), "{}", gw.log());
    let events = column(&rec["events"], "eventType");
    assert_eq!(
        events,
        ["cpn.payment.fiatPaymentInitiated", "cpn.payment.completed"],
        "{rec}"
    );
    // The simulator holds the payment under paygate's payout id, completed, for what paygate
    // computed the beneficiary receives. It records a status once its notification was
    // acknowledged, so just after paygate applied the notification it may not have yet.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let p = loop {
        let p = gw
            .provider_json(&format!("/v1/cpn/payments/{cpn_id}"))
            .await;
        if p["data"]["status"] == "COMPLETED" || std::time::Instant::now() > deadline {
            break p;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(p["data"]["status"], "COMPLETED", "{p}");
    assert_eq!(p["data"]["customerRefId"], pid.as_str(), "{p}");
    let held = gw.provider_payouts().await;
    assert_eq!(held.len(), 1);
    assert_eq!(
        held[0]["destAmount"]
            .as_str()
            .unwrap()
            .parse::<f64>()
            .unwrap(),
        rec["destAmount"].as_str().unwrap().parse::<f64>().unwrap(),
        "{held:?} {rec}"
    );
}

/// A payment the provider says is delayed: kept in the timeline, the payout pending until it
/// completes.
#[tokio::test]
async fn through_cpn_a_delayed_payment_completes_late() {
    let (chain, gw, key) = setup_cpn().await;
    let corridor = gw.active_corridor(&key, "BRL").await;
    let (pid, _, _) = cpn_payout(&chain, &gw, &key, &corridor, "Sandbox Delay", "c-late").await;
    let rec = payout_until(&gw, &key, &corridor, &pid, |r| {
        !r["events"].as_array().unwrap().is_empty()
    })
    .await;
    assert_eq!(rec["status"], "PENDING", "{rec}");
    assert_eq!(
        column(&rec["events"], "eventType"),
        ["cpn.payment.delayed"],
        "{rec}"
    );
    let rec = payout_until(&gw, &key, &corridor, &pid, |r| r["status"] == "SETTLED").await;
    assert_eq!(
        column(&rec["events"], "eventType"),
        [
            "cpn.payment.delayed",
            "cpn.payment.fiatPaymentInitiated",
            "cpn.payment.completed"
        ],
        "{rec}"
    );
}

/// Notifications lost (the simulator completes the payment without telling): the payout waits
/// PENDING until paygate reads the payment's status from the provider, which then settles it
/// exactly as the notification would have (once).
#[tokio::test]
async fn through_cpn_a_status_read_recovers_a_payout_whose_notifications_were_lost() {
    let (chain, gw, key) = setup_cpn().await;
    let corridor = gw.active_corridor(&key, "BRL").await;
    let (pid, _, _) = cpn_payout(&chain, &gw, &key, &corridor, "Sandbox Silent", "c-silent").await;
    let path = format!("/corridors/{corridor}/payments/{pid}/refresh");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let rec = loop {
        let r = gw.api(&key, Method::POST, &path, None).await;
        assert_eq!(r.status(), 200, "{}", gw.log());
        let rec: Value = r.json().await.unwrap();
        if rec["status"] == "SETTLED" || std::time::Instant::now() > deadline {
            break rec;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(rec["status"], "SETTLED", "{rec}");
    assert_eq!(
        column(&rec["events"], "eventType").last(),
        Some(&"cpn.payment.completed"),
        "{rec}"
    );
    // No webhook came: what settled it was the read. Reading again changes nothing.
    assert!(
        !gw.log().contains("/webhooks/provider"),
        "a webhook was delivered"
    );
    let again: Value = gw
        .api(&key, Method::POST, &path, None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["events"], rec["events"]);
    // Another organisation cannot read it.
    assert_eq!(from_another_org(&gw, &pid, "refresh", None).await, 404);
}

#[tokio::test]
async fn through_cpn_an_rfi_holds_the_payout_until_the_seller_answers() {
    let (chain, gw, key) = setup_cpn().await;
    let corridor = gw.active_corridor(&key, "BRL").await;
    let (pid, _, _) = cpn_payout(&chain, &gw, &key, &corridor, "Sandbox Rfi", "c-rfi").await;
    let rec = payout_until(&gw, &key, &corridor, &pid, |r| {
        r["status"] == "COMPLIANCE_HOLD"
    })
    .await;
    assert_eq!(rec["status"], "COMPLIANCE_HOLD", "{rec}\n{}", gw.log());
    assert_eq!(rec["rfi"]["status"], "INFORMATION_REQUIRED", "{rec}");
    let required = &rec["rfi"]["schema"]["required"];
    assert_eq!(
        required,
        &json!(["ORIGINATOR_DATE_OF_FORMATION", "SOURCE_OF_FUNDS"]),
        "{rec}"
    );
    let path = format!("/corridors/{corridor}/payments/{pid}/rfi");
    let answer = |body: Value| gw.api(&key, Method::POST, &path, Some(body));

    // Answers that do not meet the schema: every field named, nothing sent, nothing changed.
    for (body, field) in [
        (
            json!({"answers": {"SOURCE_OF_FUNDS": "sales"}}),
            "answers.ORIGINATOR_DATE_OF_FORMATION",
        ),
        (
            json!({"answers": {"ORIGINATOR_DATE_OF_FORMATION": "31/01/2020", "SOURCE_OF_FUNDS": "sales"}}),
            "answers.ORIGINATOR_DATE_OF_FORMATION",
        ),
        (
            json!({"answers": {"ORIGINATOR_DATE_OF_FORMATION": "2020-01-31", "SOURCE_OF_FUNDS": "sales", "EXTRA": "x"}}),
            "answers",
        ),
    ] {
        let (status, code, e) = error_of(answer(body.clone()).await).await;
        assert_eq!(
            (status, code.as_str()),
            (400, "VALIDATION_ERROR"),
            "{body} {e}"
        );
        let fields = column(&e["details"], "field");
        assert!(fields.iter().any(|f| f.starts_with(field)), "{body} {e}");
    }
    for body in [json!({"answers": "text"}), json!({"answer": {}}), json!([])] {
        let (status, _, e) = error_of(answer(body.clone()).await).await;
        assert_eq!(status, 400, "{body} {e}");
    }
    // Another organisation cannot see or answer it.
    assert_eq!(
        from_another_org(&gw, &pid, "rfi", Some(json!({"answers": {}}))).await,
        404
    );
    let rec = payout(&gw, &key, &corridor, &pid).await;
    assert_eq!(rec["rfi"]["status"], "INFORMATION_REQUIRED", "{rec}");

    // The answer: encrypted to the provider's key, taken, the RFI in review; the payout then
    // moves on to SETTLED.
    let good = json!({"answers": {"ORIGINATOR_DATE_OF_FORMATION": "2020-01-31", "SOURCE_OF_FUNDS": "API sales"}});
    let r = answer(good.clone()).await;
    assert_eq!(r.status(), 200, "{}", gw.log());
    let taken: Value = r.json().await.unwrap();
    assert_eq!(taken["rfi"]["status"], "IN_REVIEW", "{taken}");
    assert!(taken["rfi"]["answeredAt"].is_string(), "{taken}");
    let (status, code, _) = error_of(answer(good).await).await;
    assert_eq!((status, code.as_str()), (409, "RFI_NOT_OPEN"));
    let rec = payout_until(&gw, &key, &corridor, &pid, |r| r["status"] == "SETTLED").await;
    assert_eq!(rec["status"], "SETTLED", "{rec}\n{}", gw.log());
    assert_eq!(rec["rfi"]["status"], "APPROVED", "{rec}");
    let events = column(&rec["events"], "eventType");
    for e in [
        "cpn.rfi.informationRequired",
        "paygate.rfi.answered",
        "cpn.rfi.approved",
        "cpn.payment.completed",
    ] {
        assert!(events.contains(&e), "{e} in {events:?}");
    }
}
