//! The sled implementation of [`Store`]: one tree per entity, JSON values, multi-tree
//! transactions where two trees change together, and a flush before a write is acknowledged
//! (a voucher's charge: an append to the voucher journal instead, `journal.rs`).

use crate::traits::*;
use crate::traits::{PaymentReservation, SpendReservation};
use async_trait::async_trait;
use paygate_domain::model::{
    ApiKeyRecord, GatewayPayment, IdempotencyRecord, MetricBucket, Org, Route,
};
use paygate_domain::{StoreError, StoreResult};
use serde::{de::DeserializeOwned, Serialize};
use sled::transaction::{
    ConflictableTransactionError, TransactionError, Transactional, TransactionalTree,
};
use std::path::Path;

mod audit;
mod channels;
mod cluster;
mod codec;
mod counters;
mod journal;
mod orgs;
mod payments;
mod payouts;
mod routes;
#[cfg(test)]
mod tests;
mod webhooks;
mod windows;

use codec::*;

/// The corridor records' trees (`payouts.rs`).
pub struct PayoutTrees {
    pub(super) corridors: sled::Tree,
    /// `org \0 currency` -> corridor id.
    pub(super) corridor_index: sled::Tree,
    pub(super) quotes: sled::Tree,
    pub(super) payouts: sled::Tree,
    /// Ids of payouts still `Initiating` (the provider has not confirmed them): what payout
    /// reconciliation reads, so it never walks the whole payout history.
    pub(super) initiating: sled::Tree,
    /// `org \0 Idempotency-Key` -> `PayIdempotency`.
    pub(super) pay_keys: sled::Tree,
    /// provider payment id -> our payment id.
    pub(super) cpn_index: sled::Tree,
    /// SHA-256 of processed event bodies.
    pub(super) events: sled::Tree,
    /// `provider payment id \0 event key` -> raw body, for events of unknown payouts.
    pub(super) orphans: sled::Tree,
    /// `corridor id \0 payout id`: a corridor's payouts in time order.
    pub(super) by_corridor: sled::Tree,
}

pub struct SledStore {
    pub(super) db: sled::Db,
    pub(super) corridors: PayoutTrees,
    orgs: sled::Tree,
    org_slugs: sled::Tree,
    api_keys: sled::Tree,
    routes: sled::Tree,
    route_paths: sled::Tree,
    idempotency: sled::Tree,
    payments: sled::Tree,
    /// Ids of payments whose outcome is not recorded yet (`RESERVED`, `UNKNOWN`): what
    /// reconciliation reads, so it never walks the whole payment history.
    payments_open: sled::Tree,
    /// The payment ledger's indexes (`payments.rs`).
    payments_ledger: sled::Tree,
    nonces: sled::Tree,
    plan_usage: sled::Tree,
    metrics: sled::Tree,
    /// Hourly and daily roll-ups per route (`counters.rs`).
    rollups: sled::Tree,
    /// Count batches taken (their ids), so a retried batch is added once.
    count_batches: sled::Tree,
    /// x402 payment identifiers by organisation and id (`PaymentIdRecord`).
    payment_ids: sled::Tree,
    mcp_spend: sled::Tree,
    mcp_sessions: sled::Tree,
    /// Payment channels by id (`ChannelRecord`).
    channels: sled::Tree,
    /// Ids of channels with a charge not yet claimed.
    channels_unclaimed: sled::Tree,
    /// `org id \0 channel id`: an organisation's channels.
    channels_by_org: sled::Tree,
    /// What served requests moved of each channel (`ChannelCharges`), kept apart from the
    /// record so the write committing a voucher is small; it wins over the record's copy.
    channel_charges: sled::Tree,
    /// The audit log by `org \0 id` (`AuditEntry`).
    audit: sled::Tree,
    /// Access windows by `org \0 route \0 payer` (`AccessWindow`).
    windows: sled::Tree,
    /// Spent sign-in nonces, each with the unix second it is kept until.
    sign_in_nonces: sled::Tree,
    /// Webhook endpoints by `org \0 id`, deliveries by id, and the pending ones' ids.
    webhook_endpoints: sled::Tree,
    webhook_deliveries: sled::Tree,
    webhook_pending: sled::Tree,
    /// `endpoint \0 delivery id`: an endpoint's deliveries.
    webhook_by_endpoint: sled::Tree,
    /// The leases asked for (all held: one process opens a sled database).
    leases: std::sync::Mutex<std::collections::BTreeSet<String>>,
    commit: GroupCommit,
    /// Where a voucher's charge is made safe from the process's death; `None`: a voucher's
    /// answer waits for a flush of sled's log like every other write.
    journal: Option<std::sync::Arc<journal::Journal>>,
}

