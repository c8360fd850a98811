//! The decimal amount parsers: corridor amounts (`"100.5"`), route prices as strings and as
//! JSON numbers. Whatever parses must print back to the same base units.
#![no_main]

use libfuzzer_sys::fuzz_target;
use paygate_payouts::money::{parse_amount, usdc_string};
use paygate_x402::money::UsdcAmount;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(a) = parse_amount(s) {
        assert_eq!(parse_amount(&usdc_string(a)), Ok(a));
    }
    if let Ok(a) = UsdcAmount::from_usd_str(s) {
        assert_eq!(UsdcAmount::from_usd_str(&a.to_decimal().to_string()), Ok(a));
    }
    if let Ok(n) = serde_json::from_str::<serde_json::Number>(s) {
        if let Ok(a) = UsdcAmount::from_usd_json(&n) {
            // Written as plain decimal text (never an exponent) that reads back the same.
            let written = a.to_usd_json();
            assert!(!written.get().contains(['e', 'E']), "{}", written.get());
            let back: serde_json::Number = serde_json::from_str(written.get()).unwrap();
            assert_eq!(UsdcAmount::from_usd_json(&back), Ok(a));
        }
    }
});
