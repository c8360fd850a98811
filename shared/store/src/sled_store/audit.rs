//! The audit log on sled: one tree keyed `org \0 id` (ids are time-ordered), so an
//! organisation's entries are one prefix, read backwards for newest first.

use super::*;
use crate::traits::AuditStore;
use paygate_domain::audit::AuditEntry;

#[async_trait]
impl AuditStore for SledStore {
    async fn append_audit(&self, e: &AuditEntry) -> StoreResult<()> {
        self.audit
            .insert(key2(&e.org_id, &e.id), enc(e)?)
            .map_err(backend)?;
        self.durable().await
    }

    async fn list_audit(
        &self,
        org_id: &str,
        before_id: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<AuditEntry>> {
        let start = prefix(org_id);
        let end = match before_id {
            Some(b) => key2(org_id, b),
            None => prefix_end(prefix(org_id)),
        };
        let mut out = Vec::new();
        for item in self.audit.range(start..end).rev().take(limit) {
            let (_, v) = item.map_err(backend)?;
            out.push(dec(&v)?);
        }
        Ok(out)
    }
}
