//! The registry of ways to pay, and the payment service's two calls through it: [`admit`]
//! before a request is forwarded, [`finish`] with what the caller knows of the answer. A way
//! is picked by its claim on the request (the sandbox route, a sign-in) or else by the scheme
//! its payment names; `exact` takes every payment no other way names (its decoder says what is
//! wrong with one it cannot read). A route's challenge lists what each way offers, in the order
//! the route's seller gave the schemes.
//!
//! [`admit`]: PaymentService::admit
//! [`finish`]: PaymentService::finish

use super::for_servers::{failed, verdict, ForServer};
use super::way::Payments;
use super::way::{
    Admission, Answered, Claim, Gate, PaidRequest, Parts, Paying, Refused, Serving, Step, Terms,
    Unadmitted, Way,
};
use super::ways::auth_capture::AuthCapture;
use super::ways::batch::Batch;
use super::ways::exact::Exact;
use super::ways::mpp::Mpp;
use super::ways::sandbox::Sandbox;
use super::ways::upto::Upto;
use super::ways::window::Window;
use super::{PaymentService, Refusal};
use crate::route_entry::RouteEntry;
use paygate_domain::model::{GatewayPayment, Route};
use paygate_x402::facilitator::wire::{SettleResponse, SupportedKindWire, VerifyResponse};
use paygate_x402::payment::ProtocolVersion;
use paygate_x402::{Challenge, Extensions, Offer, NO_PAYMENT_ERROR};
use std::sync::Arc;

/// Every way of paying, in the order a request is offered to their claims (`exact` last: it
/// takes whatever payment no other way names). One line a way.
static WAYS: &[&dyn Way] = &[&Sandbox, &Window, &Mpp, &Batch, &Upto, &AuthCapture, &Exact];

/// Every way's deployment-wide terms under `cfg`.
pub fn terms(cfg: &paygate_config::Config) -> Terms {
    Terms(paygate_x402::Offer(
        WAYS.iter().filter_map(|w| w.terms(cfg)).collect(),
    ))
}

/// The schemes `route` offers, in its seller's order, with this deployment's `terms` (a scheme
/// this deployment cannot settle is left out).
pub fn offer(route: &Route, terms: &Terms) -> Offer {
    Offer(
        route
            .schemes
            .iter()
            .filter_map(|s| WAYS.iter().find_map(|w| w.offered(route, *s, terms)))
            .collect(),
    )
}

/// What the ways declare in `route`'s challenge, added to `ext` (nothing on the sandbox route,
/// which takes no payment).
pub fn declare(route: &Route, sandbox: bool, ext: &mut Extensions) {
    if sandbox {
        return;
    }
    for w in WAYS {
        w.declare(route, ext);
    }
}

/// Whether `entry`'s route offers x402 (a route may turn it off and answer MPP alone).
pub(crate) fn offers_x402(entry: &RouteEntry) -> bool {
    entry
        .route
        .protocols
        .contains(&paygate_domain::model::PaymentProtocol::X402)
}

/// The body of a `402` offering no x402 form: the draft's problem details for "payment
/// required" (the challenge is in `WWW-Authenticate`).
const NO_X402_BODY: &str = r#"{"type":"https://paymentauth.org/problems/payment-required","title":"Payment Required","status":402,"detail":"Pay with the Payment challenge in WWW-Authenticate","code":"PAYMENT_REQUIRED","message":"Pay with the Payment challenge in WWW-Authenticate"}"#;

/// The way that left the payment record `p` to reconciliation (it decides it).
pub(crate) fn reconciler(p: &GatewayPayment) -> Option<&'static dyn Way> {
    WAYS.iter().find(|w| w.reconciles(p)).copied()
}

/// Every way built with `parts`, in [`WAYS`]' order (`None`: a way this deployment lacks the
/// parts of).
pub(crate) fn build(parts: &Parts) -> Vec<Option<Box<dyn Serving>>> {
    WAYS.iter().map(|w| w.build(parts)).collect()
}

