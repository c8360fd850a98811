//! Corridor endpoints (SPEC.md 4.5): corridors, quotes, payouts and the provider's webhook.
//! Handlers parse, call the payout engine (`paygate_shared::payout::engine`: exactly-once
//! payouts, webhook events, reconciliation) and render.

use crate::auth::{AdminAuth, OrgAuth};
use crate::error::ApiError;
use crate::input::{fingerprint, parse_address, IdempotencyKey, TypedQuery};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use paygate_shared::ids::new_id;
use paygate_shared::model::Org;
use paygate_shared::payout::engine::{Accepted, NewPayout};
use paygate_shared::payout::money::{parse_amount, AmountError, QuoteBreakdown};
use paygate_shared::payout::webhook;
use paygate_shared::payout::{
    beneficiary, Corridor, CorridorStatus, Currency, PayIdempotency, Payout, PayoutStatus, Quote,
};
use paygate_shared::store::EventOutcome;
use paygate_shared::{now_rfc3339, ErrorCode};
use serde_json::{json, Value};

/// Largest webhook body accepted.
const MAX_WEBHOOK_BODY: usize = 64 * 1024;

fn err(code: ErrorCode, msg: impl Into<String>) -> ApiError {
    ApiError::new(code, msg)
}

/// The caller's corridor, or `404` (also for another organisation's).
async fn own_corridor(state: &AppState, org: &Org, id: &str) -> Result<Corridor, ApiError> {
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

/// `POST /corridors {destCurrency}`: `201` with a new corridor, or `200` with the org's
/// existing corridor for that currency.
#[utoipa::path(post, path = "/corridors", tag = "corridors", security(("orgKey" = [])), request_body = crate::schema::CorridorCreate, responses((status = 201, description = "Created (PENDING_KYC)", body = crate::schema::CorridorView), (status = 200, description = "The organisation's existing corridor for this currency", body = crate::schema::CorridorView)))]
pub async fn create(
    State(state): State<AppState>,
    auth: OrgAuth,
    body: Bytes,
) -> Result<Response, ApiError> {
    let v: Value = serde_json::from_slice(&body).map_err(|e| {
        err(
            ErrorCode::BadRequest,
            format!("body is not valid JSON: {e}"),
        )
    })?;
    let Some(obj) = v.as_object() else {
        return Err(err(ErrorCode::BadRequest, "body must be a JSON object"));
    };
    if let Some(k) = obj.keys().find(|k| k.as_str() != "destCurrency") {
        return Err(err(
            ErrorCode::BadRequest,
            format!("{k} is not a known field"),
        ));
    }
    let currency = match obj.get("destCurrency") {
        None | Some(Value::Null) => {
            return Err(err(ErrorCode::BadRequest, "destCurrency is required"))
        }
        Some(Value::String(s)) => Currency::parse(s),
        Some(_) => None,
    }
    .ok_or_else(|| {
        err(
            ErrorCode::InvalidCurrency,
            "destCurrency must be one of BRL, MXN, NGN, KES, ZAR",
        )
    })?;
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
    }
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(c.to_api_json())).into_response())
}

#[utoipa::path(get, path = "/corridors/{id}", tag = "corridors", security(("orgKey" = [])), params(("id" = String, Path)), responses((status = 200, description = "The corridor", body = crate::schema::CorridorView), (status = 404, description = "No such corridor in this organisation", body = crate::schema::ErrorDoc)))]
pub async fn get_one(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let c = own_corridor(&state, &auth.org, &id).await?;
    Ok(Json(c.to_api_json()).into_response())
}

/// `?amount=` of a quote request.
#[derive(serde::Deserialize)]
pub struct QuoteQuery {
    amount: Option<String>,
}

/// `GET /corridors/{id}/quote?amount=`: a fresh, single-use quote.
#[utoipa::path(get, path = "/corridors/{id}/quote", tag = "corridors", security(("orgKey" = [])), params(("id" = String, Path), ("amount" = String, Query, description = "USDC decimal string, at most 6 decimals")), responses((status = 200, description = "A single-use quote", body = crate::schema::QuoteView), (status = 404, description = "No such corridor in this organisation", body = crate::schema::ErrorDoc), (status = 409, description = "Corridor not ACTIVE", body = crate::schema::ErrorDoc), (status = 502, description = "The payout provider could not quote", body = crate::schema::ErrorDoc), (status = 503, description = "No payout provider configured", body = crate::schema::ErrorDoc)))]
pub async fn quote(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(id): Path<String>,
    TypedQuery(q): TypedQuery<QuoteQuery>,
) -> Result<Response, ApiError> {
    let c = own_corridor(&state, &auth.org, &id).await?;
    let amount = q
        .amount
        .ok_or_else(|| err(ErrorCode::InvalidAmount, "amount is required"))?;
    let amount = parse_amount(&amount).map_err(|e| amount_error("amount", &e))?;
    require_active(&c)?;
    let provider = state.payouts.provider()?;
    let pq = provider.quote(c.dest_currency, amount).await.map_err(|e| {
        tracing::warn!(corridor = %c.id, error = %e, "provider quote failed");
        err(
            ErrorCode::UpstreamError,
            format!("the payout provider could not quote: {e}"),
        )
    })?;
    let bps = auth
        .org
        .platform_fee_bps
        .unwrap_or(state.config.payout.platform_fee_bps);
    let breakdown = QuoteBreakdown::compute(amount, bps, pq.rail_fee, pq.fx_rate)
        .map_err(|e| amount_error("amount", &e))?;
    let ttl = i64::try_from(state.config.payout.quote_ttl_seconds).unwrap_or(i64::MAX);
    let expires = (paygate_shared::unix_now() as i64)
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
    };
    state.store.put_quote(&quote).await?;
    Ok(Json(quote.to_api_json()).into_response())
}

