//! A real upstream HTTP server on a loopback port that echoes what it receives and counts hits
//! (and, asked in its query, answers another status or states a usage charge).
#![allow(dead_code)]

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, Uri};
use axum::Json;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub struct Upstream {
    pub url: String,
    hits: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    pub async fn start() -> Self {
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let h = h.clone();
                async move {
                    h.fetch_add(1, Ordering::SeqCst);
                    let headers: serde_json::Map<String, Value> = headers
                        .iter()
                        .map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap_or(""))))
                        .collect();
                    let echo = Json(json!({
                        "method": method.as_str(),
                        "path": uri.path(),
                        "query": uri.query(),
                        "headers": headers,
                        "body": String::from_utf8_lossy(&body),
                    }));
                    // `upstream_status=NNN` answers that status, `upstream_charge=X` states a
                    // usage charge (`X-Paygate-Charge`).
                    let asked = |name: &str| {
                        uri.query()?
                            .split('&')
                            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                            .map(str::to_string)
                    };
                    let status = asked("upstream_status")
                        .and_then(|s| s.parse::<u16>().ok())
                        .and_then(|s| axum::http::StatusCode::from_u16(s).ok())
                        .unwrap_or(axum::http::StatusCode::OK);
                    let mut answer = axum::response::IntoResponse::into_response((status, echo));
                    if let Some(charge) = asked("upstream_charge") {
                        if let Ok(v) = axum::http::HeaderValue::from_str(&charge) {
                            answer.headers_mut().insert("x-paygate-charge", v);
                        }
                    }
                    answer
                }
            },
        );
        let (url, task) = serve(app).await;
        Self { url, hits, task }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `app` on a loopback port chosen by the system (HTTP/1.1, and h2c with prior
/// knowledge): its base URL and the serving task.
pub async fn serve(app: axum::Router) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

/// An origin speaking HTTP/2 in cleartext (h2c) that streams its answer in two chunks and
/// states what the call cost in a trailer (`X-Paygate-Charge: 0.0003`); its address.
pub async fn trailer_origin() -> String {
    use axum::body::Body;
    use http_body::Frame;
    let app = axum::Router::new().route(
        "/tokens",
        axum::routing::get(|| async {
            let mut trailers = axum::http::HeaderMap::new();
            trailers.insert("x-paygate-charge", "0.0003".parse().unwrap());
            let frames = futures_util::stream::iter(vec![
                Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(b"tok "))),
                Ok(Frame::data(Bytes::from_static(b"tok"))),
                Ok(Frame::trailers(trailers)),
            ]);
            Body::new(http_body_util::StreamBody::new(frames))
        }),
    );
    let (url, _) = serve(app).await;
    url
}

/// An origin that takes an hour to answer: how many requests reached it, and its URL.
pub async fn hanging_origin() -> (Arc<AtomicUsize>, String) {
    let reached = Arc::new(AtomicUsize::new(0));
    let seen = reached.clone();
    let app = axum::Router::new().route(
        "/slow",
        axum::routing::get(move || {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
                "late"
            }
        }),
    );
    let (url, _task) = serve(app).await;
    (reached, url)
}
