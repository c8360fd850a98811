//! `GET /discovery/resources`: the public listing ("bazaar") of discoverable routes in the x402
//! discovery format, read from the route table so it changes exactly when the proxy does.

use crate::error::ApiError;
use crate::input::TypedQuery;
use crate::state::AppState;
use crate::views::{DiscoveryItem, DiscoveryMetadata, DiscoveryPage, Pagination};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use paygate_domain::FieldProblem;

const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;
/// Larger offsets are refused: no listing is that long, and the bound is documented.
const MAX_OFFSET: usize = 1_000_000_000;

/// The listing's query: paging, the resource type and an organisation (others are ignored, as
/// discovery clients may send more).
#[derive(serde::Deserialize)]
pub struct ListQuery {
    limit: Option<String>,
    offset: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    org: Option<String>,
}

fn number(v: Option<&String>, k: &str, default: usize, max: usize) -> Result<usize, ApiError> {
    match v {
        None => Ok(default),
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| *n <= max)
            .ok_or_else(|| {
                ApiError::validation(vec![FieldProblem::new(
                    k,
                    format!("must be an integer from 0 to {max}"),
                )])
            }),
    }
}

#[utoipa::path(get, path = "/discovery/resources", tag = "discovery", params(("limit" = Option<u32>, Query, minimum = 0, maximum = 100, description = "Default 20"), ("offset" = Option<u32>, Query, minimum = 0, maximum = 1000000000), ("type" = Option<String>, Query, description = "Only `http` lists anything"), ("org" = Option<String>, Query, description = "An organisation slug")), responses((status = 200, description = "x402 bazaar discovery page", body = DiscoveryPage)))]
pub async fn list(
    State(state): State<AppState>,
    TypedQuery(q): TypedQuery<ListQuery>,
) -> Result<Response, ApiError> {
    let limit = number(q.limit.as_ref(), "limit", DEFAULT_LIMIT, MAX_LIMIT)?;
    let offset = number(q.offset.as_ref(), "offset", 0, MAX_OFFSET)?;
    let kind = q.kind.as_deref().unwrap_or("http");
    let org_filter = q.org.as_deref();
    let snapshot = state.table.snapshot();
    let mut items: Vec<DiscoveryItem> = Vec::new();
    if kind == "http" {
        for org in snapshot.orgs() {
            if org.suspended || org_filter.is_some_and(|s| s != org.slug) {
                continue;
            }
            for entry in org.routes.values() {
                let r = &entry.route;
                let Some((req, _)) = &entry.payment else {
                    continue;
                };
                if !r.discoverable || entry.sandbox {
                    continue;
                }
                items.push(DiscoveryItem {
                    resource: req.resource.clone(),
                    kind: "http",
                    x402_version: 1,
                    accepts: vec![req.to_v1()],
                    last_updated: r.updated_at.clone(),
                    metadata: DiscoveryMetadata {
                        category: r.bazaar_category.clone(),
                        description: r.description.clone(),
                        org: org.slug.clone(),
                        network_caip2: req.network.caip2.clone(),
                    },
                });
            }
        }
    }
    items.sort_by(|a, b| a.resource.cmp(&b.resource));
    let total = items.len();
    let page: Vec<_> = items.into_iter().skip(offset).take(limit).collect();
    Ok(Json(DiscoveryPage {
        x402_version: 1,
        items: page,
        pagination: Pagination {
            limit,
            offset,
            total,
        },
    })
    .into_response())
}
