//! Coordination in PostgreSQL. A lease is a session-level advisory lock held on a connection of
//! its own, taken out of the pool: PostgreSQL releases it when that connection ends, so a node
//! that dies (or loses the database) gives its leases up and another node takes them at its
//! next attempt. MCP sessions are rows.

use super::sql::backend;
use super::PgStore;
use crate::ClusterStore;
use async_trait::async_trait;
use paygate_domain::StoreResult;
use sha2::{Digest, Sha256};

/// The advisory lock key of a lease: the first 8 bytes of its name's SHA-256.
fn lock_key(name: &str) -> i64 {
    let digest = Sha256::digest(format!("paygate lease {name}").as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

impl PgStore {
    async fn try_lease(&self, name: &str) -> StoreResult<bool> {
        let mut conns = self.leases.conns.lock().await;
        if let Some((conn, held)) = conns.get_mut(name) {
            let alive = if *held {
                // Still ours while the connection that holds it is alive.
                sqlx::query("SELECT 1").execute(&mut *conn).await.is_ok()
            } else {
                match sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                    .bind(lock_key(name))
                    .fetch_one(&mut *conn)
                    .await
                {
                    Ok(got) => {
                        *held = got;
                        true
                    }
                    Err(_) => false,
                }
            };
            if alive {
                return Ok(*held);
            }
            // The connection is gone, and with it any lock it held.
            conns.remove(name);
        }
        let mut conn = self.pool.acquire().await.map_err(backend)?.detach();
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(lock_key(name))
            .fetch_one(&mut conn)
            .await
            .map_err(backend)?;
        conns.insert(name.to_string(), (conn, got));
        Ok(got)
    }
}

#[async_trait]
impl ClusterStore for PgStore {
    async fn hold_lease(&self, name: &str) -> StoreResult<bool> {
        let result = self.try_lease(name).await;
        if let Ok(mut held) = self.leases.held.lock() {
            held.retain(|n| n != name);
            if matches!(result, Ok(true)) {
                held.push(name.to_string());
                held.sort();
            }
        }
        result
    }

    async fn beat(&self, now_unix: i64, stale_secs: i64) -> StoreResult<usize> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        sqlx::query(
            "INSERT INTO cluster_nodes (node, seen_unix) VALUES ($1, $2) \
             ON CONFLICT (node) DO UPDATE SET seen_unix = EXCLUDED.seen_unix",
        )
        .bind(&self.node)
        .bind(now_unix)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        // Nodes gone for ten windows are forgotten.
        sqlx::query("DELETE FROM cluster_nodes WHERE seen_unix < $1")
            .bind(now_unix - 10 * stale_secs)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        let live: i64 =
            sqlx::query_scalar("SELECT count(*) FROM cluster_nodes WHERE seen_unix >= $1")
                .bind(now_unix - stale_secs)
                .fetch_one(&mut *tx)
                .await
                .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        Ok(usize::try_from(live).unwrap_or(1).max(1))
    }

    fn leases_held(&self) -> Vec<String> {
        self.leases
            .held
            .lock()
            .map(|h| h.clone())
            .unwrap_or_default()
    }

    async fn put_mcp_session(&self, id: &str, state: &str, created_unix: i64) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO mcp_sessions (id, state, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state",
        )
        .bind(id)
        .bind(state)
        .bind(created_unix)
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn get_mcp_session(&self, id: &str) -> StoreResult<Option<String>> {
        sqlx::query_scalar("SELECT state FROM mcp_sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)
    }

    async fn delete_mcp_session(&self, id: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM mcp_sessions WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn purge_mcp_sessions(&self, before_unix: i64) -> StoreResult<usize> {
        let done = sqlx::query("DELETE FROM mcp_sessions WHERE created_at < $1")
            .bind(before_unix)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(usize::try_from(done.rows_affected()).unwrap_or(usize::MAX))
    }
}
