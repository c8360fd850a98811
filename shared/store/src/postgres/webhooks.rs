//! Seller webhooks in PostgreSQL: endpoints as JSON rows; deliveries as JSON beside the columns
//! the dispatcher's queries need. Any node may deliver: a lease is an `UPDATE` that only
//! succeeds on the lease the node read.

use super::sql::{backend, json};
use super::PgStore;
use crate::WebhookStore;
use async_trait::async_trait;
use paygate_domain::webhook::{DeliveryStatus, WebhookDelivery, WebhookEndpoint};
use paygate_domain::StoreResult;

fn object_key(d: &WebhookDelivery) -> String {
    format!("{}\u{1}{}", d.endpoint_id, d.object_id)
}

#[async_trait]
impl WebhookStore for PgStore {
    async fn put_webhook_endpoint(&self, e: &WebhookEndpoint) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO webhook_endpoints (id, org_id, doc) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET doc = EXCLUDED.doc",
        )
        .bind(&e.id)
        .bind(&e.org_id)
        .bind(json(e)?)
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn webhook_endpoints(&self, org_id: &str) -> StoreResult<Vec<WebhookEndpoint>> {
        self.all(
            sqlx::query("SELECT doc FROM webhook_endpoints WHERE org_id = $1 ORDER BY id")
                .bind(org_id),
        )
        .await
    }

    async fn webhook_endpoint(
        &self,
        org_id: &str,
        id: &str,
    ) -> StoreResult<Option<WebhookEndpoint>> {
        self.one(
            sqlx::query("SELECT doc FROM webhook_endpoints WHERE org_id = $1 AND id = $2")
                .bind(org_id)
                .bind(id),
        )
        .await
    }

    async fn delete_webhook_endpoint(&self, org_id: &str, id: &str) -> StoreResult<bool> {
        let r = sqlx::query("DELETE FROM webhook_endpoints WHERE org_id = $1 AND id = $2")
            .bind(org_id)
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(r.rows_affected() == 1)
    }

    async fn enqueue_deliveries(&self, d: &[WebhookDelivery]) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        for x in d {
            sqlx::query(
                "INSERT INTO webhook_deliveries \
                 (id, endpoint_id, object_key, pending, next_attempt_ms, lease_until_ms, doc) \
                 VALUES ($1, $2, $3, TRUE, $4, $5, $6)",
            )
            .bind(&x.id)
            .bind(&x.endpoint_id)
            .bind(object_key(x))
            .bind(x.next_attempt_ms)
            .bind(x.lease_until_ms)
            .bind(json(x)?)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)
    }

    async fn due_deliveries(&self, now_ms: i64, limit: usize) -> StoreResult<Vec<WebhookDelivery>> {
        self.all(
            sqlx::query(
                "SELECT d.doc FROM webhook_deliveries d \
                 WHERE d.pending AND d.next_attempt_ms <= $1 AND d.lease_until_ms <= $1 \
                 AND NOT EXISTS (SELECT 1 FROM webhook_deliveries e \
                     WHERE e.pending AND e.object_key = d.object_key AND e.id < d.id) \
                 ORDER BY d.id LIMIT $2",
            )
            .bind(now_ms)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX)),
        )
        .await
    }

    async fn lease_delivery(&self, id: &str, seen_ms: i64, until_ms: i64) -> StoreResult<bool> {
        let r = sqlx::query(
            "UPDATE webhook_deliveries SET lease_until_ms = $3 \
             WHERE id = $1 AND lease_until_ms = $2 AND pending",
        )
        .bind(id)
        .bind(seen_ms)
        .bind(until_ms)
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(r.rows_affected() == 1)
    }

    async fn update_delivery(&self, d: &WebhookDelivery) -> StoreResult<()> {
        sqlx::query(
            "UPDATE webhook_deliveries SET pending = $2, next_attempt_ms = $3, \
             lease_until_ms = $4, doc = $5 WHERE id = $1",
        )
        .bind(&d.id)
        .bind(d.status == DeliveryStatus::Pending)
        .bind(d.next_attempt_ms)
        .bind(d.lease_until_ms)
        .bind(json(d)?)
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn webhook_deliveries(
        &self,
        endpoint_id: &str,
        limit: usize,
    ) -> StoreResult<Vec<WebhookDelivery>> {
        self.all(
            sqlx::query(
                "SELECT doc FROM webhook_deliveries WHERE endpoint_id = $1 \
                 ORDER BY id DESC LIMIT $2",
            )
            .bind(endpoint_id)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX)),
        )
        .await
    }

    async fn webhook_delivery(&self, id: &str) -> StoreResult<Option<WebhookDelivery>> {
        self.one(sqlx::query("SELECT doc FROM webhook_deliveries WHERE id = $1").bind(id))
            .await
    }
}
