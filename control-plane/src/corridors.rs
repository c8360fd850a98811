//! Corridor endpoints (SPEC.md 4.5): corridors, quotes, payouts and the provider's webhook.
//! Handlers parse, call the payout engine (`paygate_payouts::engine`: exactly-once
//! payouts, webhook events, reconciliation) and render.

use crate::audit::{self, json_of, Actor, Caller, Change};
use crate::auth::{AdminAuth, OrgAuth};
use crate::body::fields::{EvmAddress, UsdcDecimal, Word};
use crate::body::{BodyError, ProblemKind, RequestBody};
use crate::error::ApiError;
use crate::input::{fingerprint, IdempotencyKey, TypedQuery};
use crate::state::AppState;
use crate::views::WebhookAck;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use paygate_domain::ids::new_id;
use paygate_domain::model::Org;
use paygate_domain::{now_rfc3339, ErrorCode};
use paygate_payouts::beneficiary::{self, BeneficiaryInput};
use paygate_payouts::engine::{Accepted, PayoutOrder};
use paygate_payouts::money::{parse_amount, AmountError, QuoteBreakdown};
use paygate_payouts::rfi::RfiError;
use paygate_payouts::store::EventOutcome;
use paygate_payouts::views::{CorridorView, PayoutAccepted, PayoutView, QuoteView};
use paygate_payouts::{cpn, webhook};
use paygate_payouts::{Corridor, CorridorStatus, Currency, PayoutStatus, Quote};
use serde::Deserialize;
use utoipa::ToSchema;

/// Largest webhook body accepted.
const MAX_WEBHOOK_BODY: usize = 64 * 1024;

fn err(code: ErrorCode, msg: impl Into<String>) -> ApiError {
    ApiError::new(code, msg)
}

/// The caller's corridor, or `404` (also for another organisation's).
pub(crate) async fn own_corridor(
    state: &AppState,
    org: &Org,
    id: &str,
) -> Result<Corridor, ApiError> {
    match state.store.get_corridor(id).await? {
        Some(c) if c.org_id == org.id => Ok(c),
        _ => Err(err(ErrorCode::NotFound, "no corridor with this id")),
    }
}

fn require_active(c: &Corridor) -> Result<(), ApiError> {
    if c.status == CorridorStatus::Active {
        Ok(())
    } else {
        Err(err(
            ErrorCode::CorridorNotActive,
            "the corridor is not ACTIVE: its KYC has not been approved",
        ))
    }
}

fn amount_error(field: &str, e: &AmountError) -> ApiError {
    err(ErrorCode::InvalidAmount, format!("{field} {e}"))
}

/// `POST /corridors`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(example = json!({"destCurrency": "BRL"}))]
pub struct CorridorCreate {
    dest_currency: Currency,
}

impl RequestBody for CorridorCreate {}

/// `POST /corridors/{id}/pay`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(example = json!({"quoteId": "qt_0193d0c3c0d47a8e9f1b2c3d4e5f6a7b",
    "fromAddress": "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720", "amountUSDC": "100",
    "beneficiary": {"name": "Ana Souza", "bankName": "Banco Teste",
    "accountNumber": "0001-23456-7", "country": "BR", "currency": "BRL"}}))]
pub struct PayRequest {
    // From `GET /corridors/{id}/quote`; single-use.
    #[schema(inline)]
    quote_id: Word<128>,
    // The wallet the USDC comes from, recorded with the payout.
    #[schema(inline)]
    from_address: EvmAddress,
    // Equal to the quote's amount.
    #[serde(rename = "amountUSDC")]
    #[schema(inline)]
    amount_usdc: UsdcDecimal,
    beneficiary: BeneficiaryInput,
}

impl RequestBody for PayRequest {}