/// The validated body of a pay request.
struct PayInput {
    quote_id: String,
    from_address: String,
    amount: paygate_x402::money::UsdcAmount,
    beneficiary: paygate_shared::payout::Beneficiary,
}

fn pay_input(body: &[u8], currency: Currency) -> Result<PayInput, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        err(
            ErrorCode::BadRequest,
            format!("body is not valid JSON: {e}"),
        )
    })?;
    let Some(obj) = v.as_object() else {
        return Err(err(ErrorCode::BadRequest, "body must be a JSON object"));
    };
    const FIELDS: [&str; 4] = ["quoteId", "fromAddress", "amountUSDC", "beneficiary"];
    if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(err(
            ErrorCode::BadRequest,
            format!("{k} is not a known field"),
        ));
    }
    let string = |f: &str| match obj.get(f) {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 128 => Ok(s.clone()),
        Some(Value::String(s)) if !s.is_empty() => Err(format!("{f} is too long")),
        None | Some(Value::Null) | Some(Value::String(_)) => Err(format!("{f} is required")),
        Some(_) => Err(format!("{f} must be a string")),
    };
    let quote_id = string("quoteId").map_err(|m| err(ErrorCode::BadRequest, m))?;
    let from = string("fromAddress").map_err(|m| err(ErrorCode::BadRequest, m))?;
    let from_address = parse_address(&from)
        .ok_or_else(|| {
            err(
                ErrorCode::BadRequest,
                "fromAddress must be a 0x-prefixed 20-byte hex address",
            )
        })?
        .to_checksum(None);
    let amount = string("amountUSDC").map_err(|m| err(ErrorCode::InvalidAmount, m))?;
    let amount = parse_amount(&amount).map_err(|e| amount_error("amountUSDC", &e))?;
    let b = obj
        .get("beneficiary")
        .ok_or_else(|| err(ErrorCode::InvalidBeneficiary, "beneficiary is required"))?;
    let beneficiary = beneficiary::validate(b, currency)
        .map_err(|e| err(ErrorCode::InvalidBeneficiary, e.to_string()))?;
    Ok(PayInput {
        quote_id,
        from_address,
        amount,
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
#[utoipa::path(post, path = "/corridors/{id}/pay", tag = "corridors", security(("orgKey" = [])), params(("id" = String, Path), ("Idempotency-Key" = String, Header, description = "Required: one payout per key")), request_body = crate::schema::PayRequest, responses((status = 202, description = "Payout accepted (also a replay of the same key)", body = crate::schema::PayoutAccepted), (status = 404, description = "No such corridor in this organisation", body = crate::schema::ErrorDoc), (status = 409, description = "Corridor not ACTIVE, quote used, or key in flight / used with another request", body = crate::schema::ErrorDoc), (status = 502, description = "The provider refused or did not answer (kept and retried)", body = crate::schema::ErrorDoc), (status = 503, description = "No payout provider configured", body = crate::schema::ErrorDoc)))]
pub async fn pay(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(id): Path<String>,
    key: IdempotencyKey,
    body: Bytes,
) -> Result<Response, ApiError> {
    let key = key.required()?;
    let org = auth.org;
    let fp = fingerprint("POST", &format!("/corridors/{id}/pay"), &body);
    if let Some(a) = state.payouts.repeat(&org.id, &key, &fp).await? {
        return Ok(accepted(a));
    }
    let c = own_corridor(&state, &org, &id).await?;
    require_active(&c)?;
    let input = pay_input(&body, c.dest_currency)?;
    let quote = match state.store.get_quote(&input.quote_id).await? {
        Some(q) if q.corridor_id == c.id && q.org_id == org.id => q,
        _ => {
            return Err(err(
                ErrorCode::InvalidQuote,
                "quoteId is not a quote of this corridor",
            ))
        }
    };
    if quote.expires_at_unix < paygate_shared::unix_now() as i64 {
        return Err(err(
            ErrorCode::QuoteExpired,
            "the quote has expired; fetch a fresh quote",
        ));
    }
    if quote.used_by.is_some() {
        return Ok(accepted(
            state.payouts.quote_used(&org.id, &key, &fp).await?,
        ));
    }
    if input.amount != quote.breakdown.amount {
        return Err(err(
            ErrorCode::InvalidAmount,
            "amountUSDC must equal the quoted amount",
        ));
    }
    let now = now_rfc3339();
    let payout = Payout {
        id: new_id("pay"),
        org_id: org.id.clone(),
        corridor_id: c.id.clone(),
        quote_id: quote.id.clone(),
        provider_quote_id: quote.provider_quote_id.clone(),
        idempotency_key: key.clone(),
        from_address: input.from_address,
        dest_currency: c.dest_currency,
        breakdown: quote.breakdown.clone(),
        beneficiary: input.beneficiary,
        status: PayoutStatus::Initiating,
        cpn_payment_id: None,
        events: Vec::new(),
        created_at: now.clone(),
        updated_at: now,
    };
    let record = PayIdempotency {
        org_id: org.id.clone(),
        key: key.clone(),
        fingerprint: fp.clone(),
        payment_id: payout.id.clone(),
        response: None,
        created_at_unix: paygate_shared::unix_now() as i64,
    };
    let new = NewPayout {
        key: record,
        payout,
    };
    Ok(accepted(state.payouts.start(new).await?))
}

/// `GET /corridors/{id}/payments/{paymentId}`.
#[utoipa::path(get, path = "/corridors/{id}/payments/{payment_id}", tag = "corridors", security(("orgKey" = [])), params(("id" = String, Path), ("payment_id" = String, Path)), responses((status = 200, description = "The payout", body = crate::schema::PayoutView), (status = 404, description = "No such payout in this corridor", body = crate::schema::ErrorDoc)))]
pub async fn get_payment(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path((id, payment_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let c = own_corridor(&state, &auth.org, &id).await?;
    match state.store.get_payout(&payment_id).await? {
        Some(p) if p.corridor_id == c.id && p.org_id == auth.org.id => {
            Ok(Json(p.to_api_json()).into_response())
        }
        _ => Err(err(
            ErrorCode::NotFound,
            "no payment with this id in this corridor",
        )),
    }
}

/// `POST /admin/corridors/{id}/approve-kyc`: `PENDING_KYC` -> `ACTIVE` (idempotent).
#[utoipa::path(post, path = "/admin/corridors/{id}/approve-kyc", tag = "admin", security(("adminToken" = [])), params(("id" = String, Path)), responses((status = 200, description = "ACTIVE (idempotent)", body = crate::schema::CorridorView), (status = 404, description = "No such corridor", body = crate::schema::ErrorDoc)))]
pub async fn approve_kyc(
    State(state): State<AppState>,
    _admin: AdminAuth,
    Path(id): Path<String>,
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
    }
    Ok(Json(c.to_api_json()).into_response())
}

/// `POST /webhooks/provider`: the signature is checked over the raw body before anything else.
#[utoipa::path(post, path = "/webhooks/provider", tag = "corridors", params(("Provider-Signature" = String, Header, description = "HMAC-SHA256 of the raw body: hex, or `t=<unix>,v1=<hex>`")), request_body = Object, responses((status = 200, description = "Applied, ignored or duplicate", body = crate::schema::WebhookAck), (status = 202, description = "Kept: for a payout not known yet", body = crate::schema::WebhookAck), (status = 401, description = "Signature missing, wrong or stale", body = crate::schema::ErrorDoc)))]
pub async fn webhook(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    if body.len() > MAX_WEBHOOK_BODY {
        return Err(err(ErrorCode::PayloadTooLarge, "webhook body too large"));
    }
    let sig = headers
        .get("provider-signature")
        .map(|v| v.to_str().unwrap_or("\u{0}"));
    let verified = webhook::verify(
        sig,
        &body,
        &state.webhook_secrets,
        state.config.payout.webhook_tolerance_seconds,
        paygate_shared::unix_now(),
    );
    if let Err(e) = verified {
        tracing::warn!(reason = %e, "webhook refused");
        return Err(err(
            ErrorCode::Unauthorized,
            format!("webhook refused: {e}"),
        ));
    }
    let event =
        webhook::parse_event(&body).map_err(|e| err(ErrorCode::BadRequest, e.to_string()))?;
    let (status, ack) = match state.payouts.apply_event(&event, &body).await? {
        EventOutcome::Duplicate => (StatusCode::OK, json!({"status": "duplicate"})),
        EventOutcome::Applied(s) => (
            StatusCode::OK,
            json!({"status": "applied", "paymentStatus": s.as_str()}),
        ),
        EventOutcome::Ignored(s) => (
            StatusCode::OK,
            json!({"status": "ignored", "paymentStatus": s.as_str()}),
        ),
        EventOutcome::Orphaned => (StatusCode::ACCEPTED, json!({"status": "kept"})),
    };
    Ok((status, Json(ack)).into_response())
}
