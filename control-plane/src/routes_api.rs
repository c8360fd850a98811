//! `/api/routes`: create, list, read, update and delete an organisation's routes. Every change is
//! committed, made durable, and published to the proxy's route table before the answer is sent.

use crate::auth::OrgAuth;
use crate::error::ApiError;
use crate::input::{Fields, IdempotencyKey};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use paygate_gateway::route_path;
use paygate_shared::ids::new_id;
use paygate_shared::model::{IdempotencyRecord, Route};
use paygate_shared::store::StoreError;
use paygate_shared::{now_rfc3339, ErrorCode};
use paygate_x402::money::UsdcAmount;
use paygate_x402::network::Networks;

const MAX_DESCRIPTION: usize = 2000;
const MAX_CATEGORY: usize = 64;
const MAX_URL: usize = 2048;
const READ_ONLY: &[&str] = &["id", "orgId", "createdAt", "updatedAt"];

/// The route fields a request may set; `None` = not given.
#[derive(Default)]
struct RouteInput {
    path: Option<String>,
    price: Option<UsdcAmount>,
    target_url: Option<String>,
    network: Option<String>,
    active: Option<bool>,
    streaming: Option<bool>,
    discoverable: Option<bool>,
    description: Option<Option<String>>,
    bazaar_category: Option<Option<String>>,
}

fn parse_input(body: &[u8], networks: &Networks, create: bool) -> Result<RouteInput, ApiError> {
    let mut f = Fields::parse(body)?;
    let mut input = RouteInput::default();
    if let Some(p) = f.string("path", route_path::MAX_PATH_LEN + 2) {
        match route_path::normalize(&p) {
            Ok(p) => input.path = Some(p),
            Err(problem) => f.problem("path", problem),
        }
    }
    if let Some(n) = f.number("priceUSD") {
        match UsdcAmount::from_usd_json(&n) {
            Ok(a) => input.price = Some(a),
            Err(e) => f.problem("priceUSD", e.to_string()),
        }
    }
    if let Some(u) = f.string("targetUrl", MAX_URL) {
        match check_target_url(&u) {
            Ok(()) => input.target_url = Some(u),
            Err(problem) => f.problem("targetUrl", problem),
        }
    }
    if let Some(n) = f.string("network", 64) {
        if networks.resolve(&n).is_some() {
            input.network = Some(n);
        } else {
            f.problem(
                "network",
                format!("must be one of {}", networks.spellings().join(", ")),
            );
        }
    }
    input.active = f.bool("active");
    input.streaming = f.bool("streaming");
    input.discoverable = f.bool("discoverable");
    input.description = f.nullable_string("description", MAX_DESCRIPTION);
    input.bazaar_category = f.nullable_string("bazaarCategory", MAX_CATEGORY);
    if let Some(Some(c)) = &input.bazaar_category {
        if c.trim().is_empty() {
            f.problem("bazaarCategory", "must not be empty (use null to clear)");
        }
    }
    if create {
        input.path = f.require("path", input.path);
        input.price = f.require("priceUSD", input.price);
        input.target_url = f.require("targetUrl", input.target_url);
        input.network = f.require("network", input.network);
    }
    f.finish(READ_ONLY)?;
    Ok(input)
}

fn check_target_url(u: &str) -> Result<(), &'static str> {
    let url = url::Url::parse(u).map_err(|_| "must be an absolute http(s) URL")?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err("must use http or https");
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("must name a host");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not contain credentials");
    }
    if url.fragment().is_some() {
        return Err("must not contain a fragment");
    }
    Ok(())
}

/// Refuses a target that resolves to an internal address (SSRF), unless allow-listed.
async fn check_target_address(state: &AppState, input: &RouteInput) -> Result<(), ApiError> {
    let Some(target) = input
        .target_url
        .as_deref()
        .and_then(paygate_gateway::route_table::UpstreamTarget::parse)
    else {
        return Ok(());
    };
    state
        .target_policy
        .check_host(&target.host, target.port)
        .await
        .map_err(|problem| {
            ApiError::validation(vec![paygate_shared::FieldProblem::new(
                "targetUrl",
                problem.to_string(),
            )])
        })
}

impl RouteInput {
    fn apply(self, r: &mut Route) {
        if let Some(v) = self.path {
            r.path = v;
        }
        if let Some(v) = self.price {
            r.price = v;
        }
        if let Some(v) = self.target_url {
            r.target_url = v;
        }
        if let Some(v) = self.network {
            r.network = v;
        }
        if let Some(v) = self.active {
            r.active = v;
        }
        if let Some(v) = self.streaming {
            r.streaming = v;
        }
        if let Some(v) = self.discoverable {
            r.discoverable = v;
        }
        if let Some(v) = self.description {
            r.description = v.unwrap_or_default();
        }
        if let Some(v) = self.bazaar_category {
            r.bazaar_category = v;
        }
    }
}

