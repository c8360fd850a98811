//! `/admin/*`: the operator's stand-in for the dashboard: organisations, API keys, suspension,
//! receiver wallets and plans. Guarded by the admin token.

use crate::auth::AdminAuth;
use crate::error::ApiError;
use crate::input::Fields;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use paygate_gateway::route_table::SANDBOX_SLUG;
use paygate_shared::apikey;
use paygate_shared::ids::new_id;
use paygate_shared::model::{ApiKeyRecord, Org};
use paygate_shared::store::StoreError;
use paygate_shared::{now_rfc3339, ErrorCode};
use serde_json::json;

fn org_json(o: &Org) -> serde_json::Value {
    json!({
        "id": o.id,
        "slug": o.slug,
        "name": o.name,
        "receiverWallet": o.receiver_wallet.map(|a| a.to_checksum(None)),
        "plan": o.plan,
        "suspended": o.suspended,
        "payerWallet": o.payer_wallet.map(|a| a.to_checksum(None)),
        // `null`: the configured default (`[mcp] daily_spend_cap_usd`).
        "mcpDailyCapUSD": o.mcp_daily_cap.map(|c| c.to_usd_json()),
        // `null`: the configured default (`[payout] platform_fee_bps`).
        "platformFeeBps": o.platform_fee_bps,
        "createdAt": o.created_at,
        "updatedAt": o.updated_at,
    })
}

fn valid_slug(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn org_not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no organisation with this slug")
}

async fn org_by_slug(state: &AppState, slug: &str) -> Result<Org, ApiError> {
    state
        .store
        .get_org_by_slug(slug)
        .await?
        .ok_or_else(org_not_found)
}

