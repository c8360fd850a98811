//! Circle Payments Network (CPN): its webhook notifications and their ECDSA signatures.
//!
//! Every name and shape paygate reads from or sends to CPN lives in this module, so what the
//! provider's public documentation fixes is corrected in one place:
//! - a notification is the v2 envelope `{subscriptionId, notificationId, notificationType,
//!   notification, timestamp, version}`; for the payment events (`cpn.payment.*`) the
//!   `notification` is the payment (`id`, `status`, `updateDate`, and on failure
//!   `failureReason` and `failureCode`);
//! - it is signed with ECDSA over P-256 and SHA-256 (`ECDSA_SHA_256`): `X-Circle-Signature` is
//!   the base64 DER signature of the raw body, `X-Circle-Key-Id` the UUID of the key;
//! - the key is `GET {base}/v2/cpn/notifications/publicKey/{keyId}` (bearer API key), answering
//!   `{"data": {"id", "algorithm", "publicKey"}}` with the key as base64 DER
//!   (SubjectPublicKeyInfo).
//!
//! How CPN's payment states map onto a payout's (SPEC.md): `cpn.payment.completed` settles it,
//! `cpn.payment.failed` fails it (its reason and code kept), `cpn.payment.inManualReview` holds
//! it (`COMPLIANCE_HOLD`); `cpn.payment.cryptoFundsPending`, `cpn.payment.fiatPaymentInitiated`,
//! `cpn.payment.delayed` and any notification type paygate does not know are kept in the
//! payout's timeline without moving it.

use crate::webhook::{EventError, EventType, ProviderEvent};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

mod keys;
pub use keys::{
    decode_key, is_uuid, verify_with, NotificationKeys, PublicKeyAnswer, PublicKeyWire,
    SignatureError, ALGORITHM, PUBLIC_KEY_PATH,
};

/// The signature header.
pub const SIGNATURE_HEADER: &str = "x-circle-signature";
/// The key id header.
pub const KEY_ID_HEADER: &str = "x-circle-key-id";

/// The v2 notification envelope.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotificationWire {
    pub subscription_id: String,
    pub notification_id: String,
    pub notification_type: String,
    pub notification: serde_json::Value,
    pub timestamp: String,
    pub version: serde_json::Number,
}

/// A payment as a `cpn.payment.*` notification carries it (the fields paygate reads; others are
/// ignored, as the provider may add some).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentWire {
    pub id: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_date: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_amount: Option<AmountWire>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer_ref_id: Option<String>,
    /// A failed payment's USDC sent back on chain (the simulator's shape: CPN's own is not in
    /// its public documentation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund: Option<RefundWire>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RefundWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_hash: Option<String>,
    pub amount: AmountWire,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AmountWire {
    pub amount: String,
    pub currency: String,
}

// ---- The OFI API: quotes, payments, requests for information ----
//
// Names from CPN's public OFI documentation: `POST /v1/cpn/quotes` (the answer's `data` lists
// one or more quote options, best first), `POST /v1/cpn/payments` (from a quote, with the
// beneficiary's account data and the travel-rule data each encrypted as a JWE to the quote's
// `certificate.jwk`, ECDH-ES+A128KW / A128GCM, an `idempotencyKey` UUID in the body), its
// `GET /v1/cpn/payments/{id}`, and `POST /v1/cpn/payments/{paymentId}/rfis/{rfiId}/submit`.
// Not in the public documentation, so paygate's choices, each marked below: the field names in
// the encrypted lists (`[{name, value}]`), the RFI answer's body, a quote's `fundingAddress`
// and a payment's `funding` (paygate funds with its own EIP-3009 transfer, whose nonce it fixes:
// CPN's own transaction endpoints, where CPN builds what is signed, are not used).

/// Where quotes are asked for.
pub const QUOTES_PATH: &str = "/v1/cpn/quotes";
/// Where payments are created (and read, below it by id).
pub const PAYMENTS_PATH: &str = "/v1/cpn/payments";

/// Where the answer to RFI `rfi_id` of payment `payment_id` is sent.
pub fn rfi_submit_path(payment_id: &str, rfi_id: &str) -> String {
    format!("{PAYMENTS_PATH}/{payment_id}/rfis/{rfi_id}/submit")
}

