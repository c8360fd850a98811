//! The payment header decoder (`X-PAYMENT` v1, `PAYMENT-SIGNATURE` v2), then what the proxy does
//! next with a decoded payload: extract the authorization and check its signature; for a
//! Permit2 payload (`exact` through Permit2, `upto`) its digest and the proxy call settling it.
#![no_main]

use alloy_primitives::address;
use libfuzzer_sys::fuzz_target;
use paygate_x402::payment::{PaymentPayload, ProtocolVersion};
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
                if let Some(terms) = p.permit2() {
                    let _ = paygate_x402::permit2::signing_hash(&auth, &terms, 84532);
                    let _ = paygate_x402::permit2::settle_call(&auth, &terms, auth.value);
                }
            }
        }
    }
});