/// The corridor endpoints' error answers (SPEC 4.5): the first problem only, with the code its
/// field calls for; an unknown field first.
fn corridor_error(e: BodyError) -> ApiError {
    let problems = match e {
        BodyError::Malformed(m) => return err(ErrorCode::BadRequest, m),
        BodyError::Fields(p) => p,
    };
    let Some(p) = problems
        .iter()
        .find(|p| p.kind == ProblemKind::Unknown)
        .or(problems.first())
    else {
        return err(ErrorCode::BadRequest, "invalid request body");
    };
    let field = p.detail.field.as_str();
    // SPEC 7.2's code where it has one (BAD_REQUEST for a missing field); an unknown field or a
    // bad value of a field SPEC names no code for is VALIDATION_ERROR, as the management API.
    let code = match (p.kind, field.split('.').next().unwrap_or_default()) {
        (ProblemKind::Unknown, _) => ErrorCode::ValidationError,
        (_, "beneficiary") => ErrorCode::InvalidBeneficiary,
        (_, "amountUSDC") => ErrorCode::InvalidAmount,
        (ProblemKind::Invalid, "destCurrency") => ErrorCode::InvalidCurrency,
        (ProblemKind::Missing, _) => ErrorCode::BadRequest,
        _ => ErrorCode::ValidationError,
    };
    let message = if code == ErrorCode::ValidationError {
        format!("{field}: {}", p.detail.problem)
    } else {
        format!("{field} {}", p.detail.problem)
    };
    // The code of the problem that decides it, and every problem in `details`, as the
    // management API reports them.
    let mut e = err(code, message);
    e.details = problems.into_iter().map(|p| p.detail).collect();
    e
}

/// `POST /corridors {destCurrency}`: `201` with a new corridor, or `200` with the org's
/// existing corridor for that currency.
#[utoipa::path(post, path = "/corridors", tag = "corridors", security(("orgKey" = [])), request_body = CorridorCreate, responses((status = 403, description = "Organisation suspended", body = paygate_domain::ErrorBody), (status = 201, description = "Created (PENDING_KYC)", body = CorridorView), (status = 200, description = "The organisation's existing corridor for this currency", body = CorridorView)))]
pub async fn create(
    State(state): State<AppState>,
    auth: OrgAuth,
    caller: Caller,
    body: Bytes,
) -> Result<Response, ApiError> {
    auth.ensure_active()?;
    let currency = crate::body::parse::<CorridorCreate>(&body)
        .map_err(corridor_error)?
        .dest_currency;
    let now = now_rfc3339();
    let fresh = Corridor {
        id: new_id("cor"),
        org_id: auth.org.id.clone(),
        dest_currency: currency,
        status: CorridorStatus::PendingKyc,
        created_at: now.clone(),
        updated_at: now,
    };
    let (c, created) = state.store.create_corridor(&fresh).await?;
    if created {
        tracing::info!(org = %auth.org.slug, corridor = %c.id, currency = %currency, "corridor created");
        let after = json_of(&CorridorView::from(&c));
        let change = Change::created(&c.org_id, "corridor.created", &c.id, after);
        audit::record(&state, Actor::Key(&auth), &caller, change).await;
    }
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(CorridorView::from(&c))).into_response())
}

#[utoipa::path(get, path = "/corridors/{id}", tag = "corridors", security(("orgKey" = [])), params(("id" = String, Path)), responses((status = 200, description = "The corridor", body = CorridorView), (status = 404, description = "No such corridor in this organisation", body = paygate_domain::ErrorBody)))]
pub async fn get_one(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let c = own_corridor(&state, &auth.org, &id).await?;
    Ok(Json(CorridorView::from(&c)).into_response())
}

/// `?amount=` of a quote request.
#[derive(serde::Deserialize)]
pub struct QuoteQuery {
    amount: Option<String>,
}

