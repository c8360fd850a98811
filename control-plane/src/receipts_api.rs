//! Signed receipts (x402 `offer-and-receipt`, EIP-712): `GET /api/payments/{id}/receipt` gives a
//! settled payment's signed receipt again (the one its `PAYMENT-RESPONSE` carried), and
//! `GET /.well-known/did.json` publishes the key receipts are signed by (a `did:web` document
//! of the deployment's host, the key as an `eip155` account), so anyone holding a receipt can
//! check who signed it without paygate's code.

use crate::auth::OrgAuth;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::Json;
use paygate_domain::ErrorCode;
use serde_json::{json, Value};

/// The deployment's `did:web` identifier (its public host; a port is percent-encoded).
fn did(state: &AppState) -> String {
    let base = state.config.server.public_base_url();
    let host = base
        .split_once("://")
        .map_or(base.as_str(), |(_, rest)| rest)
        .trim_end_matches('/');
    format!("did:web:{}", host.replace(':', "%3A").replace('/', ":"))
}

#[utoipa::path(get, path = "/api/payments/{id}/receipt", tag = "payments", security(("orgKey" = [])), params(("id" = String, Path)), responses((status = 200, description = "The payment's signed receipt (x402 offer-and-receipt, format eip712)", body = Object), (status = 404, description = "No such payment in this organisation, or no receipt for it: not settled, settled through the facilitator API for another server, not served by its origin, or refunded in full", body = paygate_domain::ErrorBody), (status = 503, description = "This deployment signs no receipts (no master key or receipt key)", body = paygate_domain::ErrorBody)))]
pub async fn receipt(
    State(state): State<AppState>,
    OrgAuth { org, .. }: OrgAuth,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let p = match state.store.get_payment(&id).await? {
        Some(p) if p.org_id == org.id => p,
        _ => return Err(ApiError::new(ErrorCode::NotFound, "no such payment")),
    };
    if let Some(why) = p.unreceiptable() {
        return Err(ApiError::new(ErrorCode::NotFound, why));
    }
    let signed = state.payments.signed_receipt(&p).ok_or_else(|| {
        ApiError::new(
            ErrorCode::Misconfigured,
            "this deployment signs no receipts: set PAYGATE_MASTER_KEY or PAYGATE_RECEIPT_KEY",
        )
    })?;
    Ok(Json(
        json!({ "receipt": signed, "signer": did(&state) + "#receipts" }),
    ))
}

#[utoipa::path(get, path = "/.well-known/did.json", tag = "discovery", responses((status = 200, description = "The deployment's did:web document: the key receipts are signed by", body = Object), (status = 404, description = "This deployment signs no receipts", body = paygate_domain::ErrorBody)))]
pub async fn did_document(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let address = state
        .payments
        .receipt_signer()
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, "this deployment signs no receipts"))?;
    let id = did(&state);
    let key = format!("{id}#receipts");
    Ok(Json(json!({
        "@context": ["https://www.w3.org/ns/did/v1"],
        "id": id,
        "verificationMethod": [{
            "id": key,
            "type": "EcdsaSecp256k1RecoveryMethod2020",
            "controller": id,
            "blockchainAccountId": format!("eip155:1:{}", address.to_checksum(None)),
        }],
        "assertionMethod": [key],
    })))
}