/// The ways of paying built with `parts`, in front of `service`: what callers hold.
pub fn payments(service: PaymentService, parts: &Parts) -> Payments {
    Payments::new(service, build(parts))
}

impl Payments {
    /// The ways this deployment serves, each with its registration.
    pub(crate) fn serving(&self) -> impl Iterator<Item = (&'static dyn Way, &dyn Serving)> {
        WAYS.iter()
            .zip(self.built())
            .filter_map(|(w, s)| Some((*w, s.as_deref()?)))
    }

    /// The served way that takes a payment naming `scheme` in `version`: `exact` for any
    /// other (its decoder says what is wrong with it).
    pub(crate) fn taking(&self, scheme: &str, version: ProtocolVersion) -> Option<&dyn Serving> {
        let mut serving = self.serving();
        serving
            .find(|(w, _)| w.takes(scheme, version))
            .or_else(|| self.serving().find(|(w, _)| w.takes("exact", version)))
            .map(|(_, s)| s)
    }

    /// A payment `record` was settled for a request to `entry`: every way keeps what it
    /// keeps of it (an access window opened), before the request is forwarded.
    pub(crate) async fn paid_for(&self, entry: &RouteEntry, record: &GatewayPayment) {
        for (_, s) in self.serving() {
            s.paid_for(entry, record).await;
        }
    }

    /// Refunds `amount` (all that is refundable when `None`) of `org_id`'s payment `id`, once per
    /// `key`, through the way that took it.
    pub async fn refund(
        &self,
        org_id: &str,
        id: &str,
        amount: Option<paygate_x402::money::UsdcAmount>,
        key: Option<&str>,
    ) -> Result<super::Refunded, super::RefundError> {
        let p = match self.store.get_payment(id).await? {
            Some(p) if p.org_id == org_id => p,
            _ => return Err(super::RefundError::NotFound),
        };
        let way = WAYS
            .iter()
            .zip(self.built())
            .find(|(w, _)| w.reconciles(&p));
        match way {
            Some((_, Some(s))) => s.refund(self, &p, amount, key).await,
            Some((_, None)) => Err(super::RefundError::ChainDown(
                "no relayer key: refunds cannot be sent".into(),
            )),
            None => Err(super::RefundError::NotRefundable(
                super::refund::ONLY_ESCROW_REFUNDS,
            )),
        }
    }
}

impl Payments {
    /// Admits a request to a paid route: its challenge when it brings no payment, a refusal,
    /// an answer of its own (the sandbox, a refund, a kept answer), or the payment taken (or
    /// held) by its way and the request to be forwarded to the admission's upstream, then
    /// [`Self::finish`]ed.
    pub async fn admit(
        &self,
        req: &PaidRequest<'_>,
        gate: &dyn Gate,
    ) -> Result<Admission, Unadmitted> {
        let entry = req.entry;
        let Some((requirements, challenge)) = &entry.payment else {
            return Err(self
                .refused(entry, Refusal::Internal, ProtocolVersion::V1)
                .into());
        };
        let claimed = self
            .serving()
            .find_map(|(_, s)| s.claims(req).map(|c| (s, c)));
        let mut paying = Paying {
            req,
            requirements,
            challenge,
            version: ProtocolVersion::V2,
            json: &[],
        };
        // A sign-in, or another protocol's credential (which its way checks the network of and
        // renders its own refusals for).
        if let Some((way, Claim::Unpaid | Claim::Pays)) = claimed {
            return way.admit(self, &paying, gate).await;
        }
        if claimed.is_none() && !self.settleable.now(&requirements.network) {
            let name = requirements.network.v1_name.clone();
            return Err(self
                .refused(entry, Refusal::NotSettleable(name), ProtocolVersion::V1)
                .into());
        }
        let Some((version, raw)) = req.payment() else {
            let challenge = self.challenge(entry).unwrap_or_else(|| challenge.clone());
            return Err(Unadmitted::Challenge(challenge));
        };
        if !offers_x402(entry) {
            // x402 is off here: its payment is refused as another protocol's is, nothing read.
            let mut refused = self.refused(
                entry,
                Refusal::Rejected(paygate_x402::verify::Rejection::UnsupportedScheme),
                version,
            );
            refused.protocol = paygate_domain::model::PaymentProtocol::Mpp;
            return Err(refused.into());
        }
        paying.version = version;
        let refused = |r: Refusal| -> Unadmitted { self.refused(entry, r, version).into() };
        gate.paying().map_err(refused)?;
        let json = paygate_x402::payment::header_json(raw).map_err(|e| refused(e.into()))?;
        paying.json = &json;
        let way = match claimed {
            Some((way, _)) => way,
            None => {
                let scheme = paygate_x402::payment::scheme_of(&json, version);
                let scheme = scheme.as_deref().unwrap_or_default();
                let Some(way) = self.taking(scheme, version) else {
                    return Err(refused(Refusal::Rejected(
                        paygate_x402::verify::Rejection::UnsupportedScheme,
                    )));
                };
                way
            }
        };
        way.admit(self, &paying, gate).await
    }

