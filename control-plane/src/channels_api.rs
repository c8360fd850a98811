//! Payment channels for the seller (issue 29): `GET /api/channels` lists the organisation's
//! channels (deposited, charged, claimed, refunded, withdrawing) and `POST /api/channels/claim`
//! claims every charge not yet claimed on chain now, in as few transactions as the batch size
//! allows, instead of waiting for the claimer's thresholds; `GET /api/channels/{id}` shows one;
//! `POST /api/channels/{id}/refund` returns what is left in a channel to its payer.

use crate::auth::OrgAuth;
use crate::error::ApiError;
use crate::input::{keep_answer, remembered, Idem, IdempotencyKey};
use crate::state::AppState;
use axum::extract::Path;
use axum::extract::State;
use axum::http::{Method, Uri};
use axum::response::Response;
use axum::Json;
use paygate_domain::channel::ChannelRecord;
use paygate_domain::ErrorCode;
use paygate_gateway::channels::{ChannelRefusal, Channels};
use paygate_x402::batch::ChannelRejection;
use serde::Serialize;
use std::sync::Arc;
use utoipa::ToSchema;

/// One channel as the seller sees it; amounts in USDC base units (decimal strings).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChannelView {
    id: String,
    payer: String,
    /// The channel's configuration as the contract takes it (payer, receiver, their
    /// authorizers, token, withdraw delay, salt).
    #[schema(value_type = Object)]
    config: paygate_x402::batch::ChannelConfigWire,
    network: String,
    route_id: String,
    balance: String,
    deposited: String,
    charged: String,
    claimed: String,
    unclaimed: String,
    refunded: String,
    requests: u64,
    /// `open`, or `withdrawing` once the payer asked for its money back.
    status: &'static str,
    #[schema(required)]
    claim_transaction: Option<String>,
    created_at: String,
    updated_at: String,
}

