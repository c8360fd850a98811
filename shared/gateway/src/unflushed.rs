//! What the metrics aggregator has counted and not yet stored: per-minute buckets and hourly
//! roll-ups per route. Readers add it to what the store holds, so an organisation's figures
//! include requests made a moment ago; a flush and a read exclude each other (the `gate`), so a
//! bucket is never counted both in the store and here, nor in neither.

use paygate_domain::model::MetricBucket;
use paygate_domain::rollup::{RollupBucket, RollupRow, Tier};
use paygate_domain::StoreResult;
use paygate_store::Store;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The counted, unstored part.
#[derive(Default)]
pub(crate) struct Counts {
    /// By organisation and unix minute.
    pub minutes: HashMap<(Arc<str>, u64), MetricBucket>,
    /// By organisation, route (`""`: no route matched) and hour start.
    pub hours: HashMap<(Arc<str>, Arc<str>, u64), RollupBucket>,
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
    gate: tokio::sync::RwLock<()>,
}

impl Unflushed {
    /// Runs `f` on the counts (briefly: the aggregator and readers share the lock).
    pub fn with<R>(&self, f: impl FnOnce(&mut Counts) -> R) -> R {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut counts)
    }

    /// Stores every count, forgetting each once the store took it; what the store refused
    /// stays for the next flush. Only the aggregator flushes (and, once it is gone, the exit
    /// path), so nothing is counted in between; a flush cut short (the runtime stopping at an
    /// await) leaves what it had not stored for the exit path's.
    /// The last store error, if any count is left.
    pub async fn flush(&self, store: &dyn Store) -> Result<(), String> {
        let mut failed = Ok(());
        let _gate = self.gate.write().await;
        let minutes: Vec<_> = self.with(|c| {
            c.minutes
                .iter()
                .map(|(k, b)| (k.clone(), b.clone()))
                .collect()
        });
        for (key, b) in minutes {
            match store.merge_metrics(&key.0, key.1, &b).await {
                Ok(()) => {
                    self.with(|c| c.minutes.remove(&key));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not store metrics; kept for the next flush")
                }
            }
        }
        let orgs: Vec<Arc<str>> = self.with(|c| {
            let mut orgs: Vec<_> = c.hours.keys().map(|(org, _, _)| org.clone()).collect();
            orgs.sort();
            orgs.dedup();
            orgs
        });
        for org in orgs {
            let (keys, rows) = self.with(|c| {
                let mine: Vec<_> = c.hours.iter().filter(|((o, _, _), _)| *o == org).collect();
                let keys: Vec<_> = mine.iter().map(|(k, _)| (*k).clone()).collect();
                let hours = || mine.iter().map(|((_, route, hour), b)| (route, *hour, *b));
                let mut rows = expand(hours(), Tier::Hour);
                rows.extend(expand(hours(), Tier::Day));
                (keys, rows)
            });
            match store.merge_rollups(&org, &rows).await {
                Ok(()) => self.with(|c| {
                    keys.iter().for_each(|k| {
                        c.hours.remove(k);
                    })
                }),
                Err(e) => failed = Err(format!("revenue roll-ups: {e}")),
            }
        }
        failed
    }

    /// The organisation's minute buckets from `from_minute` on, stored and unstored, merged.
    pub async fn minutes_since(
        &self,
        store: &dyn Store,
        org_id: &str,
        from_minute: u64,
    ) -> StoreResult<MetricBucket> {
        let _gate = self.gate.read().await;
        let mut sum = self.with(|c| {
            let mut sum = MetricBucket::default();
            c.minutes
                .iter()
                .filter(|((org, minute), _)| &**org == org_id && *minute >= from_minute)
                .for_each(|(_, b)| sum.merge(b));
            sum
        });
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
        let fresh = self.with(|c| {
            let hours = c
                .hours
                .iter()
                .filter(|((org, _, hour), _)| &**org == org_id && *hour >= from_period)
                .map(|((_, route, hour), b)| (route, *hour, b));
            expand(hours, tier)
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
