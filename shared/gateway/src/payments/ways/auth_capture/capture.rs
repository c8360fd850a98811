//! An `auth-capture` capture after the answer (issue 54): the answer's head waits for the
//! node to take the capture's transaction, not for its block, as a card payment is captured
//! after the sale. The record carries the capture (`escrow.capturing`) before the head goes
//! out, so a crash from there on is reconciled by capturing what was served; once the answer is
//! over the capture's outcome is recorded off the answer's path (`SETTLED`, the rest of a
//! usage-priced hold voided, the seller's `payment.settled` event), or, not confirmed, left to
//! reconciliation.

use super::on_chain::void_hold;
use crate::payments::way::Payments;
use crate::payments::Paid;
use alloy_primitives::B256;
use paygate_domain::model::{EscrowCapture, GatewayPayment, PaymentStatus};
use paygate_x402::auth_capture::PaymentInfo;
use paygate_x402::facilitator::{CallError, ChainCalls};
use paygate_x402::money::UsdcAmount;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// A capture sent for what an answer served, being mined.
pub(super) struct Capturing {
    /// The record as stored: still open, the capture on it.
    stored: GatewayPayment,
    /// The capture's transaction, until it is mined.
    mined: JoinHandle<Result<B256, CallError>>,
    /// The payment as the receipt shows it (captured by `tx`), with its plan slot.
    pub(super) paid: Paid,
    /// The relayer's calls and the chain, to void the rest of a partial capture.
    on_chain: (Arc<dyn ChainCalls>, u64),
    info: PaymentInfo,
    /// What was held.
    price: UsdcAmount,
}

/// `record` (held) with the capture of `amount` sent as `tx`: what is stored before the answer.
pub(super) fn capturing(
    mut record: GatewayPayment,
    amount: UsdcAmount,
    tx: B256,
) -> GatewayPayment {
    record.amount = amount;
    record.updated_at = paygate_domain::now_rfc3339();
    if let Some(e) = record.escrow.as_mut() {
        e.capturing = Some(EscrowCapture {
            amount,
            transaction: tx.to_string(),
        });
    }
    record
}

/// `stored` as its receipt shows it: captured by its capture's transaction.
pub(super) fn as_receipted(stored: &GatewayPayment, settle_ms: u64) -> GatewayPayment {
    let mut shown = stored.clone();
    if let Some(e) = shown.escrow.as_mut() {
        if let Some(c) = e.capturing.take() {
            shown.transaction = Some(c.transaction);
            e.captured = c.amount;
        }
    }
    shown.status = PaymentStatus::Settled;
    shown.settle_ms = Some(settle_ms);
    shown
}

impl Capturing {
    pub(super) fn new(
        stored: GatewayPayment,
        mined: JoinHandle<Result<B256, CallError>>,
        paid: Paid,
        on_chain: (Arc<dyn ChainCalls>, u64),
        info: PaymentInfo,
        price: UsdcAmount,
    ) -> Self {
        Self {
            stored,
            mined,
            paid,
            on_chain,
            info,
            price,
        }
    }

    /// Records the capture's outcome once the answer is over: mined, the payment is `SETTLED`
    /// (the rest of a partial capture voided, the seller's event queued before the record that
    /// lets a refund start) and its plan slot kept; not confirmed (its block did not come in
    /// time, or it reverted), left open with the capture on it for reconciliation. Written only
    /// over a record still open: one that waited past `live_hold_seconds` may have been decided
    /// by reconciliation meanwhile (and refunded since), which is then kept.
    pub(super) async fn confirm(self: Box<Self>, svc: &Payments, upstream_status: Option<u16>) {
        let Capturing {
            mut stored,
            mined,
            mut paid,
            on_chain,
            info,
            price,
        } = *self;
        let outcome = mined
            .await
            .unwrap_or_else(|e| Err(CallError::Ambiguous(e.to_string())));
        stored.upstream_status = upstream_status;
        stored.updated_at = paygate_domain::now_rfc3339();
        match outcome {
            Ok(tx) => {
                let charge = stored.amount;
                stored.status = PaymentStatus::Settled;
                stored.transaction = Some(tx.to_string());
                stored.settle_ms = paid.record.settle_ms;
                if let Some(e) = stored.escrow.as_mut() {
                    e.captured = charge;
                    e.capturing = None;
                }
                if price.0 > charge.0 {
                    // The rest of the hold goes back to the payer; not voided, the payer
                    // reclaims it after the capture deadline.
                    let (chain, chain_id) = &on_chain;
                    if let Err(e) = void_hold(chain.as_ref(), *chain_id, &info, &mut stored).await {
                        tracing::warn!(payment = %stored.id, error = %e, "the rest of a partial capture was not voided; the payer may reclaim it after the capture deadline");
                    }
                }
                let recorded = still_open(svc, &stored).await && {
                    if let Some(events) = svc.events() {
                        events.payment_settled_now(&stored).await;
                    }
                    write_if_open(svc, &stored).await
                };
                if !recorded {
                    if let Some(slot) = paid.slot.take() {
                        slot.leave_to_reconciliation();
                    }
                    return;
                }
                tracing::info!(payment = %stored.id, charge = charge.0, "auth-capture payment captured");
                paid.record = stored;
                if let Some(slot) = paid.slot.take() {
                    svc.usage().commit(slot).await;
                }
            }
            Err(e) => {
                tracing::warn!(payment = %stored.id, error = %e, "an escrow capture sent after its answer is not confirmed: left to reconciliation");
                stored.status = PaymentStatus::Unknown;
                write_if_open(svc, &stored).await;
                if let Some(slot) = paid.slot.take() {
                    slot.leave_to_reconciliation();
                }
            }
        }
    }
}

/// Writes an `auth-capture` outcome; a failure leaves it to reconciliation, which reads the
/// escrow.
pub(super) async fn store(svc: &Payments, record: &GatewayPayment) {
    if let Err(e) = svc.store.update_payment(record).await {
        tracing::warn!(payment = %record.id, error = %e, "could not record an auth-capture outcome; reconciliation reads the escrow");
    }
}

/// Whether `record` is still open as stored (reconciliation has not decided it).
async fn still_open(svc: &Payments, record: &GatewayPayment) -> bool {
    match svc.store.get_payment(&record.id).await {
        Ok(stored) => stored.is_some_and(|p| p.status.is_open()),
        // Written below if it still is.
        Err(_) => true,
    }
}

/// Writes `record` over the stored one if that is still open: `false` when reconciliation
/// decided it first (kept), or the write failed (reconciliation reads the escrow).
async fn write_if_open(svc: &Payments, record: &GatewayPayment) -> bool {
    match svc
        .store
        .write_payment_if(record, paygate_store::PaymentGuard::StillOpen)
        .await
    {
        Ok(true) => true,
        Ok(false) => {
            tracing::debug!(payment = %record.id, "an escrow capture's outcome was recorded by reconciliation first");
            false
        }
        Err(e) => {
            tracing::warn!(payment = %record.id, error = %e, "could not record an auth-capture outcome; reconciliation reads the escrow");
            false
        }
    }
}
