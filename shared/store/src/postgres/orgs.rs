//! Organisations and API keys in PostgreSQL: `orgs` (unique slug) and `api_keys`.

use super::sql::{backend, doc, json, violates};
use super::{announce, PgStore};
use crate::{KeyStore, OrgStore};
use async_trait::async_trait;
use paygate_domain::model::{ApiKeyRecord, Org};
use paygate_domain::{StoreError, StoreResult};

#[async_trait]
impl OrgStore for PgStore {
    async fn create_org(&self, org: &Org, key: &ApiKeyRecord) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        sqlx::query("INSERT INTO orgs (id, slug, doc) VALUES ($1, $2, $3)")
            .bind(&org.id)
            .bind(&org.slug)
            .bind(json(org)?)
            .execute(&mut *tx)
            .await
            .map_err(|e| {
                if violates(&e, "orgs_slug_key") {
                    StoreError::DuplicateSlug
                } else {
                    backend(e)
                }
            })?;
        sqlx::query("INSERT INTO api_keys (key_id, org_id, doc) VALUES ($1, $2, $3)")
            .bind(&key.key_id)
            .bind(&key.org_id)
            .bind(json(key)?)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        announce(&mut tx, &self.node, &org.id, None).await?;
        tx.commit().await.map_err(backend)
    }

    async fn get_org(&self, id: &str) -> StoreResult<Option<Org>> {
        self.one(sqlx::query("SELECT doc FROM orgs WHERE id = $1").bind(id))
            .await
    }

    async fn get_org_by_slug(&self, slug: &str) -> StoreResult<Option<Org>> {
        self.one(sqlx::query("SELECT doc FROM orgs WHERE slug = $1").bind(slug))
            .await
    }

    async fn list_orgs(&self) -> StoreResult<Vec<Org>> {
        self.all(sqlx::query("SELECT doc FROM orgs ORDER BY id"))
            .await
    }

    async fn update_org(&self, org: &Org) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let done = sqlx::query("UPDATE orgs SET doc = $2 WHERE id = $1")
            .bind(&org.id)
            .bind(json(org)?)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        announce(&mut tx, &self.node, &org.id, None).await?;
        tx.commit().await.map_err(backend)
    }
}

#[async_trait]
impl KeyStore for PgStore {
    async fn put_api_key(&self, key: &ApiKeyRecord) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO api_keys (key_id, org_id, doc) VALUES ($1, $2, $3) \
             ON CONFLICT (key_id) DO UPDATE SET org_id = EXCLUDED.org_id, doc = EXCLUDED.doc",
        )
        .bind(&key.key_id)
        .bind(&key.org_id)
        .bind(json(key)?)
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn get_api_key(&self, key_id: &str) -> StoreResult<Option<ApiKeyRecord>> {
        self.one(sqlx::query("SELECT doc FROM api_keys WHERE key_id = $1").bind(key_id))
            .await
    }

    async fn list_api_keys(&self, org_id: &str) -> StoreResult<Vec<ApiKeyRecord>> {
        sqlx::query(
            "SELECT doc FROM api_keys WHERE org_id = $1 ORDER BY (doc::json)->>'createdAt', key_id",
        )
        .bind(org_id)
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?
        .iter()
        .map(doc)
        .collect()
    }
}
