//! Interop: the official x402 clients pay a paygate route end-to-end on anvil with no code of
//! ours on the client side: PyPI `x402` (protocol v2, httpx client) and npm `x402-fetch` (v1).
//! `make test` installs both and sets PAYGATE_TEST_PYTHON / PAYGATE_TEST_NODE_MODULES.

use crate::common;

use common::chain::{address, Chain, PaymentSpec, KEYS};
use common::upstream::Upstream;
use common::*;
use serde_json::{json, Value};

const PRICE: u64 = 20_000; // $0.02

async fn setup() -> (Chain, Gateway, Upstream) {
    let chain = Chain::start();
    let gw = Gateway::start_with_owned(chain.gateway_env()).await;
    let upstream = Upstream::start().await;
    let (_, key) = gw
        .create_org("acme", Some(&address(9).to_checksum(None)))
        .await;
    gw.create_route(
        &key,
        json!({"path": "weather", "priceUSD": 0.02, "targetUrl": format!("{}/weather", upstream.url),
               "network": "base-sepolia", "description": "weather"}),
    )
    .await;
    (chain, gw, upstream)
}

async fn assert_paid_once(
    chain: &Chain,
    upstream: &Upstream,
    payer: usize,
    before: (u64, u64),
    report: &Value,
) {
    assert_eq!(report["status"], 200, "{report}");
    let receipt = &report["paymentResponse"];
    assert_eq!(receipt["success"], true, "{report}");
    assert_eq!(receipt["payer"], json!(address(payer).to_checksum(None)));
    let body: Value = serde_json::from_str(report["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["path"], "/weather");
    assert_eq!(upstream.hits(), 1);
    assert_eq!(chain.balance(address(payer)).await, before.0 - PRICE);
    assert_eq!(chain.balance(address(9)).await, before.1 + PRICE);
}

#[tokio::test]
async fn official_python_client_pays_with_protocol_v2() {
    let python = std::env::var("PAYGATE_TEST_PYTHON")
        .expect("PAYGATE_TEST_PYTHON must name the venv's python (run via `make test`)");
    let (chain, gw, upstream) = setup().await;
    let before = (
        chain.balance(address(4)).await,
        chain.balance(address(9)).await,
    );
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/x402_python_pay.py"
    ))
    .arg(gw.url("/gateway/acme/weather"))
    .arg(KEYS[4]);
    let report = run_client(cmd).await;
    assert_paid_once(&chain, &upstream, 4, before, &report).await;
    assert_eq!(report["paymentResponse"]["network"], "eip155:84532");
}

#[tokio::test]
async fn official_npm_x402_fetch_pays_with_protocol_v1() {
    let modules = std::env::var("PAYGATE_TEST_NODE_MODULES").expect(
        "PAYGATE_TEST_NODE_MODULES must name a node_modules with x402-fetch (run via `make test`)",
    );
    let (chain, gw, upstream) = setup().await;
    let before = (
        chain.balance(address(5)).await,
        chain.balance(address(9)).await,
    );
    let mut cmd = tokio::process::Command::new("node");
    cmd.env("NODE_PATH", modules)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/x402_fetch_pay.cjs"
        ))
        .arg(gw.url("/gateway/acme/weather"))
        .arg(KEYS[5]);
    let report = run_client(cmd).await;
    assert_paid_once(&chain, &upstream, 5, before, &report).await;
    assert_eq!(report["paymentResponse"]["network"], "base-sepolia");
}

