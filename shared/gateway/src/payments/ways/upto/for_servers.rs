//! `upto` for other x402 servers (the facilitator API), as `@x402/evm`'s upto facilitator
//! answers: `/supported` names the facilitator payers must let settle (`extra.
//! facilitatorAddress`: the deployment's operator); `/verify` checks the payer's Permit2
//! authorization against the requirement it accepted (its amount the ceiling) and the chain;
//! `/settle` settles the requirement's `amount`, at most that ceiling (zero moves nothing),
//! once per authorization, recorded under the calling organisation. A settle asked again for
//! an authorization already settled answers its settlement.

use super::Capped;
use crate::payments::for_servers::ForServer;
use crate::payments::for_servers::{reserve_for, succeeded, verdict};
use crate::payments::way::Payments;
use crate::payments::{Refusal, Verified};
use alloy_primitives::Address;
use paygate_domain::model::{
    GatewayPayment, PaymentStatus, PaymentTransfer, FACILITATOR_API_ROUTE,
};
use paygate_x402::facilitator::wire::{SettleResponse, VerifyResponse};
use paygate_x402::facilitator::PaymentRequest;
use paygate_x402::payment::PaymentPayload;
use paygate_x402::verify::Rejection;
use paygate_x402::PaymentRequirements;

impl Capped {
    /// The operator payers name, where this deployment settles `upto` at all.
    fn operator(&self) -> Result<Address, Refusal> {
        self.operator
            .ok_or(Refusal::Rejected(Rejection::UnsupportedScheme))
    }

    /// The payment and the requirement it accepted (the ceiling), verified locally against the
    /// deployment's operator; the caller's requirement must be that one but for its amount,
    /// which is at most the ceiling.
    fn checked(
        &self,
        svc: &Payments,
        call: &ForServer<'_>,
    ) -> Result<(Verified, PaymentRequirements, PaymentRequirements), Refusal> {
        let operator = self.operator()?;
        let asked = call.requirements(svc, paygate_x402::UPTO_SCHEME)?;
        let payment = call.payment()?;
        let PaymentPayload::V2(p) = &payment else {
            return Err(Refusal::Rejected(Rejection::UnsupportedScheme));
        };
        let accepted = serde_json::to_value(&p.accepted).unwrap_or_default();
        let ceiling = PaymentRequirements::from_wire_as(
            &accepted,
            call.version,
            svc.settleable().networks(),
            paygate_x402::UPTO_SCHEME,
        )
        .map_err(|e| Refusal::Invalid(e.reason()))?;
        let named = call.req.payment_requirements["extra"]["facilitatorAddress"]
            .as_str()
            .and_then(paygate_x402::address::parse_address);
        let same = asked.network.caip2 == ceiling.network.caip2
            && asked.network.config.asset == ceiling.network.config.asset
            && asked.pay_to == ceiling.pay_to
            && named == Some(operator);
        if !same {
            return Err(Refusal::Rejected(Rejection::RequirementsMismatch));
        }
        if asked.amount > ceiling.amount {
            return Err(Refusal::Invalid(
                "invalid_upto_evm_payload_settlement_exceeds_amount",
            ));
        }
        let now = paygate_domain::unix_now();
        let v = svc.check(payment, &ceiling, now, false, Some(operator))?;
        Ok((v, ceiling, asked))
    }

    pub(super) async fn verify_call(
        &self,
        svc: &Payments,
        call: &ForServer<'_>,
    ) -> Result<VerifyResponse, Refusal> {
        let (mut v, ceiling, _) = self.checked(svc, call)?;
        svc.ask_wallet(&mut v, &ceiling).await?;
        let payer = Some(v.payer().to_checksum(None));
        Ok(match svc.verify_on_chain(&v, &ceiling).await {
            Ok(_) => verdict(payer, None),
            Err(r) => verdict(payer, Some(r.x402_reason().ok_or(r)?)),
        })
    }

    pub(super) async fn settle_call(
        &self,
        svc: &Payments,
        call: &ForServer<'_>,
    ) -> Result<SettleResponse, Refusal> {
        let (mut v, ceiling, asked) = self.checked(svc, call)?;
        svc.ask_wallet(&mut v, &ceiling).await?;
        let mut record = GatewayPayment::reserved(
            call.org_id,
            FACILITATOR_API_ROUTE,
            &ceiling,
            &v.auth,
            v.verify_us,
        );
        record.transfer = PaymentTransfer::Upto;
        let same = |held: &GatewayPayment| held.amount == asked.amount;
        if let Some(held) = reserve_for(svc, call, &mut record, &ceiling, same).await? {
            return Ok(succeeded(call, &asked, &held));
        }
        // Approval, balance and a simulated settlement for the ceiling; refused, the nonce is
        // freed.
        if let Err(refusal) = svc.verify_on_chain(&v, &ceiling).await {
            record.status = PaymentStatus::Failed;
            record.failure = Some(refusal.to_string());
            record.updated_at = paygate_domain::now_rfc3339();
            if let Err(e) = svc.store.release_payment(&record).await {
                tracing::warn!(payment = %record.id, error = %e, "could not free a refused upto reservation");
            }
            return Err(refusal);
        }
        record.amount = asked.amount;
        record.updated_at = paygate_domain::now_rfc3339();
        if asked.amount.0 == 0 {
            // Nothing to move: the authorization is spent here, no transaction sent.
            record.status = PaymentStatus::Settled;
        }
        if let Err(e) = svc.store.update_payment(&record).await {
            // Nothing sent: the reservation stays, reconciliation closes it unpaid.
            return Err(Refusal::store(&e, "could not record an upto charge"));
        }
        if asked.amount.0 > 0 {
            let preq = PaymentRequest {
                payment: &v.payment,
                auth: &v.auth,
                requirements: &asked,
            };
            svc.settle_with_slot(&mut record, &preq, None).await?;
            tracing::info!(payment = %record.id, charge = record.amount.0, "upto payment settled for another server");
        }
        if let Some(events) = &svc.events {
            events.payment_settled(&record);
        }
        Ok(succeeded(call, &asked, &record))
    }
}
