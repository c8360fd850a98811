//! What every part of paygate builds on beyond the x402 protocol (`paygate-x402`):
//! configuration, records, the store, API keys, sealed secrets, the error codes, and payouts.

pub mod apikey;
pub mod config;
pub mod error;
pub mod ids;
pub mod model;
pub mod payout;
pub mod secrets;
pub mod store;

pub use error::{ErrorBody, ErrorCode, FieldProblem};

/// Current time as an RFC 3339 UTC timestamp, the one format every API response uses.
pub fn now_rfc3339() -> String {
    rfc3339(time::OffsetDateTime::now_utc())
}

/// Formats a timestamp as RFC 3339 (UTC, `Z`).
pub fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

/// Current unix time in seconds (0 before the epoch).
pub fn unix_now() -> u64 {
    time::OffsetDateTime::now_utc().unix_timestamp().max(0) as u64
}
