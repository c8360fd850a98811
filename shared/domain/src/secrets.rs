//! Secrets kept at rest: sealed with AES-256-GCM under a master key that only ever comes from
//! the environment (`orgs.master_key_env`, 32 bytes as 64 hex characters). Each secret has its
//! own random nonce and is bound to its owner (the org id as associated data), so a sealed value
//! copied to another record does not open. Plaintext never leaves this module except to sign.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use serde::{Deserialize, Serialize};

/// A sealed secret as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedSecret {
    /// Base64 of the 12-byte nonce.
    pub nonce: String,
    /// Base64 of ciphertext and tag.
    pub ciphertext: String,
}

/// The master key. Not `Debug`, never logged.
pub struct MasterKey(Aes256Gcm);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("the master key must be 64 hex characters (32 bytes)")]
    BadMasterKey,
    #[error("the sealed secret cannot be opened with this master key")]
    CannotOpen,
}

impl MasterKey {
    pub fn from_hex(hex_key: &str) -> Result<Self, SecretError> {
        let raw = hex::decode(hex_key.trim().trim_start_matches("0x"))
            .map_err(|_| SecretError::BadMasterKey)?;
        if raw.len() != 32 {
            return Err(SecretError::BadMasterKey);
        }
        Aes256Gcm::new_from_slice(&raw)
            .map(Self)
            .map_err(|_| SecretError::BadMasterKey)
    }

    /// The key from the environment variable `var`, if set.
    pub fn from_env(var: &str) -> Option<Result<Self, SecretError>> {
        std::env::var(var)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| Self::from_hex(&v))
    }

    pub fn seal(&self, plaintext: &[u8], owner: &str) -> SealedSecret {
        let nonce: [u8; 12] = rand::random();
        let ct = self
            .0
            .encrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: plaintext,
                    aad: owner.as_bytes(),
                },
            )
            .unwrap_or_default();
        let b64 = base64::engine::general_purpose::STANDARD;
        SealedSecret {
            nonce: b64.encode(nonce),
            ciphertext: b64.encode(ct),
        }
    }

    pub fn open(&self, sealed: &SealedSecret, owner: &str) -> Result<Vec<u8>, SecretError> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let nonce: [u8; 12] = b64
            .decode(&sealed.nonce)
            .ok()
            .and_then(|n| n.try_into().ok())
            .ok_or(SecretError::CannotOpen)?;
        let ct = b64
            .decode(&sealed.ciphertext)
            .map_err(|_| SecretError::CannotOpen)?;
        self.0
            .decrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: &ct,
                    aad: owner.as_bytes(),
                },
            )
            .map_err(|_| SecretError::CannotOpen)
    }
}

/// The address of a secp256k1 private key given as hex, if it is one.
/// The receiver authorizer's private key derived from the master key (hex): the key that signs
/// payment channels' claims and cooperative refunds, domain-separated from every other use of
/// the master key. `None` for a malformed master key.
pub fn receiver_authorizer_from_master(
    hex_key: &str,
) -> Option<alloy_signer_local::PrivateKeySigner> {
    derived_signer(hex_key, b"paygate/receiver-authorizer/v1")
}

/// An organisation's payout wallet: a key derived from the master key (hex) and the
/// organisation's id, domain-separated from every other use of the master key, never stored.
/// `None` for a malformed master key.
pub fn payout_wallet_from_master(
    hex_key: &str,
    org_id: &str,
) -> Option<alloy_signer_local::PrivateKeySigner> {
    derived_signer(
        hex_key,
        format!("paygate/payout-wallet/v1/{org_id}").as_bytes(),
    )
}

/// The secp256k1 key HMAC-SHA256(master key, `label`).
fn derived_signer(hex_key: &str, label: &[u8]) -> Option<alloy_signer_local::PrivateKeySigner> {
    use hmac::{Hmac, Mac};
    let raw = hex::decode(hex_key.trim().trim_start_matches("0x")).ok()?;
    if raw.len() != 32 {
        return None;
    }
    let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(&raw).ok()?;
    mac.update(label);
    let derived = mac.finalize().into_bytes();
    alloy_signer_local::PrivateKeySigner::from_slice(&derived).ok()
}

/// The environment variable that may hold the secret MPP challenges are bound with.
pub const MPP_SECRET_ENV: &str = "PAYGATE_MPP_SECRET";

