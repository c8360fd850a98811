//! The legacy HTTP+SSE transport (SPEC.md 4.4): `GET /mcp/sse` opens the event stream and
//! announces `/mcp/message?sessionId=...` in an `endpoint` event; client messages are `POST`ed
//! there and answered on the stream. rmcp no longer ships this server transport, so each session
//! is a pair of channels handed to rmcp as a sink/stream transport.

use super::hub::Session;
use super::{McpPrincipal, PaygateMcp};
use crate::auth::OrgAuth;
use crate::error::ApiError;
use crate::input::TypedQuery;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use paygate_domain::ErrorCode;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::ServiceExt;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Messages a session buffers in each direction before the sender waits.
const CHANNEL: usize = 64;

/// Removes the session and stops its rmcp service when the event stream is dropped (the client
/// went away or the server is shutting down).
struct Registration {
    state: AppState,
    id: String,
    stop: CancellationToken,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.state.mcp.sessions.lock().remove(&self.id);
        self.stop.cancel();
        tracing::debug!(session = %self.id, "MCP SSE session closed");
    }
}

/// `GET /mcp/sse`: authenticates, then opens the session's event stream.
#[utoipa::path(get, path = "/mcp/sse", tag = "mcp", security(("orgKey" = [])), responses((status = 200, description = "MCP legacy SSE stream: first an `endpoint` event naming /mcp/message?sessionId=..., then `message` events", content_type = "text/event-stream", body = String)))]
pub(crate) async fn open_stream(
    State(state): State<AppState>,
    auth: OrgAuth,
) -> Result<Response, ApiError> {
    let org_id: Arc<str> = Arc::from(auth.org.id.as_str());
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (to_server, from_client) = mpsc::channel::<ClientJsonRpcMessage>(CHANNEL);
    let (to_client, from_server) = mpsc::channel::<ServerJsonRpcMessage>(CHANNEL);
    {
        let mut sessions = state.mcp.sessions.lock();
        let open = sessions.values().filter(|s| s.org_id == org_id).count();
        if open >= state.config.mcp.max_sessions_per_org {
            return Err(ApiError::new(
                ErrorCode::TooManyRequests,
                format!("this organisation already has {open} open MCP sessions; close one first"),
            ));
        }
        sessions.insert(
            id.clone(),
            Session {
                org_id: org_id.clone(),
                to_server,
            },
        );
    }
    let stop = CancellationToken::new();
    let handler = PaygateMcp::new(state.clone(), Some(org_id));
    let service_stop = stop.clone();
    let session = id.clone();
    tokio::spawn(async move {
        match handler
            .serve_with_ct((to_client, from_client), service_stop)
            .await
        {
            Ok(running) => {
                let _ = running.waiting().await;
            }
            Err(e) => tracing::debug!(session = %session, error = %e, "MCP session ended early"),
        }
    });
    tracing::info!(org = %auth.org.slug, session = %id, "MCP SSE session opened");
    let registration = Registration {
        state: state.clone(),
        id: id.clone(),
        stop,
    };
    let endpoint = Event::default()
        .event("endpoint")
        .data(format!("/mcp/message?sessionId={id}"));
    let messages = from_server.map(move |msg| {
        // The stream owns the registration: dropping the stream closes the session.
        let _ = &registration;
        Event::default()
            .event("message")
            .json_data(&msg)
            .or_else(|_| Ok::<_, axum::Error>(Event::default().comment("unserialisable")))
    });
    let stream = futures::stream::once(async move { Ok::<_, axum::Error>(endpoint) })
        .chain(messages.map(|e| e.map_err(axum::Error::new)));
    let keep_alive = KeepAlive::new()
        .interval(Duration::from_secs(state.config.mcp.keep_alive_seconds))
        .text("keep-alive");
    Ok(Sse::new(stream).keep_alive(keep_alive).into_response())
}

#[derive(serde::Deserialize)]
pub(crate) struct MessageQuery {
    #[serde(rename = "sessionId")]
    session_id: Option<String>,
}

/// `POST /mcp/message?sessionId=...`: one client message for an open session of the caller's
/// organisation. `202` once handed to the session; the answer comes on the event stream.
#[utoipa::path(post, path = "/mcp/message", tag = "mcp", security(("orgKey" = [])), params(("sessionId" = String, Query)), request_body(content = Object, description = "A JSON-RPC 2.0 message (MCP)"), responses((status = 202, description = "Handed to the session; the answer comes on its stream"), (status = 404, description = "No such session of this organisation", body = paygate_domain::ErrorBody)))]
pub(crate) async fn post_message(
    State(state): State<AppState>,
    auth: OrgAuth,
    TypedQuery(query): TypedQuery<MessageQuery>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let principal = McpPrincipal {
        org_id: Arc::from(auth.org.id.as_str()),
    };
    let session_id = query.session_id.filter(|s| !s.is_empty()).ok_or_else(|| {
        ApiError::new(
            ErrorCode::BadRequest,
            "sessionId query parameter is required",
        )
    })?;
    // A legacy SSE session lives in the process holding its stream: in a cluster, the load
    // balancer keeps a client's requests on one node (docs/operations.md, "Running a cluster").
    let no_session = || {
        ApiError::new(
            ErrorCode::NotFound,
            "no such MCP session on this node (a legacy SSE session's messages must reach the \
             node holding its stream)",
        )
    };
    let mut sender = {
        let sessions = state.mcp.sessions.lock();
        let s = sessions.get(&session_id).ok_or_else(no_session)?;
        // Another organisation's session is indistinguishable from a missing one.
        if s.org_id != principal.org_id {
            return Err(no_session());
        }
        s.to_server.clone()
    };
    let message: ClientJsonRpcMessage = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            ErrorCode::BadRequest,
            format!("body is not a JSON-RPC message: {e}"),
        )
    })?;
    sender.send(message).await.map_err(|_| no_session())?;
    Ok(StatusCode::ACCEPTED.into_response())
}
