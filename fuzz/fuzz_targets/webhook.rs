//! The provider webhook's `Provider-Signature` header check and its strict payload parser.
//! The first input byte splits the rest into a header and a body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use paygate_payouts::webhook::{parse_event, parse_secrets, verify};

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
});
