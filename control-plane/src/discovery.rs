//! `GET /discovery/resources`: the public listing ("bazaar") of discoverable routes, the
//! sandbox route and public MCP tools in the x402 v2 discovery shape (each with its bazaar
//! extension: how to call it), read from the route table so it changes exactly when the proxy
//! does.

use crate::error::ApiError;
use crate::input::TypedQuery;
use crate::state::AppState;
use crate::views::{DiscoveryItem, DiscoveryMetadata, DiscoveryPage, Pagination};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use paygate_domain::model::PaymentProtocol;
use paygate_domain::FieldProblem;
use paygate_gateway::route_table::{OrgRoutes, RouteEntry};
use paygate_x402::PaymentRequirements;
use serde_json::Value;

const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;
/// Larger offsets are refused: no listing is that long, and the bound is documented.
const MAX_OFFSET: usize = 1_000_000_000;

/// The listing's query: paging, the resource type, an organisation, and the x402 discovery
/// filters `payTo`, `network` and `scheme` (others are ignored, as discovery clients may send
/// more).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    limit: Option<String>,
    offset: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    org: Option<String>,
    pay_to: Option<String>,
    network: Option<String>,
    scheme: Option<String>,
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

/// One item of a route: the route itself (`http`), or one of its public MCP tools (`mcp`).
fn item(
    org: &OrgRoutes,
    entry: &RouteEntry,
    req: &PaymentRequirements,
    kind: &'static str,
    resource: String,
    extensions: Value,
) -> DiscoveryItem {
    let r = &entry.route;
    let category = if entry.sandbox {
        Some("sandbox".to_string())
    } else {
        r.bazaar_category.clone()
    };
    DiscoveryItem {
        resource,
        kind,
        x402_version: 2,
        accepts: vec![req.to_v2()],
        last_updated: r.updated_at.clone(),
        description: r.description.clone(),
        mime_type: r.mime_type.clone(),
        service_name: org.slug.clone(),
        tags: category.iter().cloned().collect(),
        extensions,
        metadata: DiscoveryMetadata {
            category,
            description: r.description.clone(),
            org: org.slug.clone(),
            network_caip2: req.network.caip2.clone(),
        },
    }
}

/// The organisation's listed HTTP routes: discoverable ones and the sandbox, payable.
fn listed_routes(org: &OrgRoutes) -> impl Iterator<Item = (&RouteEntry, &PaymentRequirements)> {
    org.routes.values().filter_map(|entry| {
        let (req, _) = entry.payment.as_ref()?;
        let x402 = entry.route.protocols.contains(&PaymentProtocol::X402);
        ((entry.route.discoverable || entry.sandbox) && x402).then_some((&**entry, req))
    })
}

/// `/.well-known/x402`: the deployment's discovery document in x402scan's format
/// (`{version: 1, resources, instructions}`): every listed route's URL (each answers its own
/// 402 with the full requirements and bazaar data). No `ownershipProofs`: they are signatures
/// by the receiving wallets, whose keys paygate never holds. The full listing, with public MCP
/// tools, is `/discovery/resources`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct WellKnown {
    version: u8,
    resources: Vec<String>,
    instructions: String,
}

#[utoipa::path(get, path = "/.well-known/x402", tag = "discovery", responses((status = 200, description = "Discovery document (x402scan's format)", body = WellKnown)))]
pub async fn well_known(State(state): State<AppState>) -> Json<WellKnown> {
    let base = state.config.server.public_base_url();
    let snapshot = state.table.snapshot();
    let mut resources: Vec<String> = snapshot
        .orgs()
        .filter(|o| !o.suspended)
        .flat_map(|o| listed_routes(o).map(|(_, req)| req.resource.clone()))
        .collect();
    resources.sort();
    Json(WellKnown {
        version: 1,
        resources,
        instructions: format!(
            "Each resource answers 402 with its x402 payment requirements (v1 body, v2 \
             PAYMENT-REQUIRED header with bazaar data). The full listing, with input and \
             output schemas and the MCP tools any agent can pay for, is {base}/discovery/resources; \
             an organisation's paid MCP tools are served at {base}/mcp/x402/{{orgSlug}}."
        ),
    })
}