    /// What the answer commits for the payment in `slot` (taken once its way is done with it):
    /// called with the answer's head, then with its end. A refusal at the head replaces the
    /// origin's answer (a charge that could not be settled); nothing was charged then.
    pub async fn finish(
        self: &Arc<Self>,
        slot: &mut Option<super::way::Admitted>,
        answered: Answered<'_>,
    ) -> Result<Option<super::way::Receipt>, Box<Refused>> {
        match answered {
            Answered::Head { status, stated } => {
                let Some(held) = slot.as_mut() else {
                    return Ok(None);
                };
                match held.0.head(self, status, stated).await {
                    Step::Wait(r) => Ok(r),
                    Step::Done(r) => {
                        *slot = None;
                        Ok(r)
                    }
                    Step::Refused(r) => {
                        *slot = None;
                        Err(r)
                    }
                }
            }
            Answered::End(end) => match slot.take() {
                Some(held) => Ok(held.0.end(self, end).await),
                None => Ok(None),
            },
        }
    }

    /// The challenge a `402` of `entry` carries: the route's, rendered again only where a way
    /// declares afresh in every `402` (a sign-in's nonce and time, escrow deadlines), with the
    /// deployment's signed offers where it signs them (kept per route, `offers.rs`).
    pub fn challenge(&self, entry: &RouteEntry) -> Option<Challenge> {
        let (req, challenge) = entry.payment.as_ref()?;
        let fresh = self.serving().any(|(_, s)| s.declares_fresh(entry));
        let render = |offers: Option<serde_json::Value>| {
            let mut ext = (*challenge.extensions).clone();
            if fresh {
                for (_, s) in self.serving() {
                    s.declare_fresh(entry, &mut ext);
                }
            }
            ext.offer_receipt = offers;
            Challenge::render_offered(
                req,
                NO_PAYMENT_ERROR,
                Arc::new(ext),
                challenge.offer.clone(),
            )
        };
        let mut rendered = match &self.offers {
            Some(o) => o.challenge(entry, req, challenge, fresh, |d| render(Some(d))),
            None if fresh => render(None),
            None => challenge.clone(),
        };
        rendered.www_authenticate = self.serving().find_map(|(_, s)| s.challenge_header(entry));
        if !offers_x402(entry) {
            // Another protocol's challenge alone: its body is problem details.
            rendered.x402 = false;
            rendered.body = NO_X402_BODY.as_bytes().to_vec().into();
        }
        Some(rendered)
    }

    /// `refusal` of a request to `entry`, to be rendered in `version` (against the route's
    /// challenge, when it is answered with one).
    pub fn refused(
        &self,
        entry: &RouteEntry,
        refusal: Refusal,
        version: ProtocolVersion,
    ) -> Refused {
        let challenge = refusal
            .challenge_reason()
            .and_then(|_| self.challenge(entry));
        Refused {
            refusal,
            challenge,
            version,
            protocol: Default::default(),
        }
    }
}

