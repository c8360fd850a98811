//! Access windows for the seller (issue 31): `GET /api/access-windows` lists the organisation's
//! windows that still serve (of one payer with `payer=`), each with the payment that opened it,
//! when it ends and the calls it served and has left.

use crate::auth::OrgAuth;
use crate::error::ApiError;
use crate::input::TypedQuery;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use paygate_domain::window::AccessWindow;
use paygate_domain::FieldProblem;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WindowQuery {
    /// Only this payer's windows (an address, any case).
    payer: Option<String>,
}

/// A payer's access window on one route.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WindowView {
    route_id: String,
    payer: String,
    /// The payment that opened it.
    payment_id: String,
    opened_at: String,
    expires_at: String,
    /// Calls served through it by signing in.
    calls_used: u32,
    /// Calls it still serves (null: any number until it ends).
    #[schema(required)]
    calls_left: Option<u32>,
}

fn time_of(unix: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(i64::try_from(unix).unwrap_or(i64::MAX))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    paygate_domain::rfc3339(t)
}

impl From<AccessWindow> for WindowView {
    fn from(w: AccessWindow) -> Self {
        Self {
            calls_left: w.calls_left(),
            opened_at: time_of(w.opened_at),
            expires_at: time_of(w.expires_at),
            calls_used: w.calls_used,
            route_id: w.route_id,
            payer: w.payer,
            payment_id: w.payment_id,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WindowList {
    windows: Vec<WindowView>,
}

#[utoipa::path(get, path = "/api/access-windows", tag = "routes", security(("orgKey" = [])), params(WindowQuery), responses((status = 200, description = "The organisation's access windows that still serve, soonest to end first", body = WindowList), (status = 400, description = "payer is not an address", body = paygate_domain::ErrorBody)))]
pub async fn access_windows(
    State(state): State<AppState>,
    auth: OrgAuth,
    TypedQuery(q): TypedQuery<WindowQuery>,
) -> Result<Json<WindowList>, ApiError> {
    let payer = match &q.payer {
        None => None,
        Some(p) => Some(
            paygate_x402::address::parse_address(p)
                .map(|a| format!("{a:#x}"))
                .ok_or_else(|| {
                    ApiError::validation(vec![FieldProblem::new(
                        "payer",
                        "must be an address: 0x and 40 hex digits",
                    )])
                })?,
        ),
    };
    let windows = state
        .store
        .active_windows(&auth.org.id, payer.as_deref(), paygate_domain::unix_now())
        .await?;
    Ok(Json(WindowList {
        windows: windows.into_iter().map(WindowView::from).collect(),
    }))
}
