//! Provider webhooks: the `Provider-Signature` header checked over the raw body before anything
//! is parsed, then the event payload of SPEC.md 6.2 read strictly.
//!
//! Signatures (DECISIONS.md): lowercase hex HMAC-SHA256 of the body with the shared secret, or
//! the timestamped form `t=<unix>,v1=<hex HMAC of "t.body">` within a tolerance. Any of several
//! configured secrets may match (rotation). Comparison is constant-time (`Mac::verify_slice`).

use hmac::{Hmac, Mac};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::str::FromStr;

type HmacSha256 = Hmac<Sha256>;

/// Longest signature header considered.
const MAX_HEADER: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("missing Provider-Signature header")]
    Missing,
    #[error("malformed Provider-Signature header")]
    Malformed,
    #[error("signature timestamp outside the tolerance")]
    Stale,
    #[error("signature does not match")]
    Mismatch,
}

fn mac(secret: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC takes keys of any length; new_from_slice cannot fail for it.
    let mut m = HmacSha256::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
    for p in parts {
        m.update(p);
    }
    m
}

fn matches_any(secrets: &[Vec<u8>], parts: &[&[u8]], sig_hex: &str) -> bool {
    let Ok(sig) = hex::decode(sig_hex) else {
        return false;
    };
    if sig.len() != 32 {
        return false;
    }
    // Every secret is tried, so timing does not tell which one matched.
    secrets
        .iter()
        .fold(false, |ok, s| mac(s, parts).verify_slice(&sig).is_ok() | ok)
}

/// Checks `header` over `body` with any of `secrets` at time `now` (unix seconds).
pub fn verify(
    header: Option<&str>,
    body: &[u8],
    secrets: &[Vec<u8>],
    tolerance_seconds: u64,
    now: u64,
) -> Result<(), SignatureError> {
    let header = header.map(str::trim).filter(|h| !h.is_empty());
    let header = header.ok_or(SignatureError::Missing)?;
    if header.len() > MAX_HEADER || secrets.is_empty() {
        return Err(if secrets.is_empty() {
            SignatureError::Mismatch
        } else {
            SignatureError::Malformed
        });
    }
    if !header.contains('=') {
        if header.len() != 64 || !header.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(SignatureError::Malformed);
        }
        return if matches_any(secrets, &[body], header) {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        };
    }
    let mut t: Option<u64> = None;
    let mut sigs = Vec::new();
    for part in header.split(',') {
        let (k, v) = part
            .trim()
            .split_once('=')
            .ok_or(SignatureError::Malformed)?;
        match k {
            "t" => {
                if t.is_some() || v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(SignatureError::Malformed);
                }
                t = Some(v.parse().map_err(|_| SignatureError::Malformed)?);
            }
            "v1" => sigs.push(v),
            // Other schemes (v0, ...) are ignored.
            _ => {}
        }
    }
    let t = t.ok_or(SignatureError::Malformed)?;
    if sigs.is_empty() {
        return Err(SignatureError::Malformed);
    }
    if t.abs_diff(now) > tolerance_seconds {
        return Err(SignatureError::Stale);
    }
    let ts = t.to_string();
    let parts: [&[u8]; 3] = [ts.as_bytes(), b".", body];
    if sigs.iter().any(|s| matches_any(secrets, &parts, s)) {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

/// The plain form: hex HMAC-SHA256 of `body`.
pub fn sign_plain(secret: &[u8], body: &[u8]) -> String {
    hex::encode(mac(secret, &[body]).finalize().into_bytes())
}

/// The timestamped form `t=<t>,v1=<hex HMAC of "t.body">`.
pub fn sign_timestamped(secret: &[u8], body: &[u8], t: u64) -> String {
    let ts = t.to_string();
    let sig = mac(secret, &[ts.as_bytes(), b".", body]).finalize();
    format!("t={ts},v1={}", hex::encode(sig.into_bytes()))
}

/// Secrets from the environment variable's value: comma-separated, blanks ignored.
pub fn parse_secrets(value: &str) -> Vec<Vec<u8>> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.as_bytes().to_vec())
        .collect()
}

/// The three events of SPEC.md 6.1, and progress (a provider's step that moves no payout
/// state: kept in the payout's timeline; only a CPN notification says one, see the `cpn` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    #[serde(rename = "payments.payment_completed")]
    PaymentCompleted,
    #[serde(rename = "payments.payment_failed")]
    PaymentFailed,
    #[serde(rename = "payments.compliance_hold")]
    ComplianceHold,
    /// Never read from SPEC's payload (`parse_event` refuses it).
    #[serde(rename = "payments.progress")]
    Progress,
}

