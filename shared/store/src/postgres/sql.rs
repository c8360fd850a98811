//! The driver's answers as the store's: errors, the `doc` column, counters.

use paygate_domain::{StoreError, StoreResult};
use serde::de::DeserializeOwned;
use sqlx::postgres::PgRow;
use sqlx::Row;

/// A connection failure: the database is away, not wrong.
pub(super) fn unreachable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        // The server shutting down or restarting (class 57P: operator intervention), or not
        // accepting connections yet (57P03).
        sqlx::Error::Database(d) => d.code().is_some_and(|c| c.starts_with("57P")),
        _ => false,
    }
}

/// A driver error as a store error (constraint violations are mapped where they mean
/// something).
pub(super) fn backend(e: sqlx::Error) -> StoreError {
    if unreachable(&e) {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Backend(e.to_string())
    }
}

/// Whether `e` violates the named unique constraint.
pub(super) fn violates(e: &sqlx::Error, constraint: &str) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation() && d.constraint() == Some(constraint))
}

/// The `doc` column of `row` as a record.
pub(super) fn doc<T: DeserializeOwned>(row: &PgRow) -> StoreResult<T> {
    let text: String = row.try_get("doc").map_err(backend)?;
    serde_json::from_str(&text).map_err(|e| StoreError::Backend(format!("stored record: {e}")))
}

/// A record as its `doc` column.
pub(super) fn json<T: serde::Serialize + ?Sized>(record: &T) -> StoreResult<String> {
    serde_json::to_string(record).map_err(|e| StoreError::Backend(e.to_string()))
}

/// A counter as PostgreSQL's `bigint`.
pub(super) fn to_i64(v: u64) -> StoreResult<i64> {
    i64::try_from(v).map_err(|_| StoreError::Backend(format!("{v} does not fit a bigint")))
}

/// A `bigint` counter read back (never negative by the schema's checks).
pub(super) fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}
