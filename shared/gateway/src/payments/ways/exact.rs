//! `exact`: one on-chain settlement per request, taken before the request is forwarded. The
//! payment is an EIP-3009 authorization, or a Permit2 transfer for a token without EIP-3009
//! (the route's token decides which; both map onto one signed authorization, so reservation,
//! replay guard, receipts and reconciliation are shared). Verified locally, its x402 payment
//! identifier claimed, the upstream reached once, then settled; the answer is kept under the
//! identifier at its end.

use super::window;
use crate::payments::ids::{IdClaim, PaymentKey};
use crate::payments::way::{
    Admission, Admitted, Difference, Ended, Gate, Held, OnChain, Paying, Receipt, Served, Step,
    Terms, Unadmitted, Way,
};
use crate::payments::{Charge, Paid, PaymentService, Refusal};
use http::HeaderValue;
use paygate_domain::model::{GatewayPayment, PaidAnswer, PaymentTransfer, Route, Scheme};
use paygate_x402::facilitator::embedded;
use paygate_x402::payment::ProtocolVersion;
use paygate_x402::verify::Rejection;
use paygate_x402::{Extensions, Offered};

pub(crate) struct Exact;

#[async_trait::async_trait]
impl Way for Exact {
    fn takes(&self, scheme: &str, _version: ProtocolVersion) -> bool {
        scheme == "exact"
    }

    fn offered(&self, _route: &Route, scheme: Scheme, _terms: &Terms) -> Option<Offered> {
        (scheme == Scheme::Exact).then_some(Offered::Exact)
    }

    fn declare(&self, _route: &Route, ext: &mut Extensions) {
        // Retries under a payment identifier get the first answer back.
        ext.payment_identifier = Some(paygate_x402::extensions::payment_identifier_declaration());
    }

    async fn admit(
        &self,
        svc: &PaymentService,
        p: &Paying<'_>,
        gate: &dyn Gate,
    ) -> Result<Admission, Unadmitted> {
        let refused = |r: Refusal| p.refused(svc, r);
        if !p.challenge.offer.exact() {
            return Err(refused(Refusal::Rejected(Rejection::UnsupportedScheme)));
        }
        let now = paygate_domain::unix_now();
        let mut verified = svc
            .verify_header_json(p.json, p.version, p.requirements, now)
            .map_err(refused)?;
        // A smart wallet's signature is asked of it before the payer is counted.
        svc.ask_wallet(&mut verified, p.requirements)
            .await
            .map_err(refused)?;
        gate.payer(&verified.payer()).map_err(refused)?;
        let key = match svc
            .claim_id(p.req.org_id, &verified)
            .await
            .map_err(refused)?
        {
            IdClaim::Answered(kept) => return Err(Unadmitted::Served(Box::new(replayed(kept)))),
            IdClaim::Take(key) => key,
        };
        let upstream = gate.upstream(true).await.map_err(refused)?;
        let entry = p.req.entry;
        let charge = Charge {
            org_id: p.req.org_id,
            route_id: &entry.route.id,
            requirements: p.requirements,
            plan_limit: Some(p.req.plan_limit),
            redeliver: entry.route.origin_deduplicates,
        };
        let paid = svc.take(verified, &charge).await.map_err(refused)?;
        // Before forwarding: a crash after this keeps the window the payment bought.
        window::opened(svc, entry, &paid.record).await;
        let receipt = Receipt::of(&paid);
        Ok(Admission {
            upstream,
            payment: Admitted(Box::new(ExactHeld { paid, key })),
            receipt: Some(receipt),
        })
    }

    fn reconciles(&self, p: &GatewayPayment) -> bool {
        matches!(
            p.transfer,
            PaymentTransfer::Eip3009 | PaymentTransfer::Permit2
        )
    }

    /// The token's `authorizationState` (Permit2's `nonceBitmap` for a Permit2 payment) says
    /// whether the money moved.
    async fn reconcile(
        &self,
        p: &GatewayPayment,
        at: &OnChain<'_>,
    ) -> Result<Option<GatewayPayment>, String> {
        Ok(at.by_authorization(p, spent(p, at).await?))
    }

    /// The token's `authorizationState` (EIP-3009) or Permit2's nonce bitmap.
    async fn audit(
        &self,
        p: &GatewayPayment,
        at: &OnChain<'_>,
    ) -> Result<Option<Difference>, String> {
        let name = match p.transfer {
            PaymentTransfer::Permit2 => "permit2",
            _ => "eip3009",
        };
        let expected = Difference::expected_spent(p);
        Ok(Difference::spent(p, name, spent(p, at).await?, expected))
    }
}

/// Whether `p`'s authorization was used on chain (Permit2's nonce, or the token's EIP-3009
/// authorization state).
async fn spent(p: &GatewayPayment, at: &OnChain<'_>) -> Result<bool, String> {
    let (from, nonce) = OnChain::authorization_of(p)?;
    let rpc = at.rpc()?;
    let used = match p.transfer {
        PaymentTransfer::Permit2 => embedded::permit2_nonce_used(rpc, from, nonce).await,
        _ => {
            let token = paygate_x402::address::parse_address(&p.asset).unwrap_or_default();
            embedded::authorization_state(rpc, token, from, nonce).await
        }
    };
    used.map_err(|e| e.to_string())
}

/// The answer a payment got before under its identifier, given again: nothing is taken.
fn replayed(kept: PaidAnswer) -> Served {
    use base64::Engine;
    let body = base64::engine::general_purpose::STANDARD
        .decode(kept.body.as_bytes())
        .unwrap_or_default();
    Served {
        outcome: "PAYMENT_ID_REPLAY",
        status: kept.status,
        content_type: kept.content_type,
        body,
        receipt: (kept.receipt_header, kept.receipt),
        mark: Some(("x-paygate-replayed", "payment-identifier")),
    }
}

/// An `exact` payment settled for a request, and the identifier its answer is kept under.
struct ExactHeld {
    paid: Paid,
    key: Option<PaymentKey>,
}

#[async_trait::async_trait]
impl Held for ExactHeld {
    fn label(&self) -> &'static str {
        "PAID"
    }

    fn payment_id(&self) -> Option<&str> {
        Some(&self.paid.record.id)
    }

    fn settle_ms(&self) -> Option<u64> {
        let r = &self.paid.record;
        Some(r.settle_ms.unwrap_or(0) + r.verify_us / 1000)
    }

    fn keeps_answer(&self) -> bool {
        self.key.is_some()
    }

    async fn head(&mut self, _: &PaymentService, _: u16, _: Option<&HeaderValue>) -> Step {
        // Settled before forwarding: the head changes nothing.
        Step::Wait(None)
    }

    async fn end(self: Box<Self>, svc: &PaymentService, end: Ended) -> Option<Receipt> {
        let ExactHeld { paid, key } = *self;
        if let (Some(key), Some(body), Some(status), true) =
            (key, end.body, end.upstream_status, end.completed)
        {
            use base64::Engine;
            svc.keep_answer(
                key,
                PaidAnswer {
                    payment_id: paid.record.id.clone(),
                    status,
                    content_type: end.content_type,
                    body: base64::engine::general_purpose::STANDARD.encode(body),
                    receipt_header: paid.receipt_header.to_string(),
                    receipt: paid.receipt.clone(),
                },
            );
        }
        svc.delivered(paid, end.upstream_status);
        None
    }
}
