//! The provider webhook's `Provider-Signature` header check and its strict payload parser; CPN's
//! notification parser and its ECDSA signature check under a fixed key.
//! The first input byte splits the rest into a header and a body.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| paygate_fuzz::webhook(data));
