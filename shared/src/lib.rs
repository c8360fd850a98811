//! paygate's shared core: domain types, money, configuration, the x402 codec, the store and the
//! in-memory route table that the proxy and the control plane both read.

pub mod address;
pub mod apikey;
pub mod config;
pub mod error;
pub mod facilitator;
pub mod ids;
pub mod metrics;
pub mod model;
pub mod money;
pub mod network;
pub mod payments;
pub mod payout;
pub mod route_path;
pub mod route_table;
pub mod secrets;
pub mod store;
pub mod target_policy;
pub mod usage;
pub mod x402;

pub use error::{ErrorBody, ErrorCode, FieldProblem};
pub use money::UsdcAmount;

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
