//! paygate's control plane: the axum application behind every public path that is not
//! `/gateway/*` (management, admin, discovery, health). Handlers parse, call a service, render.

mod admin;
mod audit;
mod auth;
mod body;
mod channels_api;
mod console;
mod corridor_lists;
mod corridors;
mod discovery;
mod error;
mod facilitator_api;
mod input;
mod keys_api;
mod mcp;
mod meta;
mod metrics_api;
mod mpp_discovery;
pub mod openapi;
mod origin_api;
mod payments_api;
mod payout_events;
mod receipts_api;
mod refunds_api;
mod revenue;
mod routes_api;
mod scopes;
mod state;
mod views;
mod waiting;
mod webhook_dispatch;
mod webhooks_api;
mod windows_api;
pub use waiting::{waiting_room, WaitReason};

use axum::routing::{get, patch, post};
use axum::Router;
use std::future::Future;
use std::time::Duration;

pub use error::ApiError;
pub use state::AppState;

/// The whole control-plane application.
pub fn app(state: AppState) -> Router {
    let max_body = state.config.server.max_body_bytes;
    let streamable = mcp::streamable_service(&state);
    Router::new()
        .route("/healthz", get(meta::health))
        .route("/openapi.json", get(openapi::openapi_json))
        .route(
            "/api/routes",
            post(routes_api::create).get(routes_api::list),
        )
        .route(
            "/api/routes/{id}",
            patch(routes_api::update)
                .get(routes_api::get_one)
                .delete(routes_api::delete),
        )
        .route("/console", get(console::index))
        .route("/console/", get(console::slash))
        .route("/console/app.js", get(console::script))
        .route("/console/app.css", get(console::style))
        .route("/api/org", get(console::org))
        .route("/api/keys", get(keys_api::list).post(keys_api::create))
        .route(
            "/api/keys/{key_id}",
            axum::routing::delete(keys_api::delete),
        )
        .route("/api/channels", get(channels_api::list))
        .route("/api/access-windows", get(windows_api::access_windows))
        .route("/api/audit", get(audit::audit_log))
        .route(
            "/api/webhooks",
            get(webhooks_api::list).post(webhooks_api::create),
        )
        .route(
            "/api/webhooks/{id}",
            axum::routing::delete(webhooks_api::delete),
        )
        .route(
            "/api/webhooks/{id}/rotate-secret",
            post(webhooks_api::rotate),
        )
        .route(
            "/api/webhooks/{id}/deliveries",
            get(webhooks_api::deliveries),
        )
        .route(
            "/api/webhooks/{id}/deliveries/{delivery_id}/replay",
            post(webhooks_api::replay),
        )
        .route("/api/payout-wallet", get(corridors::payout_wallet))
        .route("/api/channels/claim", post(channels_api::claim))
        .route("/api/channels/{id}", get(channels_api::get_one))
        .route("/api/channels/{id}/refund", post(channels_api::refund))
        .route("/api/payments", get(payments_api::list))
        .route("/api/ledger/audit", get(payments_api::audit))
        .route("/api/payments/{id}", get(payments_api::get_one))
        .route("/api/payments/{id}/refund", post(refunds_api::refund))
        .route("/api/payments/{id}/receipt", get(receipts_api::receipt))
        .route("/api/origin-secret", get(origin_api::get))
        .route("/api/origin-secret/rotate", post(origin_api::rotate))
        .route("/admin/orgs", post(admin::create_org).get(admin::list_orgs))
        .route(
            "/admin/orgs/{slug}",
            get(admin::get_org).patch(admin::update_org),
        )
        .route(
            "/admin/orgs/{slug}/payer-wallet",
            axum::routing::put(admin::put_payer_wallet).delete(admin::delete_payer_wallet),
        )
        .route(
            "/admin/orgs/{slug}/keys",
            post(admin::create_key).get(admin::list_keys),
        )
        .route(
            "/admin/orgs/{slug}/keys/{key_id}",
            axum::routing::delete(admin::revoke_key),
        )
        .route("/discovery/resources", get(discovery::list))
        .route(
            "/discovery/{slug}/openapi.json",
            get(mpp_discovery::openapi),
        )
        .route("/api/gateway/metrics", get(metrics_api::org_metrics))
        .route("/api/usage", get(revenue::usage))
        .route("/metrics", get(metrics_api::prometheus))
        .route("/facilitator/verify", post(facilitator_api::verify))
        .route("/facilitator/settle", post(facilitator_api::settle))
        .route("/facilitator/supported", get(facilitator_api::supported))
        .route(
            "/corridors",
            post(corridors::create).get(corridor_lists::list),
        )
        .route("/corridors/{id}/payments", get(corridor_lists::payouts))
        .route("/corridors/{id}", get(corridors::get_one))
        .route("/corridors/{id}/quote", get(corridors::quote))
        .route("/corridors/{id}/pay", post(corridors::pay))
        .route(
            "/corridors/{id}/payments/{payment_id}",
            get(corridors::get_payment),
        )
        .route(
            "/corridors/{id}/payments/{payment_id}/rfi",
            post(corridors::answer_rfi),
        )
        .route(
            "/corridors/{id}/payments/{payment_id}/refresh",
            post(corridors::refresh),
        )
        .route("/webhooks/provider", post(corridors::webhook))
        .route(
            "/admin/corridors/{id}/approve-kyc",
            post(corridors::approve_kyc),
        )
        .route("/mcp/sse", get(mcp::sse::open_stream))
        .route("/mcp/message", post(mcp::sse::post_message))
        .route("/mcp", streamable)
        .route(
            "/mcp/x402/{slug}",
            mcp::x402::service(&state, mcp::allowed_origins(&state)),
        )
        .route("/.well-known/x402", get(discovery::well_known))
        .route("/.well-known/did.json", get(receipts_api::did_document))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn(move |req, next| {
            error::read_body_first(max_body, req, next)
        }))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            error::panic_response,
        ))
        .layer(axum::middleware::from_fn(error::request_context))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::new(paygate_domain::ErrorCode::NotFound, "no such endpoint")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        paygate_domain::ErrorCode::MethodNotAllowed,
        "method not allowed on this endpoint",
    )
}