/// The quote request (source-based: paygate knows the USDC it pays).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuoteRequestWire {
    pub idempotency_key: String,
    pub payment_method_type: String,
    pub source_amount: AmountWire,
    pub destination_amount: CurrencyWire,
    pub destination_country: String,
    pub blockchain: String,
    pub sender_type: String,
    pub recipient_type: String,
    /// `VERSION_2`: the quote's fees include the gas, fixed in USDC.
    pub transaction_version: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CurrencyWire {
    pub currency: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuotesAnswer {
    pub data: Vec<QuoteWire>,
}

/// One quote option.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuoteWire {
    pub id: String,
    pub payment_method_type: String,
    pub blockchain: String,
    pub source_amount: AmountWire,
    pub destination_amount: AmountWire,
    pub exchange_rate: ExchangeRateWire,
    pub fees: FeesWire,
    #[serde(alias = "expireDate")]
    pub quote_expire_date: String,
    pub certificate: CertificateWire,
    /// paygate's: where the USDC is sent on chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub funding_address: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExchangeRateWire {
    pub rate: String,
    pub pair: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FeesWire {
    pub total_amount: AmountWire,
    #[serde(default)]
    pub breakdown: Vec<FeeWire>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FeeWire {
    #[serde(rename = "type")]
    pub kind: String,
    pub amount: AmountWire,
}

/// The key payment data is encrypted to (the beneficiary's institution's).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CertificateWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default)]
    pub domain: String,
    pub jwk: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_pem: Option<String>,
}

/// The payment request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequestWire {
    pub idempotency_key: String,
    pub quote_id: String,
    /// paygate's payout id.
    pub customer_ref_id: String,
    pub sender_address: String,
    pub blockchain: String,
    /// JWE of a [`FieldWire`] list.
    pub beneficiary_account_data: String,
    /// JWE of a [`FieldWire`] list.
    pub travel_rule_data: String,
    pub reason_for_payment: String,
    /// paygate's: the on-chain funding already made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub funding: Option<crate::provider::FundingWire>,
}

/// One field of an encrypted list (paygate's names, see `cpn_client::beneficiary_fields`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldWire {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PaymentAnswer {
    pub data: PaymentWire,
}

/// A request for information, as `cpn.rfi.*` notifications carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RfiWire {
    pub id: String,
    pub payment_id: String,
    /// `INFORMATION_REQUIRED`, `IN_REVIEW`, `APPROVED` or `FAILED`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    /// A JSON Schema of the answer (an object of fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_requirements: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_date: Option<String>,
}

/// paygate's: the RFI answer's body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RfiSubmitWire {
    pub idempotency_key: String,
    /// JWE of the answer object.
    pub encrypted_data: String,
}

/// The RFI notifications (their `notification` is the RFI).
pub const RFI_TYPES: [&str; 4] = [
    "cpn.rfi.informationRequired",
    "cpn.rfi.inReview",
    "cpn.rfi.approved",
    "cpn.rfi.rejected",
];

/// What a notification type does to a payout.
pub fn event_type(notification_type: &str) -> EventType {
    match notification_type {
        "cpn.payment.completed" => EventType::PaymentCompleted,
        "cpn.payment.failed" => EventType::PaymentFailed,
        "cpn.payment.inManualReview" | "cpn.rfi.informationRequired" => EventType::ComplianceHold,
        _ => EventType::Progress,
    }
}

/// Whether `body` is a CPN notification (its envelope's type names a CPN event), as opposed to
/// SPEC.md's event payload.
pub fn is_notification(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Probe {
        notification_type: Option<String>,
    }
    serde_json::from_slice::<Probe>(body)
        .ok()
        .and_then(|p| p.notification_type)
        .is_some_and(|t| t.starts_with("cpn."))
}

use crate::webhook::short as text;

