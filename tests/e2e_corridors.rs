//! Payout corridors end to end: the real binary with the built-in sandbox provider on its own
//! loopback port, spoken to over HTTP, delivering signed webhooks back to paygate.

mod common;

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

#[tokio::test]
async fn one_key_one_payout_under_retries_and_concurrency() {
    let e = start(&[]).await;
    let id = e.active_corridor("KES").await;
    let q = e.quote(&id, "25.5").await;
    let body = pay_body(&q, "Wanjiru K", "KE", "KES", "1234-5678-90");
    let first = e.pay(&id, "same", &body).await;
    assert_eq!(first.status(), 202);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    let again = e.pay(&id, "same", &body).await;
    assert_eq!(again.status(), 202);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.json::<Value>().await.unwrap(), first);
    let mut changed = body.clone();
    changed["beneficiary"]["name"] = json!("Someone Else");
    let r = e.pay(&id, "same", &changed).await;
    assert_eq!(error_of(r).await.1, "DUPLICATE_REQUEST");

    // 50 concurrent requests with one fresh key: exactly one payout at the provider.
    let q = e.quote(&id, "10").await;
    let body = pay_body(&q, "Otieno", "KE", "KES", "12345678");
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let http = e.gw.http.clone();
            let url = e.gw.url(&format!("/corridors/{id}/pay"));
            let key = e.key.clone();
            let body = body.clone();
            tokio::spawn(async move {
                let r = http
                    .post(url)
                    .bearer_auth(key)
                    .header("Idempotency-Key", "burst")
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                (status, r.json::<Value>().await.unwrap())
            })
        })
        .collect();
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        let (status, v) = t.await.unwrap();
        match status {
            202 => {
                ids.insert(v["paymentId"].as_str().unwrap().to_string());
            }
            409 => assert_eq!(v["code"], "DUPLICATE_REQUEST", "{v}"),
            other => panic!("unexpected {other}: {v}"),
        }
    }
    assert!(ids.len() <= 1, "{ids:?}");
    let payouts = e.provider_payouts().await;
    assert_eq!(payouts.len(), 2, "{payouts:?}");
    // The key now answers with its one payment.
    let r = e.pay(&id, "burst", &body).await;
    assert_eq!(r.status(), 202);
    let pid = r.json::<Value>().await.unwrap()["paymentId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(ids.is_empty() || ids.contains(&pid));
}

