//! Counters in PostgreSQL: plan usage per organisation and month, MCP spending per organisation
//! and day (reserved by one conditional update, so the cap holds across nodes), and the
//! per-minute metric buckets every node adds to.

use super::sql::{backend, to_i64, to_u64};
use super::PgStore;
use crate::{CounterStore, MetricStore, SpendReservation};
use async_trait::async_trait;
use paygate_domain::model::MetricBucket;
use paygate_domain::rollup::{CountBatch, RollupBucket, RollupRow, Tier};
use paygate_domain::StoreResult;
use sqlx::Row;

#[async_trait]
impl CounterStore for PgStore {
    async fn plan_usage(&self, org_id: &str, month: &str) -> StoreResult<u64> {
        let count: Option<i64> =
            sqlx::query_scalar("SELECT count FROM plan_usage WHERE org_id = $1 AND month = $2")
                .bind(org_id)
                .bind(month)
                .fetch_optional(&self.pool)
                .await
                .map_err(backend)?;
        Ok(count.map_or(0, to_u64))
    }

    async fn put_plan_usage(&self, org_id: &str, month: &str, count: u64) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO plan_usage (org_id, month, count) VALUES ($1, $2, $3) \
             ON CONFLICT (org_id, month) DO UPDATE \
             SET count = GREATEST(plan_usage.count, EXCLUDED.count)",
        )
        .bind(org_id)
        .bind(month)
        .bind(to_i64(count)?)
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn take_plan_slot(&self, org_id: &str, month: &str, limit: u64) -> StoreResult<bool> {
        let mut conn = self.pool.acquire().await.map_err(backend)?;
        take_slot(&mut conn, org_id, month, limit).await
    }

    async fn release_plan_slot(&self, org_id: &str, month: &str) -> StoreResult<()> {
        sqlx::query(
            "UPDATE plan_usage SET count = GREATEST(count - 1, 0) WHERE org_id = $1 AND month = $2",
        )
        .bind(org_id)
        .bind(month)
        .execute(&self.pool)
        .await
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
        let (amount, cap) = (to_i64(amount)?, to_i64(cap)?);
        // One statement: the row lock serialises reservations of every node, and the `WHERE`
        // keeps the total within the cap.
        let row = sqlx::query(
            "INSERT INTO mcp_spend AS s (org_id, day, total) \
             SELECT $1, $2, $3 WHERE $3 <= $4 \
             ON CONFLICT (org_id, day) DO UPDATE SET total = s.total + EXCLUDED.total \
             WHERE s.total + EXCLUDED.total <= $4 \
             RETURNING total",
        )
        .bind(org_id)
        .bind(day)
        .bind(amount)
        .bind(cap)
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?;
        match row {
            Some(r) => Ok(SpendReservation::Reserved {
                total: to_u64(r.try_get("total").map_err(backend)?),
            }),
            None => Ok(SpendReservation::OverCap {
                total: self.mcp_spent(org_id, day).await?,
            }),
        }
    }

    async fn release_mcp_spend(&self, org_id: &str, day: &str, amount: u64) -> StoreResult<()> {
        sqlx::query(
            "UPDATE mcp_spend SET total = GREATEST(total - $3, 0) WHERE org_id = $1 AND day = $2",
        )
        .bind(org_id)
        .bind(day)
        .bind(to_i64(amount)?)
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn mcp_spent(&self, org_id: &str, day: &str) -> StoreResult<u64> {
        let total: Option<i64> =
            sqlx::query_scalar("SELECT total FROM mcp_spend WHERE org_id = $1 AND day = $2")
                .bind(org_id)
                .bind(day)
                .fetch_optional(&self.pool)
                .await
                .map_err(backend)?;
        Ok(total.map_or(0, to_u64))
    }
}

#[async_trait]
impl MetricStore for PgStore {
    async fn merge_counts(&self, batch: &CountBatch) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let new = sqlx::query("INSERT INTO count_batches (id) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(&batch.id)
            .execute(&mut *tx)
            .await
            .map_err(backend)?
            .rows_affected()
            == 1;
        if new {
            for (org_id, minute, bucket) in &batch.minutes {
                merge_minute(&mut tx, org_id, *minute, bucket).await?;
            }
            for (org_id, row) in &batch.rollups {
                merge_rollup(&mut tx, org_id, row).await?;
            }
            // Forget batches older than the retry window (ids sort by time).
            sqlx::query("DELETE FROM count_batches WHERE id < $1")
                .bind(CountBatch::forget_below(paygate_domain::unix_now() * 1000))
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)
    }

