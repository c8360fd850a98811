//! The built-in sandbox payout provider: a stand-in for a real payout network, served on its own
//! loopback listener and spoken to over HTTP through the same client a real provider gets
//! (`payout::provider::HttpProvider`). It keeps its own sled database (`{storage}/sandbox-provider`),
//! so, like a real provider, it remembers payouts across a paygate crash.
//!
//! - Quotes: the configured mid rate less the spread, the configured rail fee, an expiry.
//! - Payouts: idempotent on `Idempotency-Key` (paygate's payment id); the beneficiary's name
//!   picks the outcome: `Sandbox Fail` -> failed, `Sandbox Hold` -> compliance hold then
//!   completed, `Sandbox Hold Fail` -> hold then failed, `Sandbox Reorder` -> completed then a
//!   late hold, `Sandbox Duplicate` -> completed, each event sent twice, `Sandbox Delay` ->
//!   completed late (told as `cpn.payment.delayed` first when signing as CPN), `Sandbox Silent`
//!   -> completed without any webhook (its status read tells it); anything else -> completed.
//! - Webhooks: signed (`t=...,v1=...`) with the first webhook secret, posted to paygate's
//!   `/webhooks/provider` after `webhook_delay_ms`, retried with doubling backoff until a `2xx`;
//!   the outbox is durable, so deliveries resume after a restart. With `webhook_signing =
//!   "circle"` they are CPN notifications instead (`cpn.payment.*`, a completion preceded by
//!   `cpn.payment.fiatPaymentInitiated`, a failure with a reason and code), signed with ECDSA by
//!   a P-256 key made at start, whose public key it serves as CPN does
//!   (`GET /v2/cpn/notifications/publicKey/{keyId}`).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use paygate_config::SandboxConfig;
use paygate_payouts::cpn;
use paygate_payouts::money::{parse_amount, usdc_string};
use paygate_payouts::provider::{
    ErrorWire, PayoutRequest, ProviderPayout, QuoteRequestWire, QuoteWire,
};
use paygate_payouts::webhook::{event_body, sign_timestamped, EventType};
use paygate_payouts::Currency;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

mod circle;
mod cpn_api;
mod onchain;
mod outbox;
pub use onchain::FundingChain;

/// The client id the sandbox puts in its events.
const CLIENT_ID: &str = "paygate-sandbox";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SbQuote {
    id: String,
    currency: Currency,
    rate: Decimal,
    rail_fee: String,
    expires_at_unix: i64,
    used_by: Option<String>,
    /// The USDC a CPN-shaped quote is for (the sandbox's own API quotes no amount).
    #[serde(default)]
    source_amount: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SbPayout {
    id: String,
    reference: String,
    status: String,
    currency: Currency,
    dest_amount: Decimal,
    created_at: String,
    /// How paygate funded it on chain, and the transaction that gave it back on failure.
    #[serde(default)]
    funding: Option<paygate_payouts::provider::FundingWire>,
    /// Its request for information (`Sandbox Rfi` through the CPN API).
    #[serde(default)]
    rfi: Option<cpn::RfiWire>,
    /// The `idempotencyKey` a CPN-shaped payment was created with.
    #[serde(default)]
    idempotency_key: Option<String>,
}

/// One webhook to deliver.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Outgoing {
    /// The payout's reference (its key).
    reference: String,
    event: EventType,
    /// The provider status word the event carries.
    status: String,
    attempts: u32,
    /// A CPN notification's id: the same on every delivery of this event (and on a duplicate
    /// sent on cue), as CPN keeps it across retries.
    #[serde(default)]
    notification_id: String,
    /// `Sandbox Silent`: the payout's status moves at the event's time, but no webhook is sent
    /// (a provider whose notifications are lost; paygate learns it by reading the status).
    #[serde(default)]
    silent: bool,
}

