//! The public MCP endpoint of x402's MCP transport: `/mcp/x402/{orgSlug}` (Streamable HTTP, no
//! API key) lists the organisation's routes marked `publicTool`, each with its price, and any
//! agent calls them paying with its own wallet: an unpaid `tools/call` answers a tool error
//! carrying the payment requirements; a call with the payment in `_meta["x402/payment"]` is
//! paid through the proxy's one payment step ([`super::paid::call_paid_by_caller`]).
//!
//! Stateless (no MCP session): every request stands alone, so any node of a cluster serves it
//! and nothing is kept per agent. The organisation is the path's last segment.

use super::paid::{self, MPP_CREDENTIAL_META, PAYMENT_META};
use super::tools;
use crate::state::AppState;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use std::sync::Arc;

/// Where the endpoint is mounted; the organisation's slug follows.
pub const PREFIX: &str = "/mcp/x402/";

#[derive(Clone)]
pub struct PublicMcp {
    state: AppState,
}

/// The organisation slug of a request (the path's segment after [`PREFIX`]).
fn slug_of(context: &RequestContext<RoleServer>) -> Result<String, McpError> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.uri.path().strip_prefix(PREFIX).map(str::to_string))
        .filter(|s| !s.is_empty() && !s.contains('/'))
        .ok_or_else(|| McpError::invalid_request("no organisation in the path", None))
}

impl PublicMcp {
    /// The organisation's public tools, or none (unknown or suspended organisation).
    fn tools(&self, slug: &str) -> Vec<(String, Arc<paygate_gateway::route_table::RouteEntry>)> {
        let snap = self.state.table.snapshot();
        let found = snap
            .orgs()
            .find(|o| &*o.slug == slug && !o.suspended)
            .map(tools::public)
            .unwrap_or_default();
        found
    }
}

impl ServerHandler for PublicMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("paygate", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Each tool is a paid HTTP API. Pay per call with x402: call without payment to \
                 get the price and payment requirements, then call again with the signed payment \
                 in _meta[\"x402/payment\"]; the receipt comes back in \
                 _meta[\"x402/payment-response\"].",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let slug = slug_of(&context)?;
        Ok(ListToolsResult {
            tools: self
                .tools(&slug)
                .iter()
                .map(|(n, e)| tools::public_tool(n, e))
                .collect(),
            ..Default::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let slug = slug_of(&context)?;
        let Some((name, entry)) = self
            .tools(&slug)
            .into_iter()
            .find(|(n, _)| *n == request.name)
        else {
            return Err(McpError::invalid_params(
                format!("unknown tool {:?}", request.name),
                None,
            ));
        };
        // rmcp moves the request's `_meta` into the context.
        let payment: Option<&Value> = context
            .meta
            .0
             .0
            .get(PAYMENT_META)
            .or_else(|| request.meta.as_ref().and_then(|m| m.0 .0.get(PAYMENT_META)));
        let mpp: Option<&Value> = context.meta.0 .0.get(MPP_CREDENTIAL_META).or_else(|| {
            let meta = request.meta.as_ref();
            meta.and_then(|m| m.0 .0.get(MPP_CREDENTIAL_META))
        });
        let tool = tools::public_tool(&name, &entry);
        let extensions = paygate_x402::Extensions {
            bazaar: Some(super::bazaar(&name, &tool)),
            ..Default::default()
        };
        Ok(paid::call_paid_by_caller(
            &self.state,
            &slug,
            entry,
            &extensions,
            request.arguments,
            payment,
            mpp,
        )
        .await
        .into())
    }
}

/// The endpoint: stateless Streamable HTTP, JSON answers, the same `Origin` rule as `/mcp`.
pub(crate) fn service(
    state: &AppState,
    origins: Vec<String>,
) -> axum::routing::MethodRouter<AppState> {
    let cfg = &state.config;
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(cfg.server.max_body_bytes);
    let factory_state = state.clone();
    let service: StreamableHttpService<PublicMcp, LocalSessionManager> = StreamableHttpService::new(
        move || {
            Ok(PublicMcp {
                state: factory_state.clone(),
            })
        },
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::routing::any_service(service).layer(axum::middleware::from_fn_with_state(
        state.clone(),
        known_org,
    ))
}

/// An organisation slug no organisation has is `404 NOT_FOUND`, not an empty tool list.
async fn known_org(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let slug = req
        .uri()
        .path()
        .strip_prefix(PREFIX)
        .unwrap_or_default()
        .trim_matches('/')
        .to_string();
    match state.store.get_org_by_slug(&slug).await {
        Ok(Some(_)) => next.run(req).await,
        Ok(None) => crate::error::ApiError::new(
            paygate_domain::ErrorCode::NotFound,
            format!("no organisation {slug:?}: the endpoint is /mcp/x402/{{orgSlug}}"),
        )
        .into_response(),
        Err(e) => crate::error::ApiError::from(e).into_response(),
    }
}
