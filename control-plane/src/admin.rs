//! `/admin/*`: the operator's stand-in for the dashboard: organisations, API keys, suspension,
//! receiver wallets and plans. Guarded by the admin token.

use crate::audit::{self, json_of, Actor, Caller, Change};
use crate::auth::AdminAuth;
use crate::body::fields::{nullable, present, EvmAddress, FeeBps, Nullable, Slug, Text, UsdAmount};
use crate::body::{JsonBody, RequestBody};
use crate::error::ApiError;
use crate::state::AppState;
use crate::views::{KeyCreated, KeyView, OrgCreated, OrgView};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use paygate_domain::ids::new_id;
use paygate_domain::model::Org;
use paygate_domain::StoreError;
use paygate_domain::{now_rfc3339, ErrorCode, FieldProblem};
use serde::Deserialize;
use utoipa::ToSchema;

/// `POST /admin/orgs`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(example = json!({"slug": "globex", "name": "Globex",
    "receiverWallet": "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"}))]
pub struct OrgCreate {
    #[schema(inline)]
    slug: Slug,
    // Defaults to the slug.
    #[serde(default, deserialize_with = "present")]
    #[schema(inline, nullable = false)]
    name: Option<Text<200>>,
    // The payee of the organisation's routes.
    #[serde(default)]
    #[schema(schema_with = nullable::<EvmAddress>)]
    receiver_wallet: Nullable<EvmAddress>,
    // A configured plan (default `[orgs] default_plan`).
    #[serde(default, deserialize_with = "present")]
    #[schema(inline, nullable = false)]
    plan: Option<Text<64>>,
}

impl RequestBody for OrgCreate {
    const READ_ONLY: &'static [&'static str] = &["id", "apiKey"];
}

/// `PATCH /admin/orgs/{slug}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(example = json!({"suspended": false, "mcpDailyCapUSD": "5"}))]
pub struct OrgUpdate {
    #[serde(default, deserialize_with = "present")]
    #[schema(inline, nullable = false)]
    name: Option<Text<200>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false)]
    suspended: Option<bool>,
    #[serde(default)]
    #[schema(schema_with = nullable::<EvmAddress>)]
    receiver_wallet: Nullable<EvmAddress>,
    #[serde(default, deserialize_with = "present")]
    #[schema(inline, nullable = false)]
    plan: Option<Text<64>>,
    // Daily MCP spending cap in USD; `null`: the configured default.
    #[serde(rename = "mcpDailyCapUSD", default)]
    #[schema(schema_with = nullable::<UsdAmount>)]
    mcp_daily_cap_usd: Nullable<UsdAmount>,
    // Corridor platform fee in basis points; `null`: the configured default.
    #[serde(default)]
    #[schema(schema_with = nullable::<FeeBps>)]
    platform_fee_bps: Nullable<FeeBps>,
}

impl RequestBody for OrgUpdate {
    const READ_ONLY: &'static [&'static str] = &["id", "slug", "createdAt", "updatedAt"];
}

/// `PUT /admin/orgs/{slug}/payer-wallet`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PayerWalletPut {
    // secp256k1 private key, 64 hex characters (optionally 0x-prefixed).
    #[schema(inline)]
    private_key: Text<200>,
}

impl RequestBody for PayerWalletPut {}

/// A plan must be one the configuration names.
fn check_plan(state: &AppState, plan: &Option<Text<64>>) -> Result<(), ApiError> {
    match plan {
        Some(p) if !state.config.plans.contains_key(p.as_str()) => {
            Err(ApiError::validation(vec![FieldProblem::new(
                "plan",
                "is not a configured plan",
            )]))
        }
        _ => Ok(()),
    }
}

