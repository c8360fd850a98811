//! What a usage-priced request is charged, and when: shared by the ways that charge after the
//! answer (channels, `upto`, `auth-capture`).

use crate::route_entry::RouteEntry;
use http::HeaderValue;
use paygate_domain::model::{Pricing, Route};

/// What a request to `entry` is charged, at most `price` (base units): the price, or for a
/// usage-priced route what the origin `stated`.
pub(super) fn charge_of(entry: &RouteEntry, price: u128, stated: Option<&HeaderValue>) -> u128 {
    match entry.route.pricing {
        Pricing::Fixed => price,
        Pricing::Usage => usage_charge(stated, price, &entry.id),
    }
}

/// Whether the charge of an answer to `route` whose head `stated` none comes at its end: a
/// usage-priced streamed answer may state it in a trailer.
pub(super) fn stated_at_end(route: &Route, stated: Option<&HeaderValue>) -> bool {
    stated.is_none() && route.streaming && route.pricing == Pricing::Usage
}

/// What a usage-priced request is charged: the origin's stated charge in decimal USD, at most
/// the `price` (an amount too large for any price is above it); the price when the origin says
/// nothing; nothing (and a warning for the operator) when what it says is not an amount.
fn usage_charge(stated: Option<&HeaderValue>, price: u128, route: &str) -> u128 {
    let Some(v) = stated else { return price };
    let text = v.to_str().unwrap_or("").trim();
    match paygate_x402::money::parse_usdc_units(text) {
        Ok(units) => u128::from(units).min(price),
        Err(paygate_x402::money::DecimalError::Overflow) => price,
        Err(_) => {
            tracing::warn!(
                route,
                value = text,
                "the origin's X-Paygate-Charge is not a USD amount; nothing charged"
            );
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::usage_charge;
    use http::HeaderValue;

    #[test]
    fn the_origin_charge_is_at_most_the_price_and_nothing_when_it_is_not_an_amount() {
        let charge = |v: Option<&str>| {
            let h = v.map(|v| HeaderValue::from_str(v).unwrap());
            usage_charge(h.as_ref(), 1_000, "rt")
        };
        assert_eq!(charge(None), 1_000, "silent origin: the price");
        assert_eq!(charge(Some(" 0.00025 ")), 250, "decimal USD");
        assert_eq!(charge(Some("0.000999")), 999);
        assert_eq!(charge(Some("0")), 0);
        assert_eq!(charge(Some("0.0")), 0);
        assert_eq!(
            charge(Some("250")),
            1_000,
            "$250 is above the price: the price"
        );
        assert_eq!(charge(Some("0.5")), 1_000);
        assert_eq!(
            charge(Some("99999999999999999999999999999999999999999")),
            1_000,
            "too large for any price: the price"
        );
        for bad in [
            "-1",
            "-0.5",
            "abc",
            "",
            "1e3",
            "0x10",
            "1,5",
            ".5",
            "1.",
            "0.0000001",
            "+1",
        ] {
            assert_eq!(charge(Some(bad)), 0, "{bad:?}");
        }
    }
}
