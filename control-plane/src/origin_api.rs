//! The organisation's origin secret (issue 18): what its origins check `X-Paygate-Signature`
//! with (`paygate_domain::origin_proof`). Derived from the master key and a generation, never
//! stored; rotating bumps the generation, and the previous secret keeps signing beside the new
//! one for a grace period.

use crate::audit::{self, Actor, Caller, Change};
use crate::auth::OrgAuth;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use paygate_domain::model::Org;
use paygate_domain::origin_proof::{
    OriginProofKey, PAYMENT_ID_HEADER, ROTATION_GRACE_SECONDS, SIGNATURE_HEADER,
};
use paygate_domain::{now_rfc3339, unix_now, ErrorCode};
use serde::Serialize;
use utoipa::ToSchema;

/// The origin secret and how requests are signed with it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OriginSecretView {
    /// The HMAC-SHA256 key, used whole (with its `pgos_` prefix).
    secret: String,
    generation: u32,
    /// The secret before the last rotation, while it still signs next to the new one.
    #[schema(required)]
    previous_secret: Option<String>,
    /// Until when (RFC 3339) the previous secret signs.
    #[schema(required)]
    previous_valid_until: Option<String>,
    /// `X-Paygate-Signature`: `t=<unix seconds>,v1=<hex>` (a second `v1` during a rotation).
    signature_header: &'static str,
    /// `X-Paygate-Payment-Id`: the same on every forward of one payment.
    payment_id_header: &'static str,
    /// What is signed: the lines joined by `\n`.
    signed_payload: &'static str,
}

fn view(key: &OriginProofKey, org: &Org) -> OriginSecretView {
    let previous_until = org
        .origin_secret_rotated_at
        .map(|at| at.saturating_add(ROTATION_GRACE_SECONDS))
        .filter(|until| org.origin_secret_generation > 0 && *until > unix_now());
    OriginSecretView {
        secret: key.secret(&org.id, org.origin_secret_generation),
        generation: org.origin_secret_generation,
        previous_secret: previous_until
            .map(|_| key.secret(&org.id, org.origin_secret_generation - 1)),
        previous_valid_until: previous_until.map(|u| {
            time::OffsetDateTime::from_unix_timestamp(u as i64)
                .map(paygate_domain::rfc3339)
                .unwrap_or_default()
        }),
        signature_header: SIGNATURE_HEADER,
        payment_id_header: PAYMENT_ID_HEADER,
        signed_payload: "t, METHOD, path and query as the origin receives them, payment id",
    }
}

fn key(state: &AppState) -> Result<OriginProofKey, ApiError> {
    state
        .table
        .render_context()
        .origin_key
        .clone()
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::Misconfigured,
                format!(
                    "origin proofs need a master key: set {} to 64 hex characters",
                    state.config.orgs.master_key_env
                ),
            )
        })
}

#[utoipa::path(get, path = "/api/origin-secret", tag = "origin", security(("orgKey" = [])), responses((status = 200, description = "The secret the organisation's origins check X-Paygate-Signature with", body = OriginSecretView), (status = 503, description = "No master key configured", body = paygate_domain::ErrorBody)))]
pub async fn get(State(state): State<AppState>, auth: OrgAuth) -> Result<Response, ApiError> {
    let key = key(&state)?;
    Ok(Json(view(&key, &auth.org)).into_response())
}

#[utoipa::path(post, path = "/api/origin-secret/rotate", tag = "origin", security(("orgKey" = [])), responses((status = 200, description = "A new secret; the previous one keeps signing beside it for 24 hours (one before it stops at once)", body = OriginSecretView), (status = 503, description = "No master key configured", body = paygate_domain::ErrorBody)))]
pub async fn rotate(
    State(state): State<AppState>,
    auth: OrgAuth,
    caller: Caller,
) -> Result<Response, ApiError> {
    let key = key(&state)?;
    let mut org = auth.org.clone();
    let generation = |g: u32| Some(serde_json::json!({ "originSecretGeneration": g }));
    let before = generation(org.origin_secret_generation);
    org.origin_secret_generation = org.origin_secret_generation.saturating_add(1);
    org.origin_secret_rotated_at = Some(unix_now());
    org.updated_at = now_rfc3339();
    state.save_org(&org).await?;
    tracing::info!(org = %org.slug, generation = org.origin_secret_generation, "origin secret rotated");
    // The secret itself is never recorded: its generation is.
    let change = Change {
        org_id: &org.id,
        action: "origin_secret.rotated",
        target: &org.id,
        before,
        after: generation(org.origin_secret_generation),
    };
    audit::record(&state, Actor::Key(&auth), &caller, change).await;
    Ok(Json(view(&key, &org)).into_response())
}
