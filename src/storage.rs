//! Opening the configured store: sled in its directory, or PostgreSQL (migrated first, waited
//! for while unreachable). Used by `serve` at start and by `handover` after an upgrade.

use anyhow::Context;
use paygate_config::{StorageBackend, StorageConfig};
use paygate_store::postgres::{PgSettings, PgStore};
use paygate_store::{SledOptions, SledStore, Store};
use std::sync::Arc;
use std::time::Duration;

/// The PostgreSQL settings of `storage`, the URL read from its environment variable.
pub fn pg_settings(storage: &StorageConfig) -> anyhow::Result<PgSettings> {
    let env = &storage.database_url_env;
    let url = std::env::var(env)
        .ok()
        .filter(|u| !u.trim().is_empty())
        .with_context(|| {
            format!("storage.backend = \"postgres\" needs the database URL in {env}")
        })?;
    Ok(PgSettings {
        url,
        pool_size: storage.pool_size,
        statement_timeout: Duration::from_millis(storage.statement_timeout_ms.max(1)),
        acquire_timeout: Duration::from_secs(5),
    })
}

pub(crate) type Opened = (Arc<dyn Store>, Option<PgStore>);

/// Opens the configured store (and, on PostgreSQL, the handle the cluster follower listens
/// with). PostgreSQL is migrated first; while it is unreachable the node waits (a warning per
/// attempt, and `waiting` hears why) instead of exiting.
pub(crate) async fn open_store(
    storage: &StorageConfig,
    mut waiting: impl FnMut(&paygate_store::postgres::StartError),
) -> anyhow::Result<Opened> {
    match storage.backend {
        StorageBackend::Sled => {
            let options = SledOptions {
                cache_bytes: storage.cache_capacity_mb.saturating_mul(1 << 20),
                voucher_sync: (storage.voucher_sync_ms > 0)
                    .then(|| Duration::from_millis(storage.voucher_sync_ms)),
            };
            let store = SledStore::open_with(&storage.path, &options)
                .with_context(|| format!("opening store at {}", storage.path.display()))?;
            Ok((Arc::new(store), None))
        }
        StorageBackend::Postgres => {
            let settings = pg_settings(storage)?;
            let store = PgStore::open(&settings, |e| {
                tracing::warn!(error = %e, "waiting for the database");
                waiting(e);
            })
            .await
            .context("opening the PostgreSQL store")?;
            tracing::info!("PostgreSQL store ready");
            Ok((Arc::new(store.clone()), Some(store)))
        }
    }
}
