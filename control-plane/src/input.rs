//! Request input besides JSON bodies (`body.rs`): the `Idempotency-Key` header, the request
//! fingerprint it is checked against, query strings.

use crate::error::ApiError;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
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
