//! Payment channels in PostgreSQL: a row per channel; the compare-and-set is one conditional
//! statement (an insert that yields to an existing row, or an update on the version read).
//!
//! The voucher writes (charges only) of concurrent requests share statements: each writer queues
//! its compare-and-set, and one writer at a time sends what is queued as one UPDATE over the
//! batch's rows (each row still conditional on its own version) and hands every writer its
//! answer. One statement and one commit carry many vouchers, where each used to pay its own
//! round trip, parse and WAL flush; a channel's row is written once per voucher as before.

use super::{backend, json, PgStore};

use crate::ChannelStore;
use async_trait::async_trait;
use paygate_domain::channel::ChannelRecord;
use paygate_domain::{StoreError, StoreResult};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// The compare-and-set of one channel's row: `$1` id, `$2` organisation, `$3` new version,
/// `$4` unclaimed, `$5` record, `$6` the version read.
const UPDATE_ONE: &str = "UPDATE channels SET version = $3, unclaimed = $4, doc = $5 \
                          WHERE id = $1 AND org_id = $2 AND version = $6";

/// Most writes one batch statement carries.
const BATCH_MAX: usize = 256;
/// How many times a batch's sender lets the runtime's other ready writers queue first (as the
/// sled store's group commit gathers before a flush).
const GATHER_ROUNDS: usize = 4;

/// One queued compare-and-set and where its answer goes.
struct Pending {
    id: String,
    org_id: String,
    expected: i64,
    version: i64,
    unclaimed: bool,
    doc: String,
    answer: oneshot::Sender<StoreResult<bool>>,
}

/// The voucher writes waiting for a batch, and the turn to send one.
#[derive(Default)]
pub(super) struct ChargeBatches {
    queue: Mutex<Vec<Pending>>,
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl ChargeBatches {
    fn push(&self, p: Pending) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).push(p);
    }

    fn queued(&self) -> usize {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Up to [`BATCH_MAX`] queued writes, at most one per channel (a second write of a channel
    /// waits for the next batch: one UPDATE cannot say which of two rows for it applied).
    fn take(&self) -> Vec<Pending> {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let mut seen = std::collections::HashSet::new();
        let (mut batch, mut rest) = (Vec::new(), Vec::new());
        for p in queue.drain(..) {
            if batch.len() < BATCH_MAX && seen.insert(p.id.clone()) {
                batch.push(p);
            } else {
                rest.push(p);
            }
        }
        *queue = rest;
        batch
    }
}

/// Sends one batch as one statement and answers each of its writers (a batch of one as the
/// plain compare-and-set, which PostgreSQL runs for a third of the batch statement's CPU).
async fn send_batch(pool: sqlx::PgPool, mut batch: Vec<Pending>) {
    if batch.len() == 1 {
        let p = batch.remove(0);
        let done = sqlx::query(UPDATE_ONE)
            .bind(&p.id)
            .bind(&p.org_id)
            .bind(p.version)
            .bind(p.unclaimed)
            .bind(&p.doc)
            .bind(p.expected)
            .execute(&pool)
            .await;
        let _ = p
            .answer
            .send(done.map(|d| d.rows_affected() == 1).map_err(backend));
        return;
    }
    // In the channels' order, so two nodes' batches lock shared rows in one order.
    batch.sort_by(|a, b| a.id.cmp(&b.id));
    let mut cols = (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut answers = Vec::with_capacity(batch.len());
    for p in batch {
        cols.0.push(p.id.clone());
        cols.1.push(p.org_id);
        cols.2.push(p.expected);
        cols.3.push(p.version);
        cols.4.push(p.unclaimed);
        cols.5.push(p.doc);
        answers.push((p.id, p.answer));
    }
    let mut tries = 0;
    let done = loop {
        let done: Result<Vec<String>, _> = sqlx::query_scalar(
            "UPDATE channels AS c SET version = v.version, unclaimed = v.unclaimed, doc = v.doc \
             FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bool[], \
                         $6::text[]) AS v(id, org_id, expected, version, unclaimed, doc) \
             WHERE c.id = v.id AND c.org_id = v.org_id AND c.version = v.expected \
             RETURNING c.id",
        )
        .bind(&cols.0)
        .bind(&cols.1)
        .bind(&cols.2)
        .bind(&cols.3)
        .bind(&cols.4)
        .bind(&cols.5)
        .fetch_all(&pool)
        .await;
        // A deadlock with another node's statement rolled this one back whole: send it again.
        tries += 1;
        match done {
            Err(sqlx::Error::Database(d)) if d.code().as_deref() == Some("40P01") && tries < 3 => {}
            done => break done,
        }
    };
    match done {
        Ok(written) => {
            let written: std::collections::HashSet<String> = written.into_iter().collect();
            for (id, answer) in answers {
                let _ = answer.send(Ok(written.contains(&id)));
            }
        }
        Err(e) => {
            let unavailable = super::unreachable(&e);
            let message = e.to_string();
            for (_, answer) in answers {
                let _ = answer.send(Err(if unavailable {
                    StoreError::Unavailable(message.clone())
                } else {
                    StoreError::Backend(message.clone())
                }));
            }
        }
    }
}

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
