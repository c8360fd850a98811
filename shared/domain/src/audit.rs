//! The audit log (issue 32, item 5): every management change, with who made it (an API key's id
//! or the operator), when, what changed (the record before and after, secrets never included)
//! and from where (the client address the proxy saw, and the request id).

use serde::{Deserialize, Serialize};

/// One change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// Time-ordered (`aud_` + UUIDv7 hex): newest first is descending ids.
    pub id: String,
    pub org_id: String,
    /// `key:<keyId>` for an organisation's API key, `admin` for the operator's token.
    pub actor: String,
    /// What happened, `object.verb`: `route.created`, `key.revoked`, `org.updated`, ...
    pub action: String,
    /// The changed object's id (a route id, a key id, a corridor id, ...).
    pub target: String,
    /// The object before the change (`None` when it was created).
    #[schema(required, value_type = Option<Object>)]
    pub before: Option<serde_json::Value>,
    /// The object after it (`None` when it was deleted or revoked away).
    #[schema(required, value_type = Option<Object>)]
    pub after: Option<serde_json::Value>,
    /// The client address the gateway saw.
    #[schema(required)]
    pub from: Option<String>,
    #[schema(required)]
    pub request_id: Option<String>,
    pub at: String,
}
