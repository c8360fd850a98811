//! `upto` (x402's usage-capped payment): the payer signs one Permit2 authorization for the
//! route's price as a ceiling; paygate verifies it (locally, then the approval, balance and a
//! simulated settlement through the facilitator), reserves its nonce, forwards, and settles what
//! the origin states the call cost (`X-Paygate-Charge`, at most the ceiling) once it answered.
//!
//! Reservation semantics (README "Usage-capped payments"): the nonce is reserved before
//! forwarding, so the same authorization is never served twice. The charge is settled at the
//! answer's head, before any of its body reaches the caller; if that settlement is refused the
//! caller gets the refusal (a `402`, nothing charged) instead of the answer. A streamed answer
//! whose charge comes in a trailer is settled at its end: a refusal then is the seller's loss,
//! logged. A charge of zero (the origin says so, answers 400 or more, or never answers) sends
//! no transaction and keeps the nonce spent. A crash between forwarding and settling leaves the
//! reservation to reconciliation, which closes it unpaid once the authorization's deadline has
//! passed (only this deployment's relayer can settle it, so nothing else can land).

use super::schemes::{
    usage_charge, Admission, Admitted, Answered, Gate, Held, PaidRequest, Receipt, Scheme,
    Unadmitted, UptoAdmitted, UptoStage,
};
use super::{Charge, PaymentService, Refusal, Reserve};
use paygate_domain::model::{GatewayPayment, PaymentStatus, PaymentTransfer, Pricing};
use paygate_x402::facilitator::PaymentRequest;
use paygate_x402::money::UsdcAmount;
use paygate_x402::payment::{PaymentPayload, ProtocolVersion};
use paygate_x402::verify::Rejection;

/// `upto`: one Permit2 authorization per request, settled for the origin's stated charge.
pub(crate) struct Upto<'a>(pub(crate) &'a PaymentService);

