//! `upto` (x402's usage-capped payment): the payer signs one Permit2 authorization for the
//! route's price as a ceiling; paygate verifies it (locally, then the approval, balance and a
//! simulated settlement through the facilitator), reserves its nonce, forwards, and settles what
//! the origin states the call cost (`X-Paygate-Charge`, at most the ceiling) once it answered.
//!
//! Reservation semantics (docs/ways-of-paying.md, "Usage-capped single payments"): the nonce is reserved before
//! forwarding, so the same authorization is never served twice. The charge is settled at the
//! answer's head, before any of its body reaches the caller; if that settlement is refused the
//! caller gets the refusal (a `402`, nothing charged) instead of the answer. A streamed answer
//! whose charge comes in a trailer is settled at its end: a refusal then is the seller's loss,
//! logged. A charge of zero (the origin says so, answers 400 or more, or never answers) sends
//! no transaction and keeps the nonce spent. A crash between forwarding and settling leaves the
//! reservation to reconciliation, which closes it unpaid once the authorization's deadline has
//! passed (only this deployment's relayer can settle it, so nothing else can land).

mod for_servers;

use super::usage::{charge_of, stated_at_end};
use crate::payments::for_servers::ForServer;
use crate::payments::way::Payments;
use crate::payments::way::{
    Admission, Admitted, Difference, Ended, Gate, Held, OnChain, Parts, Paying, Receipt, Serving,
    Step, Terms, Unadmitted, Way,
};
use crate::payments::{Charge, Paid, Refusal, Reserve, Verified};
use crate::route_entry::RouteEntry;
use crate::usage::Slot;
use http::HeaderValue;
use paygate_domain::model::{GatewayPayment, PaymentStatus, PaymentTransfer, Route, Scheme};
use paygate_x402::facilitator::embedded;
use paygate_x402::facilitator::wire::{SettleResponse, SupportedKindWire as Kind, VerifyResponse};
use paygate_x402::facilitator::PaymentRequest;
use paygate_x402::money::UsdcAmount;
use paygate_x402::network::Network;
use paygate_x402::payment::{PaymentPayload, ProtocolVersion};
use paygate_x402::verify::Rejection;
use paygate_x402::{Extensions, Offered, PaymentRequirements};
use std::sync::Arc;

/// `upto`: one Permit2 authorization per request, settled for the origin's stated charge.
pub(crate) struct Upto;

/// `upto` as served: the deployment's operator, which payers let settle their authorizations
/// (for the facilitator API; a route's requirement names it itself).
struct Capped {
    operator: Option<alloy_primitives::Address>,
}

#[async_trait::async_trait]
impl Way for Upto {
    fn build(&self, parts: &Parts) -> Option<Box<dyn Serving>> {
        Some(Box::new(Capped {
            operator: parts.terms.0.upto(),
        }))
    }

    fn takes(&self, scheme: &str, version: ProtocolVersion) -> bool {
        scheme == paygate_x402::UPTO_SCHEME && version == ProtocolVersion::V2
    }

    /// The facilitator `upto` payments name in their Permit2 witness: the deployment's
    /// operator (the only one that settles them here), where this deployment relays.
    fn terms(&self, cfg: &paygate_config::Config) -> Option<Offered> {
        super::super::way::deployment_operator(cfg).map(Offered::Upto)
    }

    fn offered(&self, _route: &Route, scheme: Scheme, terms: &Terms) -> Option<Offered> {
        (scheme == Scheme::Upto)
            .then(|| terms.0.upto())
            .flatten()
            .map(Offered::Upto)
    }

    fn declare(&self, route: &Route, ext: &mut Extensions) {
        // USDC implements EIP-2612: a payer that never approved Permit2 sends its permit.
        if route.schemes.contains(&Scheme::Upto) && route.token.eq_ignore_ascii_case("USDC") {
            ext.eip2612_gas_sponsoring = Some(paygate_x402::gas_sponsoring::declaration());
        }
    }

    fn reconciles(&self, p: &GatewayPayment) -> bool {
        p.transfer == PaymentTransfer::Upto
    }

    /// Permit2's `nonceBitmap` says whether the charge moved.
    async fn reconcile(
        &self,
        p: &GatewayPayment,
        at: &OnChain<'_>,
    ) -> Result<Option<GatewayPayment>, String> {
        Ok(at.by_authorization(p, spent(p, at).await?))
    }

