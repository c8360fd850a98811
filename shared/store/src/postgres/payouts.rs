//! Corridor records in PostgreSQL. Every multi-record step is one transaction; the rows it
//! decides on are locked (`FOR UPDATE`) or claimed by an insert that waits for a concurrent
//! holder, so nodes sharing the database take each decision once.

use super::sql::{backend, doc, json};
use super::PgStore;
use async_trait::async_trait;
use paygate_domain::{StoreError, StoreResult};
use paygate_payouts::store::{BeginPayout, EventOutcome, PayoutStore};
use paygate_payouts::webhook::ProviderEvent;
use paygate_payouts::{Corridor, PayIdempotency, Payout, PayoutStatus, Quote};
use sqlx::{Postgres, Row, Transaction};

/// Inside `tx`: stores a payout whole, with the columns reconciliation and lookups use.
async fn put_payout(tx: &mut Transaction<'_, Postgres>, p: &Payout) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO payouts (id, org_id, corridor_id, cpn_payment_id, initiating, created_at, doc) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) \
         ON CONFLICT (id) DO UPDATE SET cpn_payment_id = EXCLUDED.cpn_payment_id, \
         initiating = EXCLUDED.initiating, doc = EXCLUDED.doc",
    )
    .bind(&p.id)
    .bind(&p.org_id)
    .bind(&p.corridor_id)
    .bind(&p.cpn_payment_id)
    .bind(p.status == PayoutStatus::Initiating)
    .bind(&p.created_at)
    .bind(json(p)?)
    .execute(&mut **tx)
    .await
    .map_err(backend)?;
    Ok(())
}

/// Inside `tx`: the key's record, locked.
async fn pay_key_for_update(
    tx: &mut Transaction<'_, Postgres>,
    org_id: &str,
    key: &str,
) -> StoreResult<Option<PayIdempotency>> {
    sqlx::query("SELECT doc FROM pay_keys WHERE org_id = $1 AND key = $2 FOR UPDATE")
        .bind(org_id)
        .bind(key)
        .fetch_optional(&mut **tx)
        .await
        .map_err(backend)?
        .map(|r| doc(&r))
        .transpose()
}

#[async_trait]
impl PayoutStore for PgStore {
    async fn create_corridor(&self, c: &Corridor) -> StoreResult<(Corridor, bool)> {
        let created = sqlx::query(
            "INSERT INTO corridors (id, org_id, dest_currency, doc) VALUES ($1, $2, $3, $4) \
             ON CONFLICT ON CONSTRAINT corridors_one_per_currency DO NOTHING",
        )
        .bind(&c.id)
        .bind(&c.org_id)
        .bind(c.dest_currency.code())
        .bind(json(c)?)
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        if created.rows_affected() == 1 {
            return Ok((c.clone(), true));
        }
        let row = sqlx::query("SELECT doc FROM corridors WHERE org_id = $1 AND dest_currency = $2")
            .bind(&c.org_id)
            .bind(c.dest_currency.code())
            .fetch_one(&self.pool)
            .await
            .map_err(backend)?;
        Ok((doc(&row)?, false))
    }

    async fn get_corridor(&self, id: &str) -> StoreResult<Option<Corridor>> {
        self.one(sqlx::query("SELECT doc FROM corridors WHERE id = $1").bind(id))
            .await
    }

    async fn list_corridors(&self, org_id: &str) -> StoreResult<Vec<Corridor>> {
        let rows =
            sqlx::query("SELECT doc FROM corridors WHERE org_id = $1 ORDER BY id COLLATE \"C\"")
                .bind(org_id)
                .fetch_all(&self.pool)
                .await
                .map_err(backend)?;
        rows.iter().map(doc).collect()
    }

