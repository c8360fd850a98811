//! Local verification at the edge, before anything is reserved or settled: the payment must match
//! the requirement regenerated for the route, pay the right wallet the exact amount in its time
//! window, and carry an EIP-712 signature that recovers to the payer (libsecp256k1).

use super::payment::{PaymentPayload, SignedAuthorization};
use crate::requirements::PaymentRequirements;
pub use crate::signature::{check_eoa_signature, payer_signed, SignatureError, Signed};
use alloy_primitives::{Address, U256};
use alloy_sol_types::{sol, Eip712Domain, SolStruct};
use std::borrow::Cow;

sol! {
    /// EIP-3009 `TransferWithAuthorization`, the struct a payer signs.
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }
}

/// Facilitators require at least this many seconds of validity left.
pub const MIN_VALIDITY_SECONDS: u64 = 6;

/// Why a well-formed payment is not acceptable (`402` with the challenge and this reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("unsupported scheme")]
    UnsupportedScheme,
    #[error("payment is for another network")]
    NetworkMismatch,
    #[error("accepted requirements do not match this route's")]
    RequirementsMismatch,
    #[error("authorization pays another wallet")]
    WrongPayee,
    #[error("authorization value is not the route's price")]
    WrongAmount,
    #[error("authorization is not valid yet")]
    NotYetValid,
    #[error("authorization expires too soon or has expired")]
    Expired,
    #[error("signature does not recover to the payer")]
    InvalidSignature,
    #[error("payment nonce was already used")]
    NonceReplay,
    #[error("payer has insufficient funds")]
    InsufficientFunds,
    #[error("settlement was rejected")]
    SettlementFailed,
    #[error("the Permit2 authorization is for another spender")]
    Permit2InvalidSpender,
    #[error("the Permit2 witness pays another wallet")]
    Permit2RecipientMismatch,
    #[error("the Permit2 amount is not the route's price")]
    Permit2AmountMismatch,
    #[error("the Permit2 authorization is for another token")]
    Permit2TokenMismatch,
    #[error("the Permit2 deadline has passed or is too close")]
    Permit2DeadlineExpired,
    #[error("the Permit2 authorization is not valid yet")]
    Permit2NotYetValid,
    #[error("the Permit2 signature does not recover to the payer")]
    Permit2InvalidSignature,
    #[error("the payer has not approved Permit2 for the token")]
    Permit2AllowanceRequired,
    #[error("the upto authorization names another facilitator")]
    UptoFacilitatorMismatch,
    #[error("the payload is not the scheme's")]
    InvalidPayload,
    #[error("the payment's deadlines are out of order or outside this server's terms")]
    DeadlineOrdering,
    #[error("the authorization is for another token collector")]
    InvalidCollector,
    #[error("the authorization's nonce is not the hash of the payment's terms")]
    NonceMismatch,
    #[error("the EIP-2612 permit is not in the extension's format")]
    Eip2612Format,
    #[error("the EIP-2612 permit is another owner's")]
    Eip2612FromMismatch,
    #[error("the EIP-2612 permit is for another token")]
    Eip2612AssetMismatch,
    #[error("the EIP-2612 permit's spender is not Permit2")]
    Eip2612SpenderNotPermit2,
    #[error("the EIP-2612 permit's deadline has passed or is too close")]
    Eip2612DeadlineExpired,
}

impl Rejection {
    /// Every rejection, for reading reason words back.
    pub const ALL: [Self; 29] = [
        Self::UnsupportedScheme,
        Self::NetworkMismatch,
        Self::RequirementsMismatch,
        Self::WrongPayee,
        Self::WrongAmount,
        Self::NotYetValid,
        Self::Expired,
        Self::InvalidSignature,
        Self::NonceReplay,
        Self::InsufficientFunds,
        Self::SettlementFailed,
        Self::Permit2InvalidSpender,
        Self::Permit2RecipientMismatch,
        Self::Permit2AmountMismatch,
        Self::Permit2TokenMismatch,
        Self::Permit2DeadlineExpired,
        Self::Permit2NotYetValid,
        Self::Permit2InvalidSignature,
        Self::Permit2AllowanceRequired,
        Self::UptoFacilitatorMismatch,
        Self::InvalidPayload,
        Self::DeadlineOrdering,
        Self::InvalidCollector,
        Self::NonceMismatch,
        Self::Eip2612Format,
        Self::Eip2612FromMismatch,
        Self::Eip2612AssetMismatch,
        Self::Eip2612SpenderNotPermit2,
        Self::Eip2612DeadlineExpired,
    ];

