//! A seller's webhook receiver on a loopback port (issue 32, item 3): it answers each call by a
//! script (fail, hang, answer late, then accept), keeps what arrived, and checks Standard
//! Webhooks signatures with HMAC-SHA256 computed here, apart from paygate's code.
#![allow(dead_code)]

use super::Gateway;
use base64::Engine;
use hmac::{Hmac, Mac};
use reqwest::Method;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the receiver does with a call: its status, after a delay.
#[derive(Clone, Copy)]
pub enum Behave {
    Fail,
    Hang,
    Late,
    Accept,
}

#[derive(Debug, Clone)]
pub struct Received {
    pub id: String,
    pub timestamp: String,
    pub signature: String,
    pub body: String,
    pub accepted: bool,
}

/// An endpoint on a loopback port answering its calls by a script (then accepting).
pub struct Receiver {
    pub url: String,
    pub got: Arc<Mutex<Vec<Received>>>,
    pub script: Arc<Mutex<Vec<Behave>>>,
    pub calls: Arc<AtomicUsize>,
}

impl Receiver {
    pub async fn start(script: Vec<Behave>) -> Self {
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let script = Arc::new(Mutex::new(script));
        let calls = Arc::new(AtomicUsize::new(0));
        let (g, s, c) = (got.clone(), script.clone(), calls.clone());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
                let (g, s, c) = (g.clone(), s.clone(), c.clone());
                async move {
                    let n = c.fetch_add(1, Ordering::SeqCst);
                    let how = s.lock().unwrap().get(n).copied().unwrap_or(Behave::Accept);
                    let h = |k: &str| {
                        headers
                            .get(k)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_string()
                    };
                    let status = match how {
                        Behave::Fail => 500,
                        Behave::Hang => {
                            tokio::time::sleep(Duration::from_secs(3)).await;
                            200
                        }
                        Behave::Late => {
                            tokio::time::sleep(Duration::from_millis(600)).await;
                            200
                        }
                        Behave::Accept => 200,
                    };
                    g.lock().unwrap().push(Received {
                        id: h("webhook-id"),
                        timestamp: h("webhook-timestamp"),
                        signature: h("webhook-signature"),
                        body,
                        accepted: status == 200 && !matches!(how, Behave::Hang),
                    });
                    axum::http::StatusCode::from_u16(status).unwrap()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            url,
            got,
            script,
            calls,
        }
    }

    pub fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// The accepted events of `event_type`, once `n` arrived (or 30 s passed).
    pub async fn accepted(&self, event_type: &str, n: usize) -> Vec<(Received, Value)> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let found: Vec<(Received, Value)> = self
                .got()
                .into_iter()
                .filter(|r| r.accepted)
                .map(|r| {
                    let v: Value = serde_json::from_str(&r.body).unwrap();
                    (r, v)
                })
                .filter(|(_, v)| v["type"] == event_type)
                .collect();
            if found.len() >= n || Instant::now() > deadline {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Standard Webhooks' signature of `r` under `secret`, computed here.
pub fn expected_signature(secret: &str, r: &Received) -> String {
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .unwrap();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{}.{}.{}", r.id, r.timestamp, r.body).as_bytes());
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

pub fn signed_by(secret: &str, r: &Received) -> bool {
    let want = expected_signature(secret, r);
    r.signature.split(' ').any(|s| s == want)
}

/// Registers `url` for `events` with the organisation of `key`: the endpoint's id and secret.
pub async fn register(gw: &Gateway, key: &str, url: &str, events: Value) -> (String, String) {
    let r = gw
        .api(
            key,
            Method::POST,
            "/api/webhooks",
            Some(json!({"url": url, "events": events})),
        )
        .await;
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    (
        v["id"].as_str().unwrap().to_string(),
        v["secret"].as_str().unwrap().to_string(),
    )
}
