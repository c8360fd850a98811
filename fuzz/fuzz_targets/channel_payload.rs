//! The batch-settlement payload (payment channels): JSON as a payment's `payload` carries it,
//! parsed, then every local check the gateway runs on it (route offer, voucher signature, the
//! deposit's authorization, the cumulative step) against fixed figures. None may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| paygate_fuzz::channel_payload(data));