fn new_key(org_id: &str) -> (apikey::NewKey, ApiKeyRecord) {
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

#[utoipa::path(post, path = "/admin/orgs", tag = "admin", security(("adminToken" = [])), request_body = crate::schema::OrgCreate, responses((status = 201, description = "Created, with its first API key", body = crate::schema::OrgCreated), (status = 409, description = "Slug taken", body = crate::schema::ErrorDoc)))]
pub async fn create_org(
    State(state): State<AppState>,
    _admin: AdminAuth,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut f = Fields::parse(&body)?;
    let slug = f.string("slug", 63);
    let slug = f.require("slug", slug);
    if let Some(s) = &slug {
        if !valid_slug(s) {
            f.problem(
                "slug",
                "must be 1 to 63 lowercase letters, digits or '-', starting with a letter or digit",
            );
        } else if s == SANDBOX_SLUG {
            f.problem("slug", "is reserved for the public sandbox");
        }
    }
    let name = f.string("name", 200);
    let receiver = f.nullable_address("receiverWallet").flatten();
    let plan = f.string("plan", 64);
    if let Some(p) = &plan {
        if !state.config.plans.contains_key(p) {
            f.problem("plan", "is not a configured plan");
        }
    }
    f.finish(&["id", "apiKey"])?;
    let slug = slug.unwrap_or_default();
    let now = now_rfc3339();
    let org = Org {
        id: new_id("org"),
        name: name.unwrap_or_else(|| slug.clone()),
        slug,
        receiver_wallet: receiver,
        plan: plan.unwrap_or_else(|| state.config.orgs.default_plan.clone()),
        suspended: false,
        payer_wallet: None,
        payer_key: None,
        mcp_daily_cap: None,
        platform_fee_bps: None,
        created_at: now.clone(),
        updated_at: now,
    };
    let (key, rec) = new_key(&org.id);
    match state.store.create_org(&org, &rec).await {
        Ok(()) => {}
        Err(StoreError::DuplicateSlug) => {
            return Err(ApiError::new(
                ErrorCode::AlreadyExists,
                format!("an organisation with slug {} exists", org.slug),
            ))
        }
        Err(e) => return Err(e.into()),
    }
    state
        .table
        .refresh_org(state.store.as_ref(), &org.id)
        .await?;
    tracing::info!(org = %org.slug, "organisation created");
    let mut out = org_json(&org);
    out["apiKey"] = json!(key.plain);
    out["keyId"] = json!(key.key_id);
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

#[utoipa::path(get, path = "/admin/orgs", tag = "admin", security(("adminToken" = [])), responses((status = 200, description = "Every organisation", body = Vec<crate::schema::OrgView>)))]
pub async fn list_orgs(
    State(state): State<AppState>,
    _admin: AdminAuth,
) -> Result<Response, ApiError> {
    let mut orgs = state.store.list_orgs().await?;
    orgs.sort_by(|a, b| a.slug.cmp(&b.slug));
    Ok(Json(orgs.iter().map(org_json).collect::<Vec<_>>()).into_response())
}

#[utoipa::path(get, path = "/admin/orgs/{slug}", tag = "admin", security(("adminToken" = [])), params(("slug" = String, Path)), responses((status = 200, description = "The organisation", body = crate::schema::OrgView), (status = 404, description = "No such organisation", body = crate::schema::ErrorDoc)))]
pub async fn get_org(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path(slug): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(org_json(&org_by_slug(&state, &slug).await?)).into_response())
}

#[utoipa::path(patch, path = "/admin/orgs/{slug}", tag = "admin", security(("adminToken" = [])), params(("slug" = String, Path)), request_body = crate::schema::OrgUpdate, responses((status = 200, description = "Updated", body = crate::schema::OrgView), (status = 404, description = "No such organisation", body = crate::schema::ErrorDoc)))]
pub async fn update_org(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path(slug): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut f = Fields::parse(&body)?;
    let name = f.string("name", 200);
    let suspended = f.bool("suspended");
    let receiver = f.nullable_address("receiverWallet");
    let plan = f.string("plan", 64);
    if let Some(p) = &plan {
        if !state.config.plans.contains_key(p) {
            f.problem("plan", "is not a configured plan");
        }
    }
    let mcp_cap = f.nullable_usd("mcpDailyCapUSD");
    let fee_bps = match f.nullable_number("platformFeeBps") {
        Some(Some(n)) => match n.as_u64().and_then(|v| u32::try_from(v).ok()) {
            Some(v) if paygate_shared::payout::money::PLATFORM_FEE_BPS.contains(&v) => {
                Some(Some(v))
            }
            _ => {
                f.problem("platformFeeBps", "must be a whole number from 25 to 65");
                None
            }
        },
        other => other.map(|_| None),
    };
    f.finish(&["id", "slug", "createdAt", "updatedAt"])?;
    let mut org = org_by_slug(&state, &slug).await?;
    if let Some(v) = name {
        org.name = v;
    }
    if let Some(v) = suspended {
        org.suspended = v;
    }
    if let Some(v) = receiver {
        org.receiver_wallet = v;
    }
    if let Some(v) = plan {
        org.plan = v;
    }
    if let Some(v) = mcp_cap {
        org.mcp_daily_cap = v;
    }
    if let Some(v) = fee_bps {
        org.platform_fee_bps = v;
    }
    org.updated_at = now_rfc3339();
    state.store.update_org(&org).await?;
    state
        .table
        .refresh_org(state.store.as_ref(), &org.id)
        .await?;
    tracing::info!(org = %org.slug, suspended = org.suspended, "organisation updated");
    Ok(Json(org_json(&org)).into_response())
}

/// `PUT /admin/orgs/{slug}/payer-wallet {privateKey}`: stores the org's payer wallet for MCP
/// tool calls, the key sealed under the master key. Answers the wallet's address only.
#[utoipa::path(put, path = "/admin/orgs/{slug}/payer-wallet", tag = "admin", security(("adminToken" = [])), params(("slug" = String, Path)), request_body = crate::schema::PayerWalletPut, responses((status = 200, description = "Stored, sealed under the master key", body = crate::schema::OrgView), (status = 404, description = "No such organisation", body = crate::schema::ErrorDoc), (status = 503, description = "No master key configured", body = crate::schema::ErrorDoc)))]
pub async fn put_payer_wallet(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path(slug): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut f = Fields::parse(&body)?;
    let key = f.string("privateKey", 200);
    let key = f.require("privateKey", key);
    let address = key
        .as_deref()
        .and_then(paygate_shared::secrets::address_of_key);
    if key.is_some() && address.is_none() {
        f.problem(
            "privateKey",
            "must be a secp256k1 private key (64 hex characters)",
        );
    }
    f.finish(&[])?;
    let (Some(key), Some(address)) = (key, address) else {
        return Err(ApiError::new(
            ErrorCode::ValidationError,
            "privateKey: is required",
        ));
    };
    let master =
        match paygate_shared::secrets::MasterKey::from_env(&state.config.orgs.master_key_env) {
            Some(Ok(m)) => m,
            Some(Err(_)) | None => {
                return Err(ApiError::new(
                    ErrorCode::Misconfigured,
                    format!(
                        "payer wallets need a master key: set {} to 64 hex characters",
                        state.config.orgs.master_key_env
                    ),
                ))
            }
        };
    let mut org = org_by_slug(&state, &slug).await?;
    org.payer_key = Some(master.seal(key.trim().as_bytes(), &org.id));
    org.payer_wallet = Some(address);
    org.updated_at = now_rfc3339();
    state.store.update_org(&org).await?;
    tracing::info!(org = %org.slug, payer = %address, "payer wallet stored");
    Ok(Json(org_json(&org)).into_response())
}

/// `DELETE /admin/orgs/{slug}/payer-wallet`: forgets the payer wallet.
#[utoipa::path(delete, path = "/admin/orgs/{slug}/payer-wallet", tag = "admin", security(("adminToken" = [])), params(("slug" = String, Path)), responses((status = 204, description = "Forgotten"), (status = 404, description = "No such organisation", body = crate::schema::ErrorDoc)))]
pub async fn delete_payer_wallet(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path(slug): Path<String>,
) -> Result<Response, ApiError> {
    let mut org = org_by_slug(&state, &slug).await?;
    org.payer_key = None;
    org.payer_wallet = None;
    org.updated_at = now_rfc3339();
    state.store.update_org(&org).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[utoipa::path(post, path = "/admin/orgs/{slug}/keys", tag = "admin", security(("adminToken" = [])), params(("slug" = String, Path)), responses((status = 201, description = "A new API key (shown once)", body = crate::schema::KeyCreated), (status = 404, description = "No such organisation", body = crate::schema::ErrorDoc)))]
pub async fn create_key(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path(slug): Path<String>,
) -> Result<Response, ApiError> {
    let org = org_by_slug(&state, &slug).await?;
    let (key, rec) = new_key(&org.id);
    state.store.put_api_key(&rec).await?;
    tracing::info!(org = %org.slug, key_id = %rec.key_id, "API key created");
    Ok((
        StatusCode::CREATED,
        Json(json!({"keyId": key.key_id, "apiKey": key.plain, "createdAt": rec.created_at})),
    )
        .into_response())
}

#[utoipa::path(get, path = "/admin/orgs/{slug}/keys", tag = "admin", security(("adminToken" = [])), params(("slug" = String, Path)), responses((status = 200, description = "The organisation's keys (ids only)", body = Vec<crate::schema::KeyView>), (status = 404, description = "No such organisation", body = crate::schema::ErrorDoc)))]
pub async fn list_keys(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path(slug): Path<String>,
) -> Result<Response, ApiError> {
    let org = org_by_slug(&state, &slug).await?;
    let keys = state.store.list_api_keys(&org.id).await?;
    let out: Vec<_> = keys
        .iter()
        .map(|k| json!({"keyId": k.key_id, "createdAt": k.created_at, "revokedAt": k.revoked_at}))
        .collect();
    Ok(Json(out).into_response())
}

#[utoipa::path(delete, path = "/admin/orgs/{slug}/keys/{key_id}", tag = "admin", security(("adminToken" = [])), params(("slug" = String, Path), ("key_id" = String, Path)), responses((status = 204, description = "Revoked: refused from the next request on"), (status = 404, description = "No such organisation or key", body = crate::schema::ErrorDoc)))]
pub async fn revoke_key(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path((slug, key_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let org = org_by_slug(&state, &slug).await?;
    let mut rec = state
        .store
        .get_api_key(&key_id)
        .await?
        .filter(|k| k.org_id == org.id)
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, "no such key in this organisation"))?;
    if rec.revoked_at.is_none() {
        rec.revoked_at = Some(now_rfc3339());
        state.store.put_api_key(&rec).await?;
        tracing::info!(org = %org.slug, key_id = %rec.key_id, "API key revoked");
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