/// Records the operator's change `action` of `after` (its view: no secret), from `before`.
async fn org_changed(
    state: &AppState,
    caller: &Caller,
    action: &str,
    before: Option<&Org>,
    after: &Org,
) {
    let change = Change {
        org_id: &after.id,
        action,
        target: &after.id,
        before: before.map(OrgView::from).as_ref().and_then(json_of),
        after: json_of(&OrgView::from(after)),
    };
    audit::record(state, Actor::Admin, caller, change).await;
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

#[utoipa::path(post, path = "/admin/orgs", tag = "admin", security(("adminToken" = [])), request_body = OrgCreate, responses((status = 201, description = "Created, with its first API key", body = OrgCreated), (status = 409, description = "Slug taken", body = paygate_domain::ErrorBody)))]
pub async fn create_org(
    State(state): State<AppState>,
    _admin: AdminAuth,
    caller: Caller,
    JsonBody { value: body, .. }: JsonBody<OrgCreate>,
) -> Result<Response, ApiError> {
    check_plan(&state, &body.plan)?;
    let slug = body.slug.0;
    let now = now_rfc3339();
    let org = Org {
        id: new_id("org"),
        name: body.name.map_or_else(|| slug.clone(), |n| n.0),
        slug,
        receiver_wallet: body.receiver_wallet.patch().flatten().map(|a| a.0),
        plan: body
            .plan
            .map_or_else(|| state.config.orgs.default_plan.clone(), |p| p.0),
        suspended: false,
        payer_wallet: None,
        payer_key: None,
        mcp_daily_cap: None,
        platform_fee_bps: None,
        origin_secret_generation: 0,
        origin_secret_rotated_at: None,
        created_at: now.clone(),
        updated_at: now,
    };
    let (key, rec) = crate::keys_api::new_key(&org.id, Default::default(), None);
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
    org_changed(&state, &caller, "org.created", None, &org).await;
    let out = OrgCreated {
        org: OrgView::from(&org),
        api_key: key.plain,
        key_id: key.key_id,
    };
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

#[utoipa::path(get, path = "/admin/orgs", tag = "admin", security(("adminToken" = [])), responses((status = 200, description = "Every organisation", body = Vec<OrgView>)))]
pub async fn list_orgs(
    State(state): State<AppState>,
    _admin: AdminAuth,
) -> Result<Response, ApiError> {
    let mut orgs = state.store.list_orgs().await?;
    orgs.sort_by(|a, b| a.slug.cmp(&b.slug));
    Ok(Json(orgs.iter().map(OrgView::from).collect::<Vec<_>>()).into_response())
}

#[utoipa::path(get, path = "/admin/orgs/{slug}", tag = "admin", security(("adminToken" = [])), params(("slug" = String, Path)), responses((status = 200, description = "The organisation", body = OrgView), (status = 404, description = "No such organisation", body = paygate_domain::ErrorBody)))]
pub async fn get_org(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path(slug): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(OrgView::from(&org_by_slug(&state, &slug).await?)).into_response())
}

#[utoipa::path(patch, path = "/admin/orgs/{slug}", tag = "admin", security(("adminToken" = [])), params(("slug" = String, Path)), request_body = OrgUpdate, responses((status = 200, description = "Updated", body = OrgView), (status = 404, description = "No such organisation", body = paygate_domain::ErrorBody)))]
pub async fn update_org(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path(slug): Path<String>,
    caller: Caller,
    JsonBody { value: body, .. }: JsonBody<OrgUpdate>,
) -> Result<Response, ApiError> {
    check_plan(&state, &body.plan)?;
    let mut org = org_by_slug(&state, &slug).await?;
    let before = org.clone();
    if let Some(v) = body.name {
        org.name = v.0;
    }
    if let Some(v) = body.suspended {
        org.suspended = v;
    }
    if let Some(v) = body.receiver_wallet.patch() {
        org.receiver_wallet = v.map(|a| a.0);
    }
    if let Some(v) = body.plan {
        org.plan = v.0;
    }
    if let Some(v) = body.mcp_daily_cap_usd.patch() {
        org.mcp_daily_cap = v.map(|a| a.0);
    }
    if let Some(v) = body.platform_fee_bps.patch() {
        org.platform_fee_bps = v.map(|b| b.0);
    }
    org.updated_at = now_rfc3339();
    state.save_org(&org).await?;
    tracing::info!(org = %org.slug, suspended = org.suspended, "organisation updated");
    org_changed(&state, &caller, "org.updated", Some(&before), &org).await;
    Ok(Json(OrgView::from(&org)).into_response())
}

/// `PUT /admin/orgs/{slug}/payer-wallet {privateKey}`: stores the org's payer wallet for MCP
/// tool calls, the key sealed under the master key. Answers the wallet's address only.
#[utoipa::path(put, path = "/admin/orgs/{slug}/payer-wallet", tag = "admin", security(("adminToken" = [])), params(("slug" = String, Path)), request_body = PayerWalletPut, responses((status = 200, description = "Stored, sealed under the master key", body = OrgView), (status = 404, description = "No such organisation", body = paygate_domain::ErrorBody), (status = 503, description = "No master key configured", body = paygate_domain::ErrorBody)))]
pub async fn put_payer_wallet(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path(slug): Path<String>,
    caller: Caller,
    JsonBody { value: body, .. }: JsonBody<PayerWalletPut>,
) -> Result<Response, ApiError> {
    let key = body.private_key.0;
    let Some(address) = paygate_domain::secrets::address_of_key(&key) else {
        return Err(ApiError::validation(vec![FieldProblem::new(
            "privateKey",
            "must be a secp256k1 private key (64 hex characters)",
        )]));
    };
    let master = state.master_key("payer wallets")?;
    let mut org = org_by_slug(&state, &slug).await?;
    let before = org.clone();
    org.payer_key = Some(master.seal(key.trim().as_bytes(), &org.id));
    org.payer_wallet = Some(address);
    org.updated_at = now_rfc3339();
    state.store.update_org(&org).await?;
    tracing::info!(org = %org.slug, payer = %address, "payer wallet stored");
    org_changed(&state, &caller, "org.payer_wallet_set", Some(&before), &org).await;
    Ok(Json(OrgView::from(&org)).into_response())
}

/// `DELETE /admin/orgs/{slug}/payer-wallet`: forgets the payer wallet.
#[utoipa::path(delete, path = "/admin/orgs/{slug}/payer-wallet", tag = "admin", security(("adminToken" = [])), params(("slug" = String, Path)), responses((status = 204, description = "Forgotten"), (status = 404, description = "No such organisation", body = paygate_domain::ErrorBody)))]
pub async fn delete_payer_wallet(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path(slug): Path<String>,
    caller: Caller,
) -> Result<Response, ApiError> {
    let mut org = org_by_slug(&state, &slug).await?;
    let before = org.clone();
    org.payer_key = None;
    org.payer_wallet = None;
    org.updated_at = now_rfc3339();
    state.store.update_org(&org).await?;
    org_changed(
        &state,
        &caller,
        "org.payer_wallet_deleted",
        Some(&before),
        &org,
    )
    .await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[utoipa::path(post, path = "/admin/orgs/{slug}/keys", tag = "admin", security(("adminToken" = [])), params(("slug" = String, Path)), request_body(content = Option<crate::keys_api::KeyCreate>, description = "Optional: the new key's role and expiry (default a full key that never expires)"), responses((status = 201, description = "A new API key (shown once)", body = KeyCreated), (status = 404, description = "No such organisation", body = paygate_domain::ErrorBody)))]
pub async fn create_key(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path(slug): Path<String>,
    caller: Caller,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let org = org_by_slug(&state, &slug).await?;
    crate::keys_api::issue(&state, &org, &body, (Actor::Admin, &caller)).await
}

#[utoipa::path(get, path = "/admin/orgs/{slug}/keys", tag = "admin", security(("adminToken" = [])), params(("slug" = String, Path)), responses((status = 200, description = "The organisation's keys (ids only)", body = Vec<KeyView>), (status = 404, description = "No such organisation", body = paygate_domain::ErrorBody)))]
pub async fn list_keys(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path(slug): Path<String>,
) -> Result<Response, ApiError> {
    let org = org_by_slug(&state, &slug).await?;
    crate::keys_api::keys_of(&state, &org).await
}

#[utoipa::path(delete, path = "/admin/orgs/{slug}/keys/{key_id}", tag = "admin", security(("adminToken" = [])), params(("slug" = String, Path), ("key_id" = String, Path)), responses((status = 204, description = "Revoked: refused from the next request on"), (status = 404, description = "No such organisation or key", body = paygate_domain::ErrorBody)))]
pub async fn revoke_key(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path((slug, key_id)): Path<(String, String)>,
    caller: Caller,
) -> Result<Response, ApiError> {
    let org = org_by_slug(&state, &slug).await?;
    crate::keys_api::revoke(&state, &org, (&key_id, false), (Actor::Admin, &caller)).await
}
