//! A cluster node following the others (PostgreSQL backend): the organisation and route
//! changes they commit, announced by the database, are republished into this node's route
//! table at once; a periodic resync heals a change whose announcement was lost (the listening
//! connection was down) and catches a node up when it (re)subscribes.

use crate::route_table::RouteTable;
use paygate_store::postgres::PgStore;
use paygate_store::Store;
use std::sync::Arc;
use std::time::Duration;

/// Follows the cluster until the task is dropped.
pub async fn follow(table: Arc<RouteTable>, store: Arc<dyn Store>, pg: PgStore, every: Duration) {
    loop {
        let mut changes = match pg.changes().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for other nodes' changes; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        // Whatever was announced before this subscription: read it now.
        resync(&table, store.as_ref()).await;
        let mut tick = tokio::time::interval(every.max(Duration::from_secs(1)));
        tick.tick().await;
        loop {
            tokio::select! {
                change = changes.next() => match change {
                    Ok(Some(c)) => {
                        if let Err(e) = table.resync_org(store.as_ref(), &c.org_id).await {
                            tracing::warn!(org = %c.org_id, error = %e, "applying another node's change");
                        }
                    }
                    // Reconnected: announcements made meanwhile are lost.
                    Ok(None) => resync(&table, store.as_ref()).await,
                    Err(e) => {
                        tracing::warn!(error = %e, "listening for other nodes' changes");
                        break;
                    }
                },
                _ = tick.tick() => resync(&table, store.as_ref()).await,
            }
        }
    }
}

async fn resync(table: &RouteTable, store: &dyn Store) {
    match table.resync(store).await {
        Ok(0) => {}
        Ok(n) => tracing::debug!(orgs = n, "route table resynced"),
        Err(e) => tracing::warn!(error = %e, "route table resync failed"),
    }
}
