//! MPP, the Machine Payments Protocol (the `Payment` HTTP authentication scheme,
//! draft-ryan-httpauth-payment), beside x402: its EVM `charge` intent with the `authorization`
//! credential, an EIP-3009 `TransferWithAuthorization` of the route's price to its seller, as
//! the official `mppx` client signs it. Every `402` of a route offering it (the route lists the
//! protocol and takes `exact` in a token with EIP-3009) carries a fresh `WWW-Authenticate:
//! Payment` challenge beside x402's forms: its `request` rendered from the route's terms, its
//! `expires` the deployment's payment window (`[facilitator] mpp_challenge_seconds`, to the millisecond: two `402`s of a route share a
//! challenge only within one millisecond), its `id` an HMAC over the challenge with the
//! deployment's secret, so a credential proves the challenge it answers on any node without
//! state. An `Authorization: Payment` credential is checked against that (issued here, for this
//! route's current terms, unexpired), its authorization against the challenge (nonce bound to
//! it, recipient, amount, signature, source), then taken exactly as an x402 `exact` payment is
//! (`exact::take_and_admit`: the replay guard across nodes, the upstream reached first,
//! settled once, recorded with protocol `mpp`), and answered with a `Payment-Receipt`. Refusals
//! are the draft's problem details (`problem.rs`).

pub mod client;
pub(crate) mod problem;
mod wire;

use super::exact::take_and_admit;
use crate::payments::way::{
    Admission, Claim, Gate, PaidRequest, Parts, Paying, Payments, Receipt, Serving, Unadmitted, Way,
};
use crate::payments::{Paid, Refusal};
use crate::route_entry::RouteEntry;
use http::HeaderValue;
use paygate_domain::model::{PaymentProtocol, Scheme};
use paygate_x402::payment::ProtocolVersion;
use paygate_x402::verify::Rejection;
use problem::reason;
use std::sync::Arc;

/// The least time left on a challenge for its payment to be settled (the facilitator's margin
/// on an authorization's `validBefore`).
const SETTLE_MARGIN_SECS: u64 = paygate_x402::auth_capture::SAFETY_MARGIN_SECONDS;
/// The shortest payment window a challenge is issued for.
const MIN_WINDOW_SECS: u64 = 10;

/// MPP `charge` on EVM, registered.
pub(crate) struct Mpp;

/// MPP as served: the secret its challenges are bound with, the realm they name, and how
/// long they may be paid. Each route's charge is rendered once, on its entry (`rendered`).
struct Charging {
    secret: Arc<[u8]>,
    realm: Arc<str>,
    /// How long a challenge may be paid after its `402`.
    window: u64,
}

impl Charging {
    /// `entry`'s charge: rendered on first use and kept on the entry (a route change makes a
    /// new entry).
    fn charge<'e>(
        &self,
        entry: &'e RouteEntry,
        req: &paygate_x402::PaymentRequirements,
    ) -> Option<&'e wire::Charge> {
        let rendered = entry
            .rendered
            .get_or_init(|| Arc::new(wire::Charge::new(&self.secret, &self.realm, req)));
        rendered.downcast_ref()
    }
}

impl Way for Mpp {
    fn build(&self, parts: &Parts) -> Option<Box<dyn Serving>> {
        Some(Box::new(Charging {
            secret: parts.mpp_secret.clone()?,
            realm: parts.realm.clone(),
            window: parts.mpp_challenge_secs.max(MIN_WINDOW_SECS),
        }))
    }
}

/// Whether `entry` offers MPP: its route lists the protocol, takes `exact`, in a token the
/// `authorization` credential moves (EIP-3009), and is not the sandbox.
fn offers(entry: &RouteEntry) -> bool {
    let route = &entry.route;
    !entry.sandbox
        && route.protocols.contains(&PaymentProtocol::Mpp)
        && route.schemes.contains(&Scheme::Exact)
        && entry
            .payment
            .as_ref()
            .is_some_and(|(req, c)| !req.permit2() && c.offer.exact())
}

/// Whether an `Authorization` value carries a `Payment` credential (the proxy drops it before
/// forwarding: the payment is the gateway's business), read as this way reads it.
pub fn carries_credential(authorization: &[u8]) -> bool {
    wire::payment_credential(authorization).is_some()
}

/// What MPP's discovery document (OpenAPI `x-payment-info`) offers for `entry`: its `charge`
/// (amount in the token's units, the token, the method and intent), where it offers MPP.
pub fn discovery_offer(entry: &RouteEntry) -> Option<serde_json::Value> {
    if !offers(entry) {
        return None;
    }
    let (req, _) = entry.payment.as_ref()?;
    let mut offer = serde_json::json!({
        "amount": req.token_amount().to_string(),
        "currency": req.network.config.asset.to_checksum(None),
        "intent": wire::INTENT,
        "method": wire::METHOD,
    });
    if !entry.route.description.is_empty() {
        offer["description"] = entry.route.description.clone().into();
    }
    Some(offer)
}

/// The unix seconds of an RFC 3339 instant.
fn unix_of(text: &str) -> Option<u64> {
    let t =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    u64::try_from(t.unix_timestamp()).ok()
}

