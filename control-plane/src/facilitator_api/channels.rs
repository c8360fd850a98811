//! `batch-settlement` through the facilitator API, as the scheme's facilitator interface says:
//! `/verify` checks a client's `deposit`, `voucher` or `refund` payload against the caller's
//! requirements and the chain and answers the channel's figures in `extra`; `/settle` sends a
//! client's `deposit`, or a server-authored `claim`, `settle` or completed `refund` (carrying
//! the server's own receiver-authorizer signatures), through the embedded relayer. The caller
//! keeps its channels' state itself: nothing is recorded in paygate's ledger.

use crate::error::ApiError;
use crate::state::AppState;
use axum::Json;
use paygate_domain::{unix_now, ErrorCode};
use paygate_gateway::channels::facilitated::{Sent, ServerPayload};
use paygate_gateway::channels::{ChannelRefusal, Channels};
use paygate_x402::batch::{ChannelPayloadWire, ChannelRejection};
use paygate_x402::facilitator::wire::{FacilitatorRequest, SettleResponse, VerifyResponse};
use paygate_x402::{BatchTerms, PaymentRequirements};
use std::sync::Arc;

/// Why a request is answered `isValid: false` / `success: false` (`Err`: an API error).
enum Invalid {
    Reason(&'static str),
    Error(ApiError),
}

impl From<ChannelRefusal> for Invalid {
    fn from(r: ChannelRefusal) -> Self {
        if r.payment_required() {
            Self::Reason(r.reason())
        } else {
            Self::Error(ApiError::new(
                ErrorCode::FacilitatorUnavailable,
                r.to_string(),
            ))
        }
    }
}

fn channels(state: &AppState) -> Result<&Arc<Channels>, Invalid> {
    state.payments.channels().ok_or_else(|| {
        Invalid::Error(ApiError::new(
            ErrorCode::FacilitatorUnavailable,
            "this deployment does not settle payment channels",
        ))
    })
}

/// The caller's requirements and channel terms.
fn requirements(
    state: &AppState,
    req: &FacilitatorRequest,
) -> Result<(PaymentRequirements, BatchTerms), Invalid> {
    PaymentRequirements::batch_from_wire(&req.payment_requirements, state.networks())
        .map_err(|e| Invalid::Reason(e.reason()))
}

/// The payment payload's `payload` (the scheme's typed object).
fn payload(req: &FacilitatorRequest) -> &serde_json::Value {
    req.payment_payload
        .get("payload")
        .unwrap_or(&req.payment_payload)
}

fn client_payload(req: &FacilitatorRequest) -> Result<ChannelPayloadWire, Invalid> {
    serde_json::from_value(payload(req).clone())
        .map_err(|_| Invalid::Reason("invalid_batch_settlement_evm_payload_type"))
}

pub(super) async fn verify(
    state: &AppState,
    req: &FacilitatorRequest,
) -> Result<Json<VerifyResponse>, ApiError> {
    let checked = async {
        let channels = channels(state)?;
        let (requirements, terms) = requirements(state, req)?;
        let wire = client_payload(req)?;
        Ok::<_, Invalid>(
            channels
                .verify_for(&wire, &requirements, &terms, unix_now())
                .await?,
        )
    };
    match checked.await {
        Ok(v) => Ok(Json(VerifyResponse {
            is_valid: true,
            invalid_reason: None,
            payer: Some(v.payer.to_checksum(None)),
            extra: serde_json::to_value(&v.snapshot).ok(),
        })),
        Err(Invalid::Reason(reason)) => Ok(Json(VerifyResponse {
            is_valid: false,
            invalid_reason: Some(reason.to_string()),
            payer: None,
            extra: None,
        })),
        Err(Invalid::Error(e)) => Err(e),
    }
}

pub(super) async fn settle(
    state: &AppState,
    req: &FacilitatorRequest,
    network: String,
) -> Result<Json<SettleResponse>, ApiError> {
    let kind = payload(req).get("type").and_then(serde_json::Value::as_str);
    let sent = async {
        let channels = channels(state)?;
        let (requirements, terms) = requirements(state, req)?;
        if kind == Some("deposit") {
            let wire = client_payload(req)?;
            return Ok(channels
                .deposit_for(&wire, &requirements, &terms, unix_now())
                .await?);
        }
        let server: ServerPayload = serde_json::from_value(payload(req).clone())
            .map_err(|_| Invalid::Reason(malformed(kind)))?;
        let chain_id = requirements.network.config.chain_id;
        channels
            .settle_for(chain_id, &server)
            .await
            .map_err(|e| match e {
                // The contract refused the transaction: the caller's claim or refund is wrong.
                ChannelRefusal::ContractRefused(_) => Invalid::Reason(failed(kind)),
                // A field missing or malformed (an authorizer signature, an amount).
                ChannelRefusal::Rejected {
                    rejection: ChannelRejection::Malformed,
                    ..
                } => Invalid::Reason(malformed(kind)),
                other => other.into(),
            })
    };
    match sent.await {
        Ok(Sent {
            transaction,
            amount,
            payer,
            snapshot,
        }) => Ok(Json(SettleResponse {
            success: true,
            error_reason: None,
            error_message: None,
            transaction: format!("{transaction:#x}"),
            network,
            payer: payer.map(|p| p.to_checksum(None)),
            amount: Some(amount.map(|a| a.to_string()).unwrap_or_default()),
            extra: snapshot.map(|s| serde_json::json!({ "channelState": s })),
            extensions: None,
        })),
        Err(Invalid::Reason(reason)) => Ok(Json(SettleResponse {
            success: false,
            error_reason: Some(reason.to_string()),
            error_message: None,
            transaction: String::new(),
            network,
            payer: None,
            amount: None,
            extra: None,
            extensions: None,
        })),
        Err(Invalid::Error(e)) => Err(e),
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
