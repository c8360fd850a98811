//! The sandbox standing in for Circle Payments Network (`payout.provider = "cpn"` without a base
//! URL): CPN's OFI wire shapes (`paygate_payouts::cpn`) over the same quotes, payouts, funding
//! checks and webhook outbox as the sandbox's own API.
//!
//! - `POST /v1/cpn/quotes`: one quote option, its total fee in USDC, its expiry, its funding
//!   address and the key (a P-256 JWK, kept in the sandbox's database so a restart opens what
//!   was encrypted before it) payment data is encrypted to.
//! - `POST /v1/cpn/payments`: opens the beneficiary and travel-rule JWEs (refused if they do
//!   not open), checks the quote and the funding on chain as the sandbox's own API does, and
//!   takes the beneficiary's name as the cue (the sandbox's names, plus `Sandbox Rfi`: the
//!   payment waits on a request for information until it is answered, then completes).
//! - `POST /v1/cpn/payments/{paymentId}/rfis/{rfiId}/submit`: opens the answer, checks it
//!   against the RFI's schema, and moves the RFI to review, approval and the payment on.
//! - `GET /v1/cpn/payments/{id}`: the payment as it stands.

use crate::onchain;
use crate::provider::*;
use paygate_payouts::cpn::{
    AmountWire, CertificateWire, ExchangeRateWire, FeeWire, FeesWire, FieldWire, PaymentAnswer,
    PaymentRequestWire, PaymentWire, QuoteRequestWire, QuotesAnswer, RfiSubmitWire, RfiWire,
};
use paygate_payouts::cpn_client;

/// Where the sandbox keeps its encryption key.
const KEY_ENTRY: &[u8] = b"cpn-encryption-key";

/// The sandbox's encryption key pair (private JWK, public JWK): made once, then kept.
pub(super) fn encryption_key(db: &sled::Db) -> std::io::Result<(String, String)> {
    let meta = db.open_tree("meta").map_err(std::io::Error::other)?;
    if let Some(v) = meta.get(KEY_ENTRY).map_err(std::io::Error::other)? {
        if let Ok(pair) = serde_json::from_slice::<(String, String)>(&v) {
            return Ok(pair);
        }
    }
    let pair =
        cpn_client::new_key_pair(&paygate_domain::ids::uuid_v4()).map_err(std::io::Error::other)?;
    let bytes = serde_json::to_vec(&pair).map_err(std::io::Error::other)?;
    meta.insert(KEY_ENTRY, bytes)
        .map_err(std::io::Error::other)?;
    db.flush().map_err(std::io::Error::other)?;
    Ok(pair)
}

/// What the sandbox's RFIs ask for.
fn rfi_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "ORIGINATOR_DATE_OF_FORMATION": {
                "type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$",
                "description": "When the paying business was formed (YYYY-MM-DD)"
            },
            "SOURCE_OF_FUNDS": {
                "type": "string", "minLength": 2, "maxLength": 200,
                "description": "Where the paid-out USDC comes from"
            }
        },
        "required": ["ORIGINATOR_DATE_OF_FORMATION", "SOURCE_OF_FUNDS"],
        "additionalProperties": false
    })
}

fn cpn_err(status: StatusCode, code: u32, message: &str) -> Response {
    (
        status,
        Json(serde_json::json!({"code": code, "message": message})),
    )
        .into_response()
}

fn amount(amount: String, currency: &str) -> AmountWire {
    AmountWire {
        amount,
        currency: currency.into(),
    }
}

pub(super) async fn create_quote(State(s): State<Shared>, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<QuoteRequestWire>(&body) else {
        return cpn_err(StatusCode::BAD_REQUEST, 2, "malformed quote request");
    };
    let Some(currency) = Currency::parse(&req.destination_amount.currency) else {
        return cpn_err(StatusCode::BAD_REQUEST, 290102, "unsupported route");
    };
    let Ok(source) = parse_amount(&req.source_amount.amount) else {
        return cpn_err(
            StatusCode::BAD_REQUEST,
            290100,
            "amount outside the route's limits",
        );
    };
    let Some(q) = new_quote(&s, currency) else {
        return cpn_err(StatusCode::BAD_REQUEST, 290102, "unsupported route");
    };
    let q = SbQuote {
        source_amount: Some(usdc_string(source)),
        ..q
    };
    if let Err(e) = store_quote(&s, &q).await {
        return internal(e);
    }
    let fee = parse_amount(&q.rail_fee).unwrap_or(paygate_x402::money::UsdcAmount(0));
    let dest = destination(source.0.saturating_sub(fee.0), q.rate);
    let jwk = serde_json::from_str(&s.encryption.1).unwrap_or_default();
    let wire = paygate_payouts::cpn::QuoteWire {
        id: q.id.clone(),
        payment_method_type: req.payment_method_type,
        blockchain: req.blockchain,
        source_amount: amount(usdc_string(source), "USDC"),
        destination_amount: amount(dest.to_string(), currency.code()),
        exchange_rate: ExchangeRateWire {
            rate: q.rate.to_string(),
            pair: format!("USDC/{}", currency.code()),
        },
        fees: FeesWire {
            total_amount: amount(q.rail_fee.clone(), "USDC"),
            breakdown: vec![FeeWire {
                kind: "BLOCKCHAIN_GAS_FEE".into(),
                amount: amount(q.rail_fee.clone(), "USDC"),
            }],
        },
        quote_expire_date: time::OffsetDateTime::from_unix_timestamp(q.expires_at_unix)
            .map(paygate_domain::rfc3339)
            .unwrap_or_default(),
        certificate: CertificateWire {
            id: None,
            domain: "sandbox.paygate.invalid".into(),
            jwk,
            cert_pem: None,
        },
        funding_address: (!s.cfg.funding_address.is_empty()).then(|| s.cfg.funding_address.clone()),
    };
    (StatusCode::OK, Json(QuotesAnswer { data: vec![wire] })).into_response()
}