impl Outgoing {
    /// An event about payout `reference`, not yet tried, with a notification id of its own.
    fn first(reference: &str, event: EventType, status: &str) -> Self {
        Self {
            reference: reference.to_string(),
            event,
            status: status.into(),
            attempts: 0,
            notification_id: paygate_domain::ids::uuid_v4(),
            silent: false,
        }
    }
}

struct Inner {
    cfg: SandboxConfig,
    db: sled::Db,
    quotes: sled::Tree,
    payouts: sled::Tree,
    /// `due unix ms (BE) | seq (BE)` -> `Outgoing`.
    outbox: sled::Tree,
    webhook_url: String,
    secret: Vec<u8>,
    http: reqwest::Client,
    /// Serialises payout creation (the sandbox is not a throughput benchmark).
    create: tokio::sync::Mutex<()>,
    /// With `webhook_signing = "circle"`: the key id and the key that signs notifications.
    signer: Option<(String, p256::ecdsa::SigningKey)>,
    /// With a `funding_address`: the chain it checks each payout's funding on.
    chain: Option<FundingChain>,
    /// The key pair (private JWK, public JWK) CPN-shaped payment data is encrypted to.
    encryption: (String, String),
}

type Shared = Arc<Inner>;

fn now_ms() -> u64 {
    let t = time::OffsetDateTime::now_utc();
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

fn err(status: StatusCode, what: &str) -> Response {
    (
        status,
        Json(ErrorWire {
            error: what.to_string(),
        }),
    )
        .into_response()
}

fn internal(e: impl std::fmt::Display) -> Response {
    tracing::error!(error = %e, "sandbox provider failed");
    err(StatusCode::INTERNAL_SERVER_ERROR, "internal")
}

impl Inner {
    async fn flush(&self) -> sled::Result<()> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || db.flush().map(|_| ()))
            .await
            .unwrap_or(Ok(()))
    }

    fn outbox_key(&self, due_ms: u64) -> sled::Result<Vec<u8>> {
        let mut k = due_ms.to_be_bytes().to_vec();
        k.extend_from_slice(&self.db.generate_id()?.to_be_bytes());
        Ok(k)
    }
}

/// A new quote in `currency` (not stored): the configured mid rate less the spread, the rail
/// fee, the expiry; `None` for a currency without a rate.
fn new_quote(s: &Inner, currency: Currency) -> Option<SbQuote> {
    let code = currency.code();
    let mid = s
        .cfg
        .rates
        .get(code)
        .and_then(|r| Decimal::from_str(r).ok())?;
    let fee = s.cfg.rail_fees_usd.get(code)?;
    let keep = Decimal::from(10_000u32.saturating_sub(s.cfg.spread_bps)) / Decimal::from(10_000);
    Some(SbQuote {
        id: format!("sbq_{}", uuid::Uuid::new_v4().simple()),
        currency,
        rate: (mid * keep).trunc_with_scale(6).normalize(),
        rail_fee: parse_amount(fee)
            .map(usdc_string)
            .unwrap_or_else(|_| "0".into()),
        expires_at_unix: paygate_domain::unix_now() as i64 + s.cfg.quote_ttl_seconds as i64,
        used_by: None,
        source_amount: None,
    })
}

async fn store_quote(s: &Inner, q: &SbQuote) -> anyhow::Result<()> {
    s.quotes.insert(q.id.as_bytes(), serde_json::to_vec(q)?)?;
    Ok(s.flush().await?)
}