/// Kills paygate with SIGKILL while the provider call is in progress (before the provider
/// recorded the payout, or after it recorded it but before paygate heard back), restarts it and
/// retries as a client would: one payout, never two.
#[tokio::test]
async fn sigkill_mid_payout_then_retry_pays_once() {
    for delay in [
        "PAYGATE__PAYOUT__SANDBOX__ACCEPT_DELAY_MS",
        "PAYGATE__PAYOUT__SANDBOX__ANSWER_DELAY_MS",
    ] {
        let mut e = start(&[(delay, "3000")]).await;
        let id = e.active_corridor("ZAR").await;
        let q = e.quote(&id, "40").await;
        let body = pay_body(&q, "Thandi M", "ZA", "ZAR", "123 456 7890");
        let http = e.gw.http.clone();
        let url = e.gw.url(&format!("/corridors/{id}/pay"));
        let key = e.key.clone();
        let b = body.clone();
        let inflight = tokio::spawn(async move {
            http.post(url)
                .bearer_auth(key)
                .header("Idempotency-Key", "crash-key")
                .json(&b)
                .send()
                .await
        });
        // The key and payout are reserved at once; the provider is slow: kill once the
        // reservation is logged (it is durable before the log line).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !e.gw.log().contains("payout reserved") {
            assert!(tokio::time::Instant::now() < deadline, "{}", e.gw.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        e.gw.kill();
        assert!(
            inflight.await.unwrap().is_err(),
            "the request died with the process"
        );
        let mut env: Vec<(String, String)> = vec![
            (
                "PAYGATE__PAYOUT__SANDBOX__LISTEN".into(),
                e.sandbox.trim_start_matches("http://").into(),
            ),
            ("PAYGATE_WEBHOOK_SECRETS".into(), SECRETS.into()),
            (
                "PAYGATE__PAYOUT__SANDBOX__WEBHOOK_DELAY_MS".into(),
                "100".into(),
            ),
            (
                "PAYGATE__PAYOUT__RECONCILE_INTERVAL_SECONDS".into(),
                "1".into(),
            ),
        ];
        env.push((delay.into(), "0".into()));
        e.gw.set_env(env);
        e.gw.restart().await;
        // The client retries until it gets its answer.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        let answer = loop {
            let r = e.pay(&id, "crash-key", &body).await;
            if r.status() == 202 {
                break r.json::<Value>().await.unwrap();
            }
            assert_eq!(r.status(), 409, "{delay}: {}", r.text().await.unwrap());
            assert!(tokio::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let payouts = e.provider_payouts().await;
        assert_eq!(payouts.len(), 1, "{delay}: {payouts:?}");
        assert_eq!(payouts[0]["id"], answer["cpnPaymentId"]);
        assert_eq!(payouts[0]["reference"], answer["paymentId"]);
        let pid = answer["paymentId"].as_str().unwrap();
        e.wait_status(&id, pid, "SETTLED").await;
    }
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

#[tokio::test]
async fn webhooks_are_verified_deduplicated_and_ordered_by_the_state_machine() {
    // The sandbox's own webhooks are held back: this test plays the provider.
    let e = start(&[("PAYGATE__PAYOUT__SANDBOX__WEBHOOK_DELAY_MS", "600000")]).await;
    let id = e.active_corridor("BRL").await;
    let mut payments = vec![];
    for i in 0..2 {
        let q = e.quote(&id, "20").await;
        let r = e.pay(&id, &format!("wh-{i}"), &brl(&q, "Ana")).await;
        assert_eq!(r.status(), 202);
        payments.push(r.json::<Value>().await.unwrap());
    }
    let (a, b) = (&payments[0], &payments[1]);
    let cpn_a = a["cpnPaymentId"].as_str().unwrap();
    let pid_a = a["paymentId"].as_str().unwrap();
    let completed = event("payments.payment_completed", cpn_a);
    let now = paygate_domain::unix_now();
    let ts = |secret: &str, body: &[u8], t: u64| {
        let mut m = format!("{t}.").into_bytes();
        m.extend_from_slice(body);
        format!("t={t},v1={}", hmac_hex(secret, &m))
    };
    let mut tampered = completed.clone();
    let pos = tampered.iter().position(|c| *c == b'1').unwrap();
    tampered[pos] = b'9';
    // Forgeries: 401 and nothing changes.
    for (sig, body) in [
        (None, completed.clone()),
        (Some(hmac_hex("first-test-secret", &completed)), tampered),
        (
            Some(hmac_hex("not-the-secret", &completed)),
            completed.clone(),
        ),
        (
            Some(ts("first-test-secret", &completed, now - 400)),
            completed.clone(),
        ),
        (Some("t=1,v1=zz".to_string()), completed.clone()),
    ] {
        let (status, _) = post_webhook(&e, sig.clone(), &body).await;
        assert_eq!(status, 401, "{sig:?}");
    }
    assert_eq!(e.payment(&id, pid_a).await["status"], "PENDING");

    // Completed first (rotated second secret, timestamped form), then a late hold and a failure:
    // SETTLED is terminal.
    let (s, v) = post_webhook(
        &e,
        Some(ts("second-test-secret", &completed, now)),
        &completed,
    )
    .await;
    assert_eq!((s, v["status"].as_str()), (200, Some("applied")));
    let (s, v) = post_webhook(
        &e,
        Some(hmac_hex("first-test-secret", &completed)),
        &completed,
    )
    .await;
    assert_eq!((s, v["status"].as_str()), (200, Some("duplicate")));
    for kind in ["payments.compliance_hold", "payments.payment_failed"] {
        let body = event(kind, cpn_a);
        let (s, v) = post_webhook(&e, Some(hmac_hex("first-test-secret", &body)), &body).await;
        assert_eq!((s, v["status"].as_str()), (200, Some("ignored")), "{kind}");
    }
    let rec = e.payment(&id, pid_a).await;
    assert_eq!(rec["status"], "SETTLED");
    assert_eq!(rec["lastEvent"]["eventType"], "payments.payment_completed");

    // Hold, hold again, then failed: COMPLIANCE_HOLD -> FAILED.
    let cpn_b = b["cpnPaymentId"].as_str().unwrap();
    let pid_b = b["paymentId"].as_str().unwrap();
    let hold = event("payments.compliance_hold", cpn_b);
    let sig = hmac_hex("first-test-secret", &hold);
    assert_eq!(post_webhook(&e, Some(sig.clone()), &hold).await.0, 200);
    assert_eq!(e.payment(&id, pid_b).await["status"], "COMPLIANCE_HOLD");
    assert_eq!(
        post_webhook(&e, Some(sig), &hold).await.1["status"],
        "duplicate"
    );
    let failed = event("payments.payment_failed", cpn_b);
    let (s, _) = post_webhook(&e, Some(hmac_hex("first-test-secret", &failed)), &failed).await;
    assert_eq!(s, 200);
    let failed = e.payment(&id, pid_b).await;
    assert_eq!(failed["status"], "FAILED");
    // The reason comes with it, from the provider's event.
    assert_eq!(failed["failureCode"], "X", "{failed}");
    assert!(failed["failureMessage"]
        .as_str()
        .unwrap()
        .contains("2026-11-22T10:00:00Z"));
    // A settled payout has no reason, even after a late failure event (ignored).
    assert_eq!(e.payment(&id, pid_a).await["failureCode"], Value::Null);

    // Signed but malformed: 400. Unknown payment: kept, 202.
    let bad = br#"{"type":"payments.payment_completed"}"#;
    assert_eq!(
        post_webhook(&e, Some(hmac_hex("first-test-secret", bad)), bad)
            .await
            .0,
        400
    );
    let unknown = event("payments.payment_completed", "cpn_unknown");
    let (s, v) = post_webhook(&e, Some(hmac_hex("first-test-secret", &unknown)), &unknown).await;
    assert_eq!((s, v["status"].as_str()), (202, Some("kept")));
}

/// An event that arrives before paygate recorded the provider's id is kept, then applied once
/// the payout is known.
#[tokio::test]
async fn early_webhook_is_kept_then_applied() {
    let e = start(&[
        ("PAYGATE__PAYOUT__SANDBOX__WEBHOOK_DELAY_MS", "600000"),
        ("PAYGATE__PAYOUT__SANDBOX__ANSWER_DELAY_MS", "2000"),
    ])
    .await;
    let id = e.active_corridor("MXN").await;
    let q = e.quote(&id, "30").await;
    let body = pay_body(&q, "Luis P", "MX", "MXN", "0321 8000 0118 3597 19");
    let http = e.gw.http.clone();
    let url = e.gw.url(&format!("/corridors/{id}/pay"));
    let key = e.key.clone();
    let pending = tokio::spawn(async move {
        http.post(url)
            .bearer_auth(key)
            .header("Idempotency-Key", "early")
            .json(&body)
            .send()
            .await
            .unwrap()
    });
    // The provider has recorded the payout but paygate has not heard back yet.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let cpn = loop {
        if let Some(p) = e.provider_payouts().await.first() {
            break p["id"].as_str().unwrap().to_string();
        }
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let completed = event("payments.payment_completed", &cpn);
    let (s, _) = post_webhook(
        &e,
        Some(hmac_hex("first-test-secret", &completed)),
        &completed,
    )
    .await;
    assert_eq!(s, 202);
    let r = pending.await.unwrap();
    assert_eq!(r.status(), 202);
    let pid = r.json::<Value>().await.unwrap()["paymentId"]
        .as_str()
        .unwrap()
        .to_string();
    e.wait_status(&id, &pid, "SETTLED").await;
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

/// The sandbox signing as CPN does (`webhook_signing = "circle"`): its ECDSA-signed
/// notifications, checked against the key paygate fetches by id from the provider, take payouts
/// to each final state, a progress notification kept in the timeline and a failure's reason and
/// code on the payout; duplicated and reordered notifications (on cue) move nothing back;
/// notifications signed by anyone else are refused and change nothing.
#[tokio::test]
async fn cpn_signed_notifications_move_payouts_and_forgeries_are_refused() {
    let e = start(&[("PAYGATE__PAYOUT__SANDBOX__WEBHOOK_SIGNING", "circle")]).await;
    let id = e.active_corridor("BRL").await;
    let mut settled = None;
    let on_cue: [(&str, &[&str]); 2] = [
        ("Sandbox Duplicate", &["SETTLED"]),
        ("Sandbox Reorder", &["SETTLED"]),
    ];
    for (i, (name, path)) in OUTCOMES.into_iter().chain(on_cue).enumerate() {
        let (p, rec) = e.pay_through(&id, &format!("cpn-{i}"), name, path).await;
        let pid = p["paymentId"].as_str().unwrap().to_string();
        let kinds: Vec<&str> = rec["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|ev| ev["eventType"].as_str().unwrap())
            .collect();
        match name {
            "Ana Souza" => {
                assert_eq!(
                    kinds,
                    ["cpn.payment.fiatPaymentInitiated", "cpn.payment.completed"],
                    "{rec}"
                );
                assert_eq!(rec["events"][0]["providerStatus"], "FIAT_PAYMENT_INITIATED");
                settled = Some((pid, p["cpnPaymentId"].as_str().unwrap().to_string()));
            }
            "Sandbox Fail" => {
                assert_eq!(kinds, ["cpn.payment.failed"]);
                assert_eq!(rec["failureCode"], "PM02001", "{rec}");
                assert!(rec["failureMessage"]
                    .as_str()
                    .unwrap()
                    .contains("BANK_VERIFICATION_FAILED"));
            }
            "Sandbox Hold" => assert_eq!(
                kinds,
                [
                    "cpn.payment.inManualReview",
                    "cpn.payment.fiatPaymentInitiated",
                    "cpn.payment.completed"
                ]
            ),
            // Each notification delivered twice: the repeats (same notificationId) are
            // duplicates, kept once.
            "Sandbox Duplicate" => {
                wait_for_deliveries(&e).await;
                let rec = e.payment(&id, &pid).await;
                assert_eq!(rec["events"].as_array().unwrap().len(), 2, "{rec}");
            }
            // The hold that arrives after the completion moves nothing back.
            _ => {
                wait_for_deliveries(&e).await;
                let rec = e.payment(&id, &pid).await;
                assert_eq!(rec["status"], "SETTLED");
                assert_eq!(
                    rec["events"].as_array().unwrap().len(),
                    2,
                    "only the progress and the completion: {rec}"
                );
            }
        }
    }

    // Forgeries against the settled payout: a key the provider does not know, a key id that is
    // not a UUID, a missing signature, a signature that is not base64.
    let (pid, cpn) = settled.unwrap();
    let body = paygate_payouts::cpn::payment_notification(
        "cpn.payment.failed",
        "b1f0c9de-0000-4000-8000-000000000001",
        &paygate_payouts::cpn::PaymentWire {
            id: cpn,
            status: "FAILED".into(),
            update_date: None,
            failure_reason: Some("OTHER".into()),
            failure_code: Some("PM00001".into()),
            source_amount: None,
            customer_ref_id: None,
            refund: None,
        },
        "2026-11-26T10:00:00Z",
    );
    let mine = p256::ecdsa::SigningKey::random(&mut rand::rngs::OsRng);
    let good_looking = circle_signature(&mine, &body);
    for (key_id, sig) in [
        (
            Some("7d8f0e2a-1b3c-4d5e-8f90-a1b2c3d4e5f6"),
            Some(good_looking.as_str()),
        ),
        (Some("../v1/payouts"), Some(good_looking.as_str())),
        (Some("7d8f0e2a-1b3c-4d5e-8f90-a1b2c3d4e5f6"), None),
        (None, Some(good_looking.as_str())),
        (
            Some("7d8f0e2a-1b3c-4d5e-8f90-a1b2c3d4e5f6"),
            Some("not base64!"),
        ),
    ] {
        let mut headers = vec![];
        headers.extend(key_id.map(|k| ("X-Circle-Key-Id", k)));
        headers.extend(sig.map(|s| ("X-Circle-Signature", s)));
        let (status, answer) = post_webhook_with(&e, &headers, &body).await;
        assert_eq!(
            (status, &answer["code"]),
            (401, &json!("UNAUTHORIZED")),
            "{key_id:?}"
        );
    }
    let rec = e.payment(&id, &pid).await;
    assert_eq!(rec["status"], "SETTLED");
    assert_eq!(rec["events"].as_array().unwrap().len(), 2);
}

/// A BRL payout to a PIX key and a KES one to an M-Pesa number: accepted without an account
/// number, kept canonical, shown masked with the key's kind.
#[tokio::test]
async fn payouts_to_a_pix_key_and_an_mpesa_number() {
    let e = start(&[]).await;
    for (currency, country, field, given, shown, kind) in [
        (
            "BRL",
            "BR",
            "pixKey",
            "529.982.247-25",
            "*******4725",
            Some("CPF"),
        ),
        (
            "KES",
            "KE",
            "mobileNumber",
            "0712 345 678",
            "*********5678",
            None,
        ),
    ] {
        let id = e.active_corridor(currency).await;
        let q = e.quote(&id, "20").await;
        let mut body = pay_body(&q, "Ana Souza", country, currency, "");
        let ben = body["beneficiary"].as_object_mut().unwrap();
        ben.remove("accountNumber");
        ben.insert(field.into(), json!(given));
        let r = e.pay(&id, &format!("alt-{currency}"), &body).await;
        assert_eq!(r.status(), 202, "{}", e.gw.log());
        let p: Value = r.json().await.unwrap();
        let rec = e
            .wait_status(&id, p["paymentId"].as_str().unwrap(), "SETTLED")
            .await;
        assert_eq!(rec["beneficiary"][field], shown, "{rec}");
        assert_eq!(rec["beneficiary"]["accountNumber"], "");
        assert_eq!(rec["beneficiary"]["pixKeyType"].as_str(), kind);
    }
    let held = e.provider_payouts().await;
    assert_eq!(held.len(), 2, "{held:?}");
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

/// CPN as a deployment configures it (`[payout.cpn] base_url`, `PAYGATE_CPN_API_KEY`): paygate
/// reads the provider's key from that base URL only, with the API key, once for many
/// notifications; a notification of a type it does not know is answered and kept (`202`), one
/// for a known payment moves it; the signature of another key is refused.
#[tokio::test]
async fn a_configured_cpn_provider_signs_notifications_paygate_checks_against_its_key() {
    let keys = KeyServer::start().await;
    let e = start(&[
        ("PAYGATE__PAYOUT__CPN__BASE_URL", keys.url.as_str()),
        ("PAYGATE_CPN_API_KEY", "cpn-test-api-key"),
        // The sandbox's own webhooks are held back: this test plays CPN.
        ("PAYGATE__PAYOUT__SANDBOX__WEBHOOK_DELAY_MS", "600000"),
    ])
    .await;
    let id = e.active_corridor("BRL").await;
    let q = e.quote(&id, "10").await;
    let r = e.pay(&id, "cpn-cfg-1", &brl(&q, "Ana Souza")).await;
    assert_eq!(r.status(), 202);
    let p: Value = r.json().await.unwrap();
    let (pid, cpn) = (
        p["paymentId"].as_str().unwrap(),
        p["cpnPaymentId"].as_str().unwrap().to_string(),
    );
    let (e, kid) = (&e, keys.key_id.as_str());
    let post = |body: Vec<u8>, sig: String| async move {
        let headers = [
            ("X-Circle-Key-Id", kid),
            ("X-Circle-Signature", sig.as_str()),
        ];
        post_webhook_with(e, &headers, &body).await.0
    };
    let payment = |status: &str| paygate_payouts::cpn::PaymentWire {
        id: cpn.clone(),
        status: status.into(),
        update_date: None,
        failure_reason: None,
        failure_code: None,
        source_amount: None,
        customer_ref_id: None,
        refund: None,
    };
    let at = "2026-11-26T10:00:00Z";
    // A notification type paygate does not know, naming no payment: answered, kept.
    let unknown =
        json!({"subscriptionId": "s", "notificationId": "0a1b2c3d-0000-4000-8000-000000000001",
        "notificationType": "cpn.transaction.broadcasted", "notification": {"level": 1},
        "timestamp": at, "version": 2})
        .to_string()
        .into_bytes();
    assert_eq!(post(unknown.clone(), keys.sign(&unknown)).await, 202);
    // Progress, then completion, for the payout.
    for (i, (kind, status, want)) in [
        (
            "cpn.payment.fiatPaymentInitiated",
            "FIAT_PAYMENT_INITIATED",
            "PENDING",
        ),
        ("cpn.payment.completed", "COMPLETED", "SETTLED"),
    ]
    .into_iter()
    .enumerate()
    {
        let body = paygate_payouts::cpn::payment_notification(
            kind,
            &format!("0a1b2c3d-0000-4000-8000-00000000001{i}"),
            &payment(status),
            at,
        );
        assert_eq!(post(body.clone(), keys.sign(&body)).await, 200, "{kind}");
        assert_eq!(e.payment(&id, pid).await["status"], want, "{kind}");
    }
    // Another key's signature under this key id: refused, nothing moves.
    let other = p256::ecdsa::SigningKey::random(&mut rand::rngs::OsRng);
    let late = paygate_payouts::cpn::payment_notification(
        "cpn.payment.failed",
        "0a1b2c3d-0000-4000-8000-000000000099",
        &payment("FAILED"),
        at,
    );
    let forged = circle_signature(&other, &late);
    assert_eq!(post(late, forged).await, 401);
    assert_eq!(e.payment(&id, pid).await["status"], "SETTLED");
    // The key was read once, with the API key, from the configured provider.
    assert_eq!(
        keys.asked.lock().unwrap().as_slice(),
        ["Bearer cpn-test-api-key"]
    );
}
