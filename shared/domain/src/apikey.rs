//! API keys: `pgk_<keyId>_<secret>`. The key id finds the record; the secret's SHA-256 is
//! compared in constant time. The plain key exists only in the response that created it.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

const PREFIX: &str = "pgk_";

/// A freshly minted key: the record id, the plain key (shown once), and the secret's hash.
pub struct NewKey {
    pub key_id: String,
    pub plain: String,
    pub secret_sha256: String,
}

/// Mints a new key with 256 bits of secret.
pub fn mint() -> NewKey {
    let id: [u8; 8] = rand::random();
    let secret: [u8; 32] = rand::random();
    let key_id = hex::encode(id);
    let secret = hex::encode(secret);
    NewKey {
        plain: format!("{PREFIX}{key_id}_{secret}"),
        secret_sha256: sha256_hex(secret.as_bytes()),
        key_id,
    }
}

/// Splits a presented key into `(key_id, secret)`, or `None` if it is not of our form.
pub fn parse(presented: &str) -> Option<(&str, &str)> {
    let rest = presented.strip_prefix(PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    if id.len() != 16 || secret.is_empty() || secret.len() > 128 {
        return None;
    }
    Some((id, secret))
}

/// Whether `secret` hashes to `stored_sha256_hex`, compared in constant time.
pub fn secret_matches(secret: &str, stored_sha256_hex: &str) -> bool {
    let presented = Sha256::digest(secret.as_bytes());
    let Ok(stored) = hex::decode(stored_sha256_hex) else {
        return false;
    };
    presented[..].ct_eq(stored.as_slice()).into()
}

/// Constant-time equality of two tokens of any length (both are hashed first).
pub fn tokens_equal(a: &str, b: &str) -> bool {
    Sha256::digest(a.as_bytes())[..]
        .ct_eq(&Sha256::digest(b.as_bytes())[..])
        .into()
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_key_verifies_and_others_do_not() {
        let k = mint();
        let (id, secret) = parse(&k.plain).unwrap();
        assert_eq!(id, k.key_id);
        assert!(secret_matches(secret, &k.secret_sha256));
        assert!(!secret_matches("nope", &k.secret_sha256));
        assert!(!k.plain.contains(&k.secret_sha256));
        assert!(parse("pgk_short_x").is_none());
        assert!(parse("Bearer x").is_none());
        assert!(parse("").is_none());
    }

    #[test]
    fn token_comparison() {
        assert!(tokens_equal("dev-admin-token", "dev-admin-token"));
        assert!(!tokens_equal("dev-admin-token", "dev-admin-tokem"));
        assert!(!tokens_equal("a", ""));
    }
}
