//! The standard x402 facilitator API served from the embedded facilitator, so other x402 servers
//! can verify and settle through paygate: `POST /facilitator/verify`, `POST /facilitator/settle`
//! (an organisation's API key: the relayer pays gas) and `GET /facilitator/supported` (public).
//!
//! A request that is not a facilitator request is a `400`; a payment that is not acceptable is a
//! `200` with `isValid: false` / `success: false` and the x402 reason word, as facilitators answer.
//! Settlement goes through the gateway's own payment service (the same replay guard, the same
//! answer to a nonce already held: `504 SETTLEMENT_PENDING` while it is being settled) and
//! records the payment under the calling organisation.

use crate::auth::OrgAuth;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use paygate_domain::{unix_now, ErrorCode};
use paygate_gateway::payments::{Charge, Refusal, Verified};
use paygate_x402::facilitator::wire::{
    FacilitatorRequest, SettleResponse, SupportedKindWire, SupportedResponse, VerifyResponse,
};
use paygate_x402::facilitator::Facilitator;
use paygate_x402::payment::{PaymentPayload, ProtocolVersion};
use paygate_x402::PaymentRequirements;
use std::sync::Arc;

mod channels;

/// Route id recorded on payments settled through this API.
use paygate_domain::model::FACILITATOR_API_ROUTE;

/// A refusal as this API answers it: the x402 reason word (`200` with `isValid`/`success`
/// false) for a payment that is not acceptable, the error otherwise.
enum Answer {
    Invalid(&'static str),
    Error(ApiError),
}

impl From<Refusal> for Answer {
    fn from(r: Refusal) -> Self {
        match r.x402_reason() {
            Some(reason) => Self::Invalid(reason),
            None => Self::Error(r.into()),
        }
    }
}

fn facilitator(state: &AppState) -> Result<&Arc<dyn Facilitator>, ApiError> {
    state
        .facilitator()
        .ok_or_else(|| Refusal::NoFacilitator.into())
}

fn parse(body: &[u8]) -> Result<(FacilitatorRequest, ProtocolVersion), ApiError> {
    let req: FacilitatorRequest = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            ErrorCode::BadRequest,
            format!("body must be {{x402Version, paymentPayload, paymentRequirements}}: {e}"),
        )
    })?;
    let version = ProtocolVersion::from_number(u64::from(req.x402_version))
        .ok_or_else(|| ApiError::new(ErrorCode::BadRequest, "x402Version must be 1 or 2"))?;
    Ok((req, version))
}

/// Reads the requirements and verifies the payment locally through the payment service.
fn check(
    state: &AppState,
    req: &FacilitatorRequest,
    version: ProtocolVersion,
) -> Result<(Verified, PaymentRequirements), Answer> {
    let requirements =
        PaymentRequirements::from_wire(&req.payment_requirements, version, state.networks())
            .map_err(|e| Answer::Invalid(e.reason()))?;
    let json = serde_json::to_vec(&req.payment_payload).unwrap_or_default();
    let payment = PaymentPayload::from_json(&json, version).map_err(Refusal::from)?;
    let verified = state.payments.verify(payment, &requirements, unix_now())?;
    Ok((verified, requirements))
}

/// Whether the request is about a `batch-settlement` payment (payment channels).
fn is_batch(req: &FacilitatorRequest) -> bool {
    req.payment_requirements
        .get("scheme")
        .and_then(serde_json::Value::as_str)
        == Some(paygate_x402::batch::SCHEME)
}

/// The network spelling the caller used, echoed in answers.
fn requested_network(req: &FacilitatorRequest) -> String {
    req.payment_requirements
        .get("network")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_string()
}

#[utoipa::path(post, path = "/facilitator/verify", tag = "facilitator", security(("orgKey" = [])), request_body = FacilitatorRequest, responses((status = 403, description = "Organisation suspended", body = paygate_domain::ErrorBody), (status = 200, description = "Verdict (an invalid payment is `isValid: false`)", body = VerifyResponse), (status = 503, description = "No facilitator configured, or the chain is unreachable", body = paygate_domain::ErrorBody)))]
pub async fn verify(
    State(state): State<AppState>,
    org: OrgAuth,
    body: axum::body::Bytes,
) -> Result<Json<VerifyResponse>, ApiError> {
    org.active()?;
    let (req, version) = parse(&body)?;
    facilitator(&state)?;
    if is_batch(&req) {
        return channels::verify(&state, &req).await;
    }
    let verdict = |payer: Option<String>, reason: Option<&str>| {
        Json(VerifyResponse {
            is_valid: reason.is_none(),
            invalid_reason: reason.map(str::to_string),
            payer,
            extra: None,
        })
    };
    let (v, requirements) = match check(&state, &req, version) {
        Ok(c) => c,
        Err(Answer::Invalid(reason)) => return Ok(verdict(None, Some(reason))),
        Err(Answer::Error(e)) => return Err(e),
    };
    let payer = Some(v.payer().to_checksum(None));
    match state.payments.verify_on_chain(&v, &requirements).await {
        Ok(_) => Ok(verdict(payer, None)),
        Err(r) => match Answer::from(r) {
            Answer::Invalid(reason) => Ok(verdict(payer, Some(reason))),
            Answer::Error(e) => Err(e),
        },
    }
}

