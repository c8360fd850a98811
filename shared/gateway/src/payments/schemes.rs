//! The schemes a paid request is paid by, behind one interface ([`Scheme`]): `exact` (one
//! on-chain settlement per request, taken before the request is forwarded) and
//! `batch-settlement` (payment channels: a voucher admitted before forwarding, charged once the
//! origin answered). The caller (the proxy) makes two calls into the payment service:
//! [`PaymentService::admit`] before forwarding, and [`PaymentService::finish`] with what it
//! knows of the answer, its head and then its end; each scheme decides what it commits when.
//! What only the caller can check (its rate limits, where the upstream is and whether it
//! accepts connections) it answers through a [`Gate`], asked where the scheme's rules put it.

use super::ids::{IdClaim, PaymentKey};
use super::{Charge, Paid, PaymentService, Refusal, Verified};
use crate::balancer::Picked;
use crate::channels::{self, ChannelCharge, ChannelRefusal, Refunded};
use crate::route_table::RouteEntry;
use crate::usage::Slot;
use alloy_primitives::Address;
use http::HeaderValue;
use paygate_domain::model::GatewayPayment;
use paygate_domain::model::{PaidAnswer, Pricing};
use paygate_domain::window::AccessWindow;
use paygate_x402::batch::ChannelPayloadWire;
use paygate_x402::payment::{DecodeError, ProtocolVersion};
use paygate_x402::verify::Rejection;
use paygate_x402::PaymentRequirements;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

/// The response header (or, on a streamed answer, trailer) in which an origin states what a
/// call cost (`pricing: "usage"`), in decimal USD (`0.00025`). The caller removes it before the
/// answer reaches the payer, whatever the route's pricing.
pub const CHARGE_HEADER: &str = "x-paygate-charge";

/// One paid request, as the caller hands it over: the route (already found, its organisation
/// active) and the payment header's JSON.
pub struct PaidRequest<'a> {
    pub org_id: &'a Arc<str>,
    pub entry: &'a Arc<RouteEntry>,
    /// The organisation's monthly paid-request limit (0: none).
    pub plan_limit: u64,
    /// The version of the header the payment came in.
    pub version: ProtocolVersion,
    pub json: &'a [u8],
}

/// Where a request goes: an address checked against the SSRF policy, and the target picked
/// among the route's several.
pub type Upstream = (SocketAddr, Option<Picked>);

/// What only the caller can check, asked by a scheme where its rules put it: after the payment
/// is verified (so a forged payment costs nothing) and before anything is charged.
pub trait Gate: Send + Sync {
    /// How the caller stops a request itself (its rate limit's answer).
    type Stop: Send;
    /// Whether `payer` may send a request now.
    fn payer(&self, payer: &Address) -> Result<(), Self::Stop>;
    /// The upstream the request will go to; with `connect`, also connected to once (a payment
    /// taken before forwarding is never taken for an origin that refuses connections).
    fn upstream(&self, connect: bool) -> impl Future<Output = Result<Upstream, Refusal>> + Send;
}

/// Why a request was not admitted, and what it is answered instead. Nothing was charged, except
/// where a [`Refusal`] says the outcome is not known.
pub enum Unadmitted<S> {
    /// The payment was refused: a `402` when the payer must pay again, else the refusal's error.
    Refused(Refusal),
    /// A channel payment was refused: a `402` carrying the channel's state when the payer can
    /// resync, a `503` when nothing could be decided.
    Channel(ChannelRefusal),
    /// The caller's own stop, as its [`Gate`] gave it.
    Stopped(S),
    /// The same payment was answered before under its x402 payment identifier: that answer
    /// again, nothing taken.
    Kept(PaidAnswer),
    /// A payer's channel refund, done on chain: answered, nothing forwarded.
    Refunded(Box<Refunded>),
}

impl<S> From<Refusal> for Unadmitted<S> {
    fn from(r: Refusal) -> Self {
        Self::Refused(r)
    }
}

impl<S> From<ChannelRefusal> for Unadmitted<S> {
    fn from(r: ChannelRefusal) -> Self {
        Self::Channel(r)
    }
}

/// A request admitted: where it goes, its payment, and the receipt when it is known already.
pub struct Admission {
    pub upstream: Upstream,
    pub payment: Admitted,
    /// `exact`: the settlement's receipt; a channel's comes with the charge, at the answer.
    pub receipt: Option<Receipt>,
}

