//! Payment channels (`batch-settlement`) in the proxy: the request is admitted before it is
//! forwarded ([`Gateway::channel_step`]) and charged once the origin's answer head arrives
//! ([`Gateway::finish_channel`]); what the origin says a call cost (`X-Paygate-Charge`) is read
//! there and never reaches the caller.

use crate::decide::{Answer, Forwarding};
use crate::Gateway;
use paygate_domain::model::Pricing;
use paygate_domain::origin_proof::OriginSigner;
use paygate_domain::{ErrorBody, ErrorCode};
use paygate_gateway::channels::{self, ChannelCharge, ChannelRefusal};
use paygate_gateway::payments::Refusal;
use paygate_gateway::route_table::RouteEntry;
use paygate_x402::batch::ChannelPayloadWire;
use paygate_x402::payment::DecodeError;
use paygate_x402::verify::Rejection;
use paygate_x402::{Challenge, PaymentRequirements};
use pingora::http::{RequestHeader, ResponseHeader};
use std::borrow::Cow;
use std::sync::Arc;

/// The response header in which an origin states what a call cost (`pricing: "usage"`), in
/// decimal USD (`0.00025`). Removed before the answer reaches the caller, whatever the pricing.
pub(crate) const CHARGE_HEADER: &str = "x-paygate-charge";

/// A paid route's request being paid: what the refusals and the charge are rendered from.
pub(crate) struct Paying<'a> {
    pub org_id: &'a Arc<str>,
    pub entry: &'a Arc<RouteEntry>,
    pub requirements: &'a PaymentRequirements,
    pub challenge: &'a Challenge,
    pub request_id: &'a str,
}

impl Gateway {
    /// A `batch-settlement` payment: the route must offer channels; the voucher is admitted
    /// (the channel's lock taken, a deposit sent first) once the upstream is resolved and
    /// allowed; the charge comes after the answer ([`Self::finish_channel`]). A refund
    /// payload is answered here (`Err` carries every answer the gateway writes itself).
    pub(crate) async fn channel_step(
        &self,
        req: &RequestHeader,
        p: &Paying<'_>,
        origin: Option<Arc<OriginSigner>>,
        wire: Result<ChannelPayloadWire, DecodeError>,
    ) -> Result<Box<Forwarding>, Answer> {
        let refused = |r: ChannelRefusal| channel_refused(r, p);
        let wire = wire.map_err(|e| refused(ChannelRefusal::Malformed(e.to_string())))?;
        let (Some(terms), Some(channels)) = (&p.challenge.offer.batch, self.payments.channels())
        else {
            return Err(Answer::refused(
                Refusal::Rejected(Rejection::UnsupportedScheme),
                p.requirements,
                p.challenge,
                p.request_id,
            ));
        };
        let charge = ChannelCharge {
            org_id: p.org_id,
            route_id: &p.entry.route.id,
            requirements: p.requirements,
            terms,
        };
        if matches!(wire, ChannelPayloadWire::Refund { .. }) {
            // The payer takes back what is left: answered here, nothing forwarded.
            let refunded = channels.refund(&wire, &charge).await.map_err(refused)?;
            let body = serde_json::json!({
                "message": "Refund acknowledged",
                "channelId": refunded.record.id,
                "refundedAmount": refunded.amount.to_string(),
            });
            return Err(Answer::Refunded {
                receipt: refunded.header(),
                body: serde_json::to_vec(&body).unwrap_or_default().into(),
            });
        }
        if let Some(too_large) = self.body_too_large(req) {
            return Err(too_large);
        }
        // No connection is opened first (as `exact` does): a voucher is charged only after the
        // origin answered, so an origin that cannot be reached charges nothing anyway.
        let to = self
            .upstream_address(p.entry, &req.headers, &[])
            .await
            .map_err(|r| Answer::Error(r.code(), Cow::Owned(r.to_string())))?;
        let admitted = channels.admit(&wire, &charge).await.map_err(refused)?;
        self.limits
            .check_payer(&admitted.payer().0 .0)
            .map_err(Answer::Limited)?;
        let mut forwarding = Forwarding::new(p.entry.clone(), to, None, origin);
        forwarding.channel = Some(admitted);
        Ok(forwarding)
    }

