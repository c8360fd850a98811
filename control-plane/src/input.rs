//! Request input besides JSON bodies (`body.rs`): the `Idempotency-Key` header, the request
//! fingerprint it is checked against, query strings.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use paygate_domain::model::IdempotencyRecord;
use paygate_domain::{ErrorCode, FieldProblem};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The `Idempotency-Key` header, the one reading of it: absent, or 1 to 255 visible ASCII
/// characters; anything else is a `VALIDATION_ERROR` naming the header.
pub struct IdempotencyKey(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let Some(v) = parts.headers.get("idempotency-key") else {
            return Ok(Self(None));
        };
        let ok = v
            .to_str()
            .ok()
            .filter(|s| !s.is_empty() && s.len() <= 255 && s.bytes().all(|b| b.is_ascii_graphic()));
        match ok {
            Some(s) => Ok(Self(Some(s.to_string()))),
            None => Err(ApiError::validation(vec![FieldProblem::new(
                "Idempotency-Key",
                "must be 1 to 255 visible ASCII characters",
            )])),
        }
    }
}

impl IdempotencyKey {
    /// The key, where the endpoint requires one (`MISSING_IDEMPOTENCY_KEY` without it).
    pub fn required(self) -> Result<String, ApiError> {
        self.0.ok_or_else(|| {
            ApiError::new(
                ErrorCode::MissingIdempotencyKey,
                "Idempotency-Key header is required",
            )
        })
    }
}

/// What identifies a request for an `Idempotency-Key`: SHA-256 over method, path and the body
/// as canonical JSON (sorted keys, no whitespace), so a re-serialised retry still matches.
pub fn fingerprint(method: &str, path: &str, body: &[u8]) -> String {
    let canonical = serde_json::from_slice::<Value>(body)
        .map(|v| v.to_string().into_bytes())
        .unwrap_or_else(|_| body.to_vec());
    let mut material = format!("{method} {path}\n").into_bytes();
    material.extend_from_slice(&canonical);
    paygate_domain::apikey::sha256_hex(&material)
}

/// An `Idempotency-Key` in use for this request: the key and the request's fingerprint.
pub struct Idem {
    key: String,
    fingerprint: String,
}

impl Idem {
    pub fn from_request(
        key: IdempotencyKey,
        method: &Method,
        uri: &Uri,
        body: &[u8],
    ) -> Option<Self> {
        key.0.map(|key| Self {
            key,
            fingerprint: fingerprint(method.as_str(), uri.path(), body),
        })
    }

    /// The key itself.
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn record(
        &self,
        org_id: &str,
        status: StatusCode,
        body: &impl serde::Serialize,
    ) -> IdempotencyRecord {
        IdempotencyRecord {
            org_id: org_id.to_string(),
            key: self.key.clone(),
            fingerprint: self.fingerprint.clone(),
            status: status.as_u16(),
            body: serde_json::to_string(body).unwrap_or_default(),
            created_at_unix: time::OffsetDateTime::now_utc().unix_timestamp(),
        }
    }

    /// The answer to a request whose key was used before: the stored response if it is the same
    /// request, else `409 DUPLICATE_REQUEST`.
    pub fn replay(&self, prev: &IdempotencyRecord) -> Response {
        if prev.fingerprint != self.fingerprint {
            return ApiError::new(
                ErrorCode::DuplicateRequest,
                "Idempotency-Key was already used with a different request",
            )
            .into_response();
        }
        let status = StatusCode::from_u16(prev.status).unwrap_or(StatusCode::OK);
        let mut resp = (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            prev.body.clone(),
        )
            .into_response();
        resp.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
        resp
    }
}

/// The stored answer when the request's `Idempotency-Key` was used before.
pub async fn remembered(
    state: &AppState,
    org_id: &str,
    idem: &Option<Idem>,
) -> Result<Option<Response>, ApiError> {
    if let Some(i) = idem {
        if let Some(prev) = state.store.get_idempotency(org_id, &i.key).await? {
            return Ok(Some(i.replay(&prev)));
        }
    }
    Ok(None)
}

/// `out` answered `200` under the request's `Idempotency-Key`, kept so a repeat answers it
/// again: the answer (or, when a concurrent request under the key was kept first, that one's).
/// The operation records its key itself too, so a record that could not be kept loses nothing.
pub async fn keep_answer(
    state: &AppState,
    org_id: &str,
    idem: &Option<Idem>,
    out: &impl serde::Serialize,
    what: &str,
) -> Response {
    if let Some(i) = idem {
        match state
            .store
            .put_idempotency(&i.record(org_id, StatusCode::OK, out))
            .await
        {
            Ok(()) => {}
            Err(paygate_domain::StoreError::IdempotencyKeyUsed(prev)) => return i.replay(&prev),
            Err(e) => tracing::warn!(error = %e, "{what}'s Idempotency-Key record was not kept"),
        }
    }
    axum::Json(out).into_response()
}

/// The query string read into `T`, the one way queries are read: a parameter given twice is a
/// `VALIDATION_ERROR` naming it; values (and unknown parameters, where `T` denies them) are
/// checked by serde, a failure being a `VALIDATION_ERROR` on `query`.
pub struct TypedQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for TypedQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let raw = parts.uri.query().unwrap_or("");
        let mut seen = std::collections::HashSet::new();
        for (k, _) in url::form_urlencoded::parse(raw.as_bytes()) {
            if !seen.insert(k.clone()) {
                return Err(ApiError::validation(vec![FieldProblem::new(
                    k.to_string(),
                    "must be given at most once",
                )]));
            }
        }
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| Self(q.0))
            .map_err(|e| ApiError::validation(vec![FieldProblem::new("query", e.body_text())]))
    }
}

/// A list's page size: `given` or `default`, which must lie in 1..=`max` (a problem otherwise).
pub fn page_limit(
    given: Option<u32>,
    default: u32,
    max: u32,
    problems: &mut Vec<FieldProblem>,
) -> usize {
    let limit = given.unwrap_or(default);
    if !(1..=max).contains(&limit) {
        problems.push(FieldProblem::new(
            "limit",
            format!("must be between 1 and {max}"),
        ));
    }
    limit as usize
}

/// A `cursor` must be one a list returned (a record id, `prefix_` and letters, digits, `_`).
pub fn check_cursor(cursor: Option<&str>, problems: &mut Vec<FieldProblem>) {
    let looks_like_an_id = |c: &str| {
        c.len() <= 64
            && c.contains('_')
            && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    if cursor.is_some_and(|c| !looks_like_an_id(c)) {
        problems.push(FieldProblem::new(
            "cursor",
            "must be a nextCursor this endpoint returned",
        ));
    }
}

/// The cursor of the page after `page` (its last id), if the page was full.
pub fn next_cursor<T>(page: &[T], limit: usize, id: impl Fn(&T) -> &str) -> Option<String> {
    (page.len() == limit)
        .then(|| page.last().map(|last| id(last).to_string()))
        .flatten()
}

/// A request's method and URI, for an `Idempotency-Key` fingerprint ([`Idem::from_request`]).
pub struct RequestLine {
    pub method: Method,
    pub uri: Uri,
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for RequestLine {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self {
            method: parts.method.clone(),
            uri: parts.uri.clone(),
        })
    }
}