    async fn list_payouts(
        &self,
        corridor_id: &str,
        before_id: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<Payout>> {
        let rows = sqlx::query(
            "SELECT doc FROM payouts WHERE corridor_id = $1 \
             AND ($2::text IS NULL OR id COLLATE \"C\" < $2) \
             ORDER BY id COLLATE \"C\" DESC LIMIT $3",
        )
        .bind(corridor_id)
        .bind(before_id)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        rows.iter().map(doc).collect()
    }

    async fn update_corridor(&self, c: &Corridor) -> StoreResult<()> {
        sqlx::query("UPDATE corridors SET doc = $2 WHERE id = $1")
            .bind(&c.id)
            .bind(json(c)?)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn put_quote(&self, q: &Quote) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO quotes (id, org_id, doc) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET doc = EXCLUDED.doc",
        )
        .bind(&q.id)
        .bind(&q.org_id)
        .bind(json(q)?)
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn get_quote(&self, id: &str) -> StoreResult<Option<Quote>> {
        self.one(sqlx::query("SELECT doc FROM quotes WHERE id = $1").bind(id))
            .await
    }

    async fn get_pay_key(&self, org_id: &str, key: &str) -> StoreResult<Option<PayIdempotency>> {
        self.one(
            sqlx::query("SELECT doc FROM pay_keys WHERE org_id = $1 AND key = $2")
                .bind(org_id)
                .bind(key),
        )
        .await
    }

    async fn begin_payout(
        &self,
        key: &PayIdempotency,
        payout: &Payout,
    ) -> StoreResult<BeginPayout> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let claimed = sqlx::query(
            "INSERT INTO pay_keys (org_id, key, doc) VALUES ($1, $2, $3) \
             ON CONFLICT (org_id, key) DO NOTHING",
        )
        .bind(&key.org_id)
        .bind(&key.key)
        .bind(json(key)?)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        if claimed.rows_affected() == 0 {
            tx.rollback().await.map_err(backend)?;
            let prev = self
                .get_pay_key(&key.org_id, &key.key)
                .await?
                .ok_or_else(|| StoreError::Backend("pay key vanished".into()))?;
            return Ok(BeginPayout::KeyUsed(Box::new(prev)));
        }
        let Some(row) = sqlx::query("SELECT doc FROM quotes WHERE id = $1 FOR UPDATE")
            .bind(&payout.quote_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?
        else {
            return Err(StoreError::NotFound);
        };
        let mut quote: Quote = doc(&row)?;
        if quote.used_by.is_some() {
            return Ok(BeginPayout::QuoteUsed);
        }
        quote.used_by = Some(payout.id.clone());
        sqlx::query("UPDATE quotes SET doc = $2 WHERE id = $1")
            .bind(&quote.id)
            .bind(json(&quote)?)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        put_payout(&mut tx, payout).await?;
        tx.commit().await.map_err(backend)?;
        Ok(BeginPayout::Started)
    }

    async fn accept_payout(&self, payout: &Payout, response: &str) -> StoreResult<()> {
        if payout.cpn_payment_id.is_none() {
            return Err(StoreError::Backend(
                "accepted payout without provider id".into(),
            ));
        }
        let mut tx = self.pool.begin().await.map_err(backend)?;
        if let Some(mut k) =
            pay_key_for_update(&mut tx, &payout.org_id, &payout.idempotency_key).await?
        {
            if k.payment_id == payout.id {
                k.response = Some(response.to_string());
                sqlx::query("UPDATE pay_keys SET doc = $3 WHERE org_id = $1 AND key = $2")
                    .bind(&k.org_id)
                    .bind(&k.key)
                    .bind(json(&k)?)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
            }
        }
        put_payout(&mut tx, payout).await?;
        tx.commit().await.map_err(backend)
    }

    async fn refuse_payout(&self, payout: &Payout) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        if let Some(k) =
            pay_key_for_update(&mut tx, &payout.org_id, &payout.idempotency_key).await?
        {
            if k.payment_id == payout.id {
                sqlx::query("DELETE FROM pay_keys WHERE org_id = $1 AND key = $2")
                    .bind(&k.org_id)
                    .bind(&k.key)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
            }
        }
        put_payout(&mut tx, payout).await?;
        tx.commit().await.map_err(backend)
    }

    async fn get_payout(&self, id: &str) -> StoreResult<Option<Payout>> {
        self.one(sqlx::query("SELECT doc FROM payouts WHERE id = $1").bind(id))
            .await
    }

    async fn initiating_payouts(&self) -> StoreResult<Vec<Payout>> {
        let rows = sqlx::query("SELECT doc FROM payouts WHERE initiating ORDER BY id")
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        let all: Vec<Payout> = rows.iter().map(doc).collect::<StoreResult<_>>()?;
        Ok(all
            .into_iter()
            .filter(|p| p.status == PayoutStatus::Initiating)
            .collect())
    }

    async fn apply_payout_event(
        &self,
        event_key: &str,
        event: &ProviderEvent,
        raw: &[u8],
        received_at: &str,
    ) -> StoreResult<EventOutcome> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        // The payout, locked: events for one payout are applied one at a time, whichever node
        // received them.
        let payout = sqlx::query("SELECT doc FROM payouts WHERE cpn_payment_id = $1 FOR UPDATE")
            .bind(&event.payment_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?;
        let Some(row) = payout else {
            let seen: Option<i32> =
                sqlx::query_scalar("SELECT 1 FROM payout_events WHERE event_key = $1")
                    .bind(event_key)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(backend)?;
            if seen.is_some() {
                return Ok(EventOutcome::Duplicate);
            }
            sqlx::query(
                "INSERT INTO payout_orphans (cpn_payment_id, event_key, raw) VALUES ($1, $2, $3) \
                 ON CONFLICT DO NOTHING",
            )
            .bind(&event.payment_id)
            .bind(event_key)
            .bind(raw)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
            tx.commit().await.map_err(backend)?;
            return Ok(EventOutcome::Orphaned);
        };
        let recorded = sqlx::query(
            "INSERT INTO payout_events (event_key, received_at) VALUES ($1, $2) \
             ON CONFLICT (event_key) DO NOTHING",
        )
        .bind(event_key)
        .bind(received_at)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        if recorded.rows_affected() == 0 {
            return Ok(EventOutcome::Duplicate);
        }
        let mut p: Payout = doc(&row)?;
        let Some(next) = p.apply_event(event, received_at) else {
            tx.commit().await.map_err(backend)?;
            return Ok(EventOutcome::Ignored(p.status));
        };
        put_payout(&mut tx, &p).await?;
        tx.commit().await.map_err(backend)?;
        Ok(EventOutcome::Applied(next, Box::new(p)))
    }

    async fn adoptable_orphans(&self) -> StoreResult<Vec<(String, String, Vec<u8>)>> {
        let rows = sqlx::query(
            "SELECT o.cpn_payment_id, o.event_key, o.raw FROM payout_orphans o \
             WHERE EXISTS (SELECT 1 FROM payouts p WHERE p.cpn_payment_id = o.cpn_payment_id) \
             ORDER BY o.cpn_payment_id, o.event_key",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("cpn_payment_id").map_err(backend)?,
                    r.try_get("event_key").map_err(backend)?,
                    r.try_get("raw").map_err(backend)?,
                ))
            })
            .collect()
    }

    async fn drop_orphan(&self, cpn_id: &str, event_key: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM payout_orphans WHERE cpn_payment_id = $1 AND event_key = $2")
            .bind(cpn_id)
            .bind(event_key)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }
}
