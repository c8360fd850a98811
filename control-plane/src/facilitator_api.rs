//! The standard x402 facilitator API served from the embedded facilitator, so other x402 servers
//! can verify and settle through paygate: `POST /facilitator/verify`, `POST /facilitator/settle`
//! (an organisation's API key: the relayer pays gas) and `GET /facilitator/supported` (public).
//!
//! A request that is not a facilitator request is a `400`; a payment that is not acceptable is a
//! `200` with `isValid: false` / `success: false` and the x402 reason word, as facilitators answer.
//! Each call goes through the payment service's door for other servers, to the way of paying
//! its scheme names (`exact`, `upto`, `auth-capture`, `batch-settlement`): the same replay
//! guard, the same answer to a nonce already held (`504 SETTLEMENT_PENDING` while it is being
//! settled), and the payment recorded under the calling organisation.

use crate::auth::OrgAuth;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use paygate_domain::ErrorCode;
use paygate_gateway::payments::for_servers::ForServer;
use paygate_gateway::payments::Refusal;
use paygate_x402::facilitator::wire::{
    FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse,
};
use paygate_x402::payment::ProtocolVersion;
use std::sync::Arc;

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

/// Whether this deployment settles on chain at all.
fn facilitator(state: &AppState) -> Result<(), ApiError> {
    state
        .facilitator()
        .map(|_| ())
        .ok_or_else(|| Refusal::NoFacilitator.into())
}

#[utoipa::path(post, path = "/facilitator/verify", tag = "facilitator", security(("orgKey" = [])), request_body = FacilitatorRequest, responses((status = 403, description = "Organisation suspended", body = paygate_domain::ErrorBody), (status = 200, description = "Verdict (an invalid payment is `isValid: false`)", body = VerifyResponse), (status = 503, description = "No facilitator configured, or the chain is unreachable", body = paygate_domain::ErrorBody)))]
pub async fn verify(
    State(state): State<AppState>,
    org: OrgAuth,
    body: axum::body::Bytes,
) -> Result<Json<VerifyResponse>, ApiError> {
    let org = org.active()?;
    let (req, version) = parse(&body)?;
    facilitator(&state)?;
    let org_id: Arc<str> = Arc::from(org.id.as_str());
    let call = ForServer {
        org_id: &org_id,
        req: &req,
        version,
    };
    Ok(Json(state.payments.verify_for_server(&call).await?))
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
    let org_id: Arc<str> = Arc::from(org.id.as_str());
    let call = ForServer {
        org_id: &org_id,
        req: &req,
        version,
    };
    Ok(Json(state.payments.settle_for_server(&call).await?))
}

#[utoipa::path(get, path = "/facilitator/supported", tag = "facilitator", responses((status = 200, description = "Supported (version, scheme, network) kinds", body = SupportedResponse), (status = 503, description = "No facilitator configured, or the chain is unreachable", body = paygate_domain::ErrorBody)))]
pub async fn supported(State(state): State<AppState>) -> Result<Json<SupportedResponse>, ApiError> {
    facilitator(&state)?;
    // What the verify and settle endpoints take and settle now (the networks that answered the
    // last health probe), as each way of paying this deployment serves says.
    let kinds = state.payments.facilitator_kinds();
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
        kinds,
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
