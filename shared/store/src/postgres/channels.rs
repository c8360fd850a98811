//! Payment channels in PostgreSQL: a row per channel; the compare-and-set is one conditional
//! statement (an insert that yields to an existing row, or an update on the version read).
//!
//! The voucher writes (charges only) of concurrent requests share statements: each writer queues
//! its compare-and-set, and one writer at a time sends what is queued as one UPDATE over the
//! batch's rows (each row still conditional on its own version) and hands every writer its
//! answer. One statement and one commit carry many vouchers, where each used to pay its own
//! round trip, parse and WAL flush; a channel's row is written once per voucher as before.

use super::charges::{send_batch, Pending, GATHER_ROUNDS, UPDATE_ONE};
use super::sql::{backend, json};
use super::PgStore;

use crate::ChannelStore;
use async_trait::async_trait;
use paygate_domain::channel::ChannelRecord;
use paygate_domain::{StoreError, StoreResult};
use tokio::sync::oneshot;

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
            sqlx::query(UPDATE_ONE)
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

    async fn put_channel_charges_if(
        &self,
        expected: u64,
        next: &ChannelRecord,
    ) -> StoreResult<bool> {
        if expected == 0 {
            return self.put_channel_if(expected, next).await;
        }
        let (answer, mut answered) = oneshot::channel();
        let batches = &self.charges;
        batches.push(Pending {
            id: next.id.clone(),
            org_id: next.org_id.clone(),
            expected: signed(expected)?,
            version: signed(next.version)?,
            unclaimed: next.unclaimed() > 0,
            doc: json(next)?,
            answer,
        });
        loop {
            let turn = batches.turn.clone().lock_owned().await;
            // A batch sent while this writer waited may have carried its write.
            match answered.try_recv() {
                Ok(result) => return result,
                Err(oneshot::error::TryRecvError::Closed) => {
                    return Err(StoreError::Unavailable("channel write abandoned".into()))
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            for _ in 0..GATHER_ROUNDS {
                let before = batches.queued();
                tokio::task::yield_now().await;
                if batches.queued() == before {
                    break;
                }
            }
            let batch = batches.take();
            // The batch goes on even if this writer's request is dropped meanwhile: its other
            // writers wait for their answers, and the turn is held until it is sent.
            let pool = self.pool.clone();
            let sent = tokio::spawn(async move {
                send_batch(pool, batch).await;
                drop(turn);
            });
            let _ = sent.await;
            if let Ok(result) = answered.try_recv() {
                return result;
            }
            // Not in that batch (a second write of a channel already in it): the next one.
        }
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
