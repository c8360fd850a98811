//! The answers to a payment the payment service did not admit (see
//! `paygate_gateway::payments::schemes`): a refused payment's `402` with the route's challenge
//! and the reason, a refused channel voucher's `402` carrying the channel's state (so an honest
//! client resyncs), a kept answer, a payer's channel refund, a rate limit.

use crate::decide::Answer;
use crate::limits::Refused;
use paygate_domain::{ErrorBody, ErrorCode};
use paygate_gateway::channels::{self, ChannelRefusal};
use paygate_gateway::payments::schemes::Unadmitted;
use paygate_x402::facilitator::wire::RefusedPaymentBody;
use paygate_x402::{Challenge, PaymentRequirements};
use std::borrow::Cow;

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
