//! What a node answers while it waits for its database at start: `GET /healthz` is `503` with
//! the reason (so an operator or a load balancer sees why the node is not serving), anything
//! else `503 STORE_UNAVAILABLE` in the JSON error shape.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use paygate_domain::error::{ErrorBody, ErrorCode};
use paygate_domain::ids::new_request_id;
use std::sync::{Arc, Mutex};

/// Why the node is not serving yet, as the waiting room tells it.
#[derive(Clone, Default)]
pub struct WaitReason(Arc<Mutex<String>>);

impl WaitReason {
    pub fn set(&self, why: impl Into<String>) {
        if let Ok(mut r) = self.0.lock() {
            *r = why.into();
        }
    }

    fn get(&self) -> String {
        self.0.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// Serves `listener` until the task is dropped (aborted once the store is open).
pub async fn waiting_room(listener: tokio::net::TcpListener, reason: WaitReason) {
    let health = {
        let reason = reason.clone();
        move || async move {
            let body = serde_json::json!({
                "status": "waiting",
                "version": env!("CARGO_PKG_VERSION"),
                "reason": reason.get(),
            });
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
        }
    };
    let app = axum::Router::new()
        .route("/healthz", axum::routing::get(health))
        .fallback(move || async move { not_yet(&reason.get()) });
    let _ = axum::serve(listener, app).await;
}

fn not_yet(reason: &str) -> Response {
    let rid = new_request_id();
    let message = format!("this node is starting and waits for its database: {reason}");
    let body = ErrorBody::new(ErrorCode::StoreUnavailable, &message, &rid).to_json();
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [
            ("content-type", "application/json"),
            ("x-request-id", rid.as_str()),
        ],
        body,
    )
        .into_response()
}