    /// The rejection whose [`Self::reason`] is exactly `word` (the inverse of the wire
    /// reasons); any other word a facilitator sends is a failed settlement.
    pub fn from_reason(word: &str) -> Self {
        Self::ALL
            .into_iter()
            .find(|r| r.reason() == word)
            .unwrap_or(Self::SettlementFailed)
    }

    /// The x402 `invalidReason` / `errorReason` word for this rejection.
    pub const fn reason(self) -> &'static str {
        match self {
            Self::UnsupportedScheme => "unsupported_scheme",
            Self::NetworkMismatch => "invalid_network",
            Self::RequirementsMismatch => "invalid_payment_requirements",
            Self::WrongPayee => "invalid_exact_evm_payload_recipient_mismatch",
            Self::WrongAmount => "invalid_exact_evm_payload_authorization_value",
            Self::NotYetValid => "invalid_exact_evm_payload_authorization_valid_after",
            Self::Expired => "invalid_exact_evm_payload_authorization_valid_before",
            Self::InvalidSignature => "invalid_exact_evm_payload_signature",
            Self::NonceReplay => "nonce_already_used",
            Self::InsufficientFunds => "insufficient_funds",
            Self::SettlementFailed => "settlement_failed",
            Self::Permit2InvalidSpender => "invalid_permit2_spender",
            Self::Permit2RecipientMismatch => "invalid_permit2_recipient_mismatch",
            Self::Permit2AmountMismatch => "permit2_amount_mismatch",
            Self::Permit2TokenMismatch => "permit2_token_mismatch",
            Self::Permit2DeadlineExpired => "permit2_deadline_expired",
            Self::Permit2NotYetValid => "permit2_not_yet_valid",
            Self::Permit2InvalidSignature => "invalid_permit2_signature",
            Self::Permit2AllowanceRequired => "permit2_allowance_required",
            Self::UptoFacilitatorMismatch => "upto_facilitator_mismatch",
            Self::InvalidPayload => "invalid_payload_format",
            Self::DeadlineOrdering => "invalid_deadline_ordering",
            Self::InvalidCollector => "invalid_auth_capture_collector",
            Self::NonceMismatch => "invalid_auth_capture_nonce",
            Self::Eip2612Format => "invalid_eip2612_extension_format",
            Self::Eip2612FromMismatch => "eip2612_from_mismatch",
            Self::Eip2612AssetMismatch => "eip2612_asset_mismatch",
            Self::Eip2612SpenderNotPermit2 => "eip2612_spender_not_permit2",
            Self::Eip2612DeadlineExpired => "eip2612_deadline_expired",
        }
    }

    /// Well signed, but too close to its expiry to settle now (either transfer method).
    pub const fn is_expiry(self) -> bool {
        matches!(self, Self::Expired | Self::Permit2DeadlineExpired)
    }
}

/// The EIP-712 domain of the requirement's token.
pub fn token_domain(req: &PaymentRequirements) -> Eip712Domain {
    Eip712Domain::new(
        Some(Cow::Owned(req.network.config.eip712_name.clone())),
        Some(Cow::Owned(req.network.config.eip712_version.clone())),
        Some(U256::from(req.network.config.chain_id)),
        Some(req.network.config.asset),
        None,
    )
}

/// The EIP-712 digest the payer signed.
pub fn signing_hash(auth: &SignedAuthorization, domain: &Eip712Domain) -> alloy_primitives::B256 {
    TransferWithAuthorization {
        from: auth.from,
        to: auth.to,
        value: auth.value,
        validAfter: auth.valid_after,
        validBefore: auth.valid_before,
        nonce: auth.nonce,
    }
    .eip712_signing_hash(domain)
}

/// Checks the payer's signature: an EOA's (65 bytes, v in {27, 28} or {0, 1}, low s) here,
/// anything else left to the payer's smart wallet ([`Signed::ByWallet`]).
pub fn check_signature(auth: &SignedAuthorization, domain: &Eip712Domain) -> Signed {
    payer_signed(signing_hash(auth, domain), &auth.signature, auth.from)
}

