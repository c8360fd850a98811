//! The control plane's error type and the middleware that gives every response a request id and
//! turns every error (ours, the framework's, a panic) into the one JSON error body.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use paygate_domain::ids::new_request_id;
use paygate_domain::StoreError;
use paygate_domain::{ErrorBody, ErrorCode, FieldProblem};
use paygate_gateway::payments::Refusal;
use paygate_payouts::engine::PayoutError;

/// An error answer. Rendered to JSON by [`request_context`], the only place that does so.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Vec<FieldProblem>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// A `VALIDATION_ERROR` whose message names the first field.
    pub fn validation(details: Vec<FieldProblem>) -> Self {
        let message = match details.first() {
            Some(d) => format!("{}: {}", d.field, d.problem),
            None => "invalid input".into(),
        };
        Self {
            code: ErrorCode::ValidationError,
            message,
            details,
        }
    }

    pub fn internal(what: impl std::fmt::Display) -> Self {
        tracing::error!(error = %what, "internal error");
        Self::new(
            ErrorCode::InternalError,
            "internal error; quote the requestId to support",
        )
    }
}

/// A refused payment as an error answer (the facilitator API answers the refusals that carry
/// an x402 reason word itself).
impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        Self::new(r.code(), r.to_string())
    }
}

impl From<PayoutError> for ApiError {
    fn from(e: PayoutError) -> Self {
        match e {
            PayoutError::Store(e) => e.into(),
            PayoutError::Inconsistent => Self::internal(e),
            e => Self::new(e.code(), e.to_string()),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => Self::new(ErrorCode::NotFound, "not found"),
            StoreError::Unavailable(why) => {
                tracing::warn!(error = %why, "store unreachable");
                Self::new(
                    ErrorCode::StoreUnavailable,
                    "the database is unreachable; nothing was changed, retry later",
                )
            }
            other => Self::internal(other),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = status.into_response();
        resp.extensions_mut().insert(self);
        resp
    }
}

pub fn panic_response(_err: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("handler panicked");
    ApiError::new(
        ErrorCode::InternalError,
        "internal error; quote the requestId to support",
    )
    .into_response()
}

fn valid_request_id(v: &HeaderValue) -> Option<String> {
    let s = v.to_str().ok()?;
    (!s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic()))
        .then(|| s.to_string())
}

/// Reads the whole request body (up to `max` bytes) before any handler or extractor looks at
/// the request. An answer decided from the headers alone (401, a bad `Idempotency-Key`) would
/// otherwise leave the body unread, and the server would close the connection after answering:
/// the proxy keeps its connections to the control plane in a pool, and a body still on its way
/// meets a closed socket (the next request on that connection, or this one's answer, is lost).
pub async fn read_body_first(max: usize, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    match axum::body::to_bytes(body, max).await {
        Ok(bytes) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Err(e) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if too_large {
                ApiError::new(ErrorCode::PayloadTooLarge, "request body too large").into_response()
            } else {
                ApiError::new(ErrorCode::BadRequest, "request body could not be read")
                    .into_response()
            }
        }
    }
}

/// Outermost middleware: request id in, request id out, JSON error bodies.
/// A body declared as another media type than JSON (`text/plain`, a form): its media type.
/// Every body paygate reads is JSON; a body without a `Content-Type` is read as JSON.
fn declared_not_json(req: &Request) -> Option<String> {
    use axum::http::Method;
    if !matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH) {
        return None;
    }
    let declared = req.headers().get(header::CONTENT_TYPE)?.to_str().ok()?;
    let has_body = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|n| n.trim() != "0");
    let media = declared
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let json = media == "application/json" || media.ends_with("+json");
    (has_body && !json && !media.is_empty()).then_some(media)
}

pub async fn request_context(req: Request, next: Next) -> Response {
    let rid = req
        .headers()
        .get("x-request-id")
        .and_then(valid_request_id)
        .unwrap_or_else(new_request_id);
    let mut resp = match declared_not_json(&req) {
        Some(media) => ApiError::new(
            ErrorCode::UnsupportedMediaType,
            format!("the request body is {media}; send JSON with Content-Type: application/json"),
        )
        .into_response(),
        None => next.run(req).await,
    };
    let status = resp.status();
    let err = resp.extensions_mut().remove::<ApiError>();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let err = match err {
        Some(e) => Some(e),
        // A rejection produced by the framework (body too large, bad path parameter, ...).
        None if status.as_u16() >= 400 && !is_json => {
            let code = ErrorCode::for_status(status.as_u16());
            let reason = status.canonical_reason().unwrap_or("error").to_lowercase();
            Some(ApiError::new(code, reason))
        }
        None => None,
    };
    if let Some(e) = err {
        let body = ErrorBody::new(e.code, &e.message, &rid)
            .with_details(&e.details)
            .to_json();
        let (mut parts, _) = resp.into_parts();
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if e.code == ErrorCode::InternalError {
            tracing::error!(request_id = %rid, "answered 500");
        }
        resp = Response::from_parts(parts, Body::from(body));
    }
    if let Ok(v) = HeaderValue::from_str(&rid) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}