async fn create_quote(State(s): State<Shared>, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<QuoteRequestWire>(&body) else {
        return err(StatusCode::BAD_REQUEST, "bad_request");
    };
    if parse_amount(&req.source_amount).is_err() {
        return err(StatusCode::BAD_REQUEST, "invalid_amount");
    }
    let Some(q) = new_quote(&s, req.dest_currency) else {
        return err(StatusCode::UNPROCESSABLE_ENTITY, "unsupported_currency");
    };
    if let Err(e) = store_quote(&s, &q).await {
        return internal(e);
    }
    let wire = QuoteWire {
        id: q.id,
        dest_currency: q.currency,
        rate: q.rate.to_string(),
        rail_fee: q.rail_fee,
        expires_at: time::OffsetDateTime::from_unix_timestamp(q.expires_at_unix)
            .map(paygate_domain::rfc3339)
            .unwrap_or_default(),
        funding_address: (!s.cfg.funding_address.is_empty()).then(|| s.cfg.funding_address.clone()),
    };
    (StatusCode::CREATED, Json(wire)).into_response()
}

fn payout_wire(p: &SbPayout) -> ProviderPayout {
    ProviderPayout {
        id: p.id.clone(),
        reference: p.reference.clone(),
        status: p.status.clone(),
    }
}

/// The events a payout to `name` produces, with their delays after acceptance (ms).
fn script(cfg: &SandboxConfig, name: &str) -> Vec<(u64, EventType, &'static str)> {
    let first = cfg.webhook_delay_ms;
    let second = first + cfg.hold_release_ms;
    let mut events = scripted(first, second, name);
    if cfg.webhook_signing == "circle" {
        // CPN tells of the fiat leg starting before it completes.
        if let Some(i) = events
            .iter()
            .position(|e| e.1 == EventType::PaymentCompleted)
        {
            let at = events[i].0;
            events.insert(i, (at, EventType::Progress, "fiat_payment_initiated"));
        }
        // `Sandbox Delay`: CPN says the settlement is delayed before it completes late.
        if name.trim().eq_ignore_ascii_case("sandbox delay") {
            events.insert(0, (first, EventType::Progress, "delayed"));
        }
    }
    events
}

fn scripted(first: u64, second: u64, name: &str) -> Vec<(u64, EventType, &'static str)> {
    match name.trim().to_ascii_lowercase().as_str() {
        "sandbox fail" => vec![(first, EventType::PaymentFailed, "failed")],
        // Through the CPN API the hold is a request for information, and the rest waits for
        // its answer (`cpn_api::submit_rfi`).
        "sandbox rfi" => vec![(first, EventType::ComplianceHold, "rfi_required")],
        "sandbox hold" => vec![
            (first, EventType::ComplianceHold, "compliance_hold"),
            (second, EventType::PaymentCompleted, "complete"),
        ],
        "sandbox hold fail" => vec![
            (first, EventType::ComplianceHold, "compliance_hold"),
            (second, EventType::PaymentFailed, "failed"),
        ],
        // Out of order: the completion first, the hold that came before it arriving late.
        "sandbox reorder" => vec![
            (first, EventType::PaymentCompleted, "complete"),
            (second, EventType::ComplianceHold, "compliance_hold"),
        ],
        // Completes after the hold's time (through the CPN API, told as delayed first).
        "sandbox delay" => vec![(second, EventType::PaymentCompleted, "complete")],
        _ => vec![(first, EventType::PaymentCompleted, "complete")],
    }
}

