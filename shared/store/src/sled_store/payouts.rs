//! Corridor records in sled: corridors (one per org and currency), quotes (single-use), payouts,
//! their idempotency keys, the provider-id index, processed webhook events and events that
//! arrived before their payout was known. Every multi-record step is one sled transaction,
//! flushed before it returns.

use super::{
    abort, backend, build_index, dec, enc, key2, open_key, open_records, prefix, prefix_end,
    put_tracked, tx_err, PayoutTrees, SledStore,
};
use async_trait::async_trait;
use paygate_domain::{StoreError, StoreResult};
use paygate_payouts::store::{BeginPayout, EventOutcome, PayoutStore};
use paygate_payouts::webhook::ProviderEvent;
use paygate_payouts::{Corridor, PayIdempotency, Payout, PayoutStatus, Quote};
use sled::transaction::Transactional;

impl PayoutTrees {
    pub(super) fn open(db: &sled::Db) -> StoreResult<Self> {
        let tree = |n: &str| db.open_tree(n).map_err(backend);
        Ok(Self {
            corridors: tree("corridors")?,
            corridor_index: tree("corridor_index")?,
            quotes: tree("quotes")?,
            payouts: tree("payouts")?,
            initiating: tree("payouts_initiating")?,
            pay_keys: tree("pay_keys")?,
            cpn_index: tree("cpn_index")?,
            events: tree("payout_events")?,
            orphans: tree("payout_orphans")?,
            by_corridor: tree("payouts_by_corridor")?,
        })
    }

    pub(super) fn build_indexes(&self, db: &sled::Db) -> StoreResult<()> {
        build_index(
            db,
            &self.payouts,
            &self.initiating,
            "payouts_initiating.v1",
            open_key(is_initiating),
        )?;
        build_index(
            db,
            &self.payouts,
            &self.by_corridor,
            "payouts_by_corridor.v1",
            |_, p: &Payout| vec![key2(&p.corridor_id, &p.id)],
        )
    }
}

/// A payout the provider has not confirmed yet: what payout reconciliation drives.
fn is_initiating(p: &Payout) -> bool {
    p.status == PayoutStatus::Initiating
}

/// Inside a transaction: stores a payout and keeps the `Initiating` index in step.
fn put_payout(
    payouts: &sled::transaction::TransactionalTree,
    initiating: &sled::transaction::TransactionalTree,
    payout: &Payout,
    bytes: &[u8],
) -> Result<(), sled::transaction::ConflictableTransactionError<StoreError>> {
    put_tracked(
        payouts,
        initiating,
        payout.id.as_bytes(),
        bytes,
        is_initiating(payout),
    )
}

fn corridor_key(org: &str, currency: &str) -> Vec<u8> {
    key2(org, currency)
}

#[async_trait]
impl PayoutStore for SledStore {
    async fn create_corridor(&self, c: &Corridor) -> StoreResult<(Corridor, bool)> {
        let t = &self.corridors;
        let bytes = enc(c)?;
        let idx = corridor_key(&c.org_id, c.dest_currency.code());
        let out = (&t.corridors, &t.corridor_index)
            .transaction(|(corridors, index)| {
                if let Some(id) = index.get(&idx)? {
                    let existing = corridors.get(&id)?.ok_or_else(|| {
                        sled::transaction::ConflictableTransactionError::Abort(StoreError::Backend(
                            "corridor index points nowhere".into(),
                        ))
                    })?;
                    let existing: Corridor = dec(&existing)
                        .map_err(sled::transaction::ConflictableTransactionError::Abort)?;
                    return Ok((existing, false));
                }
                index.insert(idx.clone(), c.id.as_bytes())?;
                corridors.insert(c.id.as_bytes(), bytes.clone())?;
                Ok((c.clone(), true))
            })
            .map_err(tx_err)?;
        self.durable().await?;
        Ok(out)
    }

    async fn get_corridor(&self, id: &str) -> StoreResult<Option<Corridor>> {
        Self::get(&self.corridors.corridors, id.as_bytes())
    }

