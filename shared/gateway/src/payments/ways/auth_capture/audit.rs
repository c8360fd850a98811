//! The ledger audit of an `auth-capture` payment: the escrow's state of the payment, nothing
//! still held, and what it can still refund equal to the ledger's capture less its refunds
//! (`FAILED`: nothing captured).

use crate::payments::way::{Difference, OnChain};
use alloy_primitives::U256;
use paygate_domain::model::{GatewayPayment, PaymentStatus};
use paygate_x402::auth_capture;

/// `p` against the escrow: `None` when they agree, `Err` when the escrow could not be read.
pub(super) async fn audit(
    p: &GatewayPayment,
    at: &OnChain<'_>,
) -> Result<Option<Difference>, String> {
    let chain = at.calls.ok_or("no relayer calls to read the escrow")?;
    let payer = paygate_x402::address::parse_address(&p.payer).ok_or("malformed payer")?;
    let escrow = p.escrow.as_ref().ok_or("no escrow terms on the record")?;
    let info = escrow.terms.info(payer).ok_or("malformed escrow terms")?;
    let chain_id = at.network.config.chain_id;
    let hash = auth_capture::payment_hash(chain_id, &info);
    let state = auth_capture::read_state(chain, chain_id, hash)
        .await
        .map_err(|e| e.to_string())?;
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