/// An `Idempotency-Key` in use for this request: the key and the request's fingerprint.
struct Idem {
    key: String,
    fingerprint: String,
}

impl Idem {
    fn from_request(key: IdempotencyKey, method: &Method, uri: &Uri, body: &[u8]) -> Option<Self> {
        key.0.map(|key| Self {
            key,
            fingerprint: crate::input::fingerprint(method.as_str(), uri.path(), body),
        })
    }

    fn record(
        &self,
        org_id: &str,
        status: StatusCode,
        body: &serde_json::Value,
    ) -> IdempotencyRecord {
        IdempotencyRecord {
            org_id: org_id.to_string(),
            key: self.key.clone(),
            fingerprint: self.fingerprint.clone(),
            status: status.as_u16(),
            body: body.to_string(),
            created_at_unix: time::OffsetDateTime::now_utc().unix_timestamp(),
        }
    }

    /// The answer to a request whose key was used before: the stored response if it is the same
    /// request, else `409 DUPLICATE_REQUEST`.
    fn replay(&self, prev: &IdempotencyRecord) -> Response {
        if prev.fingerprint != self.fingerprint {
            return ApiError::new(
                ErrorCode::DuplicateRequest,
                "Idempotency-Key was already used with a different request",
            )
            .into_response();
        }
        let status = StatusCode::from_u16(prev.status).unwrap_or(StatusCode::OK);
        let mut resp = (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            prev.body.clone(),
        )
            .into_response();
        resp.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
        resp
    }
}

async fn remembered(
    state: &AppState,
    org_id: &str,
    idem: &Option<Idem>,
) -> Result<Option<Response>, ApiError> {
    if let Some(i) = idem {
        if let Some(prev) = state.store.get_idempotency(org_id, &i.key).await? {
            return Ok(Some(i.replay(&prev)));
        }
    }
    Ok(None)
}

fn duplicate_path(path: &str) -> ApiError {
    ApiError::new(
        ErrorCode::DuplicatePath,
        format!("another route of this organisation already has path {path}"),
    )
}

fn route_not_found() -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        "no route with this id in your organisation",
    )
}

