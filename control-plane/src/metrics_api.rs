//! `GET /api/gateway/metrics?window=24h|7d` (an organisation's own counters, SPEC 4.2),
//! `GET /metrics` (Prometheus text) and the periodic facilitator health probe behind both.

use crate::auth::OrgAuth;
use crate::auth::ScrapeAuth;
use crate::error::ApiError;
use crate::input::TypedQuery;
use crate::state::AppState;
use crate::views::{FacilitatorHealthView, MetricsWindow, OrgMetrics};
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use paygate_domain::{now_rfc3339, unix_now, ErrorCode};
use paygate_gateway::metrics::FacilitatorHealth;
use std::time::{Duration, Instant};

/// `?window=24h|7d`; no other parameter.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsQuery {
    window: Option<String>,
}

fn window_minutes(w: Option<&str>) -> Result<(&'static str, u64), ApiError> {
    match w {
        Some("24h") => Ok(("24h", 24 * 60)),
        Some("7d") => Ok(("7d", 7 * 24 * 60)),
        Some("30d") => Ok(("30d", 30 * 24 * 60)),
        Some(other) => Err(ApiError::new(
            ErrorCode::ValidationError,
            format!("window must be 24h, 7d or 30d, not {other:?}"),
        )),
        None => Err(ApiError::new(
            ErrorCode::ValidationError,
            "query parameter window is required: 24h, 7d or 30d",
        )),
    }
}

/// Mean of `sum / count` in milliseconds (three decimals), or null without samples.
fn mean_ms(sum: u64, count: u64, per_ms: f64) -> Option<f64> {
    (count > 0).then(|| {
        let v = sum as f64 / count as f64 / per_ms;
        (v * 1000.0).round() / 1000.0
    })
}

#[utoipa::path(get, path = "/api/gateway/metrics", tag = "metrics", security(("orgKey" = [])), params(("window" = String, Query, description = "`24h`, `7d` or `30d`")), description = "`metrics`: the rolling window by the minute. `routes` and `series`: the hours (24h) or days (7d, 30d, UTC) the window touches. Requests made a moment ago are included (this node's not yet stored counts are added).", responses((status = 200, description = "The organisation's counters over the window, per route and over time, and facilitator health", body = OrgMetrics)))]
pub async fn org_metrics(
    State(state): State<AppState>,
    OrgAuth { org, .. }: OrgAuth,
    TypedQuery(q): TypedQuery<MetricsQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let (window, minutes) = window_minutes(q.window.as_deref())?;
    let now_minute = unix_now() / 60;
    // A rolling window: the current minute and the `minutes - 1` before it.
    let from = now_minute.saturating_sub(minutes - 1);
    let b = state
        .metrics
        .minutes_since(state.store.as_ref(), &org.id, from)
        .await?;
    let (routes, series) = crate::revenue::routes_and_series(&state, &org.id, window).await?;
    let error_rate = if b.total == 0 {
        0.0
    } else {
        b.errors as f64 / b.total as f64
    };
    let h = state.metrics.health();
    Ok(Json(OrgMetrics {
        metrics: MetricsWindow {
            window,
            org_id: org.id,
            total_requests: b.total,
            unpaid_402: b.unpaid402,
            paid: b.paid,
            paid_by_protocol: crate::views::PaidByProtocol {
                x402: b.paid.saturating_sub(b.paid_mpp),
                mpp: b.paid_mpp,
            },
            errors: b.errors,
            avg_challenge_ms: mean_ms(b.challenge_us_sum, b.challenge_count, 1000.0),
            avg_settle_ms: mean_ms(b.settle_ms_sum, b.settle_count, 1.0),
            error_rate,
            revenue_usdc: crate::revenue::net_usdc(b.revenue, b.refunded),
            refunded_usdc: paygate_payouts::money::usdc_string(paygate_x402::money::UsdcAmount(
                b.refunded,
            )),
        },
        routes,
        series,
        facilitator: FacilitatorHealthView {
            status: h.status,
            latency_ms: h.latency_ms,
            checked_at: h.checked_at.clone(),
            facilitator_url: h.url.clone(),
            facilitators: h
                .members
                .iter()
                .map(|m| crate::views::FacilitatorMemberView {
                    network: m.network.clone(),
                    url: m.url.clone(),
                    fee: m.fee.clone(),
                    healthy: m.healthy,
                    settled: m.settled,
                })
                .collect(),
        },
    }))
}

#[utoipa::path(get, path = "/metrics", tag = "metrics", security(("adminToken" = [])), description = "For scrapers: the token in `metrics.scrape_token_env` (PAYGATE_METRICS_TOKEN) or the admin token, as a bearer token. Every organisation's series, per node.", responses((status = 200, description = "Prometheus text exposition", content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8", body = String), (status = 401, description = "No or a wrong scrape token", body = paygate_domain::ErrorBody)))]
pub async fn prometheus(State(state): State<AppState>, _scraper: ScrapeAuth) -> impl IntoResponse {
    let snapshot = state.table.snapshot();
    let health: Vec<_> = snapshot
        .orgs()
        .flat_map(|org| {
            org.routes.values().filter_map(move |e| {
                let b = e.balancer.as_ref()?;
                Some((org.org_id.clone(), e.id.clone(), b.health()))
            })
        })
        .collect();
    state
        .metrics
        .set_target_health(health.iter().flat_map(|(org, route, targets)| {
            targets
                .iter()
                .map(move |t| (&**org, &**route, t.url.clone(), t.healthy && !t.ejected))
        }));
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.prometheus_text(),
    )
}

/// Probes the facilitator every `metrics.probe_interval_seconds`: failure, none configured, or
/// none of its networks answering is `down`; some of its networks not answering, or an answer
/// slower than `metrics.degraded_latency_ms`, is `degraded`; else `up`. What answered is what
/// routes may be paid on until the next probe ([`paygate_gateway::settleable`]).
pub async fn probe_facilitator(state: AppState) {
    let cfg = &state.config.metrics;
    let degraded = Duration::from_millis(cfg.degraded_latency_ms);
    let timeout = Duration::from_secs(state.config.facilitator.request_timeout_seconds.max(1));
    let mut tick = tokio::time::interval(Duration::from_secs(cfg.probe_interval_seconds.max(1)));
    loop {
        tick.tick().await;
        let health = match state.facilitator() {
            None => FacilitatorHealth {
                status: "down",
                latency_ms: 0,
                checked_at: now_rfc3339(),
                url: String::new(),
                members: Vec::new(),
            },
            Some(f) => {
                let t = Instant::now();
                let reach = match tokio::time::timeout(timeout, f.reach()).await {
                    Ok(Ok(r)) => Some(r),
                    _ => None,
                };
                let took = t.elapsed();
                state.payments.settleable().learn(reach.as_ref());
                let status = match reach {
                    None => "down",
                    Some(r) if r.answering.is_empty() => "down",
                    Some(r) if r.answering.len() < r.supported.len() => "degraded",
                    Some(_) if took > degraded => "degraded",
                    Some(_) => "up",
                };
                FacilitatorHealth {
                    status,
                    latency_ms: took.as_millis() as u64,
                    checked_at: now_rfc3339(),
                    url: f.url(),
                    members: f.members(),
                }
            }
        };
        if health.status != state.metrics.health().status {
            tracing::info!(status = health.status, latency_ms = health.latency_ms, url = %health.url, "facilitator health changed");
        }
        state.metrics.set_health(health);
    }
}
