//! Gateway payments in sled: `payments`, the `nonces` replay guard, the `payments_open`
//! index of payments reconciliation still has to decide, and `payments_ledger`, the ledger's
//! indexes (by organisation; by organisation and route, payer or status), each key ending in
//! the time-ordered payment id so a page is one reverse range scan.

use super::*;
use crate::traits::{PaymentGuard, PaymentQuery};
use paygate_domain::model::{PaymentIdRecord, PaymentStatus};

/// Inside a transaction: writes `p` and its indexes (open, ledger); a status change moves its
/// status key.
fn put_payment(
    (payments, open, ledger): (&TransactionalTree, &TransactionalTree, &TransactionalTree),
    p: &GatewayPayment,
    bytes: &[u8],
) -> Result<(), ConflictableTransactionError<StoreError>> {
    // Only the old status is read (this runs on every settlement): its key moves.
    #[derive(serde::Deserialize)]
    struct Status {
        status: PaymentStatus,
    }
    if let Some(old) = payments.get(p.id.as_bytes())? {
        let old: Status = dec(&old).map_err(ConflictableTransactionError::Abort)?;
        if old.status != p.status {
            let key = ledger_prefix(&p.org_id, Some(("s", old.status.as_str())), &p.id);
            ledger.remove(key)?;
        }
    }
    for k in ledger_keys(p) {
        ledger.insert(k, &[][..])?;
    }
    put_tracked(payments, open, p.id.as_bytes(), bytes, p.status.is_open())
}

#[async_trait]
impl PaymentStore for SledStore {
    async fn reserve_payment(&self, payment: &GatewayPayment) -> StoreResult<PaymentReservation> {
        let bytes = enc(payment)?;
        let id = payment.id.as_bytes();
        let trees = (
            &self.nonces,
            &self.payments,
            &self.payments_open,
            &self.payments_ledger,
            &self.plan_usage,
        );
        let outcome = trees
            .transaction(|(nonces, payments, open, ledger, usage)| {
                if let Some(holder) = nonces.get(payment.nonce_key.as_bytes())? {
                    let Some(held) = payments.get(&holder)? else {
                        return abort(StoreError::Backend(format!(
                            "nonce {} held by a missing payment",
                            payment.nonce_key
                        )));
                    };
                    let held = dec(&held).map_err(ConflictableTransactionError::Abort)?;
                    return Ok(PaymentReservation::Held(Box::new(held)));
                }
                if let Some(slot) = &payment.plan_slot {
                    // The plan slot the record names, in the same transaction.
                    let key = key2(&payment.org_id, &slot.month);
                    let used: u64 = match usage.get(&key)? {
                        Some(b) => dec(&b).map_err(ConflictableTransactionError::Abort)?,
                        None => 0,
                    };
                    if slot.limit > 0 && used >= slot.limit {
                        return Ok(PaymentReservation::OverPlan);
                    }
                    usage.insert(
                        key,
                        enc(&(used + 1)).map_err(ConflictableTransactionError::Abort)?,
                    )?;
                }
                nonces.insert(payment.nonce_key.as_bytes(), id)?;
                put_payment((payments, open, ledger), payment, &bytes)?;
                Ok(PaymentReservation::Reserved)
            })
            .map_err(tx_err)?;
        if outcome == PaymentReservation::Reserved {
            self.durable().await?;
        }
        Ok(outcome)
    }