#[utoipa::path(post, path = "/api/routes", tag = "routes", security(("orgKey" = [])), params(("Idempotency-Key" = Option<String>, Header, description = "1 to 255 visible ASCII characters; a repeat answers the first result")), request_body = crate::schema::RouteCreate, responses((status = 201, description = "Created (also a replay of the same Idempotency-Key)", body = crate::schema::RouteView), (status = 409, description = "Path already used, or the Idempotency-Key was used with another request", body = crate::schema::ErrorDoc)))]
pub async fn create(
    State(state): State<AppState>,
    auth: OrgAuth,
    method: Method,
    uri: Uri,
    key: IdempotencyKey,
    body: Bytes,
) -> Result<Response, ApiError> {
    let org = auth.org;
    let input = parse_input(&body, state.networks(), true)?;
    check_target_address(&state, &input).await?;
    let idem = Idem::from_request(key, &method, &uri, &body);
    if let Some(r) = remembered(&state, &org.id, &idem).await? {
        return Ok(r);
    }
    let now = time::OffsetDateTime::now_utc();
    let stamp = paygate_shared::rfc3339(now);
    let mut route = Route {
        id: new_id("rt"),
        org_id: org.id.clone(),
        path: String::new(),
        price: UsdcAmount(0),
        target_url: String::new(),
        network: String::new(),
        active: true,
        streaming: false,
        discoverable: false,
        description: String::new(),
        bazaar_category: None,
        created_at_ns: now.unix_timestamp_nanos(),
        created_at: stamp.clone(),
        updated_at: stamp,
    };
    input.apply(&mut route);
    let body = route.to_api_json();
    let record = idem
        .as_ref()
        .map(|i| i.record(&org.id, StatusCode::CREATED, &body));
    match state.store.insert_route(&route, record.as_ref()).await {
        Ok(()) => {}
        Err(StoreError::DuplicatePath) => return Err(duplicate_path(&route.path)),
        Err(StoreError::IdempotencyKeyUsed(prev)) => {
            return Ok(idem.as_ref().map(|i| i.replay(&prev)).unwrap_or_default())
        }
        Err(e) => return Err(e.into()),
    }
    state
        .table
        .refresh_route(state.store.as_ref(), &org.id, &route.id)
        .await?;
    tracing::info!(org = %org.slug, route = %route.id, path = %route.path, "route created");
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

#[utoipa::path(get, path = "/api/routes", tag = "routes", security(("orgKey" = [])), responses((status = 200, description = "The organisation's routes, newest first", body = Vec<crate::schema::RouteView>)))]
pub async fn list(State(state): State<AppState>, auth: OrgAuth) -> Result<Response, ApiError> {
    let mut routes = state.store.list_routes(&auth.org.id).await?;
    routes.sort_by(|a, b| {
        b.created_at_ns
            .cmp(&a.created_at_ns)
            .then_with(|| b.id.cmp(&a.id))
    });
    let body: Vec<_> = routes.iter().map(Route::to_api_json).collect();
    Ok(Json(body).into_response())
}

#[utoipa::path(get, path = "/api/routes/{id}", tag = "routes", security(("orgKey" = [])), params(("id" = String, Path)), responses((status = 200, description = "The route", body = crate::schema::RouteView), (status = 404, description = "No such route in this organisation", body = crate::schema::ErrorDoc)))]
pub async fn get_one(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let route = state
        .store
        .get_route(&auth.org.id, &id)
        .await?
        .ok_or_else(route_not_found)?;
    Ok(Json(route.to_api_json()).into_response())
}

#[utoipa::path(patch, path = "/api/routes/{id}", tag = "routes", security(("orgKey" = [])), params(("id" = String, Path), ("Idempotency-Key" = Option<String>, Header, description = "1 to 255 visible ASCII characters")), request_body = crate::schema::RouteUpdate, responses((status = 200, description = "Updated, effective at once", body = crate::schema::RouteView), (status = 404, description = "No such route in this organisation", body = crate::schema::ErrorDoc), (status = 409, description = "Path already used, or Idempotency-Key reused with another request", body = crate::schema::ErrorDoc)))]
pub async fn update(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    key: IdempotencyKey,
    body: Bytes,
) -> Result<Response, ApiError> {
    let org = auth.org;
    let networks = state.networks();
    // Validate once up front so a bad body changes nothing and names its fields.
    check_target_address(&state, &parse_input(&body, networks, false)?).await?;
    let idem = Idem::from_request(key, &method, &uri, &body);
    if let Some(r) = remembered(&state, &org.id, &idem).await? {
        return Ok(r);
    }
    // Optimistic concurrency: re-read and re-apply if the route changed in between.
    for _ in 0..8 {
        let old = state
            .store
            .get_route(&org.id, &id)
            .await?
            .ok_or_else(route_not_found)?;
        let mut new = old.clone();
        parse_input(&body, networks, false)?.apply(&mut new);
        new.updated_at = now_rfc3339();
        let out = new.to_api_json();
        let record = idem
            .as_ref()
            .map(|i| i.record(&org.id, StatusCode::OK, &out));
        match state.store.replace_route(&old, &new, record.as_ref()).await {
            Ok(()) => {
                state
                    .table
                    .refresh_route(state.store.as_ref(), &org.id, &id)
                    .await?;
                tracing::info!(org = %org.slug, route = %id, "route updated");
                return Ok(Json(out).into_response());
            }
            Err(StoreError::Conflict) => continue,
            Err(StoreError::NotFound) => return Err(route_not_found()),
            Err(StoreError::DuplicatePath) => return Err(duplicate_path(&new.path)),
            Err(StoreError::IdempotencyKeyUsed(prev)) => {
                return Ok(idem.as_ref().map(|i| i.replay(&prev)).unwrap_or_default())
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::new(
        ErrorCode::DuplicateRequest,
        "the route is being changed concurrently; retry",
    ))
}

#[utoipa::path(delete, path = "/api/routes/{id}", tag = "routes", security(("orgKey" = [])), params(("id" = String, Path)), responses((status = 204, description = "Deleted"), (status = 404, description = "No such route in this organisation", body = crate::schema::ErrorDoc)))]
pub async fn delete(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    match state.store.delete_route(&auth.org.id, &id).await {
        Ok(()) => {}
        Err(StoreError::NotFound) => return Err(route_not_found()),
        Err(e) => return Err(e.into()),
    }
    state
        .table
        .refresh_route(state.store.as_ref(), &auth.org.id, &id)
        .await?;
    tracing::info!(org = %auth.org.slug, route = %id, "route deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}