/// Reads a verified notification. A payment notification (`cpn.payment.*`) must carry the
/// payment (`notification.id`, `notification.status`); any other type is kept as progress of
/// the payment it names (`notification.paymentId` or `notification.id`), or of none (an empty
/// id: kept, never applied) when it names none.
pub fn parse_notification(body: &[u8]) -> Result<ProviderEvent, EventError> {
    let w: NotificationWire =
        serde_json::from_slice(body).map_err(|e| EventError::Json(e.to_string()))?;
    text("notificationType", &w.notification_type, 128)?;
    text("notificationId", &w.notification_id, 128)?;
    time::OffsetDateTime::parse(&w.timestamp, &time::format_description::well_known::Rfc3339)
        .map_err(|_| EventError::UpdateDate)?;
    let kind = event_type(&w.notification_type);
    let mut returned = None;
    let mut rfi = None;
    let (payment_id, status, failure, amount, currency) =
        if w.notification_type.starts_with("cpn.payment.") {
            let p: PaymentWire = serde_json::from_value(w.notification.clone())
                .map_err(|e| EventError::Json(format!("notification: {e}")))?;
            text("notification.id", &p.id, 128)?;
            text("notification.status", &p.status, 64)?;
            let failure = match (&p.failure_reason, &p.failure_code) {
                (None, None) => None,
                (reason, code) => Some(crate::webhook::Failure {
                    reason: reason.clone().unwrap_or_default(),
                    code: code.clone().unwrap_or_default(),
                }),
            };
            if let Some(f) = &failure {
                for (field, v) in [
                    ("notification.failureReason", &f.reason),
                    ("notification.failureCode", &f.code),
                ] {
                    if !v.is_empty() {
                        text(field, v, 128)?;
                    }
                }
            }
            let (amount, currency) = match &p.source_amount {
                Some(a) => (
                    Decimal::from_str_exact(&a.amount)
                        .ok()
                        .filter(|a| *a >= Decimal::ZERO)
                        .ok_or(EventError::Amount)?,
                    a.currency.clone(),
                ),
                None => (Decimal::ZERO, String::new()),
            };
            if let Some(tx) = p.refund.as_ref().and_then(|r| r.transaction_hash.as_ref()) {
                text("notification.refund.transactionHash", tx, 80)?;
            }
            returned = p.refund.map(|r| crate::webhook::Returned {
                transaction: r.transaction_hash,
            });
            (p.id, p.status, failure, amount, currency)
        } else if RFI_TYPES.contains(&w.notification_type.as_str()) {
            let r: RfiWire = serde_json::from_value(w.notification.clone())
                .map_err(|e| EventError::Json(format!("notification: {e}")))?;
            text("notification.id", &r.id, 128)?;
            text("notification.paymentId", &r.payment_id, 128)?;
            text("notification.status", &r.status, 64)?;
            if let Some(l) = &r.level {
                text("notification.level", l, 64)?;
            }
            let (id, status) = (r.payment_id.clone(), r.status.clone());
            rfi = Some(crate::webhook::EventRfi {
                id: r.id,
                status: r.status,
                level: r.level,
                schema: r.field_requirements,
                expires_at: r.expire_date,
            });
            (id, status, None, Decimal::ZERO, String::new())
        } else {
            let named = ["paymentId", "id"]
                .iter()
                .find_map(|k| w.notification.get(*k).and_then(|v| v.as_str()))
                .unwrap_or_default()
                .to_string();
            if !named.is_empty() {
                text("notification.id", &named, 128)?;
            }
            (named, String::new(), None, Decimal::ZERO, String::new())
        };
    Ok(ProviderEvent {
        event_type: kind,
        name: Some(w.notification_type.clone()),
        notification_id: Some(w.notification_id.clone()),
        payment_id,
        provider_status: if status.is_empty() {
            w.notification_type
        } else {
            status
        },
        amount,
        currency,
        update_date: w.timestamp,
        failure,
        returned,
        rfi,
    })
}

/// Reads a verified event body of either form: a CPN notification or SPEC.md 6.2's payload.
pub fn parse_any(body: &[u8]) -> Result<ProviderEvent, EventError> {
    if is_notification(body) {
        parse_notification(body)
    } else {
        crate::webhook::parse_event(body)
    }
}

