//! Why a payment was not taken: the one refusal every way of paying gives, its variants as data
//! (code and status, the x402 reason word, a channel's corrective state, a caller's own stop),
//! and the one mapping from a refusal to the answers each caller gives.

use crate::channels::{self, ChannelRefusal};
use crate::windows::WindowRefusal;
use paygate_domain::error::ErrorCode;
use paygate_domain::StoreError;
use paygate_x402::facilitator::FacilitatorError;
use paygate_x402::payment::DecodeError;
use paygate_x402::verify::Rejection;

/// Why a payment was not taken. Nothing was charged unless the variant says the outcome is not
/// known ([`Refusal::Pending`], [`Refusal::StillSettling`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The payment could not be decoded.
    #[error("{0}")]
    Malformed(#[from] DecodeError),
    /// A well-formed payment that is not acceptable: the payer must sign a new one.
    #[error("{0}")]
    Rejected(Rejection),
    #[error("payments cannot be settled: no facilitator is configured")]
    NoFacilitator,
    /// The request could not be served, so no payment was taken (found by the caller before
    /// [`PaymentService::take`]: the upstream's address is refused or unresolvable).
    #[error("{0}")]
    UpstreamUnavailable(String),
    #[error("this organisation has used its plan's requests for this month; nothing was charged")]
    PlanLimit,
    /// The facilitator could not be reached; nothing was broadcast.
    #[error("the payment could not be settled now; nothing was charged, retry later")]
    FacilitatorDown,
    /// The transfer was sent and its outcome is not known yet; reconciliation decides it.
    #[error("settlement outcome is not known yet; do not pay again, it is being reconciled")]
    Pending,
    /// The transfer was sent (this transaction) and not confirmed within the request's time
    /// (x402's `settlement_pending`); reconciliation finishes it.
    #[error("the payment was sent (transaction {transaction}) and is not confirmed yet; do not pay again, it is being reconciled")]
    Unconfirmed {
        transaction: alloy_primitives::B256,
        payer: alloy_primitives::Address,
    },
    /// The same signed payment is already being settled (a concurrent duplicate, or one a crash
    /// or a timeout left open).
    #[error("this payment is still being settled; do not pay again, retry it later")]
    StillSettling,
    /// The store cannot be reached (a database restarting): nothing was reserved or charged.
    #[error("payments cannot be taken now (the database is unreachable); nothing was charged, retry later")]
    StoreDown,
    /// The payment identifier names another payment (x402 `payment-identifier`).
    #[error("this payment identifier was used with another payment; use a new identifier")]
    PaymentIdConflict,
    /// The payment identifier is not 16 to 128 of `[A-Za-z0-9_-]`.
    #[error("extensions.payment-identifier.info.id must be 16 to 128 characters of A-Z, a-z, 0-9, - and _")]
    BadPaymentId,
    #[error("internal error")]
    Internal,
    /// A channel payment was refused: a `402` carrying the channel's state when the payer can
    /// resync, a `503` when nothing could be decided.
    #[error("{0}")]
    Channel(ChannelRefusal),
    /// A sign-in opened no access window: a `402` with a fresh sign-in declaration, or `503`.
    #[error("{0}")]
    SignIn(WindowRefusal),
    /// The network's payments cannot be settled now (no facilitator for it, or it stopped
    /// answering the health probe): never invite a payment that cannot land.
    #[error("payments on {0} cannot be settled now; try again later")]
    NotSettleable(String),
    /// Another server's facilitator call is not acceptable (its requirements, or a payload the
    /// way reads itself), with x402's reason word.
    #[error("{0}")]
    Invalid(&'static str),
    /// The caller's own stop, as its gate gave it (a rate limit, the body's size).
    #[error("{}", .0.message)]
    Stopped(Stop),
}

/// A caller's own stop: its error code, words and, for a rate limit, when to come back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    pub code: ErrorCode,
    pub message: String,
    pub retry_after: Option<u64>,
}

impl From<ChannelRefusal> for Refusal {
    fn from(r: ChannelRefusal) -> Self {
        Self::Channel(r)
    }
}

impl From<WindowRefusal> for Refusal {
    fn from(r: WindowRefusal) -> Self {
        Self::SignIn(r)
    }
}

impl Refusal {
    /// A store failure: `StoreDown` (a warning: it heals by itself) when the store is
    /// unreachable, else `Internal` (an error an operator must look at).
    pub(super) fn store(e: &StoreError, doing: &str) -> Self {
        if matches!(e, StoreError::Unavailable(_)) {
            tracing::warn!(error = %e, "{doing}: database unreachable");
            Self::StoreDown
        } else {
            tracing::error!(error = %e, "{doing}");
            Self::Internal
        }
    }
}

