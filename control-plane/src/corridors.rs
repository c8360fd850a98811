//! Corridor endpoints (SPEC.md 4.5): corridors, quotes, exactly-once payouts, the provider's
//! webhook, and the loop that finishes payouts a crash or an outage left mid-way.
//!
//! A payout is exactly-once because (1) the `Idempotency-Key`, the quote's use and the payout
//! record are written in one durable transaction *before* the provider is called, (2) the
//! provider is given our payment id as its idempotency reference, so calling it again (after a
//! crash, a timeout, a retry) returns the payout it already made, and (3) only one task drives a
//! given payout at a time in this process (`Claims`).

use crate::auth::{AdminAuth, OrgAuth};
use crate::error::ApiError;
use crate::input::{fingerprint, parse_address, query_map};
use crate::AppState;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use paygate_shared::ids::new_id;
use paygate_shared::model::Org;
use paygate_shared::payout::money::{parse_amount, AmountError, QuoteBreakdown};
use paygate_shared::payout::provider::{PayoutProvider, PayoutRequest, ProviderError};
use paygate_shared::payout::webhook::{self, ProviderEvent};
use paygate_shared::payout::{
    beneficiary, Corridor, CorridorStatus, Currency, PayIdempotency, Payout, PayoutStatus, Quote,
};
use paygate_shared::store::{BeginPayout, EventOutcome};
use paygate_shared::{now_rfc3339, ErrorCode};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// Largest webhook body accepted.
const MAX_WEBHOOK_BODY: usize = 64 * 1024;

/// Payouts being driven by a task of this process, by `org \0 Idempotency-Key`.
#[derive(Default)]
pub struct Claims(Mutex<HashSet<String>>);

/// Held while a payout is driven; releases the claim when dropped.
pub struct Claim {
    claims: Arc<Claims>,
    key: String,
}

impl Claims {
    fn try_claim(self: &Arc<Self>, org_id: &str, key: &str) -> Option<Claim> {
        let k = format!("{org_id}\0{key}");
        let mut set = self.0.lock().unwrap_or_else(|p| p.into_inner());
        set.insert(k.clone()).then(|| Claim {
            claims: self.clone(),
            key: k,
        })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut set = self.claims.0.lock().unwrap_or_else(|p| p.into_inner());
        set.remove(&self.key);
    }
}

fn err(code: ErrorCode, msg: impl Into<String>) -> ApiError {
    ApiError::new(code, msg)
}

