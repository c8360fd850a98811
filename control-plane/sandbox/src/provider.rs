//! The sandbox provider's records, state and the handlers that need nothing of its other
//! modules: what `app.rs`, `cpn_api.rs`, `circle.rs`, `onchain.rs` and `outbox.rs` share.

pub(crate) use axum::body::Bytes;
pub(crate) use axum::extract::{Path, State};
pub(crate) use axum::http::{HeaderMap, StatusCode};
pub(crate) use axum::response::{IntoResponse, Response};
pub(crate) use axum::routing::{get, post};
pub(crate) use axum::{Json, Router};
pub(crate) use base64::Engine as _;
pub(crate) use paygate_config::SandboxConfig;
pub(crate) use paygate_payouts::cpn;
pub(crate) use paygate_payouts::money::{parse_amount, usdc_string};
pub(crate) use paygate_payouts::provider::{
    ErrorWire, PayoutRequest, ProviderPayout, QuoteRequestWire, QuoteWire,
};
pub(crate) use paygate_payouts::webhook::{event_body, sign_timestamped, EventType};
pub(crate) use paygate_payouts::Currency;
pub(crate) use rust_decimal::Decimal;
pub(crate) use serde::{Deserialize, Serialize};
pub(crate) use std::str::FromStr;
pub(crate) use std::sync::Arc;
pub(crate) use std::time::Duration;

/// Where the sandbox reads the chain: its calls and the network of the USDC it is paid in;
/// with the key of its funding address, it gives a failed payout's USDC back.
#[derive(Clone)]
pub struct FundingChain {
    pub calls: Arc<dyn paygate_x402::facilitator::ChainCalls>,
    pub network: paygate_x402::network::Network,
    pub returner: Option<alloy_signer_local::PrivateKeySigner>,
}

/// The client id the sandbox puts in its events.
pub(crate) const CLIENT_ID: &str = "paygate-sandbox";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SbQuote {
    pub(crate) id: String,
    pub(crate) currency: Currency,
    pub(crate) rate: Decimal,
    pub(crate) rail_fee: String,
    pub(crate) expires_at_unix: i64,
    pub(crate) used_by: Option<String>,
    /// The USDC a CPN-shaped quote is for (the sandbox's own API quotes no amount).
    #[serde(default)]
    pub(crate) source_amount: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SbPayout {
    pub(crate) id: String,
    pub(crate) reference: String,
    pub(crate) status: String,
    pub(crate) currency: Currency,
    pub(crate) dest_amount: Decimal,
    pub(crate) created_at: String,
    /// How paygate funded it on chain, and the transaction that gave it back on failure.
    #[serde(default)]
    pub(crate) funding: Option<paygate_payouts::provider::FundingWire>,
    /// Its request for information (`Sandbox Rfi` through the CPN API).
    #[serde(default)]
    pub(crate) rfi: Option<cpn::RfiWire>,
    /// The `idempotencyKey` a CPN-shaped payment was created with.
    #[serde(default)]
    pub(crate) idempotency_key: Option<String>,
}

/// One webhook to deliver.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Outgoing {
    /// The payout's reference (its key).
    pub(crate) reference: String,
    pub(crate) event: EventType,
    /// The provider status word the event carries.
    pub(crate) status: String,
    pub(crate) attempts: u32,
    /// A CPN notification's id: the same on every delivery of this event (and on a duplicate
    /// sent on cue), as CPN keeps it across retries.
    #[serde(default)]
    pub(crate) notification_id: String,
    /// `Sandbox Silent`: the payout's status moves at the event's time, but no webhook is sent
    /// (a provider whose notifications are lost; paygate learns it by reading the status).
    #[serde(default)]
    pub(crate) silent: bool,
}

