//! `GET /healthz`: the process is up and which version it runs.

use crate::views::Health;

#[utoipa::path(get, path = "/healthz", tag = "meta", responses((status = 200, description = "Alive", body = Health)))]
pub async fn health() -> axum::Json<Health> {
    axum::Json(Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
    })
}
