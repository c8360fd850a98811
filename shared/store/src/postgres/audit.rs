//! The audit log in PostgreSQL: one row per entry, its JSON beside the organisation's index.

use super::sql::{backend, json};
use super::PgStore;
use crate::AuditStore;
use async_trait::async_trait;
use paygate_domain::audit::AuditEntry;
use paygate_domain::StoreResult;

#[async_trait]
impl AuditStore for PgStore {
    async fn append_audit(&self, e: &AuditEntry) -> StoreResult<()> {
        sqlx::query("INSERT INTO audit_log (id, org_id, doc) VALUES ($1, $2, $3)")
            .bind(&e.id)
            .bind(&e.org_id)
            .bind(json(e)?)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn list_audit(
        &self,
        org_id: &str,
        before_id: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<AuditEntry>> {
        self.all(
            sqlx::query(
                "SELECT doc FROM audit_log WHERE org_id = $1 AND ($2::TEXT IS NULL OR id < $2) \
                 ORDER BY id DESC LIMIT $3",
            )
            .bind(org_id)
            .bind(before_id)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX)),
        )
        .await
    }
}