fn provider(state: &AppState) -> Result<Arc<dyn PayoutProvider>, ApiError> {
    state.payout_provider.clone().ok_or_else(|| {
        err(
            ErrorCode::Misconfigured,
            "no payout provider is configured on this server",
        )
    })
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
#[utoipa::path(post, path = "/corridors", tag = "corridors", security(("orgKey" = [])), request_body = crate::openapi::CorridorCreate, responses((status = 201, description = "Created (PENDING_KYC)", body = crate::openapi::CorridorView), (status = 200, description = "The organisation's existing corridor for this currency", body = crate::openapi::CorridorView)))]
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

#[utoipa::path(get, path = "/corridors/{id}", tag = "corridors", security(("orgKey" = [])), params(("id" = String, Path)), responses((status = 200, description = "The corridor", body = crate::openapi::CorridorView), (status = 404, description = "No such corridor in this organisation", body = crate::openapi::ErrorDoc)))]
pub async fn get_one(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let c = own_corridor(&state, &auth.org, &id).await?;
    Ok(Json(c.to_api_json()).into_response())
}

/// `GET /corridors/{id}/quote?amount=`: a fresh, single-use quote.
#[utoipa::path(get, path = "/corridors/{id}/quote", tag = "corridors", security(("orgKey" = [])), params(("id" = String, Path), ("amount" = String, Query, description = "USDC decimal string, at most 6 decimals")), responses((status = 200, description = "A single-use quote", body = crate::openapi::QuoteView), (status = 404, description = "No such corridor in this organisation", body = crate::openapi::ErrorDoc), (status = 409, description = "Corridor not ACTIVE", body = crate::openapi::ErrorDoc), (status = 502, description = "The payout provider could not quote", body = crate::openapi::ErrorDoc), (status = 503, description = "No payout provider configured", body = crate::openapi::ErrorDoc)))]
pub async fn quote(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let c = own_corridor(&state, &auth.org, &id).await?;
    let q = query_map(raw.as_deref()).map_err(|e| err(ErrorCode::BadRequest, e.message))?;
    let amount = q
        .get("amount")
        .ok_or_else(|| err(ErrorCode::InvalidAmount, "amount is required"))?;
    let amount = parse_amount(amount).map_err(|e| amount_error("amount", &e))?;
    require_active(&c)?;
    let provider = provider(&state)?;
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
    amount: paygate_shared::UsdcAmount,
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
    let beneficiary =
        beneficiary::validate(b, currency).map_err(|m| err(ErrorCode::InvalidBeneficiary, m))?;
    Ok(PayInput {
        quote_id,
        from_address,
        amount,
        beneficiary,
    })
}

fn accepted(body: &str, replayed: bool) -> Response {
    let mut resp = (
        StatusCode::ACCEPTED,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    if replayed {
        resp.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    resp
}

fn in_flight() -> ApiError {
    err(
        ErrorCode::DuplicateRequest,
        "a payout with this Idempotency-Key is still in flight; retry shortly",
    )
}

/// The answer to a request whose key was used before.
async fn answer_used_key(
    state: &AppState,
    prev: PayIdempotency,
    fingerprint: &str,
) -> Result<Response, ApiError> {
    if prev.fingerprint != fingerprint {
        return Err(err(
            ErrorCode::DuplicateRequest,
            "Idempotency-Key was already used with a different request",
        ));
    }
    if let Some(body) = prev.response {
        return Ok(accepted(&body, true));
    }
    // In flight: here (409), or left over by a crash or an outage (finish it now).
    let Some(claim) = state.claims.try_claim(&prev.org_id, &prev.key) else {
        return Err(in_flight());
    };
    let payout = state
        .store
        .get_payout(&prev.payment_id)
        .await?
        .ok_or_else(|| ApiError::internal("idempotency key without its payout"))?;
    drive(state, payout, claim)
        .await
        .map(|b| accepted(&b, true))
}

/// The quote is used: by this very key (a concurrent twin that got there first: answer as a
/// repeat), or by another payout.
async fn quote_used(
    state: &AppState,
    org_id: &str,
    key: &str,
    fp: &str,
) -> Result<Response, ApiError> {
    if let Some(prev) = state.store.get_pay_key(org_id, key).await? {
        return answer_used_key(state, prev, fp).await;
    }
    Err(err(
        ErrorCode::QuoteAlreadyUsed,
        "the quote was already used; fetch a fresh quote",
    ))
}

/// `POST /corridors/{id}/pay`: exactly one payout per `Idempotency-Key`.
#[utoipa::path(post, path = "/corridors/{id}/pay", tag = "corridors", security(("orgKey" = [])), params(("id" = String, Path), ("Idempotency-Key" = String, Header, description = "Required: one payout per key")), request_body = crate::openapi::PayRequest, responses((status = 202, description = "Payout accepted (also a replay of the same key)", body = crate::openapi::PayoutAccepted), (status = 404, description = "No such corridor in this organisation", body = crate::openapi::ErrorDoc), (status = 409, description = "Corridor not ACTIVE, quote used, or key in flight / used with another request", body = crate::openapi::ErrorDoc), (status = 502, description = "The provider refused or did not answer (kept and retried)", body = crate::openapi::ErrorDoc), (status = 503, description = "No payout provider configured", body = crate::openapi::ErrorDoc)))]
pub async fn pay(
    State(state): State<AppState>,
    auth: OrgAuth,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let key = match headers.get("idempotency-key") {
        None => {
            return Err(err(
                ErrorCode::MissingIdempotencyKey,
                "Idempotency-Key header is required",
            ))
        }
        Some(v) => v
            .to_str()
            .ok()
            .filter(|s| !s.is_empty() && s.len() <= 255 && s.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or_else(|| {
                err(
                    ErrorCode::BadRequest,
                    "Idempotency-Key must be 1 to 255 visible ASCII characters",
                )
            })?
            .to_string(),
    };
    let org = auth.org;
    let fp = fingerprint("POST", &format!("/corridors/{id}/pay"), &body);
    if let Some(prev) = state.store.get_pay_key(&org.id, &key).await? {
        return answer_used_key(&state, prev, &fp).await;
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
        return quote_used(&state, &org.id, &key, &fp).await;
    }
    if input.amount != quote.breakdown.amount {
        return Err(err(
            ErrorCode::InvalidAmount,
            "amountUSDC must equal the quoted amount",
        ));
    }
    let Some(claim) = state.claims.try_claim(&org.id, &key) else {
        return Err(in_flight());
    };
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
    match state.store.begin_payout(&record, &payout).await? {
        BeginPayout::Started => {}
        BeginPayout::KeyUsed(prev) => {
            drop(claim);
            return answer_used_key(&state, *prev, &fp).await;
        }
        BeginPayout::QuoteUsed => {
            drop(claim);
            return quote_used(&state, &org.id, &key, &fp).await;
        }
    }
    tracing::info!(org = %org.slug, payment = %payout.id, "payout reserved");
    drive(&state, payout, claim)
        .await
        .map(|b| accepted(&b, false))
}

/// Asks the provider for the payout (idempotent on our payment id) and records the answer.
/// Runs in its own task so a client that disconnects does not cut it short.
async fn drive(state: &AppState, payout: Payout, claim: Claim) -> Result<String, ApiError> {
    let state2 = state.clone();
    let task = tokio::spawn(async move {
        let _claim = claim;
        drive_inner(&state2, payout).await
    });
    task.await
        .unwrap_or_else(|e| Err(ApiError::internal(format!("payout task: {e}"))))
}

async fn drive_inner(state: &AppState, mut payout: Payout) -> Result<String, ApiError> {
    let provider = provider(state)?;
    let b = &payout.breakdown;
    let req = PayoutRequest {
        reference: payout.id.clone(),
        quote_id: payout.provider_quote_id.clone(),
        dest_currency: payout.dest_currency,
        source_amount: paygate_shared::payout::money::usdc_string(b.provider_amount()),
        dest_amount: paygate_shared::payout::money::minor_string(b.dest_amount),
        beneficiary: payout.beneficiary.clone(),
    };
    match provider.create_payout(&req).await {
        Ok(pp) => {
            payout.cpn_payment_id = Some(pp.id.clone());
            payout.status = PayoutStatus::Pending;
            payout.updated_at = now_rfc3339();
            let body = payout.accepted_json().to_string();
            state.store.accept_payout(&payout, &body).await?;
            tracing::info!(payment = %payout.id, cpn = %pp.id, "payout accepted by the provider");
            adopt_orphans(state).await;
            Ok(body)
        }
        Err(ProviderError::Rejected(why)) => {
            payout.status = PayoutStatus::Failed;
            payout.updated_at = now_rfc3339();
            state.store.refuse_payout(&payout).await?;
            tracing::warn!(payment = %payout.id, reason = %why, "payout refused by the provider");
            Err(err(
                ErrorCode::UpstreamError,
                format!("the payout provider refused the payout: {why}"),
            ))
        }
        Err(ProviderError::Unavailable(why)) => {
            tracing::warn!(payment = %payout.id, reason = %why, "payout outcome unknown; will retry");
            Err(err(
                ErrorCode::UpstreamError,
                "the payout provider did not answer; the payout is kept and retried \
                 (repeat the request with the same Idempotency-Key to learn the outcome)",
            ))
        }
    }
}

/// `GET /corridors/{id}/payments/{paymentId}`.
#[utoipa::path(get, path = "/corridors/{id}/payments/{payment_id}", tag = "corridors", security(("orgKey" = [])), params(("id" = String, Path), ("payment_id" = String, Path)), responses((status = 200, description = "The payout", body = crate::openapi::PayoutView), (status = 404, description = "No such payout in this corridor", body = crate::openapi::ErrorDoc)))]
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
#[utoipa::path(post, path = "/admin/corridors/{id}/approve-kyc", tag = "admin", security(("adminToken" = [])), params(("id" = String, Path)), responses((status = 200, description = "ACTIVE (idempotent)", body = crate::openapi::CorridorView), (status = 404, description = "No such corridor", body = crate::openapi::ErrorDoc)))]
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
#[utoipa::path(post, path = "/webhooks/provider", tag = "corridors", params(("Provider-Signature" = String, Header, description = "HMAC-SHA256 of the raw body: hex, or `t=<unix>,v1=<hex>`")), request_body = Object, responses((status = 200, description = "Applied, ignored or duplicate", body = crate::openapi::WebhookAck), (status = 202, description = "Kept: for a payout not known yet", body = crate::openapi::WebhookAck), (status = 401, description = "Signature missing, wrong or stale", body = crate::openapi::ErrorDoc)))]
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
    let event = webhook::parse_event(&body).map_err(|m| err(ErrorCode::BadRequest, m))?;
    let (status, outcome) = apply_event(&state, &event, &body).await?;
    Ok((status, Json(outcome)).into_response())
}

async fn apply_event(
    state: &AppState,
    event: &ProviderEvent,
    raw: &[u8],
) -> Result<(StatusCode, Value), ApiError> {
    let key = paygate_shared::apikey::sha256_hex(raw);
    let outcome = state
        .store
        .apply_payout_event(&key, event, raw, &now_rfc3339())
        .await?;
    tracing::info!(cpn = %event.payment_id, event = event.event_type.as_str(), outcome = ?outcome, "webhook");
    Ok(match outcome {
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
    })
}

/// Applies kept events whose payout became known (its provider id was recorded).
async fn adopt_orphans(state: &AppState) {
    let orphans = match state.store.adoptable_orphans().await {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(error = %e, "reading kept webhook events failed");
            return;
        }
    };
    for (cpn, key, raw) in orphans {
        if let Ok(event) = webhook::parse_event(&raw) {
            if let Err(e) = apply_event(state, &event, &raw).await {
                tracing::warn!(cpn = %cpn, error = %e.message, "kept event not applied");
                continue;
            }
        }
        if let Err(e) = state.store.drop_orphan(&cpn, &key).await {
            tracing::warn!(cpn = %cpn, error = %e, "kept event not dropped");
        }
    }
}

/// Finishes payouts left `Initiating` (crash, outage, a client that went away) and applies kept
/// events: once at start, then every `payout.reconcile_interval_seconds`.
pub async fn reconciliation(state: AppState) {
    let every =
        std::time::Duration::from_secs(state.config.payout.reconcile_interval_seconds.max(1));
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        if state.payout_provider.is_none() {
            continue;
        }
        let pending = match state.store.initiating_payouts().await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "payout reconciliation failed");
                continue;
            }
        };
        for p in pending {
            let Some(claim) = state.claims.try_claim(&p.org_id, &p.idempotency_key) else {
                continue; // A request is driving it right now.
            };
            let id = p.id.clone();
            match drive(&state, p, claim).await {
                Ok(_) => tracing::info!(payment = %id, "payout finished by reconciliation"),
                Err(e) => {
                    tracing::warn!(payment = %id, error = %e.message, "payout still unfinished")
                }
            }
        }
        adopt_orphans(&state).await;
    }
}