/// How a sled store is opened.
#[derive(Debug, Clone)]
pub struct SledOptions {
    /// sled's page cache, in bytes.
    pub cache_bytes: u64,
    /// How often the voucher journal is synced to disk (a power loss loses at most this
    /// interval's charges; a process's death loses none); `None`: no journal, each voucher's
    /// answer waits for a flush of sled's log.
    pub voucher_sync: Option<std::time::Duration>,
}

impl Default for SledOptions {
    fn default() -> Self {
        Self {
            cache_bytes: paygate_domain::SLED_CACHE_CAPACITY_MB << 20,
            voucher_sync: Some(std::time::Duration::from_millis(
                paygate_domain::VOUCHER_SYNC_MS,
            )),
        }
    }
}

/// Group commit: one `flush` of sled's log makes every write made before it started durable,
/// so callers waiting together share one flush instead of queueing one each. Up to
/// [`MAX_FLUSHES`] flushes run at once: a write made while a flush is running starts the next
/// one instead of waiting for the running one to end first (a write waits about one flush, not
/// two); sled makes a later flush wait for the earlier log anyway, so a flush that returned
/// covers everything before its start.
struct GroupCommit {
    /// Tickets handed out: a caller takes one after its write.
    announced: std::sync::atomic::AtomicU64,
    /// The highest ticket a started flush covers.
    started: std::sync::atomic::AtomicU64,
    /// Every ticket up to this one is on disk.
    flushed: std::sync::atomic::AtomicU64,
    /// One permit a running flush.
    running: tokio::sync::Semaphore,
    /// Told when a flush ended.
    ended: tokio::sync::Notify,
}

impl Default for GroupCommit {
    fn default() -> Self {
        Self {
            announced: Default::default(),
            started: Default::default(),
            flushed: Default::default(),
            running: tokio::sync::Semaphore::new(MAX_FLUSHES),
            ended: Default::default(),
        }
    }
}

/// How many flushes of sled's log may run at once.
const MAX_FLUSHES: usize = 2;

/// How many times a flush lets other ready writers join it before it starts.
const GATHER_ROUNDS: usize = 4;

fn decode_u64(b: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(b.try_into().ok()?))
}

pub(super) fn abort<T>(e: StoreError) -> Result<T, ConflictableTransactionError<StoreError>> {
    Err(ConflictableTransactionError::Abort(e))
}

pub(super) fn tx_err(e: TransactionError<StoreError>) -> StoreError {
    match e {
        TransactionError::Abort(e) => e,
        TransactionError::Storage(e) => backend(e),
    }
}

/// Inside a transaction: writes a record and keeps its id in `open` exactly while `is_open`
/// (a payment or payout still in flight). Every write that can change such a record's status
/// goes through it, so the index and the records commit together (`claim_redemption` only
/// stamps an already settled payment).
pub(super) fn put_tracked(
    records: &TransactionalTree,
    open: &TransactionalTree,
    id: &[u8],
    bytes: &[u8],
    is_open: bool,
) -> Result<(), ConflictableTransactionError<StoreError>> {
    records.insert(id, bytes)?;
    if is_open {
        open.insert(id, &[][..])?;
    } else {
        open.remove(id)?;
    }
    Ok(())
}

