//! The store on PostgreSQL, for a cluster of nodes sharing one database (issue 17): a sqlx pool,
//! the schema as versioned migrations embedded from `migrations/` (sqlx applies them under an
//! advisory lock, so nodes starting together migrate once), one file per aggregate. Each write
//! is one transaction, committed (so durable) before the call returns. Records are kept whole
//! as JSON text in the serde form the sled store writes; the columns beside them carry the
//! constraints (unique slug, unique path per organisation) and what queries filter on.

mod audit;
mod channels;
mod charges;
mod cluster;
mod counters;
mod orgs;
mod payments;
mod payouts;
mod routes;
mod sql;
mod webhooks;
mod windows;

use paygate_domain::StoreResult;
use serde::de::DeserializeOwned;
use sql::{backend, doc, unreachable};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use std::str::FromStr;
use std::time::Duration;

/// A statement with its arguments bound.
type Query<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

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

/// This process's lease connections, by lease name; `true` while the lock is held on it.
#[derive(Default)]
pub(super) struct Leases {
    pub(super) conns:
        tokio::sync::Mutex<std::collections::HashMap<String, (sqlx::postgres::PgConnection, bool)>>,
    pub(super) held: std::sync::Mutex<Vec<String>>,
}

/// paygate's records in PostgreSQL.
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    /// This process among the nodes: its announcements carry it, so it skips its own.
    node: String,
    leases: std::sync::Arc<Leases>,
    charges: std::sync::Arc<charges::ChargeBatches>,
}

/// Why the database could not be made ready for this node.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("the database URL is not usable: {0}")]
    Url(String),
    #[error("the database is unreachable: {0}")]
    Unreachable(String),
    #[error(
        "the database has schema version {0}, newer than this build knows: \
         run the newer paygate, or a database of this version"
    )]
    NewerSchema(i64),
    #[error("migrating the database: {0}")]
    Migration(String),
}

impl StartError {
    /// Whether waiting may help (the database is down or starting), as opposed to a mistake
    /// only the operator can fix.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unreachable(_))
    }
}

impl PgStore {
    /// A pool for `s` (lazily: the first statement opens the first connection); no migration.
    pub fn connect_lazy(s: &PgSettings) -> Result<Self, StartError> {
        let options = PgConnectOptions::from_str(&s.url)
            .map_err(|e| StartError::Url(e.to_string()))?
            .options([(
                "statement_timeout",
                format!("{}ms", s.statement_timeout.as_millis()),
            )]);
        let pool = PgPoolOptions::new()
            .max_connections(s.pool_size.max(1))
            .acquire_timeout(s.acquire_timeout)
            .connect_lazy_with(options);
        Ok(Self {
            pool,
            node: paygate_domain::ids::new_id("node"),
            leases: Default::default(),
            charges: Default::default(),
        })
    }

    /// Applies the migrations this build knows that the database lacks. A database migrated by
    /// a newer build (a version this one does not know) is refused.
    pub async fn migrate(&self) -> Result<(), StartError> {
        use sqlx::migrate::MigrateError;
        MIGRATOR.run(&self.pool).await.map_err(|e| match e {
            MigrateError::VersionMissing(v) => StartError::NewerSchema(v),
            MigrateError::Execute(e) if unreachable(&e) => StartError::Unreachable(e.to_string()),
            other => StartError::Migration(other.to_string()),
        })
    }

    /// Connects and migrates, waiting while the database is unreachable (a node may start
    /// before its database); `waiting` hears each failed attempt. A mistake (bad URL, newer
    /// schema, failed migration) is returned at once.
    pub async fn open(
        s: &PgSettings,
        mut waiting: impl FnMut(&StartError),
    ) -> Result<Self, StartError> {
        let store = Self::connect_lazy(s)?;
        let mut pause = Duration::from_millis(200);
        loop {
            match store.migrate().await {
                Ok(()) => return Ok(store),
                Err(e) if e.is_transient() => {
                    waiting(&e);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Subscribes to the changes other nodes commit.
    pub async fn changes(&self) -> StoreResult<Changes> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool)
            .await
            .map_err(backend)?;
        listener.listen(CHANGES).await.map_err(backend)?;
        Ok(Changes {
            listener,
            node: self.node.clone(),
        })
    }

    /// The record `q` selects (its `doc` column), if any.
    async fn one<T: DeserializeOwned>(&self, q: Query<'_>) -> StoreResult<Option<T>> {
        q.fetch_optional(&self.pool)
            .await
            .map_err(backend)?
            .map(|r| doc(&r))
            .transpose()
    }

    /// Every record `q` selects (its `doc` column).
    async fn all<T: DeserializeOwned>(&self, q: Query<'_>) -> StoreResult<Vec<T>> {
        q.fetch_all(&self.pool)
            .await
            .map_err(backend)?
            .iter()
            .map(doc)
            .collect()
    }

    /// The pool, for tests that read the schema itself.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// The channel on which every committed change of an organisation (its settings, a route) is
/// announced to the nodes sharing the database: `node org-id [route-id]`, space-separated (ids
/// hold no blanks; PostgreSQL text cannot carry a NUL).
pub const CHANGES: &str = "paygate_changes";

/// A change another node committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub org_id: String,
    pub route_id: Option<String>,
}

/// This node's subscription to [`CHANGES`] (its own announcements are left out).
pub struct Changes {
    listener: sqlx::postgres::PgListener,
    node: String,
}

impl Changes {
    /// The next change of another node; `Ok(None)` when the connection was lost and has been
    /// re-established: announcements made meanwhile are gone, so the caller resyncs.
    pub async fn next(&mut self) -> StoreResult<Option<Change>> {
        loop {
            let Some(n) = self.listener.try_recv().await.map_err(backend)? else {
                return Ok(None);
            };
            let mut parts = n.payload().split(' ');
            let (Some(node), Some(org)) = (parts.next(), parts.next()) else {
                continue;
            };
            if node == self.node {
                continue;
            }
            let route = parts.next().filter(|r| !r.is_empty());
            return Ok(Some(Change {
                org_id: org.to_string(),
                route_id: route.map(str::to_string),
            }));
        }
    }
}

/// Inside a write's transaction: announces the change when the transaction commits.
async fn announce(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    node: &str,
    org_id: &str,
    route_id: Option<&str>,
) -> StoreResult<()> {
    let payload = format!("{node} {org_id} {}", route_id.unwrap_or_default());
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANGES)
        .bind(payload)
        .execute(&mut **tx)
        .await
        .map_err(backend)?;
    Ok(())
}
