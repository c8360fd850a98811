//! The batch-settlement payload (payment channels): JSON as a payment's `payload` carries it,
//! parsed, then every local check the gateway runs on it (route offer, voucher signature, the
//! deposit's authorization, the cumulative step) against fixed figures. None may panic.
#![no_main]

use alloy_primitives::address;
use libfuzzer_sys::fuzz_target;
use paygate_x402::batch::{ChannelFigures, ChannelOffer, ChannelPayloadWire, ChannelPayment};

fuzz_target!(|data: &[u8]| {
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
});
