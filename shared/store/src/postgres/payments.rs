//! Gateway payments in PostgreSQL: `payments` and the `nonces` replay guard. A nonce is taken
//! by one insert; a concurrent one with the same key waits for the holder's transaction and
//! then reads the holder, so every node answers a replay from the same record.

use super::sql::{backend, doc, json};
use super::PgStore;
use crate::{PaymentGuard, PaymentQuery, PaymentReservation, PaymentStore};
use async_trait::async_trait;
use paygate_domain::model::{GatewayPayment, PaymentIdRecord};
use paygate_domain::StoreResult;
use sqlx::{Postgres, Transaction};

/// Inside `tx`: stores `p` whole, with the columns queries use.
async fn put(tx: &mut Transaction<'_, Postgres>, p: &GatewayPayment) -> StoreResult<()> {
    let status = p.status.as_str();
    sqlx::query(
        "INSERT INTO payments \
         (id, nonce_key, org_id, route_id, status, open, created_at, doc, payer) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, open = EXCLUDED.open, \
         doc = EXCLUDED.doc",
    )
    .bind(&p.id)
    .bind(&p.nonce_key)
    .bind(&p.org_id)
    .bind(&p.route_id)
    .bind(status)
    .bind(p.status.is_open())
    .bind(&p.created_at)
    .bind(json(p)?)
    .bind(p.payer.to_ascii_lowercase())
    .execute(&mut **tx)
    .await
    .map_err(backend)?;
    Ok(())
}

const HOLDER: &str =
    "SELECT p.doc FROM nonces n JOIN payments p ON p.id = n.payment_id WHERE n.nonce_key = $1";

