//! MCP: an organisation's active routes as tools, paid from the organisation's payer wallet.
//!
//! One handler ([`PaygateMcp`], built on `rmcp`) serves two transports:
//! - the legacy HTTP+SSE transport of SPEC.md 4.4 (`GET /mcp/sse`, `POST /mcp/message`), bridged
//!   to rmcp through channels ([`sse`]);
//! - the Streamable HTTP transport at `/mcp`, rmcp's own tower service, its sessions kept in
//!   the store ([`sessions`]) so any node of a cluster serves them.
//!
//! Both authenticate with the organisation's API key before anything else (`401` JSON, no
//! stream). A session belongs to the organisation that opened it; every request in it must carry
//! a key of that organisation.

mod call;
pub(crate) mod hub;
mod paid;
mod sessions;
pub(crate) mod sse;
mod tools;
pub(crate) mod x402;

use crate::auth::OrgAuth;
use crate::state::AppState;
use axum::extract::{FromRequestParts, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{MaybeSendFuture, NotificationContext, RequestContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The organisation an MCP request was authenticated as (a request extension).
#[derive(Debug, Clone)]
pub struct McpPrincipal {
    pub org_id: Arc<str>,
}

/// The organisation's tools as the route table has them now (none while it is suspended: they
/// are its gateway routes, which suspension blocks).
fn org_tools(state: &AppState, org_id: &str) -> Vec<rmcp::model::Tool> {
    let snap = state.table.snapshot();
    let tools = snap
        .orgs()
        .find(|o| &*o.org_id == org_id && !o.suspended)
        .map(tools::list)
        .unwrap_or_default();
    tools
}

/// The organisation's public tools (`/mcp/x402/{slug}`) as listed: name, tool, route.
pub(crate) fn public_tools(
    org: &paygate_gateway::route_table::OrgRoutes,
) -> Vec<(
    String,
    rmcp::model::Tool,
    Arc<paygate_gateway::route_table::RouteEntry>,
)> {
    tools::public(org)
        .into_iter()
        .map(|(n, e)| {
            let t = tools::public_tool(&n, &e);
            (n, t, e)
        })
        .collect()
}

/// A tool's bazaar discovery extension (`type: mcp`, Streamable HTTP).
pub(crate) fn bazaar(name: &str, tool: &rmcp::model::Tool) -> serde_json::Value {
    let input = serde_json::Value::Object((*tool.input_schema).clone());
    let output = tool
        .output_schema
        .as_ref()
        .map(|s| serde_json::Value::Object((**s).clone()));
    paygate_gateway::bazaar::mcp(
        name,
        tool.description.as_deref().unwrap_or_default(),
        &input,
        output.as_ref(),
    )
}

/// Cancels the session's background work (the `tools/list_changed` watcher) when the last clone
/// of its handler is dropped, i.e. when rmcp ends the session.
struct SessionGuard(CancellationToken);

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// The MCP server of one session.
#[derive(Clone)]
pub struct PaygateMcp {
    state: AppState,
    /// The organisation the session belongs to: fixed when an SSE session opens, or by the
    /// Streamable HTTP `initialize` request.
    org: Arc<OnceLock<Arc<str>>>,
    guard: Arc<SessionGuard>,
}

impl PaygateMcp {
    fn new(state: AppState, org: Option<Arc<str>>) -> Self {
        let cell = OnceLock::new();
        if let Some(o) = org {
            let _ = cell.set(o);
        }
        Self {
            state,
            org: Arc::new(cell),
            guard: Arc::new(SessionGuard(CancellationToken::new())),
        }
    }

    /// The organisation of a request: the session's, checked against the request's own key.
    fn org_of(&self, ext: &rmcp::model::Extensions) -> Result<Arc<str>, McpError> {
        let from_request = ext
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<McpPrincipal>())
            .map(|p| p.org_id.clone());
        match (self.org.get(), from_request) {
            (Some(bound), Some(req)) if *bound != req => Err(McpError::invalid_request(
                "this session belongs to another organisation",
                None,
            )),
            (Some(bound), _) => Ok(bound.clone()),
            (None, Some(req)) => {
                let _ = self.org.set(req.clone());
                Ok(req)
            }
            (None, None) => Err(McpError::invalid_request("not authenticated", None)),
        }
    }

    fn watch_tools(&self, org_id: Arc<str>, peer: rmcp::Peer<RoleServer>) {
        let mut changes = self.state.table.subscribe();
        // The watcher holds the state, not the handler, so it never keeps a session alive.
        let state = self.state.clone();
        let stop = self.guard.0.clone();
        tokio::spawn(async move {
            let mut current =
                serde_json::to_string(&org_tools(&state, &org_id)).unwrap_or_default();
            loop {
                let changed = tokio::select! {
                    _ = stop.cancelled() => break,
                    c = changes.recv() => c,
                };
                match changed {
                    Ok(id) if id != org_id => continue,
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                }
                let fresh = serde_json::to_string(&org_tools(&state, &org_id)).unwrap_or_default();
                if fresh == current {
                    continue;
                }
                current = fresh;
                if peer.notify_tool_list_changed().await.is_err() {
                    break;
                }
            }
        });
    }
}

impl ServerHandler for PaygateMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("paygate", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Each tool is a paid HTTP API of this organisation. A call is paid in USDC from the \
             organisation's payer wallet, within its daily MCP spending cap.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let org = self.org_of(&context.extensions)?;
        Ok(ListToolsResult {
            tools: org_tools(&self.state, &org),
            ..Default::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let org_id = self.org_of(&context.extensions)?;
        let found = {
            let snap = self.state.table.snapshot();
            let found = snap.orgs().find(|o| *o.org_id == *org_id).and_then(|o| {
                if o.suspended {
                    return Some(Err(()));
                }
                tools::named(o)
                    .into_iter()
                    .find(|(n, _)| *n == request.name)
                    .map(|(_, e)| Ok((o.slug.clone(), e)))
            });
            found
        };
        if let Some(Err(())) = found {
            return Ok(call::tool_error("ORG_SUSPENDED: this organisation is suspended").into());
        }
        let Some(Ok((slug, entry))) = found else {
            return Err(McpError::invalid_params(
                format!("unknown tool {:?}", request.name),
                None,
            ));
        };
        call::call_tool(&self.state, &org_id, &slug, entry, request.arguments)
            .await
            .map(Into::into)
    }

    fn on_initialized(
        &self,
        context: NotificationContext<RoleServer>,
    ) -> impl std::future::Future<Output = ()> + MaybeSendFuture + '_ {
        if let Ok(org) = self.org_of(&context.extensions) {
            self.watch_tools(org, context.peer.clone());
        }
        std::future::ready(())
    }
}

/// Authenticates a Streamable HTTP request and records its organisation for the handler.
async fn authenticate(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    match OrgAuth::from_request_parts(&mut parts, &state).await {
        Ok(auth) => {
            parts.extensions.insert(McpPrincipal {
                org_id: Arc::from(auth.org.id.as_str()),
            });
            next.run(Request::from_parts(parts, body)).await
        }
        Err(e) => e.into_response(),
    }
}

/// The browser origins an MCP endpoint accepts: the gateway's own and those the operator
/// allows (MCP's DNS-rebinding rule); clients that send no Origin are not browsers and pass.
pub(crate) fn allowed_origins(state: &AppState) -> Vec<String> {
    let cfg = &state.config;
    let mut origins = cfg.mcp.allowed_origins.clone();
    if let Ok(u) = url::Url::parse(&cfg.server.public_base_url()) {
        if let (Some(host), Some(port)) = (u.host_str(), u.port_or_known_default()) {
            origins.push(format!("{}://{host}:{port}", u.scheme()));
        }
    }
    origins
}

/// The Streamable HTTP endpoint (`/mcp`), authenticated.
pub(crate) fn streamable_service(state: &AppState) -> axum::routing::MethodRouter<AppState> {
    let cfg = &state.config;
    let origins = allowed_origins(state);
    let mut config = StreamableHttpServerConfig::default()
        // Callers authenticate with an API key; the public Host is the operator's to choose.
        .disable_allowed_hosts()
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_sse_keep_alive(Some(Duration::from_secs(cfg.mcp.keep_alive_seconds)))
        .with_max_request_body_bytes(cfg.server.max_body_bytes);
    config.session_store = Some(Arc::new(sessions::StoredSessions(state.store.clone())));
    let factory_state = state.clone();
    let service: StreamableHttpService<PaygateMcp, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(PaygateMcp::new(factory_state.clone(), None)),
            Arc::new(LocalSessionManager::default()),
            config,
        );
    axum::routing::any_service(service).layer(axum::middleware::from_fn_with_state(
        state.clone(),
        authenticate,
    ))
}
