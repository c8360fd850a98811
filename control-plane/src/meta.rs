//! `GET /healthz`: the process is up and which version it runs.

use crate::state::AppState;
use crate::views::Health;

#[utoipa::path(get, path = "/healthz", tag = "meta", responses((status = 200, description = "Alive", body = Health)))]
pub async fn health(
    axum::extract::State(state): axum::extract::State<AppState>,
) -> axum::Json<Health> {
    axum::Json(Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
        duties: state.store.leases_held(),
        limit_nodes: state.metrics.limit_nodes(),
    })
}