/// `GET /corridors/{id}/quote?amount=`: a fresh, single-use quote.
#[utoipa::path(get, path = "/corridors/{id}/quote", tag = "corridors", security(("orgKey" = [])), params(("id" = String, Path), ("amount" = String, Query, description = "USDC decimal string, at most 6 decimals")), responses((status = 403, description = "Organisation suspended", body = paygate_domain::ErrorBody), (status = 200, description = "A single-use quote", body = QuoteView), (status = 404, description = "No such corridor in this organisation", body = paygate_domain::ErrorBody), (status = 409, description = "Corridor not ACTIVE", body = paygate_domain::ErrorBody), (status = 502, description = "The payout provider could not quote", body = paygate_domain::ErrorBody), (status = 503, description = "No payout provider configured", body = paygate_domain::ErrorBody)))]
pub async fn quote(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(id): Path<String>,
    TypedQuery(q): TypedQuery<QuoteQuery>,
) -> Result<Response, ApiError> {
    let c = own_corridor(&state, &auth.org, &id).await?;
    auth.ensure_active()?;
    let amount = q
        .amount
        .ok_or_else(|| err(ErrorCode::InvalidAmount, "amount is required"))?;
    let amount = parse_amount(&amount).map_err(|e| amount_error("amount", &e))?;
    require_active(&c)?;
    let provider = state.payouts.provider()?;
    let bps = auth
        .org
        .platform_fee_bps
        .unwrap_or(state.config.payout.platform_fee_bps);
    // The provider quotes the USDC it will receive: the amount less the platform fee.
    let to_provider = paygate_x402::money::UsdcAmount(
        amount
            .0
            .saturating_sub(paygate_payouts::money::platform_fee(amount, bps).0),
    );
    if to_provider.0 == 0 {
        return Err(amount_error("amount", &AmountError::TooSmall));
    }
    let pq = provider
        .quote(c.dest_currency, to_provider)
        .await
        .map_err(|e| {
            tracing::warn!(corridor = %c.id, error = %e, "provider quote failed");
            err(
                ErrorCode::UpstreamError,
                format!("the payout provider could not quote: {e}"),
            )
        })?;
    let breakdown = QuoteBreakdown::compute(amount, bps, pq.rail_fee, pq.fx_rate)
        .map_err(|e| amount_error("amount", &e))?;
    let ttl = i64::try_from(state.config.payout.quote_ttl_seconds).unwrap_or(i64::MAX);
    let expires = (paygate_domain::unix_now() as i64)
        .saturating_add(ttl)
        .min(pq.expires_at_unix);
    let quote = Quote {
        id: new_id("qt"),
        org_id: auth.org.id.clone(),
        corridor_id: c.id.clone(),
        provider_quote_id: pq.id,
        dest_currency: c.dest_currency,
        breakdown,
        expires_at_unix: expires,
        created_at: now_rfc3339(),
        used_by: None,
        funding_address: pq.funding_address.map(|a| a.to_checksum(None)),
        encryption_key: pq.encryption_key,
    };
    state.store.put_quote(&quote).await?;
    Ok(Json(QuoteView::from(&quote)).into_response())
}

/// The validated body of a pay request.
struct PayInput {
    quote_id: String,
    from_address: String,
    amount: paygate_x402::money::UsdcAmount,
    beneficiary: paygate_payouts::Beneficiary,
}

fn pay_input(body: &[u8], currency: Currency) -> Result<PayInput, ApiError> {
    let b = crate::body::parse::<PayRequest>(body).map_err(corridor_error)?;
    let beneficiary = beneficiary::validate(&b.beneficiary, currency).map_err(|problems| {
        // The first problem is the message; every one is in `details` with its field.
        let message = problems
            .first()
            .map(ToString::to_string)
            .unwrap_or_default();
        let mut e = err(ErrorCode::InvalidBeneficiary, message);
        e.details = problems
            .iter()
            .map(|p| {
                let field = p.field();
                let text = p.to_string();
                let problem = text
                    .strip_prefix(&format!("{field} "))
                    .unwrap_or(&text)
                    .to_string();
                paygate_domain::FieldProblem::new(field, problem)
            })
            .collect();
        e
    })?;
    Ok(PayInput {
        quote_id: b.quote_id.0,
        from_address: b.from_address.0.to_checksum(None),
        amount: b.amount_usdc.0,
        beneficiary,
    })
}