/// Serves the control plane on `listener` until `shutdown` resolves; also runs its maintenance
/// (expired idempotency keys) in the background.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let maint = tokio::spawn(maintenance(state.clone()));
    let recon = tokio::spawn(reconciliation(state.clone()));
    let probe = tokio::spawn(metrics_api::probe_facilitator(state.clone()));
    let payouts = tokio::spawn(payout_reconciliation(state.clone()));
    let claims = tokio::spawn(channel_claims(state.clone()));
    let webhooks = tokio::spawn(webhook_dispatch::run(state.clone()));
    let state_metrics = state.metrics.clone();
    let aggregator = tokio::spawn(state.metrics.clone().run_aggregator(
        state.store.clone(),
        Duration::from_secs(state.config.metrics.flush_interval_seconds.max(1)),
    ));
    let res = axum::serve(
        listener,
        app(state).into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await;
    maint.abort();
    recon.abort();
    probe.abort();
    payouts.abort();
    claims.abort();
    webhooks.abort();
    // The aggregator counts what is queued; the exit path stores it (`Metrics::flush_now`).
    state_metrics.stop();
    let _ = tokio::time::timeout(Duration::from_secs(5), aggregator).await;
    res
}

/// The lease of payment reconciliation: among the nodes sharing a store, one runs it at a time.
pub const PAYMENT_RECONCILIATION: &str = "payment-reconciliation";
/// The lease of payout reconciliation.
pub const PAYOUT_RECONCILIATION: &str = "payout-reconciliation";
/// The lease of the payment channels' claimer.
pub const CHANNEL_CLAIMS: &str = "channel-claims";

/// Whether this node does `duty` now (holds its lease; on sled, always).
async fn leads(state: &AppState, duty: &str) -> bool {
    match state.store.hold_lease(duty).await {
        Ok(held) => held,
        Err(e) => {
            tracing::warn!(duty, error = %e, "lease unavailable; duty skipped this time");
            false
        }
    }
}

/// Drives payouts the provider has not confirmed and applies kept webhook events, every
/// `payout.reconcile_interval_seconds`, on the node holding [`PAYOUT_RECONCILIATION`].
async fn payout_reconciliation(state: AppState) {
    let every = Duration::from_secs(state.config.payout.reconcile_interval_seconds.max(1));
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        if leads(&state, PAYOUT_RECONCILIATION).await {
            state.payouts.reconcile().await;
        }
    }
}

