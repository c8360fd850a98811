//! Streamable HTTP sessions kept in the store, so a session opened on one node is served by any
//! node of a cluster (rmcp restores it from the client's `initialize` kept here) and survives a
//! restart. Every request still carries its API key; a restored session is bound to the
//! organisation of the request that restores it, as a new one is by its `initialize`.

use paygate_store::Store;
use rmcp::transport::streamable_http_server::session::store::{
    SessionState, SessionStore, SessionStoreError,
};
use std::sync::Arc;

pub(crate) struct StoredSessions(pub Arc<dyn Store>);

#[async_trait::async_trait]
impl SessionStore for StoredSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        match self.0.get_mcp_session(session_id).await? {
            Some(text) => Ok(Some(serde_json::from_str(&text)?)),
            None => Ok(None),
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let text = serde_json::to_string(state)?;
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        Ok(self.0.put_mcp_session(session_id, &text, now).await?)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        Ok(self.0.delete_mcp_session(session_id).await?)
    }
}