/// The secret this deployment binds its MPP challenges with (their `id`, an HMAC over the
/// challenge): the one in [`MPP_SECRET_ENV`] when set, else derived from the master key in
/// `master_env`; `None` when neither is (each process then draws its own, so a challenge from
/// one node is paid at that node only).
pub fn mpp_challenge_secret(master_env: &str) -> Option<Vec<u8>> {
    use hmac::{Hmac, Mac};
    if let Some(given) = std::env::var(MPP_SECRET_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        return Some(given.trim().as_bytes().to_vec());
    }
    let master = std::env::var(master_env).ok()?;
    let raw = hex::decode(master.trim().trim_start_matches("0x")).ok()?;
    let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(&raw).ok()?;
    mac.update(b"paygate/mpp-challenges/v1");
    Some(mac.finalize().into_bytes().to_vec())
}

/// The environment variable that may hold the key signing offers and receipts.
pub const RECEIPT_KEY_ENV: &str = "PAYGATE_RECEIPT_KEY";

/// The key this deployment signs receipts with (x402 `offer-and-receipt`): the key in
/// [`RECEIPT_KEY_ENV`] when set, else derived from the master key in `master_env`; `None` when
/// neither is (receipts are then not signed).
pub fn receipt_signer(master_env: &str) -> Option<alloy_signer_local::PrivateKeySigner> {
    key_or_derived(RECEIPT_KEY_ENV, master_env, b"paygate/receipts/v1")
}

/// The key in `key_env` when set, else the key derived from the master key in `master_env`
/// under `label`.
fn key_or_derived(
    key_env: &str,
    master_env: &str,
    label: &[u8],
) -> Option<alloy_signer_local::PrivateKeySigner> {
    let given = (!key_env.is_empty())
        .then(|| std::env::var(key_env).ok())
        .flatten()
        .filter(|v| !v.trim().is_empty());
    match given {
        Some(k) => k.trim().parse().ok(),
        None => std::env::var(master_env)
            .ok()
            .and_then(|m| derived_signer(&m, label)),
    }
}

/// The receiver authorizer: the key in `key_env` when set, else derived from the master key in
/// `master_env`; `None` when neither is (payment channels are then not offered).
pub fn receiver_authorizer(
    key_env: &str,
    master_env: &str,
) -> Option<alloy_signer_local::PrivateKeySigner> {
    key_or_derived(key_env, master_env, b"paygate/receiver-authorizer/v1")
}

pub fn address_of_key(key_hex: &str) -> Option<alloy_primitives::Address> {
    key_hex
        .trim()
        .parse::<alloy_signer_local::PrivateKeySigner>()
        .ok()
        .map(|s| s.address())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MK: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn payout_wallets_are_per_organisation_stable_and_apart_from_the_authorizer() {
        let a = payout_wallet_from_master(MK, "org_a").unwrap().address();
        assert_eq!(payout_wallet_from_master(MK, "org_a").unwrap().address(), a);
        assert_ne!(payout_wallet_from_master(MK, "org_b").unwrap().address(), a);
        assert_ne!(receiver_authorizer_from_master(MK).unwrap().address(), a);
        let other = "1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100";
        assert_ne!(
            payout_wallet_from_master(other, "org_a").unwrap().address(),
            a
        );
        assert!(payout_wallet_from_master("00", "org_a").is_none());
    }

    #[test]
    fn sealed_secrets_open_only_for_their_owner_and_key() {
        let mk = MasterKey::from_hex(MK).unwrap();
        let s = mk.seal(b"the payer key", "org_a");
        assert!(!s.ciphertext.contains("payer"));
        assert_eq!(mk.open(&s, "org_a").unwrap(), b"the payer key");
        assert_eq!(mk.open(&s, "org_b"), Err(SecretError::CannotOpen));
        let other = MasterKey::from_hex(&MK.replace("00", "ff")).unwrap();
        assert_eq!(other.open(&s, "org_a"), Err(SecretError::CannotOpen));
        assert_ne!(mk.seal(b"x", "o").nonce, mk.seal(b"x", "o").nonce);
        assert!(MasterKey::from_hex("abcd").is_err());
    }

    #[test]
    fn key_addresses() {
        let a =
            address_of_key("0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a");
        assert_eq!(
            a.unwrap().to_checksum(None),
            "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
        );
        assert!(address_of_key("0x1234").is_none());
    }
}
