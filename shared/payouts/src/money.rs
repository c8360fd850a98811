//! Corridor money: USDC amounts in base units (6 decimals), destination amounts as decimals with
//! two places, FX rates as exact decimals. Fees round up to the base unit and the destination
//! amount rounds toward zero, so rounding never favours the payer over the fee rules.

use paygate_x402::money::{parse_usdc_units, DecimalError, UsdcAmount};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// The largest payout accepted, in USDC.
pub const MAX_PAYOUT_USDC: u64 = 10_000_000;
/// The platform fee's allowed range, in basis points (0.25 % to 0.65 %).
pub const PLATFORM_FEE_BPS: std::ops::RangeInclusive<u32> = 25..=65;
const UNITS: u64 = 1_000_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    #[error("must be a positive decimal string with at most 6 decimal places")]
    Malformed,
    #[error("must be greater than 0")]
    NotPositive,
    #[error("must be at most {MAX_PAYOUT_USDC}")]
    TooLarge,
    #[error("is too small: the fees take all of it")]
    TooSmall,
}

/// Parses a USDC amount given as a decimal string (`"100"`, `"0.000001"`), exactly, with the
/// one USDC decimal syntax ([`parse_usdc_units`]).
pub fn parse_amount(s: &str) -> Result<UsdcAmount, AmountError> {
    let units = parse_usdc_units(s).map_err(|e| match e {
        DecimalError::Overflow => AmountError::TooLarge,
        DecimalError::Malformed | DecimalError::TooPrecise => AmountError::Malformed,
    })?;
    if units == 0 {
        return Err(AmountError::NotPositive);
    }
    if units > MAX_PAYOUT_USDC * UNITS {
        return Err(AmountError::TooLarge);
    }
    Ok(UsdcAmount(units))
}

/// `amount` as a USDC decimal string with all 6 places (`"100.000000"`).
pub fn usdc_string(a: UsdcAmount) -> String {
    format!("{}.{:06}", a.0 / UNITS, a.0 % UNITS)
}

/// A destination amount with exactly two places (`"537.12"`).
pub fn minor_string(d: Decimal) -> String {
    let mut d = d;
    d.rescale(2);
    d.to_string()
}

/// The platform fee on `amount`: `bps` basis points, rounded up to the base unit.
pub fn platform_fee(amount: UsdcAmount, bps: u32) -> UsdcAmount {
    let scaled = u128::from(amount.0) * u128::from(bps);
    let fee = scaled.div_ceil(10_000);
    UsdcAmount(u64::try_from(fee).unwrap_or(u64::MAX))
}

/// Everything a quote says about the money.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuoteBreakdown {
    /// USDC the organisation pays out (source amount).
    pub amount: UsdcAmount,
    pub platform_fee_bps: u32,
    pub platform_fee: UsdcAmount,
    /// The provider's rail fee, in USDC.
    pub rail_fee: UsdcAmount,
    pub total_fee: UsdcAmount,
    /// Destination units per 1 USDC.
    pub fx_rate: Decimal,
    /// What the beneficiary receives: (amount - total fee) x fxRate, toward zero, 2 places.
    pub dest_amount: Decimal,
}

impl QuoteBreakdown {
    /// Computes a quote; fails when the fees leave nothing to pay out.
    pub fn compute(
        amount: UsdcAmount,
        platform_fee_bps: u32,
        rail_fee: UsdcAmount,
        fx_rate: Decimal,
    ) -> Result<Self, AmountError> {
        let platform = platform_fee(amount, platform_fee_bps);
        let total = platform
            .0
            .checked_add(rail_fee.0)
            .ok_or(AmountError::TooLarge)?;
        let net = amount
            .0
            .checked_sub(total)
            .filter(|n| *n > 0)
            .ok_or(AmountError::TooSmall)?;
        let dest = UsdcAmount(net)
            .to_decimal()
            .checked_mul(fx_rate)
            .ok_or(AmountError::TooLarge)?
            .trunc_with_scale(2);
        if dest <= Decimal::ZERO {
            return Err(AmountError::TooSmall);
        }
        Ok(Self {
            amount,
            platform_fee_bps,
            platform_fee: platform,
            rail_fee,
            total_fee: UsdcAmount(total),
            fx_rate,
            dest_amount: dest,
        })
    }