fn accepted(a: Accepted) -> Response {
    let mut resp = (
        StatusCode::ACCEPTED,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        a.body,
    )
        .into_response();
    if a.replayed {
        resp.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    resp
}

/// `POST /corridors/{id}/pay`: exactly one payout per `Idempotency-Key`.
#[utoipa::path(post, path = "/corridors/{id}/pay", tag = "corridors", security(("orgKey" = [])), params(("id" = String, Path), ("Idempotency-Key" = String, Header, description = "Required: one payout per key")), request_body = PayRequest, responses((status = 403, description = "Organisation suspended", body = paygate_domain::ErrorBody), (status = 202, description = "Payout accepted (also a replay of the same key)", body = PayoutAccepted), (status = 404, description = "No such corridor in this organisation", body = paygate_domain::ErrorBody), (status = 409, description = "Corridor not ACTIVE, quote used, or key in flight / used with another request", body = paygate_domain::ErrorBody), (status = 502, description = "The provider refused or did not answer (kept and retried)", body = paygate_domain::ErrorBody), (status = 503, description = "No payout provider configured", body = paygate_domain::ErrorBody)))]
pub async fn pay(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(id): Path<String>,
    key: IdempotencyKey,
    caller: Caller,
    body: Bytes,
) -> Result<Response, ApiError> {
    let key = key.required()?;
    let org = auth.org.clone();
    let fp = fingerprint("POST", &format!("/corridors/{id}/pay"), &body);
    if let Some(a) = state.payouts.repeat(&org.id, &key, &fp).await? {
        return Ok(accepted(a));
    }
    // A replay answers as before; a suspended organisation starts no new payout.
    auth.ensure_active()?;
    let c = own_corridor(&state, &org, &id).await?;
    require_active(&c)?;
    let input = pay_input(&body, c.dest_currency)?;
    let order = PayoutOrder {
        org_id: org.id.clone(),
        corridor_id: c.id.clone(),
        dest_currency: c.dest_currency,
        key,
        fingerprint: fp,
        quote_id: input.quote_id,
        amount: input.amount,
        from_address: input.from_address,
        beneficiary: input.beneficiary,
    };
    let a = state.payouts.pay(order).await?;
    if !a.replayed {
        // What the answer says (ids and status); the beneficiary's details are not recorded.
        let after: Option<serde_json::Value> = serde_json::from_str(&a.body).ok();
        let target = after
            .as_ref()
            .and_then(|v| v["paymentId"].as_str())
            .unwrap_or_default();
        let change = Change::created(&org.id, "payout.created", target, after.clone());
        audit::record(&state, Actor::Key(&auth), &caller, change).await;
    }
    Ok(accepted(a))
}

/// `GET /corridors/{id}/payments/{paymentId}`.
#[utoipa::path(get, path = "/corridors/{id}/payments/{payment_id}", tag = "corridors", security(("orgKey" = [])), params(("id" = String, Path), ("payment_id" = String, Path)), responses((status = 200, description = "The payout", body = PayoutView), (status = 404, description = "No such payout in this corridor", body = paygate_domain::ErrorBody)))]
pub async fn get_payment(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path((id, payment_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let c = own_corridor(&state, &auth.org, &id).await?;
    match state.store.get_payout(&payment_id).await? {
        Some(p) if p.corridor_id == c.id && p.org_id == auth.org.id => {
            Ok(Json(PayoutView::from(&p)).into_response())
        }
        _ => Err(err(
            ErrorCode::NotFound,
            "no payment with this id in this corridor",
        )),
    }
}

/// `POST /corridors/{id}/payments/{paymentId}/rfi`'s body.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(example = json!({"answers": {"SOURCE_OF_FUNDS": "API sales", "ORIGINATOR_DOB": "1990-01-31"}}))]
pub struct RfiAnswerRequest {
    /// The fields the RFI's `schema` asks for; checked against it before anything is sent.
    #[schema(value_type = Object)]
    answers: serde_json::Map<String, serde_json::Value>,
}

impl RequestBody for RfiAnswerRequest {}

/// `POST /corridors/{id}/payments/{paymentId}/rfi`: answers the payout's open request for
/// information; the answer is encrypted to the provider's key and sent, and the RFI goes to
/// review.
#[utoipa::path(post, path = "/corridors/{id}/payments/{payment_id}/rfi", tag = "corridors", security(("orgKey" = [])), params(("id" = String, Path), ("payment_id" = String, Path)), request_body = RfiAnswerRequest, responses((status = 200, description = "Answer sent: the payout, its RFI IN_REVIEW", body = PayoutView), (status = 400, description = "The answer does not meet the RFI's schema (every field in details); nothing sent", body = paygate_domain::ErrorBody), (status = 404, description = "No such payout in this corridor", body = paygate_domain::ErrorBody), (status = 409, description = "RFI_NOT_OPEN: no request for information waits for an answer", body = paygate_domain::ErrorBody), (status = 502, description = "The provider refused the answer or did not answer (send it again)", body = paygate_domain::ErrorBody)))]
pub async fn answer_rfi(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path((id, payment_id)): Path<(String, String)>,
    caller: Caller,
    body: Bytes,
) -> Result<Response, ApiError> {
    let c = own_corridor(&state, &auth.org, &id).await?;
    let b = crate::body::parse::<RfiAnswerRequest>(&body).map_err(corridor_error)?;
    // Which fields were answered, never their values (personal data).
    let fields: Vec<&String> = b.answers.keys().collect();
    let answered = Some(serde_json::json!({ "rfiFieldsAnswered": fields }));
    let answer = serde_json::Value::Object(b.answers.clone());
    match state
        .payouts
        .answer_rfi(&auth.org.id, &c.id, &payment_id, &answer)
        .await
    {
        Ok(p) => {
            let change = Change::created(&auth.org.id, "payout.rfi_answered", &p.id, answered);
            audit::record(&state, Actor::Key(&auth), &caller, change).await;
            Ok(Json(PayoutView::from(&p)).into_response())
        }
        Err(RfiError::Store(e)) => Err(e.into()),
        Err(RfiError::Invalid(problems)) => Err(ApiError::validation(problems)),
        Err(e) => Err(err(e.code(), e.to_string())),
    }
}

/// `POST /corridors/{id}/payments/{paymentId}/refresh`: reads the payout's status from the
/// provider and applies it as its webhook would (for a payout whose notifications were lost).
#[utoipa::path(post, path = "/corridors/{id}/payments/{payment_id}/refresh", tag = "corridors", security(("orgKey" = [])), params(("id" = String, Path), ("payment_id" = String, Path)), responses((status = 200, description = "The payout, with what the provider's status read changed", body = PayoutView), (status = 404, description = "No such payout in this corridor", body = paygate_domain::ErrorBody), (status = 502, description = "The provider refused or did not answer", body = paygate_domain::ErrorBody)))]
pub async fn refresh(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path((id, payment_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let c = own_corridor(&state, &auth.org, &id).await?;
    match state
        .payouts
        .refresh(&auth.org.id, &c.id, &payment_id)
        .await
    {
        Ok(p) => Ok(Json(PayoutView::from(&p)).into_response()),
        Err(RfiError::Store(e)) => Err(e.into()),
        Err(e) => Err(err(e.code(), e.to_string())),
    }
}

/// `POST /admin/corridors/{id}/approve-kyc`: `PENDING_KYC` -> `ACTIVE` (idempotent).
#[utoipa::path(post, path = "/admin/corridors/{id}/approve-kyc", tag = "admin", security(("adminToken" = [])), params(("id" = String, Path)), responses((status = 200, description = "ACTIVE (idempotent)", body = CorridorView), (status = 404, description = "No such corridor", body = paygate_domain::ErrorBody)))]
pub async fn approve_kyc(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path(id): Path<String>,
    caller: Caller,
) -> Result<Response, ApiError> {
    let mut c = state
        .store
        .get_corridor(&id)
        .await?
        .ok_or_else(|| err(ErrorCode::NotFound, "no corridor with this id"))?;
    if c.status != CorridorStatus::Active {
        c.status = CorridorStatus::Active;
        c.updated_at = now_rfc3339();
        state.store.update_corridor(&c).await?;
        tracing::info!(corridor = %c.id, "corridor KYC approved");
        let change = Change::created(
            &c.org_id,
            "corridor.kyc_approved",
            &c.id,
            json_of(&CorridorView::from(&c)),
        );
        audit::record(&state, Actor::Admin, &caller, change).await;
    }
    Ok(Json(CorridorView::from(&c)).into_response())
}

fn ack(status: &'static str, payout: Option<PayoutStatus>) -> WebhookAck {
    WebhookAck {
        status,
        payment_status: payout.map(PayoutStatus::as_str),
    }
}

fn refused(e: impl std::fmt::Display) -> ApiError {
    tracing::warn!(reason = %e, "webhook refused");
    err(ErrorCode::Unauthorized, format!("webhook refused: {e}"))
}

/// `POST /webhooks/provider`: the signature is checked over the raw body before anything else:
/// SPEC's HMAC `Provider-Signature`, or CPN's ECDSA `X-Circle-Signature` with `X-Circle-Key-Id`.
#[utoipa::path(post, path = "/webhooks/provider", tag = "corridors", params(("Provider-Signature" = Option<String>, Header, description = "HMAC-SHA256 of the raw body: hex, or `t=<unix>,v1=<hex>`"), ("X-Circle-Signature" = Option<String>, Header, description = "CPN: base64 ECDSA P-256 SHA-256 signature of the raw body"), ("X-Circle-Key-Id" = Option<String>, Header, description = "CPN: the UUID of the key that signed")), request_body = Object, responses((status = 200, description = "Applied, ignored or duplicate", body = WebhookAck), (status = 202, description = "Kept: for a payout not known yet", body = WebhookAck), (status = 401, description = "Signature missing, wrong or stale", body = paygate_domain::ErrorBody)))]
pub async fn webhook(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    if body.len() > MAX_WEBHOOK_BODY {
        return Err(err(ErrorCode::PayloadTooLarge, "webhook body too large"));
    }
    let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap_or("\u{0}"));
    let circle = (header(cpn::SIGNATURE_HEADER), header(cpn::KEY_ID_HEADER));
    let event = if circle.0.is_some() || circle.1.is_some() {
        // CPN's ECDSA signature: the key by its id from the configured provider.
        let verified = match &state.notification_keys {
            Some(keys) => keys.verify(circle.1, circle.0, &body).await,
            None => Err(cpn::SignatureError::NotConfigured),
        };
        match verified {
            Ok(()) => {}
            Err(e @ cpn::SignatureError::KeyUnavailable(_)) => {
                tracing::warn!(reason = %e, "webhook not checked");
                return Err(err(
                    ErrorCode::UpstreamError,
                    format!("webhook not checked: {e}"),
                ));
            }
            Err(e) => return Err(refused(e)),
        }
        cpn::parse_notification(&body)
    } else {
        let verified = webhook::verify(
            header("provider-signature"),
            &body,
            &state.webhook_secrets,
            state.config.payout.webhook_tolerance_seconds,
            paygate_domain::unix_now(),
        );
        if let Err(e) = verified {
            return Err(refused(e));
        }
        webhook::parse_event(&body)
    }
    .map_err(|e| err(ErrorCode::BadRequest, e.to_string()))?;
    let (status, ack) = match state.payouts.apply_event(&event, &body).await? {
        EventOutcome::Duplicate => (StatusCode::OK, ack("duplicate", None)),
        EventOutcome::Applied(s, _) => (StatusCode::OK, ack("applied", Some(s))),
        EventOutcome::Ignored(s) => (StatusCode::OK, ack("ignored", Some(s))),
        EventOutcome::Orphaned => (StatusCode::ACCEPTED, ack("kept", None)),
    };
    Ok((status, Json(ack)).into_response())
}

/// An organisation's payout wallet: where its payouts' USDC comes from on chain.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PayoutWalletView {
    /// The wallet's address (checksummed): send it the USDC payouts are to take.
    address: String,
    /// The network (CAIP-2) and token the payouts are funded with.
    network: String,
    asset: String,
    /// Its USDC balance now, 6-place string.
    usdc_balance: String,
}

/// `GET /api/payout-wallet`: the organisation's payout wallet and its USDC balance. `404` when
/// this server funds no payouts on chain (there is no payout wallet then).
#[utoipa::path(get, path = "/api/payout-wallet", tag = "corridors", security(("orgKey" = [])), responses((status = 200, description = "The payout wallet and its balance", body = PayoutWalletView), (status = 502, description = "The chain could not be read", body = paygate_domain::ErrorBody), (status = 404, description = "Payouts are not funded on chain on this server: no payout wallet", body = paygate_domain::ErrorBody)))]
pub async fn payout_wallet(
    State(state): State<AppState>,
    OrgAuth { org, .. }: OrgAuth,
) -> Result<Json<PayoutWalletView>, ApiError> {
    let Some(funding) = state.payouts.funding() else {
        return Err(err(
            ErrorCode::NotFound,
            "no payout wallet: payouts are not funded on chain on this server \
             (payout.funding_network is not set)",
        ));
    };
    let balance = funding.balance(&org.id).await.map_err(|e| {
        err(
            ErrorCode::UpstreamError,
            format!("the payout wallet's balance could not be read: {e}"),
        )
    })?;
    let network = funding.network();
    Ok(Json(PayoutWalletView {
        address: funding.wallet(&org.id).to_checksum(None),
        network: network.caip2.clone(),
        asset: network.config.asset.to_checksum(None),
        usdc_balance: paygate_payouts::money::usdc_string(balance),
    }))
}
