//! Field types of request bodies: each refuses what its field may not hold, with the message
//! the answer's `details` shows, and describes itself to the OpenAPI document.

use alloy_primitives::Address;
use paygate_domain::route_path;
use paygate_gateway::route_table::SANDBOX_SLUG;
use paygate_payouts::money::parse_amount;
use paygate_x402::money::{parse_usdc_units, UsdcAmount};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// For an optional field that may not be `null`: `#[serde(default, deserialize_with =
/// "present")]` reads a given value as `Some` and refuses `null` (serde reads it as absent).
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A field of an update that may be left out (unchanged), `null` (cleared) or set. Needs
/// `#[serde(default)]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Nullable<T> {
    #[default]
    Absent,
    Null,
    Set(T),
}

impl<T> Nullable<T> {
    /// `None`: leave as is; `Some(None)`: clear; `Some(Some(v))`: set.
    pub fn patch(self) -> Option<Option<T>> {
        match self {
            Self::Absent => None,
            Self::Null => Some(None),
            Self::Set(v) => Some(Some(v)),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Nullable<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Option::<T>::deserialize(d)? {
            None => Self::Null,
            Some(v) => Self::Set(v),
        })
    }
}

/// The schema of a [`Nullable`] field: `T`'s, `null` allowed. Used as
/// `#[schema(schema_with = nullable::<T>)]` (utoipa composes generic types through a hidden
/// trait of its own).
pub fn nullable<T: PartialSchema>() -> RefOr<Schema> {
    {
        match T::schema() {
            RefOr::T(Schema::Object(mut o)) => {
                o.schema_type = match o.schema_type {
                    SchemaType::Type(t) => SchemaType::Array(vec![t, Type::Null]),
                    SchemaType::Array(mut types) => {
                        types.push(Type::Null);
                        SchemaType::Array(types)
                    }
                    SchemaType::AnyValue => SchemaType::AnyValue,
                };
                RefOr::T(Schema::Object(o))
            }
            other => other,
        }
    }
}

fn string_schema(max_length: usize, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .max_length(Some(max_length))
        .description(Some(description).filter(|d| !d.is_empty()))
        .into()
}

/// Declares a string field type: its `Deserialize` reads a string and checks it with `$check`
/// (`fn(String) -> Result<$inner, impl Display>`), its schema is a string of at most `$max`
/// characters described by `$doc`.
macro_rules! string_field {
    ($(#[$m:meta])* $name:ident($inner:ty), max = $max:expr, doc = $doc:expr, check = $check:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name(pub $inner);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                let check: fn(String) -> Result<$inner, _> = $check;
                check(s).map(Self).map_err(D::Error::custom)
            }
        }

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                string_schema($max, $doc)
            }
        }

        impl ToSchema for $name {}
    };
}

fn at_most(s: String, max: usize) -> Result<String, String> {
    if s.chars().count() > max {
        Err(format!("must be at most {max} characters"))
    } else if s
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        // NUL and the like break logs, terminals and other systems the text is shown in.
        Err("must not contain control characters (tab and line breaks are fine)".into())
    } else {
        Ok(s)
    }
}

/// A string of at most `MAX` characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text<const MAX: usize>(pub String);

impl<const MAX: usize> Text<MAX> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de, const MAX: usize> Deserialize<'de> for Text<MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        at_most(String::deserialize(d)?, MAX)
            .map(Self)
            .map_err(D::Error::custom)
    }
}

impl<const MAX: usize> PartialSchema for Text<MAX> {
    fn schema() -> RefOr<Schema> {
        string_schema(MAX, "")
    }
}

impl<const MAX: usize> ToSchema for Text<MAX> {}

/// A string of at most `MAX` characters with something besides blanks in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word<const MAX: usize>(pub String);

impl<'de, const MAX: usize> Deserialize<'de> for Word<MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = at_most(String::deserialize(d)?, MAX).map_err(D::Error::custom)?;
        if s.trim().is_empty() {
            return Err(D::Error::custom("must not be blank"));
        }
        Ok(Self(s))
    }
}

impl<const MAX: usize> PartialSchema for Word<MAX> {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(MAX))
            .pattern(Some(r"\S"))
            .into()
    }
}

impl<const MAX: usize> ToSchema for Word<MAX> {}

string_field!(
    /// An EVM address (`0x` and 40 hex digits; mixed case must carry a valid EIP-55 checksum).
    EvmAddress(Address),
    max = 42,
    doc = "0x-prefixed 20-byte hex address (mixed case must carry a valid EIP-55 checksum).",
    check = |s| paygate_x402::address::parse_address(&s)
        .ok_or("must be a 0x-prefixed 20-byte hex address")
);

