//! Routes in sled: `routes`, the per-org `route_paths` index and the `idempotency` records,
//! written together in one transaction.

use super::*;

/// Inside a transaction: aborts with the stored record if the idempotency key was used.
fn idem_unused(
    idems: &TransactionalTree,
    idem: Option<&IdempotencyRecord>,
) -> Result<(), ConflictableTransactionError<StoreError>> {
    let Some(rec) = idem else { return Ok(()) };
    match idems.get(key2(&rec.org_id, &rec.key))? {
        Some(prev) => {
            let prev: IdempotencyRecord =
                dec(&prev).map_err(ConflictableTransactionError::Abort)?;
            abort(StoreError::IdempotencyKeyUsed(Box::new(prev)))
        }
        None => Ok(()),
    }
}

#[async_trait]
impl RouteStore for SledStore {
    async fn list_routes(&self, org_id: &str) -> StoreResult<Vec<Route>> {
        self.routes
            .scan_prefix(prefix(org_id))
            .values()
            .map(|v| dec(&v.map_err(backend)?))
            .collect()
    }

    async fn get_route(&self, org_id: &str, route_id: &str) -> StoreResult<Option<Route>> {
        Self::get(&self.routes, &key2(org_id, route_id))
    }

    async fn insert_route(
        &self,
        route: &Route,
        idem: Option<&IdempotencyRecord>,
    ) -> StoreResult<()> {
        let route_bytes = enc(route)?;
        let idem_bytes = idem.map(enc).transpose()?;
        let rkey = key2(&route.org_id, &route.id);
        let pkey = key2(&route.org_id, &route.path);
        (&self.routes, &self.route_paths, &self.idempotency)
            .transaction(|(routes, paths, idems)| {
                idem_unused(idems, idem)?;
                if paths.get(&pkey)?.is_some() {
                    return abort(StoreError::DuplicatePath);
                }
                paths.insert(pkey.as_slice(), route.id.as_bytes())?;
                routes.insert(rkey.as_slice(), route_bytes.as_slice())?;
                if let (Some(rec), Some(b)) = (idem, &idem_bytes) {
                    idems.insert(key2(&rec.org_id, &rec.key), b.as_slice())?;
                }
                Ok(())
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn replace_route(
        &self,
        old: &Route,
        new: &Route,
        idem: Option<&IdempotencyRecord>,
    ) -> StoreResult<()> {
        let new_bytes = enc(new)?;
        let idem_bytes = idem.map(enc).transpose()?;
        let rkey = key2(&old.org_id, &old.id);
        let old_pkey = key2(&old.org_id, &old.path);
        let new_pkey = key2(&new.org_id, &new.path);
        (&self.routes, &self.route_paths, &self.idempotency)
            .transaction(|(routes, paths, idems)| {
                idem_unused(idems, idem)?;
                let Some(current) = routes.get(&rkey)? else {
                    return abort(StoreError::NotFound);
                };
                let current: Route = dec(&current).map_err(ConflictableTransactionError::Abort)?;
                if &current != old {
                    return abort(StoreError::Conflict);
                }
                if new.path != old.path {
                    if paths.get(&new_pkey)?.is_some() {
                        return abort(StoreError::DuplicatePath);
                    }
                    paths.remove(old_pkey.as_slice())?;
                    paths.insert(new_pkey.as_slice(), new.id.as_bytes())?;
                }
                routes.insert(rkey.as_slice(), new_bytes.as_slice())?;
                if let (Some(rec), Some(b)) = (idem, &idem_bytes) {
                    idems.insert(key2(&rec.org_id, &rec.key), b.as_slice())?;
                }
                Ok(())
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn delete_route(&self, org_id: &str, route_id: &str) -> StoreResult<()> {
        let rkey = key2(org_id, route_id);
        (&self.routes, &self.route_paths)
            .transaction(|(routes, paths)| {
                let Some(current) = routes.remove(rkey.as_slice())? else {
                    return abort(StoreError::NotFound);
                };
                let current: Route = dec(&current).map_err(ConflictableTransactionError::Abort)?;
                paths.remove(key2(org_id, &current.path))?;
                Ok(())
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn get_idempotency(
        &self,
        org_id: &str,
        key: &str,
    ) -> StoreResult<Option<IdempotencyRecord>> {
        Self::get(&self.idempotency, &key2(org_id, key))
    }

    async fn put_idempotency(&self, rec: &IdempotencyRecord) -> StoreResult<()> {
        let swapped = self
            .idempotency
            .compare_and_swap(key2(&rec.org_id, &rec.key), None::<&[u8]>, Some(enc(rec)?))
            .map_err(backend)?;
        match swapped {
            Ok(()) => self.durable().await,
            Err(taken) => {
                let prev = taken.current.as_deref().map(dec).transpose()?;
                Err(prev.map_or(StoreError::Conflict, |p| {
                    StoreError::IdempotencyKeyUsed(Box::new(p))
                }))
            }
        }
    }

    async fn purge_idempotency(&self, before_unix: i64) -> StoreResult<usize> {
        let mut removed = 0;
        for item in self.idempotency.iter() {
            let (k, v) = item.map_err(backend)?;
            let rec: IdempotencyRecord = dec(&v)?;
            if rec.created_at_unix < before_unix {
                // Remove only if unchanged since read.
                if self
                    .idempotency
                    .compare_and_swap(&k, Some(v), None::<&[u8]>)
                    .map_err(backend)?
                    .is_ok()
                {
                    removed += 1;
                }
            }
        }
        if removed > 0 {
            self.durable().await?;
        }
        Ok(removed)
    }
}