    /// Permit2's `nonceBitmap`: spent exactly when a charge above zero was settled.
    async fn audit(
        &self,
        p: &GatewayPayment,
        at: &OnChain<'_>,
    ) -> Result<Option<Difference>, String> {
        let expected = Difference::expected_spent(p);
        Ok(Difference::spent(p, "upto", spent(p, at).await?, expected))
    }
}

#[async_trait::async_trait]
impl Serving for Capped {
    /// `upto` (v2) on every network that settles now, naming the facilitator payers let
    /// settle, where this deployment has one.
    fn facilitator_kinds(&self, networks: &[&Network]) -> Vec<Kind> {
        let Some(operator) = self.operator else {
            return Vec::new();
        };
        let extra = serde_json::json!({ "facilitatorAddress": operator.to_checksum(None) });
        networks
            .iter()
            .map(|n| Kind {
                x402_version: 2,
                scheme: paygate_x402::UPTO_SCHEME.into(),
                network: n.caip2.clone(),
                extra: Some(extra.clone()),
            })
            .collect()
    }

    async fn verify_for(
        &self,
        svc: &Payments,
        call: &ForServer<'_>,
    ) -> Result<VerifyResponse, Refusal> {
        self.verify_call(svc, call).await
    }

    async fn settle_for(
        &self,
        svc: &Payments,
        call: &ForServer<'_>,
    ) -> Result<SettleResponse, Refusal> {
        self.settle_call(svc, call).await
    }

    async fn admit(
        &self,
        svc: &Payments,
        p: &Paying<'_>,
        gate: &dyn Gate,
    ) -> Result<Admission, Unadmitted> {
        let refused = |r: Refusal| p.refused(svc, r);
        let requirements = p.requirements;
        let Some(facilitator) = p.challenge.offer.upto() else {
            return Err(refused(Refusal::Rejected(Rejection::UnsupportedScheme)));
        };
        let payload =
            PaymentPayload::from_json(p.json, p.version).map_err(|e| refused(e.into()))?;
        let now = paygate_domain::unix_now();
        // Too late to settle passes as `expiring`: only a retry of a payment taken for it is
        // answered (below), as for `exact`.
        let mut v = svc
            .check(payload, requirements, now, true, Some(facilitator))
            .map_err(refused)?;
        // A smart wallet's signature is asked of it before the payer is counted or anything
        // reserved.
        svc.ask_wallet(&mut v, requirements)
            .await
            .map_err(refused)?;
        gate.payer(&v.payer()).map_err(refused)?;
        let upstream = gate.upstream(true).await.map_err(refused)?;
        let entry = p.req.entry;
        let charge = Charge {
            org_id: p.req.org_id,
            route_id: &entry.route.id,
            requirements,
            plan_limit: Some(p.req.plan_limit),
            redeliver: false,
        };
        let mut record = GatewayPayment::reserved(
            p.req.org_id,
            &entry.route.id,
            requirements,
            &v.auth,
            v.verify_us,
        );
        record.transfer = PaymentTransfer::Upto;
        if v.expiring {
            let held = svc
                .store
                .payment_for_nonce(&record.nonce_key)
                .await
                .map_err(|e| refused(Refusal::store(&e, "could not read a retried payment")))?;
            return match held {
                Some(h) if h.status.is_open() => Err(refused(Refusal::StillSettling)),
                Some(h) if h.redeemable_by(&charged(&record, &h)) => {
                    let version = v.payment.version();
                    served_again(svc, version, requirements, entry, upstream, &record, h)
                        .await
                        .map_err(refused)
                }
                Some(_) => Err(refused(Refusal::Rejected(Rejection::NonceReplay))),
                None => Err(refused(Refusal::Rejected(Rejection::Expired))),
            };
        }
        let slot = match svc.reserve(&mut record, &charge).await.map_err(refused)? {
            Reserve::Fresh(slot) => slot,
            // The same authorization again: being settled, or spent.
            Reserve::Held(held, _) if held.status.is_open() => {
                return Err(refused(Refusal::StillSettling))
            }
            // Charged by reconciliation after a crash cut its answer: its retry is served once
            // (as an `exact` payment's is), charging nothing more.
            // (The charge, not the ceiling, is its amount: the authorization, keyed by its
            // nonce, is the same.)
            Reserve::Held(held, _) if held.redeemable_by(&charged(&record, &held)) => {
                let version = v.payment.version();
                return served_again(svc, version, requirements, entry, upstream, &record, *held)
                    .await
                    .map_err(refused);
            }
            Reserve::Held(..) => return Err(refused(Refusal::Rejected(Rejection::NonceReplay))),
        };
        // Approval, balance and a simulated settlement, before the origin works for it (after
        // the replay guard, so a spent authorization is told so); refused, the nonce is freed.
        if let Err(refusal) = svc.verify_on_chain(&v, requirements).await {
            record.status = PaymentStatus::Failed;
            record.failure = Some(refusal.to_string());
            record.updated_at = paygate_domain::now_rfc3339();
            if let Err(e) = svc.store.release_payment(&record).await {
                tracing::warn!(payment = %record.id, error = %e, "could not free a refused upto reservation");
            }
            return Err(refused(refusal));
        }
        Ok(Admission {
            upstream,
            payment: Admitted(Box::new(UptoHeld {
                stage: UptoStage::Held(Box::new(HeldAuth { v, record, slot })),
                requirements: requirements.clone(),
                entry: entry.clone(),
                at_end: false,
            })),
            receipt: None,
        })
    }
}

