//! Payment headers: `X-PAYMENT` (v1) and `PAYMENT-SIGNATURE` (v2), base64 JSON carrying an
//! EIP-3009 `transferWithAuthorization` signed by the payer. Decoding is strict and size-capped;
//! anything malformed is refused before any state changes.

use super::v2::PaymentRequirementsV2;
use crate::address::parse_address;
use alloy_primitives::{Address, Bytes, B256, U256};
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// Largest accepted payment header, in bytes: room for a v2 payload echoing the route's
/// extensions (its bazaar data with two schemas of at most 4 KB each), within the 32 KB of
/// request headers the gateway takes.
pub const MAX_PAYMENT_HEADER: usize = 24 * 1024;

/// The authorization as it travels (every field a string).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationWire {
    pub from: String,
    pub to: String,
    pub value: String,
    pub valid_after: String,
    pub valid_before: String,
    pub nonce: String,
}

/// The `exact` (and `upto`) scheme's payload: a signature and either an EIP-3009
/// `authorization` or a Permit2 `permit2Authorization`, never both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExactPayloadWire {
    pub signature: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<AuthorizationWire>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permit2_authorization: Option<Permit2AuthorizationWire>,
    /// `auth-capture`: the salt of the payment's terms (hex `uint256`), and the nonce it was
    /// derived from when the server bound it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub salt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub salt_nonce: Option<String>,
}

/// A Permit2 `PermitWitnessTransferFrom` as it travels (x402's `exact` with
/// `assetTransferMethod: "permit2"`, and `upto`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permit2AuthorizationWire {
    pub from: String,
    pub permitted: Permit2PermittedWire,
    pub spender: String,
    pub nonce: String,
    pub deadline: String,
    pub witness: Permit2WitnessWire,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permit2PermittedWire {
    pub token: String,
    pub amount: String,
}

/// The witness: the receiver, when the transfer may happen, and for `upto` the facilitator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permit2WitnessWire {
    pub to: String,
    pub valid_after: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facilitator: Option<String>,
}

/// What a Permit2 payment says beyond the fields it shares with an EIP-3009 authorization
/// (which [`PaymentPayload::authorization`] maps: `to` the witness's receiver, `value` the
/// permitted amount, `validAfter`, `validBefore` the deadline, `nonce` Permit2's nonce).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permit2Terms {
    pub token: Address,
    pub spender: Address,
    /// The witness's facilitator: set for `upto` only.
    pub facilitator: Option<Address>,
}

/// x402 v1 payment payload (`X-PAYMENT`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayloadV1 {
    pub x402_version: u8,
    pub scheme: String,
    pub network: String,
    pub payload: ExactPayloadWire,
}

/// x402 v2 payment payload (`PAYMENT-SIGNATURE`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayloadV2 {
    pub x402_version: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<serde_json::Value>,
    pub accepted: PaymentRequirementsV2,
    pub payload: ExactPayloadWire,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<serde_json::Value>,
}

/// A signed EIP-3009 authorization in domain types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedAuthorization {
    pub from: Address,
    pub to: Address,
    pub value: U256,
    pub valid_after: U256,
    pub valid_before: U256,
    pub nonce: B256,
    pub signature: Bytes,
}

/// A decoded payment header of either version.
#[derive(Debug, Clone)]
pub enum PaymentPayload {
    V1(Box<PaymentPayloadV1>),
    V2(Box<PaymentPayloadV2>),
}

/// Which header carried the payment; decides the receipt header's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolVersion {
    V1,
    V2,
}

impl ProtocolVersion {
    pub const fn receipt_header(self) -> &'static str {
        match self {
            Self::V1 => "x-payment-response",
            Self::V2 => "payment-response",
        }
    }

    /// The version a `x402Version` number names.
    pub const fn from_number(n: u64) -> Option<Self> {
        match n {
            1 => Some(Self::V1),
            2 => Some(Self::V2),
            _ => None,
        }
    }

    pub const fn number(self) -> u8 {
        match self {
            Self::V1 => 1,
            Self::V2 => 2,
        }
    }
}

/// Why a payment header could not be decoded (`400 INVALID_PAYMENT`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("payment header is larger than 24 KB")]
    TooLarge,
    #[error("payment header is not valid base64")]
    Base64,
    #[error("payment header is not valid JSON of the x402 v{0} payload: {1}")]
    Json(u8, String),
    #[error("payment header says x402Version {0}; this header carries version {1}")]
    Version(u8, u8),
    #[error("authorization field {0} is malformed")]
    Field(&'static str),
}

/// The JSON inside a payment header value (base64, padded or not, at most
/// [`MAX_PAYMENT_HEADER`] bytes).
pub fn header_json(raw: &[u8]) -> Result<Vec<u8>, DecodeError> {
    if raw.len() > MAX_PAYMENT_HEADER {
        return Err(DecodeError::TooLarge);
    }
    let trimmed = raw.trim_ascii();
    base64::engine::general_purpose::STANDARD
        .decode(trimmed)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(trimmed))
        .map_err(|_| DecodeError::Base64)
}

