//! The store on PostgreSQL, for a cluster of nodes sharing one database (issue 17): a sqlx pool,
//! the schema as versioned migrations embedded from `migrations/` (sqlx applies them under an
//! advisory lock, so nodes starting together migrate once), one file per aggregate. Each write
//! is one transaction, committed (so durable) before the call returns. Records are kept whole
//! as JSONB in the serde form the sled store writes; the columns beside them carry the
//! constraints (unique slug, unique path per organisation) and what queries filter on.

mod counters;
mod orgs;
mod payments;
mod payouts;
mod routes;

use paygate_domain::{StoreError, StoreResult};
use serde::de::DeserializeOwned;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::Row;
use std::str::FromStr;
use std::time::Duration;

/// The schema, embedded at build time.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Every aggregate is stored; a commit is durable, so there is nothing left to flush.
#[async_trait::async_trait]
impl crate::Store for PgStore {
    async fn flush(&self) -> StoreResult<()> {
        Ok(())
    }
}

/// How to reach the database.
#[derive(Debug, Clone)]
pub struct PgSettings {
    /// `postgres://user:password@host:port/db` (from the environment, never the config file).
    pub url: String,
    pub pool_size: u32,
    /// PostgreSQL's `statement_timeout` for every statement of the pool.
    pub statement_timeout: Duration,
    /// How long a caller waits for a pooled connection.
    pub acquire_timeout: Duration,
}

/// paygate's records in PostgreSQL.
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
}

impl PgStore {
    /// Connects (lazily: the first statement opens the first connection) without migrating.
    pub fn connect_lazy(s: &PgSettings) -> StoreResult<Self> {
        let options = PgConnectOptions::from_str(&s.url)
            .map_err(|e| StoreError::Backend(format!("PAYGATE_DATABASE_URL: {e}")))?
            .options([(
                "statement_timeout",
                format!("{}ms", s.statement_timeout.as_millis()),
            )]);
        let pool = PgPoolOptions::new()
            .max_connections(s.pool_size.max(1))
            .acquire_timeout(s.acquire_timeout)
            .connect_lazy_with(options);
        Ok(Self { pool })
    }

    /// Applies the migrations this build knows that the database lacks. A database migrated by
    /// a newer build (a version this one does not know) is refused.
    pub async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await.map_err(|e| match e {
            sqlx::migrate::MigrateError::VersionMissing(v) => StoreError::Backend(format!(
                "the database has schema version {v}, newer than this build knows: \
                 run the newer paygate, or a database of this version"
            )),
            other => StoreError::Backend(format!("migration: {other}")),
        })
    }

    /// The pool, for the parts that listen or lock on their own connection.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// A driver error as a store error (constraint violations are mapped where they mean
/// something).
fn backend(e: sqlx::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// Whether `e` violates the named unique constraint.
fn violates(e: &sqlx::Error, constraint: &str) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation() && d.constraint() == Some(constraint))
}

/// The `doc` column of `row` as a record.
fn doc<T: DeserializeOwned>(row: &PgRow) -> StoreResult<T> {
    let sqlx::types::Json(v) = row
        .try_get::<sqlx::types::Json<T>, _>("doc")
        .map_err(backend)?;
    Ok(v)
}

/// A counter as PostgreSQL's `bigint`.
fn to_i64(v: u64) -> StoreResult<i64> {
    i64::try_from(v).map_err(|_| StoreError::Backend(format!("{v} does not fit a bigint")))
}

/// A `bigint` counter read back (never negative by the schema's checks).
fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}
