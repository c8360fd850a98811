//! Payment channels in PostgreSQL: a row per channel; the compare-and-set is one conditional
//! statement (an insert that yields to an existing row, or an update on the version read).

use super::{backend, json, PgStore};
use crate::ChannelStore;
use async_trait::async_trait;
use paygate_domain::channel::ChannelRecord;
use paygate_domain::StoreResult;

/// A version as PostgreSQL's BIGINT.
fn signed(v: u64) -> StoreResult<i64> {
    i64::try_from(v)
        .map_err(|_| paygate_domain::StoreError::Backend("channel version overflow".into()))
}

#[async_trait]
impl ChannelStore for PgStore {
    async fn get_channel(&self, id: &str) -> StoreResult<Option<ChannelRecord>> {
        self.one(sqlx::query("SELECT doc FROM channels WHERE id = $1").bind(id))
            .await
    }

    async fn put_channel_if(&self, expected: u64, next: &ChannelRecord) -> StoreResult<bool> {
        let version = signed(next.version)?;
        let q = if expected == 0 {
            sqlx::query(
                "INSERT INTO channels (id, org_id, version, unclaimed, doc) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
            )
        } else {
            sqlx::query(
                "UPDATE channels SET version = $3, unclaimed = $4, doc = $5 \
                 WHERE id = $1 AND org_id = $2 AND version = $6",
            )
        };
        let done = q
            .bind(&next.id)
            .bind(&next.org_id)
            .bind(version)
            .bind(next.unclaimed() > 0)
            .bind(json(next)?)
            .bind(signed(expected)?)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(done.rows_affected() == 1)
    }

    async fn list_channels(&self, org_id: &str) -> StoreResult<Vec<ChannelRecord>> {
        self.all(sqlx::query("SELECT doc FROM channels WHERE org_id = $1").bind(org_id))
            .await
    }

    async fn unclaimed_channels(&self) -> StoreResult<Vec<ChannelRecord>> {
        self.all(sqlx::query("SELECT doc FROM channels WHERE unclaimed"))
            .await
    }
}