/// The receipt an answer carries, and what was charged for the request.
#[derive(Debug, Clone)]
pub struct Receipt {
    /// `PAYMENT-RESPONSE` (v2) or `X-PAYMENT-RESPONSE` (v1).
    pub header: &'static str,
    /// Base64 JSON, the x402 settle response.
    pub value: String,
    /// USDC base units charged for this request.
    pub charged: u64,
}

/// The payment of an admitted request, until [`PaymentService::finish`] is done with it.
pub enum Admitted {
    /// Settled before forwarding; its plan slot and payment identifier wait for the answer.
    Exact(Box<ExactAdmitted>),
    /// A voucher admitted; the channel is locked until it is charged or dropped.
    Channel(Box<ChannelAdmitted>),
    /// A call served through the payer's access window, counted at admission; given back if
    /// the origin does not serve it (no answer, or 400 and above), as a voucher is not charged.
    Window(Box<AccessWindow>),
    /// An `upto` authorization: reserved, settled for the origin's charge at the answer.
    Upto(Box<UptoAdmitted>),
}

/// An `exact` payment settled for a request, and the identifier its answer is kept under.
pub struct ExactAdmitted {
    paid: Paid,
    key: Option<PaymentKey>,
}

/// A channel voucher admitted for a route's request.
pub struct ChannelAdmitted {
    voucher: channels::Admitted,
    entry: Arc<RouteEntry>,
    /// A usage-priced streamed answer whose head stated no charge: charged at its end.
    at_end: bool,
}

impl Admitted {
    /// The outcome's name in the access log.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Exact(_) => "PAID",
            Self::Channel(_) => "CHANNEL_VOUCHER",
            Self::Window(_) => "ACCESS_WINDOW",
            Self::Upto(_) => "UPTO",
        }
    }

    /// The payment's id, sent to the origin for deduplication (`exact` payments have one).
    pub fn payment_id(&self) -> Option<&str> {
        match self {
            Self::Exact(e) => Some(&e.paid.record.id),
            Self::Upto(u) => u.record().map(|r| r.id.as_str()),
            Self::Channel(_) | Self::Window(_) => None,
        }
    }

    /// The settlement's duration in milliseconds (verification included), for the metrics.
    pub fn settle_ms(&self) -> Option<u64> {
        match self {
            Self::Exact(e) => {
                let r = &e.paid.record;
                Some(r.settle_ms.unwrap_or(0) + r.verify_us / 1000)
            }
            Self::Upto(u) => u.record().and_then(|r| r.settle_ms),
            Self::Channel(_) | Self::Window(_) => None,
        }
    }

    /// Whether the answer is kept under the payment's identifier (the caller collects its
    /// body, up to its own limit, and hands it to [`PaymentService::finish`]).
    pub fn keeps_answer(&self) -> bool {
        matches!(self, Self::Exact(e) if e.key.is_some())
    }
}

/// What the caller knows of the answer when it calls [`PaymentService::finish`].
pub enum Answered<'a> {
    /// The origin's answer head: its status and the charge it stated in a header (taken off).
    Head {
        status: u16,
        stated: Option<&'a HeaderValue>,
    },
    /// The answer is over (or never came): `completed` when it passed whole to the caller.
    End {
        completed: bool,
        upstream_status: Option<u16>,
        /// The whole body, when the caller kept it ([`Admitted::keeps_answer`]).
        body: Option<Vec<u8>>,
        content_type: Option<String>,
        /// The charge the origin stated in a trailer.
        stated: Option<HeaderValue>,
    },
}

/// One way of paying, inside the payment service.
pub(crate) trait Scheme: Sync {
    /// The scheme's payment decoded from the request, when it is this scheme's.
    type Payload: Send;
    fn payload(&self, req: &PaidRequest<'_>) -> Option<Self::Payload>;
    /// Checks and takes (or holds) the payment before the request is forwarded.
    fn admit<G: Gate>(
        &self,
        req: &PaidRequest<'_>,
        payload: Self::Payload,
        gate: &G,
    ) -> impl Future<Output = Result<Admission, Unadmitted<G::Stop>>> + Send;
    /// What the answer commits: `slot` holds this scheme's payment, taken when done with.
    /// An `Err` at the answer's head replaces the answer with that refusal (`upto`'s refused
    /// settlement); the other schemes never refuse there.
    fn finish(
        &self,
        slot: &mut Option<Admitted>,
        answered: Answered<'_>,
    ) -> impl Future<Output = Result<Option<Receipt>, Refusal>> + Send;
}

/// `exact`: verified locally, its identifier claimed, the upstream reached once, then settled.
pub(crate) struct Exact<'a>(pub(super) &'a PaymentService);

