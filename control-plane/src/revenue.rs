//! What a seller earns (issue 19): per-route rows and a time series for the org metrics
//! (hourly roll-ups for 24h, daily for 7d and 30d, including what the aggregator has not stored
//! yet), and `GET /api/usage` (the plan, its monthly limit, what is used and when it resets).

use crate::auth::OrgAuth;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use paygate_domain::rollup::{RollupBucket, Tier};
use paygate_domain::{rfc3339, unix_now};
use paygate_payouts::money::usdc_string;
use paygate_x402::money::UsdcAmount;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use utoipa::ToSchema;

/// One route's figures over the window.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteRevenue {
    route_id: String,
    /// The route's path (null once deleted).
    #[schema(required)]
    path: Option<String>,
    requests: u64,
    paid: u64,
    errors: u64,
    /// USDC received net of refunds made in the window, six decimals (`"0.030000"`; below
    /// zero when the window's refunds exceed what it received).
    #[serde(rename = "revenueUSDC")]
    #[schema(rename = "revenueUSDC")]
    revenue_usdc: String,
    /// USDC refunded to payers in the window (counted in `revenueUSDC` already).
    #[serde(rename = "refundedUSDC")]
    #[schema(rename = "refundedUSDC")]
    refunded_usdc: String,
    /// Median settlement time, as its histogram bin's upper edge (within 1.5x).
    #[schema(required)]
    settle_p50_ms: Option<u64>,
    #[schema(required)]
    settle_p99_ms: Option<u64>,
}

/// One period of the series.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SeriesPoint {
    /// The period's start (RFC 3339, UTC).
    start: String,
    requests: u64,
    paid: u64,
    errors: u64,
    /// Received net of the period's refunds.
    #[serde(rename = "revenueUSDC")]
    #[schema(rename = "revenueUSDC")]
    revenue_usdc: String,
    #[serde(rename = "refundedUSDC")]
    #[schema(rename = "refundedUSDC")]
    refunded_usdc: String,
}

/// Requests and revenue per hour (24h) or per day (7d, 30d), oldest first, every period listed.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Series {
    /// `hour` or `day`.
    #[schema(value_type = String)]
    interval: &'static str,
    points: Vec<SeriesPoint>,
}

fn usdc(units: u64) -> String {
    usdc_string(UsdcAmount(units))
}

/// `received` net of `refunded`, six decimals, with a sign when the refunds are more (a refund
/// counts in the period it is made, of money received in it or before).
pub fn net_usdc(received: u64, refunded: u64) -> String {
    match received.checked_sub(refunded) {
        Some(net) => usdc(net),
        None => format!("-{}", usdc(refunded - received)),
    }
}

/// The tier and first period a window reads: the 24 hours (or 7 or 30 days) ending with the
/// current one.
pub fn window_periods(window: &str) -> (Tier, u64, usize) {
    let (tier, n) = match window {
        "24h" => (Tier::Hour, 24),
        "7d" => (Tier::Day, 7),
        _ => (Tier::Day, 30),
    };
    let now = tier.period_of(unix_now());
    (
        tier,
        now.saturating_sub(tier.seconds() * (n - 1)),
        n as usize,
    )
}

/// Per-route rows (every route of the org, and deleted ones that earned in the window; most
/// revenue first) and the series, from one read of the roll-ups.
pub async fn routes_and_series(
    state: &AppState,
    org_id: &str,
    window: &str,
) -> Result<(Vec<RouteRevenue>, Series), ApiError> {
    let (tier, from, n) = window_periods(window);
    let rows = state
        .metrics
        .rollups(state.store.as_ref(), org_id, tier, from)
        .await?;
    let mut per_route: HashMap<String, RollupBucket> = HashMap::new();
    let mut per_period: HashMap<u64, RollupBucket> = HashMap::new();
    for r in rows {
        if r.route_id.is_empty() {
            per_period.entry(r.period).or_default().merge(&r.bucket);
        } else {
            per_route.entry(r.route_id).or_default().merge(&r.bucket);
        }
    }
    let mut paths = crate::payments_api::route_paths(state, org_id).await?;
    for id in paths.keys() {
        per_route.entry(id.clone()).or_default();
    }
    // Most revenue first, then by path.
    let mut per_route: Vec<_> = per_route
        .into_iter()
        .map(|(id, b)| (paths.remove(&id), id, b))
        .collect();
    let net = |b: &RollupBucket| i128::from(b.revenue) - i128::from(b.refunded);
    per_route.sort_by(|a, b| net(&b.2).cmp(&net(&a.2)).then_with(|| a.0.cmp(&b.0)));
    let routes = per_route
        .into_iter()
        .map(|(path, id, b)| RouteRevenue {
            path,
            route_id: id,
            requests: b.requests,
            paid: b.paid,
            errors: b.errors,
            revenue_usdc: net_usdc(b.revenue, b.refunded),
            refunded_usdc: usdc(b.refunded),
            settle_p50_ms: b.settle_quantile_ms(0.5),
            settle_p99_ms: b.settle_quantile_ms(0.99),
        })
        .collect();
    let points = (0..n)
        .map(|i| {
            let start = from + tier.seconds() * i as u64;
            let b = per_period.remove(&start).unwrap_or_default();
            SeriesPoint {
                start: time::OffsetDateTime::from_unix_timestamp(start as i64)
                    .map(rfc3339)
                    .unwrap_or_default(),
                requests: b.requests,
                paid: b.paid,
                errors: b.errors,
                revenue_usdc: net_usdc(b.revenue, b.refunded),
                refunded_usdc: usdc(b.refunded),
            }
        })
        .collect();
    let interval = match tier {
        Tier::Hour => "hour",
        Tier::Day => "day",
    };
    Ok((routes, Series { interval, points }))
}

/// The organisation's plan and what it used this month.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    plan: String,
    /// Paid requests a month (null: unlimited).
    #[schema(required)]
    monthly_limit: Option<u64>,
    /// Paid requests this calendar month (UTC).
    used_this_month: u64,
    /// What is left (null: unlimited).
    #[schema(required)]
    remaining: Option<u64>,
    /// The month, `YYYY-MM`.
    month: String,
    /// When the count starts again (RFC 3339, the first of next month, UTC).
    resets_at: String,
}

#[utoipa::path(get, path = "/api/usage", tag = "metrics", security(("orgKey" = [])), responses((status = 200, description = "The plan, its monthly limit and this month's use", body = Usage)))]
pub async fn usage(
    State(state): State<AppState>,
    OrgAuth { org, .. }: OrgAuth,
) -> Result<Json<Usage>, ApiError> {
    let limit = state
        .config
        .plans
        .get(&org.plan)
        .map_or(0, |p| p.monthly_requests);
    let used = state
        .payments
        .usage()
        .used(&Arc::from(org.id.as_str()))
        .await?;
    let now = time::OffsetDateTime::now_utc();
    let (y, m) = match now.month() {
        time::Month::December => (now.year() + 1, time::Month::January),
        m => (now.year(), m.next()),
    };
    let resets = time::Date::from_calendar_date(y, m, 1)
        .map(|d| rfc3339(d.midnight().assume_utc()))
        .unwrap_or_default();
    let monthly_limit = (limit > 0).then_some(limit);
    Ok(Json(Usage {
        plan: org.plan,
        monthly_limit,
        used_this_month: used,
        remaining: monthly_limit.map(|l| l.saturating_sub(used)),
        month: paygate_gateway::usage::current_month(),
        resets_at: resets,
    }))
}
