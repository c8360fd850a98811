//! Plan limits: paid requests per organisation per calendar month (UTC). Each paid request takes
//! a slot *before* its payment is taken (so a request over the limit never pays) and gives it
//! back if the payment does not go through. One node (sled) counts in a sharded map, reads the
//! store once per org and month and stores the count after each settled request, so it survives
//! restarts. A cluster (PostgreSQL) takes every slot in the store itself, so the limit holds
//! across nodes exactly: in the transaction that reserves the payment, whose record names the
//! slot, so a node killed before the outcome leaves a record reconciliation decides; a payment
//! it closes `Failed` gives its slot back.

use dashmap::DashMap;
use paygate_domain::model::PlanSlot;
use paygate_domain::StoreResult;
use paygate_store::Store;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// This node's counters, by organisation and month.
type Counters = DashMap<(Arc<str>, String), Arc<AtomicU64>>;

pub struct PlanUsage {
    store: Arc<dyn Store>,
    /// `None`: the slots are taken in the store (shared by a cluster's nodes).
    counters: Option<Counters>,
}

/// A slot taken for one paid request. Dropped without [`PlanUsage::commit`], it is given back.
pub struct Slot {
    taken: Taken,
    org_id: Arc<str>,
    month: String,
    committed: bool,
}

/// Where a slot was taken.
enum Taken {
    Counter(Arc<AtomicU64>),
    Store(Arc<dyn Store>),
}

/// The current month as `YYYY-MM` (UTC).
pub fn current_month() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!("{:04}-{:02}", now.year(), u8::from(now.month()))
}

impl PlanUsage {
    /// One node: counts in memory, stored after each paid request.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            counters: Some(DashMap::new()),
        }
    }

    /// A cluster's node: every slot taken in the store, shared with the other nodes.
    pub fn shared(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            counters: None,
        }
    }

    async fn counter(
        &self,
        counters: &Counters,
        org_id: &Arc<str>,
        month: &str,
    ) -> StoreResult<Arc<AtomicU64>> {
        let key = (org_id.clone(), month.to_string());
        if let Some(c) = counters.get(&key) {
            return Ok(c.clone());
        }
        let stored = self.store.plan_usage(org_id, month).await?;
        Ok(counters
            .entry(key)
            .or_insert_with(|| Arc::new(AtomicU64::new(stored)))
            .clone())
    }

    /// Takes a slot unless the org has used `limit` this month (`limit` 0 = unlimited).
    pub async fn try_take(&self, org_id: &Arc<str>, limit: u64) -> StoreResult<Option<Slot>> {
        let month = current_month();
        let taken = match &self.counters {
            Some(counters) => {
                let counter = self.counter(counters, org_id, &month).await?;
                let before = counter.fetch_add(1, Ordering::SeqCst);
                if limit > 0 && before >= limit {
                    counter.fetch_sub(1, Ordering::SeqCst);
                    return Ok(None);
                }
                Taken::Counter(counter)
            }
            None => {
                if !self.store.take_plan_slot(org_id, &month, limit).await? {
                    return Ok(None);
                }
                Taken::Store(self.store.clone())
            }
        };
        Ok(Some(Slot {
            taken,
            org_id: org_id.clone(),
            month,
            committed: false,
        }))
    }

    /// On a cluster, the slot a paid request takes in the store with its payment's reservation
    /// (one transaction, so a node killed in between leaks nothing); `None` on one node, whose
    /// slots are taken in memory ([`Self::try_take`]).
    pub fn store_slot(&self, limit: u64) -> Option<PlanSlot> {
        self.counters.is_none().then(|| PlanSlot {
            month: current_month(),
            limit,
        })
    }

    /// The slot a reservation took in the store, held by its request until the outcome (given
    /// back when dropped uncommitted, as any slot).
    pub fn adopt(&self, org_id: &Arc<str>, slot: &PlanSlot) -> Slot {
        Slot {
            taken: Taken::Store(self.store.clone()),
            org_id: org_id.clone(),
            month: slot.month.clone(),
            committed: false,
        }
    }

    /// Used this month, as the counters (or the store) see it.
    pub async fn used(&self, org_id: &Arc<str>) -> StoreResult<u64> {
        let month = current_month();
        match &self.counters {
            Some(counters) => Ok(self
                .counter(counters, org_id, &month)
                .await?
                .load(Ordering::SeqCst)),
            None => self.store.plan_usage(org_id, &month).await,
        }
    }

    /// Keeps the slot (the request was paid); one node stores its count.
    pub async fn commit(&self, mut slot: Slot) {
        slot.committed = true;
        let Taken::Counter(counter) = &slot.taken else {
            return;
        };
        let count = counter.load(Ordering::SeqCst);
        if let Err(e) = self
            .store
            .put_plan_usage(&slot.org_id, &slot.month, count)
            .await
        {
            tracing::warn!(error = %e, org = %slot.org_id, "could not store plan usage");
        }
    }
}

impl Slot {
    /// A slot whose payment's outcome is not known (sent, no receipt): kept taken in the store,
    /// where reconciliation gives it back if the payment closes `Failed`. A slot counted in
    /// memory is given back as before (its payment's record names no slot).
    pub fn leave_to_reconciliation(mut self) {
        if matches!(self.taken, Taken::Store(_)) {
            self.committed = true;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        match &self.taken {
            Taken::Counter(counter) => {
                counter.fetch_sub(1, Ordering::SeqCst);
            }
            Taken::Store(store) => {
                let (store, org, month) = (store.clone(), self.org_id.clone(), self.month.clone());
                // A slot is dropped on the request's task; giving it back is a store write.
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn(async move {
                        if let Err(e) = store.release_plan_slot(&org, &month).await {
                            tracing::warn!(error = %e, org = %org, "could not give back a plan slot");
                        }
                    });
                }
            }
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
        // sled lets go of its directory lock when its flusher thread has stopped, a moment
        // after the last handle is dropped (a CI run met the lock still held).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let reopened = loop {
            match SledStore::open(dir.path()) {
                Ok(s) => break s,
                Err(e) if std::time::Instant::now() > deadline => panic!("reopening: {e}"),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        };
        let usage = PlanUsage::new(Arc::new(reopened));
        assert_eq!(usage.used(&org).await.unwrap(), 2);
        assert!(usage.try_take(&org, 2).await.unwrap().is_none());
        assert!(usage.try_take(&org, 3).await.unwrap().is_some());
        assert!(
            usage.try_take(&org, 0).await.unwrap().is_some(),
            "0 = unlimited"
        );
    }

    #[tokio::test]
    async fn shared_slots_are_taken_and_given_back_in_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let org: Arc<str> = Arc::from("org_1");
        let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
        // Two processes sharing one store.
        let (a, b) = (
            PlanUsage::shared(store.clone()),
            PlanUsage::shared(store.clone()),
        );
        let one = a.try_take(&org, 2).await.unwrap().unwrap();
        let two = b.try_take(&org, 2).await.unwrap().unwrap();
        assert!(a.try_take(&org, 2).await.unwrap().is_none());
        assert!(b.try_take(&org, 2).await.unwrap().is_none());
        a.commit(one).await;
        drop(two); // not paid: given back (a store write on a task of its own)
        let month = current_month();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while store.plan_usage(&org, &month).await.unwrap() != 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the slot was not given back"
            );
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        assert_eq!(b.used(&org).await.unwrap(), 1);
        assert!(b.try_take(&org, 2).await.unwrap().is_some());
    }
}
