//! How a refused MPP credential is told: the draft's problem details (RFC 9457, its problem
//! types under `https://paymentauth.org/problems/`), beside paygate's `{code, message,
//! requestId}`.

use crate::payments::Refusal;
use paygate_x402::verify::Rejection;

/// Why a credential was refused, in the draft's words.
pub(crate) mod reason {
    /// The echoed challenge was not issued here, is for another route or terms, or was used.
    pub const INVALID_CHALLENGE: &str = "invalid_challenge";
    /// The challenge (or its authorization) has expired.
    pub const PAYMENT_EXPIRED: &str = "payment_expired";
    /// The credential cannot be read.
    pub const MALFORMED: &str = "malformed_credential";
    /// The payload is not this method's (`authorization`).
    pub const INVALID_PAYLOAD: &str = "invalid_payload";
    /// The authorization does not pay what the challenge asked (recipient, amount, nonce,
    /// signature, source).
    pub const VERIFICATION_FAILED: &str = "verification_failed";
}

/// The problem type and title for `r`, when it is a refused credential (else `None`: the
/// refusal is the gateway's error, as for x402).
pub(crate) fn of(r: &Refusal) -> Option<(&'static str, &'static str, u16)> {
    use reason::*;
    let (kind, title) = match r {
        Refusal::Invalid(INVALID_CHALLENGE) => ("invalid-challenge", "Invalid Challenge"),
        Refusal::Invalid(PAYMENT_EXPIRED) => ("payment-expired", "Payment Expired"),
        Refusal::Invalid(INVALID_PAYLOAD) => ("invalid-payload", "Invalid Payload"),
        Refusal::Invalid(MALFORMED) | Refusal::Malformed(_) => {
            ("malformed-credential", "Malformed Credential")
        }
        Refusal::Rejected(Rejection::Expired) => ("payment-expired", "Payment Expired"),
        Refusal::Rejected(Rejection::NonceReplay) => ("invalid-challenge", "Invalid Challenge"),
        Refusal::Rejected(Rejection::InsufficientFunds) => {
            ("payment-insufficient", "Payment Insufficient")
        }
        Refusal::Invalid(_) | Refusal::Rejected(_) => {
            ("verification-failed", "Verification Failed")
        }
        _ => return None,
    };
    Some((kind, title, 402))
}

/// What went wrong, in words, for a refusal the draft has a problem type for.
pub(crate) fn detail(r: &Refusal) -> String {
    use reason::*;
    match r {
        Refusal::Invalid(INVALID_CHALLENGE) => {
            "the credential answers no challenge this server issued for this resource and price"
                .into()
        }
        Refusal::Invalid(PAYMENT_EXPIRED) => {
            "the challenge has expired, or expires too soon to settle; ask for a new one".into()
        }
        Refusal::Invalid(MALFORMED) => {
            "the Authorization: Payment credential cannot be read (base64url JSON)".into()
        }
        Refusal::Invalid(INVALID_PAYLOAD) => {
            "the payload is not an EIP-3009 authorization (type \"authorization\")".into()
        }
        Refusal::Invalid(VERIFICATION_FAILED) => {
            "the authorization does not pay what the challenge asked".into()
        }
        Refusal::Rejected(Rejection::NonceReplay) => {
            "this credential was used already; ask for a new challenge".into()
        }
        other => other.to_string(),
    }
}
