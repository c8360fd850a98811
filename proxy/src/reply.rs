//! What the gateway answers itself ([`Answer`]), decided before anything is written, and the
//! answers to a payment the payment service did not admit (see
//! `paygate_gateway::payments::schemes`): a refused payment's `402` with the route's challenge
//! and the reason, a refused channel voucher's `402` carrying the channel's state (so an honest
//! client resyncs), a kept answer, a payer's channel refund, a rate limit. `answer.rs` writes
//! them.

use crate::limits::Refused;
use paygate_domain::model::PaidAnswer;
use paygate_domain::{ErrorBody, ErrorCode};
use paygate_gateway::channels::{self, ChannelRefusal};
use paygate_gateway::metrics::Outcome;
use paygate_gateway::payments::schemes::Unadmitted;
use paygate_gateway::payments::Refusal;
use paygate_gateway::windows::WindowRefusal;
use paygate_x402::facilitator::wire::RefusedPaymentBody;
use paygate_x402::{Challenge, PaymentRequirements};
use std::borrow::Cow;

/// An answer the gateway writes itself.
pub enum Answer {
    /// `204` to a CORS preflight.
    Preflight,
    /// `402` with a challenge: the route's own when no payment came (`refused: None`), or one
    /// rendered with the reason a payment was refused.
    Challenge {
        challenge: Challenge,
        refused: Option<ErrorCode>,
    },
    /// A JSON error.
    Error(ErrorCode, Cow<'static, str>),
    /// `429` from a rate limit, with `Retry-After`.
    Limited(Refused),
    /// The answer a payment got before, given again to the same payment under the same x402
    /// payment identifier: nothing is taken.
    Kept(PaidAnswer),
    /// `200` from the sandbox route to a valid test payment: a fixed body and a receipt marked
    /// as a sandbox receipt; nothing was reserved or settled.
    Sandbox {
        receipt_header: &'static str,
        receipt: String,
        body: bytes::Bytes,
    },
    /// `200` to a payer's channel refund: the refund went on chain; nothing was forwarded.
    Refunded { receipt: String, body: bytes::Bytes },
}

impl Answer {
    /// The answer to a refused payment: `402` with the challenge and the reason when the payer
    /// must sign a new payment, otherwise the refusal's error.
    pub(crate) fn refused(
        refusal: Refusal,
        req: &PaymentRequirements,
        challenge: &Challenge,
        request_id: &str,
    ) -> Self {
        let Some(rejection) = refusal.rejection() else {
            return Self::Error(refusal.code(), Cow::Owned(refusal.to_string()));
        };
        let why = Why {
            code: refusal.code(),
            reason: rejection.reason(),
            message: rejection.to_string(),
        };
        Self::with_reason(why, req, challenge, request_id)
    }

    /// The answer to a sign-in that opened no access window: `402` with the route's challenge
    /// (a fresh sign-in declaration in it) and the reason, or `503` when the store could not
    /// decide.
    pub(crate) fn window_refused(
        refusal: WindowRefusal,
        req: &PaymentRequirements,
        challenge: &Challenge,
        request_id: &str,
    ) -> Self {
        if refusal == WindowRefusal::Unavailable {
            return Self::Error(ErrorCode::StoreUnavailable, Cow::Owned(refusal.to_string()));
        }
        let why = Why {
            code: ErrorCode::SignInRefused,
            reason: refusal.reason(),
            message: refusal.to_string(),
        };
        Self::with_reason(why, req, challenge, request_id)
    }

    /// `402`: `challenge` rendered again with `why`'s reason as its `error`.
    fn with_reason(
        why: Why,
        req: &PaymentRequirements,
        challenge: &Challenge,
        request_id: &str,
    ) -> Self {
        let Why {
            code,
            reason,
            message,
        } = why;
        let body = RefusedPaymentBody {
            server: ErrorBody::new(code, &message, request_id),
            x402_version: 1,
            error: reason,
            accepts: [req.to_v1()],
        };
        let with_reason = Challenge::render_offered(
            req,
            reason,
            challenge.extensions.clone(),
            challenge.offer.clone(),
        );
        Self::Challenge {
            challenge: Challenge {
                requirements_header: challenge.requirements_header.clone(),
                payment_required_header: with_reason.payment_required_header,
                body: serde_json::to_vec(&body).unwrap_or_default().into(),
                extensions: challenge.extensions.clone(),
                offer: challenge.offer.clone(),
            },
            refused: Some(code),
        }
    }

