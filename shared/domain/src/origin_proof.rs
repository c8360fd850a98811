//! Proof of payment for the origin (issue 18): every paid request paygate forwards carries
//! `X-Paygate-Payment-Id` and `X-Paygate-Signature: t=<unix>,v1=<hex>`, an HMAC-SHA256 under
//! the organisation's origin secret over
//!
//! ```text
//! <t>\n<METHOD>\n<path and query as the origin receives them>\n<payment id>
//! ```
//!
//! Nothing secret is stored: an organisation's secret is derived from the master key (from the
//! environment) and the organisation's secret generation, so every node computes the same one
//! and rotating only bumps the generation. For a grace period after a rotation the header
//! carries a second `v1=` under the previous secret, so an origin can switch without a gap.
//! The secret the origin uses is the whole `pgos_...` string, as the HMAC key.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "x-paygate-signature";
/// The header carrying the payment id (the same on every forward of one payment).
pub const PAYMENT_ID_HEADER: &str = "x-paygate-payment-id";
/// Seconds a previous secret keeps signing next to the new one after a rotation.
pub const ROTATION_GRACE_SECONDS: u64 = 24 * 3600;

/// The key organisations' origin secrets are derived from. Never logged (`Debug` says only
/// that it is there).
#[derive(Clone)]
pub struct OriginProofKey(HmacSha256);

impl std::fmt::Debug for OriginProofKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OriginProofKey(..)")
    }
}

impl std::fmt::Debug for OriginSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OriginSigner(..)")
    }
}

impl OriginProofKey {
    /// Derived from the master key's bytes (domain-separated: it never signs anything itself).
    pub fn from_master_hex(hex_key: &str) -> Option<Self> {
        let raw = hex::decode(hex_key.trim().trim_start_matches("0x")).ok()?;
        if raw.len() != 32 {
            return None;
        }
        let mut mac = HmacSha256::new_from_slice(&raw).ok()?;
        mac.update(b"paygate/origin-proof/v1");
        let derived = mac.finalize().into_bytes();
        HmacSha256::new_from_slice(&derived).ok().map(Self)
    }

    /// The key from the master key's environment variable, if it is set and well formed.
    pub fn from_env(var: &str) -> Option<Self> {
        std::env::var(var)
            .ok()
            .and_then(|v| Self::from_master_hex(&v))
    }

    /// The origin secret of organisation `org_id` at `generation`.
    pub fn secret(&self, org_id: &str, generation: u32) -> String {
        let mut mac = self.0.clone();
        mac.update(org_id.as_bytes());
        mac.update(b"\0");
        mac.update(generation.to_string().as_bytes());
        format!("pgos_{}", hex::encode(mac.finalize().into_bytes()))
    }

    /// What signs an organisation's forwarded requests at `now` (unix seconds): its current
    /// secret, and the previous one while a rotation at `rotated_at` is younger than the grace.
    pub fn signer(
        &self,
        org_id: &str,
        generation: u32,
        rotated_at: Option<u64>,
        now: u64,
    ) -> OriginSigner {
        let previous = match rotated_at {
            Some(at) if generation > 0 && now < at.saturating_add(ROTATION_GRACE_SECONDS) => {
                Some((
                    keyed(&self.secret(org_id, generation - 1)),
                    at + ROTATION_GRACE_SECONDS,
                ))
            }
            _ => None,
        };
        OriginSigner {
            current: keyed(&self.secret(org_id, generation)),
            previous,
        }
    }
}

fn keyed(secret: &str) -> HmacSha256 {
    HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length")
}

/// Signs one organisation's forwarded requests.
#[derive(Clone)]
pub struct OriginSigner {
    current: HmacSha256,
    /// The previous secret and the unix second it stops signing.
    previous: Option<(HmacSha256, u64)>,
}