/// The records whose ids `open` holds and that are still open, decoded.
pub(super) fn open_records<T: DeserializeOwned>(
    records: &sled::Tree,
    open: &sled::Tree,
    is_open: impl Fn(&T) -> bool,
) -> StoreResult<Vec<T>> {
    let mut out = Vec::new();
    for id in open.iter().keys() {
        if let Some(v) = records.get(id.map_err(backend)?).map_err(backend)? {
            let record = dec(&v)?;
            if is_open(&record) {
                out.push(record);
            }
        }
    }
    Ok(out)
}

/// Builds an index for a store written before the index existed, once per database (a
/// marker in the `meta` tree): one walk over `records`, `keys` giving each record's index keys
/// from its key and value.
pub(super) fn build_index<T: DeserializeOwned>(
    db: &sled::Db,
    records: &sled::Tree,
    index: &sled::Tree,
    marker: &str,
    keys: impl Fn(&[u8], &T) -> Vec<Vec<u8>>,
) -> StoreResult<()> {
    let meta = db.open_tree("meta").map_err(backend)?;
    if meta.contains_key(marker).map_err(backend)? {
        return Ok(());
    }
    for kv in records.iter() {
        let (id, v) = kv.map_err(backend)?;
        for k in keys(&id, &dec(&v)?) {
            index.insert(k, &[][..]).map_err(backend)?;
        }
    }
    meta.insert(marker, &[][..]).map_err(backend)?;
    db.flush().map_err(backend)?;
    Ok(())
}

/// The open-records index of `build_index`: a record's own key while `is_open`.
pub(super) fn open_key<T>(is_open: impl Fn(&T) -> bool) -> impl Fn(&[u8], &T) -> Vec<Vec<u8>> {
    move |id, r| {
        if is_open(r) {
            vec![id.to_vec()]
        } else {
            Vec::new()
        }
    }
}

/// The end (exclusive) of the keys under `prefix` (which ends in its `\0` separator).
pub(super) fn prefix_end(mut prefix: Vec<u8>) -> Vec<u8> {
    if let Some(last) = prefix.last_mut() {
        *last = 1;
    }
    prefix
}

impl SledStore {
    /// sled's page cache by default, in MiB ([`paygate_domain::SLED_CACHE_CAPACITY_MB`]).
    pub const DEFAULT_CACHE_CAPACITY_MB: u64 = paygate_domain::SLED_CACHE_CAPACITY_MB;

    /// Opens (or creates) the database in `dir` with the default options.
    pub fn open(dir: &Path) -> StoreResult<Self> {
        Self::open_with(dir, &SledOptions::default())
    }