#[utoipa::path(post, path = "/facilitator/settle", tag = "facilitator", security(("orgKey" = [])), request_body = FacilitatorRequest, responses((status = 403, description = "Organisation suspended", body = paygate_domain::ErrorBody), (status = 200, description = "Outcome (a refused payment is `success: false`)", body = SettleResponse), (status = 503, description = "No facilitator configured, or the chain is unreachable", body = paygate_domain::ErrorBody), (status = 504, description = "Sent, outcome not known yet; reconciled later", body = paygate_domain::ErrorBody)))]
pub async fn settle(
    State(state): State<AppState>,
    org: OrgAuth,
    body: axum::body::Bytes,
) -> Result<Json<SettleResponse>, ApiError> {
    let org = org.active()?;
    let (req, version) = parse(&body)?;
    facilitator(&state)?;
    let network = requested_network(&req);
    if is_batch(&req) {
        return channels::settle(&state, &req, network).await;
    }
    let failed = |reason: &str, network: String, payer: Option<String>| {
        Json(SettleResponse {
            success: false,
            error_reason: Some(reason.to_string()),
            error_message: None,
            transaction: String::new(),
            network,
            payer,
            amount: None,
            extra: None,
            extensions: None,
        })
    };
    let (v, requirements) = match check(&state, &req, version) {
        Ok(c) => c,
        Err(Answer::Invalid(reason)) => return Ok(failed(reason, network, None)),
        Err(Answer::Error(e)) => return Err(e),
    };
    let payer = Some(v.payer().to_checksum(None));
    let org_id: Arc<str> = Arc::from(org.id.as_str());
    let charge = Charge {
        org_id: &org_id,
        route_id: FACILITATOR_API_ROUTE,
        requirements: &requirements,
        plan_limit: None,
        redeliver: false,
    };
    match state.payments.take(v, &charge).await {
        // Sent and not confirmed in time: x402's `settlement_pending` with the transaction; the
        // same payment again answers from it, and once reconciliation has seen it land, with
        // the settlement.
        Err(Refusal::Unconfirmed { transaction, payer }) => {
            Ok(Json(SettleResponse::pending(transaction, network, payer)))
        }
        Ok(paid) => Ok(Json(SettleResponse {
            success: true,
            error_reason: None,
            error_message: None,
            transaction: paid.record.transaction.clone().unwrap_or_default(),
            network,
            payer,
            amount: None,
            extra: None,
            extensions: None,
        })),
        Err(r) => match Answer::from(r) {
            Answer::Invalid(reason) => Ok(failed(reason, network, payer)),
            Answer::Error(e) => Err(e),
        },
    }
}

#[utoipa::path(get, path = "/facilitator/supported", tag = "facilitator", responses((status = 200, description = "Supported (version, scheme, network) kinds", body = SupportedResponse), (status = 503, description = "No facilitator configured, or the chain is unreachable", body = paygate_domain::ErrorBody)))]
pub async fn supported(State(state): State<AppState>) -> Result<Json<SupportedResponse>, ApiError> {
    facilitator(&state)?;
    // What the verify and settle endpoints take and settle now (the networks that answered the
    // last health probe): `exact` in both versions, and `batch-settlement` where this
    // deployment serves channels. (`upto` is not taken there: only this deployment's relayer
    // settles it, for its own routes.)
    let channels = state.payments.channels().is_some();
    let kinds = state.payments.settleable().facilitator_kinds(channels);
    if kinds.is_empty() {
        return Err(ApiError::from(Refusal::FacilitatorDown));
    }
    // Settling on chain itself, it submits a Permit2 payer's permit with the settlement.
    let extensions = match state.payments.chain() {
        Some(_) => vec![paygate_x402::gas_sponsoring::EIP2612_GAS_SPONSORING.to_string()],
        None => Vec::new(),
    };
    Ok(Json(SupportedResponse {
        extensions,
        kinds: kinds
            .into_iter()
            .map(|k| SupportedKindWire {
                x402_version: k.x402_version,
                scheme: k.scheme,
                network: k.network,
            })
            .collect(),
        facilitators: state
            .metrics
            .health()
            .members
            .iter()
            .map(|m| paygate_x402::facilitator::wire::SupportedMemberWire {
                network: m.network.clone(),
                url: m.url.clone(),
                healthy: m.healthy,
                settled: m.settled,
            })
            .collect(),
    }))
}