    /// The origin's answer head arrived: its `X-Paygate-Charge` is taken off, and a channel
    /// payment admitted for the request is charged when the answer succeeded (below 400);
    /// anything else leaves the channel as it was (the admitted voucher, dropped, releases the
    /// channel's lock). A usage-priced streamed answer whose head states no charge is charged
    /// when it ends ([`Self::finish_streamed_channel`]): its trailer may state it.
    pub(crate) async fn finish_channel(&self, f: &mut Forwarding, resp: &mut ResponseHeader) {
        let stated = resp.remove_header(CHARGE_HEADER);
        if f.channel.is_none() {
            return;
        }
        if resp.status.as_u16() >= 400 {
            f.channel = None;
            return;
        }
        let route = &f.route.route;
        if stated.is_none() && route.streaming && route.pricing == Pricing::Usage {
            f.charge_at_end = true;
            return;
        }
        self.charge_channel(f, stated.as_ref()).await;
    }

    /// The end of an answer whose charge waited for it: charged by the trailer's charge (the
    /// price when there was none) when the whole answer passed; nothing when it was cut short.
    /// Its receipt can no longer travel in the head: the payer learns the charged amount from
    /// the next corrective 402, as after any lost receipt.
    pub(crate) async fn finish_streamed_channel(&self, f: &mut Forwarding, completed: bool) {
        if !std::mem::take(&mut f.charge_at_end) {
            return;
        }
        if !completed {
            f.channel = None;
            return;
        }
        let stated = f.stated_trailer.take();
        self.charge_channel(f, stated.as_ref()).await;
    }

    /// Commits the charge of the channel payment admitted for the request: the price, or for a
    /// usage-priced route what the origin `stated`, at most the price.
    async fn charge_channel(&self, f: &mut Forwarding, stated: Option<&http::HeaderValue>) {
        let (Some(admitted), Some(channels)) = (f.channel.take(), self.payments.channels()) else {
            return;
        };
        let charge = match f.route.route.pricing {
            Pricing::Fixed => admitted.price(),
            Pricing::Usage => usage_charge(stated, admitted.price(), &f.route.id),
        };
        match channels.finish(admitted, charge).await {
            Ok(receipt) => f.channel_receipt = Some((receipt.header(), receipt.charged)),
            Err(e) => tracing::warn!(error = %e, "channel charge not committed"),
        }
    }
}

/// What a usage-priced request is charged: the origin's stated charge in decimal USD, at most
/// the `price` (an amount too large for any price is above it); the price when the origin says
/// nothing; nothing (and a warning for the operator) when what it says is not an amount.
fn usage_charge(stated: Option<&http::HeaderValue>, price: u128, route: &str) -> u128 {
    let Some(v) = stated else { return price };
    let text = v.to_str().unwrap_or("").trim();
    match paygate_x402::money::parse_usdc_units(text) {
        Ok(units) => u128::from(units).min(price),
        Err(paygate_x402::money::DecimalError::Overflow) => price,
        Err(_) => {
            tracing::warn!(
                route,
                value = text,
                "the origin's X-Paygate-Charge is not a USD amount; nothing charged"
            );
            0
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
    let mut body = ErrorBody::new(code, &message, p.request_id).to_value();
    body["x402Version"] = 2.into();
    body["error"] = reason.into();
    body["accepts"] = serde_json::to_value(&doc.accepts).unwrap_or_default();
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

#[cfg(test)]
mod tests {
    use super::usage_charge;
    use http::HeaderValue;

    #[test]
    fn the_origin_charge_is_at_most_the_price_and_nothing_when_it_is_not_an_amount() {
        let charge = |v: Option<&str>| {
            let h = v.map(|v| HeaderValue::from_str(v).unwrap());
            usage_charge(h.as_ref(), 1_000, "rt")
        };
        assert_eq!(charge(None), 1_000, "silent origin: the price");
        assert_eq!(charge(Some(" 0.00025 ")), 250, "decimal USD");
        assert_eq!(charge(Some("0.000999")), 999);
        assert_eq!(charge(Some("0")), 0);
        assert_eq!(charge(Some("0.0")), 0);
        assert_eq!(
            charge(Some("250")),
            1_000,
            "$250 is above the price: the price"
        );
        assert_eq!(charge(Some("0.5")), 1_000);
        assert_eq!(
            charge(Some("99999999999999999999999999999999999999999")),
            1_000,
            "too large for any price: the price"
        );
        for bad in [
            "-1",
            "-0.5",
            "abc",
            "",
            "1e3",
            "0x10",
            "1,5",
            ".5",
            "1.",
            "0.0000001",
            "+1",
        ] {
            assert_eq!(charge(Some(bad)), 0, "{bad:?}");
        }
    }
}
