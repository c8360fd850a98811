//! Routes in PostgreSQL: `routes` (unique path per organisation) and the `idempotency` records,
//! written in one transaction.

use super::sql::{backend, doc, json, violates};
use super::{announce, PgStore};
use crate::RouteStore;
use async_trait::async_trait;
use paygate_domain::model::{IdempotencyRecord, Route};
use paygate_domain::{StoreError, StoreResult};
use sqlx::{Postgres, Transaction};

fn path_taken(e: sqlx::Error) -> StoreError {
    if violates(&e, "routes_path_unique") {
        StoreError::DuplicatePath
    } else {
        backend(e)
    }
}

/// Inside `tx`: records `idem`, or fails with the record already stored under its key. A
/// concurrent transaction holding the same key makes this wait for its outcome.
async fn claim_idempotency(
    tx: &mut Transaction<'_, Postgres>,
    idem: Option<&IdempotencyRecord>,
) -> StoreResult<()> {
    let Some(rec) = idem else { return Ok(()) };
    let inserted = sqlx::query(
        "INSERT INTO idempotency (org_id, key, created_at_unix, doc) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (org_id, key) DO NOTHING",
    )
    .bind(&rec.org_id)
    .bind(&rec.key)
    .bind(rec.created_at_unix)
    .bind(json(rec)?)
    .execute(&mut **tx)
    .await
    .map_err(backend)?;
    if inserted.rows_affected() == 1 {
        return Ok(());
    }
    let row = sqlx::query("SELECT doc FROM idempotency WHERE org_id = $1 AND key = $2")
        .bind(&rec.org_id)
        .bind(&rec.key)
        .fetch_one(&mut **tx)
        .await
        .map_err(backend)?;
    Err(StoreError::IdempotencyKeyUsed(Box::new(doc(&row)?)))
}

#[async_trait]
impl RouteStore for PgStore {
    async fn list_routes(&self, org_id: &str) -> StoreResult<Vec<Route>> {
        self.all(sqlx::query("SELECT doc FROM routes WHERE org_id = $1 ORDER BY id").bind(org_id))
            .await
    }

    async fn get_route(&self, org_id: &str, route_id: &str) -> StoreResult<Option<Route>> {
        self.one(
            sqlx::query("SELECT doc FROM routes WHERE org_id = $1 AND id = $2")
                .bind(org_id)
                .bind(route_id),
        )
        .await
    }

    async fn insert_route(
        &self,
        route: &Route,
        idem: Option<&IdempotencyRecord>,
    ) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        claim_idempotency(&mut tx, idem).await?;
        sqlx::query("INSERT INTO routes (org_id, id, path, doc) VALUES ($1, $2, $3, $4)")
            .bind(&route.org_id)
            .bind(&route.id)
            .bind(&route.path)
            .bind(json(route)?)
            .execute(&mut *tx)
            .await
            .map_err(path_taken)?;
        announce(&mut tx, &self.node, &route.org_id, Some(&route.id)).await?;
        tx.commit().await.map_err(backend)
    }

    async fn replace_route(
        &self,
        old: &Route,
        new: &Route,
        idem: Option<&IdempotencyRecord>,
    ) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        claim_idempotency(&mut tx, idem).await?;
        let current =
            sqlx::query("SELECT doc FROM routes WHERE org_id = $1 AND id = $2 FOR UPDATE")
                .bind(&old.org_id)
                .bind(&old.id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?
                .ok_or(StoreError::NotFound)?;
        if &doc::<Route>(&current)? != old {
            return Err(StoreError::Conflict);
        }
        sqlx::query("UPDATE routes SET path = $3, doc = $4 WHERE org_id = $1 AND id = $2")
            .bind(&old.org_id)
            .bind(&old.id)
            .bind(&new.path)
            .bind(json(new)?)
            .execute(&mut *tx)
            .await
            .map_err(path_taken)?;
        announce(&mut tx, &self.node, &old.org_id, Some(&old.id)).await?;
        tx.commit().await.map_err(backend)
    }

    async fn delete_route(&self, org_id: &str, route_id: &str) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let done = sqlx::query("DELETE FROM routes WHERE org_id = $1 AND id = $2")
            .bind(org_id)
            .bind(route_id)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        announce(&mut tx, &self.node, org_id, Some(route_id)).await?;
        tx.commit().await.map_err(backend)
    }

    async fn put_idempotency(&self, rec: &IdempotencyRecord) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        claim_idempotency(&mut tx, Some(rec)).await?;
        tx.commit().await.map_err(backend)
    }

    async fn get_idempotency(
        &self,
        org_id: &str,
        key: &str,
    ) -> StoreResult<Option<IdempotencyRecord>> {
        self.one(
            sqlx::query("SELECT doc FROM idempotency WHERE org_id = $1 AND key = $2")
                .bind(org_id)
                .bind(key),
        )
        .await
    }

    async fn purge_idempotency(&self, before_unix: i64) -> StoreResult<usize> {
        let done = sqlx::query("DELETE FROM idempotency WHERE created_at_unix < $1")
            .bind(before_unix)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(usize::try_from(done.rows_affected()).unwrap_or(usize::MAX))
    }
}
