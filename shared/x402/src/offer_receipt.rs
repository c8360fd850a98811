//! x402's `offer-and-receipt` extension (v1), EIP-712 format: a server signs the receipt of a
//! served paid request (and may sign its offers) with its own key, so an agent can prove the
//! purchase to its owner or an auditor; anyone recovers the signer from the receipt alone and
//! compares it with the key the server publishes. Domains and types are the extension's
//! (`x402 receipt` / `x402 offer`, version 1, chain id 1, no verifying contract).

use alloy_primitives::{Address, Signature, B256, U256};
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{sol, Eip712Domain, SolStruct};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// The extension's name in `extensions`.
pub const EXTENSION: &str = "offer-receipt";

/// The payload schema version.
pub const VERSION: u64 = 1;

sol! {
    /// What an offer says (the extension's §4.3 type).
    struct Offer {
        uint256 version;
        string resourceUrl;
        string scheme;
        string network;
        string asset;
        string payTo;
        string amount;
        uint256 validUntil;
    }

    /// What a receipt says (the extension's §5.3 type).
    struct Receipt {
        uint256 version;
        string network;
        string resourceUrl;
        string payer;
        uint256 issuedAt;
        string transaction;
    }
}

fn domain(name: &'static str) -> Eip712Domain {
    Eip712Domain::new(
        Some(Cow::Borrowed(name)),
        Some(Cow::Borrowed("1")),
        Some(U256::from(1u64)),
        None,
        None,
    )
}

/// An offer's payload as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OfferPayload {
    pub version: u64,
    pub resource_url: String,
    pub scheme: String,
    /// CAIP-2.
    pub network: String,
    pub asset: String,
    pub pay_to: String,
    /// In the asset's units.
    pub amount: String,
    /// Unix seconds.
    pub valid_until: u64,
}

/// A signed offer (`format: "eip712"`), for the `accepts` entry at `acceptIndex`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignedOffer {
    pub format: String,
    pub accept_index: usize,
    pub payload: OfferPayload,
    pub signature: String,
}

/// The offers of a `402`'s `accepts` (resource `resource_url`), each valid until
/// `valid_until`, signed with `key`: the `extensions["offer-receipt"]` declaration.
pub fn signed_offers(
    key: &PrivateKeySigner,
    resource_url: &str,
    accepts: &[crate::v2::PaymentRequirementsV2],
    valid_until: u64,
) -> serde_json::Value {
    let offers: Vec<SignedOffer> = accepts
        .iter()
        .enumerate()
        .filter_map(|(i, a)| {
            let payload = OfferPayload {
                version: VERSION,
                resource_url: resource_url.to_string(),
                scheme: a.scheme.clone(),
                network: a.network.clone(),
                asset: a.asset.clone(),
                pay_to: a.pay_to.clone(),
                amount: a.amount.clone(),
                valid_until,
            };
            let digest = payload.typed().eip712_signing_hash(&domain("x402 offer"));
            Some(SignedOffer {
                format: "eip712".into(),
                accept_index: i,
                signature: sign_digest(key, digest)?,
                payload,
            })
        })
        .collect();
    serde_json::json!({ "info": { "offers": offers } })
}

impl OfferPayload {
    fn typed(&self) -> Offer {
        Offer {
            version: U256::from(self.version),
            resourceUrl: self.resource_url.clone(),
            scheme: self.scheme.clone(),
            network: self.network.clone(),
            asset: self.asset.clone(),
            payTo: self.pay_to.clone(),
            amount: self.amount.clone(),
            validUntil: U256::from(self.valid_until),
        }
    }
}

/// A receipt's payload as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptPayload {
    pub version: u64,
    /// CAIP-2.
    pub network: String,
    pub resource_url: String,
    pub payer: String,
    /// Unix seconds.
    pub issued_at: u64,
    /// The settlement's transaction hash (empty when there is none).
    pub transaction: String,
}

