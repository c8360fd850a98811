//! `GET /healthz`: the process is up and which version it runs.

#[utoipa::path(get, path = "/healthz", tag = "meta", responses((status = 200, description = "Alive", body = crate::schema::Health)))]
pub async fn health() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
    }))
}
