//! A refund of a payment, as every caller sees it: what was refunded, or why not. The ways that
//! take refundable payments make them ([`super::way::Serving::refund`]).

use paygate_domain::model::{EscrowRefund, GatewayPayment};
use paygate_domain::StoreError;
use paygate_x402::money::UsdcAmount;

/// Why a refund was not made. Nothing was refunded, except where it says the outcome is not
/// known.
#[derive(Debug, thiserror::Error)]
pub enum RefundError {
    #[error("no payment with this id in your organisation")]
    NotFound,
    #[error("{0}")]
    NotRefundable(&'static str),
    #[error(
        "the payment's refund window is closed (or its route had refunds off when it was paid)"
    )]
    WindowClosed,
    #[error("the refund is above what was captured and not refunded ({} USDC)", .0.to_decimal())]
    ExceedsCapture(UsdcAmount),
    #[error("the seller's wallet cannot fund this refund: {0}; nothing was refunded")]
    SellerCannotCover(String),
    #[error("another refund of this payment is being made; retry in a moment")]
    Busy,
    #[error("this Idempotency-Key made a refund of another amount")]
    KeyReused,
    #[error("the chain cannot be reached; nothing was refunded: {0}")]
    ChainDown(String),
    #[error("the refund was sent and its outcome is not known yet; ask again with the same Idempotency-Key")]
    Pending,
    #[error("the payment's capture was sent after its answer and is not confirmed yet; nothing was refunded: ask again in a moment")]
    Capturing,
    #[error("the escrow refused the refund: {0}")]
    Refused(String),
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// Why a payment of a way that takes no refunds cannot be refunded.
pub(crate) const ONLY_ESCROW_REFUNDS: &str = "only auth-capture (escrow) payments can be refunded";

/// A refund made (or, under the same key, made before) and the payment after it.
#[derive(Debug, Clone)]
pub struct Refunded {
    pub refund: EscrowRefund,
    pub payment: GatewayPayment,
}