string_field!(
    /// A route path, normalised (one leading `/`, no trailing `/`).
    RoutePath(String),
    max = route_path::MAX_PATH_LEN + 2,
    doc = "Path below /gateway/{orgSlug}; normalised to one leading / and no trailing /.",
    check = |s| {
        at_most(s, route_path::MAX_PATH_LEN + 2)
            .and_then(|s| route_path::normalize(&s).map_err(|p| p.to_string()))
    }
);

string_field!(
    /// A media type, `type/subtype` in RFC 6838's name characters (no parameters), lower-cased.
    MimeType(String),
    max = 255,
    doc = "A media type: type/subtype (RFC 6838 name characters, no parameters), e.g. \
           application/json.",
    check = |s| {
        let name = |p: &str| {
            !p.is_empty()
                && p.len() <= 127
                && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
                && p.as_bytes()[0].is_ascii_alphanumeric()
        };
        match s.split_once('/') {
            Some((t, st)) if name(t) && name(st) => Ok(s.to_ascii_lowercase()),
            _ => Err("must be a media type such as application/json (type/subtype, no parameters)"),
        }
    }
);

/// The most bytes of a route's `inputSchema` or `outputSchema`, serialised.
pub const MAX_SCHEMA_BYTES: usize = 4 * 1024;

/// A JSON Schema (an object, valid against the JSON Schema 2020-12 meta-schema), at most
/// [`MAX_SCHEMA_BYTES`] serialised: what a route's body takes or answers, shown to agents in
/// discovery, the 402 challenge's bazaar extension and MCP tool lists.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonSchemaDoc(pub Value);

impl<'de> Deserialize<'de> for JsonSchemaDoc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        if !v.is_object() {
            return Err(D::Error::custom("must be a JSON Schema object"));
        }
        if v.to_string().len() > MAX_SCHEMA_BYTES {
            return Err(D::Error::custom(format!(
                "must be at most {MAX_SCHEMA_BYTES} bytes of JSON"
            )));
        }
        if let Err(e) = jsonschema::meta::validate(&v) {
            let at = e.instance_path().to_string();
            let place = if at.is_empty() {
                String::new()
            } else {
                format!(" at {at}")
            };
            return Err(D::Error::custom(format!(
                "is not a valid JSON Schema{place}: {}",
                e.to_string().chars().take(200).collect::<String>()
            )));
        }
        // A schema must also compile here, with no network: a `$ref` to elsewhere is refused.
        if let Err(e) = jsonschema::validator_for(&v) {
            return Err(D::Error::custom(format!(
                "cannot be used as a JSON Schema (only references inside it resolve): {}",
                e.to_string().chars().take(200).collect::<String>()
            )));
        }
        Ok(Self(v))
    }
}

impl PartialSchema for JsonSchemaDoc {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(
                "A JSON Schema (2020-12 meta-schema), at most 4 KB of JSON.",
            ))
            .into()
    }
}

impl ToSchema for JsonSchemaDoc {}

/// The most characters of a route's target URL.
pub const MAX_URL: usize = 2048;

string_field!(
    /// A route's upstream: an absolute http(s) URL with a host, no credentials, no fragment.
    TargetUrl(String),
    max = MAX_URL,
    doc = "Absolute http(s) URL without credentials or fragment, not resolving to an internal \
           address unless allow-listed.",
    check = |s| {
        let s = at_most(s, MAX_URL)?;
        check_target_url(&s).map_err(str::to_string)?;
        Ok::<_, String>(s)
    }
);

fn check_target_url(u: &str) -> Result<(), &'static str> {
    let url = url::Url::parse(u).map_err(|_| "must be an absolute http(s) URL")?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err("must use http or https");
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("must name a host");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not contain credentials");
    }
    if url.fragment().is_some() {
        return Err("must not contain a fragment");
    }
    Ok(())
}

string_field!(
    /// An organisation slug: 1 to 63 lowercase letters, digits or `-`, not the sandbox's.
    Slug(String),
    max = 63,
    doc = "1 to 63 lowercase letters, digits or '-', starting with a letter or digit.",
    check = |s| {
        let b = s.as_bytes();
        let valid = !b.is_empty()
            && b.len() <= 63
            && b[0].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
        if !valid {
            Err("must be 1 to 63 lowercase letters, digits or '-', starting with a letter or digit")
        } else if s == SANDBOX_SLUG {
            Err("is reserved for the public sandbox")
        } else {
            Ok(s)
        }
    }
);

