//! Coordination on sled: one process opens the database (sled locks it), so it holds every
//! lease; MCP sessions are kept in a tree so they survive a restart.

use super::*;
use crate::traits::ClusterStore;

#[derive(Serialize, serde::Deserialize)]
struct KeptSession {
    state: String,
    created: i64,
}

#[async_trait]
impl ClusterStore for SledStore {
    async fn hold_lease(&self, name: &str) -> StoreResult<bool> {
        if let Ok(mut held) = self.leases.lock() {
            held.insert(name.to_string());
        }
        Ok(true)
    }

    async fn beat(&self, _now_unix: i64, _stale_secs: i64) -> StoreResult<usize> {
        Ok(1)
    }

    fn leases_held(&self) -> Vec<String> {
        self.leases
            .lock()
            .map(|h| h.iter().cloned().collect())
            .unwrap_or_default()
    }

    async fn put_mcp_session(&self, id: &str, state: &str, created_unix: i64) -> StoreResult<()> {
        let kept = KeptSession {
            state: state.to_string(),
            created: created_unix,
        };
        self.mcp_sessions
            .insert(id.as_bytes(), enc(&kept)?)
            .map_err(backend)?;
        self.durable().await
    }

    async fn get_mcp_session(&self, id: &str) -> StoreResult<Option<String>> {
        Ok(Self::get::<KeptSession>(&self.mcp_sessions, id.as_bytes())?.map(|k| k.state))
    }

    async fn delete_mcp_session(&self, id: &str) -> StoreResult<()> {
        self.mcp_sessions.remove(id.as_bytes()).map_err(backend)?;
        Ok(())
    }

    async fn purge_mcp_sessions(&self, before_unix: i64) -> StoreResult<usize> {
        let mut removed = 0;
        for kv in self.mcp_sessions.iter() {
            let (id, v) = kv.map_err(backend)?;
            let old = dec::<KeptSession>(&v).map_or(true, |k| k.created < before_unix);
            if old {
                self.mcp_sessions.remove(id).map_err(backend)?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}
