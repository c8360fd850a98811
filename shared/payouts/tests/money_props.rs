//! Property tests for money (issue 8): base-unit conversions round-trip exactly, and a quote's
//! fees and destination amount never exceed the source or round in the payer's favour.

use paygate_payouts::money::{
    parse_amount, platform_fee, usdc_string, QuoteBreakdown, MAX_PAYOUT_USDC, PLATFORM_FEE_BPS,
};
use paygate_x402::money::{UsdcAmount, MAX_PRICE_USD};
use proptest::prelude::*;
use rust_decimal::Decimal;

const UNITS: u64 = 1_000_000;

/// FX rates as corridors see them: 0.0001 to 100000 destination units per USDC, up to 6 places.
fn fx_rate() -> impl Strategy<Value = Decimal> {
    (1u64..=100_000_000_000, 0u32..=6).prop_map(|(m, scale)| {
        let d = Decimal::from_i128_with_scale(i128::from(m), scale + 4);
        d.max(Decimal::new(1, 4))
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::Off)),
        ..ProptestConfig::with_cases(2000)
    })]

    /// A payout amount printed with six places parses back to the same base units.
    #[test]
    fn payout_amount_string_round_trips(units in 1u64..=MAX_PAYOUT_USDC * UNITS) {
        let a = UsdcAmount(units);
        prop_assert_eq!(parse_amount(&usdc_string(a)), Ok(a));
        // The shortest form (`to_decimal`) parses back too.
        prop_assert_eq!(parse_amount(&a.to_decimal().to_string()), Ok(a));
    }

    /// A route price survives decimal, string and JSON-number conversions exactly.
    #[test]
    fn price_conversions_round_trip(units in 1u64..=MAX_PRICE_USD * UNITS) {
        let a = UsdcAmount(units);
        prop_assert_eq!(UsdcAmount::from_usd_decimal(a.to_decimal()), Ok(a));
        prop_assert_eq!(UsdcAmount::from_usd_str(&a.to_decimal().to_string()), Ok(a));
        // The x402 wire form (`Display`) is the integer base units.
        prop_assert_eq!(a.to_string().parse::<u64>(), Ok(units));
        // Written as plain decimal text (never an exponent), read back exactly, as a client
        // would send it.
        let json = a.to_usd_json();
        prop_assert!(!json.get().contains(['e', 'E']), "{}", json.get());
        let parsed: serde_json::Number = serde_json::from_str(json.get()).unwrap();
        prop_assert_eq!(UsdcAmount::from_usd_json(&parsed), Ok(a));
    }

    /// More than six places is refused, never rounded.
    #[test]
    fn sub_unit_prices_are_refused(units in 1u64..=MAX_PRICE_USD * UNITS, extra in 1u32..=9) {
        let d = UsdcAmount(units).to_decimal() + Decimal::new(i64::from(extra), 7);
        prop_assert!(UsdcAmount::from_usd_decimal(d).is_err());
        prop_assert!(parse_amount(&d.to_string()).is_err());
    }

    /// The platform fee is the exact fee rounded up to the base unit: never less than the rule,
    /// never a whole unit more.
    #[test]
    fn platform_fee_rounds_up_by_less_than_one_unit(
        units in 1u64..=MAX_PAYOUT_USDC * UNITS,
        bps in PLATFORM_FEE_BPS,
    ) {
        let fee = platform_fee(UsdcAmount(units), bps).0;
        let exact = u128::from(units) * u128::from(bps); // fee x 10_000
        prop_assert!(u128::from(fee) * 10_000 >= exact);
        prop_assert!(u128::from(fee) * 10_000 < exact + 10_000);
    }

    /// fees + what the beneficiary gets (in USDC) never exceed the source; the destination
    /// amount is the exact conversion truncated to two places, so it is never rounded up.
    #[test]
    fn quote_never_exceeds_the_source(
        units in 1u64..=MAX_PAYOUT_USDC * UNITS,
        bps in PLATFORM_FEE_BPS,
        rail in 0u64..=5 * UNITS,
        fx in fx_rate(),
    ) {
        let amount = UsdcAmount(units);
        match QuoteBreakdown::compute(amount, bps, UsdcAmount(rail), fx) {
            Ok(q) => {
                prop_assert_eq!(q.total_fee.0, q.platform_fee.0 + rail);
                prop_assert_eq!(q.platform_fee, platform_fee(amount, bps));
                let net = UsdcAmount(units - q.total_fee.0).to_decimal();
                let exact = net * fx;
                prop_assert!(q.dest_amount <= exact);
                prop_assert!(exact - q.dest_amount < Decimal::new(1, 2));
                prop_assert!(q.dest_amount.scale() <= 2);
                prop_assert!(q.dest_amount > Decimal::ZERO);
                // In source terms: fees + dest / fx <= amount.
                prop_assert!(q.total_fee.to_decimal() + q.dest_amount / fx <= amount.to_decimal());
                prop_assert_eq!(q.provider_amount().0, units - q.platform_fee.0);
            }
            Err(_) => {
                // Refused only when the fees leave nothing, or less than one cent, to pay out.
                let fees = platform_fee(amount, bps).0 + rail;
                let left = units.saturating_sub(fees);
                prop_assert!(
                    left == 0 || UsdcAmount(left).to_decimal() * fx < Decimal::new(1, 2),
                    "refused a payable quote: {} units, fees {}", units, fees
                );
            }
        }
    }
}