/// The sandbox route (SPEC 1.8, "accepts test payments") completes the loop for a new agent
/// developer: the official Python client's payment on base-sepolia is verified and answered
/// `200` with a fixed body and a receipt marked `sandbox`, and no money moves (no transaction;
/// balances unchanged), however often it is shown; a bad payment still gets `402`.
#[tokio::test]
async fn the_sandbox_route_answers_a_valid_test_payment_and_moves_nothing() {
    let python = std::env::var("PAYGATE_TEST_PYTHON")
        .expect("PAYGATE_TEST_PYTHON must name the venv's python (run via `make test`)");
    let (chain, gw, upstream) = setup().await;
    let before = chain.balance(address(6)).await;
    for _ in 0..2 {
        let mut cmd = tokio::process::Command::new(&python);
        cmd.arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/x402_python_pay.py"
        ))
        .arg(gw.url("/gateway/demo/demo"))
        .arg(KEYS[6]);
        let report = run_client(cmd).await;
        assert_eq!(report["status"], 200, "{report}");
        let receipt = &report["paymentResponse"];
        assert_eq!(receipt["success"], true, "{report}");
        assert_eq!(receipt["sandbox"], true, "{report}");
        assert_eq!(receipt["transaction"], "", "{report}");
        assert_eq!(receipt["payer"], json!(address(6).to_checksum(None)));
        let body: Value = serde_json::from_str(report["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["sandbox"], true);
    }
    // Our own signer too, to see the headers: the sandbox says so.
    let challenge: Value = gw.get("/gateway/demo/demo").await.json().await.unwrap();
    let accepts = &challenge["accepts"][0];
    let pay_to = accepts["payTo"].as_str().unwrap().parse().unwrap();
    let amount = accepts["maxAmountRequired"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let r = gw
        .http
        .get(gw.url("/gateway/demo/demo"))
        .header(
            "X-PAYMENT",
            common::chain::PaymentSpec::new(6, pay_to, amount).v1_header(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-paygate-sandbox"], "true");
    assert_eq!(receipt(&r, "x-payment-response")["sandbox"], true);
    assert_eq!(chain.balance(address(6)).await, before, "no money moved");
    assert_eq!(upstream.hits(), 0);
    // A payment to another payee is refused like on any route.
    let wrong = common::chain::PaymentSpec::new(6, address(9), 10_000);
    let r = gw
        .http
        .get(gw.url("/gateway/demo/demo"))
        .header("X-PAYMENT", wrong.v1_header())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 402);
    assert!(r.headers().get("x-payment-response").is_none());
}

/// x402's `payment-identifier`: the official Python client names its payment through the SDK's
/// own helper; the very same payment sent again (also after a restart) gets the first answer
/// and receipt back, marked `X-Paygate-Replayed`, without paying or calling the API again; a
/// new payment under the same id is `409 PAYMENT_ID_CONFLICT`; a malformed id is `400`.
#[tokio::test]
async fn a_payment_identifier_makes_paid_retries_idempotent() {
    let python = std::env::var("PAYGATE_TEST_PYTHON")
        .expect("PAYGATE_TEST_PYTHON must name the venv's python (run via `make test`)");
    let (chain, mut gw, upstream) = setup().await;
    let before = (
        chain.balance(address(6)).await,
        chain.balance(address(9)).await,
    );
    let url = gw.url("/gateway/acme/weather");
    let pay = |id: &'static str, url: String| {
        let mut cmd = tokio::process::Command::new(&python);
        cmd.arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/x402_python_pay_id.py"
        ))
        .arg(url)
        .arg(KEYS[6])
        .arg(id);
        run_client(cmd)
    };
    const ID: &str = "order-7f3a9c21-retry-safe";
    let first = pay(ID, url.clone()).await;
    assert_paid_once(&chain, &upstream, 6, before, &first).await;
    let header = first["header"].as_str().unwrap().to_string();
    let receipt = serde_json::to_string(&first["paymentResponse"]).unwrap();

    // The same payment again: the kept answer (kept right after the first is answered).
    let again = |gw: &Gateway| {
        gw.http
            .get(gw.url("/gateway/acme/weather"))
            .header("PAYMENT-SIGNATURE", header.clone())
            .send()
    };
    let mut replayed = None;
    for _ in 0..50 {
        let r = again(&gw).await.unwrap();
        if r.headers().contains_key("x-paygate-replayed") {
            replayed = Some(r);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    async fn check(r: reqwest::Response, receipt: &str, body: &str) {
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-paygate-replayed"], "payment-identifier");
        let kept = b64_json(r.headers()["payment-response"].to_str().unwrap());
        assert_eq!(serde_json::to_string(&kept).unwrap(), receipt);
        assert_eq!(r.text().await.unwrap(), body);
    }
    let body = first["body"].as_str().unwrap();
    check(replayed.expect("the kept answer"), &receipt, body).await;
    gw.restart().await;
    check(again(&gw).await.unwrap(), &receipt, body).await;
    assert_eq!(upstream.hits(), 1);
    assert_eq!(chain.balance(address(6)).await, before.0 - PRICE);

    // Another payment under the same id: refused before anything is taken.
    let other = pay(ID, url.clone()).await;
    assert_eq!(other["status"], 409, "{other}");
    assert_eq!(other["code"], "PAYMENT_ID_CONFLICT");
    assert_eq!(upstream.hits(), 1);
    assert_eq!(chain.balance(address(6)).await, before.0 - PRICE);

    // A malformed id is refused as a malformed payment.
    let challenge = gw.get("/gateway/acme/weather").await;
    let accepted = decode_v2(&challenge)["accepts"][0].clone();
    let mut payload = PaymentSpec::new(6, address(9), PRICE).v2_payload(&accepted);
    payload["extensions"] =
        json!({"payment-identifier": {"info": {"required": false, "id": "short"}}});
    let r = gw
        .http
        .get(gw.url("/gateway/acme/weather"))
        .header("PAYMENT-SIGNATURE", b64_header(&payload))
        .send()
        .await
        .unwrap();
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (400, "INVALID_PAYMENT"));
    assert_eq!(upstream.hits(), 1);
}
