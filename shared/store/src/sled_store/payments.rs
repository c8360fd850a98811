//! Gateway payments in sled: `payments`, the `nonces` replay guard and the `payments_open`
//! index of payments reconciliation still has to decide.

use super::*;

#[async_trait]
impl PaymentStore for SledStore {
    async fn reserve_payment(&self, payment: &GatewayPayment) -> StoreResult<PaymentReservation> {
        let bytes = enc(payment)?;
        let id = payment.id.as_bytes();
        let outcome = (&self.nonces, &self.payments, &self.payments_open)
            .transaction(|(nonces, payments, open)| {
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
                nonces.insert(payment.nonce_key.as_bytes(), id)?;
                put_tracked(payments, open, id, &bytes, payment.status.is_open())?;
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
        (&self.payments, &self.payments_open)
            .transaction(|(payments, open)| {
                put_tracked(
                    payments,
                    open,
                    payment.id.as_bytes(),
                    &bytes,
                    payment.status.is_open(),
                )
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn decide_open_payment(&self, payment: &GatewayPayment) -> StoreResult<bool> {
        let bytes = enc(payment)?;
        let id = payment.id.as_bytes();
        let written = (&self.payments, &self.payments_open)
            .transaction(|(payments, open)| {
                let still_open = match payments.get(id)? {
                    Some(v) => dec::<GatewayPayment>(&v)
                        .map(|p| p.status.is_open())
                        .or_else(abort)?,
                    None => false,
                };
                if !still_open {
                    return Ok(false);
                }
                put_tracked(payments, open, id, &bytes, payment.status.is_open())?;
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
        (&self.nonces, &self.payments, &self.payments_open)
            .transaction(|(nonces, payments, open)| {
                if nonces.get(payment.nonce_key.as_bytes())?.as_deref() == Some(id) {
                    nonces.remove(payment.nonce_key.as_bytes())?;
                }
                put_tracked(payments, open, id, &bytes, payment.status.is_open())
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
}
