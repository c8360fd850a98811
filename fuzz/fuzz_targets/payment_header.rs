//! The payment header decoder (`X-PAYMENT` v1, `PAYMENT-SIGNATURE` v2), then what the proxy does
//! next with a decoded payload: extract the authorization and check its signature; for a
//! Permit2 payload (`exact` through Permit2, `upto`) its digest, the EIP-2612 permit it may
//! carry (`eip2612GasSponsoring`) and the proxy call settling it; a smart wallet's ERC-6492
//! wrapping of the signature.
#![no_main]

use alloy_primitives::address;
use libfuzzer_sys::fuzz_target;
use paygate_x402::gas_sponsoring::Eip2612Permit;
use paygate_x402::payment::{PaymentPayload, ProtocolVersion};
use paygate_x402::signature::Counterfactual;
use paygate_x402::verify::check_signature;

fuzz_target!(|data: &[u8]| {
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
});
