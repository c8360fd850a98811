//! `POST /api/payments/{id}/refund`: a captured `auth-capture` payment refunded, in full or in
//! part, within its refund deadline, exactly once per `Idempotency-Key` (required). The
//! refund's own bookkeeping is `paygate_gateway::payments::refunds`.

use crate::auth::OrgAuth;
use crate::body::fields::PriceUsd;
use crate::body::RequestBody;
use crate::error::ApiError;
use crate::input::{keep_answer, remembered, Idem, IdempotencyKey};
use crate::payments_api::{PaymentView, RefundView};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{Method, Uri};
use axum::response::Response;
use paygate_domain::ErrorCode;
use paygate_gateway::payments::ways::auth_capture::refunds::RefundError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What to refund.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RefundRequest {
    /// How much, in USD (at most what was captured and not refunded); absent: all of it.
    #[serde(default, rename = "amountUSDC")]
    #[schema(inline, rename = "amountUSDC")]
    amount_usdc: Option<PriceUsd>,
}

impl RequestBody for RefundRequest {}

/// The refund and the payment after it.
#[derive(Debug, Serialize, ToSchema)]
pub struct RefundResult {
    refund: RefundView,
    payment: PaymentView,
}

fn refused(e: RefundError) -> ApiError {
    let e = match e {
        RefundError::Store(s) => return ApiError::from(s),
        other => other,
    };
    let code = match &e {
        RefundError::NotFound => ErrorCode::NotFound,
        RefundError::NotRefundable(_) => ErrorCode::NotRefundable,
        RefundError::WindowClosed => ErrorCode::RefundWindowClosed,
        RefundError::ExceedsCapture(_) => ErrorCode::RefundExceedsCapture,
        RefundError::SellerCannotCover(_) => ErrorCode::RefundNotCovered,
        RefundError::Busy | RefundError::KeyReused => ErrorCode::DuplicateRequest,
        RefundError::ChainDown(_) => ErrorCode::FacilitatorUnavailable,
        RefundError::Pending | RefundError::Capturing => ErrorCode::SettlementPending,
        RefundError::Refused(_) => ErrorCode::UpstreamError,
        RefundError::Store(_) => ErrorCode::StoreUnavailable,
    };
    ApiError::new(code, e.to_string())
}

#[utoipa::path(post, path = "/api/payments/{id}/refund", tag = "payments", security(("orgKey" = [])), params(("id" = String, Path), ("Idempotency-Key" = String, Header, description = "Required: one refund per key; a repeat answers the first result")), request_body(content = RefundRequest, description = "Optional: without `amountUSDC`, all that is refundable"), responses((status = 200, description = "Refunded to the payer (also a replay of the same key)", body = RefundResult), (status = 400, description = "Above what was captured and not refunded (`REFUND_EXCEEDS_CAPTURE`), or a bad body", body = paygate_domain::ErrorBody), (status = 403, description = "Organisation suspended", body = paygate_domain::ErrorBody), (status = 404, description = "No such payment in this organisation", body = paygate_domain::ErrorBody), (status = 409, description = "Not refundable, the refund window closed, the seller's wallet cannot fund it (`REFUND_NOT_COVERED`), or the key was used with another request", body = paygate_domain::ErrorBody), (status = 502, description = "The escrow refused the refund (nothing moved)", body = paygate_domain::ErrorBody), (status = 503, description = "The chain cannot be reached (nothing moved)", body = paygate_domain::ErrorBody), (status = 504, description = "Sent, outcome not known yet (the refund, or the payment's capture after a 5 s wait): ask again with the same key", body = paygate_domain::ErrorBody)))]
pub async fn refund(
    State(state): State<AppState>,
    org: OrgAuth,
    method: Method,
    uri: Uri,
    key: IdempotencyKey,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let org = org.active()?;
    let key = IdempotencyKey(Some(key.required()?));
    let idem = Idem::from_request(key, &method, &uri, &body);
    if let Some(r) = remembered(&state, &org.id, &idem).await? {
        return Ok(r);
    }
    let input = if body.iter().all(u8::is_ascii_whitespace) {
        RefundRequest::default()
    } else {
        crate::body::parse::<RefundRequest>(&body).map_err(ApiError::from)?
    };
    let key_text = idem.as_ref().map(Idem::key);
    let made = state
        .payments
        .refund(&org.id, &id, input.amount_usdc.map(|a| a.0), key_text)
        .await
        .map_err(refused)?;
    let path = state
        .store
        .get_route(&org.id, &made.payment.route_id)
        .await?
        .map(|r| r.path);
    let out = RefundResult {
        refund: RefundView::from(&made.refund),
        payment: PaymentView::new(made.payment, path, &state),
    };
    Ok(keep_answer(&state, &org.id, &idem, &out, "the refund").await)
}
