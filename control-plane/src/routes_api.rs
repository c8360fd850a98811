//! `/api/routes`: create, list, read, update and delete an organisation's routes. Every change is
//! committed, made durable, and published to the proxy's route table before the answer is sent.

use crate::audit::{self, json_of, Actor, Caller, Change};
use crate::auth::OrgAuth;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::input::{remembered, Idem, IdempotencyKey, RequestLine};
use crate::state::AppState;
use crate::views::RouteView;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use paygate_domain::ids::new_id;
use paygate_domain::model::Route;
use paygate_domain::StoreError;
use paygate_domain::{now_rfc3339, ErrorCode, FieldProblem};
use paygate_gateway::settleable::Standing;
use paygate_x402::money::UsdcAmount;

mod input;
mod targets;
use input::RouteInput;
pub use input::{RouteCreate, RouteUpdate};

/// `route.changed` for the seller's webhooks: what changed (`created`, `updated`, `deleted`)
/// and the route as it is now (as it was, when deleted).
async fn route_changed(state: &AppState, change: &Change<'_>) {
    let Some(events) = state.payments.events() else {
        return;
    };
    let what = change.action.trim_start_matches("route.");
    let route = change.after.clone().or_else(|| change.before.clone());
    let data = serde_json::json!({"change": what, "routeId": change.target, "route": route});
    events
        .emit(change.org_id, "route.changed", change.target, data)
        .await;
}

/// The deployment's rule on a well-formed body's network: one this deployment settles (a
/// problem naming those otherwise); `Err` when it settles it but cannot now (its facilitator or
/// RPC does not answer): `503`, try again.
fn network_problem(input: &RouteInput, state: &AppState) -> Result<Option<FieldProblem>, ApiError> {
    let Some(spelling) = &input.network else {
        return Ok(None);
    };
    let settleable = state.payments.settleable();
    let standing = state
        .networks()
        .resolve(spelling)
        .map(|n| (n, settleable.standing(n)));
    match standing {
        Some((_, Standing::Settles)) => Ok(None),
        Some((n, Standing::NotAnswering)) => Err(ApiError::new(
            ErrorCode::FacilitatorUnavailable,
            format!(
                "payments on {} cannot be settled now (the facilitator or the network's RPC does \
                 not answer); try again later",
                n.v1_name
            ),
        )),
        None | Some((_, Standing::NotSettled)) => {
            let choice = settleable.spellings();
            let message = if choice.is_empty() {
                "no network can be settled by this deployment now (no facilitator is configured \
                 or none answers)"
                    .to_string()
            } else {
                format!(
                    "must be a network this deployment settles: {}",
                    choice.join(", ")
                )
            };
            Ok(Some(FieldProblem::new("network", message)))
        }
    }
}

