//! Process-wide MCP state, apart from the handlers: the open legacy SSE sessions and the HTTP
//! client tool calls use.

use futures::channel::mpsc;
use rmcp::model::ClientJsonRpcMessage;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

pub(super) struct Session {
    pub(super) org_id: Arc<str>,
    pub(super) to_server: mpsc::Sender<ClientJsonRpcMessage>,
}

/// Open SSE sessions by id.
#[derive(Default)]
pub struct Sessions(Mutex<HashMap<String, Session>>);

impl Sessions {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Process-wide MCP state: open SSE sessions and the HTTP client tool calls use.
#[derive(Default)]
pub struct McpHub {
    pub(super) sessions: Sessions,
    http: OnceLock<reqwest::Client>,
}

impl McpHub {
    pub(super) fn http(&self) -> &reqwest::Client {
        self.http.get_or_init(|| {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .build()
                .unwrap_or_default()
        })
    }

    /// Open legacy SSE sessions (all organisations).
    pub fn open_sessions(&self) -> usize {
        self.sessions.len()
    }
}