/// `batch-settlement`: vouchers on payment channels ([`channels::Channels`]).
pub(crate) struct Batch<'a>(pub(super) &'a PaymentService);

impl Scheme for Exact<'_> {
    type Payload = ();

    fn payload(&self, _req: &PaidRequest<'_>) -> Option<()> {
        Some(())
    }

    async fn admit<G: Gate>(
        &self,
        req: &PaidRequest<'_>,
        _payload: (),
        gate: &G,
    ) -> Result<Admission, Unadmitted<G::Stop>> {
        let svc = self.0;
        let (requirements, challenge) = req.entry.payment.as_ref().ok_or(Refusal::Internal)?;
        if !challenge.offer.exact {
            return Err(Refusal::Rejected(Rejection::UnsupportedScheme).into());
        }
        let verified = svc.verify_header_json(
            req.json,
            req.version,
            requirements,
            paygate_domain::unix_now(),
        )?;
        gate.payer(&verified.payer()).map_err(Unadmitted::Stopped)?;
        let key = match svc.claim_id(req.org_id, &verified).await? {
            IdClaim::Answered(kept) => return Err(Unadmitted::Kept(kept)),
            IdClaim::Take(key) => key,
        };
        let upstream = gate.upstream(true).await?;
        let charge = Charge {
            org_id: req.org_id,
            route_id: &req.entry.route.id,
            requirements,
            plan_limit: Some(req.plan_limit),
            redeliver: req.entry.route.origin_deduplicates,
        };
        let paid = svc.take(verified, &charge).await?;
        if let Some(windows) = svc.windows() {
            // Before forwarding: a crash after this keeps the window the payment bought.
            windows.open(req.entry, &paid.record).await;
        }
        let receipt = Receipt {
            header: paid.receipt_header,
            value: paid.receipt.clone(),
            charged: paid.record.amount.0,
        };
        Ok(Admission {
            upstream,
            payment: Admitted::Exact(Box::new(ExactAdmitted { paid, key })),
            receipt: Some(receipt),
        })
    }

    async fn finish(
        &self,
        slot: &mut Option<Admitted>,
        answered: Answered<'_>,
    ) -> Result<Option<Receipt>, Refusal> {
        let Answered::End {
            completed,
            upstream_status,
            body,
            content_type,
            ..
        } = answered
        else {
            // Settled before forwarding: the head changes nothing.
            return Ok(None);
        };
        let Some(Admitted::Exact(e)) = slot.take() else {
            return Ok(None);
        };
        let ExactAdmitted { paid, key } = *e;
        if let (Some(key), Some(body), Some(status), true) = (key, body, upstream_status, completed)
        {
            use base64::Engine;
            self.0.keep_answer(
                key,
                PaidAnswer {
                    payment_id: paid.record.id.clone(),
                    status,
                    content_type,
                    body: base64::engine::general_purpose::STANDARD.encode(body),
                    receipt_header: paid.receipt_header.to_string(),
                    receipt: paid.receipt.clone(),
                },
            );
        }
        self.0.delivered(paid, upstream_status);
        Ok(None)
    }
}

impl Scheme for Batch<'_> {
    type Payload = Result<ChannelPayloadWire, DecodeError>;

    fn payload(&self, req: &PaidRequest<'_>) -> Option<Self::Payload> {
        // `batch-settlement` is a v2 scheme; the v1 forms only ever carry `exact`.
        if req.version != ProtocolVersion::V2 {
            return None;
        }
        paygate_x402::batch::channel_payload(req.json)
    }

    async fn admit<G: Gate>(
        &self,
        req: &PaidRequest<'_>,
        payload: Self::Payload,
        gate: &G,
    ) -> Result<Admission, Unadmitted<G::Stop>> {
        let wire = payload.map_err(|e| ChannelRefusal::Malformed(e.to_string()))?;
        let (requirements, challenge) = req.entry.payment.as_ref().ok_or(Refusal::Internal)?;
        let (Some(terms), Some(channels)) = (&challenge.offer.batch, self.0.channels()) else {
            return Err(Refusal::Rejected(Rejection::UnsupportedScheme).into());
        };
        let charge = ChannelCharge {
            org_id: req.org_id,
            route_id: &req.entry.route.id,
            requirements,
            terms,
        };
        if matches!(wire, ChannelPayloadWire::Refund { .. }) {
            // The payer takes back what is left: answered, nothing forwarded.
            let refunded = channels.refund(&wire, &charge).await?;
            return Err(Unadmitted::Refunded(Box::new(refunded)));
        }
        // No connection is opened first (as `exact` does): a voucher is charged only after the
        // origin answered, so an origin that cannot be reached charges nothing anyway.
        let upstream = gate.upstream(false).await?;
        let voucher = channels.admit(&wire, &charge).await?;
        gate.payer(&voucher.payer()).map_err(Unadmitted::Stopped)?;
        Ok(Admission {
            upstream,
            payment: Admitted::Channel(Box::new(ChannelAdmitted {
                voucher,
                entry: req.entry.clone(),
                at_end: false,
            })),
            receipt: None,
        })
    }

    async fn finish(
        &self,
        slot: &mut Option<Admitted>,
        answered: Answered<'_>,
    ) -> Result<Option<Receipt>, Refusal> {
        Ok(self.finish_channel(slot, answered).await)
    }
}