#[utoipa::path(get, path = "/discovery/resources", tag = "discovery", params(("limit" = Option<u32>, Query, minimum = 0, maximum = 100, description = "Default 20"), ("offset" = Option<u32>, Query, minimum = 0, maximum = 1000000000), ("type" = Option<String>, Query, description = "`http` (routes) or `mcp` (public MCP tools); both when absent; anything else is 400"), ("org" = Option<String>, Query, description = "An organisation slug"), ("payTo" = Option<String>, Query, description = "A receiver address (any case)"), ("network" = Option<String>, Query, description = "A CAIP-2 network, e.g. eip155:84532"), ("scheme" = Option<String>, Query, description = "Only `exact` lists anything")), responses((status = 200, description = "x402 v2 bazaar discovery page", body = DiscoveryPage)))]
pub async fn list(
    State(state): State<AppState>,
    TypedQuery(q): TypedQuery<ListQuery>,
) -> Result<Response, ApiError> {
    let limit = number(q.limit.as_ref(), "limit", DEFAULT_LIMIT, MAX_LIMIT)?;
    let offset = number(q.offset.as_ref(), "offset", 0, MAX_OFFSET)?;
    let kind = q.kind.as_deref();
    if kind.is_some_and(|k| !matches!(k, "http" | "mcp")) {
        // A filter that cannot match anything is a mistake to name, not an empty page.
        return Err(ApiError::validation(vec![FieldProblem::new(
            "type",
            "must be http or mcp (or absent for both)",
        )]));
    }
    let org_filter = q.org.as_deref();
    let pay_to = q.pay_to.as_deref().map(str::to_ascii_lowercase);
    let wanted = |req: &PaymentRequirements| {
        pay_to
            .as_deref()
            .is_none_or(|p| format!("{:#x}", req.pay_to) == p)
            && q.network.as_deref().is_none_or(|n| n == req.network.caip2)
            && q.scheme.as_deref().is_none_or(|s| s == "exact")
    };
    let base = state.config.server.public_base_url();
    let snapshot = state.table.snapshot();
    let mut items: Vec<DiscoveryItem> = Vec::new();
    for org in snapshot.orgs() {
        if org.suspended || org_filter.is_some_and(|s| s != org.slug) {
            continue;
        }
        if kind.is_none_or(|k| k == "http") {
            for (entry, req) in listed_routes(org) {
                if !wanted(req) {
                    continue;
                }
                let extensions = entry
                    .payment
                    .as_ref()
                    .and_then(|(_, c)| serde_json::to_value(&*c.extensions).ok())
                    .unwrap_or(Value::Null);
                items.push(item(
                    org,
                    entry,
                    req,
                    "http",
                    req.resource.clone(),
                    extensions,
                ));
            }
        }
        if kind.is_none_or(|k| k == "mcp") {
            for (name, tool, entry) in crate::mcp::public_tools(org) {
                let Some((req, _)) = &entry.payment else {
                    continue;
                };
                if !wanted(req) {
                    continue;
                }
                let resource = format!("{base}/mcp/x402/{}#{name}", org.slug);
                let extensions = paygate_x402::Extensions {
                    bazaar: Some(crate::mcp::bazaar(&name, &tool)),
                    ..Default::default()
                };
                let extensions = serde_json::to_value(extensions).unwrap_or(Value::Null);
                items.push(item(org, &entry, req, "mcp", resource, extensions));
            }
        }
    }
    items.sort_by(|a, b| a.resource.cmp(&b.resource));
    let total = items.len();
    let page: Vec<_> = items.into_iter().skip(offset).take(limit).collect();
    Ok(Json(DiscoveryPage {
        x402_version: 2,
        items: page,
        pagination: Pagination {
            limit,
            offset,
            total,
        },
    })
    .into_response())
}