/// A payment as a status read answers it, as the notification of that status (its id fixed by
/// the payment and the status, so reading the same status again is a duplicate), or `None` for
/// a status that moves nothing (`CREATED`).
pub fn status_notification(payment: &PaymentWire, at: &str) -> Option<Vec<u8>> {
    let kind = match payment.status.as_str() {
        "COMPLETED" => "cpn.payment.completed",
        "FAILED" => "cpn.payment.failed",
        "FIAT_PAYMENT_INITIATED" => "cpn.payment.fiatPaymentInitiated",
        "CRYPTO_FUNDS_PENDING" => "cpn.payment.cryptoFundsPending",
        _ => return None,
    };
    let id = format!("status-read:{}:{}", payment.id, payment.status);
    Some(payment_notification(kind, &id, payment, at))
}

/// Builds a payment notification (what the provider simulator sends).
pub fn payment_notification(
    notification_type: &str,
    notification_id: &str,
    payment: &PaymentWire,
    at: &str,
) -> Vec<u8> {
    let w = NotificationWire {
        subscription_id: "00000000-0000-4000-8000-000000000000".into(),
        notification_id: notification_id.into(),
        notification_type: notification_type.into(),
        notification: serde_json::to_value(payment).unwrap_or_default(),
        timestamp: at.into(),
        version: serde_json::Number::from(2),
    };
    serde_json::to_vec(&w).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use p256::ecdsa::signature::Signer as _;
    use p256::ecdsa::Signature;
    use p256::ecdsa::SigningKey;
    use p256::pkcs8::EncodePublicKey as _;

    fn key() -> SigningKey {
        SigningKey::random(&mut rand::rngs::OsRng)
    }

    fn sign(k: &SigningKey, body: &[u8]) -> String {
        let sig: Signature = k.sign(body);
        base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes())
    }

    fn spki(k: &SigningKey) -> String {
        let der = k.verifying_key().to_public_key_der().unwrap();
        base64::engine::general_purpose::STANDARD.encode(der.as_bytes())
    }

    #[test]
    fn a_signature_verifies_only_over_its_body_under_its_key() {
        let (k, other) = (key(), key());
        let body = b"{\"notificationType\":\"cpn.payment.completed\"}";
        let vk = decode_key(&spki(&k)).unwrap();
        assert_eq!(verify_with(&vk, &sign(&k, body), body), Ok(()));
        // The 64-byte r || s form too.
        let sig: Signature = k.sign(body);
        let raw = base64::engine::general_purpose::STANDARD.encode(sig.to_bytes());
        assert_eq!(verify_with(&vk, &raw, body), Ok(()));
        assert_eq!(
            verify_with(&vk, &sign(&k, body), b"{}"),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_with(&vk, &sign(&other, body), body),
            Err(SignatureError::Mismatch)
        );
        for bad in ["", "!!!", "AAAA", &"A".repeat(400)] {
            assert_eq!(
                verify_with(&vk, bad, body),
                Err(SignatureError::Malformed),
                "{bad}"
            );
        }
        assert!(decode_key("bm90IGEga2V5").is_none());
    }

    #[test]
    fn key_ids_are_uuids_only() {
        assert!(is_uuid("879dc113-5ca4-4ff7-a6b7-54652083fcf8"));
        for bad in [
            "",
            "879dc113-5ca4-4ff7-a6b7-54652083fcf",
            "879dc113-5ca4-4ff7-a6b7-54652083fcf8/../x",
            "879dc113x5ca4-4ff7-a6b7-54652083fcf8",
            "../../v1/payouts-0000-0000-000000000",
            "879dc113-5ca4-4ff7-a6b7-54652083fcfg",
        ] {
            assert!(!is_uuid(bad), "{bad}");
        }
    }

    fn payment(status: &str) -> PaymentWire {
        PaymentWire {
            id: "6f1b3d9e-0000-4000-8000-000000000001".into(),
            status: status.into(),
            update_date: Some("2026-11-26T10:00:00Z".into()),
            failure_reason: None,
            failure_code: None,
            source_amount: Some(AmountWire {
                amount: "99.50".into(),
                currency: "USD".into(),
            }),
            customer_ref_id: None,
            refund: None,
        }
    }

    #[test]
    fn notifications_map_onto_payout_events() {
        let at = "2026-11-26T10:00:01Z";
        let cases = [
            (
                "cpn.payment.completed",
                "COMPLETED",
                EventType::PaymentCompleted,
            ),
            ("cpn.payment.failed", "FAILED", EventType::PaymentFailed),
            (
                "cpn.payment.inManualReview",
                "CREATED",
                EventType::ComplianceHold,
            ),
            (
                "cpn.payment.cryptoFundsPending",
                "CRYPTO_FUNDS_PENDING",
                EventType::Progress,
            ),
            (
                "cpn.payment.fiatPaymentInitiated",
                "FIAT_PAYMENT_INITIATED",
                EventType::Progress,
            ),
            (
                "cpn.payment.delayed",
                "FIAT_PAYMENT_INITIATED",
                EventType::Progress,
            ),
            ("cpn.payment.somethingNew", "CREATED", EventType::Progress),
        ];
        for (kind, status, want) in cases {
            let body = payment_notification(kind, "n-1", &payment(status), at);
            assert!(is_notification(&body));
            let e = parse_notification(&body).unwrap();
            assert_eq!(e.event_type, want, "{kind}");
            assert_eq!(e.provider_status, status);
            assert_eq!(e.name.as_deref(), Some(kind));
            assert_eq!(e.payment_id, "6f1b3d9e-0000-4000-8000-000000000001");
            assert_eq!(e.amount, Decimal::new(9950, 2));
            assert_eq!(e.update_date, at);
        }
        // A failure's reason and code are kept.
        let mut p = payment("FAILED");
        p.failure_reason = Some("BANK_VERIFICATION_FAILED".into());
        p.failure_code = Some("PM02001".into());
        let e =
            parse_notification(&payment_notification("cpn.payment.failed", "n-1", &p, at)).unwrap();
        let f = e.failure.unwrap();
        assert_eq!(
            (f.reason.as_str(), f.code.as_str()),
            ("BANK_VERIFICATION_FAILED", "PM02001")
        );
        // A failure whose USDC came back: with its transaction, or without when the provider
        // does not know it (it gave it back in an attempt cut short).
        for tx in [Some("0xabc"), None] {
            p.refund = Some(RefundWire {
                transaction_hash: tx.map(str::to_string),
                amount: AmountWire {
                    amount: "9.95".into(),
                    currency: "USD".into(),
                },
            });
            let e = parse_notification(&payment_notification("cpn.payment.failed", "n-2", &p, at))
                .unwrap();
            assert_eq!(
                e.returned,
                Some(crate::webhook::Returned {
                    transaction: tx.map(str::to_string)
                })
            );
        }
        // Another kind of notification names its payment, or none.
        let other = |n: serde_json::Value| {
            serde_json::json!({"subscriptionId": "s", "notificationId": "n1",
                "notificationType": "cpn.rfi.created", "notification": n,
                "timestamp": at, "version": 2})
            .to_string()
        };
        let e = parse_notification(
            other(serde_json::json!({"id": "r1", "paymentId": "p9"})).as_bytes(),
        )
        .unwrap();
        assert_eq!(
            (e.event_type, e.payment_id.as_str()),
            (EventType::Progress, "p9")
        );
        let e = parse_notification(other(serde_json::json!({"level": 1})).as_bytes()).unwrap();
        assert_eq!(e.payment_id, "");
        // What is not a notification.
        assert!(!is_notification(
            b"{\"type\":\"payments.payment_completed\"}"
        ));
        assert!(!is_notification(b"[]"));
        assert!(parse_notification(b"{}").is_err());
        let mut bad: serde_json::Value = serde_json::from_slice(&payment_notification(
            "cpn.payment.completed",
            "n-1",
            &payment("COMPLETED"),
            at,
        ))
        .unwrap();
        bad["timestamp"] = "yesterday".into();
        assert!(parse_notification(bad.to_string().as_bytes()).is_err());
        bad["timestamp"] = at.into();
        bad["notification"]["id"] = "".into();
        assert!(parse_notification(bad.to_string().as_bytes()).is_err());
        bad["notification"] = serde_json::json!({"status": "COMPLETED"});
        assert!(parse_notification(bad.to_string().as_bytes()).is_err());
        bad["notification"] = serde_json::json!({"id": "p", "status": "COMPLETED",
            "sourceAmount": {"amount": "-1", "currency": "USD"}});
        assert!(parse_notification(bad.to_string().as_bytes()).is_err());
    }
}