/// Money is read one way everywhere: a decimal string (`"0.01"`) or a JSON number (`0.01`),
/// with the same exactness rules (at most 6 decimals, never rounded). The text a number was
/// written as, or the string; `Err` for any other JSON type.
fn money_text(v: Value) -> Result<String, &'static str> {
    match v {
        Value::String(s) if s.len() <= 32 => Ok(s),
        Value::String(_) => Err("must be at most 32 characters"),
        Value::Number(n) => UsdcAmount::json_number_text(&n).ok_or("must be a finite number"),
        _ => Err("must be a decimal string or a number"),
    }
}

/// A corridor amount in USDC: positive, at most 6 decimals (a decimal string or a number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsdcDecimal(pub UsdcAmount);

impl<'de> Deserialize<'de> for UsdcDecimal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = money_text(Value::deserialize(d)?).map_err(D::Error::custom)?;
        parse_amount(&text).map(Self).map_err(D::Error::custom)
    }
}

impl PartialSchema for UsdcDecimal {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(SchemaType::Array(vec![Type::String, Type::Number]))
            .description(Some(
                "USDC as a decimal string or a JSON number, positive, at most 6 decimal places.",
            ))
            .into()
    }
}

impl ToSchema for UsdcDecimal {}

/// A route price in USD: positive, exact to 6 decimals (a JSON number or a decimal string).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriceUsd(pub UsdcAmount);

impl<'de> Deserialize<'de> for PriceUsd {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let read = match Value::deserialize(d)? {
            // Numbers keep their own words (`must be greater than 0` for -1).
            Value::Number(n) => UsdcAmount::from_usd_json(&n).map_err(|e| e.to_string()),
            v => money_text(v)
                .map_err(str::to_string)
                .and_then(|text| UsdcAmount::from_usd_str(&text).map_err(|e| e.to_string())),
        };
        read.map(Self).map_err(D::Error::custom)
    }
}

impl PartialSchema for PriceUsd {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(SchemaType::Array(vec![Type::Number, Type::String]))
            .description(Some(
                "Price per request in USD, more than 0 and at most 1000000, at most 6 decimal \
                 places: a JSON number or a decimal string (answered as a JSON number).",
            ))
            .into()
    }
}

impl ToSchema for PriceUsd {}

/// A USD amount that may be zero: a JSON number or a decimal string (the one USDC syntax).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsdAmount(pub UsdcAmount);

impl<'de> Deserialize<'de> for UsdAmount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = money_text(Value::deserialize(d)?).map_err(D::Error::custom)?;
        // Zero in the one USDC decimal syntax (`"0"`, `0.00`); no blanks around it.
        let parsed = if parse_usdc_units(&text) == Ok(0) {
            Ok(UsdcAmount(0))
        } else {
            UsdcAmount::from_usd_str(&text)
        };
        parsed.map(Self).map_err(D::Error::custom)
    }
}

impl PartialSchema for UsdAmount {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(SchemaType::Array(vec![Type::Number, Type::String]))
            .description(Some(
                "USD as a JSON number or a decimal string, at most 6 decimal places.",
            ))
            .into()
    }
}

impl ToSchema for UsdAmount {}

/// A corridor platform fee in basis points, 25 to 65 (SPEC: 0.25% to 0.65%).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeeBps(pub u32);

impl<'de> Deserialize<'de> for FeeBps {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d)?
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .filter(|v| paygate_payouts::money::PLATFORM_FEE_BPS.contains(v))
            .map(Self)
            .ok_or_else(|| D::Error::custom("must be a whole number from 25 to 65"))
    }
}

impl PartialSchema for FeeBps {
    fn schema() -> RefOr<Schema> {
        let bps = paygate_payouts::money::PLATFORM_FEE_BPS;
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(*bps.start()))
            .maximum(Some(*bps.end()))
            .into()
    }
}

impl ToSchema for FeeBps {}

/// A whole number from `MIN` to `MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounded<const MIN: u32, const MAX: u32>(pub u32);

impl<'de, const MIN: u32, const MAX: u32> Deserialize<'de> for Bounded<MIN, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d)?
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .filter(|v| (MIN..=MAX).contains(v))
            .map(Self)
            .ok_or_else(|| D::Error::custom(format!("must be a whole number from {MIN} to {MAX}")))
    }
}

impl<const MIN: u32, const MAX: u32> PartialSchema for Bounded<MIN, MAX> {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(MIN))
            .maximum(Some(MAX))
            .into()
    }
}

impl<const MIN: u32, const MAX: u32> ToSchema for Bounded<MIN, MAX> {}

string_field!(
    /// An HTTP header name (consistent hashing reads its value).
    HeaderField(String),
    max = 64,
    doc = "An HTTP header name, e.g. x-user-id.",
    check = |s| {
        let s = at_most(s, 64)?;
        http::HeaderName::from_bytes(s.as_bytes())
            .map(|h| h.as_str().to_string())
            .map_err(|_| "must be an HTTP header name".to_string())
    }
);

