//! Channel charges written in batches: concurrent vouchers' compare-and-set updates gathered
//! into one statement and one commit.

use super::sql::backend;
use paygate_domain::{StoreError, StoreResult};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// The compare-and-set of one channel's row: `$1` id, `$2` organisation, `$3` new version,
/// `$4` unclaimed, `$5` record, `$6` the version read.
pub(super) const UPDATE_ONE: &str = "UPDATE channels SET version = $3, unclaimed = $4, doc = $5 \
                          WHERE id = $1 AND org_id = $2 AND version = $6";

/// Most writes one batch statement carries.
pub(super) const BATCH_MAX: usize = 256;
/// How many times a batch's sender lets the runtime's other ready writers queue first (as the
/// sled store's group commit gathers before a flush).
pub(super) const GATHER_ROUNDS: usize = 4;

/// One queued compare-and-set and where its answer goes.
pub(super) struct Pending {
    pub(super) id: String,
    pub(super) org_id: String,
    pub(super) expected: i64,
    pub(super) version: i64,
    pub(super) unclaimed: bool,
    pub(super) doc: String,
    pub(super) answer: oneshot::Sender<StoreResult<bool>>,
}

/// The voucher writes waiting for a batch, and the turn to send one.
#[derive(Default)]
pub(super) struct ChargeBatches {
    pub(super) queue: Mutex<Vec<Pending>>,
    pub(super) turn: Arc<tokio::sync::Mutex<()>>,
}

impl ChargeBatches {
    pub(super) fn push(&self, p: Pending) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).push(p);
    }

    pub(super) fn queued(&self) -> usize {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Up to [`BATCH_MAX`] queued writes, at most one per channel (a second write of a channel
    /// waits for the next batch: one UPDATE cannot say which of two rows for it applied).
    pub(super) fn take(&self) -> Vec<Pending> {
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
pub(super) async fn send_batch(pool: sqlx::PgPool, mut batch: Vec<Pending>) {
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
            let unavailable = super::sql::unreachable(&e);
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