impl OriginSigner {
    /// The `X-Paygate-Signature` value for a request forwarded at `t`.
    pub fn header(&self, t: u64, method: &str, path_and_query: &str, payment_id: &str) -> String {
        let sign = |mac: &HmacSha256| {
            let mut mac = mac.clone();
            mac.update(&message(t, method, path_and_query, payment_id));
            hex::encode(mac.finalize().into_bytes())
        };
        let mut header = format!("t={t},v1={}", sign(&self.current));
        if let Some((mac, until)) = &self.previous {
            if t < *until {
                header.push_str(",v1=");
                header.push_str(&sign(mac));
            }
        }
        header
    }
}

/// The signed bytes.
pub fn message(t: u64, method: &str, path_and_query: &str, payment_id: &str) -> Vec<u8> {
    format!("{t}\n{method}\n{path_and_query}\n{payment_id}").into_bytes()
}

/// Checks a signature header as an origin would (used by tests and `paygate` tooling): one of
/// its `v1=` values is the HMAC under `secret`, and `t` is within `tolerance` seconds of `now`.
pub fn verify(
    header: &str,
    secret: &str,
    method: &str,
    path_and_query: &str,
    payment_id: &str,
    now: u64,
    tolerance: u64,
) -> bool {
    let mut t = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<u64>().ok(),
            Some(("v1", v)) => signatures.extend(hex::decode(v).ok()),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    if t.abs_diff(now) > tolerance {
        return false;
    }
    signatures.iter().any(|sig| {
        let mut mac = keyed(secret);
        mac.update(&message(t, method, path_and_query, payment_id));
        mac.verify_slice(sig).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MK: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn secrets_differ_by_org_generation_and_master_key() {
        let k = OriginProofKey::from_master_hex(MK).unwrap();
        let s = k.secret("org_a", 0);
        assert!(s.starts_with("pgos_") && s.len() == 5 + 64, "{s}");
        assert_eq!(s, k.secret("org_a", 0));
        assert_ne!(s, k.secret("org_b", 0));
        assert_ne!(s, k.secret("org_a", 1));
        let other = OriginProofKey::from_master_hex(&MK.replace("00", "ff")).unwrap();
        assert_ne!(s, other.secret("org_a", 0));
        assert!(OriginProofKey::from_master_hex("abcd").is_none());
    }

    #[test]
    fn an_origin_checks_what_was_signed_and_both_secrets_during_a_rotation() {
        let k = OriginProofKey::from_master_hex(MK).unwrap();
        let now = 1_800_000_000;
        let h = k
            .signer("org_a", 0, None, now)
            .header(now, "POST", "/v1/x?q=1", "pay_1");
        let s0 = k.secret("org_a", 0);
        assert!(verify(&h, &s0, "POST", "/v1/x?q=1", "pay_1", now + 5, 300));
        for (m, p, id) in [
            ("GET", "/v1/x?q=1", "pay_1"),
            ("POST", "/v1/x?q=2", "pay_1"),
            ("POST", "/v1/x?q=1", "pay_2"),
        ] {
            assert!(!verify(&h, &s0, m, p, id, now, 300));
        }
        assert!(!verify(
            &h,
            &s0,
            "POST",
            "/v1/x?q=1",
            "pay_1",
            now + 301,
            300
        ));
        assert!(!verify(
            &h,
            &k.secret("org_a", 1),
            "POST",
            "/v1/x?q=1",
            "pay_1",
            now,
            300
        ));

        // Rotated a minute ago: both secrets verify; after the grace only the new one signs.
        let rotated = k.signer("org_a", 1, Some(now - 60), now);
        let h = rotated.header(now, "GET", "/", "pay_3");
        assert_eq!(h.matches("v1=").count(), 2);
        assert!(verify(&h, &s0, "GET", "/", "pay_3", now, 300));
        assert!(verify(
            &h,
            &k.secret("org_a", 1),
            "GET",
            "/",
            "pay_3",
            now,
            300
        ));
        let later = now + ROTATION_GRACE_SECONDS;
        let h = k
            .signer("org_a", 1, Some(now - 60), later)
            .header(later, "GET", "/", "pay_3");
        assert_eq!(h.matches("v1=").count(), 1);
        assert!(!verify(&h, &s0, "GET", "/", "pay_3", later, 300));
    }
}