string_field!(
    /// The path a health check requests, from `/`.
    ProbePath(String),
    max = 512,
    doc = "An absolute path (with an optional query) the health check GETs, e.g. /health.",
    check = |s| {
        let s = at_most(s, 512)?;
        if !s.starts_with('/') || s.chars().any(|c| c.is_whitespace() || c.is_control() || c == '#') {
            return Err("must be a path starting with / without spaces or a fragment".to_string());
        }
        Ok(s)
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read<T: for<'de> Deserialize<'de>>(v: Value) -> Result<T, String> {
        T::deserialize(v).map_err(|e| e.to_string())
    }

    #[test]
    fn usd_caps_read_zero_and_amounts_in_the_one_decimal_syntax() {
        for (v, want) in [
            (json!("0"), Some(0)),
            (json!("0.00"), Some(0)),
            (json!(0), Some(0)),
            (json!("2.5"), Some(2_500_000)),
            (json!(" 0"), None),
            (json!(" 1"), None),
            (json!(true), None),
        ] {
            assert_eq!(
                read::<UsdAmount>(v.clone()).ok().map(|a| a.0 .0),
                want,
                "{v}"
            );
        }
    }

    #[test]
    fn text_refuses_control_characters_but_keeps_line_breaks() {
        assert!(read::<Text<100>>(json!("line one\nline two\tend")).is_ok());
        for bad in ["a\u{0}b", "bell\u{7}", "esc\u{1b}[31m", "del\u{7f}"] {
            let e = read::<Text<100>>(json!(bad)).unwrap_err();
            assert!(e.contains("control characters"), "{bad:?}: {e}");
            assert!(read::<Word<100>>(json!(bad)).is_err());
        }
    }

    #[test]
    fn money_is_a_number_or_a_decimal_string_exact_and_positive() {
        for good in [json!(0.01), json!("0.01"), json!(1e-2)] {
            assert_eq!(read::<PriceUsd>(good).unwrap().0, UsdcAmount(10_000));
        }
        assert_eq!(read::<PriceUsd>(json!(1e-6)).unwrap().0, UsdcAmount(1));
        for bad in [
            json!(0),
            json!("0"),
            json!(-1),
            json!(0.0000001),
            json!("0.0000001"),
            json!(" 1"),
            json!(true),
        ] {
            assert!(read::<PriceUsd>(bad.clone()).is_err(), "{bad}");
        }
        assert_eq!(
            read::<PriceUsd>(json!([1])).unwrap_err(),
            "must be a decimal string or a number"
        );
        for good in [json!(12.5), json!("12.5"), json!(12.500000)] {
            assert_eq!(read::<UsdcDecimal>(good).unwrap().0, UsdcAmount(12_500_000));
        }
        for bad in [json!(0), json!(1.0000001), json!("abc"), json!(null)] {
            assert!(read::<UsdcDecimal>(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn strings_are_checked_by_their_rule() {
        assert!(read::<Slug>(json!("acme-1")).is_ok());
        for bad in ["", "-a", "Acme", SANDBOX_SLUG] {
            assert!(read::<Slug>(json!(bad)).is_err(), "{bad}");
        }
        assert_eq!(
            read::<RoutePath>(json!("a/b/")).unwrap().0,
            "/a/b",
            "normalised"
        );
        assert!(read::<RoutePath>(json!("a/../b")).is_err());
        assert!(read::<TargetUrl>(json!("https://x.io/p")).is_ok());
        for bad in [
            "ftp://x.io",
            "not a url",
            "https://u:p@x.io",
            "https://x.io/#f",
        ] {
            assert!(read::<TargetUrl>(json!(bad)).is_err(), "{bad}");
        }
        assert!(read::<Word<4>>(json!("  ")).is_err());
        assert!(read::<Text<4>>(json!("abcde")).is_err());
        assert!(read::<EvmAddress>(json!("0x12")).is_err());
        assert_eq!(read::<FeeBps>(json!(25)).unwrap().0, 25);
        assert!(read::<FeeBps>(json!(66)).is_err());
    }

    #[test]
    fn nullable_tells_absent_null_and_set_apart() {
        assert_eq!(Nullable::<u8>::Absent.patch(), None);
        assert_eq!(
            read::<Nullable<u8>>(json!(null)).unwrap().patch(),
            Some(None)
        );
        assert_eq!(
            read::<Nullable<u8>>(json!(3)).unwrap().patch(),
            Some(Some(3))
        );
    }
}
