//! Seller webhooks end to end (issue 32, item 3): the real binary delivers a seller's events to
//! a receiver this test runs, which fails, times out and answers late before it accepts. Every
//! event arrives, signed as Standard Webhooks signs (checked here with HMAC-SHA256 computed
//! apart from paygate's code), its `webhook-id` the same on every attempt; one object's events in
//! order; a delivery pending across a SIGKILL is sent after the restart; the delivery log shows
//! each attempt; a replay sends the same event again; a rotated secret and its predecessor both
//! sign during the overlap, the new one alone after it; bad input and a read-only key are refused.

use crate::common;

use common::chain::{address, PaymentSpec};
use common::upstream::Upstream;
use common::webhook_receiver::*;
use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const MASTER_KEY: &str = "5b1d5c8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f90112233445566778899aab";

/// The organisation's endpoints as `GET /api/webhooks` lists them.
async fn listed(gw: &Gateway, key: &str) -> Value {
    gw.api(key, Method::GET, "/api/webhooks", None)
        .await
        .json()
        .await
        .unwrap()
}

async fn gateway() -> Gateway {
    gateway_with(&[]).await
}

async fn gateway_with(extra: &[(&str, &str)]) -> Gateway {
    let mut env = vec![
        ("PAYGATE_MASTER_KEY", MASTER_KEY),
        ("PAYGATE__WEBHOOKS__TIMEOUT_SECONDS", "1"),
        ("PAYGATE__WEBHOOKS__RETRY_SECONDS", "[1, 1, 1, 1, 1, 1]"),
        ("PAYGATE__WEBHOOKS__POLL_INTERVAL_MS", "100"),
        ("PAYGATE__WEBHOOKS__SECRET_OVERLAP_SECONDS", "3600"),
    ];
    env.extend_from_slice(extra);
    Gateway::start_with(&env).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_arrives_signed_despite_failures_and_a_restart() {
    let mut gw = gateway().await;
    let upstream = Upstream::start().await;
    let receiver_wallet = address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver_wallet.to_checksum(None)))
        .await;
    // Fails, times out, answers late (in time), then accepts.
    let rx = Receiver::start(vec![Behave::Fail, Behave::Hang, Behave::Late]).await;
    let (endpoint, secret) = register(
        &gw,
        &key,
        &rx.url,
        json!(["payment.settled", "route.changed"]),
    )
    .await;

    // route.changed (created), then a paid request: payment.settled.
    gw.create_paid_route(&key, "echo", &format!("{}/echo", upstream.url), false)
        .await;
    let paid = gw
        .http
        .get(gw.url("/gateway/acme/echo"))
        .header(
            "X-PAYMENT",
            PaymentSpec::new(1, receiver_wallet, 10_000).v1_header(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(paid.status(), 200);
    // The origin is told the payment's id.
    let echoed: Value = paid.json().await.unwrap();
    let payment_id = echoed["headers"]["x-paygate-payment-id"]
        .as_str()
        .unwrap()
        .to_string();

    let settled = rx.accepted("payment.settled", 1).await;
    assert_eq!(settled.len(), 1, "{:?}", rx.got());
    assert_eq!(settled[0].1["data"]["id"], payment_id.as_str());
    assert_eq!(settled[0].1["data"]["status"], "SETTLED");
    let routes = rx.accepted("route.changed", 1).await;
    assert_eq!(routes[0].1["data"]["change"], "created");
    // Every call was signed; the retries of one event kept its id.
    for r in rx.got() {
        assert!(signed_by(&secret, &r), "{r:?}");
    }
    let first_id = settled[0].0.id.clone();
    let log: Value = gw
        .api(
            &key,
            Method::GET,
            &format!("/api/webhooks/{endpoint}/deliveries"),
            None,
        )
        .await
        .json()
        .await
        .unwrap();
    let ds = log["deliveries"].as_array().unwrap();
    assert!(ds.iter().all(|d| d["status"] == "DELIVERED"), "{log}");
    let tried: u64 = ds.iter().map(|d| d["attempts"].as_u64().unwrap()).sum();
    assert!(tried >= 4, "a failure and a timeout came before: {log}");
    let errors: Vec<String> = ds
        .iter()
        .flat_map(|d| d["history"].as_array().unwrap().clone())
        .filter_map(|a| a["error"].as_str().map(str::to_string))
        .collect();
    assert!(errors.iter().any(|e| e.contains("500")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("timed out")), "{errors:?}");

    // A delivery pending when the node is SIGKILLed is sent after the restart.
    *rx.script.lock().unwrap() = vec![Behave::Fail; rx.calls.load(Ordering::SeqCst) + 50];
    let r = gw
        .api(
            &key,
            Method::PATCH,
            &format!("/api/routes/{}", gw.route_id(&key, "/echo").await),
            Some(json!({"priceUSD": 0.02})),
        )
        .await;
    assert_eq!(r.status(), 200);
    tokio::time::sleep(Duration::from_millis(700)).await;
    gw.kill();
    *rx.script.lock().unwrap() = Vec::new();
    gw.restart().await;
    let routes = rx.accepted("route.changed", 2).await;
    assert_eq!(routes.len(), 2, "{:?}", rx.got());
    assert_eq!(routes[1].1["data"]["change"], "updated");

    // Replay: the same event again, under the same webhook-id.
    let first_delivery = ds
        .iter()
        .find(|d| d["eventId"] == first_id.as_str())
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = gw
        .api(
            &key,
            Method::POST,
            &format!("/api/webhooks/{endpoint}/deliveries/{first_delivery}/replay"),
            None,
        )
        .await;
    assert_eq!(r.status(), 202);
    let settled = rx.accepted("payment.settled", 2).await;
    assert_eq!(settled.len(), 2);
    assert_eq!(settled[1].0.id, first_id, "a replay keeps the event's id");

    // Rotation: the new secret and the old one both sign during the overlap.
    let r = gw
        .api(
            &key,
            Method::POST,
            &format!("/api/webhooks/{endpoint}/rotate-secret"),
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    let rotated: Value = r.json().await.unwrap();
    let new_secret = rotated["secret"].as_str().unwrap().to_string();
    assert_ne!(new_secret, secret);
    assert_eq!(rotated["signingSecrets"], 2);
    gw.api(
        &key,
        Method::DELETE,
        &format!("/api/routes/{}", gw.route_id(&key, "/echo").await),
        None,
    )
    .await;
    let routes = rx.accepted("route.changed", 3).await;
    let last = &routes.last().unwrap().0;
    assert!(
        signed_by(&new_secret, last) && signed_by(&secret, last),
        "{last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_objects_events_arrive_in_order_and_bad_input_is_refused() {
    let gw = gateway().await;
    let (_, key) = gw
        .create_org("acme", Some(&address(9).to_checksum(None)))
        .await;
    // The first attempts fail: the later events of the route wait for the first.
    let rx = Receiver::start(vec![Behave::Fail, Behave::Fail]).await;
    register(&gw, &key, &rx.url, json!(["route.changed"])).await;
    gw.create_paid_route(&key, "r", "http://127.0.0.1:9/r", false)
        .await;
    let id = gw.route_id(&key, "/r").await;
    for price in [0.02, 0.03] {
        let r = gw
            .api(
                &key,
                Method::PATCH,
                &format!("/api/routes/{id}"),
                Some(json!({"priceUSD": price})),
            )
            .await;
        assert_eq!(r.status(), 200);
    }
    let got = rx.accepted("route.changed", 3).await;
    let order: Vec<String> = got
        .iter()
        .map(|(_, v)| format!("{} {}", v["data"]["change"], v["data"]["route"]["priceUSD"]))
        .collect();
    assert_eq!(
        order,
        ["\"created\" 0.01", "\"updated\" 0.02", "\"updated\" 0.03"],
        "{order:?}"
    );

    // Bad input: each a VALIDATION_ERROR naming its field, nothing registered.
    for (body, field) in [
        (
            json!({"url": "ftp://x.example/h", "events": ["route.changed"]}),
            "url",
        ),
        (
            json!({"url": "not a url", "events": ["route.changed"]}),
            "url",
        ),
        (json!({"url": rx.url, "events": []}), "events"),
        (
            json!({"url": rx.url, "events": ["payment.bogus"]}),
            "events",
        ),
        (
            json!({"url": rx.url, "events": ["route.changed", "route.changed"]}),
            "events",
        ),
        (
            json!({"url": rx.url, "events": ["route.changed"], "extra": 1}),
            "extra",
        ),
    ] {
        let (status, code, v) = send_error(
            gw.http
                .post(gw.url("/api/webhooks"))
                .bearer_auth(&key)
                .json(&body),
        )
        .await;
        assert_eq!(
            (status, code.as_str()),
            (400, "VALIDATION_ERROR"),
            "{body}: {v}"
        );
        assert!(v.to_string().contains(field), "{body}: {v}");
    }
    let listed = listed(&gw, &key).await;
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert!(
        !listed.to_string().contains("whsec_"),
        "secrets are never listed"
    );
    // A read-only key lists, and is refused a write.
    let r = gw
        .api(
            &key,
            Method::POST,
            "/api/keys",
            Some(json!({"role": "read"})),
        )
        .await;
    let read_key = r.json::<Value>().await.unwrap()["apiKey"]
        .as_str()
        .unwrap()
        .to_string();
    let r = gw.api(&read_key, Method::GET, "/api/webhooks", None).await;
    assert_eq!(r.status(), 200);
    let r = gw
        .api(
            &read_key,
            Method::POST,
            "/api/webhooks",
            Some(json!({"url": rx.url, "events": ["route.changed"]})),
        )
        .await;
    assert_eq!(r.status(), 403);
    // The audit log has the endpoint's creation.
    let audit: Value = gw
        .api(&key, Method::GET, "/api/audit", None)
        .await
        .json()
        .await
        .unwrap();
    assert!(audit.to_string().contains("webhook.created"), "{audit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payout_is_followed_from_creation_to_settlement() {
    let gw = gateway_with(&[
        ("PAYGATE_WEBHOOK_SECRETS", "whsec_provider_test_secret"),
        ("PAYGATE__PAYOUT__SANDBOX__WEBHOOK_DELAY_MS", "100"),
    ])
    .await;
    let (_, key) = gw.create_org("acme", Some(WALLET_A)).await;
    let rx = Receiver::start(Vec::new()).await;
    let (_, secret) = register(&gw, &key, &rx.url, json!(["payout.updated"])).await;
    let corridor = gw.active_corridor(&key, "BRL").await;
    let quote: Value = gw
        .api(
            &key,
            Method::GET,
            &format!("/corridors/{corridor}/quote?amount=100"),
            None,
        )
        .await
        .json()
        .await
        .unwrap();
    let body = json!({"quoteId": quote["quoteId"], "fromAddress": WALLET_B, "amountUSDC": quote["amount"],
        "beneficiary": {"name": "Ana Souza", "bankName": "Banco Teste", "accountNumber": "0001-23456-7",
            "country": "BR", "currency": "BRL"}});
    let r = gw.pay_corridor(&key, &corridor, "wh-payout-1", &body).await;
    assert_eq!(r.status(), 202);
    let paid: Value = r.json().await.unwrap();
    let id = paid["paymentId"].as_str().unwrap().to_string();
    // Created, then each provider event that moves it, the last one SETTLED.
    let deadline = Instant::now() + Duration::from_secs(30);
    let statuses = loop {
        let got = rx.accepted("payout.updated", 1).await;
        let statuses: Vec<String> = got
            .iter()
            .map(|(_, v)| v["data"]["status"].as_str().unwrap_or_default().to_string())
            .collect();
        if statuses.last().map(String::as_str) == Some("SETTLED") || Instant::now() > deadline {
            assert!(got
                .iter()
                .all(|(r, v)| signed_by(&secret, r) && v["data"]["paymentId"] == id.as_str()));
            break statuses;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(statuses.len() >= 2, "{statuses:?}");
    assert_eq!(statuses.last().unwrap(), "SETTLED", "{statuses:?}");
}

/// A rotated secret stops signing once its overlap is over: the deliveries after it carry the
/// new secret's signature alone, and the endpoint counts one signing secret again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_secret_ends_after_its_overlap() {
    let gw = gateway_with(&[("PAYGATE__WEBHOOKS__SECRET_OVERLAP_SECONDS", "1")]).await;
    let (_, key) = gw
        .create_org("acme", Some(&address(9).to_checksum(None)))
        .await;
    let rx = Receiver::start(vec![]).await;
    let (endpoint, secret) = register(&gw, &key, &rx.url, json!(["route.changed"])).await;
    let rotate = format!("/api/webhooks/{endpoint}/rotate-secret");
    let rotated: Value = gw
        .api(&key, Method::POST, &rotate, None)
        .await
        .json()
        .await
        .unwrap();
    let new_secret = rotated["secret"].as_str().unwrap().to_string();
    assert_eq!(rotated["signingSecrets"], 2, "{rotated}");
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    gw.create_paid_route(&key, "after", "http://127.0.0.1:9/a", false)
        .await;
    let got = rx.accepted("route.changed", 1).await;
    let (delivered, _) = got.first().expect("the route change arrives");
    assert!(signed_by(&new_secret, delivered), "{delivered:?}");
    assert!(!signed_by(&secret, delivered), "{delivered:?}");
    assert_eq!(delivered.signature.split(' ').count(), 1, "{delivered:?}");
    let listed = listed(&gw, &key).await;
    let one = listed
        .as_array()
        .and_then(|w| w.iter().find(|e| e["id"] == json!(endpoint)))
        .cloned()
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(one["signingSecrets"], 1, "{one}");
}