impl Scheme for Upto<'_> {
    type Payload = PaymentPayload;

    fn payload(&self, req: &PaidRequest<'_>) -> Option<PaymentPayload> {
        // A v2 scheme; a cheap look for its name before the payload is parsed.
        if req.version != ProtocolVersion::V2 || !contains(req.json, b"\"upto\"") {
            return None;
        }
        let p = PaymentPayload::from_json(req.json, ProtocolVersion::V2).ok()?;
        (p.scheme() == paygate_x402::UPTO_SCHEME).then_some(p)
    }

    async fn admit<G: Gate>(
        &self,
        req: &PaidRequest<'_>,
        payload: PaymentPayload,
        gate: &G,
    ) -> Result<Admission, Unadmitted<G::Stop>> {
        let svc = self.0;
        let (requirements, challenge) = req.entry.payment.as_ref().ok_or(Refusal::Internal)?;
        let Some(facilitator) = challenge.offer.upto else {
            return Err(Refusal::Rejected(Rejection::UnsupportedScheme).into());
        };
        let now = paygate_domain::unix_now();
        let v = svc.check(payload, requirements, now, false, Some(facilitator))?;
        gate.payer(&v.payer()).map_err(Unadmitted::Stopped)?;
        let upstream = gate.upstream(true).await?;
        let charge = Charge {
            org_id: req.org_id,
            route_id: &req.entry.route.id,
            requirements,
            plan_limit: Some(req.plan_limit),
            redeliver: false,
        };
        let mut record = GatewayPayment::reserved(
            req.org_id,
            &req.entry.route.id,
            requirements,
            &v.auth,
            v.verify_us,
        );
        record.transfer = PaymentTransfer::Upto;
        let slot = match svc.reserve(&mut record, &charge).await? {
            Reserve::Fresh(slot) => slot,
            // The same authorization again: being settled, or spent.
            Reserve::Held(held, _) if held.status.is_open() => {
                return Err(Refusal::StillSettling.into())
            }
            Reserve::Held(..) => return Err(Refusal::Rejected(Rejection::NonceReplay).into()),
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
            return Err(refusal.into());
        }
        Ok(Admission {
            upstream,
            payment: Admitted::Upto(Box::new(UptoAdmitted {
                stage: UptoStage::Held(Held { v, record, slot }),
                requirements: requirements.clone(),
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
        match answered {
            Answered::Head { status, stated } => {
                let Some(Admitted::Upto(u)) = slot.as_mut() else {
                    return Ok(None);
                };
                let route = &u.entry.route;
                if status < 400
                    && stated.is_none()
                    && route.streaming
                    && route.pricing == Pricing::Usage
                {
                    // Its trailer may state the charge: settled when the answer has passed.
                    u.at_end = true;
                    return Ok(None);
                }
                let charge = if status >= 400 {
                    0
                } else {
                    self.charge(u, stated)
                };
                match self.0.settle_upto(u, charge).await {
                    Ok(receipt) => Ok(Some(receipt)),
                    Err(r) => {
                        // The answer is replaced by the refusal; nothing was charged.
                        *slot = None;
                        Err(r)
                    }
                }
            }
            Answered::End {
                completed,
                upstream_status,
                stated,
                ..
            } => {
                let Some(Admitted::Upto(mut u)) = slot.take() else {
                    return Ok(None);
                };
                let mut receipt = None;
                if !matches!(u.stage, UptoStage::Paid(_)) {
                    // Waited for a trailer, or never answered: cut short charges nothing.
                    let charge = if u.at_end && completed {
                        self.charge(&u, stated.as_ref())
                    } else {
                        0
                    };
                    match self.0.settle_upto(&mut u, charge).await {
                        Ok(r) => receipt = Some(r),
                        Err(e) => {
                            tracing::warn!(error = %e, route = %u.entry.id, "an upto charge stated at the end of a streamed answer was not settled");
                        }
                    }
                }
                if let UptoStage::Paid(paid) = u.take_stage() {
                    self.0.delivered(paid, upstream_status);
                }
                Ok(receipt)
            }
        }
    }
}

impl Upto<'_> {
    /// What the origin's `stated` charge comes to, in USDC base units (at most the price).
    fn charge(&self, u: &UptoAdmitted, stated: Option<&http::HeaderValue>) -> u64 {
        let price = u128::from(u.requirements.amount.0);
        let charge = match u.entry.route.pricing {
            Pricing::Fixed => price,
            Pricing::Usage => usage_charge(stated, price, &u.entry.id),
        };
        u64::try_from(charge).unwrap_or(u.requirements.amount.0)
    }
}

impl PaymentService {
    /// Settles an admitted `upto` authorization for `charge` (USDC base units): no transaction
    /// for zero (the nonce stays spent), else the upto proxy's `settle` for the charge in the
    /// token's units, the record carrying the charge before anything is sent (so reconciliation
    /// of a crash records what moved). Returns the receipt; the settled payment waits in `u`
    /// for the end of the answer.
    async fn settle_upto(&self, u: &mut UptoAdmitted, charge: u64) -> Result<Receipt, Refusal> {
        let Held {
            v,
            mut record,
            mut slot,
        } = match u.take_stage() {
            UptoStage::Held(held) => held,
            other => {
                u.stage = other;
                return Err(Refusal::Internal);
            }
        };
        let version = v.payment.version();
        record.amount = UsdcAmount(charge);
        record.updated_at = paygate_domain::now_rfc3339();
        if charge == 0 {
            record.status = PaymentStatus::Settled;
            if let Err(e) = self.store.update_payment(&record).await {
                tracing::warn!(payment = %record.id, error = %e, "could not record a zero upto charge");
            }
        } else {
            if self.facilitator.is_none() {
                return Err(Refusal::NoFacilitator);
            }
            if let Err(e) = self.store.update_payment(&record).await {
                // Nothing sent: the reservation stays, reconciliation closes it unpaid.
                return Err(Refusal::store(&e, "could not record an upto charge"));
            }
            let mut req = u.requirements.clone();
            req.amount = record.amount;
            let preq = PaymentRequest {
                payment: &v.payment,
                auth: &v.auth,
                requirements: &req,
            };
            slot = self.settle_with_slot(&mut record, &preq, slot).await?;
            tracing::info!(payment = %record.id, charge, "upto payment settled");
        }
        if let Some(events) = &self.events {
            events.payment_settled(&record);
        }
        let paid = super::paid(version, &u.requirements, record, slot);
        let receipt = Receipt {
            header: paid.receipt_header,
            value: paid.receipt.clone(),
            charged: charge,
        };
        u.stage = UptoStage::Paid(paid);
        Ok(receipt)
    }
}

/// Whether `needle` occurs in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}
