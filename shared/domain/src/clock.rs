//! The one clock format every record and API answer uses.

/// Current time as an RFC 3339 UTC timestamp, the one format every API response uses.
pub fn now_rfc3339() -> String {
    rfc3339(time::OffsetDateTime::now_utc())
}

/// Formats a timestamp as RFC 3339 (UTC, `Z`).
pub fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

pub use paygate_x402::clock::unix_now;