    async fn update_payment(&self, payment: &GatewayPayment) -> StoreResult<()> {
        let bytes = enc(payment)?;
        (&self.payments, &self.payments_open, &self.payments_ledger)
            .transaction(|(payments, open, ledger)| {
                put_payment((payments, open, ledger), payment, &bytes)
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn write_payment_if(
        &self,
        payment: &GatewayPayment,
        guard: PaymentGuard<'_>,
    ) -> StoreResult<bool> {
        let bytes = enc(payment)?;
        let id = payment.id.as_bytes();
        let written = (&self.payments, &self.payments_open, &self.payments_ledger)
            .transaction(|(payments, open, ledger)| {
                let holds = match payments.get(id)? {
                    Some(v) => dec::<GatewayPayment>(&v)
                        .map(|p| guard.holds(&p))
                        .or_else(abort)?,
                    None => false,
                };
                if !holds {
                    return Ok(false);
                }
                put_payment((payments, open, ledger), payment, &bytes)?;
                Ok(true)
            })
            .map_err(tx_err)?;
        if written {
            self.durable().await?;
        }
        Ok(written)
    }

    async fn release_payment(&self, payment: &GatewayPayment) -> StoreResult<()> {
        let bytes = enc(payment)?;
        let id = payment.id.as_bytes();
        let trees = (
            &self.nonces,
            &self.payments,
            &self.payments_open,
            &self.payments_ledger,
        );
        trees
            .transaction(|(nonces, payments, open, ledger)| {
                if nonces.get(payment.nonce_key.as_bytes())?.as_deref() == Some(id) {
                    nonces.remove(payment.nonce_key.as_bytes())?;
                }
                put_payment((payments, open, ledger), payment, &bytes)
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn get_payment(&self, id: &str) -> StoreResult<Option<GatewayPayment>> {
        Self::get(&self.payments, id.as_bytes())
    }

    async fn payment_for_nonce(&self, nonce_key: &str) -> StoreResult<Option<GatewayPayment>> {
        match self.nonces.get(nonce_key.as_bytes()).map_err(backend)? {
            Some(id) => Self::get(&self.payments, &id),
            None => Ok(None),
        }
    }

    async fn claim_redemption(
        &self,
        id: &str,
        retry: &GatewayPayment,
        at: &str,
    ) -> StoreResult<Option<GatewayPayment>> {
        let claimed = self
            .payments
            .transaction(|payments| {
                let Some(bytes) = payments.get(id.as_bytes())? else {
                    return Ok(None);
                };
                let mut p: GatewayPayment =
                    dec(&bytes).map_err(ConflictableTransactionError::Abort)?;
                if !p.redeemable_by(retry) {
                    return Ok(None);
                }
                p.redeemed_at = Some(at.to_string());
                p.updated_at = at.to_string();
                let bytes = enc(&p).map_err(ConflictableTransactionError::Abort)?;
                payments.insert(id.as_bytes(), bytes)?;
                Ok(Some(p))
            })
            .map_err(tx_err)?;
        if claimed.is_some() {
            self.durable().await?;
        }
        Ok(claimed)
    }

    async fn unfinished_payments(&self) -> StoreResult<Vec<GatewayPayment>> {
        open_records(&self.payments, &self.payments_open, |p: &GatewayPayment| {
            p.status.is_open()
        })
    }

    async fn list_payments(
        &self,
        org_id: &str,
        q: &PaymentQuery,
    ) -> StoreResult<Vec<GatewayPayment>> {
        // The most selective index the query names; the other filters are checked per record.
        let payer = q.payer.as_ref().map(|a| a.to_ascii_lowercase());
        let by = if let Some(r) = &q.route_id {
            Some(("r", r.as_str()))
        } else if let Some(a) = &payer {
            Some(("p", a.as_str()))
        } else {
            q.status.map(|s| ("s", s.as_str()))
        };
        let start = ledger_prefix(org_id, by, q.from_id.as_deref().unwrap_or(""));
        let end = match &q.before_id {
            Some(b) => ledger_prefix(org_id, by, b),
            None => prefix_end(ledger_prefix(org_id, by, "")),
        };
        let mut out = Vec::new();
        if start >= end {
            return Ok(out);
        }
        for kv in self.payments_ledger.range(start..end).rev() {
            if out.len() >= q.limit {
                break;
            }
            let (k, _) = kv.map_err(backend)?;
            let id = k.rsplit(|b| *b == 0).next().unwrap_or_default();
            if let Some(p) = Self::get::<GatewayPayment>(&self.payments, id)? {
                if q.admits(&p) {
                    out.push(p);
                }
            }
        }
        Ok(out)
    }

    async fn claim_payment_id(
        &self,
        rec: &PaymentIdRecord,
        stale_before_unix: i64,
    ) -> StoreResult<Option<PaymentIdRecord>> {
        let key = key2(&rec.org_id, &rec.key);
        let bytes = enc(rec)?;
        loop {
            let current = self.payment_ids.get(&key).map_err(backend)?;
            if let Some(v) = &current {
                let held: PaymentIdRecord = dec(v)?;
                if held.created_at_unix >= stale_before_unix {
                    return Ok(Some(held));
                }
            }
            let swapped = self
                .payment_ids
                .compare_and_swap(&key, current, Some(bytes.as_slice()))
                .map_err(backend)?;
            if swapped.is_ok() {
                self.durable().await?;
                return Ok(None);
            }
        }
    }

    async fn put_payment_id(&self, rec: &PaymentIdRecord) -> StoreResult<()> {
        self.payment_ids
            .insert(key2(&rec.org_id, &rec.key), enc(rec)?)
            .map_err(backend)?;
        self.durable().await
    }

    async fn purge_payment_ids(&self, before_unix: i64) -> StoreResult<usize> {
        let mut removed = 0;
        for kv in self.payment_ids.iter() {
            let (k, v) = kv.map_err(backend)?;
            let old = dec::<PaymentIdRecord>(&v).map_or(true, |r| r.created_at_unix < before_unix);
            if old
                && self
                    .payment_ids
                    .compare_and_swap(&k, Some(v), None::<&[u8]>)
                    .map_err(backend)?
                    .is_ok()
            {
                removed += 1;
            }
        }
        Ok(removed)
    }
}
