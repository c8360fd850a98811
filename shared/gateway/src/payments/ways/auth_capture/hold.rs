//! Taking an escrow payment: its reserved record, and the hold (`authorize`) or the charge
//! (`charge`: held and captured at once, for another server) the relayer sends as the escrow's
//! operator, with what each outcome leaves on the record.

use super::on_chain::ESCROW_GAS;
use crate::payments::way::Payments;
use crate::payments::Refusal;
use crate::usage::Slot;
use paygate_domain::model::{EscrowRecord, GatewayPayment, PaymentStatus, PaymentTransfer};
use paygate_x402::auth_capture::{self, Escrowed, PaymentInfoWire};
use paygate_x402::facilitator::{CallError, ChainCalls};
use paygate_x402::money::UsdcAmount;
use paygate_x402::PaymentRequirements;

/// Holds the payment in escrow (`authorize`, simulated first; a counterfactual payer's wallet
/// deployed before). Refused, nothing moved and the
/// nonce is freed; sent with its outcome unknown, the record stays open for reconciliation.
pub(super) async fn hold(
    svc: &Payments,
    chain: &dyn ChainCalls,
    chain_id: u64,
    e: &Escrowed,
    record: &mut GatewayPayment,
    slot: Option<Slot>,
) -> Result<Option<Slot>, Refusal> {
    send_hold(svc, chain, chain_id, e, record, slot, Collect::Hold).await
}

/// The reserved record of `escrowed`, taken for `route_id`, nothing held yet.
pub(super) fn reserved(
    org_id: &str,
    route_id: &str,
    requirements: &PaymentRequirements,
    escrowed: &Escrowed,
    verify_us: u64,
) -> GatewayPayment {
    let mut record =
        GatewayPayment::reserved(org_id, route_id, requirements, &escrowed.auth, verify_us);
    record.transfer = PaymentTransfer::AuthCapture;
    record.escrow = Some(Box::new(EscrowRecord {
        terms: PaymentInfoWire::of(&escrowed.info),
        authorized_tx: None,
        captured: UsdcAmount(0),
        voided_tx: None,
        reclaimed_tx: None,
        refunds: Vec::new(),
        pending_refund: None,
        capturing: None,
    }));
    record
}

/// How the payer's authorization is collected into the escrow.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Collect {
    /// `authorize`: held, captured once the request was answered.
    Hold,
    /// `charge`: held and captured at once (another server's settlement).
    Charge,
}

/// [`hold`] as `collect` says: the transaction is on the record's `authorized_tx` once sent.
pub(super) async fn send_hold(
    svc: &Payments,
    chain: &dyn ChainCalls,
    chain_id: u64,
    e: &Escrowed,
    record: &mut GatewayPayment,
    slot: Option<Slot>,
    collect: Collect,
) -> Result<Option<Slot>, Refusal> {
    // A counterfactual wallet is deployed first (nothing of the payment is sent until it is).
    let sent = match chain
        .deploy_payer(
            chain_id,
            e.auth.from,
            &e.auth.signature,
            (e.info.token, e.auth.value),
        )
        .await
    {
        Ok(signature) => {
            let call = match collect {
                Collect::Hold => e.authorize_call(&signature),
                Collect::Charge => e.charge_call(&signature),
            };
            auth_capture::send_as_operator(chain, chain_id, e.info.operator, call, ESCROW_GAS).await
        }
        Err(CallError::Ambiguous(m) | CallError::Pending(_, m)) => Err(CallError::Unavailable(m)),
        Err(other) => Err(other),
    };
    record.updated_at = paygate_domain::now_rfc3339();
    match sent {
        Ok(tx) => {
            if let Some(escrow) = record.escrow.as_mut() {
                escrow.authorized_tx = Some(tx.to_string());
            }
            if let Err(err) = svc.store.update_payment(record).await {
                // Held on chain: the open record lets reconciliation void it if this request
                // never records an outcome.
                tracing::warn!(payment = %record.id, error = %err, "could not record an escrow hold");
            }
            Ok(slot)
        }
        Err(CallError::Pending(tx, m)) if collect == Collect::Charge => {
            // A charge for another server, not mined in time: x402's `settlement_pending`.
            tracing::warn!(payment = %record.id, transaction = %tx, error = %m, "escrow charge sent, not mined yet: left to reconciliation");
            record.status = PaymentStatus::Unknown;
            if let Some(escrow) = record.escrow.as_mut() {
                escrow.authorized_tx = Some(tx.to_string());
            }
            if let Err(err) = svc.store.update_payment(record).await {
                tracing::warn!(payment = %record.id, error = %err, "could not record an unknown charge");
            }
            Err(Refusal::Unconfirmed {
                transaction: tx,
                payer: e.auth.from,
            })
        }
        Err(CallError::Ambiguous(m) | CallError::Pending(_, m)) => {
            tracing::warn!(payment = %record.id, error = %m, "escrow hold sent, outcome unknown: left to reconciliation");
            record.status = PaymentStatus::Unknown;
            if let Err(err) = svc.store.update_payment(record).await {
                tracing::warn!(payment = %record.id, error = %err, "could not record an unknown hold");
            }
            if let Some(s) = slot {
                s.leave_to_reconciliation();
            }
            Err(Refusal::Pending)
        }
        Err(other) => {
            let refusal = match &other {
                CallError::Reverted(m) => {
                    Refusal::Rejected(paygate_x402::facilitator::embedded::revert_reason(m))
                }
                _ => Refusal::FacilitatorDown,
            };
            tracing::debug!(payment = %record.id, error = %other, "escrow hold refused");
            record.status = PaymentStatus::Failed;
            record.failure = Some(refusal.to_string());
            if let Err(err) = svc.store.release_payment(record).await {
                tracing::warn!(payment = %record.id, error = %err, "could not free a refused escrow reservation");
            }
            Err(refusal)
        }
    }
}
