//! The edge essentials (issue 18) through the real binary: rate limits that refuse floods
//! before any signature work without starving other clients, and the proof of payment an
//! origin checks.

use crate::common;

use common::chain::{address, Chain, PaymentSpec};
use common::upstream::Upstream;
use common::*;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod balancing;

const PRICE: u64 = 10_000;

/// A client whose connections come from `ip` (any 127/8 address reaches loopback).
fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// An organisation `acme` with a receiver wallet and a paid route `/gateway/acme/echo`.
async fn org_with_route(gw: &Gateway, target: &str) -> String {
    let (_, key) = gw
        .create_org("acme", Some(&address(9).to_checksum(None)))
        .await;
    gw.create_paid_route(&key, "echo", target, false).await;
    key
}

/// A payment for the route signed with another key than its `from`'s: refused at signature
/// verification, so every one that is not rate limited costs the gateway a signature check.
fn forged_payment() -> String {
    let mut spec = PaymentSpec::new(1, address(9), PRICE);
    spec.signer = Some(2);
    spec.v1_header()
}

#[tokio::test]
async fn a_flood_of_bogus_payments_is_refused_before_signature_work_and_starves_no_one() {
    const RATE: usize = 40;
    // A deployment's chain answers: a forged plain signature's payer is asked about once (does
    // a wallet there accept it?), then known to hold no code.
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.extend(
        [
            ("PAYGATE__LIMITS__CLIENT__PER_SECOND", "40"),
            ("PAYGATE__LIMITS__CLIENT__BURST", "40"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let gw = Gateway::start_with_owned(env).await;
    org_with_route(&gw, "https://api.example.com/v1").await;
    let url = gw.url("/gateway/acme/echo");
    // Signed once: the test's own signing must not be what loads the machine.
    let forged = forged_payment();

    // One client floods from 127.0.0.1 with 8 connections for 2 s; another asks politely from
    // 127.0.0.2 ten times a second.
    let verified = Arc::new(AtomicUsize::new(0));
    let limited = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let run_for = Duration::from_secs(2);
    let mut flood = Vec::new();
    for _ in 0..8 {
        let (url, verified, limited) = (url.clone(), verified.clone(), limited.clone());
        let forged = forged.clone();
        let http = client_from("127.0.0.1");
        flood.push(tokio::spawn(async move {
            let mut sample = None;
            while started.elapsed() < run_for {
                let r = http
                    .get(&url)
                    .header("X-PAYMENT", &forged)
                    .send()
                    .await
                    .unwrap();
                match r.status().as_u16() {
                    402 => {
                        verified.fetch_add(1, Ordering::SeqCst);
                    }
                    429 => {
                        limited.fetch_add(1, Ordering::SeqCst);
                        if sample.is_none() {
                            let retry_after: u64 = r.headers()["retry-after"]
                                .to_str()
                                .unwrap()
                                .parse()
                                .unwrap();
                            sample = Some((retry_after, error_of(r).await));
                        }
                    }
                    s => panic!("unexpected status {s}"),
                }
            }
            sample
        }));
    }
    let polite = client_from("127.0.0.2");
    let mut polite_answers = Vec::new();
    while started.elapsed() < run_for {
        let r = polite
            .get(&url)
            .header("X-PAYMENT", &forged)
            .send()
            .await
            .unwrap();
        polite_answers.push(r.status().as_u16());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut sample = None;
    for f in flood {
        sample = sample.or(f.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();

    // The polite client was never refused: its payments were all checked (and found forged).
    assert!(polite_answers.len() >= 10, "{polite_answers:?}");
    assert!(
        polite_answers.iter().all(|s| *s == 402),
        "{polite_answers:?}"
    );
    // The flood: only the burst and the steady rate reached signature verification.
    let (verified, limited) = (
        verified.load(Ordering::SeqCst),
        limited.load(Ordering::SeqCst),
    );
    let allowance = RATE + (RATE as f64 * elapsed).ceil() as usize;
    assert!(
        verified <= allowance,
        "{verified} payments checked, allowance {allowance}"
    );
    assert!(
        limited > verified,
        "flood {limited} limited, {verified} checked"
    );
    let (retry_after, (status, code, body)) = sample.expect("a 429 sample");
    assert_eq!((status, code.as_str()), (429, "TOO_MANY_REQUESTS"));
    // The answer names the limit that was hit, its rate and where it is set.
    let words = body["message"].as_str().unwrap();
    assert!(
        words.contains("a second") && words.contains("limits."),
        "{body}"
    );
    assert!((1..=2).contains(&retry_after), "Retry-After {retry_after}");

    // The client limit covers every public path, the management API included: a burst of
    // twice the allowance from one address meets it.
    // (The limit refills at its steady rate meanwhile, so which answers are refused is not
    // fixed; that both kinds come, each with its code, is.)
    let http = client_from("127.0.0.3");
    let mut answers = Vec::new();
    for _ in 0..2 * RATE {
        let (status, code, _) = send_error(http.get(gw.url("/api/routes"))).await;
        answers.push((status, code));
    }
    assert!(
        answers
            .iter()
            .any(|(s, c)| (*s, c.as_str()) == (401, "UNAUTHORIZED")),
        "{answers:?}"
    );
    assert!(
        answers
            .iter()
            .any(|(s, c)| (*s, c.as_str()) == (429, "TOO_MANY_REQUESTS")),
        "{answers:?}"
    );
}

#[tokio::test]
async fn a_route_limit_counts_calls_carrying_a_payment_from_every_client() {
    let gw = Gateway::start_with(&[
        ("PAYGATE__LIMITS__ROUTE__PER_SECOND", "1"),
        ("PAYGATE__LIMITS__ROUTE__BURST", "3"),
    ])
    .await;
    org_with_route(&gw, "https://api.example.com/v1").await;

    // Unpaid challenges are not counted against the route.
    for _ in 0..10 {
        let r = gw.get("/gateway/acme/echo").await;
        assert_eq!(r.status(), 402);
    }
    // Calls carrying a payment are, from whichever client: the burst passes (to be found
    // forged), the rest is refused.
    let mut statuses = Vec::new();
    for ip in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        for _ in 0..2 {
            let r = client_from(ip)
                .get(gw.url("/gateway/acme/echo"))
                .header("X-PAYMENT", forged_payment())
                .send()
                .await
                .unwrap();
            statuses.push(r.status().as_u16());
        }
    }
    let passed = statuses.iter().filter(|s| **s == 402).count();
    assert!((3..=4).contains(&passed), "{statuses:?}");
    assert!(
        statuses.iter().all(|s| *s == 402 || *s == 429),
        "{statuses:?}"
    );
}

#[tokio::test]
async fn a_payer_limit_refuses_before_any_money_moves_and_ignores_forged_payments() {
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.extend(
        [
            ("PAYGATE__LIMITS__PAYER__PER_SECOND", "1"),
            ("PAYGATE__LIMITS__PAYER__BURST", "2"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let gw = Gateway::start_with_owned(env).await;
    let up = Upstream::start().await;
    org_with_route(&gw, &up.url).await;
    let call = |header: String| {
        gw.http
            .get(gw.url("/gateway/acme/echo"))
            .header("X-PAYMENT", header)
            .send()
    };

    // The payer limit counts only payments whose signature holds: forged ones in the payer's
    // name spend nothing of its allowance.
    for _ in 0..5 {
        assert_eq!(call(forged_payment()).await.unwrap().status(), 402);
    }
    let before = chain.balance(address(1)).await;
    for _ in 0..2 {
        let r = call(PaymentSpec::new(1, address(9), PRICE).v1_header())
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", gw.log());
    }
    let third = PaymentSpec::new(1, address(9), PRICE).v1_header();
    let r = call(third.clone()).await.unwrap();
    let retry_after: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let (status, code, body) = error_of(r).await;
    assert_eq!((status, code.as_str()), (429, "TOO_MANY_REQUESTS"));
    assert!(
        body["message"].as_str().unwrap().contains("limits.payer"),
        "{body}"
    );
    // Refused before anything was taken: two payments moved, and the refused one is still good.
    assert_eq!(chain.balance(address(1)).await, before - 2 * PRICE);
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    let r = call(third).await.unwrap();
    assert_eq!(r.status(), 200, "{}", gw.log());
    assert_eq!(chain.balance(address(1)).await, before - 3 * PRICE);
    assert_eq!(up.hits(), 3);
}

const MASTER_KEY: &str = "8f1d3c5b7a9e2f4d6c8b0a1e3f5d7c9b2a4e6f8d0c1b3a5e7f9d2c4b6a8e0f1d";

/// The origin of README's "Proof of payment for the origin", in Python: it checks the
/// signature with the secrets in `secrets` and deduplicates by payment id.
struct Origin {
    url: String,
    secrets: std::path::PathBuf,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Origin {
    fn start(secret: &str) -> Self {
        use std::io::BufRead;
        let python = std::env::var("PAYGATE_TEST_PYTHON")
            .expect("PAYGATE_TEST_PYTHON must name the venv's python (run via `make test`)");
        let dir = tempfile::tempdir().unwrap();
        let secrets = dir.path().join("secrets");
        std::fs::write(&secrets, secret).unwrap();
        let mut child = std::process::Command::new(python)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/interop/origin.py"
            ))
            .arg(&secrets)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut port = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut port)
            .unwrap();
        Self {
            url: format!("http://127.0.0.1:{}", port.trim()),
            secrets,
            child,
            _dir: dir,
        }
    }

    fn accept_only(&self, secret: &str) {
        std::fs::write(&self.secrets, secret).unwrap();
    }

    async fn stats(&self) -> serde_json::Value {
        reqwest::get(format!("{}/_stats", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn origin_secret(gw: &Gateway, key: &str, rotate: bool) -> serde_json::Value {
    let (method, path) = if rotate {
        (reqwest::Method::POST, "/api/origin-secret/rotate")
    } else {
        (reqwest::Method::GET, "/api/origin-secret")
    };
    let r = gw.api(key, method, path, None).await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn the_origin_checks_each_paid_request_and_a_rotation_leaves_no_gap() {
    let (_chain, gw, key, s0) = proved_gateway(&[]).await;
    assert!(s0.starts_with("pgos_") && s0.len() == 69, "{s0}");
    let origin = Origin::start(&s0);
    gw.create_paid_route(
        &key,
        "echo",
        &format!("{}/v1/echo?fixed=1", origin.url),
        false,
    )
    .await;
    let call = || {
        gw.http
            .post(gw.url("/gateway/acme/echo?q=2"))
            .header(
                "X-PAYMENT",
                PaymentSpec::new(1, address(9), PRICE).v1_header(),
            )
            // A client cannot pass its own proof off as paygate's.
            .header("X-Paygate-Payment-Id", "pay_forged")
            .header("X-Paygate-Signature", "t=1,v1=00")
            .body("{}")
            .send()
    };

    let r = call().await.unwrap();
    assert_eq!(r.status(), 200, "{}", gw.log());
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["path"], "/v1/echo?fixed=1&q=2");
    let first = body["paymentId"].as_str().unwrap().to_string();
    assert!(first.starts_with("pay_") && first != "pay_forged", "{body}");
    // The same request straight to the origin, without paygate's proof, is refused there.
    let direct = reqwest::Client::new()
        .post(format!("{}/v1/echo?fixed=1&q=2", origin.url))
        .header("X-Paygate-Payment-Id", &first)
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status(), 401);

    // Rotated: the origin still knowing only the old secret keeps accepting, then switches.
    let rotated = origin_secret(&gw, &key, true).await;
    let s1 = rotated["secret"].as_str().unwrap().to_string();
    assert_ne!(s1, s0);
    assert_eq!(rotated["previousSecret"], s0.as_str());
    assert_eq!(rotated["generation"], 1);
    assert_eq!(call().await.unwrap().status(), 200);
    origin.accept_only(&s1);
    assert_eq!(call().await.unwrap().status(), 200);
    let stats = origin.stats().await;
    assert_eq!(stats["effects"], 3, "{stats}");
    // Rotating again ends the first secret's grace at once.
    let again = origin_secret(&gw, &key, true).await;
    assert_eq!(again["previousSecret"], s1.as_str());
    origin.accept_only(&s0);
    let refused = call().await.unwrap();
    assert_eq!(
        refused.status(),
        401,
        "the origin refuses a request signed only with newer secrets"
    );
}

#[tokio::test]
async fn a_payment_settled_before_a_crash_is_forwarded_again_only_to_a_deduplicating_origin() {
    let (chain, mut gw, key, secret) = proved_gateway(&[]).await;
    let origin = Origin::start(&secret);
    let route = |path: &str, dedup: bool| {
        serde_json::json!({"path": path, "priceUSD": 0.01, "network": "base-sepolia",
            "targetUrl": format!("{}/{path}/slow", origin.url), "originDeduplicates": dedup})
    };
    let view = gw.create_route(&key, route("dedup", true)).await;
    assert_eq!(view["originDeduplicates"], true);
    gw.create_route(&key, route("plain", false)).await;

    for (path, dedup) in [("dedup", true), ("plain", false)] {
        let before = chain.balance(address(1)).await;
        let payment = PaymentSpec::new(1, address(9), PRICE).v1_header();
        // The origin holds the first request; the gateway is SIGKILLed meanwhile, after the
        // payment was recorded SETTLED and before any answer came back.
        let first = {
            let http = gw.http.clone();
            let (url, payment) = (gw.url(&format!("/gateway/acme/{path}")), payment.clone());
            tokio::spawn(async move { http.get(url).header("X-PAYMENT", payment).send().await })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while origin.stats().await["seen"].as_object().unwrap().len() < 1 + usize::from(!dedup) {
            assert!(
                Instant::now() < deadline,
                "the origin never got the request"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        gw.kill();
        assert!(first.await.unwrap().is_err());
        gw.restart().await;

        let retry = gw
            .http
            .get(gw.url(&format!("/gateway/acme/{path}")))
            .header("X-PAYMENT", &payment)
            .send()
            .await
            .unwrap();
        if dedup {
            assert_eq!(retry.status(), 200, "{}", gw.log());
            assert!(retry.headers().contains_key("x-payment-response"));
            let body: serde_json::Value = retry.json().await.unwrap();
            let id = body["paymentId"].as_str().unwrap();
            // One payment id, forwarded twice, one effect at the origin.
            assert_eq!(origin.stats().await["seen"][id], 2);
            assert_eq!(body["effect"], 1);
        } else {
            let (status, code, _) = error_of(retry).await;
            assert_eq!((status, code.as_str()), (402, "NONCE_REPLAY"));
        }
        // Paid once either way.
        assert_eq!(chain.balance(address(1)).await, before - PRICE);
    }
}

#[test]
fn the_docs_show_the_origin_check_the_tests_run() {
    let readme = include_str!("../../../docs/forwarding.md");
    let origin = include_str!("../../interop/origin.py");
    let start = readme
        .find("def verify(")
        .expect("docs/forwarding.md shows verify()");
    let block = &readme[start..readme[start..].find("```").unwrap() + start];
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            origin.contains(line),
            "origin.py lacks docs/forwarding.md's line {line:?}"
        );
    }
}

/// A gateway with a master key on a chain, the org `acme`, and its origin secret.
async fn proved_gateway(extra: &[(&str, &str)]) -> (Chain, Gateway, String, String) {
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.push(("PAYGATE_MASTER_KEY".into(), MASTER_KEY.into()));
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let gw = Gateway::start_with_owned(env).await;
    let (_, key) = gw
        .create_org("acme", Some(&address(9).to_checksum(None)))
        .await;
    let secret = origin_secret(&gw, &key, false).await["secret"]
        .as_str()
        .unwrap()
        .to_string();
    (chain, gw, key, secret)
}

async fn route_view(gw: &Gateway, key: &str, id: &str) -> serde_json::Value {
    let r = gw
        .api(
            key,
            reqwest::Method::GET,
            &format!("/api/routes/{id}"),
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// A paid GET of `/gateway/acme/{path}` (with `x-user` when given).
async fn paid_get(gw: &Gateway, path: &str, user: Option<&str>) -> reqwest::Response {
    let mut rb = gw
        .http
        .get(gw.url(&format!("/gateway/acme/{path}")))
        .header(
            "X-PAYMENT",
            PaymentSpec::new(1, address(9), PRICE).v1_header(),
        );
    if let Some(u) = user {
        rb = rb.header("x-user", u);
    }
    rb.send().await.unwrap()
}

/// Waits until the route's view shows `want` as its targets' health.
async fn wait_health(gw: &Gateway, key: &str, id: &str, want: &[Option<bool>]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while healthy(&route_view(gw, key, id).await) != want {
        let view = route_view(gw, key, id).await;
        assert!(Instant::now() < deadline, "{view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn healthy(view: &serde_json::Value) -> Vec<Option<bool>> {
    view["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["healthy"].as_bool())
        .collect()
}

/// The `maxTimeoutSeconds` the gateway's challenges offer (a configuration value).
async fn max_timeout(gw: &Gateway) -> u64 {
    let c: serde_json::Value = gw.get("/gateway/acme/fast").await.json().await.unwrap();
    c["accepts"][0]["maxTimeoutSeconds"].as_u64().unwrap()
}

/// Counts of a load run: answers as expected, connections dropped before an answer, and wrong
/// answers.
#[derive(Default)]
struct Tally {
    ok: AtomicUsize,
    dropped: AtomicUsize,
    wrong: AtomicUsize,
}

impl Tally {
    fn count(&self, r: reqwest::Result<reqwest::Response>, want: u16) {
        let c = match r {
            Ok(r) if r.status() == want => &self.ok,
            Ok(_) => &self.wrong,
            Err(_) => &self.dropped,
        };
        c.fetch_add(1, Ordering::SeqCst);
    }

    fn counts(&self) -> (usize, usize, usize) {
        let n = |c: &AtomicUsize| c.load(Ordering::SeqCst);
        (n(&self.ok), n(&self.dropped), n(&self.wrong))
    }
}
