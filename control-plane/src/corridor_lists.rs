//! What a seller lists of its corridors (issue 19): `GET /corridors` and a corridor's payouts,
//! newest first by cursor (`GET /corridors/{id}/payments`).

use crate::auth::OrgAuth;
use crate::corridors::own_corridor;
use crate::error::ApiError;
use crate::input::{check_cursor, next_cursor, page_limit, TypedQuery};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::Json;
use paygate_payouts::views::{CorridorView, PayoutView};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

const MAX_PAGE: u32 = 200;
const DEFAULT_PAGE: u32 = 50;

#[utoipa::path(get, path = "/corridors", tag = "corridors", security(("orgKey" = [])), responses((status = 200, description = "The organisation's corridors, oldest first", body = Vec<CorridorView>)))]
pub async fn list(
    State(state): State<AppState>,
    OrgAuth { org, .. }: OrgAuth,
) -> Result<Json<Vec<CorridorView>>, ApiError> {
    let corridors = state.store.list_corridors(&org.id).await?;
    Ok(Json(corridors.iter().map(CorridorView::from).collect()))
}

/// A page of a corridor's payouts.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PayoutsQuery {
    /// Page size: 1 to 200 (default 50).
    limit: Option<u32>,
    /// `nextCursor` of the previous page.
    cursor: Option<String>,
}

/// A corridor's payouts, newest first.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PayoutPage {
    payments: Vec<PayoutView>,
    /// Pass as `cursor` for the next page; null on the last one.
    #[schema(required)]
    next_cursor: Option<String>,
}

#[utoipa::path(get, path = "/corridors/{id}/payments", tag = "corridors", security(("orgKey" = [])), params(("id" = String, Path), PayoutsQuery), responses((status = 200, description = "The corridor's payouts, newest first", body = PayoutPage), (status = 404, description = "No such corridor in this organisation", body = paygate_domain::ErrorBody)))]
pub async fn payouts(
    State(state): State<AppState>,
    OrgAuth { org, .. }: OrgAuth,
    Path(id): Path<String>,
    TypedQuery(q): TypedQuery<PayoutsQuery>,
) -> Result<Json<PayoutPage>, ApiError> {
    let mut problems = Vec::new();
    let limit = page_limit(q.limit, DEFAULT_PAGE, MAX_PAGE, &mut problems);
    check_cursor(q.cursor.as_deref(), &mut problems);
    if !problems.is_empty() {
        return Err(ApiError::validation(problems));
    }
    let c = own_corridor(&state, &org, &id).await?;
    let page = state
        .store
        .list_payouts(&c.id, q.cursor.as_deref(), limit)
        .await?;
    Ok(Json(PayoutPage {
        next_cursor: next_cursor(&page, limit, |p| &p.id),
        payments: page.iter().map(PayoutView::from).collect(),
    }))
}