async fn create_payout(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(reference) = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
    else {
        return err(StatusCode::BAD_REQUEST, "idempotency_key_required");
    };
    let Ok(req) = serde_json::from_slice::<PayoutRequest>(&body) else {
        return err(StatusCode::BAD_REQUEST, "bad_request");
    };
    if req.reference != reference {
        return err(StatusCode::BAD_REQUEST, "reference_mismatch");
    }
    let _one_at_a_time = s.create.lock().await;
    match stored::<SbPayout>(&s.payouts, &reference) {
        Ok(Some(p)) => return (StatusCode::OK, Json(payout_wire(&p))).into_response(),
        Ok(None) => {}
        Err(e) => return internal(e),
    }
    let quote = match stored::<SbQuote>(&s.quotes, &req.quote_id) {
        Ok(Some(q)) => q,
        Ok(None) => return err(StatusCode::NOT_FOUND, "quote_not_found"),
        Err(e) => return internal(e),
    };
    if quote.expires_at_unix < paygate_domain::unix_now() as i64 {
        return err(StatusCode::UNPROCESSABLE_ENTITY, "quote_expired");
    }
    if quote.used_by.is_some() || quote.currency != req.dest_currency {
        return err(StatusCode::CONFLICT, "quote_not_usable");
    }
    let Ok(dest_amount) = Decimal::from_str_exact(&req.dest_amount) else {
        return err(StatusCode::BAD_REQUEST, "invalid_amount");
    };
    let funding =
        onchain::funding_refusal(&s, &req.reference, &req.source_amount, req.funding.as_ref());
    if let Some(refused) = funding.await {
        return refused;
    }
    if s.cfg.accept_delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(s.cfg.accept_delay_ms)).await;
    }
    let payout = SbPayout {
        id: format!("cpn_{}", uuid::Uuid::new_v4().simple()),
        reference: reference.clone(),
        status: "pending".into(),
        currency: req.dest_currency,
        dest_amount,
        created_at: paygate_domain::now_rfc3339(),
        funding: req.funding.clone(),
        rfi: None,
        idempotency_key: None,
    };
    if let Err(refused) = accept(&s, &payout, quote, &req.beneficiary.name).await {
        return refused;
    }
    (StatusCode::CREATED, Json(payout_wire(&payout))).into_response()
}

/// Records a checked payout durably (its quote used, its webhooks scheduled) and waits the
/// configured answer delay: what both APIs do before answering.
async fn accept(s: &Inner, payout: &SbPayout, quote: SbQuote, name: &str) -> Result<(), Response> {
    record_payout(s, payout, quote, name).map_err(internal)?;
    s.flush().await.map_err(internal)?;
    tracing::info!(payout = %payout.id, reference = %payout.reference, "sandbox payout accepted");
    if s.cfg.answer_delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(s.cfg.answer_delay_ms)).await;
    }
    Ok(())
}

/// The record under `key` in `tree`.
fn stored<T: serde::de::DeserializeOwned>(
    tree: &sled::Tree,
    key: &str,
) -> anyhow::Result<Option<T>> {
    match tree.get(key.as_bytes())? {
        Some(v) => Ok(Some(serde_json::from_slice(&v)?)),
        None => Ok(None),
    }
}

/// Stores the payout, uses the quote and schedules its webhooks, in one transaction.
fn record_payout(s: &Inner, p: &SbPayout, mut quote: SbQuote, name: &str) -> anyhow::Result<()> {
    use sled::transaction::{ConflictableTransactionError, Transactional};
    quote.used_by = Some(p.reference.clone());
    let pb = serde_json::to_vec(p)?;
    let qb = serde_json::to_vec(&quote)?;
    let now = now_ms();
    let mut events = Vec::new();
    // `Sandbox Duplicate`: every event delivered twice.
    let copies = if name.trim().eq_ignore_ascii_case("sandbox duplicate") {
        2
    } else {
        1
    };
    let silent = name.trim().eq_ignore_ascii_case("sandbox silent");
    for (delay, event, status) in script(&s.cfg, name) {
        let o = Outgoing {
            silent,
            ..Outgoing::first(&p.reference, event, status)
        };
        for _ in 0..copies {
            events.push((s.outbox_key(now + delay)?, serde_json::to_vec(&o)?));
        }
    }
    (&s.payouts, &s.quotes, &s.outbox)
        .transaction(|(payouts, quotes, outbox)| {
            payouts.insert(p.reference.as_bytes(), pb.clone())?;
            quotes.insert(quote.id.as_bytes(), qb.clone())?;
            for (k, v) in &events {
                outbox.insert(k.clone(), v.clone())?;
            }
            Ok::<_, ConflictableTransactionError<()>>(())
        })
        .map_err(|e| anyhow::anyhow!("sandbox transaction: {e:?}"))?;
    Ok(())
}

