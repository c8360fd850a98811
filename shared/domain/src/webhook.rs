//! Seller webhooks (issue 32, item 3): an organisation's endpoints, the events they receive,
//! and each delivery of an event to an endpoint, kept in the store as a durable queue (retried
//! with backoff, in order per object, on whichever node leases it), signed as Standard Webhooks
//! signs (`webhook-id`, `webhook-timestamp`, `webhook-signature`).

use crate::secrets::SealedSecret;
use serde::{Deserialize, Serialize};

/// The events an endpoint may ask for.
pub const EVENT_TYPES: [&str; 5] = [
    "payment.settled",
    "payment.refunded",
    "channel.claimed",
    "payout.updated",
    "route.changed",
];

/// One of an endpoint's signing secrets, sealed under the master key. The newest signs first;
/// an older one keeps signing until `expires_at_ms` (a rotation's overlap).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSecret {
    pub sealed: SealedSecret,
    pub created_at: String,
    /// Unix milliseconds after which it no longer signs (`None`: the current one).
    pub expires_at_ms: Option<i64>,
}

/// An organisation's webhook endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookEndpoint {
    /// `whe_` + UUIDv7 hex.
    pub id: String,
    pub org_id: String,
    pub url: String,
    /// The event types it receives (a subset of [`EVENT_TYPES`], at least one).
    pub events: Vec<String>,
    pub description: String,
    /// Newest first.
    pub secrets: Vec<EndpointSecret>,
    pub created_at: String,
    pub updated_at: String,
}

impl WebhookEndpoint {
    pub fn wants(&self, event_type: &str) -> bool {
        self.events.iter().any(|e| e == event_type)
    }

    /// The secrets that sign at `now_ms` (Unix milliseconds): the current one, and its
    /// predecessors while their overlap lasts.
    pub fn live_secrets(&self, now_ms: i64) -> impl Iterator<Item = &EndpointSecret> {
        self.secrets
            .iter()
            .filter(move |s| s.expires_at_ms.is_none_or(|t| t > now_ms))
    }
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DeliveryStatus {
    /// Waiting for its next attempt (or its first).
    Pending,
    /// The endpoint answered 2xx.
    Delivered,
    /// Every attempt failed; a replay sends it again.
    Failed,
}

/// One attempt's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryAttempt {
    pub at: String,
    /// The endpoint's status (`None`: no answer: refused, timed out).
    pub status: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// One event on its way to one endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDelivery {
    /// `whd_` + UUIDv7 hex: the queue's order.
    pub id: String,
    pub endpoint_id: String,
    pub org_id: String,
    /// The event's id (`evt_…`), sent as `webhook-id`: the same on every attempt and replay, so
    /// a receiver drops what it has seen.
    pub event_id: String,
    pub event_type: String,
    /// The object the event is about (a payment, channel, payout or route id): deliveries of
    /// one object to one endpoint go in order, the next waiting for the one before.
    pub object_id: String,
    /// The body sent, exactly: `{"type", "timestamp", "data"}`.
    pub payload: String,
    pub status: DeliveryStatus,
    pub attempts: u32,
    /// Unix milliseconds of the next attempt (`Pending`).
    pub next_attempt_ms: i64,
    /// Unix milliseconds until which a node holds it for an attempt.
    pub lease_until_ms: i64,
    pub history: Vec<DeliveryAttempt>,
    /// The delivery it replays, when a replay.
    pub replay_of: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}
