//! The x402 protocol as paygate speaks it, knowing nothing of the store or of HTTP servers: USDC
//! money, addresses and networks; wire types for v1 and v2 and the rendering of `402`
//! challenges; payment decoding, local verification and signing; and the facilitator (trait,
//! embedded relayer, remote client). Each protocol version's wire shapes live in their own
//! module; [`Challenge`] renders all three forms a `402` carries (the seed
//! `X-Payment-Requirements` header, the v1 body, the v2 header).

pub mod address;
pub mod auth_capture;
pub mod batch;
mod challenge;
pub mod clock;
pub mod extensions;
mod extra;
pub mod facilitator;
pub mod gas_sponsoring;
pub mod money;
pub mod network;
pub mod offer_receipt;
pub mod operator;
pub mod payment;
pub mod permit2;
mod requirements;
pub mod sign;
pub mod signature;
pub mod siwx;
pub mod v1;
pub mod v2;
pub mod verify;

pub use challenge::{b64_json, v1_accepts, Challenge, NO_PAYMENT_ERROR};
pub use extensions::Extensions;
pub use extra::{ChannelExtra, EscrowExtra, TokenExtra, EIP3009_METHOD};
pub use requirements::{
    BatchTerms, Offer, Offered, PaymentRequirements, RequirementsError, PERMIT2_METHOD, UPTO_SCHEME,
};

/// Whether traces are exported (`[telemetry]`): the paid path opens its spans only then, so a
/// deployment without traces pays nothing for them.
pub mod traces {
    use std::sync::atomic::{AtomicBool, Ordering};

    static ON: AtomicBool = AtomicBool::new(false);

    /// Called once traces are exported.
    pub fn enable() {
        ON.store(true, Ordering::Relaxed);
    }

    pub fn on() -> bool {
        ON.load(Ordering::Relaxed)
    }

    /// An INFO span named `$name` (a child of the current one) when traces are on, else none.
    #[macro_export]
    macro_rules! span {
        ($name:literal $(, $($field:tt)*)?) => {
            if $crate::traces::on() {
                tracing::info_span!($name $(, $($field)*)?)
            } else {
                tracing::Span::none()
            }
        };
    }
}