/// What the beneficiary receives of `net` base units of USDC at `rate`.
fn destination(net: u64, rate: Decimal) -> Decimal {
    (paygate_x402::money::UsdcAmount(net).to_decimal() * rate)
        .trunc_with_scale(2)
        .normalize()
}

fn payment_wire(p: &SbPayout) -> PaymentWire {
    PaymentWire {
        id: p.id.clone(),
        status: cpn_status(&p.status).into(),
        update_date: Some(p.created_at.clone()),
        failure_reason: None,
        failure_code: None,
        source_amount: p.funding.as_ref().map(|f| amount(f.amount.clone(), "USDC")),
        customer_ref_id: Some(p.reference.clone()),
        refund: None,
    }
}

/// CPN's word for where a sandbox payout stands.
fn cpn_status(sandbox: &str) -> &'static str {
    match sandbox {
        "complete" => "COMPLETED",
        "failed" => "FAILED",
        "fiat_payment_initiated" => "FIAT_PAYMENT_INITIATED",
        _ => "CREATED",
    }
}

/// Opens a JWE of a field list.
fn open_fields(s: &Inner, jwe: &str) -> Option<Vec<FieldWire>> {
    let raw = cpn_client::decrypt(&s.encryption.0, jwe).ok()?;
    serde_json::from_slice(&raw).ok()
}

pub(super) async fn create_payment(State(s): State<Shared>, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<PaymentRequestWire>(&body) else {
        return cpn_err(StatusCode::BAD_REQUEST, 2, "malformed payment request");
    };
    if !paygate_payouts::cpn::is_uuid(&req.idempotency_key) || req.customer_ref_id.is_empty() {
        return cpn_err(
            StatusCode::BAD_REQUEST,
            2,
            "idempotencyKey and customerRefId required",
        );
    }
    let (Some(beneficiary), Some(_travel_rule)) = (
        open_fields(&s, &req.beneficiary_account_data),
        open_fields(&s, &req.travel_rule_data),
    ) else {
        return cpn_err(
            StatusCode::BAD_REQUEST,
            290208,
            "encrypted data does not open",
        );
    };
    let name = beneficiary
        .iter()
        .find(|f| f.name == "RECIPIENT_LEGAL_NAME")
        .map(|f| f.value.clone())
        .unwrap_or_default();
    let reference = req.customer_ref_id.clone();
    let _one_at_a_time = s.create.lock().await;
    match stored::<SbPayout>(&s.payouts, &reference) {
        // The same idempotencyKey is the same request: the payment made for it.
        Ok(Some(p)) if p.idempotency_key.as_deref() == Some(req.idempotency_key.as_str()) => {
            return Json(PaymentAnswer {
                data: payment_wire(&p),
            })
            .into_response();
        }
        Ok(Some(_)) => {
            return cpn_err(
                StatusCode::CONFLICT,
                2,
                "customerRefId used by another payment",
            );
        }
        Ok(None) => {}
        Err(e) => return internal(e),
    }
    let quote = match stored::<SbQuote>(&s.quotes, &req.quote_id) {
        Ok(Some(q)) => q,
        Ok(None) => return cpn_err(StatusCode::BAD_REQUEST, 290200, "invalid quote"),
        Err(e) => return internal(e),
    };
    if quote.expires_at_unix < paygate_domain::unix_now() as i64 {
        return cpn_err(StatusCode::BAD_REQUEST, 290201, "quote expired");
    }
    let Some(source) = quote
        .source_amount
        .clone()
        .filter(|_| quote.used_by.is_none())
    else {
        return cpn_err(StatusCode::BAD_REQUEST, 290202, "quote already used");
    };
    let funding = onchain::funding_refusal(&s, &reference, &source, req.funding.as_ref());
    if let Some(refused) = funding.await {
        return refused;
    }
    if s.cfg.accept_delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(s.cfg.accept_delay_ms)).await;
    }
    let fee = parse_amount(&quote.rail_fee).unwrap_or(paygate_x402::money::UsdcAmount(0));
    let net = parse_amount(&source).map(|a| a.0).unwrap_or(0);
    let rfi = name
        .trim()
        .eq_ignore_ascii_case("sandbox rfi")
        .then(|| RfiWire {
            id: paygate_domain::ids::uuid_v4(),
            payment_id: String::new(),
            status: "INFORMATION_REQUIRED".into(),
            level: Some("LEVEL_1".into()),
            field_requirements: Some(rfi_schema()),
            expire_date: None,
        });
    let mut payout = SbPayout {
        id: paygate_domain::ids::uuid_v4(),
        reference: reference.clone(),
        status: "pending".into(),
        currency: quote.currency,
        dest_amount: destination(net.saturating_sub(fee.0), quote.rate),
        created_at: paygate_domain::now_rfc3339(),
        funding: req.funding.clone(),
        rfi,
        idempotency_key: Some(req.idempotency_key.clone()),
    };
    if let Some(r) = payout.rfi.as_mut() {
        r.payment_id = payout.id.clone();
    }
    if let Err(refused) = accept(&s, &payout, quote, &name).await {
        return refused;
    }
    (
        StatusCode::CREATED,
        Json(PaymentAnswer {
            data: payment_wire(&payout),
        }),
    )
        .into_response()
}

