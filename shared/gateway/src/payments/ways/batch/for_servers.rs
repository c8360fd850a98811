//! `batch-settlement` for other x402 servers, as the scheme's facilitator interface says:
//! `/verify` checks a client's `deposit`, `voucher` or `refund` payload against the caller's
//! requirements and the chain and answers the channel's figures in `extra`; `/settle` sends a
//! client's `deposit`, or a server-authored `claim`, `settle` or completed `refund` (carrying
//! the server's own receiver-authorizer signatures), through the relayer. The caller keeps its
//! channels' state itself: nothing is recorded in paygate's ledger.

use super::Channeled;
use crate::channels::facilitated::{Sent, ServerPayload};
use crate::channels::ChannelRefusal;
use crate::payments::for_servers::ForServer;
use crate::payments::way::Payments;
use crate::payments::Refusal;
use paygate_domain::unix_now;
use paygate_x402::batch::{ChannelPayloadWire, ChannelRejection};
use paygate_x402::facilitator::wire::{SettleResponse, VerifyResponse};
use paygate_x402::{BatchTerms, PaymentRequirements};

/// A channel refusal as another server is answered: the scheme's reason word where the payer
/// (or the caller) must change something, else the caller's error.
fn refused(r: ChannelRefusal) -> Refusal {
    match r.payment_required() {
        true => Refusal::Invalid(r.reason()),
        false => Refusal::Channel(r),
    }
}

/// The caller's requirements and channel terms.
fn requirements(
    svc: &Payments,
    call: &ForServer<'_>,
) -> Result<(PaymentRequirements, BatchTerms), Refusal> {
    let networks = svc.settleable().networks();
    PaymentRequirements::batch_from_wire(&call.req.payment_requirements, networks)
        .map_err(|e| Refusal::Invalid(e.reason()))
}

fn client_payload(call: &ForServer<'_>) -> Result<ChannelPayloadWire, Refusal> {
    serde_json::from_value(call.payload().clone())
        .map_err(|_| Refusal::Invalid("invalid_batch_settlement_evm_payload_type"))
}

impl Channeled {
    pub(super) async fn verify_call(
        &self,
        svc: &Payments,
        call: &ForServer<'_>,
    ) -> Result<VerifyResponse, Refusal> {
        let (requirements, terms) = requirements(svc, call)?;
        let wire = client_payload(call)?;
        let v = self
            .channels
            .verify_for(&wire, &requirements, &terms, unix_now())
            .await
            .map_err(refused)?;
        Ok(VerifyResponse {
            is_valid: true,
            invalid_reason: None,
            payer: Some(v.payer.to_checksum(None)),
            extra: serde_json::to_value(&v.snapshot).ok(),
        })
    }

    pub(super) async fn settle_call(
        &self,
        svc: &Payments,
        call: &ForServer<'_>,
    ) -> Result<SettleResponse, Refusal> {
        let kind = call
            .payload()
            .get("type")
            .and_then(serde_json::Value::as_str);
        let (requirements, terms) = requirements(svc, call)?;
        let sent = if kind == Some("deposit") {
            let wire = client_payload(call)?;
            self.channels
                .deposit_for(&wire, &requirements, &terms, unix_now())
                .await
                .map_err(refused)?
        } else {
            let server: ServerPayload = serde_json::from_value(call.payload().clone())
                .map_err(|_| Refusal::Invalid(malformed(kind)))?;
            let chain_id = requirements.network.config.chain_id;
            self.channels
                .settle_for(chain_id, &server)
                .await
                .map_err(|e| match e {
                    // The contract refused the transaction: the caller's claim or refund is
                    // wrong.
                    ChannelRefusal::ContractRefused(_) => Refusal::Invalid(failed(kind)),
                    // A field missing or malformed (an authorizer signature, an amount).
                    ChannelRefusal::Rejected {
                        rejection: ChannelRejection::Malformed,
                        ..
                    } => Refusal::Invalid(malformed(kind)),
                    other => refused(other),
                })?
        };
        let Sent {
            transaction,
            amount,
            payer,
            snapshot,
        } = sent;
        Ok(SettleResponse {
            success: true,
            error_reason: None,
            error_message: None,
            transaction: format!("{transaction:#x}"),
            network: call.network(),
            payer: payer.map(|p| p.to_checksum(None)),
            amount: Some(amount.map(|a| a.to_string()).unwrap_or_default()),
            extra: snapshot.map(|s| serde_json::json!({ "channelState": s })),
            extensions: None,
        })
    }
}

/// The reason for a server payload that cannot be read.
fn malformed(kind: Option<&str>) -> &'static str {
    match kind {
        Some("claim") => "invalid_batch_settlement_evm_claim_payload",
        Some("refund") => "invalid_batch_settlement_evm_refund_payload",
        Some("settle") => "invalid_batch_settlement_evm_settle_payload",
        _ => "invalid_batch_settlement_evm_payload_type",
    }
}

/// The reason for a server payload the contract refused.
fn failed(kind: Option<&str>) -> &'static str {
    match kind {
        Some("claim") => "invalid_batch_settlement_evm_claim_transaction_failed",
        Some("refund") => "invalid_batch_settlement_evm_refund_transaction_failed",
        _ => "invalid_batch_settlement_evm_settle_transaction_failed",
    }
}