impl Payments {
    /// Every kind the facilitator API verifies and settles now: each served way's, on the
    /// networks that settle now.
    pub fn facilitator_kinds(&self) -> Vec<SupportedKindWire> {
        let settling: Vec<_> = self.settleable().settling().collect();
        let mut kinds: Vec<_> = self
            .serving()
            .flat_map(|(_, s)| s.facilitator_kinds(&settling))
            .collect();
        // `exact` first (every server takes it), then by version, scheme and network.
        kinds.sort_by(|a, b| {
            let key = |k: &SupportedKindWire| (k.scheme != "exact", k.x402_version);
            (key(a), &a.scheme, &a.network).cmp(&(key(b), &b.scheme, &b.network))
        });
        kinds
    }

    /// Verifies another server's payment through the way its scheme names.
    pub async fn verify_for_server(&self, call: &ForServer<'_>) -> Result<VerifyResponse, Refusal> {
        let Some(way) = self.taking(call.scheme(), call.version) else {
            return Ok(verdict(None, Some("unsupported_scheme")));
        };
        match way.verify_for(self, call).await {
            Err(r) => match r.x402_reason() {
                Some(reason) => Ok(verdict(None, Some(reason))),
                None => Err(r),
            },
            verified => verified,
        }
    }

    /// Settles another server's payment through the way its scheme names.
    pub async fn settle_for_server(&self, call: &ForServer<'_>) -> Result<SettleResponse, Refusal> {
        let Some(way) = self.taking(call.scheme(), call.version) else {
            return Ok(failed("unsupported_scheme", call.network(), None));
        };
        match way.settle_for(self, call).await {
            // Sent and not confirmed in time: the same payment again answers from it, and once
            // reconciliation has seen it land, with the settlement.
            Err(Refusal::Unconfirmed { transaction, payer }) => {
                Ok(SettleResponse::pending(transaction, call.network(), payer))
            }
            Err(r) => match r.x402_reason() {
                Some(reason) => Ok(failed(reason, call.network(), None)),
                None => Err(r),
            },
            settled => settled,
        }
    }
}

impl Paying<'_> {
    /// `refusal` rendered against this request's challenge, in the version the caller spoke.
    pub(crate) fn refused(&self, svc: &Payments, refusal: Refusal) -> Unadmitted {
        svc.refused(self.req.entry, refusal, self.version).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::Address;
    use paygate_x402::{BatchTerms, Offered};

    fn route(schemes: serde_json::Value) -> Route {
        serde_json::from_value(serde_json::json!({
            "id": "rt", "orgId": "org", "path": "/x", "price": 1000, "targetUrl": "",
            "network": "base-sepolia", "active": true, "streaming": false,
            "discoverable": false, "description": "", "bazaarCategory": null,
            "schemes": schemes, "createdAtNs": 0, "createdAt": "", "updatedAt": "",
        }))
        .unwrap()
    }

    #[test]
    fn a_challenge_offers_the_routes_schemes_in_the_sellers_order_and_only_those_it_can_settle() {
        let channel = BatchTerms {
            receiver_authorizer: Address::repeat_byte(7),
            withdraw_delay: 900,
        };
        let terms = Terms(paygate_x402::Offer(vec![
            Offered::Batch(channel.clone()),
            Offered::Upto(Address::repeat_byte(9)),
        ]));
        let upto = Offered::Upto(Address::repeat_byte(9));
        let order = |s| offer(&route(s), &terms).0;
        assert_eq!(
            order(serde_json::json!(["upto", "exact"])),
            [upto.clone(), Offered::Exact]
        );
        assert_eq!(
            order(serde_json::json!(["exact", "batch-settlement", "upto"])),
            [Offered::Exact, Offered::Batch(channel.clone()), upto]
        );
        assert_eq!(
            order(serde_json::json!(["batch-settlement", "exact"])),
            [Offered::Batch(channel), Offered::Exact]
        );
        // Without a relayer key or a receiver authorizer, those schemes are not offered.
        let bare = offer(
            &route(serde_json::json!(["upto", "batch-settlement", "exact"])),
            &Terms(paygate_x402::Offer(vec![])),
        );
        assert_eq!(bare.0, [Offered::Exact]);
    }
}
