//! paygate's domain: the records kept (organisations, API keys, routes, gateway payments,
//! metric buckets, idempotency records), ids and clocks, API keys, sealed secrets, and the
//! error vocabulary every part answers with (`ErrorCode`, the one JSON error body,
//! `StoreError`). It knows nothing of HTTP servers or of how records are stored.

/// sled's page cache by default, in MiB (`storage.cache_capacity_mb`, and the store's default;
/// sled counts on-disk bytes, so it takes a few times that in memory). Here, below both the
/// store and the configuration, so the configuration does not depend on the store for it.
pub const SLED_CACHE_CAPACITY_MB: u64 = 16;

/// How often sled's voucher journal is synced to disk by default, in milliseconds
/// (`storage.voucher_sync_ms`; 0: no journal, each voucher's answer waits for a flush).
pub const VOUCHER_SYNC_MS: u64 = 100;

pub mod apikey;
pub mod audit;
pub mod channel;
pub mod clock;
pub mod error;
pub mod escrow;
pub mod ids;
pub mod model;
pub mod origin_proof;
pub mod protocol;
pub mod rollup;
pub mod route_path;
pub mod secrets;
pub mod webhook;
pub mod window;

pub use clock::{now_rfc3339, rfc3339, unix_now};
pub use error::{ErrorBody, ErrorCode, FieldProblem, StoreError, StoreResult};