/// Verifies `payment` against the route's `req` at time `now` (unix seconds); who vouches for
/// its signature is the answer ([`Signed::ByWallet`]: the chain must still be asked).
pub fn verify(
    payment: &PaymentPayload,
    auth: &SignedAuthorization,
    req: &PaymentRequirements,
    now: u64,
) -> Result<Signed, Rejection> {
    verify_scheme(payment, auth, req, now, None)
}

/// [`verify`] for the scheme the payment should be in: `exact` (`upto: None`), or `upto`
/// settled by the facilitator at `upto` (whose Permit2 witness must name it).
pub fn verify_scheme(
    payment: &PaymentPayload,
    auth: &SignedAuthorization,
    req: &PaymentRequirements,
    now: u64,
    upto: Option<Address>,
) -> Result<Signed, Rejection> {
    let permit2 = payment.permit2();
    // A requirement's transfer method decides the payload's (`upto` is always Permit2).
    if permit2.is_some() != (req.permit2() || upto.is_some()) {
        return Err(Rejection::UnsupportedScheme);
    }
    match payment {
        PaymentPayload::V1(p) => {
            if p.scheme != "exact" || permit2.is_some() {
                return Err(Rejection::UnsupportedScheme);
            }
            if p.network != req.network.v1_name && p.network != req.network.caip2 {
                return Err(Rejection::NetworkMismatch);
            }
        }
        PaymentPayload::V2(p) => {
            let a = &p.accepted;
            let want = match upto {
                Some(f) => req.to_v2_upto(f),
                None => req.to_v2(),
            };
            if a.scheme != want.scheme {
                return Err(Rejection::UnsupportedScheme);
            }
            if a.network != want.network {
                return Err(Rejection::NetworkMismatch);
            }
            let same = a.amount == want.amount
                && a.asset.eq_ignore_ascii_case(&want.asset)
                && a.pay_to.eq_ignore_ascii_case(&want.pay_to)
                && a.max_timeout_seconds == want.max_timeout_seconds
                && a.extra.same_terms(&want.extra);
            if !same {
                return Err(Rejection::RequirementsMismatch);
            }
        }
    }
    match permit2 {
        None => verify_eip3009(auth, req, now),
        Some(p) => verify_permit2(auth, &p, req, now, upto),
    }
}

fn verify_eip3009(
    auth: &SignedAuthorization,
    req: &PaymentRequirements,
    now: u64,
) -> Result<Signed, Rejection> {
    if auth.to != req.pay_to {
        return Err(Rejection::WrongPayee);
    }
    if auth.value != req.token_amount() {
        return Err(Rejection::WrongAmount);
    }
    if auth.valid_after > U256::from(now) {
        return Err(Rejection::NotYetValid);
    }
    // The signature before the expiry, so `Expired` means "well signed, too late to settle":
    // a retry of a payment already taken may still be answered by its record.
    let signed = check_signature(auth, &token_domain(req));
    if auth.valid_before < U256::from(now.saturating_add(MIN_VALIDITY_SECONDS)) {
        return Err(too_late(
            signed,
            auth,
            Rejection::InvalidSignature,
            Rejection::Expired,
        ));
    }
    Ok(signed)
}

/// Why a payment past its time is refused: an EOA-length signature its payer's key did not
/// make is told so (no wallet is asked about a payment too late to settle); otherwise it is
/// expired, which a retry of a payment already taken may still be answered past.
fn too_late(
    signed: Signed,
    auth: &SignedAuthorization,
    forged: Rejection,
    expired: Rejection,
) -> Rejection {
    match signed {
        Signed::ByWallet(_) if auth.signature.len() <= 65 => forged,
        _ => expired,
    }
}

