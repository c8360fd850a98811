//! The standard x402 facilitator API served from the embedded facilitator, so other x402 servers
//! can verify and settle through paygate: `POST /facilitator/verify`, `POST /facilitator/settle`
//! (an organisation's API key: the relayer pays gas) and `GET /facilitator/supported` (public).
//!
//! A request that is not a facilitator request is a `400`; a payment that is not acceptable is a
//! `200` with `isValid: false` / `success: false` and the x402 reason word, as facilitators answer.
//! Settlement reserves the authorization's nonce in the same replay guard as the gateway, and
//! records the payment under the calling organisation.

use crate::auth::OrgAuth;
use crate::error::ApiError;
use crate::AppState;
use axum::extract::State;
use axum::Json;
use paygate_shared::facilitator::wire::{
    FacilitatorRequest, SettleResponse, SupportedKindWire, SupportedResponse, VerifyResponse,
};
use paygate_shared::facilitator::{settle_reserved, Facilitator, FacilitatorError, PaymentRequest};
use paygate_shared::model::GatewayPayment;
use paygate_shared::store::PaymentReservation;
use paygate_shared::x402::payment::{PaymentPayload, ProtocolVersion, SignedAuthorization};
use paygate_shared::x402::verify::{self, Rejection};
use paygate_shared::x402::{PaymentRequirements, RequirementsError};
use paygate_shared::{unix_now, ErrorCode};
use std::sync::Arc;

/// Route id recorded on payments settled through this API.
pub const FACILITATOR_API_ROUTE: &str = "facilitator-api";

/// A decoded facilitator request, or the reason word it is not acceptable.
struct Checked {
    payment: PaymentPayload,
    auth: SignedAuthorization,
    requirements: PaymentRequirements,
    /// The network spelling the caller used, echoed in answers.
    network: String,
}

fn facilitator(state: &AppState) -> Result<&Arc<dyn Facilitator>, ApiError> {
    state.facilitator.as_ref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::FacilitatorUnavailable,
            "no facilitator is configured on this gateway",
        )
    })
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

/// Decodes and verifies locally; `Err(reason)` is an acceptable request with an unacceptable
/// payment.
fn check(
    state: &AppState,
    req: &FacilitatorRequest,
    version: ProtocolVersion,
) -> Result<Checked, &'static str> {
    let json = serde_json::to_vec(&req.payment_payload).map_err(|_| "invalid_payload")?;
    let payment = PaymentPayload::from_json(&json, version).map_err(|_| "invalid_payload")?;
    let auth = payment.authorization().map_err(|_| "invalid_payload")?;
    let requirements =
        PaymentRequirements::from_wire(&req.payment_requirements, version, &state.networks)
            .map_err(|e| match e {
                RequirementsError::UnsupportedNetwork(_) => "invalid_network",
                _ => "invalid_payment_requirements",
            })?;
    verify::verify(&payment, &auth, &requirements, unix_now()).map_err(Rejection::reason)?;
    let network = requested_network(req);
    Ok(Checked {
        payment,
        auth,
        requirements,
        network,
    })
}

