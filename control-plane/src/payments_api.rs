//! The payments ledger (issue 19): `GET /api/payments` (newest first, filtered, a cursor per
//! page, or the same range as CSV) and `GET /api/payments/{id}`; and the ledger against the
//! chain for a time range (issue 52): `GET /api/ledger/audit`. Read through the store's ledger
//! indexes; a time range is an id range (payment ids are time-ordered).

use crate::auth::OrgAuth;
use crate::error::ApiError;
use crate::input::{next_cursor, page_limit, TypedQuery};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use paygate_domain::ids::time_bound;
use paygate_domain::model::{GatewayPayment, PaymentStatus};
use paygate_domain::{ErrorCode, FieldProblem};
use paygate_payouts::money::usdc_string;
use paygate_store::PaymentQuery;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use utoipa::{IntoParams, ToSchema};

/// A page holds at most this many payments; a CSV export at most [`CSV_MAX_ROWS`].
const MAX_PAGE: u32 = 500;
const DEFAULT_PAGE: u32 = 50;
const CSV_MAX_ROWS: u32 = 100_000;
const DEFAULT_CSV_ROWS: u32 = 10_000;

/// The ledger's filters. Times are RFC 3339; `from` is inclusive, `to` exclusive.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LedgerQuery {
    /// A route id (`rt_...`).
    route: Option<String>,
    /// `RESERVED`, `SETTLED`, `FAILED` or `UNKNOWN`.
    status: Option<String>,
    /// The payer's address (any case).
    payer: Option<String>,
    /// Payments taken at or after this time.
    from: Option<String>,
    /// Payments taken before this time.
    to: Option<String>,
    /// Page size: 1 to 500 (default 50); for CSV, rows: 1 to 100000 (default 10000).
    limit: Option<u32>,
    /// `nextCursor` of the previous page.
    cursor: Option<String>,
    /// `json` (default) or `csv`.
    format: Option<String>,
}

/// The settlement receipt an x402 client got (`PAYMENT-RESPONSE`, decoded).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptView {
    success: bool,
    transaction: String,
    network: String,
    payer: String,
}

/// One payment taken at the gateway.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Payment)]
#[serde(rename_all = "camelCase")]
pub struct PaymentView {
    id: String,
    route_id: String,
    /// The route's path now (null once the route is deleted).
    #[schema(required)]
    route_path: Option<String>,
    payer: String,
    pay_to: String,
    /// USDC, six decimals (`"0.010000"`).
    #[serde(rename = "amountUSDC")]
    #[schema(rename = "amountUSDC")]
    amount_usdc: String,
    /// CAIP-2 network id (`eip155:8453`).
    network: String,
    asset: String,
    /// The agent payment protocol it came in: `x402` or `mpp`.
    #[schema(value_type = String, example = "x402")]
    protocol: &'static str,
    #[schema(value_type = String, example = "SETTLED")]
    status: &'static str,
    /// The settlement transaction hash.
    #[schema(required)]
    transaction: Option<String>,
    /// The transaction on the network's block explorer (`networks.*.explorer_tx_url`).
    #[schema(required)]
    explorer_url: Option<String>,
    /// Why the payment failed.
    #[schema(required)]
    failure: Option<String>,
    /// Signature verification time, milliseconds.
    verify_ms: f64,
    /// Settlement time, milliseconds.
    #[schema(required)]
    settle_ms: Option<u64>,
    /// What the upstream answered (null: not reached yet, or never).
    #[schema(required)]
    upstream_status: Option<u16>,
    /// For a settled payment.
    #[schema(required)]
    receipt: Option<ReceiptView>,
    /// An `auth-capture` payment's escrow: captured, refunded, refundable until when.
    #[schema(required)]
    escrow: Option<EscrowView>,
    created_at: String,
    updated_at: String,
}

/// A refund made.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RefundView {
    /// `rfd_...`
    pub id: String,
    #[serde(rename = "amountUSDC")]
    #[schema(rename = "amountUSDC")]
    pub amount_usdc: String,
    /// The escrow's `refund` transaction (null when a crash left it to be read back).
    #[schema(required)]
    pub transaction: Option<String>,
    pub created_at: String,
}