/// The `Payment-Receipt` of a settled charge.
fn receipt(paid: &Paid) -> Receipt {
    let transaction = paid.record.transaction.as_deref().unwrap_or_default();
    Receipt {
        header: "payment-receipt",
        value: wire::receipt(transaction, &paygate_domain::now_rfc3339()),
        charged: paid.record.amount.0,
    }
}

#[async_trait::async_trait]
impl Serving for Charging {
    /// A request carrying an `Authorization: Payment` credential (and no x402 payment) to a
    /// route offering MPP.
    fn claims(&self, req: &PaidRequest<'_>) -> Option<Claim> {
        let auth = req.headers.get(http::header::AUTHORIZATION)?;
        wire::payment_credential(auth.as_bytes())?;
        (offers(req.entry) && req.payment().is_none()).then_some(Claim::Pays)
    }

    fn challenge_header(&self, entry: &RouteEntry) -> Option<HeaderValue> {
        if !offers(entry) {
            return None;
        }
        let (req, _) = entry.payment.as_ref()?;
        self.charge(entry, req)?.header(self.window)
    }

    async fn admit(
        &self,
        svc: &Payments,
        p: &Paying<'_>,
        gate: &dyn Gate,
    ) -> Result<Admission, Unadmitted> {
        let entry = p.req.entry;
        let refused = |r: Refusal| -> Unadmitted {
            let mut refused = svc.refused(entry, r, ProtocolVersion::V2);
            refused.protocol = PaymentProtocol::Mpp;
            refused.into()
        };
        let req = p.requirements;
        if !svc.settleable().now(&req.network) {
            return Err(refused(Refusal::NotSettleable(req.network.v1_name.clone())));
        }
        gate.paying().map_err(refused)?;
        let invalid = |why: &'static str| refused(Refusal::Invalid(why));
        let raw = p
            .req
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| wire::payment_credential(v.as_bytes()))
            .ok_or_else(|| invalid(reason::MALFORMED))?;
        let credential = wire::credential(raw).map_err(|_| invalid(reason::MALFORMED))?;
        let now = paygate_domain::unix_now();
        // The challenge: issued here, for this route's current charge, unexpired.
        let c = &credential.challenge;
        let expires = c.expires.as_deref().and_then(unix_of);
        let ours = c.method == wire::METHOD
            && c.intent == wire::INTENT
            && c.realm == *self.realm
            && expires.is_some()
            && self
                .charge(entry, req)
                .is_some_and(|charge| *c.request == *charge.request)
            && c.issued_with(&self.secret);
        // A challenge this process cannot vouch for (altered, another route's, or issued
        // before a restart of a node without a shared secret), or too close to its end to be
        // settled: only the retry of a payment already taken for the same authorization goes
        // on, answered by that payment's record (so a request a crash cut after settlement is
        // served once, as for x402); any other is refused for its challenge.
        let expiring = expires.is_some_and(|e| e < now + SETTLE_MARGIN_SECS);
        let fail = |why: &'static str| match ours {
            true => invalid(why),
            false => invalid(reason::INVALID_CHALLENGE),
        };
        // The authorization: bound to the challenge, from the payer the source names.
        let auth: wire::Authorization = serde_json::from_value(credential.payload.clone())
            .map_err(|_| fail(reason::INVALID_PAYLOAD))?;
        if auth.kind != "authorization" {
            return Err(fail(reason::INVALID_PAYLOAD));
        }
        let bound = auth
            .nonce
            .parse::<alloy_primitives::B256>()
            .is_ok_and(|n| n == wire::challenge_nonce(&c.id, &c.realm));
        let chain_id = req.network.config.chain_id;
        let source_ok = credential.source.as_deref().is_none_or(|s| {
            s.eq_ignore_ascii_case(&format!("did:pkh:eip155:{chain_id}:{}", auth.from))
        });
        if !bound || !source_ok {
            return Err(fail(reason::VERIFICATION_FAILED));
        }
        // Taken as the x402 `exact` payment it is: the same checks of recipient, amount, time
        // window and signature, the same replay guard and settlement.
        let x402 = serde_json::json!({
            "x402Version": 2,
            "accepted": req.to_v2(),
            "payload": {
                "signature": auth.signature,
                "authorization": {
                    "from": auth.from, "to": auth.to, "value": auth.value,
                    "validAfter": auth.valid_after, "validBefore": auth.valid_before,
                    "nonce": auth.nonce,
                },
            },
        });
        let json = serde_json::to_vec(&x402).unwrap_or_default();
        let mut verified = svc
            .verify_header_json(&json, ProtocolVersion::V2, req, now)
            .map_err(|r| {
                if ours {
                    refused(r)
                } else {
                    fail(reason::INVALID_CHALLENGE)
                }
            })?
            .came_in(PaymentProtocol::Mpp);
        if expiring || !ours {
            verified = verified.only_as_retry();
        }
        // No payment taken for a challenge that is not ours: refused for the challenge.
        let taken = |r: Refusal| match r {
            Refusal::Rejected(Rejection::Expired) if !ours => fail(reason::INVALID_CHALLENGE),
            r => refused(r),
        };
        take_and_admit(svc, p, gate, verified, &taken, receipt).await
    }
}