impl EventType {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::PaymentCompleted => "payments.payment_completed",
            Self::PaymentFailed => "payments.payment_failed",
            Self::ComplianceHold => "payments.compliance_hold",
            Self::Progress => "payments.progress",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CustomAttributes {
    client_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct AmountWire {
    amount: String,
    currency: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PaymentWire {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    status: String,
    amount: AmountWire,
    update_date: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EventWire {
    #[serde(rename = "type")]
    kind: EventType,
    client_id: String,
    notification_type: String,
    version: serde_json::Number,
    custom_attributes: CustomAttributes,
    payment: PaymentWire,
}

/// Why the provider says a payment failed (CPN's `failureReason` and `failureCode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: String,
    pub code: String,
}

/// A verified, well-formed provider event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderEvent {
    pub event_type: EventType,
    /// The provider's own name of the event, when it is not SPEC's (a CPN notification type).
    pub name: Option<String>,
    /// The provider's id of the notification when it has one (CPN's `notificationId`, the same
    /// on every delivery of it): what makes a repeat a duplicate.
    pub notification_id: Option<String>,
    /// The provider's payment id (`cpnPaymentId`).
    pub payment_id: String,
    pub provider_status: String,
    pub amount: Decimal,
    pub currency: String,
    pub update_date: String,
    pub failure: Option<Failure>,
    /// The provider gave a failed payout's USDC back to the payout wallet.
    pub returned: Option<Returned>,
    /// A request for information (CPN's `cpn.rfi.*`), as the provider states it now.
    pub rfi: Option<EventRfi>,
}

/// A request for information as an event states it (read from a provider's own shape, e.g.
/// `cpn::RfiWire`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRfi {
    pub id: String,
    /// `INFORMATION_REQUIRED`, `IN_REVIEW`, `APPROVED` or `FAILED`.
    pub status: String,
    pub level: Option<String>,
    /// The JSON Schema of the answer, when the event carries it.
    pub schema: Option<serde_json::Value>,
    pub expires_at: Option<String>,
}

/// USDC a provider gave back, and its transaction when the provider knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Returned {
    pub transaction: Option<String>,
}

impl ProviderEvent {
    /// The event's name as the payout's timeline shows it.
    pub fn name(&self) -> &str {
        self.name
            .as_deref()
            .unwrap_or_else(|| self.event_type.as_str())
    }
}

/// Why an event body is not a well-formed provider event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    #[error("event: {0}")]
    Json(String),
    #[error("notificationType must be \"payments\"")]
    NotificationType,
    #[error("payment.type must be \"payment\"")]
    PaymentType,
    #[error("{field} must be 1 to {max} printable characters")]
    Text { field: &'static str, max: usize },
    #[error("payment.amount.amount must be a non-negative decimal string")]
    Amount,
    #[error("payment.updateDate must be an ISO 8601 timestamp")]
    UpdateDate,
    #[error("version must be a number")]
    Version,
}

/// `v` is 1 to `max` bytes without control characters, else the error naming `field`.
pub(crate) fn short(field: &'static str, v: &str, max: usize) -> Result<(), EventError> {
    if v.is_empty() || v.len() > max || v.chars().any(char::is_control) {
        Err(EventError::Text { field, max })
    } else {
        Ok(())
    }
}

/// Parses an event body strictly: every field of SPEC.md 6.2 present with its type, the known
/// event types only, `notificationType` `payments`, `payment.type` `payment`, a decimal amount
/// and an ISO 8601 `updateDate`.
pub fn parse_event(body: &[u8]) -> Result<ProviderEvent, EventError> {
    let w: EventWire = serde_json::from_slice(body).map_err(|e| EventError::Json(e.to_string()))?;
    if w.notification_type != "payments" {
        return Err(EventError::NotificationType);
    }
    if w.kind == EventType::Progress {
        return Err(EventError::Json(
            "unknown event type payments.progress".into(),
        ));
    }
    if w.payment.kind != "payment" {
        return Err(EventError::PaymentType);
    }
    short("clientId", &w.client_id, 128)?;
    short(
        "customAttributes.clientId",
        &w.custom_attributes.client_id,
        128,
    )?;
    short("payment.id", &w.payment.id, 128)?;
    short("payment.status", &w.payment.status, 64)?;
    short("payment.amount.currency", &w.payment.amount.currency, 8)?;
    let amount = Decimal::from_str_exact(&w.payment.amount.amount)
        .ok()
        .filter(|a| *a >= Decimal::ZERO)
        .ok_or(EventError::Amount)?;
    time::OffsetDateTime::parse(
        &w.payment.update_date,
        &time::format_description::well_known::Rfc3339,
    )
    .map_err(|_| EventError::UpdateDate)?;
    if w.version.as_f64().is_none() {
        return Err(EventError::Version);
    }
    Ok(ProviderEvent {
        event_type: w.kind,
        name: None,
        notification_id: None,
        payment_id: w.payment.id,
        provider_status: w.payment.status,
        amount,
        currency: w.payment.amount.currency,
        update_date: w.payment.update_date,
        failure: None,
        returned: None,
        rfi: None,
    })
}

/// Builds an event body (what the sandbox provider sends).
pub fn event_body(
    event: EventType,
    client_id: &str,
    payment_id: &str,
    provider_status: &str,
    amount: Decimal,
    currency: &str,
    update_date: &str,
) -> Vec<u8> {
    let w = EventWire {
        kind: event,
        client_id: client_id.into(),
        notification_type: "payments".into(),
        version: serde_json::Number::from(1),
        custom_attributes: CustomAttributes {
            client_id: client_id.into(),
        },
        payment: PaymentWire {
            id: payment_id.into(),
            kind: "payment".into(),
            status: provider_status.into(),
            amount: AmountWire {
                amount: amount.to_string(),
                currency: currency.into(),
            },
            update_date: update_date.into(),
        },
    };
    serde_json::to_vec(&w).unwrap_or_default()
}