impl Batch<'_> {
    async fn finish_channel(
        &self,
        slot: &mut Option<Admitted>,
        answered: Answered<'_>,
    ) -> Option<Receipt> {
        let stated = match answered {
            Answered::Head { status, stated } => {
                let Some(Admitted::Channel(c)) = slot.as_mut() else {
                    return None;
                };
                if status >= 400 {
                    // A failed answer leaves the channel as it was (the voucher, dropped,
                    // releases the channel's lock): the same voucher can be sent again.
                    *slot = None;
                    return None;
                }
                let route = &c.entry.route;
                if stated.is_none() && route.streaming && route.pricing == Pricing::Usage {
                    // Its trailer may state the charge: charged when the answer has passed.
                    c.at_end = true;
                    return None;
                }
                stated.cloned()
            }
            Answered::End {
                completed, stated, ..
            } => {
                let waited = matches!(slot, Some(Admitted::Channel(c)) if c.at_end);
                if !(waited && completed) {
                    // Cut short (or never answered): nothing is charged.
                    *slot = None;
                    return None;
                }
                stated
            }
        };
        let Some(Admitted::Channel(c)) = slot.take() else {
            return None;
        };
        self.charge(*c, stated.as_ref()).await
    }

    /// Commits the voucher's charge: the price, or for a usage-priced route what the origin
    /// `stated`, at most the price.
    async fn charge(&self, c: ChannelAdmitted, stated: Option<&HeaderValue>) -> Option<Receipt> {
        let channels = self.0.channels()?;
        let price = c.voucher.price();
        let charge = match c.entry.route.pricing {
            Pricing::Fixed => price,
            Pricing::Usage => usage_charge(stated, price, &c.entry.id),
        };
        match channels.finish(c.voucher, charge).await {
            Ok(receipt) => Some(Receipt {
                header: "payment-response",
                value: receipt.header,
                charged: u64::try_from(receipt.charged).unwrap_or(u64::MAX),
            }),
            Err(e) => {
                tracing::warn!(error = %e, "channel charge not committed");
                None
            }
        }
    }
}

/// An `upto` authorization admitted for a request: reserved until its charge is settled, then
/// settled until the answer is over.
pub struct UptoAdmitted {
    pub(super) stage: UptoStage,
    pub(super) requirements: PaymentRequirements,
    pub(super) entry: Arc<RouteEntry>,
    /// A streamed answer whose head stated no charge: settled at its end.
    pub(super) at_end: bool,
}

/// The reservation, until it is settled.
pub(super) struct Held {
    pub(super) v: Verified,
    pub(super) record: GatewayPayment,
    pub(super) slot: Option<Slot>,
}

/// Where an admitted `upto` authorization stands.
pub(super) enum UptoStage {
    /// Reserved, until its charge is settled.
    Held(Held),
    /// Settled, until the answer is over.
    Paid(Paid),
    /// Its settlement failed, or its answer was told over: nothing is left to do.
    Done,
}

impl UptoAdmitted {
    /// The payment's record: reserved, or settled (none once a settlement failed).
    pub(super) fn record(&self) -> Option<&GatewayPayment> {
        match &self.stage {
            UptoStage::Held(h) => Some(&h.record),
            UptoStage::Paid(p) => Some(&p.record),
            UptoStage::Done => None,
        }
    }

    /// The stage, taken out: `Done` is left.
    pub(super) fn take_stage(&mut self) -> UptoStage {
        std::mem::replace(&mut self.stage, UptoStage::Done)
    }
}

/// What a usage-priced request is charged: the origin's stated charge in decimal USD, at most
/// the `price` (an amount too large for any price is above it); the price when the origin says
/// nothing; nothing (and a warning for the operator) when what it says is not an amount.
pub(super) fn usage_charge(stated: Option<&HeaderValue>, price: u128, route: &str) -> u128 {
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
