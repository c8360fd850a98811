//! The sled implementation of [`Store`]: one tree per entity, JSON values, multi-tree
//! transactions where two trees change together, and a flush before a write is acknowledged.

use super::{PaymentReservation, SpendReservation, Store, StoreError, StoreResult};
use crate::model::{ApiKeyRecord, GatewayPayment, IdempotencyRecord, MetricBucket, Org, Route};
use async_trait::async_trait;
use serde::{de::DeserializeOwned, Serialize};
use sled::transaction::{
    ConflictableTransactionError, TransactionError, Transactional, TransactionalTree,
};
use std::path::Path;

pub struct SledStore {
    pub(super) db: sled::Db,
    pub(super) corridors: super::payouts::PayoutTrees,
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
    nonces: sled::Tree,
    plan_usage: sled::Tree,
    metrics: sled::Tree,
    mcp_spend: sled::Tree,
}

pub(super) fn backend<E: std::fmt::Display>(e: E) -> StoreError {
    StoreError::Backend(e.to_string())
}

pub(super) fn enc<T: Serialize>(v: &T) -> StoreResult<Vec<u8>> {
    serde_json::to_vec(v).map_err(backend)
}

pub(super) fn dec<T: DeserializeOwned>(b: &[u8]) -> StoreResult<T> {
    serde_json::from_slice(b).map_err(backend)
}

/// `a \0 b`: composite keys scoped by organisation (ids and slugs never contain NUL).
pub(super) fn key2(a: &str, b: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(a.len() + b.len() + 1);
    k.extend_from_slice(a.as_bytes());
    k.push(0);
    k.extend_from_slice(b.as_bytes());
    k
}

fn decode_u64(b: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(b.try_into().ok()?))
}