    async fn count_batch_stored(&self, id: &str) -> StoreResult<bool> {
        sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM count_batches WHERE id = $1)")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .map_err(backend)
    }

    async fn metrics_since(&self, org_id: &str, from_minute: u64) -> StoreResult<MetricBucket> {
        let r = sqlx::query(
            "SELECT COALESCE(SUM(total), 0)::bigint AS total, \
             COALESCE(SUM(unpaid402), 0)::bigint AS unpaid402, \
             COALESCE(SUM(paid), 0)::bigint AS paid, COALESCE(SUM(errors), 0)::bigint AS errors, \
             COALESCE(SUM(challenge_us_sum), 0)::bigint AS challenge_us_sum, \
             COALESCE(SUM(challenge_count), 0)::bigint AS challenge_count, \
             COALESCE(SUM(settle_ms_sum), 0)::bigint AS settle_ms_sum, \
             COALESCE(SUM(settle_count), 0)::bigint AS settle_count, \
             COALESCE(SUM(revenue), 0)::bigint AS revenue, \
             COALESCE(SUM(refunded), 0)::bigint AS refunded, \
             COALESCE(SUM(paid_mpp), 0)::bigint AS paid_mpp \
             FROM metric_buckets WHERE org_id = $1 AND minute >= $2",
        )
        .bind(org_id)
        .bind(to_i64(from_minute)?)
        .fetch_one(&self.pool)
        .await
        .map_err(backend)?;
        let get = |c: &str| r.try_get::<i64, _>(c).map(to_u64).map_err(backend);
        Ok(MetricBucket {
            total: get("total")?,
            unpaid402: get("unpaid402")?,
            paid: get("paid")?,
            errors: get("errors")?,
            challenge_us_sum: get("challenge_us_sum")?,
            challenge_count: get("challenge_count")?,
            settle_ms_sum: get("settle_ms_sum")?,
            settle_count: get("settle_count")?,
            revenue: get("revenue")?,
            refunded: get("refunded")?,
            paid_mpp: get("paid_mpp")?,
        })
    }

    async fn rollups(
        &self,
        org_id: &str,
        tier: Tier,
        from_period: u64,
    ) -> StoreResult<Vec<RollupRow>> {
        let rows = sqlx::query(
            "SELECT period, route_id, requests, paid, errors, revenue, refunded, settle_count, \
             settle_ms_sum, settle_hist FROM metric_rollups \
             WHERE org_id = $1 AND tier = $2 AND period >= $3",
        )
        .bind(org_id)
        .bind(i16::from(tier.code()))
        .bind(to_i64(from_period)?)
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        rows.iter()
            .map(|r| {
                let get = |c: &str| r.try_get::<i64, _>(c).map(to_u64).map_err(backend);
                let hist: Vec<i64> = r.try_get("settle_hist").map_err(backend)?;
                Ok(RollupRow {
                    tier,
                    period: get("period")?,
                    route_id: r.try_get("route_id").map_err(backend)?,
                    bucket: RollupBucket {
                        requests: get("requests")?,
                        paid: get("paid")?,
                        errors: get("errors")?,
                        revenue: get("revenue")?,
                        refunded: get("refunded")?,
                        settle_count: get("settle_count")?,
                        settle_ms_sum: get("settle_ms_sum")?,
                        settle_hist: hist.into_iter().map(to_u64).collect(),
                    },
                })
            })
            .collect()
    }
}

