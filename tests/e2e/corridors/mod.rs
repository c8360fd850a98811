//! Payout corridors end to end: the real binary with the built-in sandbox provider on its own
//! loopback port, spoken to over HTTP, delivering signed webhooks back to paygate.

use crate::common;

use common::*;
use hmac::{Hmac, Mac};
use reqwest::Method;
use serde_json::{json, Value};
use sha2::Sha256;
use std::time::Duration;

const SECRETS: &str = "first-test-secret,second-test-secret";

struct Env {
    gw: Gateway,
    key: String,
    sandbox: String,
}

/// A gateway with org `acme`, its sandbox provider on a known port, fast webhooks.
async fn start(extra: &[(&str, &str)]) -> Env {
    let mut env: Vec<(String, String)> = vec![
        ("PAYGATE_WEBHOOK_SECRETS".into(), SECRETS.into()),
        (
            "PAYGATE__PAYOUT__SANDBOX__WEBHOOK_DELAY_MS".into(),
            "100".into(),
        ),
        (
            "PAYGATE__PAYOUT__SANDBOX__HOLD_RELEASE_MS".into(),
            "1500".into(),
        ),
        (
            "PAYGATE__PAYOUT__RECONCILE_INTERVAL_SECONDS".into(),
            "1".into(),
        ),
    ];
    for (k, v) in extra {
        env.retain(|(ek, _)| ek != k);
        env.push((k.to_string(), v.to_string()));
    }
    let gw = Gateway::start_with_owned(env).await;
    let (_, key) = gw.create_org("acme", Some(WALLET_A)).await;
    let sandbox = format!(
        "http://{}",
        gw.sandbox.as_deref().expect("sandbox provider")
    );
    Env { gw, key, sandbox }
}

impl Env {
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> reqwest::Response {
        self.gw.api(&self.key, method, path, body).await
    }

    /// An active corridor to `currency`.
    async fn active_corridor(&self, currency: &str) -> String {
        self.gw.active_corridor(&self.key, currency).await
    }

    /// A `GET` that must answer `200`; its JSON.
    async fn get_ok(&self, path: &str) -> Value {
        let r = self.call(Method::GET, path, None).await;
        assert_eq!(r.status(), 200, "{path}");
        r.json().await.unwrap()
    }

    async fn quote(&self, corridor: &str, amount: &str) -> Value {
        self.get_ok(&format!("/corridors/{corridor}/quote?amount={amount}"))
            .await
    }

    async fn pay(&self, corridor: &str, key: &str, body: &Value) -> reqwest::Response {
        self.gw.pay_corridor(&self.key, corridor, key, body).await
    }

    async fn payment(&self, corridor: &str, id: &str) -> Value {
        self.get_ok(&format!("/corridors/{corridor}/payments/{id}"))
            .await
    }

    /// Polls the payment until its status is `want` (failing after 15 s).
    async fn wait_status(&self, corridor: &str, id: &str, want: &str) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let p = self.payment(corridor, id).await;
            if p["status"] == want {
                return p;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{p}\n{}",
                self.gw.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every payout the sandbox provider holds.
    async fn provider_payouts(&self) -> Vec<Value> {
        self.gw.provider_payouts().await
    }
}

/// A pay request's body; NGN and ZAR beneficiaries get the bank code (058) and branch code
/// (250655) their countries require.
fn pay_body(quote: &Value, name: &str, country: &str, currency: &str, account: &str) -> Value {
    let mut b = json!({
        "quoteId": quote["quoteId"],
        "fromAddress": WALLET_B,
        "amountUSDC": quote["amount"],
        "beneficiary": {"name": name, "bankName": "Banco Teste", "accountNumber": account,
                        "country": country, "currency": currency},
    });
    match country {
        "NG" => b["beneficiary"]["bankCode"] = json!("058"),
        "ZA" => b["beneficiary"]["branchCode"] = json!("250655"),
        _ => {}
    }
    b
}

fn brl(quote: &Value, name: &str) -> Value {
    pay_body(quote, name, "BR", "BRL", "0001-23456-7")
}

/// The three sandbox outcomes by beneficiary name, with the states each payout passes through.
const OUTCOMES: [(&str, &[&str]); 3] = [
    ("Ana Souza", &["SETTLED"]),
    ("Sandbox Fail", &["FAILED"]),
    ("Sandbox Hold", &["COMPLIANCE_HOLD", "SETTLED"]),
];

impl Env {
    /// Pays 100 USDC to `name` with `key` and waits through each state of `path`: the `202`
    /// body and the payout at its last state.
    async fn pay_through(
        &self,
        corridor: &str,
        key: &str,
        name: &str,
        path: &[&str],
    ) -> (Value, Value) {
        let q = self.quote(corridor, "100").await;
        let r = self.pay(corridor, key, &brl(&q, name)).await;
        assert_eq!(r.status(), 202, "{}", self.gw.log());
        let p: Value = r.json().await.unwrap();
        let pid = p["paymentId"].as_str().unwrap().to_string();
        let mut rec = Value::Null;
        for status in path {
            rec = self.wait_status(corridor, &pid, status).await;
        }
        (p, rec)
    }
}

#[tokio::test]
async fn corridor_lifecycle_quote_pay_and_webhooks_to_each_final_state() {
    let e = start(&[]).await;
    let r = e
        .call(
            Method::POST,
            "/corridors",
            Some(json!({"destCurrency": "BRL"})),
        )
        .await;
    assert_eq!(r.status(), 201);
    let c: Value = r.json().await.unwrap();
    assert_eq!(c["status"], "PENDING_KYC");
    assert_eq!(c["destCurrency"], "BRL");
    let id = c["id"].as_str().unwrap().to_string();
    // Creating it again returns the same corridor.
    let r = e
        .call(
            Method::POST,
            "/corridors",
            Some(json!({"destCurrency": "BRL"})),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["id"], id.as_str());
    // Not active yet: quote and pay are refused.
    let r = e
        .call(
            Method::GET,
            &format!("/corridors/{id}/quote?amount=100"),
            None,
        )
        .await;
    assert_eq!(error_of(r).await.1, "CORRIDOR_NOT_ACTIVE");
    let r = e.pay(&id, "k0", &json!({})).await;
    assert_eq!(error_of(r).await.1, "CORRIDOR_NOT_ACTIVE");
    let r =
        e.gw.admin(
            Method::POST,
            &format!("/admin/corridors/{id}/approve-kyc"),
            None,
        )
        .await;
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "ACTIVE");

