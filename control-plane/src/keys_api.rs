//! API keys: what the operator does for any organisation (`/admin/orgs/{slug}/keys`) and an
//! organisation does for itself (`/api/keys`, SPEC's dashboard "Settings, API Keys"). A key's
//! secret is shown once, at creation; only its hash is kept. Rotation is create, switch,
//! revoke: both keys work in between. An organisation cannot revoke its last active key (it
//! would lock itself out); the operator can.

use crate::audit::{self, json_of, Actor, Caller, Change};
use crate::auth::OrgAuth;
use crate::body::fields::present;
use crate::body::RequestBody;
use crate::error::ApiError;
use crate::state::AppState;
use crate::views::{KeyCreated, KeyView};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use paygate_domain::apikey;
use paygate_domain::model::{ApiKeyRecord, KeyRole, Org};
use paygate_domain::{now_rfc3339, ErrorCode, FieldProblem};
use serde::Deserialize;
use time::format_description::well_known::Rfc3339;
use utoipa::ToSchema;

/// `POST /api/keys` (and the operator's): what the new key may do. An empty body is a `full`
/// key that never expires.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(example = json!({"role": "read", "expiresAt": "2027-01-01T00:00:00Z"}))]
pub struct KeyCreate {
    /// `read` (reads only), `routes` (and route changes), `payouts` (and corridors, payouts,
    /// channel claims and refunds) or `full` (the default: everything, keys included).
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false)]
    role: Option<KeyRole>,
    /// RFC 3339, in the future: the key is refused from then on (default: never).
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false)]
    expires_at: Option<String>,
}

impl RequestBody for KeyCreate {
    const READ_ONLY: &'static [&'static str] = &["keyId", "apiKey", "createdAt", "revokedAt"];
}

impl KeyCreate {
    /// The body of a key creation (empty: the defaults), its expiry checked and normalised.
    pub fn read(raw: &[u8]) -> Result<(KeyRole, Option<String>), ApiError> {
        let body: Self = if raw.iter().all(u8::is_ascii_whitespace) {
            Self::default()
        } else {
            crate::body::parse(raw)?
        };
        let expires_at = match body.expires_at {
            None => None,
            Some(t) => {
                let at = time::OffsetDateTime::parse(&t, &Rfc3339)
                    .ok()
                    .filter(|at| *at > time::OffsetDateTime::now_utc())
                    .ok_or_else(|| {
                        ApiError::validation(vec![FieldProblem::new(
                            "expiresAt",
                            "must be an RFC 3339 time in the future (2027-01-01T00:00:00Z)",
                        )])
                    })?;
                Some(paygate_domain::rfc3339(at))
            }
        };
        Ok((body.role.unwrap_or_default(), expires_at))
    }
}

/// A new key of `org_id` with `role` (until `expires_at`) and its record.
pub fn new_key(
    org_id: &str,
    role: KeyRole,
    expires_at: Option<String>,
) -> (apikey::NewKey, ApiKeyRecord) {
    let k = apikey::mint();
    let rec = ApiKeyRecord {
        key_id: k.key_id.clone(),
        org_id: org_id.to_string(),
        secret_sha256: k.secret_sha256.clone(),
        created_at: now_rfc3339(),
        revoked_at: None,
        role,
        expires_at,
    };
    (k, rec)
}

/// Creates and stores a key for `org` as `body` (raw JSON, may be empty) asks; `201` with the
/// secret (shown this once).
pub async fn issue(
    state: &AppState,
    org: &Org,
    body: &[u8],
    (actor, caller): (Actor<'_>, &Caller),
) -> Result<Response, ApiError> {
    let (role, expires_at) = KeyCreate::read(body)?;
    let (key, rec) = new_key(&org.id, role, expires_at);
    state.store.put_api_key(&rec).await?;
    let change = Change {
        org_id: &org.id,
        action: "key.created",
        target: &rec.key_id,
        before: None,
        after: json_of(&KeyView::from(&rec)),
    };
    audit::record(state, actor, caller, change).await;
    tracing::info!(org = %org.slug, key_id = %rec.key_id, role = rec.role.as_str(), "API key created");
    Ok((
        StatusCode::CREATED,
        Json(KeyCreated {
            key_id: key.key_id,
            api_key: key.plain,
            created_at: rec.created_at,
            role: rec.role,
            expires_at: rec.expires_at,
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
    (key_id, keep_one): (&str, bool),
    (actor, caller): (Actor<'_>, &Caller),
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
    let before = json_of(&KeyView::from(rec));
    let mut rec = rec.clone();
    rec.revoked_at = Some(now_rfc3339());
    state.store.put_api_key(&rec).await?;
    let change = Change {
        org_id: &org.id,
        action: "key.revoked",
        target: &rec.key_id,
        before,
        after: json_of(&KeyView::from(&rec)),
    };
    audit::record(state, actor, caller, change).await;
    tracing::info!(org = %org.slug, key_id = %rec.key_id, "API key revoked");
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[utoipa::path(get, path = "/api/keys", tag = "keys", security(("orgKey" = [])), responses((status = 200, description = "The organisation's keys (ids and dates, never secrets)", body = Vec<KeyView>)))]
pub async fn list(
    State(state): State<AppState>,
    OrgAuth { org, .. }: OrgAuth,
) -> Result<Response, ApiError> {
    keys_of(&state, &org).await
}

#[utoipa::path(post, path = "/api/keys", tag = "keys", security(("orgKey" = [])), request_body(content = Option<KeyCreate>, description = "Optional: the new key's role and expiry (default a full key that never expires)"), responses((status = 201, description = "A new API key (its secret shown once); the calling key keeps working", body = KeyCreated)))]
pub async fn create(
    State(state): State<AppState>,
    auth: OrgAuth,
    caller: Caller,
    body: Bytes,
) -> Result<Response, ApiError> {
    issue(&state, &auth.org, &body, (Actor::Key(&auth), &caller)).await
}

#[utoipa::path(delete, path = "/api/keys/{key_id}", tag = "keys", security(("orgKey" = [])), params(("key_id" = String, Path)), responses((status = 204, description = "Revoked (also when it already was): refused from the next request on"), (status = 404, description = "No such key in this organisation", body = paygate_domain::ErrorBody), (status = 409, description = "The organisation's last active key", body = paygate_domain::ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(key_id): Path<String>,
    caller: Caller,
) -> Result<Response, ApiError> {
    let actor = (Actor::Key(&auth), &caller);
    revoke(&state, &auth.org, (&key_id, true), actor).await
}