/// A signed receipt (`format: "eip712"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedReceipt {
    pub format: String,
    pub payload: ReceiptPayload,
    /// 65 bytes, `0x`-hex (r, s, v).
    pub signature: String,
}

impl ReceiptPayload {
    fn typed(&self) -> Receipt {
        Receipt {
            version: U256::from(self.version),
            network: self.network.clone(),
            resourceUrl: self.resource_url.clone(),
            payer: self.payer.clone(),
            issuedAt: U256::from(self.issued_at),
            transaction: self.transaction.clone(),
        }
    }

    /// Signs it with `key` (deterministic: the same payload signs to the same receipt).
    pub fn sign(self, key: &PrivateKeySigner) -> Option<SignedReceipt> {
        let digest = self.typed().eip712_signing_hash(&domain("x402 receipt"));
        Some(SignedReceipt {
            format: "eip712".into(),
            signature: sign_digest(key, digest)?,
            payload: self,
        })
    }
}

/// `key`'s signature of `digest` (hex, 65 bytes, `v` 27 or 28), made with libsecp256k1: RFC 6979
/// and low `s` as alloy's own signer makes it (the same bytes), in half its time.
fn sign_digest(key: &PrivateKeySigner, digest: B256) -> Option<String> {
    let secret = secp256k1::SecretKey::from_byte_array(key.credential().to_bytes().into()).ok()?;
    let signed = secp256k1::SECP256K1
        .sign_ecdsa_recoverable(secp256k1::Message::from_digest(digest.0), &secret);
    let (id, rs) = signed.serialize_compact();
    let mut bytes = [0u8; 65];
    bytes[..64].copy_from_slice(&rs);
    bytes[64] = 27 + i32::from(id) as u8;
    Some(format!("0x{}", alloy_primitives::hex::encode(bytes)))
}

impl SignedReceipt {
    /// The receipt as the settlement response's `extensions["offer-receipt"]` carries it.
    pub fn extension(&self) -> serde_json::Value {
        serde_json::json!({ EXTENSION: { "info": { "receipt": self } } })
    }

    /// Who signed it (recovered from the signature over the payload).
    pub fn signer(&self) -> Option<Address> {
        let raw = alloy_primitives::hex::decode(self.signature.trim_start_matches("0x")).ok()?;
        let sig = Signature::try_from(raw.as_slice()).ok()?;
        let digest = self
            .payload
            .typed()
            .eip712_signing_hash(&domain("x402 receipt"));
        sig.recover_address_from_prehash(&digest).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload() -> ReceiptPayload {
        ReceiptPayload {
            version: VERSION,
            network: "eip155:84532".into(),
            resource_url: "https://pay.example.com/gateway/acme/x".into(),
            payer: "0x0000000000000000000000000000000000000001".into(),
            issued_at: 1_800_000_000,
            transaction: "0xab".into(),
        }
    }

    #[test]
    fn a_receipt_recovers_to_its_signer_and_a_changed_one_does_not() {
        let key = PrivateKeySigner::random();
        let signed = payload().sign(&key).unwrap();
        assert_eq!(signed.signer(), Some(key.address()));
        assert_eq!(payload().sign(&key), Some(signed.clone()), "deterministic");
        // The same bytes as alloy's own (pure-Rust) signer makes.
        let digest = signed
            .payload
            .typed()
            .eip712_signing_hash(&domain("x402 receipt"));
        let theirs = alloy_signer::SignerSync::sign_hash_sync(&key, &digest).unwrap();
        assert_eq!(
            signed.signature,
            format!("0x{}", alloy_primitives::hex::encode(theirs.as_bytes()))
        );
        let mut forged = signed.clone();
        forged.payload.payer = "0x0000000000000000000000000000000000000002".into();
        assert_ne!(forged.signer(), Some(key.address()));
        let v = signed.extension();
        assert_eq!(v[EXTENSION]["info"]["receipt"]["format"], "eip712");
        assert_eq!(
            v[EXTENSION]["info"]["receipt"]["payload"]["resourceUrl"],
            signed.payload.resource_url
        );
    }
}
