//! `exact`: one on-chain settlement per request, taken before the request is forwarded. The
//! payment is an EIP-3009 authorization, or a Permit2 transfer for a token without EIP-3009
//! (the route's token decides which; both map onto one signed authorization, so reservation,
//! replay guard, receipts and reconciliation are shared). Verified locally, its x402 payment
//! identifier claimed, the upstream reached once, then settled; the answer is kept under the
//! identifier at its end.

use crate::payments::for_servers::ForServer;
use crate::payments::for_servers::{failed, verdict};
use crate::payments::ids::{IdClaim, PaymentKey};
use crate::payments::way::Payments;
use crate::payments::way::{
    Admission, Admitted, Difference, Ended, Gate, Held, OnChain, Parts, Paying, Receipt, Served,
    Serving, Step, Terms, Unadmitted, Way,
};
use crate::payments::{Charge, Paid, Refusal};
use http::HeaderValue;
use paygate_domain::model::FACILITATOR_API_ROUTE;
use paygate_domain::model::{GatewayPayment, PaidAnswer, PaymentTransfer, Route, Scheme};
use paygate_x402::facilitator::embedded;
use paygate_x402::facilitator::wire::{SettleResponse, SupportedKindWire as Kind, VerifyResponse};
use paygate_x402::network::Network;
use paygate_x402::payment::ProtocolVersion;
use paygate_x402::verify::Rejection;
use paygate_x402::{Extensions, Offered};

pub(crate) struct Exact;

#[async_trait::async_trait]
impl Way for Exact {
    fn build(&self, _parts: &Parts) -> Option<Box<dyn Serving>> {
        Some(Box::new(Exact))
    }

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

#[async_trait::async_trait]
impl Serving for Exact {
    /// `exact` in both versions of every network that settles now.
    fn facilitator_kinds(&self, networks: &[&Network]) -> Vec<Kind> {
        let kinds = paygate_x402::facilitator::SupportedKind::exact(networks.iter().copied());
        kinds.into_iter().map(Kind::from).collect()
    }

    /// Verified locally, then on chain (balance, nonce unused); nothing is reserved.
    async fn verify_for(
        &self,
        svc: &Payments,
        call: &ForServer<'_>,
    ) -> Result<VerifyResponse, Refusal> {
        let requirements = call.requirements(svc, "exact")?;
        let verified = svc.verify(call.payment()?, &requirements, paygate_domain::unix_now())?;
        let payer = Some(verified.payer().to_checksum(None));
        Ok(match svc.verify_on_chain(&verified, &requirements).await {
            Ok(_) => verdict(payer, None),
            Err(r) => verdict(payer, Some(r.x402_reason().ok_or(r)?)),
        })
    }

    /// Taken as a gateway request's payment is (the same replay guard, the same answer to a
    /// nonce already held), recorded under the calling organisation; no receipt names a
    /// resource the caller picked (the deployment signs receipts only for its own routes).
    async fn settle_for(
        &self,
        svc: &Payments,
        call: &ForServer<'_>,
    ) -> Result<SettleResponse, Refusal> {
        let requirements = call.requirements(svc, "exact")?;
        let verified = svc.verify(call.payment()?, &requirements, paygate_domain::unix_now())?;
        let payer = verified.payer().to_checksum(None);
        let charge = Charge {
            org_id: call.org_id,
            route_id: FACILITATOR_API_ROUTE,
            requirements: &requirements,
            plan_limit: None,
            redeliver: false,
        };
        match svc.take(verified, &charge).await {
            Ok(paid) => Ok(SettleResponse {
                success: true,
                error_reason: None,
                error_message: None,
                transaction: paid.record.transaction.clone().unwrap_or_default(),
                network: call.network(),
                payer: Some(payer),
                amount: None,
                extra: None,
                extensions: None,
            }),
            Err(r) => match r.x402_reason() {
                Some(reason) => Ok(failed(reason, call.network(), Some(payer))),
                None => Err(r),
            },
        }
    }

    async fn admit(
        &self,
        svc: &Payments,
        p: &Paying<'_>,
        gate: &dyn Gate,
    ) -> Result<Admission, Unadmitted> {
        let refused = |r: Refusal| p.refused(svc, r);
        if !p.challenge.offer.exact() {
            return Err(refused(Refusal::Rejected(Rejection::UnsupportedScheme)));
        }
        let now = paygate_domain::unix_now();
        let verified = svc
            .verify_header_json(p.json, p.version, p.requirements, now)
            .map_err(refused)?;
        take_and_admit(svc, p, gate, verified, &refused, Receipt::of).await
    }
}

/// Takes `verified` (an EIP-3009 or Permit2 authorization for `p`'s route) and admits the
/// request: its smart wallet asked, the payer's limit, its payment identifier claimed, the
/// upstream reached once, then settled and the ways told (an access window opened).
/// `refused` renders a refusal in the protocol the payment came in, `receipt` the answer's
/// receipt of the settled payment.
pub(crate) async fn take_and_admit(
    svc: &Payments,
    p: &Paying<'_>,
    gate: &dyn Gate,
    mut verified: crate::payments::Verified,
    refused: &(dyn Fn(Refusal) -> Unadmitted + Sync),
    receipt: fn(&Paid) -> Receipt,
) -> Result<Admission, Unadmitted> {
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
    svc.paid_for(entry, &paid.record).await;
    let receipt = receipt(&paid);
    Ok(Admission {
        upstream,
        payment: Admitted(Box::new(ExactHeld { paid, key })),
        receipt: Some(receipt),
    })
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

    fn protocol(&self) -> paygate_domain::model::PaymentProtocol {
        self.paid.record.protocol
    }

    fn keeps_answer(&self) -> bool {
        self.key.is_some()
    }

    async fn head(&mut self, _: &Payments, _: u16, _: Option<&HeaderValue>) -> Step {
        // Settled before forwarding: the head changes nothing.
        Step::Wait(None)
    }

    async fn end(self: Box<Self>, svc: &std::sync::Arc<Payments>, end: Ended) -> Option<Receipt> {
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
