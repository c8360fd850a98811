//! Money: USDC amounts as integer base units (6 decimals). Never a float in the arithmetic.

use rust_decimal::Decimal;
use std::fmt;

/// USDC has 6 decimals: 1 USDC = 1,000,000 base units.
pub const USDC_DECIMALS: u32 = 6;
const UNITS_PER_USDC: u64 = 1_000_000;
/// The largest per-request price a route may carry, in USD.
pub const MAX_PRICE_USD: u64 = 1_000_000;

/// An amount of USDC in base units.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct UsdcAmount(pub u64);

/// Why a price was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    #[error("must be a USD amount: a JSON number or a decimal string such as \"0.01\"")]
    NotANumber,
    #[error("must be greater than 0")]
    NotPositive,
    #[error("must have at most 6 decimal places")]
    TooPrecise,
    #[error("must be at most 1000000")]
    TooLarge,
}

/// Why a decimal string is not a USDC amount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecimalError {
    #[error("is not a decimal number")]
    Malformed,
    #[error("has more than 6 decimal places")]
    TooPrecise,
    #[error("is too large")]
    Overflow,
}

/// The one reading of a USDC decimal string, for every amount paygate is given as text:
/// ASCII digits, optionally a `.` followed by 1 to 6 digits; no sign, exponent, blanks or
/// separators. Returns base units (0 included: each caller bounds its own range).
pub fn parse_usdc_units(s: &str) -> Result<u64, DecimalError> {
    let (int, frac) = match s.split_once('.') {
        Some((_, "")) => return Err(DecimalError::Malformed),
        Some((i, f)) => (i, f),
        None => (s, ""),
    };
    let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) {
        return Err(DecimalError::Malformed);
    }
    if frac.len() > USDC_DECIMALS as usize {
        return Err(DecimalError::TooPrecise);
    }
    let int = int.trim_start_matches('0');
    // More than 13 integer digits cannot fit u64 base units.
    if int.len() > 13 {
        return Err(DecimalError::Overflow);
    }
    let whole: u64 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| DecimalError::Overflow)?
    };
    let frac_units: u64 = format!("{frac:0<6}")
        .parse()
        .map_err(|_| DecimalError::Malformed)?;
    whole
        .checked_mul(UNITS_PER_USDC)
        .and_then(|w| w.checked_add(frac_units))
        .ok_or(DecimalError::Overflow)
}

impl UsdcAmount {
    /// USDC token units (six decimals: one a base unit) read from the chain, saturating at the
    /// largest amount.
    pub fn of_units(units: alloy_primitives::U256) -> Self {
        Self(u64::try_from(units).unwrap_or(u64::MAX))
    }

    /// Parses a USD price given as a decimal string (`"0.01"`) exactly ([`parse_usdc_units`]).
    pub fn from_usd_str(s: &str) -> Result<Self, PriceError> {
        // A negative amount is an amount, just not a price: say so.
        if let Some(rest) = s.strip_prefix('-') {
            if parse_usdc_units(rest).is_ok() {
                return Err(PriceError::NotPositive);
            }
        }
        let units = parse_usdc_units(s).map_err(|e| match e {
            DecimalError::Malformed => PriceError::NotANumber,
            DecimalError::TooPrecise => PriceError::TooPrecise,
            DecimalError::Overflow => PriceError::TooLarge,
        })?;
        if units == 0 {
            return Err(PriceError::NotPositive);
        }
        if units > MAX_PRICE_USD * UNITS_PER_USDC {
            return Err(PriceError::TooLarge);
        }
        Ok(Self(units))
    }

    /// Parses a USD price given as a JSON number. serde_json holds non-integers as `f64`; its
    /// shortest round-trip rendering is exactly what the client wrote for any value with at most
    /// 15 significant digits, which covers every valid price (<= 1e6 with <= 6 decimals).
    pub fn from_usd_json(n: &serde_json::Number) -> Result<Self, PriceError> {
        if let Some(u) = n.as_u64() {
            return Self::from_usd_decimal(Decimal::from(u));
        }
        if let Some(i) = n.as_i64() {
            return Self::from_usd_decimal(Decimal::from(i));
        }
        let f = n.as_f64().ok_or(PriceError::NotANumber)?;
        if !f.is_finite() {
            return Err(PriceError::NotANumber);
        }
        if f > MAX_PRICE_USD as f64 {
            return Err(PriceError::TooLarge);
        }
        if f <= 0.0 {
            return Err(PriceError::NotPositive);
        }
        Self::from_usd_str(&Self::json_number_text(n).ok_or(PriceError::NotANumber)?)
    }

    /// The decimal text a JSON number was written as, in plain notation (`1e-6` -> `0.000001`):
    /// integers as they are, others by their shortest round-trip digits (what the client wrote,
    /// for any value with at most 15 significant digits). `None` for a non-finite number.
    pub fn json_number_text(n: &serde_json::Number) -> Option<String> {
        if let Some(u) = n.as_u64() {
            return Some(u.to_string());
        }
        if let Some(i) = n.as_i64() {
            return Some(i.to_string());
        }
        let f = n.as_f64().filter(|f| f.is_finite())?;
        // `{}` on f64 never uses exponent notation and prints the shortest round-trip digits.
        Some(format!("{f}"))
    }

