//! The route path normaliser and the request-side lookup key. A normalised path must be
//! stable: normalising it again gives the same path.
#![no_main]

use libfuzzer_sys::fuzz_target;
use paygate_domain::route_path::{lookup_key, normalize};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = lookup_key(s);
    if let Ok(n) = normalize(s) {
        assert_eq!(
            normalize(&n).as_deref(),
            Ok(n.as_str()),
            "normalize is not idempotent"
        );
    }
});
