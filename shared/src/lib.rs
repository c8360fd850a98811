//! What the proxy and the control plane both use beyond the x402 protocol (`paygate-x402`):
//! configuration, records, the store, the in-memory route table, plan usage, metrics, the
//! payment service and the payout engine.

pub mod apikey;
pub mod config;
pub mod error;
pub mod ids;
pub mod metrics;
pub mod model;
pub mod payments;
pub mod payout;
pub mod route_path;
pub mod route_table;
pub mod secrets;
pub mod store;
pub mod target_policy;
pub mod usage;

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