fn find_payment(s: &Inner, id: &str) -> anyhow::Result<Option<SbPayout>> {
    for kv in s.payouts.iter() {
        let (_, v) = kv?;
        let p: SbPayout = serde_json::from_slice(&v)?;
        if p.id == id {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

pub(super) async fn get_payment(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    match find_payment(&s, &id) {
        Ok(Some(p)) => Json(PaymentAnswer {
            data: payment_wire(&p),
        })
        .into_response(),
        Ok(None) => cpn_err(StatusCode::NOT_FOUND, 2, "payment not found"),
        Err(e) => internal(e),
    }
}

pub(super) async fn submit_rfi(
    State(s): State<Shared>,
    Path((payment_id, rfi_id)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let Ok(req) = serde_json::from_slice::<RfiSubmitWire>(&body) else {
        return cpn_err(StatusCode::BAD_REQUEST, 2, "malformed RFI answer");
    };
    let _one_at_a_time = s.create.lock().await;
    let mut payout = match find_payment(&s, &payment_id) {
        Ok(Some(p)) => p,
        Ok(None) => return cpn_err(StatusCode::NOT_FOUND, 2, "payment not found"),
        Err(e) => return internal(e),
    };
    let Some(rfi) = payout.rfi.as_mut().filter(|r| r.id == rfi_id) else {
        return cpn_err(StatusCode::NOT_FOUND, 2, "RFI not found");
    };
    if rfi.status != "INFORMATION_REQUIRED" {
        // Answered before: the same answer again is taken as the first.
        return Json(serde_json::json!({"data": rfi})).into_response();
    }
    let answer = cpn_client::decrypt(&s.encryption.0, &req.encrypted_data)
        .ok()
        .and_then(|raw| serde_json::from_slice::<serde_json::Value>(&raw).ok());
    let Some(answer) = answer else {
        return cpn_err(
            StatusCode::BAD_REQUEST,
            290208,
            "encrypted data does not open",
        );
    };
    let schema = rfi.field_requirements.clone().unwrap_or_else(rfi_schema);
    if !paygate_payouts::rfi::problems(&schema, &answer).is_empty() {
        return cpn_err(
            StatusCode::BAD_REQUEST,
            2,
            "the answer does not meet the RFI",
        );
    }
    rfi.status = "IN_REVIEW".into();
    let answered = rfi.clone();
    if let Err(e) = schedule_after_answer(&s, &payout) {
        return internal(e);
    }
    payout.status = "rfi_in_review".into();
    let stored = serde_json::to_vec(&payout)
        .map_err(anyhow::Error::from)
        .and_then(|b| Ok(s.payouts.insert(payout.reference.as_bytes(), b)?));
    if let Err(e) = stored {
        return internal(e);
    }
    if let Err(e) = s.flush().await {
        return internal(e);
    }
    Json(serde_json::json!({"data": answered})).into_response()
}

/// After an answer: the review, the approval, then the payment completing.
fn schedule_after_answer(s: &Inner, p: &SbPayout) -> anyhow::Result<()> {
    let now = now_ms();
    let step = s.cfg.webhook_delay_ms;
    let events = [
        (0, EventType::Progress, "rfi_in_review"),
        (step, EventType::Progress, "rfi_approved"),
        (2 * step, EventType::Progress, "fiat_payment_initiated"),
        (2 * step, EventType::PaymentCompleted, "complete"),
    ];
    for (delay, event, status) in events {
        let o = Outgoing::first(&p.reference, event, status);
        s.outbox
            .insert(s.outbox_key(now + delay)?, serde_json::to_vec(&o)?)?;
    }
    Ok(())
}