    /// USDC that reaches the provider (the amount less the platform fee).
    pub fn provider_amount(&self) -> UsdcAmount {
        UsdcAmount(self.amount.0.saturating_sub(self.platform_fee.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    #[test]
    fn amounts_parse_exactly_or_not_at_all() {
        assert_eq!(parse_amount("100"), Ok(UsdcAmount(100_000_000)));
        assert_eq!(parse_amount("0.000001"), Ok(UsdcAmount(1)));
        assert_eq!(parse_amount("1000000"), Ok(UsdcAmount(1_000_000_000_000)));
        assert_eq!(parse_amount("007.5"), Ok(UsdcAmount(7_500_000)));
        assert_eq!(parse_amount("10000000"), Ok(UsdcAmount(10_000_000_000_000)));
        assert_eq!(parse_amount("0"), Err(AmountError::NotPositive));
        assert_eq!(parse_amount("0.000000"), Err(AmountError::NotPositive));
        assert_eq!(parse_amount("10000000.000001"), Err(AmountError::TooLarge));
        assert_eq!(
            parse_amount("99999999999999999999"),
            Err(AmountError::TooLarge)
        );
        for bad in [
            "",
            "-1",
            "+1",
            "1e3",
            " 1",
            "1 ",
            "1.",
            ".5",
            "1.0000001",
            "0x10",
            "1,5",
            "NaN",
            "١",
        ] {
            assert_eq!(parse_amount(bad), Err(AmountError::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn platform_fee_rounds_up_to_the_base_unit() {
        assert_eq!(
            platform_fee(UsdcAmount(100_000_000), 50),
            UsdcAmount(500_000)
        );
        assert_eq!(platform_fee(UsdcAmount(1), 25), UsdcAmount(1));
        assert_eq!(platform_fee(UsdcAmount(399), 25), UsdcAmount(1));
        assert_eq!(platform_fee(UsdcAmount(401), 25), UsdcAmount(2));
        assert_eq!(platform_fee(UsdcAmount(0), 65), UsdcAmount(0));
    }

    /// The fee and rounding table for every currency (rates and rail fees as the sandbox's
    /// defaults), from the smallest amount to a million. Expected values were computed
    /// independently with Python's `decimal` (ROUND_DOWN to 2 places, fee = ceil).
    #[test]
    fn quote_table() {
        // (currency rate, rail fee, amount, bps) -> (platform fee, total, dest amount)
        type Row = (
            &'static str,
            u64,
            &'static str,
            u32,
            Result<(u64, u64, &'static str), AmountError>,
        );
        let table: &[Row] = &[
            (
                "5.394555",
                300_000,
                "100",
                50,
                Ok((500_000, 800_000, "535.13")),
            ),
            (
                "5.394555",
                300_000,
                "1000000",
                50,
                Ok((5_000_000_000, 5_000_300_000, "5367580.60")),
            ),
            (
                "5.394555",
                300_000,
                "0.000001",
                50,
                Err(AmountError::TooSmall),
            ),
            (
                "5.394555",
                300_000,
                "0.300002",
                25,
                Err(AmountError::TooSmall),
            ),
            (
                "16.958232",
                400_000,
                "100",
                65,
                Ok((650_000, 1_050_000, "1678.01")),
            ),
            (
                "16.958232",
                400_000,
                "0.410001",
                25,
                Ok((1026, 401_026, "0.15")),
            ),
            (
                "1534.7475",
                750_000,
                "100",
                50,
                Ok((500_000, 1_250_000, "151556.31")),
            ),
            (
                "1534.7475",
                750_000,
                "1000000",
                25,
                Ok((2_500_000_000, 2_500_750_000, "1530909480.18")),
            ),
            (
                "128.205",
                600_000,
                "12.345678",
                40,
                Ok((49_383, 649_383, "1499.52")),
            ),
            (
                "18.052155",
                500_000,
                "0.500001",
                25,
                Err(AmountError::TooSmall),
            ),
            ("18.052155", 500_000, "1", 25, Ok((2_500, 502_500, "8.98"))),
        ];
        for (rate, rail, amount, bps, want) in table {
            let got = QuoteBreakdown::compute(
                parse_amount(amount).unwrap(),
                *bps,
                UsdcAmount(*rail),
                d(rate),
            );
            match (got, want) {
                (Ok(q), Ok((fee, total, dest))) => {
                    assert_eq!(q.platform_fee.0, *fee, "{amount} @ {rate}");
                    assert_eq!(q.total_fee.0, *total, "{amount} @ {rate}");
                    assert_eq!(minor_string(q.dest_amount), *dest, "{amount} @ {rate}");
                    // Fees + what the beneficiary's amount is worth never exceed the source.
                    let paid_out = q.dest_amount / q.fx_rate;
                    assert!(q.total_fee.to_decimal() + paid_out <= q.amount.to_decimal());
                    assert_eq!(q.provider_amount().0, q.amount.0 - fee);
                }
                (Err(e), Err(w)) => assert_eq!(&e, w, "{amount} @ {rate}"),
                (g, w) => panic!("{amount} @ {rate}: got {g:?}, want {w:?}"),
            }
        }
    }

    #[test]
    fn strings_have_fixed_places() {
        assert_eq!(usdc_string(UsdcAmount(1)), "0.000001");
        assert_eq!(usdc_string(UsdcAmount(500_000)), "0.500000");
        assert_eq!(minor_string(d("537")), "537.00");
        assert_eq!(minor_string(d("0.1")), "0.10");
    }
}
