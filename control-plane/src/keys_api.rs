//! API keys: what the operator does for any organisation (`/admin/orgs/{slug}/keys`) and an
//! organisation does for itself (`/api/keys`, SPEC's dashboard "Settings, API Keys"). A key's
//! secret is shown once, at creation; only its hash is kept. Rotation is create, switch,
//! revoke: both keys work in between. An organisation cannot revoke its last active key (it
//! would lock itself out); the operator can.

use crate::auth::OrgAuth;
use crate::error::ApiError;
use crate::state::AppState;
use crate::views::{KeyCreated, KeyView};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use paygate_domain::apikey;
use paygate_domain::model::{ApiKeyRecord, Org};
use paygate_domain::{now_rfc3339, ErrorCode};

/// A new key of `org_id` and its record.
pub fn new_key(org_id: &str) -> (apikey::NewKey, ApiKeyRecord) {
    let k = apikey::mint();
    let rec = ApiKeyRecord {
        key_id: k.key_id.clone(),
        org_id: org_id.to_string(),
        secret_sha256: k.secret_sha256.clone(),
        created_at: now_rfc3339(),
        revoked_at: None,
    };
    (k, rec)
}

/// Creates and stores a key for `org`; `201` with the secret (shown this once).
pub async fn issue(state: &AppState, org: &Org) -> Result<Response, ApiError> {
    let (key, rec) = new_key(&org.id);
    state.store.put_api_key(&rec).await?;
    tracing::info!(org = %org.slug, key_id = %rec.key_id, "API key created");
    Ok((
        StatusCode::CREATED,
        Json(KeyCreated {
            key_id: key.key_id,
            api_key: key.plain,
            created_at: rec.created_at,
        }),
    )
        .into_response())
}

/// The organisation's keys (ids and dates, never secrets).
pub async fn keys_of(state: &AppState, org: &Org) -> Result<Response, ApiError> {
    let keys = state.store.list_api_keys(&org.id).await?;
    let out: Vec<_> = keys.iter().map(KeyView::from).collect();
    Ok(Json(out).into_response())
}

/// Revokes `key_id` of `org` (idempotent); with `keep_one`, never its last active key.
pub async fn revoke(
    state: &AppState,
    org: &Org,
    key_id: &str,
    keep_one: bool,
) -> Result<Response, ApiError> {
    let keys = state.store.list_api_keys(&org.id).await?;
    let Some(rec) = keys.iter().find(|k| k.key_id == key_id) else {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            "no such key in this organisation",
        ));
    };
    if rec.revoked_at.is_some() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let active = keys.iter().filter(|k| k.revoked_at.is_none()).count();
    if keep_one && active <= 1 {
        return Err(ApiError::new(
            ErrorCode::LastActiveKey,
            "this is the organisation's last active key: create another before revoking it",
        ));
    }
    let mut rec = rec.clone();
    rec.revoked_at = Some(now_rfc3339());
    state.store.put_api_key(&rec).await?;
    tracing::info!(org = %org.slug, key_id = %rec.key_id, "API key revoked");
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[utoipa::path(get, path = "/api/keys", tag = "keys", security(("orgKey" = [])), responses((status = 200, description = "The organisation's keys (ids and dates, never secrets)", body = Vec<KeyView>)))]
pub async fn list(
    State(state): State<AppState>,
    OrgAuth { org }: OrgAuth,
) -> Result<Response, ApiError> {
    keys_of(&state, &org).await
}

#[utoipa::path(post, path = "/api/keys", tag = "keys", security(("orgKey" = [])), responses((status = 201, description = "A new API key (its secret shown once); the calling key keeps working", body = KeyCreated)))]
pub async fn create(
    State(state): State<AppState>,
    OrgAuth { org }: OrgAuth,
) -> Result<Response, ApiError> {
    issue(&state, &org).await
}

#[utoipa::path(delete, path = "/api/keys/{key_id}", tag = "keys", security(("orgKey" = [])), params(("key_id" = String, Path)), responses((status = 204, description = "Revoked (also when it already was): refused from the next request on"), (status = 404, description = "No such key in this organisation", body = paygate_domain::ErrorBody), (status = 409, description = "The organisation's last active key", body = paygate_domain::ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    OrgAuth { org }: OrgAuth,
    Path(key_id): Path<String>,
) -> Result<Response, ApiError> {
    revoke(&state, &org, &key_id, true).await
}
