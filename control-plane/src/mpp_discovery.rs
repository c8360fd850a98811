//! `GET /discovery/{orgSlug}/openapi.json`: MPP's discovery document for an organisation, an
//! OpenAPI 3.1 document whose operations carry `x-payment-info` (each route's MPP `charge`
//! offer, as the MPP way renders it), its server the organisation's gateway prefix. `mppx
//! discover validate` reads it. x402's listing of the same routes is `/discovery/resources`.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::Json;
use paygate_domain::ErrorCode;
use serde_json::{json, Value};

#[utoipa::path(get, path = "/discovery/{orgSlug}/openapi.json", tag = "discovery", params(("orgSlug" = String, Path)), responses((status = 200, description = "MPP discovery document (OpenAPI 3.1 with x-payment-info)", body = Object), (status = 404, description = "No such organisation", body = paygate_domain::ErrorBody)))]
pub async fn openapi(
    State(state): State<AppState>,
    Path(slug): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let snapshot = state.table.snapshot();
    let org = snapshot
        .orgs()
        .find(|o| o.slug == slug && !o.suspended)
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, "no such organisation"))?;
    let base = state.config.server.public_base_url();
    let mut paths = serde_json::Map::new();
    let mut routes: Vec<_> = org.routes.values().collect();
    routes.sort_by(|a, b| a.route.path.cmp(&b.route.path));
    for entry in routes {
        if !entry.route.discoverable {
            continue;
        }
        let Some(offer) = paygate_gateway::payments::ways::mpp::discovery_offer(entry) else {
            continue;
        };
        let mut operation = json!({
            "responses": {
                "200": {"description": "Successful response"},
                "402": {"description": "Payment Required"},
            },
            "x-payment-info": {"offers": [offer]},
        });
        if !entry.route.description.is_empty() {
            operation["summary"] = entry.route.description.clone().into();
        }
        let path = format!("/{}", entry.route.path.trim_start_matches('/'));
        paths.insert(path, json!({"get": operation.clone(), "post": operation}));
    }
    Ok(Json(json!({
        "openapi": "3.1.0",
        "info": {"title": format!("{slug} on paygate"), "version": "1.0.0"},
        "servers": [{"url": format!("{base}/gateway/{slug}")}],
        "paths": paths,
        "x-service-info": {"docs": {"homepage": format!("{base}/discovery/resources?org={slug}")}},
    })))
}
