//! The fuzz targets' bodies, one function each: libFuzzer drives them under `make fuzz`
//! (`fuzz_targets/*.rs`), and `make test` runs them on the inputs `fuzz/regressions/` keeps and on
//! seeded mutations of known-good inputs (`tests/e2e/fuzz_replay.rs`, which includes this file),
//! so a change that breaks a target's build or one of its properties fails the test suite too.
#![allow(dead_code)]

use alloy_primitives::address;
use paygate_domain::route_path::{lookup_key, normalize};
use paygate_payouts::cpn;
use paygate_payouts::money::{parse_amount, usdc_string};
use paygate_payouts::webhook::{parse_event, parse_secrets, verify};
use paygate_x402::batch::{ChannelFigures, ChannelOffer, ChannelPayloadWire, ChannelPayment};
use paygate_x402::gas_sponsoring::Eip2612Permit;
use paygate_x402::money::UsdcAmount;
use paygate_x402::payment::{PaymentPayload, ProtocolVersion};
use paygate_x402::signature::Counterfactual;
use paygate_x402::siwx::{Origin, SignIn};
use paygate_x402::verify::check_signature;
use std::sync::OnceLock;

/// The route and chain the `sign_in` target's proofs are checked against.
const URI: &str = "https://pay.example.com/gateway/acme/data";
const CHAIN: &str = "eip155:84532";

/// The decimal amount parsers: corridor amounts (`"100.5"`), route prices as strings and as
/// JSON numbers. Whatever parses must print back to the same base units.
pub fn amounts(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(a) = parse_amount(s) {
        assert_eq!(parse_amount(&usdc_string(a)), Ok(a));
    }
    if let Ok(a) = UsdcAmount::from_usd_str(s) {
        assert_eq!(UsdcAmount::from_usd_str(&a.to_decimal().to_string()), Ok(a));
    }
    if let Ok(n) = serde_json::from_str::<serde_json::Number>(s) {
        if let Ok(a) = UsdcAmount::from_usd_json(&n) {
            // Written as plain decimal text (never an exponent) that reads back the same.
            let written = a.to_usd_json();
            assert!(!written.get().contains(['e', 'E']), "{}", written.get());
            let back: serde_json::Number = serde_json::from_str(written.get()).unwrap();
            assert_eq!(UsdcAmount::from_usd_json(&back), Ok(a));
        }
    }
}

