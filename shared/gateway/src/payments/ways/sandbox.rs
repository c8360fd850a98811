//! The public sandbox route (SPEC 1.8, "accepts test payments"): a payment is checked like any
//! on the route's requirements (signature, payee, amount, network, time window), then answered
//! with a fixed body and a receipt that says `sandbox: true` and carries no transaction.
//! Nothing is reserved, settled or counted against a plan; the same payment may be shown again
//! (it can never move money here), whatever the network's facilitator is doing.

use crate::payments::way::Payments;
use crate::payments::way::{
    Admission, Claim, Gate, PaidRequest, Parts, Paying, Served, Serving, Unadmitted, Way,
};
use crate::payments::Refusal;
use paygate_x402::facilitator::wire::{SandboxReceipt, SettleResponse};
use paygate_x402::verify::Rejection;

pub(crate) struct Sandbox;

#[async_trait::async_trait]
impl Way for Sandbox {
    fn build(&self, _parts: &Parts) -> Option<Box<dyn Serving>> {
        Some(Box::new(Sandbox))
    }
}

#[async_trait::async_trait]
impl Serving for Sandbox {
    fn claims(&self, req: &PaidRequest<'_>) -> Option<Claim> {
        req.entry.sandbox.then_some(Claim::Route)
    }

    async fn admit(
        &self,
        svc: &Payments,
        p: &Paying<'_>,
        _gate: &dyn Gate,
    ) -> Result<Admission, Unadmitted> {
        let refused = |r: Refusal| p.refused(svc, r);
        let requirements = p.requirements;
        let payment = paygate_x402::payment::PaymentPayload::from_json(p.json, p.version)
            .map_err(|e| refused(e.into()))?;
        let auth = payment.authorization().map_err(|e| refused(e.into()))?;
        let now = paygate_domain::unix_now();
        let signed = paygate_x402::verify::verify(&payment, &auth, requirements, now)
            .map_err(|r| refused(Refusal::Rejected(r)))?;
        if let paygate_x402::verify::Signed::ByWallet(digest) = signed {
            // Not the payer's key: valid only if its smart wallet says so (no chain, no wallet).
            let chain_id = requirements.network.config.chain_id;
            svc.wallet_must_accept(chain_id, &auth, digest, Rejection::InvalidSignature)
                .await
                .map_err(refused)?;
        }
        let network = requirements.network_name(p.version);
        let payer = auth.from.to_checksum(None);
        let receipt = SandboxReceipt {
            settle: SettleResponse {
                success: true,
                error_reason: None,
                error_message: None,
                transaction: String::new(),
                network: network.clone(),
                payer: Some(payer.clone()),
                amount: None,
                extra: None,
                extensions: None,
            },
            sandbox: true,
        };
        let body = SandboxAnswer {
            sandbox: true,
            message: "paygate sandbox: your test payment is valid. Nothing was settled and no \
                      money moved; a real route settles it on chain and answers with the API.",
            payer,
            network,
            amount: requirements.amount.to_string(),
        };
        use base64::Engine;
        Err(Unadmitted::Served(Box::new(Served {
            outcome: "SANDBOX_PAYMENT",
            status: 200,
            content_type: Some("application/json".into()),
            body: serde_json::to_vec(&body).unwrap_or_default(),
            receipt: (
                p.version.receipt_header().to_string(),
                base64::engine::general_purpose::STANDARD
                    .encode(serde_json::to_vec(&receipt).unwrap_or_default()),
            ),
            mark: Some(("x-paygate-sandbox", "true")),
        })))
    }
}

/// The sandbox route's answer body to a valid test payment.
#[derive(serde::Serialize)]
struct SandboxAnswer {
    sandbox: bool,
    message: &'static str,
    payer: String,
    network: String,
    amount: String,
}
