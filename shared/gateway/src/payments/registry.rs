//! The registry of ways to pay, and the payment service's two calls through it: [`admit`]
//! before a request is forwarded, [`finish`] with what the caller knows of the answer. A way
//! is picked by its claim on the request (the sandbox route, a sign-in) or else by the scheme
//! its payment names; `exact` takes every payment no other way names (its decoder says what is
//! wrong with one it cannot read). A route's challenge lists what each way offers, in the order
//! the route's seller gave the schemes.
//!
//! [`admit`]: PaymentService::admit
//! [`finish`]: PaymentService::finish

use super::way::{
    Admission, Answered, Claim, Gate, PaidRequest, Paying, Refused, Step, Terms, Unadmitted, Way,
};
use super::ways::auth_capture::AuthCapture;
use super::ways::batch::Batch;
use super::ways::exact::Exact;
use super::ways::sandbox::Sandbox;
use super::ways::upto::Upto;
use super::ways::window::Window;
use super::{PaymentService, Refusal};
use crate::route_entry::RouteEntry;
use paygate_domain::model::{GatewayPayment, Route};
use paygate_x402::payment::ProtocolVersion;
use paygate_x402::{Challenge, Extensions, Offer, NO_PAYMENT_ERROR};
use std::sync::Arc;

/// Every way of paying, in the order a request is offered to their claims (`exact` last: it
/// takes whatever payment no other way names). One line a way.
static WAYS: &[&dyn Way] = &[&Sandbox, &Window, &Batch, &Upto, &AuthCapture, &Exact];

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

/// The way that left the payment record `p` to reconciliation (it decides it).
pub(crate) fn reconciler(p: &GatewayPayment) -> Option<&'static dyn Way> {
    WAYS.iter().find(|w| w.reconciles(p)).copied()
}

impl PaymentService {
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
        let claimed = WAYS
            .iter()
            .find_map(|w| w.claims(self, req).map(|c| (*w, c)));
        let mut paying = Paying {
            req,
            requirements,
            challenge,
            version: ProtocolVersion::V2,
            json: &[],
        };
        if let Some((way, Claim::Unpaid)) = claimed {
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
                let named = WAYS.iter().find(|w| w.takes(scheme, version));
                named.copied().unwrap_or(&Exact)
            }
        };
        way.admit(self, &paying, gate).await
    }

    /// What the answer commits for the payment in `slot` (taken once its way is done with it):
    /// called with the answer's head, then with its end. A refusal at the head replaces the
    /// origin's answer (a charge that could not be settled); nothing was charged then.
    pub async fn finish(
        &self,
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
        let fresh = WAYS.iter().any(|w| w.declares_fresh(self, entry));
        let render = |offers: Option<serde_json::Value>| {
            let mut ext = (*challenge.extensions).clone();
            if fresh {
                for w in WAYS {
                    w.declare_fresh(self, entry, &mut ext);
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
        Some(match &self.offers {
            Some(o) => o.challenge(entry, req, challenge, fresh, |d| render(Some(d))),
            None if fresh => render(None),
            None => challenge.clone(),
        })
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
        }
    }
}

impl Paying<'_> {
    /// `refusal` rendered against this request's challenge, in the version the caller spoke.
    pub(crate) fn refused(&self, svc: &PaymentService, refusal: Refusal) -> Unadmitted {
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
