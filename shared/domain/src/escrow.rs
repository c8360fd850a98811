//! An `auth-capture` payment's escrow story, kept on its payment record
//! (a `GatewayPayment`'s `escrow`): the terms, the capture, the void and the refunds.

use paygate_x402::money::UsdcAmount;
use serde::{Deserialize, Serialize};

/// An `auth-capture` payment in the escrow: its terms (to call the escrow again and find it
/// there) and its story. Amounts in USDC base units.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EscrowRecord {
    pub terms: paygate_x402::auth_capture::PaymentInfoWire,
    /// The `authorize` transaction, once it landed.
    #[serde(default)]
    pub authorized_tx: Option<String>,
    /// Captured (paid to the seller).
    #[serde(default)]
    pub captured: UsdcAmount,
    /// The `void` (or reconciliation's) transaction that gave the hold back.
    #[serde(default)]
    pub voided_tx: Option<String>,
    /// The payer's `reclaim` that took the hold back after the capture deadline (seen by
    /// reconciliation in the escrow's `PaymentReclaimed` event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaimed_tx: Option<String>,
    /// Refunds done, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refunds: Vec<EscrowRefund>,
    /// A refund asked for whose outcome is not recorded yet (at most one at a time): the next
    /// refund request of this payment reads the escrow and records it, or clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_refund: Option<EscrowRefund>,
    /// The capture the answer's head committed to and sent, not yet recorded as mined (the
    /// answer is not kept waiting for its block): reconciliation of an open record captures it
    /// if the hold is still there (its transaction dropped), else records what was captured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capturing: Option<EscrowCapture>,
}

/// A capture sent for what an answer served, its outcome not recorded yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EscrowCapture {
    pub amount: UsdcAmount,
    pub transaction: String,
}

impl EscrowRecord {
    /// What was refunded so far.
    pub fn refunded(&self) -> UsdcAmount {
        UsdcAmount(self.refunds.iter().map(|r| r.amount.0).sum())
    }

    /// What may still be refunded.
    pub fn refundable(&self) -> UsdcAmount {
        UsdcAmount(self.captured.0.saturating_sub(self.refunded().0))
    }
}

/// One refund of an `auth-capture` payment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EscrowRefund {
    /// `rfd_` + UUIDv7 hex.
    pub id: String,
    pub amount: UsdcAmount,
    /// The `Idempotency-Key` it was asked with, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The escrow's `refund` transaction: once it landed, or once sent while it is pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction: Option<String>,
    /// The relayer that sends it (written before it is sent): while that relayer has
    /// transactions waiting to be mined, a pending refund with no transaction known may still
    /// land, so it is not decided from the escrow's figures yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    pub created_at: String,
}