/// The scheme a payment's JSON names (v2: `accepted.scheme`; v1: `scheme`), read with one light
/// scan (the rest skipped unread) so a payment is handed to its scheme before it is parsed;
/// `None` for JSON that is not a payment (the `exact` decoder then says what is wrong with it).
pub fn scheme_of(json: &[u8], version: ProtocolVersion) -> Option<std::borrow::Cow<'_, str>> {
    use std::borrow::Cow;
    #[derive(serde::Deserialize)]
    struct Accepted<'a> {
        #[serde(borrow)]
        scheme: Cow<'a, str>,
    }
    #[derive(serde::Deserialize)]
    struct V2Probe<'a> {
        #[serde(borrow)]
        accepted: Accepted<'a>,
    }
    match version {
        ProtocolVersion::V2 => serde_json::from_slice::<V2Probe>(json)
            .ok()
            .map(|p| p.accepted.scheme),
        ProtocolVersion::V1 => serde_json::from_slice::<Accepted>(json)
            .ok()
            .map(|p| p.scheme),
    }
}

impl PaymentPayload {
    /// Decodes a header value; `version` is the header's own (V1 for `X-PAYMENT`).
    pub fn decode(raw: &[u8], version: ProtocolVersion) -> Result<Self, DecodeError> {
        Self::from_json(&header_json(raw)?, version)
    }

    /// Parses the JSON payload (the decoded header, or the `paymentPayload` a facilitator is
    /// sent) of the given version.
    pub fn from_json(json: &[u8], version: ProtocolVersion) -> Result<Self, DecodeError> {
        let v = version.number();
        let p = match version {
            ProtocolVersion::V1 => serde_json::from_slice::<PaymentPayloadV1>(json)
                .map(|p| Self::V1(Box::new(p)))
                .map_err(|e| DecodeError::Json(v, e.to_string()))?,
            ProtocolVersion::V2 => serde_json::from_slice::<PaymentPayloadV2>(json)
                .map(|p| Self::V2(Box::new(p)))
                .map_err(|e| DecodeError::Json(v, e.to_string()))?,
        };
        if p.x402_version() != v {
            return Err(DecodeError::Version(p.x402_version(), v));
        }
        p.authorization()?;
        if p.exact().permit2_authorization.is_some() && p.permit2().is_none() {
            return Err(DecodeError::Field("permit2Authorization"));
        }
        Ok(p)
    }

    pub fn x402_version(&self) -> u8 {
        match self {
            Self::V1(p) => p.x402_version,
            Self::V2(p) => p.x402_version,
        }
    }

    pub fn version(&self) -> ProtocolVersion {
        match self {
            Self::V1(_) => ProtocolVersion::V1,
            Self::V2(_) => ProtocolVersion::V2,
        }
    }

    pub fn exact(&self) -> &ExactPayloadWire {
        match self {
            Self::V1(p) => &p.payload,
            Self::V2(p) => &p.payload,
        }
    }

    /// The authorization in domain types (a Permit2 one mapped onto the same fields).
    pub fn authorization(&self) -> Result<SignedAuthorization, DecodeError> {
        let e = self.exact();
        let signature = parse_bytes(&e.signature).ok_or(DecodeError::Field("signature"))?;
        match (&e.authorization, &e.permit2_authorization) {
            (Some(a), None) => Ok(SignedAuthorization {
                from: parse_address(&a.from).ok_or(DecodeError::Field("from"))?,
                to: parse_address(&a.to).ok_or(DecodeError::Field("to"))?,
                value: parse_uint(&a.value).ok_or(DecodeError::Field("value"))?,
                valid_after: parse_uint(&a.valid_after).ok_or(DecodeError::Field("validAfter"))?,
                valid_before: parse_uint(&a.valid_before)
                    .ok_or(DecodeError::Field("validBefore"))?,
                nonce: parse_b256(&a.nonce).ok_or(DecodeError::Field("nonce"))?,
                signature,
            }),
            (None, Some(p)) => Ok(SignedAuthorization {
                from: parse_address(&p.from).ok_or(DecodeError::Field("from"))?,
                to: parse_address(&p.witness.to).ok_or(DecodeError::Field("witness.to"))?,
                value: parse_uint(&p.permitted.amount)
                    .ok_or(DecodeError::Field("permitted.amount"))?,
                valid_after: parse_uint(&p.witness.valid_after)
                    .ok_or(DecodeError::Field("witness.validAfter"))?,
                valid_before: parse_uint(&p.deadline).ok_or(DecodeError::Field("deadline"))?,
                nonce: parse_uint(&p.nonce)
                    .map(B256::from)
                    .ok_or(DecodeError::Field("nonce"))?,
                signature,
            }),
            _ => Err(DecodeError::Field("authorization")),
        }
    }

