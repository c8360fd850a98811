//! Seller webhooks on sled: endpoints by `org \0 id`; deliveries by id (time-ordered, so the
//! tree is the queue's order), the pending ones' ids in a tree of their own (what the
//! dispatcher scans), and `endpoint \0 id` for an endpoint's delivery log. One process opens a
//! sled database, so a lease is a compare-and-set on the delivery within a transaction.

use super::*;
use crate::traits::WebhookStore;
use paygate_domain::webhook::{DeliveryStatus, WebhookDelivery, WebhookEndpoint};
use sled::Transactional;
use std::collections::HashSet;

#[async_trait]
impl WebhookStore for SledStore {
    async fn put_webhook_endpoint(&self, e: &WebhookEndpoint) -> StoreResult<()> {
        self.webhook_endpoints
            .insert(key2(&e.org_id, &e.id), enc(e)?)
            .map_err(backend)?;
        self.durable().await
    }

    async fn webhook_endpoints(&self, org_id: &str) -> StoreResult<Vec<WebhookEndpoint>> {
        self.webhook_endpoints
            .scan_prefix(prefix(org_id))
            .map(|item| dec(&item.map_err(backend)?.1))
            .collect()
    }

    async fn webhook_endpoint(
        &self,
        org_id: &str,
        id: &str,
    ) -> StoreResult<Option<WebhookEndpoint>> {
        Self::get(&self.webhook_endpoints, &key2(org_id, id))
    }

    async fn delete_webhook_endpoint(&self, org_id: &str, id: &str) -> StoreResult<bool> {
        let gone = self
            .webhook_endpoints
            .remove(key2(org_id, id))
            .map_err(backend)?
            .is_some();
        self.durable().await?;
        Ok(gone)
    }

    async fn enqueue_deliveries(&self, d: &[WebhookDelivery]) -> StoreResult<()> {
        (
            &self.webhook_deliveries,
            &self.webhook_pending,
            &self.webhook_by_endpoint,
        )
            .transaction(|(all, pending, by_endpoint)| {
                for x in d {
                    let doc = enc(x).or_else(abort)?;
                    all.insert(x.id.as_bytes(), doc)?;
                    pending.insert(x.id.as_bytes(), &[][..])?;
                    by_endpoint.insert(key2(&x.endpoint_id, &x.id), &[][..])?;
                }
                Ok(())
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn due_deliveries(&self, now_ms: i64, limit: usize) -> StoreResult<Vec<WebhookDelivery>> {
        let mut seen: HashSet<(String, String)> = HashSet::new();
        let mut out = Vec::new();
        for item in self.webhook_pending.iter() {
            let (id, _) = item.map_err(backend)?;
            let Some(doc) = self.webhook_deliveries.get(&id).map_err(backend)? else {
                continue;
            };
            let d: WebhookDelivery = dec(&doc)?;
            // The oldest pending delivery of its endpoint and object goes first.
            if !seen.insert((d.endpoint_id.clone(), d.object_id.clone())) {
                continue;
            }
            if d.next_attempt_ms <= now_ms && d.lease_until_ms <= now_ms {
                out.push(d);
                if out.len() >= limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    async fn lease_delivery(&self, id: &str, seen_ms: i64, until_ms: i64) -> StoreResult<bool> {
        let taken = self
            .webhook_deliveries
            .transaction(|t| {
                let Some(doc) = t.get(id.as_bytes())? else {
                    return Ok(false);
                };
                let mut d: WebhookDelivery = dec(&doc).or_else(abort)?;
                if d.lease_until_ms != seen_ms || d.status != DeliveryStatus::Pending {
                    return Ok(false);
                }
                d.lease_until_ms = until_ms;
                t.insert(id.as_bytes(), enc(&d).or_else(abort)?)?;
                Ok(true)
            })
            .map_err(tx_err)?;
        Ok(taken)
    }

    async fn update_delivery(&self, d: &WebhookDelivery) -> StoreResult<()> {
        (&self.webhook_deliveries, &self.webhook_pending)
            .transaction(|(all, pending)| {
                all.insert(d.id.as_bytes(), enc(d).or_else(abort)?)?;
                if d.status == DeliveryStatus::Pending {
                    pending.insert(d.id.as_bytes(), &[][..])?;
                } else {
                    pending.remove(d.id.as_bytes())?;
                }
                Ok(())
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn webhook_deliveries(
        &self,
        endpoint_id: &str,
        limit: usize,
    ) -> StoreResult<Vec<WebhookDelivery>> {
        let mut out = Vec::new();
        for item in self
            .webhook_by_endpoint
            .scan_prefix(prefix(endpoint_id))
            .rev()
            .take(limit)
        {
            let (k, _) = item.map_err(backend)?;
            let id = &k[endpoint_id.len() + 1..];
            if let Some(doc) = self.webhook_deliveries.get(id).map_err(backend)? {
                out.push(dec(&doc)?);
            }
        }
        Ok(out)
    }

    async fn webhook_delivery(&self, id: &str) -> StoreResult<Option<WebhookDelivery>> {
        self.webhook_deliveries
            .get(id.as_bytes())
            .map_err(backend)?
            .map(|v| dec(&v))
            .transpose()
    }
}
