//! What the metrics aggregator has counted and not yet stored: per-minute buckets and hourly
//! roll-ups per route. Readers add it to what the store holds, so an organisation's figures
//! include requests made a moment ago; a flush and a read exclude each other (the `gate`), so a
//! bucket is never counted both in the store and here, nor in neither.
//!
//! A flush moves the counts into one batch with an id and keeps it until the store says it took
//! it; a batch whose outcome is unknown (the store failed, or the answer was lost, or the flush
//! was cut at an await when the runtime stopped) is sent again with the same id, and the store
//! adds a batch once. So a retry never counts twice.

use crate::FastMap;
use paygate_domain::ids::new_id;
use paygate_domain::model::MetricBucket;
use paygate_domain::rollup::{CountBatch, RollupBucket, RollupRow, Tier, COUNT_BATCH_PREFIX};
use paygate_domain::StoreResult;
use paygate_store::Store;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The counted, unstored part.
#[derive(Default)]
pub(crate) struct Counts {
    /// By organisation and unix minute.
    pub minutes: FastMap<(Arc<str>, u64), MetricBucket>,
    /// By organisation, route (`""`: no route matched) and hour start.
    pub hours: FastMap<(Arc<str>, Arc<str>, u64), RollupBucket>,
}

impl Counts {
    fn is_empty(&self) -> bool {
        self.minutes.is_empty() && self.hours.is_empty()
    }

    /// The organisation's minute buckets from `from_minute` on, merged into `sum`.
    fn add_minutes(&self, org_id: &str, from_minute: u64, sum: &mut MetricBucket) {
        self.minutes
            .iter()
            .filter(|((org, minute), _)| &**org == org_id && *minute >= from_minute)
            .for_each(|(_, b)| sum.merge(b));
    }

    /// The organisation's hourly counts from `from_hour` on.
    fn hours_of<'a>(
        &'a self,
        org_id: &'a str,
        from_hour: u64,
    ) -> impl Iterator<Item = (&'a Arc<str>, u64, &'a RollupBucket)> + 'a {
        self.hours
            .iter()
            .filter(move |((org, _, hour), _)| &**org == org_id && *hour >= from_hour)
            .map(|((_, route, hour), b)| (route, *hour, b))
    }

    /// What the store is sent: minute buckets and each organisation's hourly and daily rows.
    fn batch(&self, id: String) -> CountBatch {
        let minutes = self
            .minutes
            .iter()
            .map(|((org, minute), b)| (org.to_string(), *minute, b.clone()))
            .collect();
        let mut orgs: Vec<&Arc<str>> = self.hours.keys().map(|(org, _, _)| org).collect();
        orgs.sort();
        orgs.dedup();
        let mut rollups = Vec::new();
        for org in orgs {
            for tier in [Tier::Hour, Tier::Day] {
                rollups.extend(
                    expand(self.hours_of(org, 0), tier)
                        .into_iter()
                        .map(|row| (org.to_string(), row)),
                );
            }
        }
        CountBatch {
            id,
            minutes,
            rollups,
        }
    }
}

/// The rows of `tier` that hourly counts of one organisation make: each route's and the
/// organisation's total (route `""`), merged by period.
fn expand<'a>(
    hours: impl Iterator<Item = (&'a Arc<str>, u64, &'a RollupBucket)>,
    tier: Tier,
) -> Vec<RollupRow> {
    let mut rows: HashMap<(u64, &str), RollupBucket> = HashMap::new();
    for (route, hour, b) in hours {
        let period = tier.period_of(hour);
        if !route.is_empty() {
            rows.entry((period, route)).or_default().merge(b);
        }
        rows.entry((period, "")).or_default().merge(b);
    }
    rows.into_iter()
        .map(|((period, route), bucket)| RollupRow {
            tier,
            period,
            route_id: route.to_string(),
            bucket,
        })
        .collect()
}

#[derive(Default)]
pub(crate) struct Unflushed {
    counts: Mutex<Counts>,
    /// Counts a flush took out whose batch the store has not confirmed: sent again, with the
    /// same id, before anything newer.
    sent: Mutex<Option<(String, Counts)>>,
    gate: tokio::sync::RwLock<()>,
}