async fn payout_by_reference(State(s): State<Shared>, Path(reference): Path<String>) -> Response {
    match s.payouts.get(reference.as_bytes()) {
        Ok(Some(p)) => match serde_json::from_slice::<SbPayout>(&p) {
            Ok(p) => Json(payout_wire(&p)).into_response(),
            Err(e) => internal(e),
        },
        Ok(None) => err(StatusCode::NOT_FOUND, "payout_not_found"),
        Err(e) => internal(e),
    }
}

/// Every payout the sandbox holds (for operators and tests: "how many payouts were made").
/// `GET /v1/outbox`: how many webhooks wait to be delivered (tests wait for none).
async fn outbox(State(s): State<Shared>) -> Response {
    Json(serde_json::json!({ "pending": s.outbox.len() })).into_response()
}

async fn list_payouts(State(s): State<Shared>) -> Response {
    let listed: anyhow::Result<Vec<serde_json::Value>> = s
        .payouts
        .iter()
        .map(|kv| {
            let (_, v) = kv?;
            let p: SbPayout = serde_json::from_slice(&v)?;
            Ok(serde_json::json!({
                "id": p.id, "reference": p.reference, "status": p.status,
                "destCurrency": p.currency, "destAmount": p.dest_amount.to_string(),
                "createdAt": p.created_at,
            }))
        })
        .collect();
    match listed {
        Ok(v) => Json(v).into_response(),
        Err(e) => internal(e),
    }
}

/// Runs the sandbox provider on `listener` until the task is dropped.
pub async fn serve(
    listener: std::net::TcpListener,
    cfg: SandboxConfig,
    dir: std::path::PathBuf,
    webhook_url: String,
    secret: Vec<u8>,
    chain: Option<FundingChain>,
) -> std::io::Result<()> {
    let db = sled::Config::new()
        .path(&dir)
        .cache_capacity(cfg.cache_capacity_mb.max(1) << 20)
        .open()
        .map_err(std::io::Error::other)?;
    let tree = |n: &str| db.open_tree(n).map_err(std::io::Error::other);
    let cfg_signing = cfg.webhook_signing.clone();
    let encryption = cpn_api::encryption_key(&db)?;
    let inner = Arc::new(Inner {
        encryption,
        quotes: tree("quotes")?,
        payouts: tree("payouts")?,
        outbox: tree("outbox")?,
        db,
        cfg,
        webhook_url,
        secret,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .unwrap_or_default(),
        create: tokio::sync::Mutex::new(()),
        chain,
        signer: (cfg_signing == "circle").then(|| {
            (
                paygate_domain::ids::uuid_v4(),
                p256::ecdsa::SigningKey::random(&mut rand::rngs::OsRng),
            )
        }),
    });
    let dispatcher = tokio::spawn(outbox::dispatch(inner.clone()));
    let app = Router::new()
        .route("/v1/quotes", post(create_quote))
        .route("/v1/outbox", get(outbox))
        .route("/v1/payouts", post(create_payout).get(list_payouts))
        .route(
            "/v1/payouts/by-reference/{reference}",
            get(payout_by_reference),
        )
        .route(
            &format!("{}{{key_id}}", cpn::PUBLIC_KEY_PATH),
            get(circle::public_key),
        )
        .route(cpn::QUOTES_PATH, post(cpn_api::create_quote))
        .route(cpn::PAYMENTS_PATH, post(cpn_api::create_payment))
        .route(
            &format!("{}/{{id}}", cpn::PAYMENTS_PATH),
            get(cpn_api::get_payment),
        )
        .route(
            &cpn::rfi_submit_path("{payment_id}", "{rfi_id}"),
            post(cpn_api::submit_rfi),
        )
        .with_state(inner);
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    tracing::info!(addr = %listener.local_addr()?, "sandbox payout provider listening");
    let res = axum::serve(listener, app).await;
    dispatcher.abort();
    res
}