    async fn list_corridors(&self, org_id: &str) -> StoreResult<Vec<Corridor>> {
        let mut out = Vec::new();
        for kv in self.corridors.corridor_index.scan_prefix(prefix(org_id)) {
            let (_, id) = kv.map_err(backend)?;
            if let Some(c) = Self::get::<Corridor>(&self.corridors.corridors, &id)? {
                out.push(c);
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    async fn list_payouts(
        &self,
        corridor_id: &str,
        before_id: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<Payout>> {
        let start = prefix(corridor_id);
        let end = match before_id {
            Some(b) => key2(corridor_id, b),
            None => prefix_end(prefix(corridor_id)),
        };
        let mut out = Vec::new();
        for kv in self
            .corridors
            .by_corridor
            .range(start..end)
            .rev()
            .take(limit)
        {
            let (k, _) = kv.map_err(backend)?;
            let id = &k[corridor_id.len() + 1..];
            if let Some(p) = Self::get::<Payout>(&self.corridors.payouts, id)? {
                out.push(p);
            }
        }
        Ok(out)
    }

    async fn update_corridor(&self, c: &Corridor) -> StoreResult<()> {
        self.corridors
            .corridors
            .insert(c.id.as_bytes(), enc(c)?)
            .map_err(backend)?;
        self.durable().await
    }

    async fn put_quote(&self, q: &Quote) -> StoreResult<()> {
        self.corridors
            .quotes
            .insert(q.id.as_bytes(), enc(q)?)
            .map_err(backend)?;
        self.durable().await
    }

    async fn get_quote(&self, id: &str) -> StoreResult<Option<Quote>> {
        Self::get(&self.corridors.quotes, id.as_bytes())
    }

    async fn get_pay_key(&self, org_id: &str, key: &str) -> StoreResult<Option<PayIdempotency>> {
        Self::get(&self.corridors.pay_keys, &key2(org_id, key))
    }

    async fn begin_payout(
        &self,
        key: &PayIdempotency,
        payout: &Payout,
    ) -> StoreResult<BeginPayout> {
        let t = &self.corridors;
        let kk = key2(&key.org_id, &key.key);
        let key_bytes = enc(key)?;
        let payout_bytes = enc(payout)?;
        let trees = (
            &t.pay_keys,
            &t.quotes,
            &t.payouts,
            &t.initiating,
            &t.by_corridor,
        );
        let out = trees
            .transaction(|(keys, quotes, payouts, initiating, by_corridor)| {
                if let Some(prev) = keys.get(&kk)? {
                    let prev: PayIdempotency = dec(&prev)
                        .map_err(sled::transaction::ConflictableTransactionError::Abort)?;
                    return Ok(BeginPayout::KeyUsed(Box::new(prev)));
                }
                let Some(q) = quotes.get(payout.quote_id.as_bytes())? else {
                    return abort(StoreError::NotFound);
                };
                let mut q: Quote =
                    dec(&q).map_err(sled::transaction::ConflictableTransactionError::Abort)?;
                if q.used_by.is_some() {
                    return Ok(BeginPayout::QuoteUsed);
                }
                q.used_by = Some(payout.id.clone());
                let q = enc(&q).map_err(sled::transaction::ConflictableTransactionError::Abort)?;
                quotes.insert(payout.quote_id.as_bytes(), q)?;
                keys.insert(kk.clone(), key_bytes.clone())?;
                put_payout(payouts, initiating, payout, &payout_bytes)?;
                by_corridor.insert(key2(&payout.corridor_id, &payout.id), &[][..])?;
                Ok(BeginPayout::Started)
            })
            .map_err(tx_err)?;
        if out == BeginPayout::Started {
            self.durable().await?;
        }
        Ok(out)
    }

    async fn accept_payout(&self, payout: &Payout, response: &str) -> StoreResult<()> {
        let t = &self.corridors;
        let Some(cpn) = payout.cpn_payment_id.clone() else {
            return Err(StoreError::Backend(
                "accepted payout without provider id".into(),
            ));
        };
        let kk = key2(&payout.org_id, &payout.idempotency_key);
        let payout_bytes = enc(payout)?;
        (&t.pay_keys, &t.payouts, &t.initiating, &t.cpn_index)
            .transaction(|(keys, payouts, initiating, index)| {
                if let Some(k) = keys.get(&kk)? {
                    let mut k: PayIdempotency =
                        dec(&k).map_err(sled::transaction::ConflictableTransactionError::Abort)?;
                    if k.payment_id == payout.id {
                        k.response = Some(response.to_string());
                        let k = enc(&k)
                            .map_err(sled::transaction::ConflictableTransactionError::Abort)?;
                        keys.insert(kk.clone(), k)?;
                    }
                }
                put_payout(payouts, initiating, payout, &payout_bytes)?;
                index.insert(cpn.as_bytes(), payout.id.as_bytes())?;
                Ok(())
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn refuse_payout(&self, payout: &Payout) -> StoreResult<()> {
        let t = &self.corridors;
        let kk = key2(&payout.org_id, &payout.idempotency_key);
        let payout_bytes = enc(payout)?;
        (&t.pay_keys, &t.payouts, &t.initiating)
            .transaction(|(keys, payouts, initiating)| {
                if let Some(k) = keys.get(&kk)? {
                    let k: PayIdempotency =
                        dec(&k).map_err(sled::transaction::ConflictableTransactionError::Abort)?;
                    if k.payment_id == payout.id {
                        keys.remove(kk.clone())?;
                    }
                }
                put_payout(payouts, initiating, payout, &payout_bytes)
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn get_payout(&self, id: &str) -> StoreResult<Option<Payout>> {
        Self::get(&self.corridors.payouts, id.as_bytes())
    }

    async fn initiating_payouts(&self) -> StoreResult<Vec<Payout>> {
        open_records(
            &self.corridors.payouts,
            &self.corridors.initiating,
            is_initiating,
        )
    }

    async fn apply_payout_event(
        &self,
        event_key: &str,
        event: &ProviderEvent,
        raw: &[u8],
        received_at: &str,
    ) -> StoreResult<EventOutcome> {
        let t = &self.corridors;
        let cpn = event.payment_id.as_str();
        let out = (
            &t.events,
            &t.cpn_index,
            &t.payouts,
            &t.initiating,
            &t.orphans,
        )
            .transaction(|(events, index, payouts, initiating, orphans)| {
                if events.get(event_key.as_bytes())?.is_some() {
                    return Ok(EventOutcome::Duplicate);
                }
                let Some(id) = index.get(cpn.as_bytes())? else {
                    let mut k = prefix(cpn);
                    k.extend_from_slice(event_key.as_bytes());
                    orphans.insert(k, raw)?;
                    return Ok(EventOutcome::Orphaned);
                };
                let Some(p) = payouts.get(&id)? else {
                    return abort(StoreError::Backend("provider index points nowhere".into()));
                };
                let mut p: Payout =
                    dec(&p).map_err(sled::transaction::ConflictableTransactionError::Abort)?;
                events.insert(event_key.as_bytes(), received_at.as_bytes())?;
                let Some(next) = p.apply_event(event, received_at) else {
                    return Ok(EventOutcome::Ignored(p.status));
                };
                let bytes =
                    enc(&p).map_err(sled::transaction::ConflictableTransactionError::Abort)?;
                put_payout(payouts, initiating, &p, &bytes)?;
                Ok(EventOutcome::Applied(next, Box::new(p)))
            })
            .map_err(tx_err)?;
        if out != EventOutcome::Duplicate {
            self.durable().await?;
        }
        Ok(out)
    }

    async fn adoptable_orphans(&self) -> StoreResult<Vec<(String, String, Vec<u8>)>> {
        let mut out = Vec::new();
        for kv in self.corridors.orphans.iter() {
            let (k, v) = kv.map_err(backend)?;
            let Some(pos) = k.iter().position(|b| *b == 0) else {
                continue;
            };
            let cpn = String::from_utf8_lossy(&k[..pos]).into_owned();
            let key = String::from_utf8_lossy(&k[pos + 1..]).into_owned();
            if self
                .corridors
                .cpn_index
                .contains_key(cpn.as_bytes())
                .map_err(backend)?
            {
                out.push((cpn, key, v.to_vec()));
            }
        }
        Ok(out)
    }

    async fn drop_orphan(&self, cpn_id: &str, event_key: &str) -> StoreResult<()> {
        let mut k = prefix(cpn_id);
        k.extend_from_slice(event_key.as_bytes());
        self.corridors.orphans.remove(k).map_err(backend)?;
        self.durable().await
    }
}
