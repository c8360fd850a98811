//! The escrow as the chain knows an `auth-capture` payment: reconciliation decides an open
//! record from it (voiding what a crash left held), and the ledger audit compares a decided
//! record with it (nothing still held, and what it can still refund equal to the ledger's
//! capture less its refunds; `FAILED`: nothing captured).

use crate::payments::way::{Difference, OnChain};
use alloy_primitives::{B256, U256};
use paygate_domain::model::{EscrowRecord, GatewayPayment, PaymentStatus};
use paygate_x402::auth_capture::{self, EscrowState, PaymentInfo};
use paygate_x402::facilitator::{CallError, ChainCalls};
use paygate_x402::money::UsdcAmount;

/// Gas for one escrow call (authorize measured ~150k on FiatTokenV2_2; headroom for a smart
/// wallet's signature check).
pub(super) const ESCROW_GAS: u64 = 400_000;

/// Voids what `info`'s hold still holds (the payer gets it back) and writes the void's
/// transaction on `record`: the one void every path sends (a refused or failed call, the rest
/// of a partial capture, reconciliation).
pub(super) async fn void_hold(
    chain: &dyn ChainCalls,
    chain_id: u64,
    info: &PaymentInfo,
    record: &mut GatewayPayment,
) -> Result<B256, CallError> {
    let void = auth_capture::void_call(info);
    let tx =
        auth_capture::send_as_operator(chain, chain_id, info.operator, void, ESCROW_GAS).await?;
    if let Some(e) = record.escrow.as_mut() {
        e.voided_tx = Some(tx.to_string());
    }
    Ok(tx)
}

/// A record's escrow read from the chain: the terms it names and their state now.
struct Read<'a> {
    chain: &'a dyn ChainCalls,
    chain_id: u64,
    escrow: &'a EscrowRecord,
    info: PaymentInfo,
    hash: B256,
    state: EscrowState,
}

impl<'a> Read<'a> {
    async fn of(p: &'a GatewayPayment, at: &OnChain<'a>) -> Result<Self, String> {
        let chain = at.calls.ok_or("no relayer calls to read the escrow")?;
        let chain_id = at.network.config.chain_id;
        let escrow = p.escrow.as_deref().ok_or("no escrow terms on the record")?;
        let payer = paygate_x402::address::parse_address(&p.payer).ok_or("malformed payer")?;
        let info = escrow.terms.info(payer).ok_or("malformed escrow terms")?;
        let hash = auth_capture::payment_hash(chain_id, &info);
        let state = state(chain, chain_id, hash).await?;
        Ok(Self {
            chain,
            chain_id,
            escrow,
            info,
            hash,
            state,
        })
    }

    /// Reads the escrow's state again.
    async fn refresh(&mut self) -> Result<(), String> {
        self.state = state(self.chain, self.chain_id, self.hash).await?;
        Ok(())
    }
}

async fn state(chain: &dyn ChainCalls, chain_id: u64, hash: B256) -> Result<EscrowState, String> {
    auth_capture::read_state(chain, chain_id, hash)
        .await
        .map_err(|e| e.to_string())
}

