//! A sign-in-with-x proof (access windows): the `SIGN-IN-WITH-X` header as sent, and its JSON
//! with the fields the gateway compares first (domain, URI, chain, time) made valid, so the
//! rest (address, nonce, statement, version, times, request id, resources, signature) reaches the
//! SIWE message and the signature check. None may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| paygate_fuzz::sign_in(data));
