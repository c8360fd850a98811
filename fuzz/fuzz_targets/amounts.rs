//! The decimal amount parsers: corridor amounts (`"100.5"`), route prices as strings and as
//! JSON numbers. Whatever parses must print back to the same base units.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| paygate_fuzz::amounts(data));
