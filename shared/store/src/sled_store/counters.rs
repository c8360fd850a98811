//! Counters in sled: plan usage per org and month, MCP spending per org and day, the
//! per-minute metric buckets and the hourly and daily roll-ups (`org \0 tier period route`,
//! so a tier's rows from a period on are one range).

use super::*;
use paygate_domain::rollup::{CountBatch, RollupBucket, RollupRow, Tier};

fn rollup_key(org_id: &str, tier: Tier, period: u64, route_id: &str) -> Vec<u8> {
    let mut key = prefix(org_id);
    key.push(tier.code());
    key.extend_from_slice(&period.to_be_bytes());
    key.extend_from_slice(route_id.as_bytes());
    key
}

#[async_trait]
impl CounterStore for SledStore {
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

    async fn take_plan_slot(&self, org_id: &str, month: &str, limit: u64) -> StoreResult<bool> {
        let mut taken = false;
        self.plan_usage
            .fetch_and_update(key2(org_id, month), |old| {
                let used: u64 = old
                    .and_then(|b| serde_json::from_slice(b).ok())
                    .unwrap_or(0);
                taken = limit == 0 || used < limit;
                let next = if taken { used + 1 } else { used };
                serde_json::to_vec(&next).ok()
            })
            .map_err(backend)?;
        if taken {
            self.durable().await?;
        }
        Ok(taken)
    }

    async fn release_plan_slot(&self, org_id: &str, month: &str) -> StoreResult<()> {
        self.plan_usage
            .fetch_and_update(key2(org_id, month), |old| {
                let used: u64 = old
                    .and_then(|b| serde_json::from_slice(b).ok())
                    .unwrap_or(0);
                serde_json::to_vec(&used.saturating_sub(1)).ok()
            })
            .map_err(backend)?;
        self.durable().await
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
}

#[async_trait]
impl MetricStore for SledStore {
    async fn merge_counts(&self, batch: &CountBatch) -> StoreResult<()> {
        let minute_keys: Vec<Vec<u8>> = batch
            .minutes
            .iter()
            .map(|(org_id, minute, _)| {
                // Big-endian minutes keep an org's buckets in time order under its prefix.
                let mut key = prefix(org_id);
                key.extend_from_slice(&minute.to_be_bytes());
                key
            })
            .collect();
        let rollup_keys: Vec<Vec<u8>> = batch
            .rollups
            .iter()
            .map(|(org_id, r)| rollup_key(org_id, r.tier, r.period, &r.route_id))
            .collect();
        (&self.metrics, &self.rollups, &self.count_batches)
            .transaction(|(metrics, rollups, batches)| {
                if batches.get(batch.id.as_bytes())?.is_some() {
                    return Ok(());
                }
                for (key, (_, _, bucket)) in minute_keys.iter().zip(&batch.minutes) {
                    let mut b: MetricBucket = metrics
                        .get(key)?
                        .and_then(|v| serde_json::from_slice(&v).ok())
                        .unwrap_or_default();
                    b.merge(bucket);
                    metrics.insert(key.as_slice(), serde_json::to_vec(&b).unwrap_or_default())?;
                }
                for (key, (_, row)) in rollup_keys.iter().zip(&batch.rollups) {
                    let mut b = rollups
                        .get(key)?
                        .and_then(|v| RollupBucket::from_bytes(&v))
                        .unwrap_or_default();
                    b.merge(&row.bucket);
                    rollups.insert(key.as_slice(), b.to_bytes())?;
                }
                batches.insert(batch.id.as_bytes(), &[])?;
                Ok::<_, ConflictableTransactionError<std::convert::Infallible>>(())
            })
            .map_err(backend)?;
        // Forget batches older than the retry window (ids sort by time).
        let below = CountBatch::forget_below(paygate_domain::unix_now() * 1000);
        for k in self.count_batches.range(..below.as_bytes()).keys() {
            self.count_batches
                .remove(k.map_err(backend)?)
                .map_err(backend)?;
        }
        Ok(())
    }

    async fn count_batch_stored(&self, id: &str) -> StoreResult<bool> {
        self.count_batches
            .contains_key(id.as_bytes())
            .map_err(backend)
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

    async fn rollups(
        &self,
        org_id: &str,
        tier: Tier,
        from_period: u64,
    ) -> StoreResult<Vec<RollupRow>> {
        let start = rollup_key(org_id, tier, from_period, "");
        let mut end = prefix(org_id);
        end.push(tier.code() + 1);
        let head = prefix(org_id).len() + 1;
        let mut out = Vec::new();
        for kv in self.rollups.range(start..end) {
            let (k, v) = kv.map_err(backend)?;
            let (period, route) = k[head..].split_at(8);
            out.push(RollupRow {
                tier,
                period: decode_u64(period).unwrap_or(0),
                route_id: String::from_utf8_lossy(route).into_owned(),
                bucket: RollupBucket::from_bytes(&v)
                    .ok_or_else(|| backend("a roll-up row in an unknown form"))?,
            });
        }
        Ok(out)
    }
}