/// A Permit2 payment, checked as x402's facilitators check it: spender the scheme's proxy,
/// witness receiver the payee, the requirement's token and amount (the ceiling for `upto`),
/// its time window, for `upto` the witness's facilitator; then the Permit2 EIP-712 signature.
fn verify_permit2(
    auth: &SignedAuthorization,
    p: &crate::payment::Permit2Terms,
    req: &PaymentRequirements,
    now: u64,
    upto: Option<Address>,
) -> Result<Signed, Rejection> {
    use crate::permit2;
    let spender = match upto {
        Some(_) => permit2::UPTO_PROXY_ADDRESS,
        None => permit2::EXACT_PROXY_ADDRESS,
    };
    if p.spender != spender {
        return Err(Rejection::Permit2InvalidSpender);
    }
    if auth.to != req.pay_to {
        return Err(Rejection::Permit2RecipientMismatch);
    }
    if p.token != req.network.config.asset {
        return Err(Rejection::Permit2TokenMismatch);
    }
    if auth.value != req.token_amount() {
        return Err(Rejection::Permit2AmountMismatch);
    }
    if p.facilitator != upto {
        return Err(Rejection::UptoFacilitatorMismatch);
    }
    if auth.valid_after > U256::from(now) {
        return Err(Rejection::Permit2NotYetValid);
    }
    let digest = permit2::signing_hash(auth, p, req.network.config.chain_id);
    let signed = payer_signed(digest, &auth.signature, auth.from);
    if auth.valid_before < U256::from(now.saturating_add(MIN_VALIDITY_SECONDS)) {
        return Err(too_late(
            signed,
            auth,
            Rejection::Permit2InvalidSignature,
            Rejection::Permit2DeadlineExpired,
        ));
    }
    Ok(signed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::UsdcAmount;
    use crate::network::{builtin_networks, Networks};
    use alloy_primitives::Signature;
    use alloy_primitives::{address, b256, Bytes, B256};

    /// X402.md's vector: Base Sepolia domain.
    fn vector() -> (SignedAuthorization, PaymentRequirements) {
        let auth = SignedAuthorization {
            from: address!("70997970C51812dc3A010C7d01b50e0d17dc79C8"),
            to: address!("209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            value: U256::from(10_000),
            valid_after: U256::ZERO,
            valid_before: U256::from(1_900_000_000u64),
            nonce: B256::repeat_byte(0x11),
            signature: "0x4c906a47a947ae0d3352d162c153374ae5a94ef8f09a948307cff212aaf893707462a82325b84e3a6fe23cd64944aa1cfd6fbb0addc004e4b369708ab0da17581c"
                .parse()
                .unwrap(),
        };
        let req = PaymentRequirements {
            network: Networks::from_config(&builtin_networks())
                .resolve("base-sepolia")
                .unwrap()
                .clone(),
            amount: UsdcAmount(10_000),
            pay_to: auth.to,
            resource: "http://x/gateway/a/b".into(),
            description: String::new(),
            mime_type: String::new(),
            max_timeout_seconds: 60,
            token: Default::default(),
        };
        (auth, req)
    }

    fn v1_payload() -> PaymentPayload {
        crate::payment::empty_v1_payload()
    }

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn reason_words_read_back_exactly() {
        for r in Rejection::ALL {
            assert_eq!(Rejection::from_reason(r.reason()), r);
        }
        // Not a substring match: another word is a failed settlement.
        assert_eq!(
            Rejection::from_reason("nonce_already_used_somewhere"),
            Rejection::SettlementFailed
        );
        assert_eq!(Rejection::from_reason(""), Rejection::SettlementFailed);
    }

    #[test]
    fn x402_vector_digest_and_signature() {
        let (auth, req) = vector();
        assert_eq!(
            signing_hash(&auth, &token_domain(&req)),
            b256!("c72535830abf1dc4187193153665b256d688829ccda7ee169f8821f653253119")
        );
        assert_eq!(verify(&v1_payload(), &auth, &req, NOW), Ok(Signed::ByKey));
    }

    #[test]
    fn v_of_0_or_1_is_accepted_like_27_or_28() {
        let (mut auth, req) = vector();
        let mut raw = auth.signature.to_vec();
        raw[64] -= 27;
        auth.signature = Bytes::from(raw);
        assert_eq!(verify(&v1_payload(), &auth, &req, NOW), Ok(Signed::ByKey));
    }

    #[test]
    fn each_rejection_reason() {
        let (auth, req) = vector();
        let p = v1_payload();
        let check = |a: &SignedAuthorization, r: &PaymentRequirements, now| verify(&p, a, r, now);

        let mut a = auth.clone();
        a.to = address!("0000000000000000000000000000000000000001");
        assert_eq!(check(&a, &req, NOW), Err(Rejection::WrongPayee));
        let mut r = req.clone();
        r.amount = UsdcAmount(10_001);
        assert_eq!(check(&auth, &r, NOW), Err(Rejection::WrongAmount));
        assert_eq!(
            check(&auth, &req, 1_900_000_000 - 5),
            Err(Rejection::Expired)
        );
        assert_eq!(check(&auth, &req, 1_900_000_000 - 6), Ok(Signed::ByKey));
        let mut a = auth.clone();
        a.valid_after = U256::from(NOW + 100);
        assert_eq!(check(&a, &req, NOW), Err(Rejection::NotYetValid));
        // Any change to a signed field breaks the signature: the payer's key did not sign it,
        // so only a smart wallet at the payer's address could accept it (the chain is asked).
        let by_wallet = |r: Result<Signed, Rejection>| matches!(r, Ok(Signed::ByWallet(_)));
        let mut a = auth.clone();
        a.nonce = B256::repeat_byte(0x12);
        assert!(by_wallet(check(&a, &req, NOW)));
        // The wrong EIP-712 name (Base mainnet's) gives a digest the payer never signed.
        let mut r = req.clone();
        r.network.config.eip712_name = "USD Coin".into();
        assert!(by_wallet(check(&auth, &r, NOW)));
        // Truncated signature; smart-wallet length defers to the chain.
        let mut a = auth.clone();
        a.signature = Bytes::from(vec![1u8; 64]);
        assert!(by_wallet(check(&a, &req, NOW)));
        a.signature = Bytes::from(vec![1u8; 200]);
        assert!(by_wallet(check(&a, &req, NOW)));
        // High-s twin of a valid signature is refused.
        let sig = Signature::from_raw(&auth.signature).unwrap();
        let n = U256::from_str_radix(
            "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141",
            16,
        )
        .unwrap();
        let high = Signature::new(sig.r(), n - sig.s(), !sig.v());
        let mut a = auth.clone();
        a.signature = Bytes::from(high.as_bytes().to_vec());
        assert!(by_wallet(check(&a, &req, NOW)));
        // Wrong network and scheme in the v1 envelope.
        let mut p2 = v1_payload();
        if let PaymentPayload::V1(x) = &mut p2 {
            x.network = "base".into();
        }
        assert_eq!(
            verify(&p2, &auth, &req, NOW),
            Err(Rejection::NetworkMismatch)
        );
        if let PaymentPayload::V1(x) = &mut p2 {
            x.network = "eip155:84532".into();
            x.scheme = "upto".into();
        }
        assert_eq!(
            verify(&p2, &auth, &req, NOW),
            Err(Rejection::UnsupportedScheme)
        );
    }

    #[test]
    fn v2_accepted_must_match_field_by_field() {
        use crate::payment::*;
        let (auth, req) = vector();
        let mk = |accepted| {
            PaymentPayload::V2(Box::new(PaymentPayloadV2 {
                x402_version: 2,
                resource: None,
                accepted,
                payload: match v1_payload() {
                    PaymentPayload::V1(p) => p.payload,
                    PaymentPayload::V2(p) => p.payload,
                },
                extensions: None,
            }))
        };
        assert_eq!(
            verify(&mk(req.to_v2()), &auth, &req, NOW),
            Ok(Signed::ByKey)
        );
        let mut lower = req.to_v2();
        lower.pay_to = lower.pay_to.to_lowercase();
        assert_eq!(verify(&mk(lower), &auth, &req, NOW), Ok(Signed::ByKey));
        let mut a = req.to_v2();
        a.amount = "1".into();
        assert_eq!(
            verify(&mk(a), &auth, &req, NOW),
            Err(Rejection::RequirementsMismatch)
        );
        let mut a = req.to_v2();
        a.max_timeout_seconds = 5;
        assert_eq!(
            verify(&mk(a), &auth, &req, NOW),
            Err(Rejection::RequirementsMismatch)
        );
        let mut a = req.to_v2();
        a.network = "base-sepolia".into();
        assert_eq!(
            verify(&mk(a), &auth, &req, NOW),
            Err(Rejection::NetworkMismatch)
        );
    }
}