/// The network spelling the caller used, echoed in answers.
fn requested_network(req: &FacilitatorRequest) -> String {
    req.payment_requirements
        .get("network")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn unavailable(msg: &str) -> ApiError {
    tracing::warn!(error = %msg, "facilitator unavailable");
    ApiError::new(
        ErrorCode::FacilitatorUnavailable,
        "the chain cannot be reached now; retry later",
    )
}

#[utoipa::path(post, path = "/facilitator/verify", tag = "facilitator", security(("orgKey" = [])), request_body = crate::openapi::FacilitatorRequestDoc, responses((status = 200, description = "Verdict (an invalid payment is `isValid: false`)", body = crate::openapi::VerifyResponseDoc), (status = 503, description = "No facilitator configured, or the chain is unreachable", body = crate::openapi::ErrorDoc)))]
pub async fn verify(
    State(state): State<AppState>,
    _org: OrgAuth,
    body: axum::body::Bytes,
) -> Result<Json<VerifyResponse>, ApiError> {
    let (req, version) = parse(&body)?;
    let f = facilitator(&state)?;
    let invalid = |reason: &str, payer: Option<String>| {
        Json(VerifyResponse {
            is_valid: false,
            invalid_reason: Some(reason.to_string()),
            payer,
        })
    };
    let c = match check(&state, &req, version) {
        Ok(c) => c,
        Err(reason) => return Ok(invalid(reason, None)),
    };
    let payer = Some(c.auth.from.to_checksum(None));
    match f
        .verify(&PaymentRequest {
            payment: &c.payment,
            auth: &c.auth,
            requirements: &c.requirements,
        })
        .await
    {
        Ok(_) => Ok(Json(VerifyResponse {
            is_valid: true,
            invalid_reason: None,
            payer,
        })),
        Err(FacilitatorError::Rejected(r)) => Ok(invalid(r.reason(), payer)),
        Err(FacilitatorError::Unavailable(m) | FacilitatorError::Ambiguous(m)) => {
            Err(unavailable(&m))
        }
    }
}

#[utoipa::path(post, path = "/facilitator/settle", tag = "facilitator", security(("orgKey" = [])), request_body = crate::openapi::FacilitatorRequestDoc, responses((status = 200, description = "Outcome (a refused payment is `success: false`)", body = crate::openapi::SettleResponseDoc), (status = 503, description = "No facilitator configured, or the chain is unreachable", body = crate::openapi::ErrorDoc), (status = 504, description = "Sent, outcome not known yet; reconciled later", body = crate::openapi::ErrorDoc)))]
pub async fn settle(
    State(state): State<AppState>,
    OrgAuth { org }: OrgAuth,
    body: axum::body::Bytes,
) -> Result<Json<SettleResponse>, ApiError> {
    let (req, version) = parse(&body)?;
    let f = facilitator(&state)?;
    let failed = |reason: &str, network: String, payer: Option<String>| {
        Json(SettleResponse {
            success: false,
            error_reason: Some(reason.to_string()),
            transaction: String::new(),
            network,
            payer,
        })
    };
    let c = match check(&state, &req, version) {
        Ok(c) => c,
        Err(reason) => {
            return Ok(failed(reason, requested_network(&req), None));
        }
    };
    let payer = Some(c.auth.from.to_checksum(None));
    let mut record =
        GatewayPayment::reserved(&org.id, FACILITATOR_API_ROUTE, &c.requirements, &c.auth, 0);
    if let PaymentReservation::Held(_) = state.store.reserve_payment(&record).await? {
        return Ok(failed(Rejection::NonceReplay.reason(), c.network, payer));
    }
    let req = PaymentRequest {
        payment: &c.payment,
        auth: &c.auth,
        requirements: &c.requirements,
    };
    match settle_reserved(state.store.as_ref(), f.as_ref(), &mut record, &req).await {
        Ok(s) => Ok(Json(SettleResponse {
            success: true,
            error_reason: None,
            transaction: format!("{:#x}", s.transaction),
            network: c.network,
            payer,
        })),
        Err(FacilitatorError::Rejected(r)) => Ok(failed(r.reason(), c.network, payer)),
        Err(FacilitatorError::Unavailable(m)) => Err(unavailable(&m)),
        Err(FacilitatorError::Ambiguous(_)) => Err(ApiError::new(
            ErrorCode::SettlementPending,
            "settlement outcome is not known yet; it is being reconciled",
        )),
    }
}

#[utoipa::path(get, path = "/facilitator/supported", tag = "facilitator", responses((status = 200, description = "Supported (version, scheme, network) kinds", body = crate::openapi::SupportedDoc), (status = 503, description = "No facilitator configured, or the chain is unreachable", body = crate::openapi::ErrorDoc)))]
pub async fn supported(State(state): State<AppState>) -> Result<Json<SupportedResponse>, ApiError> {
    let f = facilitator(&state)?;
    let kinds = f
        .supported()
        .await
        .map_err(|e| unavailable(&e.to_string()))?;
    Ok(Json(SupportedResponse {
        kinds: kinds
            .into_iter()
            .map(|k| SupportedKindWire {
                x402_version: k.x402_version,
                scheme: k.scheme,
                network: k.network,
            })
            .collect(),
    }))
}
