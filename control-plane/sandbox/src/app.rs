//! The sandbox provider's app: its routes, the payout handler (which checks on-chain funding)
//! and `serve`.

use crate::provider::*;
use crate::{circle, cpn_api, onchain, outbox};

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
