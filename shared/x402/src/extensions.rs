//! The `extensions` a `402` declares (x402 v2's `PaymentRequired.extensions`): one typed field
//! per extension paygate speaks, so a challenge is built by setting fields, never by patching
//! JSON. An extension's own content stays the extension's document (its `info` and `schema`).
//! Extensions another server declares and paygate does not know are kept as they came
//! (`other`), so a payer echoing them loses nothing.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// `payment-identifier`'s name in `extensions`.
pub const PAYMENT_IDENTIFIER: &str = "payment-identifier";

/// The extensions of one challenge.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Extensions {
    /// `bazaar`: discovery data (the route's input and output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bazaar: Option<Value>,
    /// `payment-identifier`: a retry under the payer's own id gets the first answer back.
    #[serde(
        rename = "payment-identifier",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub payment_identifier: Option<Value>,
    /// `sign-in-with-x`: a payer whose access window is open signs in instead of paying (a
    /// fresh declaration, nonce and time, in every `402`).
    #[serde(
        rename = "sign-in-with-x",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub sign_in_with_x: Option<Value>,
    /// `offer-receipt`: the server's signed offers, one per `accepts` entry.
    #[serde(
        rename = "offer-receipt",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub offer_receipt: Option<Value>,
    /// `eip2612GasSponsoring`: a Permit2 payer may send its token's permit to Permit2 with the
    /// payment instead of approving first (the facilitator submits it).
    #[serde(
        rename = "eip2612GasSponsoring",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub eip2612_gas_sponsoring: Option<Value>,
    /// Extensions paygate does not speak, as another server declared them.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

impl Extensions {
    /// Whether none is declared (the document then carries no `extensions`).
    pub fn is_empty(&self) -> bool {
        self.bazaar.is_none()
            && self.payment_identifier.is_none()
            && self.sign_in_with_x.is_none()
            && self.offer_receipt.is_none()
            && self.eip2612_gas_sponsoring.is_none()
            && self.other.is_empty()
    }
}

/// `payment-identifier`'s server declaration: identifiers are accepted, not required; the
/// schema is the extension's.
pub fn payment_identifier_declaration() -> Value {
    serde_json::json!({
        "info": {"required": false},
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "required": {"type": "boolean"},
                "id": {"type": "string", "minLength": 16, "maxLength": 128,
                       "pattern": "^[a-zA-Z0-9_-]+$"}
            },
            "required": ["required"]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_serialize_under_the_extension_names_and_unknown_ones_are_kept() {
        let e = Extensions {
            bazaar: Some(serde_json::json!({"info": 1})),
            payment_identifier: Some(payment_identifier_declaration()),
            ..Extensions::default()
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["bazaar"]["info"], 1);
        assert_eq!(v[PAYMENT_IDENTIFIER]["info"]["required"], false);
        assert!(v.get("sign-in-with-x").is_none());
        let foreign = serde_json::json!({"bazaar": {}, "x-other": {"a": 1}});
        let back: Extensions = serde_json::from_value(foreign.clone()).unwrap();
        assert_eq!(back.other["x-other"]["a"], 1);
        assert_eq!(serde_json::to_value(&back).unwrap(), foreign);
        assert!(Extensions::default().is_empty());
        assert!(!back.is_empty());
    }
}