impl Outgoing {
    /// An event about payout `reference`, not yet tried, with a notification id of its own.
    pub(crate) fn first(reference: &str, event: EventType, status: &str) -> Self {
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

pub(crate) struct Inner {
    pub(crate) cfg: SandboxConfig,
    pub(crate) db: sled::Db,
    pub(crate) quotes: sled::Tree,
    pub(crate) payouts: sled::Tree,
    /// `due unix ms (BE) | seq (BE)` -> `Outgoing`.
    pub(crate) outbox: sled::Tree,
    pub(crate) webhook_url: String,
    pub(crate) secret: Vec<u8>,
    pub(crate) http: reqwest::Client,
    /// Serialises payout creation (the sandbox is not a throughput benchmark).
    pub(crate) create: tokio::sync::Mutex<()>,
    /// With `webhook_signing = "circle"`: the key id and the key that signs notifications.
    pub(crate) signer: Option<(String, p256::ecdsa::SigningKey)>,
    /// With a `funding_address`: the chain it checks each payout's funding on.
    pub(crate) chain: Option<FundingChain>,
    /// The key pair (private JWK, public JWK) CPN-shaped payment data is encrypted to.
    pub(crate) encryption: (String, String),
}

pub(crate) type Shared = Arc<Inner>;

pub(crate) fn now_ms() -> u64 {
    let t = time::OffsetDateTime::now_utc();
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

pub(crate) fn err(status: StatusCode, what: &str) -> Response {
    (
        status,
        Json(ErrorWire {
            error: what.to_string(),
        }),
    )
        .into_response()
}

pub(crate) fn internal(e: impl std::fmt::Display) -> Response {
    tracing::error!(error = %e, "sandbox provider failed");
    err(StatusCode::INTERNAL_SERVER_ERROR, "internal")
}

impl Inner {
    pub(crate) async fn flush(&self) -> sled::Result<()> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || db.flush().map(|_| ()))
            .await
            .unwrap_or(Ok(()))
    }

    pub(crate) fn outbox_key(&self, due_ms: u64) -> sled::Result<Vec<u8>> {
        let mut k = due_ms.to_be_bytes().to_vec();
        k.extend_from_slice(&self.db.generate_id()?.to_be_bytes());
        Ok(k)
    }
}

/// A new quote in `currency` (not stored): the configured mid rate less the spread, the rail
/// fee, the expiry; `None` for a currency without a rate.
pub(crate) fn new_quote(s: &Inner, currency: Currency) -> Option<SbQuote> {
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

pub(crate) async fn store_quote(s: &Inner, q: &SbQuote) -> anyhow::Result<()> {
    s.quotes.insert(q.id.as_bytes(), serde_json::to_vec(q)?)?;
    Ok(s.flush().await?)
}

pub(crate) async fn create_quote(State(s): State<Shared>, body: Bytes) -> Response {
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

pub(crate) fn payout_wire(p: &SbPayout) -> ProviderPayout {
    ProviderPayout {
        id: p.id.clone(),
        reference: p.reference.clone(),
        status: p.status.clone(),
    }
}

/// The events a payout to `name` produces, with their delays after acceptance (ms).
pub(crate) fn script(cfg: &SandboxConfig, name: &str) -> Vec<(u64, EventType, &'static str)> {
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

pub(crate) fn scripted(first: u64, second: u64, name: &str) -> Vec<(u64, EventType, &'static str)> {
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

/// Records a checked payout durably (its quote used, its webhooks scheduled) and waits the
/// configured answer delay: what both APIs do before answering.
pub(crate) async fn accept(
    s: &Inner,
    payout: &SbPayout,
    quote: SbQuote,
    name: &str,
) -> Result<(), Response> {
    record_payout(s, payout, quote, name).map_err(internal)?;
    s.flush().await.map_err(internal)?;
    tracing::info!(payout = %payout.id, reference = %payout.reference, "sandbox payout accepted");
    if s.cfg.answer_delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(s.cfg.answer_delay_ms)).await;
    }
    Ok(())
}

/// The record under `key` in `tree`.
pub(crate) fn stored<T: serde::de::DeserializeOwned>(
    tree: &sled::Tree,
    key: &str,
) -> anyhow::Result<Option<T>> {
    match tree.get(key.as_bytes())? {
        Some(v) => Ok(Some(serde_json::from_slice(&v)?)),
        None => Ok(None),
    }
}

/// Stores the payout, uses the quote and schedules its webhooks, in one transaction.
pub(crate) fn record_payout(
    s: &Inner,
    p: &SbPayout,
    mut quote: SbQuote,
    name: &str,
) -> anyhow::Result<()> {
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

pub(crate) async fn payout_by_reference(
    State(s): State<Shared>,
    Path(reference): Path<String>,
) -> Response {
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
pub(crate) async fn outbox(State(s): State<Shared>) -> Response {
    Json(serde_json::json!({ "pending": s.outbox.len() })).into_response()
}

pub(crate) async fn list_payouts(State(s): State<Shared>) -> Response {
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
