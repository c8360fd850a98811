//! Seller webhook endpoints (issue 32, item 3): `POST/GET /api/webhooks`,
//! `DELETE /api/webhooks/{id}`, `POST /api/webhooks/{id}/rotate-secret`,
//! `GET /api/webhooks/{id}/deliveries`, `POST /api/webhooks/{id}/deliveries/{deliveryId}/replay`.
//! A signing secret (`whsec_` + base64, Standard Webhooks' form) is shown at creation and at a
//! rotation only; it is kept sealed under the master key (webhooks need one).

use crate::audit::{self, json_of, Actor, Caller, Change};
use crate::auth::OrgAuth;
use crate::body::RequestBody;
use crate::error::ApiError;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use paygate_domain::secrets::MasterKey;
use paygate_domain::webhook::{
    DeliveryAttempt, DeliveryStatus, EndpointSecret, WebhookDelivery, WebhookEndpoint, EVENT_TYPES,
};
use paygate_domain::{now_rfc3339, ErrorCode, FieldProblem};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /api/webhooks`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(example = json!({"url": "https://seller.example/hooks/paygate", "events": ["payment.settled", "payout.updated"]}))]
pub struct EndpointCreate {
    /// Where events are POSTed (http or https).
    url: String,
    /// The event types it receives: `payment.settled`, `payment.refunded`, `channel.claimed`,
    /// `payout.updated`, `route.changed` (at least one, each once).
    events: Vec<String>,
    #[serde(default)]
    description: Option<String>,
}

impl RequestBody for EndpointCreate {
    const READ_ONLY: &'static [&'static str] = &["id", "secret", "createdAt", "updatedAt"];
}

/// An endpoint as the API shows it (never its secrets).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointView {
    id: String,
    url: String,
    events: Vec<String>,
    description: String,
    /// How many secrets sign now (2 during a rotation's overlap).
    signing_secrets: usize,
    created_at: String,
    updated_at: String,
}

impl EndpointView {
    fn of(e: &WebhookEndpoint, now_ms: i64) -> Self {
        Self {
            id: e.id.clone(),
            url: e.url.clone(),
            events: e.events.clone(),
            description: e.description.clone(),
            signing_secrets: e.live_secrets(now_ms).count(),
            created_at: e.created_at.clone(),
            updated_at: e.updated_at.clone(),
        }
    }
}

/// A new endpoint, or a rotation: the endpoint and its new secret (shown this once).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSecretShown {
    #[serde(flatten)]
    endpoint: EndpointView,
    /// `whsec_` + base64 of 32 random bytes: verify `webhook-signature` with it.
    secret: String,
}

/// A delivery as the delivery log shows it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryView {
    id: String,
    event_id: String,
    event_type: String,
    object_id: String,
    status: DeliveryStatus,
    attempts: u32,
    /// When the next attempt is due (pending deliveries), RFC 3339.
    next_attempt_at: Option<String>,
    history: Vec<DeliveryAttempt>,
    replay_of: Option<String>,
    /// The body sent.
    payload: String,
    created_at: String,
    updated_at: String,
}

impl From<&WebhookDelivery> for DeliveryView {
    fn from(d: &WebhookDelivery) -> Self {
        let next = (d.status == DeliveryStatus::Pending)
            .then(|| {
                time::OffsetDateTime::from_unix_timestamp_nanos(
                    i128::from(d.next_attempt_ms) * 1_000_000,
                )
                .ok()
            })
            .flatten()
            .map(paygate_domain::rfc3339);
        Self {
            id: d.id.clone(),
            event_id: d.event_id.clone(),
            event_type: d.event_type.clone(),
            object_id: d.object_id.clone(),
            status: d.status,
            attempts: d.attempts,
            next_attempt_at: next,
            history: d.history.clone(),
            replay_of: d.replay_of.clone(),
            payload: d.payload.clone(),
            created_at: d.created_at.clone(),
            updated_at: d.updated_at.clone(),
        }
    }
}

/// `{deliveries}`, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryList {
    deliveries: Vec<DeliveryView>,
}

/// A new secret: its text (`whsec_…`) and its sealed form for `endpoint_id`.
fn new_secret(master: &MasterKey, endpoint_id: &str) -> (String, EndpointSecret) {
    let raw: [u8; 32] = rand::random();
    let text = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(raw)
    );
    let sealed = EndpointSecret {
        sealed: master.seal(text.as_bytes(), endpoint_id),
        created_at: now_rfc3339(),
        expires_at_ms: None,
    };
    (text, sealed)
}

fn check(body: &EndpointCreate) -> Result<(), ApiError> {
    let mut problems = Vec::new();
    let url_ok = url::Url::parse(body.url.trim())
        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
    if !url_ok || body.url.len() > 2048 {
        problems.push(FieldProblem::new(
            "url",
            "must be an http(s) URL of at most 2048 characters",
        ));
    }
    let repeated = body
        .events
        .iter()
        .enumerate()
        .any(|(i, e)| body.events[..i].contains(e));
    let unknown = body
        .events
        .iter()
        .any(|e| !EVENT_TYPES.contains(&e.as_str()));
    if body.events.is_empty() || repeated || unknown {
        problems.push(FieldProblem::new(
            "events",
            format!(
                "must name at least one event, each once, of {}",
                EVENT_TYPES.join(", ")
            ),
        ));
    }
    if body.description.as_ref().is_some_and(|d| {
        d.len() > 500 || d.chars().any(|c| c.is_control() && c != '\n' && c != '\t')
    }) {
        problems.push(FieldProblem::new(
            "description",
            "at most 500 characters, no control characters",
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApiError::validation(problems))
    }
}

async fn own_endpoint(
    state: &AppState,
    org_id: &str,
    id: &str,
) -> Result<WebhookEndpoint, ApiError> {
    state
        .store
        .webhook_endpoint(org_id, id)
        .await?
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::NotFound,
                "no such webhook endpoint in this organisation",
            )
        })
}

#[utoipa::path(post, path = "/api/webhooks", tag = "webhooks", security(("orgKey" = [])), request_body = EndpointCreate, responses((status = 201, description = "The endpoint, with its signing secret (shown this once)", body = EndpointSecretShown), (status = 400, description = "A bad URL or event list", body = paygate_domain::ErrorBody), (status = 503, description = "No master key: secrets cannot be kept", body = paygate_domain::ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    auth: OrgAuth,
    caller: Caller,
    body: Bytes,
) -> Result<Response, ApiError> {
    let input: EndpointCreate = crate::body::parse(&body)?;
    check(&input)?;
    let master = state.master_key("webhooks (their signing secrets)")?;
    let id = paygate_domain::ids::new_id("whe");
    let (secret, sealed) = new_secret(&master, &id);
    let now = now_rfc3339();
    let endpoint = WebhookEndpoint {
        id,
        org_id: auth.org.id.clone(),
        url: input.url.trim().to_string(),
        events: input.events,
        description: input.description.unwrap_or_default(),
        secrets: vec![sealed],
        created_at: now.clone(),
        updated_at: now,
    };
    state.store.put_webhook_endpoint(&endpoint).await?;
    let view = EndpointView::of(&endpoint, paygate_gateway::events::now_ms());
    let change = Change::created(
        &auth.org.id,
        "webhook.created",
        &endpoint.id,
        json_of(&view),
    );
    audit::record(&state, Actor::Key(&auth), &caller, change).await;
    let shown = EndpointSecretShown {
        endpoint: view,
        secret,
    };
    Ok((StatusCode::CREATED, Json(shown)).into_response())
}

#[utoipa::path(get, path = "/api/webhooks", tag = "webhooks", security(("orgKey" = [])), responses((status = 200, description = "The organisation's webhook endpoints (never their secrets)", body = Vec<EndpointView>)))]
pub async fn list(State(state): State<AppState>, auth: OrgAuth) -> Result<Response, ApiError> {
    let now = paygate_gateway::events::now_ms();
    let all = state.store.webhook_endpoints(&auth.org.id).await?;
    let out: Vec<EndpointView> = all.iter().map(|e| EndpointView::of(e, now)).collect();
    Ok(Json(out).into_response())
}

#[utoipa::path(delete, path = "/api/webhooks/{id}", tag = "webhooks", security(("orgKey" = [])), params(("id" = String, Path)), responses((status = 204, description = "Deleted: no more events are sent to it (its delivery log stays)"), (status = 404, description = "No such endpoint", body = paygate_domain::ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    auth: OrgAuth,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let e = own_endpoint(&state, &auth.org.id, &id).await?;
    state
        .store
        .delete_webhook_endpoint(&auth.org.id, &id)
        .await?;
    let before = json_of(&EndpointView::of(&e, paygate_gateway::events::now_ms()));
    let change = Change {
        org_id: &auth.org.id,
        action: "webhook.deleted",
        target: &id,
        before,
        after: None,
    };
    audit::record(&state, Actor::Key(&auth), &caller, change).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[utoipa::path(post, path = "/api/webhooks/{id}/rotate-secret", tag = "webhooks", security(("orgKey" = [])), params(("id" = String, Path)), responses((status = 200, description = "A new secret (shown this once); the previous one keeps signing beside it for webhooks.secret_overlap_seconds", body = EndpointSecretShown), (status = 404, description = "No such endpoint", body = paygate_domain::ErrorBody)))]
pub async fn rotate(
    State(state): State<AppState>,
    auth: OrgAuth,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let master = state.master_key("webhooks (their signing secrets)")?;
    let mut e = own_endpoint(&state, &auth.org.id, &id).await?;
    let now = paygate_gateway::events::now_ms();
    let overlap = i64::try_from(state.config.webhooks.secret_overlap_seconds)
        .unwrap_or(i64::MAX / 2_000)
        .saturating_mul(1000);
    let (secret, sealed) = new_secret(&master, &e.id);
    for s in &mut e.secrets {
        // The current secret signs on during the overlap; expired ones are dropped.
        s.expires_at_ms.get_or_insert(now.saturating_add(overlap));
    }
    e.secrets
        .retain(|s| s.expires_at_ms.is_none_or(|t| t > now));
    e.secrets.insert(0, sealed);
    e.updated_at = now_rfc3339();
    state.store.put_webhook_endpoint(&e).await?;
    let view = EndpointView::of(&e, now);
    let change = Change::created(
        &auth.org.id,
        "webhook.secret_rotated",
        &e.id,
        json_of(&view),
    );
    audit::record(&state, Actor::Key(&auth), &caller, change).await;
    Ok(Json(EndpointSecretShown {
        endpoint: view,
        secret,
    })
    .into_response())
}

#[utoipa::path(get, path = "/api/webhooks/{id}/deliveries", tag = "webhooks", security(("orgKey" = [])), params(("id" = String, Path)), responses((status = 200, description = "The endpoint's last 100 deliveries, newest first, each with its attempts", body = DeliveryList), (status = 404, description = "No such endpoint", body = paygate_domain::ErrorBody)))]
pub async fn deliveries(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    own_endpoint(&state, &auth.org.id, &id).await?;
    let all = state.store.webhook_deliveries(&id, 100).await?;
    Ok(Json(DeliveryList {
        deliveries: all.iter().map(DeliveryView::from).collect(),
    })
    .into_response())
}

#[utoipa::path(post, path = "/api/webhooks/{id}/deliveries/{delivery_id}/replay", tag = "webhooks", security(("orgKey" = [])), params(("id" = String, Path), ("delivery_id" = String, Path)), responses((status = 202, description = "Queued again: the same event (same webhook-id), sent now", body = DeliveryView), (status = 404, description = "No such endpoint or delivery", body = paygate_domain::ErrorBody)))]
pub async fn replay(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path((id, delivery_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    own_endpoint(&state, &auth.org.id, &id).await?;
    let Some(d) = state
        .store
        .webhook_delivery(&delivery_id)
        .await?
        .filter(|d| d.endpoint_id == id && d.org_id == auth.org.id)
    else {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            "no such delivery of this endpoint",
        ));
    };
    let now = now_rfc3339();
    let again = WebhookDelivery {
        id: paygate_domain::ids::new_id("whd"),
        status: DeliveryStatus::Pending,
        attempts: 0,
        next_attempt_ms: paygate_gateway::events::now_ms(),
        lease_until_ms: 0,
        history: Vec::new(),
        replay_of: Some(d.id.clone()),
        created_at: now.clone(),
        updated_at: now,
        ..d
    };
    state
        .store
        .enqueue_deliveries(std::slice::from_ref(&again))
        .await?;
    Ok((StatusCode::ACCEPTED, Json(DeliveryView::from(&again))).into_response())
}
