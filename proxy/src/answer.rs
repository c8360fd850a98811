//! Writing the answers the gateway gives itself: one function per shape, all reached through
//! [`write`], so every answer carries the request id, CORS on `/gateway/`, and a settled
//! payment's receipt.

use crate::decide::{Answer, Stage};
use crate::Ctx;
use bytes::Bytes;
use paygate_domain::model::PaidAnswer;
use paygate_domain::{ErrorBody, ErrorCode};
use paygate_x402::Challenge;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::proxy::Session;

/// CORS on `/gateway/`: browsers may send payments and read receipts and challenges.
const CORS_ALLOW_HEADERS: &str =
    "X-PAYMENT, PAYMENT-SIGNATURE, Payment-Retry, Content-Type, Authorization, Accept";
const CORS_EXPOSE_HEADERS: &str = "X-PAYMENT-RESPONSE, PAYMENT-RESPONSE, PAYMENT-REQUIRED, \
                                   X-Payment-Requirements, X-Request-Id, Retry-After, \
                                   X-Paygate-Replayed";
const CORS_ALLOW_METHODS: &str = "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS";

/// Writes `answer` and names its outcome on `ctx`.
pub(crate) async fn write(session: &mut Session, ctx: &mut Ctx, answer: Answer) -> Result<()> {
    let (outcome, kind) = answer.outcome();
    ctx.outcome = Some(outcome);
    // A forwarded request failing upstream keeps its kind (a paid request stays paid in the
    // counters); only the gateway's own answers decide it.
    if !matches!(ctx.stage, Stage::Forwarding(_)) {
        ctx.kind = kind;
    }
    match answer {
        Answer::Preflight => preflight(session, ctx).await,
        Answer::Sandbox {
            receipt_header,
            receipt,
            body,
        } => sandbox(session, ctx, receipt_header, &receipt, body).await,
        Answer::Challenge { challenge, .. } => payment_required(session, ctx, challenge).await,
        Answer::Kept(kept) => kept_answer(session, ctx, kept).await,
        Answer::Error(code, message) => error(session, ctx, code, &message, None).await,
        Answer::Limited(r) => {
            let code = ErrorCode::TooManyRequests;
            error(
                session,
                ctx,
                code,
                r.limit.message(),
                Some(r.retry_after_secs),
            )
            .await
        }
    }
}

/// A JSON error (`Retry-After` when given); a settled payment's receipt header goes with it.
async fn error(
    session: &mut Session,
    ctx: &Ctx,
    code: ErrorCode,
    message: &str,
    retry_after: Option<u64>,
) -> Result<()> {
    let body = Bytes::from(ErrorBody::new(code, message, &ctx.request_id).to_json());
    let mut resp = ResponseHeader::build(code.status(), Some(6))?;
    if let Some(secs) = retry_after {
        resp.insert_header("retry-after", secs)?;
    }
    resp.insert_header("content-type", "application/json")?;
    resp.insert_header("content-length", body.len())?;
    resp.insert_header("x-request-id", ctx.request_id.as_str())?;
    if let Some(p) = ctx.paid() {
        resp.insert_header(p.receipt_header, p.receipt.as_str())?;
    }
    if ctx.gateway {
        add_cors(&mut resp)?;
    }
    session.write_response_header(Box::new(resp), false).await?;
    session.write_response_body(Some(body), true).await
}

async fn payment_required(session: &mut Session, ctx: &Ctx, challenge: Challenge) -> Result<()> {
    let mut resp = ResponseHeader::build(402, Some(6))?;
    resp.insert_header("content-type", "application/json")?;
    resp.insert_header("content-length", challenge.body.len())?;
    resp.insert_header("x-payment-requirements", challenge.requirements_header)?;
    resp.insert_header("payment-required", challenge.payment_required_header)?;
    resp.insert_header("x-request-id", ctx.request_id.as_str())?;
    add_cors(&mut resp)?;
    session.write_response_header(Box::new(resp), false).await?;
    session
        .write_response_body(Some(challenge.body), true)
        .await
}

async fn sandbox(
    session: &mut Session,
    ctx: &Ctx,
    receipt_header: &'static str,
    receipt: &str,
    body: Bytes,
) -> Result<()> {
    let mut resp = ResponseHeader::build(200, Some(6))?;
    resp.insert_header("content-type", "application/json")?;
    resp.insert_header("content-length", body.len())?;
    resp.insert_header(receipt_header, receipt)?;
    resp.insert_header("x-paygate-sandbox", "true")?;
    resp.insert_header("x-request-id", ctx.request_id.as_str())?;
    add_cors(&mut resp)?;
    session.write_response_header(Box::new(resp), false).await?;
    session.write_response_body(Some(body), true).await
}

/// The answer kept under a payment identifier, given again: the same status, body and receipt,
/// marked `X-Paygate-Replayed`.
async fn kept_answer(session: &mut Session, ctx: &Ctx, kept: PaidAnswer) -> Result<()> {
    use base64::Engine;
    let body = base64::engine::general_purpose::STANDARD
        .decode(kept.body.as_bytes())
        .unwrap_or_default();
    let mut resp = ResponseHeader::build(kept.status, Some(7))?;
    if let Some(ct) = &kept.content_type {
        resp.insert_header("content-type", ct.as_str())?;
    }
    resp.insert_header("content-length", body.len())?;
    resp.insert_header(kept.receipt_header, kept.receipt.as_str())?;
    resp.insert_header("x-paygate-replayed", "payment-identifier")?;
    resp.insert_header("x-request-id", ctx.request_id.as_str())?;
    add_cors(&mut resp)?;
    session.write_response_header(Box::new(resp), false).await?;
    session.write_response_body(Some(body.into()), true).await
}

async fn preflight(session: &mut Session, ctx: &Ctx) -> Result<()> {
    let mut resp = ResponseHeader::build(204, Some(6))?;
    add_cors(&mut resp)?;
    resp.insert_header("access-control-allow-methods", CORS_ALLOW_METHODS)?;
    resp.insert_header("access-control-allow-headers", CORS_ALLOW_HEADERS)?;
    resp.insert_header("access-control-max-age", "600")?;
    resp.insert_header("x-request-id", ctx.request_id.as_str())?;
    session.write_response_header(Box::new(resp), true).await
}

pub(crate) fn add_cors(resp: &mut ResponseHeader) -> Result<()> {
    resp.insert_header("access-control-allow-origin", "*")?;
    resp.insert_header("access-control-expose-headers", CORS_EXPOSE_HEADERS)
}
