//! Organisations and API keys in sled: `orgs` with the `org_slugs` index, `api_keys`.

use super::*;

#[async_trait]
impl OrgStore for SledStore {
    async fn create_org(&self, org: &Org, key: &ApiKeyRecord) -> StoreResult<()> {
        let org_bytes = enc(org)?;
        let key_bytes = enc(key)?;
        (&self.orgs, &self.org_slugs, &self.api_keys)
            .transaction(|(orgs, slugs, keys)| {
                if slugs.get(org.slug.as_bytes())?.is_some() {
                    return abort(StoreError::DuplicateSlug);
                }
                slugs.insert(org.slug.as_bytes(), org.id.as_bytes())?;
                orgs.insert(org.id.as_bytes(), org_bytes.as_slice())?;
                keys.insert(key.key_id.as_bytes(), key_bytes.as_slice())?;
                Ok(())
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn get_org(&self, id: &str) -> StoreResult<Option<Org>> {
        Self::get(&self.orgs, id.as_bytes())
    }

    async fn get_org_by_slug(&self, slug: &str) -> StoreResult<Option<Org>> {
        match self.org_slugs.get(slug.as_bytes()).map_err(backend)? {
            Some(id) => Self::get(&self.orgs, &id),
            None => Ok(None),
        }
    }

    async fn list_orgs(&self) -> StoreResult<Vec<Org>> {
        self.orgs
            .iter()
            .values()
            .map(|v| dec(&v.map_err(backend)?))
            .collect()
    }

    async fn update_org(&self, org: &Org) -> StoreResult<()> {
        let bytes = enc(org)?;
        (&self.orgs,)
            .transaction(|(orgs,)| {
                if orgs.get(org.id.as_bytes())?.is_none() {
                    return abort(StoreError::NotFound);
                }
                orgs.insert(org.id.as_bytes(), bytes.as_slice())?;
                Ok(())
            })
            .map_err(tx_err)?;
        self.durable().await
    }
}

#[async_trait]
impl KeyStore for SledStore {
    async fn put_api_key(&self, key: &ApiKeyRecord) -> StoreResult<()> {
        self.api_keys
            .insert(key.key_id.as_bytes(), enc(key)?)
            .map_err(backend)?;
        self.durable().await
    }

    async fn get_api_key(&self, key_id: &str) -> StoreResult<Option<ApiKeyRecord>> {
        Self::get(&self.api_keys, key_id.as_bytes())
    }

    async fn list_api_keys(&self, org_id: &str) -> StoreResult<Vec<ApiKeyRecord>> {
        let mut out = Vec::new();
        for v in self.api_keys.iter().values() {
            let k: ApiKeyRecord = dec(&v.map_err(backend)?)?;
            if k.org_id == org_id {
                out.push(k);
            }
        }
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Ok(out)
    }
}
