//! The payer's side of the `exact` scheme: sign an EIP-3009 `transferWithAuthorization` for a
//! requirement and encode it as a v2 `PAYMENT-SIGNATURE` header. paygate pays as a client only for
//! MCP tool calls, from the organisation's payer wallet.

use super::payment::{AuthorizationWire, ExactPayloadWire, SignedAuthorization};
use super::verify::{signing_hash, token_domain};
use crate::requirements::PaymentRequirements;
use alloy_primitives::{B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use base64::Engine;

/// Seconds before "now" that the authorization becomes valid, so a payee whose clock runs
/// slightly behind still accepts it.
const VALID_AFTER_SLACK: u64 = 60;

/// Signs a payment of `req.amount` to `req.pay_to` valid for `req.max_timeout_seconds` from `now`
/// (unix seconds) and returns the base64 v2 header value, with `accepted` rendered from `req`
/// (paygate paying its own routes).
pub fn payment_header(
    req: &PaymentRequirements,
    signer: &PrivateKeySigner,
    now: u64,
) -> Result<String, alloy_signer::Error> {
    let accepted = serde_json::to_value(req.to_v2()).unwrap_or_default();
    payment_header_echoing(req, accepted, signer, now)
}

/// As [`payment_header`], echoing `offered` (the requirement exactly as the server sent it, as
/// `req` was read from) in `accepted`: v2 servers may match it field for field, including `extra`
/// fields paygate does not know (x402-rs offers `extra.assetTransferMethod`).
pub fn payment_header_echoing(
    req: &PaymentRequirements,
    offered: serde_json::Value,
    signer: &PrivateKeySigner,
    now: u64,
) -> Result<String, alloy_signer::Error> {
    let nonce = B256::from(rand::random::<[u8; 32]>());
    signed_header(req, offered, signer, now, nonce)
}

/// As [`payment_header`] with the authorization's `nonce` given: a transfer that must happen
/// at most once whatever retries sign it again (the token accepts a nonce once).
pub fn payment_header_with_nonce(
    req: &PaymentRequirements,
    signer: &PrivateKeySigner,
    now: u64,
    nonce: B256,
) -> Result<String, alloy_signer::Error> {
    let accepted = serde_json::to_value(req.to_v2()).unwrap_or_default();
    signed_header(req, accepted, signer, now, nonce)
}

fn signed_header(
    req: &PaymentRequirements,
    offered: serde_json::Value,
    signer: &PrivateKeySigner,
    now: u64,
    nonce: B256,
) -> Result<String, alloy_signer::Error> {
    let mut auth = SignedAuthorization {
        from: signer.address(),
        to: req.pay_to,
        value: U256::from(req.amount.0),
        valid_after: U256::from(now.saturating_sub(VALID_AFTER_SLACK)),
        valid_before: U256::from(now.saturating_add(req.max_timeout_seconds)),
        nonce,
        signature: Default::default(),
    };
    let sig = signer.sign_hash_sync(&signing_hash(&auth, &token_domain(req)))?;
    auth.signature = sig.as_bytes().to_vec().into();
    Ok(header_value(req, offered, &auth, None))
}

/// The base64 v2 header of a signed EIP-3009 authorization `auth` (with the `auth-capture`
/// terms' `salt` where there is one), `accepted` the requirement as offered rather than
/// re-rendered.
pub(crate) fn header_value(
    req: &PaymentRequirements,
    offered: serde_json::Value,
    auth: &SignedAuthorization,
    salt: Option<String>,
) -> String {
    let exact = ExactPayloadWire {
        signature: format!("0x{}", hex::encode(&auth.signature)),
        authorization: Some(AuthorizationWire {
            from: auth.from.to_checksum(None),
            to: auth.to.to_checksum(None),
            value: auth.value.to_string(),
            valid_after: auth.valid_after.to_string(),
            valid_before: auth.valid_before.to_string(),
            nonce: auth.nonce.to_string(),
        }),
        permit2_authorization: None,
        salt,
        salt_nonce: None,
    };
    // The `PaymentPayloadV2` wire shape.
    let payload = serde_json::json!({
        "x402Version": 2,
        "resource": { "url": req.resource },
        "accepted": offered,
        "payload": exact,
    });
    base64::engine::general_purpose::STANDARD.encode(payload.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::UsdcAmount;
    use crate::network::{builtin_networks, Networks};
    use crate::payment::{PaymentPayload, ProtocolVersion};
    use crate::verify::check_signature;

    #[test]
    fn signed_header_decodes_and_verifies_against_the_requirement() {
        let networks = Networks::from_config(&builtin_networks());
        let req = PaymentRequirements {
            network: networks.resolve("base-sepolia").unwrap().clone(),
            amount: UsdcAmount(12_345),
            pay_to: alloy_primitives::Address::repeat_byte(9),
            resource: "http://127.0.0.1:8402/gateway/acme/echo".into(),
            description: String::new(),
            mime_type: String::new(),
            max_timeout_seconds: 60,
            token: Default::default(),
        };
        let signer = PrivateKeySigner::random();
        let header = payment_header(&req, &signer, 1_000_000).unwrap();
        let p = PaymentPayload::decode(header.as_bytes(), ProtocolVersion::V2).unwrap();
        let auth = p.authorization().unwrap();
        assert_eq!(auth.from, signer.address());
        assert_eq!(auth.to, req.pay_to);
        assert_eq!(auth.value, U256::from(12_345u64));
        assert_eq!(auth.valid_before, U256::from(1_000_060u64));
        assert_eq!(auth.valid_after, U256::from(999_940u64));
        assert_eq!(
            check_signature(&auth, &token_domain(&req)),
            crate::signature::Signed::ByKey
        );
        let PaymentPayload::V2(v2) = p else {
            panic!("v2 expected")
        };
        assert_eq!(v2.accepted, req.to_v2());
        // Each call signs a fresh nonce.
        let again = payment_header(&req, &signer, 1_000_000).unwrap();
        let again = PaymentPayload::decode(again.as_bytes(), ProtocolVersion::V2).unwrap();
        assert_ne!(again.authorization().unwrap().nonce, auth.nonce);
    }

    #[test]
    fn an_offered_requirement_is_echoed_verbatim_and_still_verifies() {
        let networks = Networks::from_config(&builtin_networks());
        // As x402-rs offers it: an `extra` field paygate does not know, other key order.
        let offered = serde_json::json!({
            "scheme": "exact", "network": "eip155:84532", "amount": "1000",
            "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 300,
            "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            "extra": {"assetTransferMethod": "eip3009", "name": "USDC", "version": "2"}
        });
        let req = PaymentRequirements::from_wire(&offered, ProtocolVersion::V2, &networks).unwrap();
        let signer = PrivateKeySigner::random();
        let header = payment_header_echoing(&req, offered.clone(), &signer, 1_000_000).unwrap();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&header)
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(json["accepted"], offered);
        let p = PaymentPayload::decode(header.as_bytes(), ProtocolVersion::V2).unwrap();
        let auth = p.authorization().unwrap();
        assert_eq!(
            crate::verify::verify(&p, &auth, &req, 1_000_000),
            Ok(crate::signature::Signed::ByKey)
        );
    }
}