/// Refuses the body's own problems with its target fields, and a target that resolves to an
/// internal address (SSRF), unless allow-listed: every problem in `details`.
/// Also refuses a network this deployment does not settle (and, when no other problem is
/// found, one it cannot settle now: `503`).
async fn check_input(state: &AppState, input: &RouteInput) -> Result<(), ApiError> {
    let mut problems = input.problems.clone();
    let unanswered = match network_problem(input, state) {
        Ok(p) => {
            problems.extend(p);
            None
        }
        Err(e) => Some(e),
    };
    for (i, t) in input.targets.iter().flatten().enumerate() {
        let Some(target) = paygate_gateway::upstream_target::UpstreamTarget::parse(&t.url) else {
            continue;
        };
        if let Err(problem) = state
            .target_policy
            .check_host(&target.host, target.port)
            .await
        {
            let field = match input.targets_field {
                "targets" => format!("targets[{i}].url"),
                other => other.to_string(),
            };
            problems.push(FieldProblem::new(field, problem.to_string()));
        }
    }
    match unanswered {
        _ if !problems.is_empty() => Err(ApiError::validation(problems)),
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The health of `route`'s targets as this node's balancer sees them, if it has one.
fn target_health(
    state: &AppState,
    slug: &str,
    route: &Route,
) -> Option<Vec<paygate_gateway::balancer::TargetHealth>> {
    let snapshot = state.table.snapshot();
    let entry = snapshot.org(slug)?.routes.get(&route.path)?.clone();
    let balancer = entry.balancer.as_ref().filter(|_| *entry.id == route.id)?;
    Some(balancer.health())
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

#[utoipa::path(post, path = "/api/routes", tag = "routes", security(("orgKey" = [])), params(("Idempotency-Key" = Option<String>, Header, description = "1 to 255 visible ASCII characters; a repeat answers the first result")), request_body = RouteCreate, responses((status = 201, description = "Created (also a replay of the same Idempotency-Key)", body = RouteView), (status = 409, description = "Path already used, or the Idempotency-Key was used with another request", body = paygate_domain::ErrorBody), (status = 503, description = "The network is one this deployment settles, but its facilitator or RPC does not answer now: try again", body = paygate_domain::ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    auth: OrgAuth,
    method: Method,
    uri: Uri,
    key: IdempotencyKey,
    caller: Caller,
    body: JsonBody<RouteCreate>,
) -> Result<Response, ApiError> {
    let org = &auth.org;
    let input = RouteInput::from(body.value);
    check_input(&state, &input).await?;
    let idem = Idem::from_request(key, &method, &uri, &body.raw);
    if let Some(r) = remembered(&state, &org.id, &idem).await? {
        return Ok(r);
    }
    let now = time::OffsetDateTime::now_utc();
    let stamp = paygate_domain::rfc3339(now);
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
        origin_deduplicates: false,
        targets: Vec::new(),
        balancing: Default::default(),
        health_check: None,
        description: String::new(),
        bazaar_category: None,
        mime_type: None,
        input_schema: None,
        output_schema: None,
        public_tool: false,
        schemes: paygate_domain::model::exact_only(),
        protocols: paygate_domain::model::both_protocols(),
        pricing: paygate_domain::model::Pricing::Fixed,
        access_window_seconds: None,
        access_window_calls: None,
        refund_window_seconds: None,
        token: paygate_domain::model::usdc(),
        created_at_ns: now.unix_timestamp_nanos(),
        created_at: stamp.clone(),
        updated_at: stamp,
    };
    input.apply(&mut route);
    let mut problems = RouteInput::window_problems(&route);
    problems.extend(RouteInput::token_problems(&route, state.networks()));
    if !problems.is_empty() {
        return Err(ApiError::validation(problems));
    }
    let out = RouteView::from(&route);
    let record = idem
        .as_ref()
        .map(|i| i.record(&org.id, StatusCode::CREATED, &out));
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
    let change = Change {
        org_id: &org.id,
        action: "route.created",
        target: &route.id,
        before: None,
        after: json_of(&out),
    };
    route_changed(&state, &change).await;
    audit::record(&state, Actor::Key(&auth), &caller, change).await;
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

#[utoipa::path(get, path = "/api/routes", tag = "routes", security(("orgKey" = [])), responses((status = 200, description = "The organisation's routes, newest first", body = Vec<RouteView>)))]
pub async fn list(State(state): State<AppState>, auth: OrgAuth) -> Result<Response, ApiError> {
    let mut routes = state.store.list_routes(&auth.org.id).await?;
    routes.sort_by(|a, b| {
        b.created_at_ns
            .cmp(&a.created_at_ns)
            .then_with(|| b.id.cmp(&a.id))
    });
    let out: Vec<_> = routes
        .iter()
        .map(|r| RouteView::from(r).with_health(target_health(&state, &auth.org.slug, r)))
        .collect();
    Ok(Json(out).into_response())
}

#[utoipa::path(get, path = "/api/routes/{id}", tag = "routes", security(("orgKey" = [])), params(("id" = String, Path)), responses((status = 200, description = "The route", body = RouteView), (status = 404, description = "No such route in this organisation", body = paygate_domain::ErrorBody)))]
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
    let health = target_health(&state, &auth.org.slug, &route);
    Ok(Json(RouteView::from(&route).with_health(health)).into_response())
}

#[utoipa::path(patch, path = "/api/routes/{id}", tag = "routes", security(("orgKey" = [])), params(("id" = String, Path), ("Idempotency-Key" = Option<String>, Header, description = "1 to 255 visible ASCII characters")), request_body = RouteUpdate, responses((status = 200, description = "Updated, effective at once", body = RouteView), (status = 404, description = "No such route in this organisation", body = paygate_domain::ErrorBody), (status = 409, description = "Path already used, or Idempotency-Key reused with another request", body = paygate_domain::ErrorBody), (status = 503, description = "The network is one this deployment settles, but its facilitator or RPC does not answer now: try again", body = paygate_domain::ErrorBody)))]
pub async fn update(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(id): Path<String>,
    line: RequestLine,
    key: IdempotencyKey,
    caller: Caller,
    body: JsonBody<RouteUpdate>,
) -> Result<Response, ApiError> {
    let org = &auth.org;
    let input = RouteInput::from(body.value);
    check_input(&state, &input).await?;
    let idem = Idem::from_request(key, &line.method, &line.uri, &body.raw);
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
        input.clone().apply(&mut new);
        let mut problems = RouteInput::window_problems(&new);
        problems.extend(RouteInput::token_problems(&new, state.networks()));
        if !problems.is_empty() {
            return Err(ApiError::validation(problems));
        }
        new.updated_at = now_rfc3339();
        let out = RouteView::from(&new);
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
                let change = Change {
                    org_id: &org.id,
                    action: "route.updated",
                    target: &id,
                    before: json_of(&RouteView::from(&old)),
                    after: json_of(&out),
                };
                route_changed(&state, &change).await;
                audit::record(&state, Actor::Key(&auth), &caller, change).await;
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

#[utoipa::path(delete, path = "/api/routes/{id}", tag = "routes", security(("orgKey" = [])), params(("id" = String, Path)), responses((status = 204, description = "Deleted"), (status = 404, description = "No such route in this organisation", body = paygate_domain::ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(id): Path<String>,
    caller: Caller,
) -> Result<Response, ApiError> {
    let before = state.store.get_route(&auth.org.id, &id).await?;
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
    let change = Change {
        org_id: &auth.org.id,
        action: "route.deleted",
        target: &id,
        before: before
            .as_ref()
            .map(RouteView::from)
            .as_ref()
            .and_then(json_of),
        after: None,
    };
    route_changed(&state, &change).await;
    audit::record(&state, Actor::Key(&auth), &caller, change).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}