    /// Converts an exact decimal USD amount into base units.
    pub fn from_usd_decimal(d: Decimal) -> Result<Self, PriceError> {
        if d <= Decimal::ZERO {
            return Err(PriceError::NotPositive);
        }
        if d > Decimal::from(MAX_PRICE_USD) {
            return Err(PriceError::TooLarge);
        }
        let d = d.normalize();
        if d.scale() > USDC_DECIMALS {
            return Err(PriceError::TooPrecise);
        }
        let units = d * Decimal::from(UNITS_PER_USDC);
        // Exact: scale <= 6 and magnitude <= 1e12, so the product is an integer that fits u64.
        let units = u64::try_from(units.trunc().mantissa()).map_err(|_| PriceError::TooLarge)?;
        Ok(Self(units))
    }

    /// The amount in USDC as an exact decimal (`10000` -> `0.01`).
    pub fn to_decimal(self) -> Decimal {
        Decimal::from_i128_with_scale(i128::from(self.0), USDC_DECIMALS).normalize()
    }

    /// The amount as a JSON number of USD (for `priceUSD`). Values are <= 1e6 with <= 6 decimals,
    /// so the f64's shortest rendering is the exact decimal.
    pub fn to_usd_json(self) -> Box<serde_json::value::RawValue> {
        // Written as the decimal text itself (`0.000001`), never through `f64`, which
        // serde_json would write as `1e-6`.
        let text = self.to_decimal().normalize().to_string();
        serde_json::value::RawValue::from_string(text).unwrap_or_else(|_| {
            serde_json::value::RawValue::from_string("null".into()).unwrap_or_default()
        })
    }
}

impl fmt::Display for UsdcAmount {
    /// Base units as an integer string, the x402 wire form (`"10000"`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(s: &str) -> serde_json::Number {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn exact_conversions() {
        for (input, units) in [
            ("0.000001", 1),
            ("0.1", 100_000),
            ("0.01", 10_000),
            ("1", 1_000_000),
            ("1.5", 1_500_000),
            ("0.123456", 123_456),
            ("1000000", 1_000_000_000_000),
            ("999999.999999", 999_999_999_999),
            ("0.29", 290_000),
            ("1e-6", 1),
        ] {
            assert_eq!(
                UsdcAmount::from_usd_json(&json(input)),
                Ok(UsdcAmount(units)),
                "{input}"
            );
        }
        assert_eq!(UsdcAmount(10_000).to_string(), "10000");
    }

    #[test]
    fn rejections() {
        assert_eq!(
            UsdcAmount::from_usd_json(&json("0.0000001")),
            Err(PriceError::TooPrecise)
        );
        assert_eq!(
            UsdcAmount::from_usd_json(&json("0")),
            Err(PriceError::NotPositive)
        );
        assert_eq!(
            UsdcAmount::from_usd_json(&json("-1")),
            Err(PriceError::NotPositive)
        );
        assert_eq!(
            UsdcAmount::from_usd_json(&json("-0.5")),
            Err(PriceError::NotPositive)
        );
        assert_eq!(
            UsdcAmount::from_usd_json(&json("1000000.000001")),
            Err(PriceError::TooLarge)
        );
        assert_eq!(
            UsdcAmount::from_usd_json(&json("1e300")),
            Err(PriceError::TooLarge)
        );
        assert_eq!(
            UsdcAmount::from_usd_json(&json("18446744073709551615")),
            Err(PriceError::TooLarge)
        );
        assert_eq!(UsdcAmount::from_usd_str("NaN"), Err(PriceError::NotANumber));
        for bad in [
            "", "+1", "1e3", " 1", "1.", ".5", "1_000", "0x10", "1,5", "-1e3",
        ] {
            assert_eq!(
                UsdcAmount::from_usd_str(bad),
                Err(PriceError::NotANumber),
                "{bad:?}"
            );
        }
        assert_eq!(
            UsdcAmount::from_usd_str("0.0000001"),
            Err(PriceError::TooPrecise)
        );
        assert_eq!(
            UsdcAmount::from_usd_str("0.000"),
            Err(PriceError::NotPositive)
        );
        assert_eq!(UsdcAmount::from_usd_str("abc"), Err(PriceError::NotANumber));
        assert_eq!(
            UsdcAmount::from_usd_str("-0.5"),
            Err(PriceError::NotPositive)
        );
        assert_eq!(UsdcAmount::from_usd_str("-1"), Err(PriceError::NotPositive));
        assert_eq!(UsdcAmount::from_usd_str("-"), Err(PriceError::NotANumber));
        assert!(PriceError::NotANumber
            .to_string()
            .contains("decimal string"));
    }

    #[test]
    fn round_trip_to_json() {
        for units in [
            1u64,
            10_000,
            100_000,
            1_000_000,
            123_456_789,
            1_000_000_000_000,
        ] {
            let v = UsdcAmount(units).to_usd_json();
            let n: serde_json::Number = serde_json::from_str(v.get()).unwrap();
            let back = UsdcAmount::from_usd_json(&n).unwrap();
            assert_eq!(back.0, units);
        }
        assert_eq!(UsdcAmount(10_000).to_usd_json().get(), "0.01");
        // Plain decimal notation, never an exponent.
        assert_eq!(UsdcAmount(1).to_usd_json().get(), "0.000001");
        assert_eq!(UsdcAmount(1_000_000_000_000).to_usd_json().get(), "1000000");
    }
}