/// The batch-settlement payload (payment channels): JSON as a payment's `payload` carries it,
/// parsed, then every local check the gateway runs on it (route offer, voucher signature, the
/// deposit's authorization, the cumulative step) against fixed figures. None may panic.
pub fn channel_payload(data: &[u8]) {
    let Ok(wire) = serde_json::from_slice::<ChannelPayloadWire>(data) else {
        return;
    };
    let _ = serde_json::to_vec(&wire);
    for chain_id in [84532, 8453] {
        let Ok(p) = ChannelPayment::parse(&wire, chain_id) else {
            continue;
        };
        let offer = ChannelOffer {
            receiver: address!("209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            receiver_authorizer: address!("3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"),
            token: address!("036CbD53842c5426634e7929541eC2318f3dCF7e"),
            withdraw_delay: 900,
        };
        let _ = p.check_offer(&offer);
        let _ = p.check_voucher(chain_id);
        let domain = alloy_sol_types::eip712_domain! {
            name: "USDC",
            version: "2",
            chain_id: 84532,
            verifying_contract: address!("036CbD53842c5426634e7929541eC2318f3dCF7e"),
        };
        let _ = p.check_deposit(&domain, 1_800_000_000, 6);
        for figures in [
            ChannelFigures::default(),
            ChannelFigures {
                balance: u128::MAX,
                total_claimed: u128::MAX - 1,
                charged: u128::MAX,
                withdraw_due: Some(u64::MAX),
            },
        ] {
            let _ = p.check_step(&figures, u128::MAX, u64::MAX, u64::MAX);
            let _ = p.check_step(&figures, 1, 0, 60);
        }
    }
}

/// The payment header decoder (`X-PAYMENT` v1, `PAYMENT-SIGNATURE` v2), then what the proxy does
/// next with a decoded payload: extract the authorization and check its signature; for a
/// Permit2 payload (`exact` through Permit2, `upto`) its digest, the EIP-2612 permit it may
/// carry (`eip2612GasSponsoring`) and the proxy call settling it; a smart wallet's ERC-6492
/// wrapping of the signature.
pub fn payment_header(data: &[u8]) {
    let domain = alloy_sol_types::eip712_domain! {
        name: "USDC",
        version: "2",
        chain_id: 84532,
        verifying_contract: address!("036CbD53842c5426634e7929541eC2318f3dCF7e"),
    };
    for version in [ProtocolVersion::V1, ProtocolVersion::V2] {
        // As a header value (base64) and as the JSON a facilitator is sent.
        let decoded = [
            PaymentPayload::decode(data, version),
            PaymentPayload::from_json(data, version),
        ];
        for p in decoded.into_iter().flatten() {
            let _ = p.to_json();
            if let Ok(auth) = p.authorization() {
                let _ = check_signature(&auth, &domain);
                let _ = Counterfactual::of(&auth.signature);
                let permit = Eip2612Permit::checked(&p, auth.from, 1_700_000_000)
                    .ok()
                    .flatten()
                    .map(|permit| permit.split());
                if let Some(terms) = p.permit2() {
                    let _ = paygate_x402::permit2::signing_hash(&auth, &terms, 84532);
                    let _ = paygate_x402::permit2::settle_call(&auth, &terms, auth.value, permit);
                }
            }
        }
    }
}

/// The route path normaliser and the request-side lookup key. A normalised path must be
/// stable: normalising it again gives the same path.
pub fn route_path(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = lookup_key(s);
    if let Ok(n) = normalize(s) {
        assert_eq!(
            normalize(&n).as_deref(),
            Ok(n.as_str()),
            "normalize is not idempotent"
        );
    }
}

/// A sign-in-with-x proof (access windows): the `SIGN-IN-WITH-X` header as sent, and its JSON
/// with the fields the gateway compares first (domain, URI, chain, time) made valid, so the
/// rest (address, nonce, statement, version, times, request id, resources, signature) reaches the
/// SIWE message and the signature check. None may panic.
pub fn sign_in(data: &[u8]) {
    let origin = Origin::of("https://pay.example.com").expect("origin");
    let now = time::OffsetDateTime::from_unix_timestamp(1_800_000_000).expect("time");
    let _ = SignIn::from_header(data);
    let Ok(mut proof) = serde_json::from_slice::<SignIn>(data) else {
        return;
    };
    let _ = proof.check(&origin, URI, CHAIN, now);
    proof.domain = origin.domain.clone();
    proof.uri = URI.to_string();
    proof.chain_id = CHAIN.to_string();
    proof.issued_at = "2027-01-15T08:00:00.000Z".to_string();
    if let Ok(checked) = proof.check(&origin, URI, CHAIN, now) {
        let _ = checked.message.to_string();
        let _ = proof.signer(&checked);
    }
}

/// The provider webhook's `Provider-Signature` header check and its strict payload parser; CPN's
/// notification parser and its ECDSA signature check under a fixed key.
/// The first input byte splits the rest into a header and a body.
pub fn webhook(data: &[u8]) {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let at = usize::from(split).min(rest.len());
    let (header, body) = rest.split_at(at);
    let header = String::from_utf8_lossy(header);
    let secrets = parse_secrets("whsec_one,whsec_two");
    let _ = verify(Some(&header), body, &secrets, 300, 1_800_000_000);
    let _ = verify(None, body, &secrets, 300, 1_800_000_000);
    let _ = parse_secrets(&header);
    let _ = parse_event(body);
    let _ = cpn::parse_any(body);
    let _ = cpn::parse_notification(body);
    // A fixed key (private key 0x0101...01).
    static KEY: OnceLock<Option<p256::ecdsa::VerifyingKey>> = OnceLock::new();
    let key = KEY.get_or_init(|| {
        p256::ecdsa::SigningKey::from_slice(&[1u8; 32])
            .ok()
            .map(|k| *k.verifying_key())
    });
    if let Some(key) = key {
        let _ = cpn::verify_with(key, &header, body);
    }
    let _ = cpn::is_uuid(&header);
}
