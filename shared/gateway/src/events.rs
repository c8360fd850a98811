//! Seller webhook events (issue 32, item 3), the emitting side: an event about an object of an
//! organisation becomes one delivery per endpoint of that organisation asking for its type, in
//! the store's durable queue. Sending them (signing, retries, order per object, leases across
//! nodes) is the control plane's dispatcher's.

use paygate_domain::model::GatewayPayment;
use paygate_domain::webhook::{DeliveryStatus, WebhookDelivery};
use paygate_store::Store;
use std::sync::Arc;

/// Emits events into the webhook queue.
pub struct Events {
    store: Arc<dyn Store>,
}

impl Events {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Enqueues `event_type` about `object_id` of `org_id`, its `data` the event's body, for
    /// every endpoint of the organisation that asks for it. Once this returns the event is
    /// durable; a store that fails it is an operator's problem (an ERROR: the event is lost).
    pub async fn emit(
        &self,
        org_id: &str,
        event_type: &'static str,
        object_id: &str,
        data: serde_json::Value,
    ) {
        let endpoints = match self.store.webhook_endpoints(org_id).await {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(org = org_id, event = event_type, object = object_id, error = %e, "webhook event not queued");
                return;
            }
        };
        let wanted: Vec<_> = endpoints.iter().filter(|e| e.wants(event_type)).collect();
        if wanted.is_empty() {
            return;
        }
        let now = paygate_domain::now_rfc3339();
        let now_ms = now_ms();
        let event_id = paygate_domain::ids::new_id("evt");
        let body =
            serde_json::json!({"type": event_type, "timestamp": now, "data": data}).to_string();
        let deliveries: Vec<WebhookDelivery> = wanted
            .into_iter()
            .map(|e| WebhookDelivery {
                id: paygate_domain::ids::new_id("whd"),
                endpoint_id: e.id.clone(),
                org_id: org_id.to_string(),
                event_id: event_id.clone(),
                event_type: event_type.to_string(),
                object_id: object_id.to_string(),
                payload: body.clone(),
                status: DeliveryStatus::Pending,
                attempts: 0,
                next_attempt_ms: now_ms,
                lease_until_ms: 0,
                history: Vec::new(),
                replay_of: None,
                created_at: now.clone(),
                updated_at: now.clone(),
            })
            .collect();
        if let Err(e) = self.store.enqueue_deliveries(&deliveries).await {
            tracing::error!(org = org_id, event = event_type, object = object_id, error = %e, "webhook event not queued");
        }
    }

    /// [`Self::emit`] off the caller's path (the paid path does not wait for it).
    pub fn emit_later(
        self: &Arc<Self>,
        org_id: &str,
        event_type: &'static str,
        object_id: &str,
        data: serde_json::Value,
    ) {
        self.emit_in_order_later(org_id, object_id, vec![(event_type, data)]);
    }

    /// Events about one object, queued in this order off the caller's path (one object's
    /// events are delivered in the order they were queued).
    pub fn emit_in_order_later(
        self: &Arc<Self>,
        org_id: &str,
        object_id: &str,
        events: Vec<(&'static str, serde_json::Value)>,
    ) {
        let (me, org, object) = (self.clone(), org_id.to_string(), object_id.to_string());
        tokio::spawn(async move {
            for (event_type, data) in events {
                me.emit(&org, event_type, &object, data).await;
            }
        });
    }

    /// `payment.settled` for a payment recorded settled.
    pub fn payment_settled(self: &Arc<Self>, p: &GatewayPayment) {
        self.emit_later(&p.org_id, "payment.settled", &p.id, payment_data(p));
    }

    /// `payment.settled`, queued before this returns: for a payment that may be refunded as soon
    /// as it is answered (an `auth-capture` capture), so its `payment.refunded` always follows.
    pub async fn payment_settled_now(&self, p: &GatewayPayment) {
        self.emit(&p.org_id, "payment.settled", &p.id, payment_data(p))
            .await;
    }
}

/// A payment as an event's `data`.
pub fn payment_data(p: &GatewayPayment) -> serde_json::Value {
    serde_json::json!({
        "id": p.id,
        "routeId": p.route_id,
        "status": p.status.as_str(),
        "network": p.network,
        "asset": p.asset,
        "payer": p.payer,
        "payTo": p.pay_to,
        "protocol": p.protocol.as_str(),
        "amountUSD": p.amount.to_decimal().to_string(),
        "transaction": p.transaction,
        "createdAt": p.created_at,
    })
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