/// Whether `p`'s Permit2 nonce was used on chain.
async fn spent(p: &GatewayPayment, at: &OnChain<'_>) -> Result<bool, String> {
    let (from, nonce) = OnChain::authorization_of(p)?;
    let used = embedded::permit2_nonce_used(at.rpc()?, from, nonce).await;
    used.map_err(|e| e.to_string())
}

/// The retry `record` of `held`, charged by reconciliation after a crash cut its answer:
/// claimed once, then served, charging nothing more.
async fn served_again(
    svc: &Payments,
    version: ProtocolVersion,
    requirements: &PaymentRequirements,
    entry: &Arc<RouteEntry>,
    upstream: crate::payments::way::Upstream,
    record: &GatewayPayment,
    held: GatewayPayment,
) -> Result<Admission, Refusal> {
    let retry = charged(record, &held);
    let claimed = svc.retried(&retry, held, false).await?;
    let paid = svc.paid(version, requirements, claimed, None);
    let receipt = Receipt::of(&paid);
    Ok(Admission {
        upstream,
        payment: Admitted(Box::new(UptoHeld {
            stage: UptoStage::Paid(Box::new(paid)),
            requirements: requirements.clone(),
            entry: entry.clone(),
            at_end: false,
        })),
        receipt: Some(receipt),
    })
}

/// `retry` (an authorization presented again, for its ceiling) as the charge `held` recorded.
fn charged(retry: &GatewayPayment, held: &GatewayPayment) -> GatewayPayment {
    let mut r = retry.clone();
    r.amount = held.amount;
    r
}

/// An `upto` authorization admitted for a request: reserved until its charge is settled, then
/// settled until the answer is over.
struct UptoHeld {
    stage: UptoStage,
    requirements: PaymentRequirements,
    entry: Arc<RouteEntry>,
    /// A streamed answer whose head stated no charge: settled at its end.
    at_end: bool,
}

/// The reservation, until it is settled.
struct HeldAuth {
    v: Verified,
    record: GatewayPayment,
    slot: Option<Slot>,
}

/// Where an admitted `upto` authorization stands.
enum UptoStage {
    /// Reserved, until its charge is settled.
    Held(Box<HeldAuth>),
    /// Settled, until the answer is over.
    Paid(Box<Paid>),
    /// Its settlement failed, or its answer was told over: nothing is left to do.
    Done,
}

impl UptoHeld {
    /// The payment's record: reserved, or settled (none once a settlement failed).
    fn record(&self) -> Option<&GatewayPayment> {
        match &self.stage {
            UptoStage::Held(h) => Some(&h.record),
            UptoStage::Paid(p) => Some(&p.record),
            UptoStage::Done => None,
        }
    }

    /// The stage, taken out: `Done` is left.
    fn take_stage(&mut self) -> UptoStage {
        std::mem::replace(&mut self.stage, UptoStage::Done)
    }