impl From<&paygate_domain::model::EscrowRefund> for RefundView {
    fn from(r: &paygate_domain::model::EscrowRefund) -> Self {
        Self {
            id: r.id.clone(),
            amount_usdc: paygate_payouts::money::usdc_string(r.amount),
            transaction: r.transaction.clone(),
            created_at: r.created_at.clone(),
        }
    }
}

/// An `auth-capture` payment's escrow, as the ledger shows it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EscrowView {
    /// Paid to the seller.
    #[serde(rename = "capturedUSDC")]
    #[schema(rename = "capturedUSDC")]
    captured_usdc: String,
    #[serde(rename = "refundedUSDC")]
    #[schema(rename = "refundedUSDC")]
    refunded_usdc: String,
    /// Unix seconds until which it may be refunded (its capture deadline when the route had
    /// refunds off).
    refund_deadline: u64,
    /// Refunds done, oldest first.
    refunds: Vec<RefundView>,
    /// A refund sent whose outcome is read back at the next refund request.
    #[schema(required)]
    pending_refund: Option<RefundView>,
    /// The payer's `reclaim` transaction, when it took the hold back after the capture
    /// deadline (nothing was captured).
    #[schema(required)]
    reclaimed_transaction: Option<String>,
    /// The `void` transaction that gave the hold back (the origin failed, or reconciliation
    /// found the hold left behind by a node that stopped).
    #[schema(required)]
    voided_transaction: Option<String>,
    /// A capture sent once the answer's head went out, not yet recorded as mined (the payment
    /// is `RESERVED` meanwhile; reconciliation finishes it if its node stopped).
    #[schema(required)]
    capturing_transaction: Option<String>,
}

impl EscrowView {
    fn of(e: &paygate_domain::model::EscrowRecord) -> Self {
        Self {
            captured_usdc: usdc_string(e.captured),
            refunded_usdc: usdc_string(e.refunded()),
            refund_deadline: e.terms.refund_expiry,
            refunds: e.refunds.iter().map(RefundView::from).collect(),
            pending_refund: e.pending_refund.as_ref().map(RefundView::from),
            reclaimed_transaction: e.reclaimed_tx.clone(),
            voided_transaction: e.voided_tx.clone(),
            capturing_transaction: e.capturing.as_ref().map(|c| c.transaction.clone()),
        }
    }
}

impl PaymentView {
    pub(crate) fn new(p: GatewayPayment, path: Option<String>, state: &AppState) -> Self {
        let explorer_url = p.transaction.as_ref().and_then(|tx| {
            let n = state.networks().resolve(&p.network)?;
            let base = &n.config.explorer_tx_url;
            (!base.is_empty()).then(|| format!("{base}{tx}"))
        });
        let receipt = (p.status == PaymentStatus::Settled).then(|| ReceiptView {
            success: true,
            transaction: p.transaction.clone().unwrap_or_default(),
            network: p.network.clone(),
            payer: p.payer.clone(),
        });
        let escrow = p.escrow.as_deref().map(EscrowView::of);
        Self {
            escrow,
            protocol: p.protocol.as_str(),
            route_path: path,
            amount_usdc: usdc_string(p.amount),
            status: p.status.as_str(),
            explorer_url,
            verify_ms: (p.verify_us as f64) / 1000.0,
            receipt,
            id: p.id,
            route_id: p.route_id,
            payer: p.payer,
            pay_to: p.pay_to,
            network: p.network,
            asset: p.asset,
            transaction: p.transaction,
            failure: p.failure,
            settle_ms: p.settle_ms,
            upstream_status: p.upstream_status,
            created_at: p.created_at,
            updated_at: p.updated_at,
        }
    }
}

/// A page of the ledger.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPage {
    payments: Vec<PaymentView>,
    /// Pass as `cursor` for the next page; null on the last one.
    #[schema(required)]
    next_cursor: Option<String>,
}