#[async_trait]
impl PaymentStore for PgStore {
    async fn reserve_payment(&self, payment: &GatewayPayment) -> StoreResult<PaymentReservation> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        put(&mut tx, payment).await?;
        let taken = sqlx::query(
            "INSERT INTO nonces (nonce_key, payment_id) VALUES ($1, $2) \
             ON CONFLICT (nonce_key) DO NOTHING",
        )
        .bind(&payment.nonce_key)
        .bind(&payment.id)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        if taken.rows_affected() == 1 {
            if let Some(slot) = &payment.plan_slot {
                // The plan slot in the same transaction: reserved with its slot, or not at all.
                let counted =
                    super::counters::take_slot(&mut tx, &payment.org_id, &slot.month, slot.limit)
                        .await?;
                if !counted {
                    tx.rollback().await.map_err(backend)?;
                    return Ok(PaymentReservation::OverPlan);
                }
            }
            tx.commit().await.map_err(backend)?;
            return Ok(PaymentReservation::Reserved);
        }
        // Held: nothing of this attempt is kept; the holder is read after its commit.
        tx.rollback().await.map_err(backend)?;
        let row = sqlx::query(HOLDER)
            .bind(&payment.nonce_key)
            .fetch_one(&self.pool)
            .await
            .map_err(backend)?;
        Ok(PaymentReservation::Held(Box::new(doc(&row)?)))
    }

    async fn update_payment(&self, payment: &GatewayPayment) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        put(&mut tx, payment).await?;
        tx.commit().await.map_err(backend)
    }

    async fn write_payment_if(
        &self,
        payment: &GatewayPayment,
        guard: PaymentGuard<'_>,
    ) -> StoreResult<bool> {
        let (sql, at) = match guard {
            PaymentGuard::StillOpen => (
                "UPDATE payments SET status = $2, open = $3, doc = $4 WHERE id = $1 AND open",
                None,
            ),
            PaymentGuard::Unchanged(at) => (
                "UPDATE payments SET status = $2, open = $3, doc = $4 \
                 WHERE id = $1 AND doc::json ->> 'updatedAt' = $5",
                Some(at),
            ),
        };
        let mut query = sqlx::query(sql)
            .bind(&payment.id)
            .bind(payment.status.as_str())
            .bind(payment.status.is_open())
            .bind(json(payment)?);
        if let Some(at) = at {
            query = query.bind(at);
        }
        let done = query.execute(&self.pool).await.map_err(backend)?;
        Ok(done.rows_affected() == 1)
    }

    async fn release_payment(&self, payment: &GatewayPayment) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        sqlx::query("DELETE FROM nonces WHERE nonce_key = $1 AND payment_id = $2")
            .bind(&payment.nonce_key)
            .bind(&payment.id)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        put(&mut tx, payment).await?;
        tx.commit().await.map_err(backend)
    }

    async fn get_payment(&self, id: &str) -> StoreResult<Option<GatewayPayment>> {
        self.one(sqlx::query("SELECT doc FROM payments WHERE id = $1").bind(id))
            .await
    }

    async fn payment_for_nonce(&self, nonce_key: &str) -> StoreResult<Option<GatewayPayment>> {
        self.one(sqlx::query(HOLDER).bind(nonce_key)).await
    }

    async fn claim_redemption(
        &self,
        id: &str,
        retry: &GatewayPayment,
        at: &str,
    ) -> StoreResult<Option<GatewayPayment>> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let Some(row) = sqlx::query("SELECT doc FROM payments WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?
        else {
            return Ok(None);
        };
        let mut p: GatewayPayment = doc(&row)?;
        if !p.redeemable_by(retry) {
            return Ok(None);
        }
        p.redeemed_at = Some(at.to_string());
        p.updated_at = at.to_string();
        put(&mut tx, &p).await?;
        tx.commit().await.map_err(backend)?;
        Ok(Some(p))
    }

    async fn unfinished_payments(&self) -> StoreResult<Vec<GatewayPayment>> {
        let rows = sqlx::query("SELECT doc FROM payments WHERE open ORDER BY id")
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        let all: Vec<GatewayPayment> = rows.iter().map(doc).collect::<StoreResult<_>>()?;
        Ok(all.into_iter().filter(|p| p.status.is_open()).collect())
    }

    async fn list_payments(
        &self,
        org_id: &str,
        q: &PaymentQuery,
    ) -> StoreResult<Vec<GatewayPayment>> {
        let mut sql =
            sqlx::QueryBuilder::<Postgres>::new("SELECT doc FROM payments WHERE org_id = ");
        sql.push_bind(org_id);
        if let Some(r) = &q.route_id {
            sql.push(" AND route_id = ").push_bind(r);
        }
        if let Some(a) = &q.payer {
            sql.push(" AND payer = ").push_bind(a.to_ascii_lowercase());
        }
        if let Some(s) = q.status {
            sql.push(" AND status = ").push_bind(s.as_str());
        }
        if let Some(f) = &q.from_id {
            sql.push(" AND id COLLATE \"C\" >= ").push_bind(f);
        }
        if let Some(b) = &q.before_id {
            sql.push(" AND id COLLATE \"C\" < ").push_bind(b);
        }
        sql.push(" ORDER BY id COLLATE \"C\" DESC LIMIT ")
            .push_bind(i64::try_from(q.limit).unwrap_or(i64::MAX));
        let rows = sql.build().fetch_all(&self.pool).await.map_err(backend)?;
        rows.iter().map(doc).collect()
    }

    async fn claim_payment_id(
        &self,
        rec: &PaymentIdRecord,
        stale_before_unix: i64,
    ) -> StoreResult<Option<PaymentIdRecord>> {
        let claimed = sqlx::query(
            "INSERT INTO payment_ids (org_id, key, created_at_unix, doc) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (org_id, key) DO UPDATE \
             SET created_at_unix = EXCLUDED.created_at_unix, doc = EXCLUDED.doc \
             WHERE payment_ids.created_at_unix < $5",
        )
        .bind(&rec.org_id)
        .bind(&rec.key)
        .bind(rec.created_at_unix)
        .bind(json(rec)?)
        .bind(stale_before_unix)
        .execute(&self.pool)
        .await
        .map_err(backend)?
        .rows_affected()
            == 1;
        if claimed {
            return Ok(None);
        }
        let row = sqlx::query("SELECT doc FROM payment_ids WHERE org_id = $1 AND key = $2")
            .bind(&rec.org_id)
            .bind(&rec.key)
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)?;
        row.as_ref().map(doc).transpose()
    }

    async fn put_payment_id(&self, rec: &PaymentIdRecord) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO payment_ids (org_id, key, created_at_unix, doc) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (org_id, key) DO UPDATE SET doc = EXCLUDED.doc",
        )
        .bind(&rec.org_id)
        .bind(&rec.key)
        .bind(rec.created_at_unix)
        .bind(json(rec)?)
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn purge_payment_ids(&self, before_unix: i64) -> StoreResult<usize> {
        let done = sqlx::query("DELETE FROM payment_ids WHERE created_at_unix < $1")
            .bind(before_unix)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(usize::try_from(done.rows_affected()).unwrap_or(usize::MAX))
    }
}