    // The quote: sandbox mid 5.45 less 1 % spread; 0.50 % platform fee; $0.30 rail fee.
    let q = e.quote(&id, "100").await;
    assert_eq!(q["fxRate"], "5.3955");
    assert_eq!(q["amount"], "100.000000");
    assert_eq!(q["fees"]["platformFee"], "0.500000");
    assert_eq!(q["fees"]["railFee"], "0.300000");
    assert_eq!(q["fees"]["total"], "0.800000");
    assert_eq!(q["fees"]["platformFeePercent"], "0.50");
    // (100 - 0.8) x 5.3955 = 535.2336 -> 535.23 (toward zero).
    assert_eq!(q["destAmount"], "535.23");
    assert_eq!(q["destCurrency"], "BRL");
    assert!(q["expiresAt"].as_str().unwrap().ends_with('Z'));

    for (i, (name, path)) in OUTCOMES.into_iter().enumerate() {
        let (p, rec) = e.pay_through(&id, &format!("key-{i}"), name, path).await;
        assert_eq!(p["status"], "PENDING");
        assert!(p["cpnPaymentId"].as_str().unwrap().starts_with("cpn_"));
        assert_eq!(rec["cpnPaymentId"], p["cpnPaymentId"]);
        assert_eq!(rec["destAmount"], "535.23");
        assert_eq!(rec["beneficiary"]["accountNumber"], "******4567");
        assert!(rec["lastEvent"]["eventType"].is_string());
    }
    assert_eq!(e.provider_payouts().await.len(), 3);
}