/// Reads the payers' withdrawals, then claims the payment channels' vouchers on chain once their
/// unclaimed amount or age passes the thresholds (or the payer is withdrawing), every `channels.claim_interval_seconds`, on the node holding [`CHANNEL_CLAIMS`]
/// (where this deployment offers channels).
async fn channel_claims(state: AppState) {
    let Some(channels) = state.channels.clone() else {
        return;
    };
    let every = Duration::from_secs(state.config.channels.claim_interval_seconds.max(1));
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        if !leads(&state, CHANNEL_CLAIMS).await {
            continue;
        }
        if let Err(e) = channels.watch_withdrawals().await {
            tracing::warn!(error = %e, "reading the payers' withdrawals failed; retried at the next pass");
        }
        if let Err(e) = channels.claim_due(false).await {
            tracing::warn!(error = %e, "channel claim pass failed; retried at the next");
        }
    }
}

/// Reconciles payments with an unrecorded outcome: once at start (those a crash left behind),
/// then every `facilitator.reconcile_interval_seconds`, on the node holding
/// [`PAYMENT_RECONCILIATION`].
async fn reconciliation(state: AppState) {
    let started = time::OffsetDateTime::now_utc();
    let f = &state.config.facilitator;
    let leases = paygate_gateway::payments::reconcile::Leases {
        in_flight_secs: i64::try_from(f.in_flight().as_secs()).unwrap_or(i64::MAX),
        live_hold_secs: i64::try_from(f.live_hold_seconds).unwrap_or(i64::MAX),
    };
    let mut tick = tokio::time::interval(Duration::from_secs(f.reconcile_interval_seconds.max(1)));
    loop {
        tick.tick().await;
        if !leads(&state, PAYMENT_RECONCILIATION).await {
            continue;
        }
        match paygate_gateway::payments::reconcile::reconcile_once(
            state.store.as_ref(),
            state.payments.events(),
            state.networks(),
            state.payments.chain().map(|c| c.as_ref()),
            started,
            leases,
        )
        .await
        {
            Ok(r) if r.settled + r.failed > 0 => {
                tracing::info!(
                    settled = r.settled,
                    failed = r.failed,
                    waiting = r.waiting,
                    "payments reconciled"
                );
                // What reconciliation recorded is audited against the chain at once (the
                // ledger audit's check, issue 52): a difference is the operator's to look at.
                for p in &r.decided {
                    match state.payments.audit_one(p).await {
                        Ok(Some(d)) => {
                            tracing::error!(payment = %d.payment_id, ledger = %d.ledger, chain = %d.chain, "a reconciled payment's record and the chain disagree")
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::debug!(payment = %p.id, error = %e, "a reconciled payment was not audited")
                        }
                    }
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "payment reconciliation failed"),
        }
    }
}

async fn maintenance(state: AppState) {
    let ttl =
        i64::try_from(state.config.idempotency.ttl_hours.saturating_mul(3600)).unwrap_or(i64::MAX);
    let mut tick = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tick.tick().await;
        let cutoff = time::OffsetDateTime::now_utc().unix_timestamp() - ttl;
        match state.store.purge_idempotency(cutoff).await {
            Ok(n) if n > 0 => tracing::info!(removed = n, "expired idempotency keys purged"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "idempotency purge failed"),
        }
        let window = paygate_gateway::payments::ids::PAYMENT_ID_WINDOW_SECS;
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        match state.store.purge_payment_ids(now - window).await {
            Ok(n) if n > 0 => tracing::info!(removed = n, "expired payment identifiers purged"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "payment identifier purge failed"),
        }
        match state.store.purge_mcp_sessions(cutoff).await {
            Ok(n) if n > 0 => tracing::info!(removed = n, "expired MCP sessions purged"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "MCP session purge failed"),
        }
        match state.store.prune_windows(paygate_domain::unix_now()).await {
            Ok(n) if n > 0 => tracing::info!(
                removed = n,
                "ended access windows and spent sign-in nonces purged"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "access window purge failed"),
        }
    }
}
