//! Request input helpers: JSON objects read strictly (every field checked, unknown fields
//! refused, all problems listed), the `Idempotency-Key` header, query strings.

use crate::error::ApiError;
use alloy_primitives::Address;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use paygate_shared::{ErrorCode, FieldProblem};
pub use paygate_x402::address::parse_address;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// A JSON object being validated field by field.
pub struct Fields {
    map: Map<String, Value>,
    pub problems: Vec<FieldProblem>,
}

impl Fields {
    /// Parses `body` as a JSON object.
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let v: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::new(
                ErrorCode::BadRequest,
                format!("request body is not valid JSON: {e}"),
            )
        })?;
        match v {
            Value::Object(map) => Ok(Self {
                map,
                problems: Vec::new(),
            }),
            _ => Err(ApiError::new(
                ErrorCode::BadRequest,
                "request body must be a JSON object",
            )),
        }
    }

    pub fn problem(&mut self, field: &str, problem: impl Into<String>) {
        self.problems.push(FieldProblem::new(field, problem));
    }

    /// Removes and returns a field; `Some(Value::Null)` when explicitly null.
    fn take(&mut self, field: &str) -> Option<Value> {
        self.map.remove(field)
    }

    pub fn string(&mut self, field: &str, max_len: usize) -> Option<String> {
        match self.take(field)? {
            Value::String(s) if s.chars().count() > max_len => {
                self.problem(field, format!("must be at most {max_len} characters"));
                None
            }
            Value::String(s) => Some(s),
            _ => {
                self.problem(field, "must be a string");
                None
            }
        }
    }

    /// A string that may be `null` (clearing it): `Some(None)` for null.
    pub fn nullable_string(&mut self, field: &str, max_len: usize) -> Option<Option<String>> {
        match self.map.get(field) {
            Some(Value::Null) => {
                self.map.remove(field);
                Some(None)
            }
            Some(_) => self.string(field, max_len).map(Some),
            None => None,
        }
    }

    pub fn bool(&mut self, field: &str) -> Option<bool> {
        match self.take(field)? {
            Value::Bool(b) => Some(b),
            _ => {
                self.problem(field, "must be true or false");
                None
            }
        }
    }

    pub fn number(&mut self, field: &str) -> Option<serde_json::Number> {
        match self.take(field)? {
            Value::Number(n) => Some(n),
            _ => {
                self.problem(field, "must be a number");
                None
            }
        }
    }

    /// A USD amount (JSON number or decimal string, at most 6 decimals, 0 allowed), or `null`
    /// to clear it.
    pub fn nullable_usd(&mut self, field: &str) -> Option<Option<paygate_x402::money::UsdcAmount>> {
        use paygate_x402::money::UsdcAmount;
        let parsed = match self.take(field)? {
            Value::Null => return Some(None),
            Value::Number(n) if n.as_u64() == Some(0) => Ok(UsdcAmount(0)),
            Value::Number(n) => UsdcAmount::from_usd_json(&n).map_err(|e| e.to_string()),
            // Zero in the one USDC decimal syntax (`"0"`, `"0.00"`); no blanks around it.
            Value::String(s) if paygate_x402::money::parse_usdc_units(&s) == Ok(0) => {
                Ok(UsdcAmount(0))
            }
            Value::String(s) => UsdcAmount::from_usd_str(&s).map_err(|e| e.to_string()),
            _ => Err("must be a number or a decimal string".into()),
        };
        match parsed {
            Ok(a) => Some(Some(a)),
            Err(problem) => {
                self.problem(field, problem);
                None
            }
        }
    }

    /// A number, or `null` (`Some(None)`).
    pub fn nullable_number(&mut self, field: &str) -> Option<Option<serde_json::Number>> {
        match self.map.get(field) {
            Some(Value::Null) => {
                self.map.remove(field);
                Some(None)
            }
            Some(_) => self.number(field).map(Some),
            None => None,
        }
    }

    /// An EVM address, or `null` to clear it.
    pub fn nullable_address(&mut self, field: &str) -> Option<Option<Address>> {
        match self.nullable_string(field, 42)? {
            None => Some(None),
            Some(s) => match parse_address(&s) {
                Some(a) => Some(Some(a)),
                None => {
                    self.problem(field, "must be a 0x-prefixed 20-byte hex address");
                    None
                }
            },
        }
    }

    pub fn require<T>(&mut self, field: &str, v: Option<T>) -> Option<T> {
        if v.is_none() && !self.problems.iter().any(|p| p.field == field) {
            self.problem(field, "is required");
        }
        v
    }

    /// Reports every field not taken as unknown (or read-only), then fails if any problem.
    pub fn finish(mut self, read_only: &[&str]) -> Result<(), ApiError> {
        let mut rest: Vec<String> = self.map.keys().cloned().collect();
        rest.sort();
        for k in rest {
            if read_only.contains(&k.as_str()) {
                self.problem(&k, "is assigned by the server and cannot be set");
            } else {
                self.problem(&k, "is not a known field");
            }
        }
        if self.problems.is_empty() {
            Ok(())
        } else {
            Err(ApiError::validation(self.problems))
        }
    }
}

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
    paygate_shared::apikey::sha256_hex(&material)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usd_caps_read_zero_and_amounts_in_the_one_decimal_syntax() {
        let mut f = Fields::parse(
            br#"{"a": "0", "b": "0.00", "c": 0, "d": "2.5", "e": " 0", "f": " 1", "g": null}"#,
        )
        .unwrap();
        use paygate_x402::money::UsdcAmount;
        assert_eq!(f.nullable_usd("a"), Some(Some(UsdcAmount(0))));
        assert_eq!(f.nullable_usd("b"), Some(Some(UsdcAmount(0))));
        assert_eq!(f.nullable_usd("c"), Some(Some(UsdcAmount(0))));
        assert_eq!(f.nullable_usd("d"), Some(Some(UsdcAmount(2_500_000))));
        assert_eq!(f.nullable_usd("e"), None);
        assert_eq!(f.nullable_usd("f"), None);
        assert_eq!(f.nullable_usd("g"), Some(None));
        let fields: Vec<_> = f.problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, ["e", "f"], "blanks are refused alike, zero or not");
    }

    #[test]
    fn fields_collect_every_problem() {
        let mut f = Fields::parse(br#"{"a": 1, "b": "x", "zz": true, "id": "r"}"#).unwrap();
        let a = f.string("a", 10);
        let b = f.bool("b");
        let c = f.string("c", 10);
        f.require("c", c);
        assert!(a.is_none() && b.is_none());
        let err = f.finish(&["id"]).unwrap_err();
        let fields: Vec<_> = err.details.iter().map(|d| d.field.as_str()).collect();
        assert_eq!(fields, ["a", "b", "c", "id", "zz"]);
    }
}