pub(super) fn prefix(a: &str) -> Vec<u8> {
    let mut k = a.as_bytes().to_vec();
    k.push(0);
    k
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

/// Builds an open-records index once for a store written before the index existed: one walk
/// over `records`, then a marker in the `meta` tree so later opens skip it.
pub(super) fn build_open_index<T: DeserializeOwned>(
    db: &sled::Db,
    records: &sled::Tree,
    open: &sled::Tree,
    marker: &str,
    is_open: impl Fn(&T) -> bool,
) -> StoreResult<()> {
    let meta = db.open_tree("meta").map_err(backend)?;
    if meta.contains_key(marker).map_err(backend)? {
        return Ok(());
    }
    for kv in records.iter() {
        let (id, v) = kv.map_err(backend)?;
        if is_open(&dec(&v)?) {
            open.insert(id, &[][..]).map_err(backend)?;
        }
    }
    meta.insert(marker, &[][..]).map_err(backend)?;
    db.flush().map_err(backend)?;
    Ok(())
}

/// Inside a transaction: aborts with the stored record if the idempotency key was used.
fn idem_unused(
    idems: &TransactionalTree,
    idem: Option<&IdempotencyRecord>,
) -> Result<(), ConflictableTransactionError<StoreError>> {
    let Some(rec) = idem else { return Ok(()) };
    match idems.get(key2(&rec.org_id, &rec.key))? {
        Some(prev) => {
            let prev: IdempotencyRecord =
                dec(&prev).map_err(ConflictableTransactionError::Abort)?;
            abort(StoreError::IdempotencyKeyUsed(Box::new(prev)))
        }
        None => Ok(()),
    }
}

impl SledStore {
    /// Opens (or creates) the database in `dir` with the default page cache.
    pub fn open(dir: &Path) -> StoreResult<Self> {
        Self::open_with_cache(
            dir,
            crate::config::StorageConfig::DEFAULT_CACHE_CAPACITY_MB << 20,
        )
    }

    /// Opens (or creates) the database in `dir`; sled's page cache holds at most `cache_bytes`.
    pub fn open_with_cache(dir: &Path, cache_bytes: u64) -> StoreResult<Self> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(backend)?;
        let tree = |n: &str| db.open_tree(n).map_err(backend);
        Self {
            orgs: tree("orgs")?,
            org_slugs: tree("org_slugs")?,
            api_keys: tree("api_keys")?,
            routes: tree("routes")?,
            route_paths: tree("route_paths")?,
            idempotency: tree("idempotency")?,
            payments: tree("payments")?,
            payments_open: tree("payments_open")?,
            nonces: tree("nonces")?,
            plan_usage: tree("plan_usage")?,
            metrics: tree("metrics")?,
            mcp_spend: tree("mcp_spend")?,
            corridors: super::payouts::PayoutTrees::open(&db)?,
            db,
        }
        .with_open_indexes()
    }

    fn with_open_indexes(self) -> StoreResult<Self> {
        build_open_index(
            &self.db,
            &self.payments,
            &self.payments_open,
            "payments_open.v1",
            |p: &GatewayPayment| p.status.is_open(),
        )?;
        self.corridors.build_open_index(&self.db)?;
        Ok(self)
    }

    /// Waits until every write so far is on disk. sled 0.34's `flush_async` deadlocks when
    /// called concurrently (sled issue 1308, fixed only in unreleased code), so the blocking
    /// `flush` runs on the blocking pool; concurrent callers share sled's one flush of the log.
    pub(super) async fn durable(&self) -> StoreResult<()> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || db.flush())
            .await
            .map_err(backend)?
            .map_err(backend)?;
        Ok(())
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
    async fn create_org(&self, org: &Org, key: &ApiKeyRecord) -> StoreResult<()> {
        let org_bytes = enc(org)?;
        let key_bytes = enc(key)?;
        (&self.orgs, &self.org_slugs, &self.api_keys)
            .transaction(|(orgs, slugs, keys)| {
                if slugs.get(org.slug.as_bytes())?.is_some() {
                    return abort(StoreError::DuplicateSlug);
                }
                slugs.insert(org.slug.as_bytes(), org.id.as_bytes())?;
                orgs.insert(org.id.as_bytes(), org_bytes.as_slice())?;
                keys.insert(key.key_id.as_bytes(), key_bytes.as_slice())?;
                Ok(())
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn get_org(&self, id: &str) -> StoreResult<Option<Org>> {
        Self::get(&self.orgs, id.as_bytes())
    }

    async fn get_org_by_slug(&self, slug: &str) -> StoreResult<Option<Org>> {
        match self.org_slugs.get(slug.as_bytes()).map_err(backend)? {
            Some(id) => Self::get(&self.orgs, &id),
            None => Ok(None),
        }
    }

    async fn list_orgs(&self) -> StoreResult<Vec<Org>> {
        self.orgs
            .iter()
            .values()
            .map(|v| dec(&v.map_err(backend)?))
            .collect()
    }

    async fn update_org(&self, org: &Org) -> StoreResult<()> {
        let bytes = enc(org)?;
        (&self.orgs,)
            .transaction(|(orgs,)| {
                if orgs.get(org.id.as_bytes())?.is_none() {
                    return abort(StoreError::NotFound);
                }
                orgs.insert(org.id.as_bytes(), bytes.as_slice())?;
                Ok(())
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn put_api_key(&self, key: &ApiKeyRecord) -> StoreResult<()> {
        self.api_keys
            .insert(key.key_id.as_bytes(), enc(key)?)
            .map_err(backend)?;
        self.durable().await
    }

    async fn get_api_key(&self, key_id: &str) -> StoreResult<Option<ApiKeyRecord>> {
        Self::get(&self.api_keys, key_id.as_bytes())
    }

    async fn list_api_keys(&self, org_id: &str) -> StoreResult<Vec<ApiKeyRecord>> {
        let mut out = Vec::new();
        for v in self.api_keys.iter().values() {
            let k: ApiKeyRecord = dec(&v.map_err(backend)?)?;
            if k.org_id == org_id {
                out.push(k);
            }
        }
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Ok(out)
    }

    async fn list_routes(&self, org_id: &str) -> StoreResult<Vec<Route>> {
        self.routes
            .scan_prefix(prefix(org_id))
            .values()
            .map(|v| dec(&v.map_err(backend)?))
            .collect()
    }

    async fn get_route(&self, org_id: &str, route_id: &str) -> StoreResult<Option<Route>> {
        Self::get(&self.routes, &key2(org_id, route_id))
    }

    async fn insert_route(
        &self,
        route: &Route,
        idem: Option<&IdempotencyRecord>,
    ) -> StoreResult<()> {
        let route_bytes = enc(route)?;
        let idem_bytes = idem.map(enc).transpose()?;
        let rkey = key2(&route.org_id, &route.id);
        let pkey = key2(&route.org_id, &route.path);
        (&self.routes, &self.route_paths, &self.idempotency)
            .transaction(|(routes, paths, idems)| {
                idem_unused(idems, idem)?;
                if paths.get(&pkey)?.is_some() {
                    return abort(StoreError::DuplicatePath);
                }
                paths.insert(pkey.as_slice(), route.id.as_bytes())?;
                routes.insert(rkey.as_slice(), route_bytes.as_slice())?;
                if let (Some(rec), Some(b)) = (idem, &idem_bytes) {
                    idems.insert(key2(&rec.org_id, &rec.key), b.as_slice())?;
                }
                Ok(())
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn replace_route(
        &self,
        old: &Route,
        new: &Route,
        idem: Option<&IdempotencyRecord>,
    ) -> StoreResult<()> {
        let new_bytes = enc(new)?;
        let idem_bytes = idem.map(enc).transpose()?;
        let rkey = key2(&old.org_id, &old.id);
        let old_pkey = key2(&old.org_id, &old.path);
        let new_pkey = key2(&new.org_id, &new.path);
        (&self.routes, &self.route_paths, &self.idempotency)
            .transaction(|(routes, paths, idems)| {
                idem_unused(idems, idem)?;
                let Some(current) = routes.get(&rkey)? else {
                    return abort(StoreError::NotFound);
                };
                let current: Route = dec(&current).map_err(ConflictableTransactionError::Abort)?;
                if &current != old {
                    return abort(StoreError::Conflict);
                }
                if new.path != old.path {
                    if paths.get(&new_pkey)?.is_some() {
                        return abort(StoreError::DuplicatePath);
                    }
                    paths.remove(old_pkey.as_slice())?;
                    paths.insert(new_pkey.as_slice(), new.id.as_bytes())?;
                }
                routes.insert(rkey.as_slice(), new_bytes.as_slice())?;
                if let (Some(rec), Some(b)) = (idem, &idem_bytes) {
                    idems.insert(key2(&rec.org_id, &rec.key), b.as_slice())?;
                }
                Ok(())
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn delete_route(&self, org_id: &str, route_id: &str) -> StoreResult<()> {
        let rkey = key2(org_id, route_id);
        (&self.routes, &self.route_paths)
            .transaction(|(routes, paths)| {
                let Some(current) = routes.remove(rkey.as_slice())? else {
                    return abort(StoreError::NotFound);
                };
                let current: Route = dec(&current).map_err(ConflictableTransactionError::Abort)?;
                paths.remove(key2(org_id, &current.path))?;
                Ok(())
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn get_idempotency(
        &self,
        org_id: &str,
        key: &str,
    ) -> StoreResult<Option<IdempotencyRecord>> {
        Self::get(&self.idempotency, &key2(org_id, key))
    }

    async fn purge_idempotency(&self, before_unix: i64) -> StoreResult<usize> {
        let mut removed = 0;
        for item in self.idempotency.iter() {
            let (k, v) = item.map_err(backend)?;
            let rec: IdempotencyRecord = dec(&v)?;
            if rec.created_at_unix < before_unix {
                // Remove only if unchanged since read.
                if self
                    .idempotency
                    .compare_and_swap(&k, Some(v), None::<&[u8]>)
                    .map_err(backend)?
                    .is_ok()
                {
                    removed += 1;
                }
            }
        }
        if removed > 0 {
            self.durable().await?;
        }
        Ok(removed)
    }

    async fn reserve_payment(&self, payment: &GatewayPayment) -> StoreResult<PaymentReservation> {
        let bytes = enc(payment)?;
        let id = payment.id.as_bytes();
        let outcome = (&self.nonces, &self.payments, &self.payments_open)
            .transaction(|(nonces, payments, open)| {
                if let Some(holder) = nonces.get(payment.nonce_key.as_bytes())? {
                    let Some(held) = payments.get(&holder)? else {
                        return abort(StoreError::Backend(format!(
                            "nonce {} held by a missing payment",
                            payment.nonce_key
                        )));
                    };
                    let held = dec(&held).map_err(ConflictableTransactionError::Abort)?;
                    return Ok(PaymentReservation::Held(Box::new(held)));
                }
                nonces.insert(payment.nonce_key.as_bytes(), id)?;
                put_tracked(payments, open, id, &bytes, payment.status.is_open())?;
                Ok(PaymentReservation::Reserved)
            })
            .map_err(tx_err)?;
        if outcome == PaymentReservation::Reserved {
            self.durable().await?;
        }
        Ok(outcome)
    }

    async fn update_payment(&self, payment: &GatewayPayment) -> StoreResult<()> {
        let bytes = enc(payment)?;
        (&self.payments, &self.payments_open)
            .transaction(|(payments, open)| {
                put_tracked(
                    payments,
                    open,
                    payment.id.as_bytes(),
                    &bytes,
                    payment.status.is_open(),
                )
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn release_payment(&self, payment: &GatewayPayment) -> StoreResult<()> {
        let bytes = enc(payment)?;
        let id = payment.id.as_bytes();
        (&self.nonces, &self.payments, &self.payments_open)
            .transaction(|(nonces, payments, open)| {
                if nonces.get(payment.nonce_key.as_bytes())?.as_deref() == Some(id) {
                    nonces.remove(payment.nonce_key.as_bytes())?;
                }
                put_tracked(payments, open, id, &bytes, payment.status.is_open())
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn get_payment(&self, id: &str) -> StoreResult<Option<GatewayPayment>> {
        Self::get(&self.payments, id.as_bytes())
    }

    async fn payment_for_nonce(&self, nonce_key: &str) -> StoreResult<Option<GatewayPayment>> {
        match self.nonces.get(nonce_key.as_bytes()).map_err(backend)? {
            Some(id) => Self::get(&self.payments, &id),
            None => Ok(None),
        }
    }

    async fn claim_redemption(
        &self,
        id: &str,
        retry: &GatewayPayment,
        at: &str,
    ) -> StoreResult<Option<GatewayPayment>> {
        let claimed = self
            .payments
            .transaction(|payments| {
                let Some(bytes) = payments.get(id.as_bytes())? else {
                    return Ok(None);
                };
                let mut p: GatewayPayment =
                    dec(&bytes).map_err(ConflictableTransactionError::Abort)?;
                if !p.redeemable_by(retry) {
                    return Ok(None);
                }
                p.redeemed_at = Some(at.to_string());
                p.updated_at = at.to_string();
                let bytes = enc(&p).map_err(ConflictableTransactionError::Abort)?;
                payments.insert(id.as_bytes(), bytes)?;
                Ok(Some(p))
            })
            .map_err(tx_err)?;
        if claimed.is_some() {
            self.durable().await?;
        }
        Ok(claimed)
    }

    async fn unfinished_payments(&self) -> StoreResult<Vec<GatewayPayment>> {
        open_records(&self.payments, &self.payments_open, |p: &GatewayPayment| {
            p.status.is_open()
        })
    }

    async fn plan_usage(&self, org_id: &str, month: &str) -> StoreResult<u64> {
        Ok(Self::get(&self.plan_usage, &key2(org_id, month))?.unwrap_or(0))
    }

    async fn put_plan_usage(&self, org_id: &str, month: &str, count: u64) -> StoreResult<()> {
        self.plan_usage
            .fetch_and_update(key2(org_id, month), |old| {
                let old: u64 = old
                    .and_then(|b| serde_json::from_slice(b).ok())
                    .unwrap_or(0);
                serde_json::to_vec(&old.max(count)).ok()
            })
            .map_err(backend)?;
        Ok(())
    }

    async fn reserve_mcp_spend(
        &self,
        org_id: &str,
        day: &str,
        amount: u64,
        cap: u64,
    ) -> StoreResult<SpendReservation> {
        let mut outcome = SpendReservation::OverCap { total: 0 };
        self.mcp_spend
            .fetch_and_update(key2(org_id, day), |old| {
                let spent = old.and_then(decode_u64).unwrap_or(0);
                match spent.checked_add(amount).filter(|t| *t <= cap) {
                    Some(total) => {
                        outcome = SpendReservation::Reserved { total };
                        Some(total.to_be_bytes().to_vec())
                    }
                    None => {
                        outcome = SpendReservation::OverCap { total: spent };
                        old.map(<[u8]>::to_vec)
                    }
                }
            })
            .map_err(backend)?;
        if matches!(outcome, SpendReservation::Reserved { .. }) {
            self.durable().await?;
        }
        Ok(outcome)
    }

    async fn release_mcp_spend(&self, org_id: &str, day: &str, amount: u64) -> StoreResult<()> {
        self.mcp_spend
            .fetch_and_update(key2(org_id, day), |old| {
                let spent = old.and_then(decode_u64).unwrap_or(0);
                Some(spent.saturating_sub(amount).to_be_bytes().to_vec())
            })
            .map_err(backend)?;
        self.durable().await
    }

    async fn mcp_spent(&self, org_id: &str, day: &str) -> StoreResult<u64> {
        let v = self.mcp_spend.get(key2(org_id, day)).map_err(backend)?;
        Ok(v.as_deref().and_then(decode_u64).unwrap_or(0))
    }

    async fn merge_metrics(
        &self,
        org_id: &str,
        minute: u64,
        bucket: &MetricBucket,
    ) -> StoreResult<()> {
        // Big-endian minutes keep an org's buckets in time order under its prefix.
        let mut key = prefix(org_id);
        key.extend_from_slice(&minute.to_be_bytes());
        self.metrics
            .fetch_and_update(key, |old| {
                let mut b: MetricBucket = old
                    .and_then(|b| serde_json::from_slice(b).ok())
                    .unwrap_or_default();
                b.merge(bucket);
                serde_json::to_vec(&b).ok()
            })
            .map_err(backend)?;
        Ok(())
    }

    async fn metrics_since(&self, org_id: &str, from_minute: u64) -> StoreResult<MetricBucket> {
        let p = prefix(org_id);
        let mut start = p.clone();
        start.extend_from_slice(&from_minute.to_be_bytes());
        let mut end = p;
        end.extend_from_slice(&u64::MAX.to_be_bytes());
        let mut sum = MetricBucket::default();
        for kv in self.metrics.range(start..=end) {
            let (_, v) = kv.map_err(backend)?;
            sum.merge(&dec(&v)?);
        }
        Ok(sum)
    }

    async fn flush(&self) -> StoreResult<()> {
        self.durable().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PaymentStatus;
    use crate::money::UsdcAmount;

    fn route(org: &str, id: &str, path: &str) -> Route {
        Route {
            id: id.into(),
            org_id: org.into(),
            path: path.into(),
            price: UsdcAmount(10_000),
            target_url: "http://example.com/".into(),
            network: "base".into(),
            active: true,
            streaming: false,
            discoverable: false,
            description: String::new(),
            bazaar_category: None,
            created_at_ns: 1,
            created_at: "t".into(),
            updated_at: "t".into(),
        }
    }

    fn idem(org: &str, key: &str) -> IdempotencyRecord {
        IdempotencyRecord {
            org_id: org.into(),
            key: key.into(),
            fingerprint: "f".into(),
            status: 201,
            body: "{}".into(),
            created_at_unix: 100,
        }
    }

    #[tokio::test]
    async fn path_index_is_unique_per_org_and_follows_updates() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path()).unwrap();
        s.insert_route(&route("o1", "r1", "/a"), None)
            .await
            .unwrap();
        // Same path in another org is fine.
        s.insert_route(&route("o2", "r2", "/a"), None)
            .await
            .unwrap();
        assert!(matches!(
            s.insert_route(&route("o1", "r3", "/a"), None).await,
            Err(StoreError::DuplicatePath)
        ));
        // Moving r1 to /b frees /a.
        let old = s.get_route("o1", "r1").await.unwrap().unwrap();
        let mut new = old.clone();
        new.path = "/b".into();
        s.replace_route(&old, &new, None).await.unwrap();
        s.insert_route(&route("o1", "r3", "/a"), None)
            .await
            .unwrap();
        // A stale replace is refused.
        assert!(matches!(
            s.replace_route(&old, &new, None).await,
            Err(StoreError::Conflict)
        ));
        s.delete_route("o1", "r1").await.unwrap();
        assert!(matches!(
            s.delete_route("o1", "r1").await,
            Err(StoreError::NotFound)
        ));
        s.insert_route(&route("o1", "r4", "/b"), None)
            .await
            .unwrap();
        assert_eq!(s.list_routes("o1").await.unwrap().len(), 2);
        assert_eq!(s.list_routes("o2").await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn idempotency_key_blocks_second_insert_and_nothing_else_changes() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path()).unwrap();
        s.insert_route(&route("o1", "r1", "/a"), Some(&idem("o1", "k")))
            .await
            .unwrap();
        match s
            .insert_route(&route("o1", "r2", "/b"), Some(&idem("o1", "k")))
            .await
        {
            Err(StoreError::IdempotencyKeyUsed(rec)) => assert_eq!(rec.status, 201),
            other => panic!("unexpected {other:?}"),
        }
        assert!(s.get_route("o1", "r2").await.unwrap().is_none());
        // Keys are scoped per org.
        s.insert_route(&route("o2", "r2", "/b"), Some(&idem("o2", "k")))
            .await
            .unwrap();
        assert_eq!(s.purge_idempotency(101).await.unwrap(), 2);
        assert!(s.get_idempotency("o1", "k").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn records_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = SledStore::open(dir.path()).unwrap();
            s.insert_route(&route("o1", "r1", "/a"), None)
                .await
                .unwrap();
        }
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!(s.get_route("o1", "r1").await.unwrap().unwrap().path, "/a");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mcp_spend_never_passes_the_cap_under_concurrency_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = std::sync::Arc::new(SledStore::open(dir.path()).unwrap());
            let tasks: Vec<_> = (0..50)
                .map(|_| {
                    let s = s.clone();
                    tokio::spawn(async move {
                        s.reserve_mcp_spend("o1", "2026-11-22", 10, 200)
                            .await
                            .unwrap()
                    })
                })
                .collect();
            let mut reserved = 0;
            for t in tasks {
                if matches!(t.await.unwrap(), SpendReservation::Reserved { .. }) {
                    reserved += 1;
                }
            }
            assert_eq!(reserved, 20);
            assert_eq!(s.mcp_spent("o1", "2026-11-22").await.unwrap(), 200);
            assert_eq!(
                s.reserve_mcp_spend("o1", "2026-11-22", 1, 200)
                    .await
                    .unwrap(),
                SpendReservation::OverCap { total: 200 }
            );
            // Other days and organisations are separate.
            assert_eq!(s.mcp_spent("o2", "2026-11-22").await.unwrap(), 0);
            assert_eq!(s.mcp_spent("o1", "2026-11-23").await.unwrap(), 0);
            s.release_mcp_spend("o1", "2026-11-22", 30).await.unwrap();
        }
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!(s.mcp_spent("o1", "2026-11-22").await.unwrap(), 170);
        assert_eq!(
            s.reserve_mcp_spend("o1", "2026-11-22", 30, 200)
                .await
                .unwrap(),
            SpendReservation::Reserved { total: 200 }
        );
    }

    fn payment(id: &str, nonce_key: &str) -> GatewayPayment {
        GatewayPayment {
            id: id.into(),
            org_id: "o1".into(),
            route_id: "r1".into(),
            nonce_key: nonce_key.into(),
            network: "eip155:84532".into(),
            asset: "0xA".into(),
            payer: "0xP".into(),
            pay_to: "0xQ".into(),
            amount: UsdcAmount(10_000),
            status: PaymentStatus::Reserved,
            transaction: None,
            failure: None,
            verify_us: 0,
            settle_ms: None,
            upstream_status: None,
            valid_before: 0,
            settled_by_reconciliation: false,
            redeemed_at: None,
            created_at: "t".into(),
            updated_at: "t".into(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_nonce_names_its_payment_and_a_reconciled_one_is_claimed_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = std::sync::Arc::new(SledStore::open(dir.path()).unwrap());
        let first = payment("pay_1", "84532:a:p:1");
        let retry = payment("pay_2", "84532:a:p:1");
        assert_eq!(
            s.reserve_payment(&first).await.unwrap(),
            PaymentReservation::Reserved
        );
        // The retry stores nothing and learns which payment holds the nonce.
        assert_eq!(
            s.reserve_payment(&retry).await.unwrap(),
            PaymentReservation::Held(Box::new(first.clone()))
        );
        assert!(s.get_payment("pay_2").await.unwrap().is_none());

        // Settled by the request itself: never redeemable.
        let mut settled = first.clone();
        settled.status = PaymentStatus::Settled;
        s.update_payment(&settled).await.unwrap();
        assert!(s
            .claim_redemption("pay_1", &retry, "t1")
            .await
            .unwrap()
            .is_none());

        // Settled by reconciliation: of 16 concurrent retries exactly one claims it.
        settled.settled_by_reconciliation = true;
        s.update_payment(&settled).await.unwrap();
        let tasks: Vec<_> = (0..16)
            .map(|i| {
                let (s, retry) = (s.clone(), retry.clone());
                tokio::spawn(async move {
                    s.claim_redemption("pay_1", &retry, &format!("t{i}"))
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut claimed = 0;
        for t in tasks {
            if t.await.unwrap().is_some() {
                claimed += 1;
            }
        }
        assert_eq!(claimed, 1);
        let stored = s.get_payment("pay_1").await.unwrap().unwrap();
        assert!(stored.redeemed_at.is_some());

        // Another route's retry of the same authorization may not claim a payment.
        let mut other = payment("pay_3", "84532:a:p:2");
        let mut elsewhere = other.clone();
        elsewhere.id = "pay_4".into();
        elsewhere.route_id = "r2".into();
        other.status = PaymentStatus::Settled;
        other.settled_by_reconciliation = true;
        assert_eq!(
            s.reserve_payment(&other).await.unwrap(),
            PaymentReservation::Reserved
        );
        assert!(s
            .claim_redemption("pay_3", &elsewhere, "t")
            .await
            .unwrap()
            .is_none());
    }

    fn ids(mut v: Vec<GatewayPayment>) -> Vec<String> {
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v.into_iter().map(|p| p.id).collect()
    }

    #[tokio::test]
    async fn reconciliation_reads_only_open_payments_and_the_index_follows_every_write() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path()).unwrap();
        let (a, b, c) = (
            payment("pay_a", "n_a"),
            payment("pay_b", "n_b"),
            payment("pay_c", "n_c"),
        );
        for p in [&a, &b, &c] {
            assert_eq!(
                s.reserve_payment(p).await.unwrap(),
                PaymentReservation::Reserved
            );
        }
        assert_eq!(
            ids(s.unfinished_payments().await.unwrap()),
            ["pay_a", "pay_b", "pay_c"]
        );
        // Settled leaves the index; Unknown stays in it; a release (Failed) leaves it.
        let mut settled = a.clone();
        settled.status = PaymentStatus::Settled;
        s.update_payment(&settled).await.unwrap();
        let mut unknown = b.clone();
        unknown.status = PaymentStatus::Unknown;
        s.update_payment(&unknown).await.unwrap();
        let mut failed = c.clone();
        failed.status = PaymentStatus::Failed;
        s.release_payment(&failed).await.unwrap();
        assert_eq!(ids(s.unfinished_payments().await.unwrap()), ["pay_b"]);
        assert_eq!(s.payments_open.len(), 1);
        // A replay of a held nonce writes nothing, the index included.
        assert!(matches!(
            s.reserve_payment(&payment("pay_d", "n_b")).await.unwrap(),
            PaymentReservation::Held(_)
        ));
        assert_eq!(s.payments_open.len(), 1);
        // The record stays whole: the index only names it.
        assert_eq!(s.get_payment("pay_a").await.unwrap(), Some(settled));
    }

    #[tokio::test]
    async fn a_store_written_before_the_open_index_gets_it_built_once_on_open() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = SledStore::open(dir.path()).unwrap();
            let mut settled = payment("pay_s", "n_s");
            settled.status = PaymentStatus::Settled;
            for p in [payment("pay_r", "n_r"), settled] {
                s.reserve_payment(&p).await.unwrap();
            }
            // What an older version left: no index, no marker.
            s.payments_open.clear().unwrap();
            s.db.open_tree("meta").unwrap().clear().unwrap();
            s.flush().await.unwrap();
        }
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!(ids(s.unfinished_payments().await.unwrap()), ["pay_r"]);
        // Built once: a later open does not walk the records again (an index emptied by hand
        // stays empty, which is how the marker is seen to hold).
        s.payments_open.clear().unwrap();
        s.flush().await.unwrap();
        drop(s);
        let s = SledStore::open(dir.path()).unwrap();
        assert!(s.unfinished_payments().await.unwrap().is_empty());
    }
}