impl Unflushed {
    /// Runs `f` on the counts (briefly: the aggregator and readers share the lock).
    pub fn with<R>(&self, f: impl FnOnce(&mut Counts) -> R) -> R {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut counts)
    }

    fn with_sent<R>(&self, f: impl FnOnce(&mut Option<(String, Counts)>) -> R) -> R {
        let mut sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut sent)
    }

    /// Stores every count: first a batch sent before and not confirmed (same id), then what
    /// was counted since. Only the aggregator flushes (and, once it is gone, the exit path), so
    /// nothing is counted in between. The store's error, if a batch is left unconfirmed.
    pub async fn flush(&self, store: &dyn Store) -> Result<(), String> {
        let _gate = self.gate.write().await;
        loop {
            let batch = self.with_sent(|sent| {
                if sent.is_none() {
                    let counts = self.with(std::mem::take);
                    if counts.is_empty() {
                        return None;
                    }
                    *sent = Some((new_id(COUNT_BATCH_PREFIX), counts));
                }
                sent.as_ref().map(|(id, counts)| counts.batch(id.clone()))
            });
            let Some(batch) = batch else {
                return Ok(());
            };
            store
                .merge_counts(&batch)
                .await
                .map_err(|e| e.to_string())?;
            self.with_sent(|sent| *sent = None);
        }
    }

    /// The id of a batch sent and not confirmed, if the store did not take it (so its counts
    /// are still only here).
    async fn unconfirmed(&self, store: &dyn Store) -> StoreResult<bool> {
        let id = self.with_sent(|sent| sent.as_ref().map(|(id, _)| id.clone()));
        match id {
            Some(id) => Ok(!store.count_batch_stored(&id).await?),
            None => Ok(false),
        }
    }

    /// The organisation's minute buckets from `from_minute` on, stored and unstored, merged.
    pub async fn minutes_since(
        &self,
        store: &dyn Store,
        org_id: &str,
        from_minute: u64,
    ) -> StoreResult<MetricBucket> {
        let _gate = self.gate.read().await;
        let mut sum = MetricBucket::default();
        if self.unconfirmed(store).await? {
            self.with_sent(|sent| {
                if let Some((_, c)) = sent {
                    c.add_minutes(org_id, from_minute, &mut sum)
                }
            });
        }
        self.with(|c| c.add_minutes(org_id, from_minute, &mut sum));
        sum.merge(&store.metrics_since(org_id, from_minute).await?);
        Ok(sum)
    }

    /// The organisation's `tier` rows from `from_period` on, stored and unstored (one row per
    /// period and route).
    pub async fn rollups(
        &self,
        store: &dyn Store,
        org_id: &str,
        tier: Tier,
        from_period: u64,
    ) -> StoreResult<Vec<RollupRow>> {
        let _gate = self.gate.read().await;
        let unconfirmed = self.unconfirmed(store).await?;
        let fresh = self.with_sent(|sent| {
            let sent = sent.as_ref().filter(|_| unconfirmed).map(|(_, c)| c);
            self.with(|c| {
                let hours = c.hours_of(org_id, from_period).chain(
                    sent.into_iter()
                        .flat_map(|s| s.hours_of(org_id, from_period)),
                );
                expand(hours, tier)
            })
        });
        let mut rows = store.rollups(org_id, tier, from_period).await?;
        if fresh.is_empty() {
            return Ok(rows);
        }
        // Stored rows are one per period and route already: add the (few) fresh ones.
        let mut by_period: HashMap<u64, HashMap<String, RollupBucket>> = HashMap::new();
        for r in fresh {
            by_period
                .entry(r.period)
                .or_default()
                .insert(r.route_id, r.bucket);
        }
        for r in &mut rows {
            let found = by_period
                .get_mut(&r.period)
                .and_then(|m| m.remove(r.route_id.as_str()));
            if let Some(b) = found {
                r.bucket.merge(&b);
            }
        }
        for (period, routes) in by_period {
            rows.extend(routes.into_iter().map(|(route_id, bucket)| RollupRow {
                tier,
                period,
                route_id,
                bucket,
            }));
        }
        Ok(rows)
    }
}
