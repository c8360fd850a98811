//! `auth-capture` for other x402 servers (the facilitator API). `/supported` names the escrow
//! terms a server puts in its requirement (`extra`: the deployment's operator as capture
//! authorizer and fee recipient, no fee, the escrow); the server picks its own deadlines.
//! `/verify` checks the payer's authorization against the caller's requirement in the
//! scheme's order, its deadlines exactly the requirement's; `/settle` collects it with the
//! escrow's `charge` (held and captured at once: the server settles once it served, as it
//! would `exact`), recorded under the calling organisation, refundable through
//! `POST /api/payments/{id}/refund` until the requirement's refund deadline, funded by the
//! receiver as every refund is. A settle asked again for a payment already charged answers
//! its settlement.

use super::{reserved, send_hold, Collect, Escrowing};
use crate::payments::for_servers::ForServer;
use crate::payments::for_servers::{reserve_for, succeeded, verdict};
use crate::payments::way::Payments;
use crate::payments::Refusal;
use paygate_domain::model::{PaymentStatus, FACILITATOR_API_ROUTE};
use paygate_x402::auth_capture::{self, EscrowTerms, Escrowed};
use paygate_x402::facilitator::wire::{SettleResponse, SupportedKindWire as Kind, VerifyResponse};
use paygate_x402::network::Network;
use paygate_x402::verify::Rejection;
use paygate_x402::EscrowExtra;
use paygate_x402::PaymentRequirements;

impl Escrowing {
    /// `auth-capture` (v2) on every network that settles now, with the escrow terms a
    /// requirement must carry, where this deployment operates the escrow.
    pub(super) fn kinds(&self, networks: &[&Network]) -> Vec<Kind> {
        let Some(operator) = self.operator else {
            return Vec::new();
        };
        let operator = operator.to_checksum(None);
        let extra = serde_json::json!({
            "captureAuthorizer": operator,
            "feeRecipient": operator,
            "minFeeBps": 0,
            "maxFeeBps": 0,
            "authCaptureEscrow": auth_capture::ESCROW_ADDRESS.to_checksum(None),
        });
        networks
            .iter()
            .map(|n| Kind {
                x402_version: 2,
                scheme: auth_capture::SCHEME.into(),
                network: n.caip2.clone(),
                extra: Some(extra.clone()),
            })
            .collect()
    }

    /// The caller's requirement and the payment verified against it: the deployment's
    /// operator, and the deadlines the requirement states (the caller offered them).
    async fn checked(
        &self,
        svc: &Payments,
        call: &ForServer<'_>,
    ) -> Result<(PaymentRequirements, Escrowed, u64), Refusal> {
        let operator = self
            .operator
            .ok_or(Refusal::Rejected(Rejection::UnsupportedScheme))?;
        let req = call.requirements(svc, auth_capture::SCHEME)?;
        let offered: EscrowExtra =
            serde_json::from_value(call.req.payment_requirements["extra"].clone())
                .map_err(|_| Refusal::Invalid("invalid_payment_requirements"))?;
        let (Some(capture), Some(refund)) = (offered.capture_deadline, offered.refund_deadline)
        else {
            return Err(Refusal::Invalid("invalid_payment_requirements"));
        };
        let now = paygate_domain::unix_now();
        let terms = EscrowTerms {
            operator,
            capture_window: capture.saturating_sub(now),
            refund_window: refund.saturating_sub(capture),
        };
        let t0 = std::time::Instant::now();
        let escrowed =
            auth_capture::verify(&call.payment()?, &req, &terms, now).map_err(Refusal::Rejected)?;
        let info = &escrowed.info;
        if info.authorizationExpiry.to::<u64>() != capture
            || info.refundExpiry.to::<u64>() != refund
        {
            return Err(Refusal::Rejected(Rejection::DeadlineOrdering));
        }
        if let Some(digest) = escrowed.wallet_check {
            let chain_id = req.network.config.chain_id;
            svc.wallet_must_accept(
                chain_id,
                &escrowed.auth,
                digest,
                Rejection::InvalidSignature,
            )
            .await?;
        }
        let verify_us = t0.elapsed().as_micros() as u64;
        Ok((req, escrowed, verify_us))
    }

    pub(super) async fn verify_call(
        &self,
        svc: &Payments,
        call: &ForServer<'_>,
    ) -> Result<VerifyResponse, Refusal> {
        let (_, escrowed, _) = self.checked(svc, call).await?;
        Ok(verdict(Some(escrowed.auth.from.to_checksum(None)), None))
    }

    pub(super) async fn settle_call(
        &self,
        svc: &Payments,
        call: &ForServer<'_>,
    ) -> Result<SettleResponse, Refusal> {
        let (req, escrowed, verify_us) = self.checked(svc, call).await?;
        let mut record = reserved(
            call.org_id,
            FACILITATOR_API_ROUTE,
            &req,
            &escrowed,
            verify_us,
        );
        if let Some(held) = reserve_for(svc, call, &mut record, &req, |_| true).await? {
            return Ok(succeeded(call, &req, &held));
        }
        let chain_id = req.network.config.chain_id;
        let sent = send_hold(
            svc,
            self.chain.as_ref(),
            chain_id,
            &escrowed,
            &mut record,
            None,
            Collect::Charge,
        );
        sent.await?;
        record.status = PaymentStatus::Settled;
        record.transaction = record.escrow.as_ref().and_then(|e| e.authorized_tx.clone());
        if let Some(e) = record.escrow.as_mut() {
            e.captured = record.amount;
        }
        record.updated_at = paygate_domain::now_rfc3339();
        if let Err(e) = svc.store.update_payment(&record).await {
            // Charged on chain: reconciliation records it from the escrow.
            tracing::warn!(payment = %record.id, error = %e, "could not record an escrow charge");
        }
        tracing::info!(payment = %record.id, "auth-capture payment charged for another server");
        if let Some(events) = &svc.events {
            events.payment_settled(&record);
        }
        Ok(succeeded(call, &req, &record))
    }
}