async fn merge_minute(
    tx: &mut sqlx::PgConnection,
    org_id: &str,
    minute: u64,
    b: &MetricBucket,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO metric_buckets AS m (org_id, minute, total, unpaid402, paid, errors, \
             challenge_us_sum, challenge_count, settle_ms_sum, settle_count, revenue, refunded, \
             paid_mpp) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
             ON CONFLICT (org_id, minute) DO UPDATE SET \
             total = m.total + EXCLUDED.total, unpaid402 = m.unpaid402 + EXCLUDED.unpaid402, \
             paid = m.paid + EXCLUDED.paid, errors = m.errors + EXCLUDED.errors, \
             challenge_us_sum = m.challenge_us_sum + EXCLUDED.challenge_us_sum, \
             challenge_count = m.challenge_count + EXCLUDED.challenge_count, \
             settle_ms_sum = m.settle_ms_sum + EXCLUDED.settle_ms_sum, \
             settle_count = m.settle_count + EXCLUDED.settle_count, \
             revenue = m.revenue + EXCLUDED.revenue, refunded = m.refunded + EXCLUDED.refunded, \
             paid_mpp = m.paid_mpp + EXCLUDED.paid_mpp",
    )
    .bind(org_id)
    .bind(to_i64(minute)?)
    .bind(to_i64(b.total)?)
    .bind(to_i64(b.unpaid402)?)
    .bind(to_i64(b.paid)?)
    .bind(to_i64(b.errors)?)
    .bind(to_i64(b.challenge_us_sum)?)
    .bind(to_i64(b.challenge_count)?)
    .bind(to_i64(b.settle_ms_sum)?)
    .bind(to_i64(b.settle_count)?)
    .bind(to_i64(b.revenue)?)
    .bind(to_i64(b.refunded)?)
    .bind(to_i64(b.paid_mpp)?)
    .execute(&mut *tx)
    .await
    .map_err(backend)?;
    Ok(())
}

async fn merge_rollup(
    tx: &mut sqlx::PgConnection,
    org_id: &str,
    row: &RollupRow,
) -> StoreResult<()> {
    let b = &row.bucket;
    let hist = b
        .settle_hist
        .iter()
        .map(|v| to_i64(*v))
        .collect::<StoreResult<Vec<i64>>>()?;
    sqlx::query(
        "INSERT INTO metric_rollups AS m (org_id, tier, period, route_id, requests, paid, \
                 errors, revenue, settle_count, settle_ms_sum, settle_hist, refunded) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                 ON CONFLICT (org_id, tier, period, route_id) DO UPDATE SET \
                 requests = m.requests + EXCLUDED.requests, paid = m.paid + EXCLUDED.paid, \
                 errors = m.errors + EXCLUDED.errors, revenue = m.revenue + EXCLUDED.revenue, \
                 refunded = m.refunded + EXCLUDED.refunded, \
                 settle_count = m.settle_count + EXCLUDED.settle_count, \
                 settle_ms_sum = m.settle_ms_sum + EXCLUDED.settle_ms_sum, \
                 settle_hist = ARRAY(SELECT COALESCE(a, 0) + COALESCE(b, 0) \
                   FROM unnest(m.settle_hist, EXCLUDED.settle_hist) WITH ORDINALITY AS t(a, b, i) \
                   ORDER BY i)",
    )
    .bind(org_id)
    .bind(i16::from(row.tier.code()))
    .bind(to_i64(row.period)?)
    .bind(&row.route_id)
    .bind(to_i64(b.requests)?)
    .bind(to_i64(b.paid)?)
    .bind(to_i64(b.errors)?)
    .bind(to_i64(b.revenue)?)
    .bind(to_i64(b.settle_count)?)
    .bind(to_i64(b.settle_ms_sum)?)
    .bind(hist)
    .bind(to_i64(b.refunded)?)
    .execute(&mut *tx)
    .await
    .map_err(backend)?;
    Ok(())
}

/// Takes one of `org_id`'s plan slots for `month` on `conn` (a transaction's, to take it with
/// what it belongs to), unless `limit` are taken (0 = unlimited). One statement, so the row lock
/// orders every node's takes.
pub(super) async fn take_slot(
    conn: &mut sqlx::PgConnection,
    org_id: &str,
    month: &str,
    limit: u64,
) -> StoreResult<bool> {
    let taken = sqlx::query(
        "INSERT INTO plan_usage AS u (org_id, month, count) \
         SELECT $1, $2, 1 WHERE $3 = 0 OR $3 >= 1 \
         ON CONFLICT (org_id, month) DO UPDATE SET count = u.count + 1 \
         WHERE $3 = 0 OR u.count < $3",
    )
    .bind(org_id)
    .bind(month)
    .bind(to_i64(limit)?)
    .execute(conn)
    .await
    .map_err(backend)?;
    Ok(taken.rows_affected() == 1)
}