    /// The Permit2 fields of a Permit2 payment (`None` for EIP-3009).
    pub fn permit2(&self) -> Option<Permit2Terms> {
        let p = self.exact().permit2_authorization.as_ref()?;
        let facilitator = match &p.witness.facilitator {
            None => None,
            Some(f) => Some(parse_address(f)?),
        };
        Some(Permit2Terms {
            token: parse_address(&p.permitted.token)?,
            spender: parse_address(&p.spender)?,
            facilitator,
        })
    }

    /// The scheme the payment names (`accepted.scheme` in v2).
    pub fn scheme(&self) -> &str {
        match self {
            Self::V1(p) => &p.scheme,
            Self::V2(p) => &p.accepted.scheme,
        }
    }

    /// The payload as JSON (what a remote facilitator is sent).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Self::V1(p) => serde_json::to_value(p),
            Self::V2(p) => serde_json::to_value(p),
        }
        .unwrap_or(serde_json::Value::Null)
    }
}

/// A decimal integer string (x402's encoding of amounts and times).
fn parse_uint(s: &str) -> Option<U256> {
    if s.is_empty() || s.len() > 78 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    U256::from_str_radix(s, 10).ok()
}

fn parse_b256(s: &str) -> Option<B256> {
    let hex = s.strip_prefix("0x")?;
    (hex.len() == 64).then(|| B256::from_str(s).ok()).flatten()
}

fn parse_bytes(s: &str) -> Option<Bytes> {
    let hex = s.strip_prefix("0x")?;
    if hex.is_empty() || hex.len() % 2 != 0 || hex.len() > 4096 {
        return None;
    }
    Bytes::from_str(s).ok()
}

/// A v1 `exact` payload with empty fields, for tests that need one to exist.
#[cfg(test)]
pub(crate) fn empty_v1_payload() -> PaymentPayload {
    PaymentPayload::V1(Box::new(PaymentPayloadV1 {
        x402_version: 1,
        scheme: "exact".into(),
        network: "base-sepolia".into(),
        payload: ExactPayloadWire {
            signature: String::new(),
            authorization: Some(AuthorizationWire {
                from: String::new(),
                to: String::new(),
                value: String::new(),
                valid_after: String::new(),
                valid_before: String::new(),
                nonce: String::new(),
            }),
            permit2_authorization: None,
            salt: None,
            salt_nonce: None,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(v: &serde_json::Value) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .encode(v.to_string())
            .into_bytes()
    }

    fn v1() -> serde_json::Value {
        serde_json::json!({
            "x402Version": 1, "scheme": "exact", "network": "base-sepolia",
            "payload": {"signature": format!("0x{}", "ab".repeat(65)), "authorization": {
                "from": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
                "to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                "value": "10000", "validAfter": "0", "validBefore": "1900000000",
                "nonce": format!("0x{}", "11".repeat(32))}}
        })
    }

    #[test]
    fn decodes_a_v1_payload() {
        let p = PaymentPayload::decode(&b64(&v1()), ProtocolVersion::V1).unwrap();
        let a = p.authorization().unwrap();
        assert_eq!(a.value, U256::from(10_000));
        assert_eq!(a.valid_before, U256::from(1_900_000_000u64));
        assert_eq!(a.signature.len(), 65);
    }

    #[test]
    fn malformed_headers_are_refused() {
        let bad = |v: serde_json::Value| PaymentPayload::decode(&b64(&v), ProtocolVersion::V1);
        assert_eq!(
            PaymentPayload::decode(b"%%%", ProtocolVersion::V1).unwrap_err(),
            DecodeError::Base64
        );
        assert!(matches!(
            PaymentPayload::decode(b"e30=", ProtocolVersion::V1),
            Err(DecodeError::Json(1, _))
        ));
        let mut v = v1();
        v["payload"]["authorization"]["value"] = serde_json::json!(10000);
        assert!(
            matches!(bad(v), Err(DecodeError::Json(1, _))),
            "numbers are not strings"
        );
        for (field, val) in [
            ("value", "-1"),
            ("value", "1e6"),
            ("value", ""),
            ("from", "0x1234"),
            ("nonce", "0x11"),
            ("validBefore", "abc"),
        ] {
            let mut v = v1();
            v["payload"]["authorization"][field] = serde_json::json!(val);
            assert!(
                matches!(bad(v), Err(DecodeError::Field(_))),
                "{field}={val}"
            );
        }
        let mut v = v1();
        v["payload"]["signature"] = serde_json::json!("0xabc");
        assert_eq!(bad(v).unwrap_err(), DecodeError::Field("signature"));
        let mut v = v1();
        v["x402Version"] = serde_json::json!(2);
        assert_eq!(bad(v).unwrap_err(), DecodeError::Version(2, 1));
        assert_eq!(
            PaymentPayload::decode(&vec![b'A'; MAX_PAYMENT_HEADER + 1], ProtocolVersion::V1)
                .unwrap_err(),
            DecodeError::TooLarge
        );
        // A v1 payload in the v2 header lacks `accepted`.
        assert!(matches!(
            PaymentPayload::decode(&b64(&v1()), ProtocolVersion::V2),
            Err(DecodeError::Json(2, _))
        ));
    }
}