impl Refusal {
    /// The error code (and so the HTTP status) of this refusal.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Malformed(_) | Self::BadPaymentId => ErrorCode::InvalidPayment,
            Self::PaymentIdConflict => ErrorCode::PaymentIdConflict,
            Self::Rejected(Rejection::NonceReplay) => ErrorCode::NonceReplay,
            Self::Rejected(Rejection::Permit2AllowanceRequired) => {
                ErrorCode::Permit2ApprovalRequired
            }
            Self::Rejected(_) | Self::Invalid(_) => ErrorCode::PaymentRejected,
            Self::NoFacilitator | Self::FacilitatorDown => ErrorCode::FacilitatorUnavailable,
            Self::UpstreamUnavailable(_) => ErrorCode::UpstreamUnavailable,
            Self::PlanLimit => ErrorCode::PlanLimitExceeded,
            Self::Pending | Self::StillSettling | Self::Unconfirmed { .. } => {
                ErrorCode::SettlementPending
            }
            Self::StoreDown => ErrorCode::StoreUnavailable,
            Self::Internal => ErrorCode::InternalError,
            Self::Channel(r) if r.payment_required() => ErrorCode::PaymentRejected,
            Self::Channel(_) | Self::NotSettleable(_) => ErrorCode::FacilitatorUnavailable,
            Self::SignIn(WindowRefusal::Unavailable) => ErrorCode::StoreUnavailable,
            Self::SignIn(_) => ErrorCode::SignInRefused,
            Self::Stopped(s) => s.code,
        }
    }

    /// The rejection a `402` names when the payer must sign a new payment for this route;
    /// `None` for every other refusal (a plan limit is a `402` too, but paying again cannot help).
    pub const fn rejection(&self) -> Option<Rejection> {
        match self {
            Self::Rejected(r) => Some(*r),
            _ => None,
        }
    }

    /// The x402 reason word of a refusal answered with the route's challenge again (the payer
    /// can pay or sign in anew); `None` for a refusal answered as an error.
    pub fn challenge_reason(&self) -> Option<&'static str> {
        match self {
            Self::Rejected(r) => Some(r.reason()),
            Self::Invalid(reason) => Some(reason),
            Self::Channel(r) if r.payment_required() => Some(r.reason()),
            Self::SignIn(r) if *r != WindowRefusal::Unavailable => Some(r.reason()),
            _ => None,
        }
    }

    /// When to come back (`Retry-After`), for a rate limit.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Self::Stopped(s) => s.retry_after,
            _ => None,
        }
    }

    /// Corrects the offered requirements with the state the payer must resync to (a channel
    /// voucher whose cumulative amount the gateway did not expect): an honest client reads the
    /// channel's state and highest voucher there.
    pub fn correct(&self, accepts: &mut [paygate_x402::v2::PaymentRequirementsV2]) {
        let Self::Channel(ChannelRefusal::Rejected {
            state: Some(record),
            ..
        }) = self
        else {
            return;
        };
        for a in accepts {
            if let Some(extra) = a.extra.channel.as_mut() {
                extra.channel_state = Some(channels::state_wire(record));
                extra.voucher_state = channels::voucher_wire(record);
            }
        }
    }

    /// The x402 `invalidReason` / `errorReason` word, for the refusals that are about the
    /// payment itself (the facilitator API answers those with `200` and this word).
    pub const fn x402_reason(&self) -> Option<&'static str> {
        match self {
            Self::Malformed(_) => Some("invalid_payload"),
            Self::Rejected(r) => Some(r.reason()),
            Self::Invalid(reason) => Some(reason),
            _ => None,
        }
    }
}

impl From<FacilitatorError> for Refusal {
    fn from(e: FacilitatorError) -> Self {
        match e {
            FacilitatorError::Rejected(r) => Self::Rejected(r),
            FacilitatorError::Unavailable(_) => Self::FacilitatorDown,
            FacilitatorError::Ambiguous(_) => Self::Pending,
            FacilitatorError::Pending { .. } => Self::Pending,
        }
    }
}

impl Refusal {
    /// How a settlement of `payer`'s payment that failed is told: one sent and not confirmed
    /// in time names its transaction.
    pub fn of_settlement(e: FacilitatorError, payer: alloy_primitives::Address) -> Self {
        match e {
            FacilitatorError::Pending { transaction, .. } => {
                Self::Unconfirmed { transaction, payer }
            }
            e => e.into(),
        }
    }

    /// A retry of a payment whose settlement is still open (`held`): its transaction when one
    /// was sent, else "still settling".
    pub fn still_open(held: &paygate_domain::model::GatewayPayment) -> Self {
        let sent = held.transaction.as_deref().and_then(|t| t.parse().ok());
        let payer = held.payer.parse().ok();
        match (sent, payer) {
            (Some(transaction), Some(payer)) => Self::Unconfirmed { transaction, payer },
            _ => Self::StillSettling,
        }
    }
}