    /// Opens (or creates) the database in `dir`, first replaying what the voucher journal
    /// holds (whether or not `options` asks for one from now on).
    pub fn open_with(dir: &Path, options: &SledOptions) -> StoreResult<Self> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(options.cache_bytes)
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(backend)?;
        let tree = |n: &str| db.open_tree(n).map_err(backend);
        let mut store = Self {
            orgs: tree("orgs")?,
            org_slugs: tree("org_slugs")?,
            api_keys: tree("api_keys")?,
            routes: tree("routes")?,
            route_paths: tree("route_paths")?,
            idempotency: tree("idempotency")?,
            payments: tree("payments")?,
            payments_open: tree("payments_open")?,
            payments_ledger: tree("payments_ledger")?,
            nonces: tree("nonces")?,
            plan_usage: tree("plan_usage")?,
            metrics: tree("metrics")?,
            rollups: tree("rollups")?,
            count_batches: tree("count_batches")?,
            payment_ids: tree("payment_ids")?,
            mcp_spend: tree("mcp_spend")?,
            mcp_sessions: tree("mcp_sessions")?,
            channels: tree("channels")?,
            channels_unclaimed: tree("channels_unclaimed")?,
            channels_by_org: tree("channels_by_org")?,
            channel_charges: tree("channel_charges")?,
            audit: tree("audit_log")?,
            windows: tree("access_windows")?,
            sign_in_nonces: tree("sign_in_nonces")?,
            webhook_endpoints: tree("webhook_endpoints")?,
            webhook_deliveries: tree("webhook_deliveries")?,
            webhook_pending: tree("webhook_pending")?,
            webhook_by_endpoint: tree("webhook_by_endpoint")?,
            leases: Default::default(),
            commit: Default::default(),
            journal: None,
            corridors: PayoutTrees::open(&db)?,
            db,
        }
        .with_indexes()?;
        let next = store.replay_journal(dir)?;
        if let Some(interval) = options.voucher_sync {
            store.journal = Some(journal::Journal::start(
                dir,
                next,
                store.db.clone(),
                interval,
            )?);
        }
        Ok(store)
    }

    fn with_indexes(self) -> StoreResult<Self> {
        build_index(
            &self.db,
            &self.payments,
            &self.payments_open,
            "payments_open.v1",
            open_key(|p: &GatewayPayment| p.status.is_open()),
        )?;
        self.corridors.build_indexes(&self.db)?;
        build_index(
            &self.db,
            &self.payments,
            &self.payments_ledger,
            "payments_ledger.v1",
            |_, p: &GatewayPayment| ledger_keys(p).to_vec(),
        )?;
        build_index(
            &self.db,
            &self.channels,
            &self.channels_by_org,
            "channels_by_org.v1",
            |id, c: &paygate_domain::channel::ChannelRecord| vec![org_key(&c.org_id, id)],
        )?;
        Ok(self)
    }

    /// Waits until every write so far is on disk. sled 0.34's `flush_async` deadlocks when
    /// called concurrently (sled issue 1308, fixed only in unreleased code), so the blocking
    /// `flush` runs on the blocking pool ([`GroupCommit`]); a caller whose write a running flush
    /// already covers (it started after the caller's ticket) waits for that one.
    pub(super) async fn durable(&self) -> StoreResult<()> {
        use std::sync::atomic::Ordering::SeqCst;
        let c = &self.commit;
        let ticket = c.announced.fetch_add(1, SeqCst) + 1;
        // Let the writers the runtime can run now write first, so this flush covers them too
        // (a flush costs far more than a write: sled wakes its IO threads for it).
        for _ in 0..GATHER_ROUNDS {
            let before = c.announced.load(SeqCst);
            tokio::task::yield_now().await;
            if c.announced.load(SeqCst) == before {
                break;
            }
        }
        loop {
            let ended = c.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if c.flushed.load(SeqCst) >= ticket {
                return Ok(());
            }
            if c.started.load(SeqCst) < ticket {
                if let Ok(permit) = c.running.try_acquire() {
                    // Every ticket up to here was taken after its write: this flush covers
                    // them all.
                    let upto = c.announced.load(SeqCst);
                    c.started.fetch_max(upto, SeqCst);
                    let db = self.db.clone();
                    let flushed = tokio::task::spawn_blocking(move || db.flush()).await;
                    match flushed {
                        Ok(Ok(_)) => {
                            c.flushed.fetch_max(upto, SeqCst);
                        }
                        // The writes it was to cover are not known durable: their callers
                        // (this one aside) start flushes of their own.
                        _ => c.started.store(c.flushed.load(SeqCst), SeqCst),
                    }
                    // Free before telling: a caller told may start the next flush at once.
                    drop(permit);
                    c.ended.notify_waiters();
                    flushed.map_err(backend)?.map_err(backend)?;
                    return Ok(());
                }
            }
            ended.await;
        }
    }

    pub(super) fn get<T: DeserializeOwned>(
        tree: &sled::Tree,
        key: &[u8],
    ) -> StoreResult<Option<T>> {
        match tree.get(key).map_err(backend)? {
            Some(v) => Ok(Some(dec(&v)?)),
            None => Ok(None),
        }
    }
}

#[async_trait]
impl Store for SledStore {
    async fn flush(&self) -> StoreResult<()> {
        self.durable().await
    }
}