#[tokio::test]
async fn bad_input_gets_the_spec_codes_and_changes_nothing() {
    let e = start(&[("PAYGATE__PAYOUT__QUOTE_TTL_SECONDS", "1")]).await;
    let (_, other) = e.gw.create_org("globex", Some(WALLET_B)).await;
    // Currency.
    for (body, code) in [
        (json!({"destCurrency": "USD"}), "INVALID_CURRENCY"),
        (json!({"destCurrency": "brl"}), "INVALID_CURRENCY"),
        (json!({"destCurrency": 5}), "INVALID_CURRENCY"),
        (json!({}), "BAD_REQUEST"),
        (json!({"destCurrency": "BRL", "x": 1}), "VALIDATION_ERROR"),
    ] {
        let r = e.call(Method::POST, "/corridors", Some(body.clone())).await;
        assert_eq!(error_of(r).await.1, code, "{body}");
    }
    let r = e.gw.get("/corridors/x").await;
    assert_eq!(r.status(), 401);
    let id = e.active_corridor("NGN").await;
    // Another org sees nothing.
    for path in [
        format!("/corridors/{id}"),
        format!("/corridors/{id}/quote?amount=5"),
        format!("/corridors/{id}/payments/pay_x"),
    ] {
        let r = e.gw.api(&other, Method::GET, &path, None).await;
        assert_eq!(error_of(r).await.1, "NOT_FOUND", "{path}");
    }
    // Quote amounts.
    for amount in ["", "0", "-1", "abc", "0.0000001", "1e3", "0.000001"] {
        let r = e
            .call(
                Method::GET,
                &format!("/corridors/{id}/quote?amount={amount}"),
                None,
            )
            .await;
        assert_eq!(error_of(r).await.1, "INVALID_AMOUNT", "{amount:?}");
    }
    let r = e
        .call(Method::GET, &format!("/corridors/{id}/quote"), None)
        .await;
    assert_eq!(error_of(r).await.1, "INVALID_AMOUNT");

    let q = e.quote(&id, "50").await;
    let good = pay_body(&q, "Ada Obi", "NG", "NGN", "0123456785");
    // Missing Idempotency-Key comes first.
    let r =
        e.gw.http
            .post(e.gw.url(&format!("/corridors/{id}/pay")))
            .bearer_auth(&e.key)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
    assert_eq!(error_of(r).await.1, "MISSING_IDEMPOTENCY_KEY");
    let mut cases = vec![];
    for (field, value, code) in [
        ("beneficiary", json!({"name": "Ada"}), "INVALID_BENEFICIARY"),
        ("beneficiary", json!(null), "INVALID_BENEFICIARY"),
        ("amountUSDC", json!("0"), "INVALID_AMOUNT"),
        ("amountUSDC", json!("49"), "INVALID_AMOUNT"),
        ("amountUSDC", json!(50.5), "INVALID_AMOUNT"),
        ("amountUSDC", json!(true), "INVALID_AMOUNT"),
        ("quoteId", json!("qt_nope"), "INVALID_QUOTE"),
        ("fromAddress", json!("0x12"), "VALIDATION_ERROR"),
    ] {
        let mut b = good.clone();
        b[field] = value;
        cases.push((b, code));
    }
    let mut b = good.clone();
    b["beneficiary"]["accountNumber"] = json!("012 345 678");
    cases.push((b, "INVALID_BENEFICIARY"));
    let mut b = good.clone();
    b["beneficiary"]["country"] = json!("KE");
    cases.push((b, "INVALID_BENEFICIARY"));
    let mut b = good.clone();
    b["beneficiary"]["currency"] = json!("KES");
    cases.push((b, "INVALID_BENEFICIARY"));
    let mut b = good.clone();
    b["extra"] = json!(1);
    cases.push((b, "VALIDATION_ERROR"));
    for (i, (body, code)) in cases.iter().enumerate() {
        let r = e.pay(&id, &format!("bad-{i}"), body).await;
        assert_eq!(error_of(r).await.1, *code, "{body}");
    }
    // Every problem is in `details`, as the management API reports them; the code is SPEC's for
    // the first.
    let mut two = good.clone();
    two["amountUSDC"] = json!("0");
    two["beneficiary"] = json!({"name": "Ada"});
    let r = e.pay(&id, "bad-two", &two).await;
    let (status, code, body) = error_of(r).await;
    assert_eq!(status, 400);
    assert!(
        ["INVALID_AMOUNT", "INVALID_BENEFICIARY"].contains(&code.as_str()),
        "{body}"
    );
    let fields: Vec<_> = body["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap().to_string())
        .collect();
    assert!(fields.iter().any(|f| f == "amountUSDC"), "{body}");
    assert!(
        fields.iter().any(|f| f.starts_with("beneficiary")),
        "{body}"
    );
    // Per-country rules, each problem named with its field: a NUBAN whose check digit does not
    // fit the bank code, a bank code of the wrong length beside it, a PIX key on a NGN payout.
    let mut b = good.clone();
    b["beneficiary"]["accountNumber"] = json!("0123456789");
    let r = e.pay(&id, "bad-nuban", &b).await;
    let (_, code, body) = error_of(r).await;
    assert_eq!(code, "INVALID_BENEFICIARY");
    assert_eq!(
        body["details"][0]["field"], "beneficiary.accountNumber",
        "{body}"
    );
    assert!(
        body["message"].as_str().unwrap().contains("NUBAN"),
        "{body}"
    );
    b["beneficiary"]["pixKey"] = json!("52998224725");
    b["beneficiary"]["bankCode"] = json!("58");
    let r = e.pay(&id, "bad-many", &b).await;
    let (_, _, body) = error_of(r).await;
    let fields: Vec<&str> = body["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        ["beneficiary.pixKey", "beneficiary.bankCode"],
        "{body}"
    );
    // None of that reached the provider; the quote is still usable.
    assert!(e.provider_payouts().await.is_empty());
    // Money is read one way: the quoted "50" given as the JSON number 50 is the same amount.
    let mut good = good;
    good["amountUSDC"] = json!(50);
    let r = e.pay(&id, "good", &good).await;
    assert_eq!(r.status(), 202);
    // The quote is single-use.
    let r = e.pay(&id, "other-key", &good).await;
    assert_eq!(error_of(r).await.1, "QUOTE_ALREADY_USED");
    // An expired quote is refused before any payout.
    let q = e.quote(&id, "50").await;
    // Poll the clock past the quote's own expiry (the server compares whole seconds).
    let expires = time::OffsetDateTime::parse(
        q["expiresAt"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    while time::OffsetDateTime::now_utc().unix_timestamp() <= expires.unix_timestamp() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = e
        .pay(
            &id,
            "late",
            &pay_body(&q, "Ada Obi", "NG", "NGN", "0123456785"),
        )
        .await;
    assert_eq!(error_of(r).await.1, "QUOTE_EXPIRED");
    assert_eq!(e.provider_payouts().await.len(), 1);
}

fn hmac_hex(secret: &str, data: &[u8]) -> String {
    let mut m = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    m.update(data);
    hex::encode(m.finalize().into_bytes())
}

fn event(kind: &str, cpn: &str) -> Vec<u8> {
    json!({
        "type": kind, "clientId": "c1", "notificationType": "payments", "version": 1,
        "customAttributes": {"clientId": "c1"},
        "payment": {"id": cpn, "type": "payment", "status": "x",
                    "amount": {"amount": "10.00", "currency": "BRL"},
                    "updateDate": "2026-11-22T10:00:00Z"}
    })
    .to_string()
    .into_bytes()
}

async fn post_webhook(e: &Env, sig: Option<String>, body: &[u8]) -> (u16, Value) {
    let headers: Vec<(&str, &str)> = sig
        .iter()
        .map(|s| ("Provider-Signature", s.as_str()))
        .collect();
    post_webhook_with(e, &headers, body).await
}

/// Posts `body` to `/webhooks/provider` with `headers`: the status and the JSON answer.
async fn post_webhook_with(e: &Env, headers: &[(&str, &str)], body: &[u8]) -> (u16, Value) {
    let mut rb =
        e.gw.http
            .post(e.gw.url("/webhooks/provider"))
            .header("content-type", "application/json")
            .body(body.to_vec());
    for (name, value) in headers {
        rb = rb.header(*name, *value);
    }
    let r = rb.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// `body`'s ECDSA signature under `key`, as `X-Circle-Signature` carries it (base64 DER).
fn circle_signature(key: &p256::ecdsa::SigningKey, body: &[u8]) -> String {
    use base64::Engine as _;
    use p256::ecdsa::signature::Signer as _;
    let sig: p256::ecdsa::Signature = key.sign(body);
    base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes())
}

/// Waits until the sandbox has delivered every webhook it scheduled (each acknowledged); fails
/// after 10 s.
async fn wait_for_deliveries(e: &Env) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let pending = e.gw.provider_json("/v1/outbox").await;
        if pending["pending"] == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sandbox still holds {pending} webhooks"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The authorization of every key request the key server answered.
type Asked = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// A provider key server on a loopback port, as CPN's `/v2/cpn/notifications/publicKey/{id}`:
/// one key, and how many times it was asked, with which authorization.
struct KeyServer {
    url: String,
    key_id: String,
    key: p256::ecdsa::SigningKey,
    asked: Asked,
}

impl KeyServer {
    async fn start() -> Self {
        use axum::extract::{Path, State};
        use base64::Engine as _;
        use p256::pkcs8::EncodePublicKey as _;
        let key = p256::ecdsa::SigningKey::random(&mut rand::rngs::OsRng);
        let key_id = "5d1f3a9b-2c4e-4f60-8a71-93b2c4d5e6f7".to_string();
        let public = base64::engine::general_purpose::STANDARD
            .encode(key.verifying_key().to_public_key_der().unwrap().as_bytes());
        let asked: Asked = Default::default();
        let state = (key_id.clone(), public, asked.clone());
        let app = axum::Router::new()
            .route(
                "/v2/cpn/notifications/publicKey/{id}",
                axum::routing::get(
                    |State((kid, public, asked)): State<(String, String, Asked)>,
                     headers: axum::http::HeaderMap,
                     Path(id): Path<String>| async move {
                        let auth = headers
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_string();
                        asked.lock().unwrap().push(auth);
                        if id != kid {
                            return axum::http::StatusCode::NOT_FOUND.into_response();
                        }
                        axum::Json(json!({"data": {"id": id, "algorithm": "ECDSA_SHA_256",
                                                   "publicKey": public}}))
                        .into_response()
                    },
                ),
            )
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            url,
            key_id,
            key,
            asked,
        }
    }

    fn sign(&self, body: &[u8]) -> String {
        circle_signature(&self.key, body)
    }
}

use axum::response::IntoResponse as _;

mod delivery;