    /// What the origin's `stated` charge comes to, in USDC base units (at most the price).
    fn charge(&self, stated: Option<&HeaderValue>) -> u64 {
        let price = u128::from(self.requirements.amount.0);
        u64::try_from(charge_of(&self.entry, price, stated)).unwrap_or(self.requirements.amount.0)
    }

    /// Settles the admitted authorization for `charge` (USDC base units): no transaction for
    /// zero (the nonce stays spent), else the upto proxy's `settle` for the charge in the
    /// token's units, the record carrying the charge before anything is sent (so
    /// reconciliation of a crash records what moved). Returns the receipt; the settled payment
    /// waits in `stage` for the end of the answer.
    async fn settle(&mut self, svc: &Payments, charge: u64) -> Result<Receipt, Refusal> {
        let HeldAuth {
            v,
            mut record,
            mut slot,
        } = match self.take_stage() {
            UptoStage::Held(held) => *held,
            other => {
                self.stage = other;
                return Err(Refusal::Internal);
            }
        };
        let version = v.payment.version();
        record.amount = UsdcAmount(charge);
        record.updated_at = paygate_domain::now_rfc3339();
        if charge == 0 {
            record.status = PaymentStatus::Settled;
            if let Err(e) = svc.store.update_payment(&record).await {
                tracing::warn!(payment = %record.id, error = %e, "could not record a zero upto charge");
            }
        } else {
            if svc.facilitator.is_none() {
                return Err(Refusal::NoFacilitator);
            }
            if let Err(e) = svc.store.update_payment(&record).await {
                // Nothing sent: the reservation stays, reconciliation closes it unpaid.
                return Err(Refusal::store(&e, "could not record an upto charge"));
            }
            let mut req = self.requirements.clone();
            req.amount = record.amount;
            let preq = PaymentRequest {
                payment: &v.payment,
                auth: &v.auth,
                requirements: &req,
            };
            slot = svc.settle_with_slot(&mut record, &preq, slot).await?;
            tracing::info!(payment = %record.id, charge, "upto payment settled");
        }
        if let Some(events) = &svc.events {
            events.payment_settled(&record);
        }
        let paid = svc.paid(version, &self.requirements, record, slot);
        let receipt = Receipt::of(&paid);
        self.stage = UptoStage::Paid(Box::new(paid));
        Ok(receipt)
    }
}

#[async_trait::async_trait]
impl Held for UptoHeld {
    fn label(&self) -> &'static str {
        "UPTO"
    }

    fn payment_id(&self) -> Option<&str> {
        self.record().map(|r| r.id.as_str())
    }

    fn settle_ms(&self) -> Option<u64> {
        self.record().and_then(|r| r.settle_ms)
    }

    async fn head(&mut self, svc: &Payments, status: u16, stated: Option<&HeaderValue>) -> Step {
        if matches!(self.stage, UptoStage::Paid(_)) {
            // Charged before this answer (a retry of a payment reconciliation settled).
            return Step::Wait(None);
        }
        let route = &self.entry.route;
        if status < 400 && stated_at_end(route, stated) {
            // Its trailer may state the charge: settled when the answer has passed.
            self.at_end = true;
            return Step::Wait(None);
        }
        let charge = if status >= 400 {
            0
        } else {
            self.charge(stated)
        };
        match self.settle(svc, charge).await {
            Ok(receipt) => Step::Wait(Some(receipt)),
            // The answer is replaced by the refusal; nothing was charged.
            Err(refusal) => Step::Refused(Box::new(svc.refused(
                &self.entry,
                refusal,
                ProtocolVersion::V2,
            ))),
        }
    }

    async fn end(
        mut self: Box<Self>,
        svc: &std::sync::Arc<Payments>,
        end: Ended,
    ) -> Option<Receipt> {
        let mut receipt = None;
        if !matches!(self.stage, UptoStage::Paid(_)) {
            // Waited for a trailer, or never answered: cut short charges nothing.
            let charge = if self.at_end && end.completed {
                self.charge(end.stated.as_ref())
            } else {
                0
            };
            match self.settle(svc, charge).await {
                Ok(r) => receipt = Some(r),
                Err(e) => {
                    tracing::warn!(error = %e, route = %self.entry.id, "an upto charge stated at the end of a streamed answer was not settled");
                }
            }
        }
        if let UptoStage::Paid(paid) = self.take_stage() {
            svc.delivered(*paid, end.upstream_status);
        }
        receipt
    }
}