fn is_payment_id(s: &str) -> bool {
    s.strip_prefix("pay_").is_some_and(|hex| {
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn parse_time(field: &str, v: &str, problems: &mut Vec<FieldProblem>) -> Option<u64> {
    let t = time::OffsetDateTime::parse(v, &time::format_description::well_known::Rfc3339);
    match t.ok().map(|t| t.unix_timestamp_nanos() / 1_000_000) {
        Some(ms) if ms >= 0 => u64::try_from(ms).ok(),
        _ => {
            problems.push(FieldProblem::new(
                field,
                "must be an RFC 3339 time after 1970 (2026-01-31T00:00:00Z)",
            ));
            None
        }
    }
}

/// A `from`/`to` range in unix milliseconds, each problem named (`to` after `from`).
fn time_range(
    from: Option<&str>,
    to: Option<&str>,
    problems: &mut Vec<FieldProblem>,
) -> (Option<u64>, Option<u64>) {
    let from = from.and_then(|v| parse_time("from", v, problems));
    let to = to.and_then(|v| parse_time("to", v, problems));
    if from.zip(to).is_some_and(|(f, t)| f >= t) {
        problems.push(FieldProblem::new("to", "must be after from"));
    }
    (from, to)
}

/// The query checked whole (every problem named) and turned into the store's.
fn store_query(q: &LedgerQuery) -> Result<(PaymentQuery, bool), ApiError> {
    let mut problems = Vec::new();
    let csv = match q.format.as_deref() {
        None | Some("json") => false,
        Some("csv") => true,
        Some(_) => {
            problems.push(FieldProblem::new("format", "must be json or csv"));
            false
        }
    };
    let (max, default) = if csv {
        (CSV_MAX_ROWS, DEFAULT_CSV_ROWS)
    } else {
        (MAX_PAGE, DEFAULT_PAGE)
    };
    let limit = page_limit(q.limit, default, max, &mut problems);
    let status = q.status.as_deref().and_then(|s| {
        let found = [
            PaymentStatus::Reserved,
            PaymentStatus::Settled,
            PaymentStatus::Failed,
            PaymentStatus::Unknown,
        ]
        .into_iter()
        .find(|st| st.as_str() == s);
        if found.is_none() {
            problems.push(FieldProblem::new(
                "status",
                "must be RESERVED, SETTLED, FAILED or UNKNOWN",
            ));
        }
        found
    });
    if let Some(p) = &q.payer {
        let hex = p.strip_prefix("0x").unwrap_or("");
        if hex.len() != 40 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            problems.push(FieldProblem::new(
                "payer",
                "must be an address: 0x and 40 hex digits",
            ));
        }
    }
    if let Some(r) = &q.route {
        if r.is_empty()
            || r.len() > 64
            || !r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            problems.push(FieldProblem::new("route", "must be a route id (rt_...)"));
        }
    }
    // Stricter than `check_cursor`: a ledger cursor is a payment id.
    if q.cursor.as_deref().is_some_and(|c| !is_payment_id(c)) {
        problems.push(FieldProblem::new(
            "cursor",
            "must be a nextCursor this endpoint returned",
        ));
    }
    let (from, to) = time_range(q.from.as_deref(), q.to.as_deref(), &mut problems);
    if !problems.is_empty() {
        return Err(ApiError::validation(problems));
    }
    // The page ends below the cursor and below `to`, whichever is lower.
    let before_id = [q.cursor.clone(), to.map(|t| time_bound("pay", t))]
        .into_iter()
        .flatten()
        .min();
    Ok((
        PaymentQuery {
            route_id: q.route.clone(),
            payer: q.payer.as_ref().map(|p| p.to_ascii_lowercase()),
            status,
            from_id: from.map(|f| time_bound("pay", f)),
            before_id,
            limit,
        },
        csv,
    ))
}

/// The organisation's route paths by id.
pub(crate) async fn route_paths(
    state: &AppState,
    org_id: &str,
) -> Result<HashMap<String, String>, ApiError> {
    Ok(state
        .store
        .list_routes(org_id)
        .await?
        .into_iter()
        .map(|r| (r.id, r.path))
        .collect())
}

#[utoipa::path(get, path = "/api/payments", tag = "payments", security(("orgKey" = [])), params(LedgerQuery), description = "The organisation's payments, newest first. `format=csv` answers the same range as CSV (`text/csv`), with `X-Next-Cursor` when rows remain.", responses((status = 200, description = "A page of payments (or the CSV export)", content((PaymentPage = "application/json"), (String = "text/csv"))), (status = 400, description = "A bad filter (every problem in details)", body = paygate_domain::ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    OrgAuth { org, .. }: OrgAuth,
    TypedQuery(q): TypedQuery<LedgerQuery>,
) -> Result<Response, ApiError> {
    let (query, csv) = store_query(&q)?;
    let paths = route_paths(&state, &org.id).await?;
    let payments = state.store.list_payments(&org.id, &query).await?;
    let next_cursor = next_cursor(&payments, query.limit, |p| &p.id);
    let views: Vec<_> = payments
        .into_iter()
        .map(|p| {
            let path = paths.get(&p.route_id).cloned();
            PaymentView::new(p, path, &state)
        })
        .collect();
    if !csv {
        return Ok(Json(PaymentPage {
            payments: views,
            next_cursor,
        })
        .into_response());
    }
    let mut out = csv::Writer::from_writer(Vec::new());
    let rows = std::iter::once(CSV_HEADER.map(str::to_string)).chain(views.iter().map(csv_row));
    for row in rows {
        out.write_record(&row).map_err(internal)?;
    }
    let body = out.into_inner().map_err(internal)?;
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/csv; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=\"payments.csv\""),
    );
    if let Some(c) = next_cursor.and_then(|c| HeaderValue::from_str(&c).ok()) {
        h.insert("x-next-cursor", c);
    }
    Ok(resp)
}

