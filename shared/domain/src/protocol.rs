//! The agent payment protocols paygate answers (x402 and MPP): what a route offers, what a
//! payment came in, and how its token moves.

use serde::{Deserialize, Serialize};

/// The agent payment protocol a payment came in (the ledger, events and metrics say which).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PaymentProtocol {
    /// x402 (`PAYMENT-SIGNATURE`, `X-PAYMENT`).
    #[default]
    X402,
    /// The Machine Payments Protocol (`Authorization: Payment`).
    Mpp,
}

impl PaymentProtocol {
    pub fn is_x402(&self) -> bool {
        *self == Self::X402
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Self::X402 => "x402",
            Self::Mpp => "mpp",
        }
    }
}

/// Both protocols: what a route offers unless its seller turned one off.
pub fn both_protocols() -> Vec<PaymentProtocol> {
    vec![PaymentProtocol::X402, PaymentProtocol::Mpp]
}

/// How a gateway payment moves its token (what reconciliation reads back on chain).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PaymentTransfer {
    /// EIP-3009 on the token: `authorizationState` says whether it moved.
    #[default]
    Eip3009,
    /// Permit2 through the exact proxy: Permit2's `nonceBitmap` says.
    Permit2,
    /// Permit2 through the upto proxy, for the charge (`amount`) the origin stated.
    Upto,
    /// Held in the `auth-capture` escrow, then captured or voided (`escrow` says which).
    AuthCapture,
}

impl PaymentTransfer {
    pub fn is_eip3009(&self) -> bool {
        *self == Self::Eip3009
    }
}
