//! The route path normaliser and the request-side lookup key. A normalised path must be
//! stable: normalising it again gives the same path.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| paygate_fuzz::route_path(data));