/// An open record (a crash, or an outcome not known) decided by the escrow's state: still
/// held, captured for what an answer's head committed to (`escrow.capturing`: the answer went
/// out), else voided (the answer's fate is unknown, the payer is protected); captured, recorded so;
/// released (voided, reclaimed), closed `FAILED`; never held, closed once the authorization
/// expired, else left for the next pass (`None`).
pub(super) async fn reconcile(
    p: &GatewayPayment,
    at: &OnChain<'_>,
) -> Result<Option<GatewayPayment>, String> {
    let mut r = Read::of(p, at).await?;
    let mut p = p.clone();
    p.updated_at = paygate_domain::now_rfc3339();
    if !r.state.collected {
        if at.now <= r.escrow.terms.pre_approval_expiry {
            return Ok(None);
        }
        p.status = PaymentStatus::Failed;
        p.failure = Some("authorization expired without being held".into());
        return Ok(Some(p));
    }
    let mut recaptured = None;
    if r.state.capturable > U256::ZERO {
        if let Some(c) = r.escrow.capturing.as_ref() {
            // An answer's head committed to this capture and it is not in the escrow's figures:
            // sent again (a second send while the first is still to be mined reverts then).
            let units = U256::from(c.amount.0);
            let call = auth_capture::capture_call(&r.info, units);
            let (chain, id, operator) = (r.chain, r.chain_id, r.info.operator);
            match auth_capture::send_as_operator(chain, id, operator, call, ESCROW_GAS).await {
                Ok(tx) => {
                    recaptured = Some(tx.to_string());
                    r.refresh().await?
                }
                Err(CallError::Reverted(_)) => r.refresh().await?,
                Err(e) => return Err(e.to_string()),
            }
        }
    }
    let held = r.state.capturable > U256::ZERO;
    if held {
        void_hold(r.chain, r.chain_id, &r.info, &mut p)
            .await
            .map_err(|e| e.to_string())?;
        // Read again after the void: a capture sent before it (the request's own, mined
        // late on a slow chain) is in the escrow's figures now, and recorded as captured.
        r.refresh().await?;
    }
    // What the escrow paid out, refunds included (none before the record is decided). A
    // capture follows the origin's answer, so this is no payment whose request is owed a
    // retry (`settled_by_reconciliation` stays false).
    let captured = UsdcAmount::of_units(r.state.refundable);
    if captured.0 > 0 {
        p.status = PaymentStatus::Settled;
        p.amount = captured;
        p.failure = None;
        if let Some(e) = p.escrow.as_mut() {
            e.captured = captured;
            if let Some(c) = e.capturing.take() {
                p.transaction = recaptured.or(Some(c.transaction));
            }
        }
    } else {
        p.status = PaymentStatus::Failed;
        if let Some(e) = p.escrow.as_mut() {
            e.capturing = None;
        }
        let reclaimed = if held { None } else { reclaimed(&r).await };
        p.failure = Some(
            match reclaimed {
                _ if held => "voided by reconciliation: the request's outcome was not recorded",
                Some(_) => {
                    "reclaimed by the payer after the capture deadline: nothing was captured"
                }
                None => {
                    "released before reconciliation read it (voided, or reclaimed by the \
                     payer after the capture deadline)"
                }
            }
            .into(),
        );
        if let (Some(tx), Some(e)) = (reclaimed, p.escrow.as_mut()) {
            e.reclaimed_tx = Some(format!("{tx:#x}"));
        }
    }
    Ok(Some(p))
}

/// `p`, decided, against the escrow: `None` when they agree, `Err` when it could not be read.
pub(super) async fn audit(
    p: &GatewayPayment,
    at: &OnChain<'_>,
) -> Result<Option<Difference>, String> {
    let Read { escrow, state, .. } = Read::of(p, at).await?;
    // USDC only: a token unit is a USDC base unit.
    let settled = p.status == PaymentStatus::Settled;
    let refundable = if settled { escrow.refundable().0 } else { 0 };
    if state.capturable == U256::ZERO && state.refundable == U256::from(refundable) {
        return Ok(None);
    }
    Ok(Some(Difference {
        payment_id: p.id.clone(),
        transfer: "auth-capture",
        ledger: format!(
            "{}, captured {} USDC, refunded {} USDC",
            p.status.as_str(),
            escrow.captured.to_decimal(),
            escrow.refunded().to_decimal()
        ),
        chain: format!(
            "held {} and refundable {} token units",
            state.capturable, state.refundable
        ),
    }))
}

/// The payer's `reclaim` of a hold nobody voided: its transaction, read from the escrow's
/// `PaymentReclaimed` events since the hold (`None`: not reclaimed, or not readable now).
async fn reclaimed(r: &Read<'_>) -> Option<B256> {
    if r.escrow.voided_tx.is_some() {
        return None;
    }
    let since = r.escrow.authorized_tx.as_deref()?.parse().ok()?;
    use alloy_sol_types::SolEvent;
    let event = auth_capture::IAuthCaptureEscrow::PaymentReclaimed::SIGNATURE_HASH;
    r.chain
        .find_event(
            r.chain_id,
            auth_capture::ESCROW_ADDRESS,
            event,
            r.hash,
            since,
        )
        .await
        .unwrap_or_else(|e| {
            tracing::debug!(error = %e, "the escrow's reclaims could not be read");
            None
        })
}