    /// The status it is answered with.
    pub fn status(&self) -> u16 {
        match self {
            Self::Preflight => 204,
            Self::Challenge {
                refused: Some(c @ ErrorCode::Permit2ApprovalRequired),
                ..
            } => c.status(),
            Self::Challenge { .. } => 402,
            Self::Error(code, _) => code.status(),
            Self::Limited(_) => ErrorCode::TooManyRequests.status(),
            Self::Kept(k) => k.status,
            Self::Sandbox { .. } | Self::Refunded { .. } => 200,
        }
    }

    /// The outcome's name for the access log and its kind for the counters.
    pub fn outcome(&self) -> (&'static str, Outcome) {
        match self {
            Self::Preflight => ("PREFLIGHT", Outcome::Other),
            Self::Sandbox { .. } => ("SANDBOX_PAYMENT", Outcome::Other),
            Self::Refunded { .. } => ("CHANNEL_REFUND", Outcome::Other),
            Self::Kept(_) => ("PAYMENT_ID_REPLAY", Outcome::Other),
            Self::Limited(_) => (ErrorCode::TooManyRequests.as_str(), Outcome::Other),
            Self::Challenge { refused: None, .. } => ("PAYMENT_REQUIRED", Outcome::Challenge),
            Self::Challenge {
                refused: Some(code),
                ..
            }
            | Self::Error(code, _) => (
                code.as_str(),
                if code.status() == 402 {
                    Outcome::Rejected
                } else {
                    Outcome::Other
                },
            ),
        }
    }
}

/// Why a request is answered `402` again: its code, the x402 reason, and the message.
struct Why {
    code: ErrorCode,
    reason: &'static str,
    message: String,
}

/// The body of the answer to a payer's channel refund (its receipt says the same).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct RefundAnswer<'a> {
    message: &'static str,
    channel_id: &'a str,
    refunded_amount: String,
}

/// A paid route's request being paid: what refusals are rendered from.
pub(crate) struct Paying<'a> {
    pub requirements: &'a PaymentRequirements,
    pub challenge: &'a Challenge,
    pub request_id: &'a str,
}

impl Paying<'_> {
    /// The answer to a request the payment service did not admit.
    pub(crate) fn unadmitted(&self, u: Unadmitted<Refused>) -> Answer {
        match u {
            Unadmitted::Refused(r) => {
                Answer::refused(r, self.requirements, self.challenge, self.request_id)
            }
            Unadmitted::Channel(r) => channel_refused(r, self),
            Unadmitted::Stopped(limited) => Answer::Limited(limited),
            Unadmitted::Kept(kept) => Answer::Kept(kept),
            Unadmitted::Refunded(refunded) => {
                let body = RefundAnswer {
                    message: "Refund acknowledged",
                    channel_id: &refunded.record.id,
                    refunded_amount: refunded.amount.to_string(),
                };
                Answer::Refunded {
                    receipt: refunded.header(),
                    body: serde_json::to_vec(&body).unwrap_or_default().into(),
                }
            }
        }
    }
}

/// The answer to a refused channel payment: `402` with the challenge rendered with the reason
/// (and, for a cumulative amount the gateway did not expect, the channel's state and highest
/// voucher, so an honest client resyncs), or `503` when nothing could be decided.
fn channel_refused(refusal: ChannelRefusal, p: &Paying<'_>) -> Answer {
    let message = refusal.to_string();
    if !refusal.payment_required() {
        return Answer::Error(ErrorCode::FacilitatorUnavailable, Cow::Owned(message));
    }
    let reason = refusal.reason();
    let challenge = p.challenge;
    let mut doc = p.requirements.payment_required_offered(
        reason,
        challenge.extensions.as_deref().cloned(),
        &challenge.offer,
    );
    if let ChannelRefusal::Rejected {
        state: Some(record),
        ..
    } = &refusal
    {
        for a in &mut doc.accepts {
            if let Some(extra) = a.extra.channel.as_mut() {
                extra.channel_state = Some(channels::state_wire(record));
                extra.voucher_state = channels::voucher_wire(record);
            }
        }
    }
    let code = ErrorCode::PaymentRejected;
    let body = RefusedPaymentBody {
        server: ErrorBody::new(code, &message, p.request_id),
        x402_version: 2,
        error: reason,
        accepts: &doc.accepts,
    };
    use base64::Engine;
    let header = base64::engine::general_purpose::STANDARD
        .encode(serde_json::to_vec(&doc).unwrap_or_default());
    Answer::Challenge {
        challenge: Challenge {
            requirements_header: challenge.requirements_header.clone(),
            payment_required_header: http::HeaderValue::from_str(&header)
                .unwrap_or_else(|_| challenge.payment_required_header.clone()),
            body: serde_json::to_vec(&body).unwrap_or_default().into(),
            extensions: challenge.extensions.clone(),
            offer: challenge.offer.clone(),
        },
        refused: Some(code),
    }
}