const CSV_HEADER: [&str; 12] = [
    "id",
    "createdAt",
    "routeId",
    "routePath",
    "payer",
    "amountUSDC",
    "network",
    "status",
    "transaction",
    "settleMs",
    "upstreamStatus",
    "failure",
];

fn csv_row(p: &PaymentView) -> [String; 12] {
    let opt = |v: Option<String>| v.unwrap_or_default();
    [
        p.id.clone(),
        p.created_at.clone(),
        p.route_id.clone(),
        opt(p.route_path.clone()),
        p.payer.clone(),
        p.amount_usdc.clone(),
        p.network.clone(),
        p.status.to_string(),
        opt(p.transaction.clone()),
        opt(p.settle_ms.map(|v| v.to_string())),
        opt(p.upstream_status.map(|v| v.to_string())),
        opt(p.failure.clone()),
    ]
}

fn internal<E: std::fmt::Display>(e: E) -> ApiError {
    tracing::warn!(error = %e, "CSV export failed");
    ApiError::new(ErrorCode::InternalError, "the export could not be written")
}

#[utoipa::path(get, path = "/api/payments/{id}", tag = "payments", security(("orgKey" = [])), params(("id" = String, Path)), responses((status = 200, description = "The payment", body = PaymentView), (status = 404, description = "No such payment in this organisation", body = paygate_domain::ErrorBody)))]
pub async fn get_one(
    State(state): State<AppState>,
    OrgAuth { org, .. }: OrgAuth,
    Path(id): Path<String>,
) -> Result<Json<PaymentView>, ApiError> {
    let p = match state.store.get_payment(&id).await? {
        Some(p) if p.org_id == org.id => p,
        _ => return Err(ApiError::new(ErrorCode::NotFound, "no such payment")),
    };
    let path = state
        .store
        .get_route(&org.id, &p.route_id)
        .await?
        .map(|r| r.path);
    Ok(Json(PaymentView::new(p, path, &state)))
}

/// The range `GET /api/ledger/audit` reads. Times are RFC 3339; `from` is inclusive, `to`
/// exclusive; either may be left open.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Payments taken at or after this time.
    from: Option<String>,
    /// Payments taken before this time.
    to: Option<String>,
}

#[utoipa::path(get, path = "/api/ledger/audit", tag = "payments", security(("orgKey" = [])), params(AuditQuery), responses((status = 200, description = "Every decided payment of the range compared with the chain: `checked`, `open` (left to reconciliation), `unreadable` (no RPC for its network), and each `difference` (`paymentId`, `transfer`, `ledger`, `chain`); none when the ledger and the chain agree", body = Object), (status = 400, description = "A bad time", body = paygate_domain::ErrorBody)))]
pub async fn audit(
    State(state): State<AppState>,
    OrgAuth { org, .. }: OrgAuth,
    TypedQuery(q): TypedQuery<AuditQuery>,
) -> Result<Json<paygate_gateway::payments::audit::Audit>, ApiError> {
    let mut problems = Vec::new();
    let (from, to) = time_range(q.from.as_deref(), q.to.as_deref(), &mut problems);
    if !problems.is_empty() {
        return Err(ApiError::validation(problems));
    }
    let audit = state
        .payments
        .audit(
            &org.id,
            from.map(|f| time_bound("pay", f)),
            to.map(|t| time_bound("pay", t)),
        )
        .await?;
    Ok(Json(audit))
}
