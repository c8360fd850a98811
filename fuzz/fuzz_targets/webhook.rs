//! The provider webhook's `Provider-Signature` header check and its strict payload parser; CPN's
//! notification parser and its ECDSA signature check under a fixed key.
//! The first input byte splits the rest into a header and a body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use paygate_payouts::cpn;
use paygate_payouts::webhook::{parse_event, parse_secrets, verify};
use std::sync::OnceLock;

fuzz_target!(|data: &[u8]| {
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
});
