//! A sign-in-with-x proof (access windows): the `SIGN-IN-WITH-X` header as sent, and its JSON
//! with the fields the gateway compares first (domain, URI, chain, time) made valid, so the
//! rest (address, nonce, statement, version, times, request id, resources, signature) reaches the
//! SIWE message and the signature check. None may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use paygate_x402::siwx::{Origin, SignIn};

const URI: &str = "https://pay.example.com/gateway/acme/data";
const CHAIN: &str = "eip155:84532";

fuzz_target!(|data: &[u8]| {
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
});