impl From<ChannelRecord> for ChannelView {
    fn from(r: ChannelRecord) -> Self {
        Self {
            payer: r.config.payer.clone(),
            config: r.config.clone(),
            network: r.network.clone(),
            route_id: r.route_id.clone(),
            balance: r.balance.to_string(),
            deposited: r.deposited.to_string(),
            charged: r.charged.to_string(),
            claimed: r.total_claimed.to_string(),
            unclaimed: r.unclaimed().to_string(),
            refunded: r.refunded.to_string(),
            requests: r.requests,
            status: if r.withdraw_due.is_some() {
                "withdrawing"
            } else {
                "open"
            },
            claim_transaction: r.claim_transaction.clone(),
            created_at: r.created_at.clone(),
            updated_at: r.updated_at.clone(),
            id: r.id,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChannelList {
    channels: Vec<ChannelView>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimResult {
    /// Channels whose charges were claimed and settled to the receiver.
    claimed_channels: usize,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RefundResult {
    /// Base units returned to the payer now ("0" when nothing was left: a repeated refund).
    refunded_amount: String,
    /// The refund's transaction (with the claim of what was charged in front of it).
    #[schema(required)]
    transaction: Option<String>,
    channel: ChannelView,
}

fn channels(state: &AppState) -> Result<&Arc<Channels>, ApiError> {
    state.channels.as_ref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::FacilitatorUnavailable,
            "this deployment does not offer payment channels",
        )
    })
}

fn refused(e: ChannelRefusal) -> ApiError {
    let code = match &e {
        ChannelRefusal::Rejected {
            rejection: ChannelRejection::MissingChannel,
            ..
        } => ErrorCode::NotFound,
        ChannelRefusal::Rejected { .. }
        | ChannelRefusal::Malformed(_)
        | ChannelRefusal::ContractRefused(_) => ErrorCode::ValidationError,
        ChannelRefusal::Busy => ErrorCode::DuplicateRequest,
        ChannelRefusal::DepositFailed(_) | ChannelRefusal::Unavailable(_) => {
            ErrorCode::FacilitatorUnavailable
        }
    };
    ApiError::new(code, e.to_string())
}

#[utoipa::path(get, path = "/api/channels", tag = "channels", security(("orgKey" = [])), responses((status = 200, description = "The organisation's payment channels", body = ChannelList)))]
pub async fn list(
    State(state): State<AppState>,
    OrgAuth { org, .. }: OrgAuth,
) -> Result<Json<ChannelList>, ApiError> {
    let mut records = channels(&state)?.list(&org.id).await.map_err(refused)?;
    records.sort_by(|a, b| b.created_at.cmp(&a.created_at));
    Ok(Json(ChannelList {
        channels: records.into_iter().map(ChannelView::from).collect(),
    }))
}

#[utoipa::path(post, path = "/api/channels/claim", tag = "channels", security(("orgKey" = [])), responses((status = 403, description = "Organisation suspended", body = paygate_domain::ErrorBody), (status = 200, description = "What was claimed", body = ClaimResult), (status = 503, description = "The chain or the store cannot be reached; nothing was claimed twice", body = paygate_domain::ErrorBody)))]
pub async fn claim(
    State(state): State<AppState>,
    org: OrgAuth,
) -> Result<Json<ClaimResult>, ApiError> {
    let org = org.active()?;
    let claimed = channels(&state)?
        .claim_due_for(Some(&org.id))
        .await
        .map_err(refused)?;
    Ok(Json(ClaimResult {
        claimed_channels: claimed,
    }))
}

#[utoipa::path(get, path = "/api/channels/{id}", tag = "channels", security(("orgKey" = [])), params(("id" = String, Path, description = "The channel id (0x and 64 hex digits)")), responses((status = 200, description = "The channel", body = ChannelView), (status = 404, description = "No such channel in this organisation", body = paygate_domain::ErrorBody)))]
pub async fn get_one(
    State(state): State<AppState>,
    OrgAuth { org, .. }: OrgAuth,
    Path(id): Path<String>,
) -> Result<Json<ChannelView>, ApiError> {
    let record = channels(&state)?.get(&org.id, &id).await.map_err(refused)?;
    record.map(|r| Json(r.into())).ok_or_else(|| {
        ApiError::new(
            ErrorCode::NotFound,
            "no channel with this id in your organisation",
        )
    })
}

#[utoipa::path(post, path = "/api/channels/{id}/refund", tag = "channels", security(("orgKey" = [])), params(("id" = String, Path, description = "The channel id (0x and 64 hex digits)"), ("Idempotency-Key" = Option<String>, Header, description = "1 to 255 visible ASCII characters; a repeat answers the first result")), responses((status = 403, description = "Organisation suspended", body = paygate_domain::ErrorBody), (status = 200, description = "What was charged is claimed, everything else returned to the payer; repeated, nothing more moves (under the same Idempotency-Key, the first answer again)", body = RefundResult), (status = 404, description = "No such channel in this organisation", body = paygate_domain::ErrorBody), (status = 409, description = "The Idempotency-Key was used with another request", body = paygate_domain::ErrorBody), (status = 503, description = "The chain or the store cannot be reached; nothing was refunded twice", body = paygate_domain::ErrorBody)))]
pub async fn refund(
    State(state): State<AppState>,
    org: OrgAuth,
    method: Method,
    uri: Uri,
    key: IdempotencyKey,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let org = org.active()?;
    let idem = Idem::from_request(key, &method, &uri, b"");
    if let Some(r) = remembered(&state, &org.id, &idem).await? {
        return Ok(r);
    }
    let refunded = channels(&state)?
        .refund_for_seller(&org.id, &id)
        .await
        .map_err(refused)?;
    let out = RefundResult {
        refunded_amount: refunded.amount.to_string(),
        transaction: refunded.transaction.map(|t| format!("{t:#x}")),
        channel: refunded.record.into(),
    };
    // The refund itself is idempotent (a repeat moves nothing); the record makes a repeat under
    // the same key answer this first result.
    Ok(keep_answer(&state, &org.id, &idem, &out, "the channel refund").await)
}