impl FromStr for EventType {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        serde_json::from_value(serde_json::Value::String(s.into())).map_err(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn secrets() -> Vec<Vec<u8>> {
        parse_secrets("old-secret, new-secret")
    }

    fn body() -> Vec<u8> {
        event_body(
            EventType::PaymentCompleted,
            "client-1",
            "cpn_1",
            "complete",
            Decimal::from_str("537.12").unwrap(),
            "BRL",
            "2026-11-22T10:00:00Z",
        )
    }

    #[test]
    fn both_forms_and_every_secret_verify() {
        let b = body();
        for s in [b"old-secret".as_slice(), b"new-secret"] {
            let plain = sign_plain(s, &b);
            assert_eq!(verify(Some(&plain), &b, &secrets(), 300, NOW), Ok(()));
            let ts = sign_timestamped(s, &b, NOW - 299);
            assert_eq!(verify(Some(&ts), &b, &secrets(), 300, NOW), Ok(()));
        }
        // Upper-case hex is the same signature.
        let plain = sign_plain(b"new-secret", &b).to_uppercase();
        assert_eq!(verify(Some(&plain), &b, &secrets(), 300, NOW), Ok(()));
    }

    #[test]
    fn forgeries_are_refused() {
        let b = body();
        let good = sign_plain(b"new-secret", &b);
        let mut tampered = b.clone();
        tampered[10] ^= 1;
        let cases: Vec<(Option<String>, Vec<u8>, SignatureError)> = vec![
            (None, b.clone(), SignatureError::Missing),
            (Some("".into()), b.clone(), SignatureError::Missing),
            (Some(good.clone()), tampered, SignatureError::Mismatch),
            (
                Some(sign_plain(b"wrong", &b)),
                b.clone(),
                SignatureError::Mismatch,
            ),
            (Some("zz".repeat(32)), b.clone(), SignatureError::Malformed),
            (
                Some(good[..63].to_string()),
                b.clone(),
                SignatureError::Malformed,
            ),
            (
                Some(sign_timestamped(b"new-secret", &b, NOW - 301)),
                b.clone(),
                SignatureError::Stale,
            ),
            (
                Some(sign_timestamped(b"new-secret", &b, NOW + 301)),
                b.clone(),
                SignatureError::Stale,
            ),
            (
                Some(format!("t={NOW}")),
                b.clone(),
                SignatureError::Malformed,
            ),
            (
                Some(format!("v1={good}")),
                b.clone(),
                SignatureError::Malformed,
            ),
            (
                Some(format!("t=x,v1={good}")),
                b.clone(),
                SignatureError::Malformed,
            ),
            (
                Some(format!("t={NOW},t={NOW},v1={good}")),
                b.clone(),
                SignatureError::Malformed,
            ),
            // A plain signature presented as the timestamped form does not match.
            (
                Some(format!("t={NOW},v1={good}")),
                b.clone(),
                SignatureError::Mismatch,
            ),
            (Some("x".repeat(2000)), b.clone(), SignatureError::Malformed),
        ];
        for (h, body, want) in cases {
            assert_eq!(
                verify(h.as_deref(), &body, &secrets(), 300, NOW),
                Err(want),
                "{h:?}"
            );
        }
        // No secret configured: nothing verifies.
        assert_eq!(
            verify(Some(&good), &b, &[], 300, NOW),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn payloads_are_read_strictly() {
        let e = parse_event(&body()).unwrap();
        assert_eq!(e.event_type, EventType::PaymentCompleted);
        assert_eq!(e.payment_id, "cpn_1");
        let good: serde_json::Value = serde_json::from_slice(&body()).unwrap();
        let mutate = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v = good.clone();
            f(&mut v);
            parse_event(v.to_string().as_bytes())
        };
        assert!(mutate(&|v| v["type"] = "payments.unknown".into()).is_err());
        assert!(mutate(&|v| v["type"] = "payments.progress".into()).is_err());
        assert!(mutate(&|v| v["notificationType"] = "refunds".into()).is_err());
        assert!(mutate(&|v| v["payment"]["type"] = "refund".into()).is_err());
        assert!(mutate(&|v| v["payment"]["amount"]["amount"] = 5.into()).is_err());
        assert!(mutate(&|v| v["payment"]["amount"]["amount"] = "-1".into()).is_err());
        assert!(mutate(&|v| v["payment"]["updateDate"] = "yesterday".into()).is_err());
        assert!(mutate(&|v| v["payment"]["id"] = "".into()).is_err());
        assert!(mutate(&|v| v["version"] = "1".into()).is_err());
        assert!(mutate(&|v| {
            v.as_object_mut().unwrap().remove("customAttributes");
        })
        .is_err());
        assert!(parse_event(b"not json").is_err());
        assert!(parse_event(b"[]").is_err());
    }
}
