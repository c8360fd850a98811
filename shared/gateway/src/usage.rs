//! Plan limits: paid requests per organisation per calendar month (UTC). Each paid request takes
//! a slot *before* its payment is taken (so a request over the limit never pays), gives it back
//! if the payment does not go through, and the count is stored after each settled request, so it
//! survives restarts. Counters live in a sharded map; the store is read once per org and month.

use dashmap::DashMap;
use paygate_domain::StoreResult;
use paygate_store::Store;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub struct PlanUsage {
    store: Arc<dyn Store>,
    counters: DashMap<(Arc<str>, String), Arc<AtomicU64>>,
}

/// A slot taken for one paid request. Dropped without [`Slot::commit`], it is given back.
pub struct Slot {
    counter: Arc<AtomicU64>,
    org_id: Arc<str>,
    month: String,
    committed: bool,
}

/// The current month as `YYYY-MM` (UTC).
pub fn current_month() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!("{:04}-{:02}", now.year(), u8::from(now.month()))
}

impl PlanUsage {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            counters: DashMap::new(),
        }
    }

    async fn counter(&self, org_id: &Arc<str>, month: &str) -> StoreResult<Arc<AtomicU64>> {
        let key = (org_id.clone(), month.to_string());
        if let Some(c) = self.counters.get(&key) {
            return Ok(c.clone());
        }
        let stored = self.store.plan_usage(org_id, month).await?;
        Ok(self
            .counters
            .entry(key)
            .or_insert_with(|| Arc::new(AtomicU64::new(stored)))
            .clone())
    }

    /// Takes a slot unless the org has used `limit` this month (`limit` 0 = unlimited).
    pub async fn try_take(&self, org_id: &Arc<str>, limit: u64) -> StoreResult<Option<Slot>> {
        let month = current_month();
        let counter = self.counter(org_id, &month).await?;
        let before = counter.fetch_add(1, Ordering::SeqCst);
        if limit > 0 && before >= limit {
            counter.fetch_sub(1, Ordering::SeqCst);
            return Ok(None);
        }
        Ok(Some(Slot {
            counter,
            org_id: org_id.clone(),
            month,
            committed: false,
        }))
    }

    /// Used this month, as the counters see it.
    pub async fn used(&self, org_id: &Arc<str>) -> StoreResult<u64> {
        Ok(self
            .counter(org_id, &current_month())
            .await?
            .load(Ordering::SeqCst))
    }

    /// Keeps the slot (the request was paid) and stores the count.
    pub async fn commit(&self, mut slot: Slot) {
        slot.committed = true;
        let count = slot.counter.load(Ordering::SeqCst);
        if let Err(e) = self
            .store
            .put_plan_usage(&slot.org_id, &slot.month, count)
            .await
        {
            tracing::warn!(error = %e, org = %slot.org_id, "could not store plan usage");
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.committed {
            self.counter.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paygate_store::SledStore;

    #[tokio::test]
    async fn limit_holds_and_counts_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let org: Arc<str> = Arc::from("org_1");
        {
            let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
            let usage = PlanUsage::new(store.clone());
            let a = usage.try_take(&org, 2).await.unwrap().unwrap();
            let b = usage.try_take(&org, 2).await.unwrap().unwrap();
            assert!(usage.try_take(&org, 2).await.unwrap().is_none());
            drop(b); // payment failed: the slot comes back
            usage.commit(a).await;
            let c = usage.try_take(&org, 2).await.unwrap().unwrap();
            usage.commit(c).await;
            assert!(usage.try_take(&org, 2).await.unwrap().is_none());
            store.flush().await.unwrap();
        }
        let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
        let usage = PlanUsage::new(store);
        assert_eq!(usage.used(&org).await.unwrap(), 2);
        assert!(usage.try_take(&org, 2).await.unwrap().is_none());
        assert!(usage.try_take(&org, 3).await.unwrap().is_some());
        assert!(
            usage.try_take(&org, 0).await.unwrap().is_some(),
            "0 = unlimited"
        );
    }
}
