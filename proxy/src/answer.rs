//! Writing the answers the gateway gives itself: one function per shape, all reached through
//! [`write`], so every answer carries the request id, CORS on `/gateway/`, and a settled
//! payment's receipt.
//!
//! These headers are the gateway's own, so their names need no case kept: each answer's header
//! is built as plain `http` parts ([`Own`]) under constant names and handed to Pingora as a
//! case-free `ResponseHeader`. Pingora's `insert_header` would parse every name again and keep
//! a second map of the names' case, a measurable share of a 402 (issue 21).

use crate::ctx::Ctx;
use crate::decide::Stage;
use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use paygate_domain::{ErrorBody, ErrorCode};
use paygate_gateway::payments::reply::Answer;
use paygate_gateway::payments::way::Served;
use paygate_x402::Challenge;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::proxy::Session;

/// CORS on `/gateway/`: browsers may send payments and read receipts and challenges.
const CORS_ALLOW_HEADERS: HeaderValue = HeaderValue::from_static(
    "X-PAYMENT, PAYMENT-SIGNATURE, Payment-Retry, Content-Type, Authorization, Accept",
);
const CORS_EXPOSE_HEADERS: HeaderValue = HeaderValue::from_static(
    "X-PAYMENT-RESPONSE, PAYMENT-RESPONSE, PAYMENT-REQUIRED, X-Payment-Requirements, \
     WWW-Authenticate, Payment-Receipt, X-Request-Id, Retry-After, X-Paygate-Replayed",
);
const CORS_ALLOW_METHODS: HeaderValue =
    HeaderValue::from_static("GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS");
const ANY: HeaderValue = HeaderValue::from_static("*");
const JSON: HeaderValue = HeaderValue::from_static("application/json");
const PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const X_PAYMENT_REQUIREMENTS: HeaderName = HeaderName::from_static("x-payment-requirements");
const PAYMENT_REQUIRED: HeaderName = HeaderName::from_static("payment-required");

/// An answer's header of the gateway's own, being built (no header-name case kept).
struct Own(http::response::Parts);

impl Own {
    /// With room for `size` more headers, and the answer's `content-length` and `x-request-id`.
    fn new(status: u16, size: usize, body_len: Option<usize>, ctx: &Ctx) -> Result<Self> {
        let (mut parts, ()) = http::Response::new(()).into_parts();
        parts.status =
            http::StatusCode::from_u16(status).or_err(InternalError, "invalid status")?;
        parts.headers.reserve(size + 2);
        let mut own = Self(parts);
        if let Some(len) = body_len {
            own.put(header::CONTENT_LENGTH, HeaderValue::from(len));
        }
        let id = HeaderValue::from_str(&ctx.request_id)
            .or_err(InternalError, "request id is not a header value")?;
        own.put(X_REQUEST_ID, id);
        Ok(own)
    }

    fn put(&mut self, name: HeaderName, value: HeaderValue) {
        self.0.headers.insert(name, value);
    }

    /// A header whose name is known only at run time (a receipt's, by protocol version).
    fn put_named(&mut self, name: &str, value: &str) -> Result<()> {
        let name =
            HeaderName::from_bytes(name.as_bytes()).or_err(InternalError, "invalid header name")?;
        let value = HeaderValue::from_str(value).or_err(InternalError, "invalid header value")?;
        self.put(name, value);
        Ok(())
    }

    /// CORS on `/gateway/`.
    fn cors(&mut self) {
        self.put(header::ACCESS_CONTROL_ALLOW_ORIGIN, ANY);
        self.put(header::ACCESS_CONTROL_EXPOSE_HEADERS, CORS_EXPOSE_HEADERS);
    }

    fn done(self) -> Box<ResponseHeader> {
        Box::new(ResponseHeader::from(self.0))
    }
}

/// Writes `answer` and names its outcome on `ctx`.
pub(crate) async fn write(session: &mut Session, ctx: &mut Ctx, answer: Answer) -> Result<()> {
    let (outcome, kind) = answer.outcome();
    let status = answer.status();
    ctx.outcome = Some(outcome);
    // A forwarded request failing upstream keeps its kind (a paid request stays paid in the
    // counters); only the gateway's own answers decide it.
    if !matches!(ctx.stage, Stage::Forwarding(_)) {
        ctx.kind = kind;
    }
    match answer {
        Answer::Preflight => preflight(session, ctx).await,
        Answer::Served(served) => served_answer(session, ctx, *served).await,
        // `412` when the payer must first approve Permit2 (x402's answer), else `402`.
        Answer::Challenge {
            challenge, problem, ..
        } => payment_required(session, ctx, challenge, status, problem).await,
        Answer::Error(code, message) => error(session, ctx, code, &message, None).await,
        Answer::Stopped(s) => error(session, ctx, s.code, &s.message, s.retry_after).await,
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
    let mut resp = Own::new(code.status(), 6, Some(body.len()), ctx)?;
    if let Some(secs) = retry_after {
        resp.put(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp.put(header::CONTENT_TYPE, JSON);
    if let Some(r) = ctx.receipt() {
        resp.put_named(r.header, &r.value)?;
    }
    if ctx.gateway {
        resp.cors();
    }
    session.write_response_header(resp.done(), false).await?;
    session.write_response_body(Some(body), true).await
}

async fn payment_required(
    session: &mut Session,
    ctx: &Ctx,
    challenge: Challenge,
    status: u16,
    problem: bool,
) -> Result<()> {
    let mut resp = Own::new(status, 6, Some(challenge.body.len()), ctx)?;
    resp.put(
        header::CONTENT_TYPE,
        if problem { PROBLEM_JSON } else { JSON },
    );
    if challenge.x402 {
        if let Some(seed) = challenge.requirements_header {
            resp.put(X_PAYMENT_REQUIREMENTS, seed);
        }
        resp.put(PAYMENT_REQUIRED, challenge.payment_required_header);
    }
    if let Some(mpp) = challenge.www_authenticate {
        resp.put(header::WWW_AUTHENTICATE, mpp);
    }
    resp.cors();
    session.write_response_header(resp.done(), false).await?;
    session
        .write_response_body(Some(challenge.body), true)
        .await
}

/// An answer of the payment side's own, with its receipt: the sandbox route's (marked
/// `X-Paygate-Sandbox`), a payer's channel refund, or the answer kept under a payment
/// identifier given again (the same status, body and receipt, marked `X-Paygate-Replayed`).
async fn served_answer(session: &mut Session, ctx: &Ctx, served: Served) -> Result<()> {
    let mut resp = Own::new(served.status, 5, Some(served.body.len()), ctx)?;
    if let Some(ct) = &served.content_type {
        let ct = HeaderValue::from_str(ct).or_err(InternalError, "invalid header value")?;
        resp.put(header::CONTENT_TYPE, ct);
    }
    let (name, value) = &served.receipt;
    resp.put_named(name, value)?;
    if let Some((name, value)) = served.mark {
        resp.put(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    resp.cors();
    session.write_response_header(resp.done(), false).await?;
    session
        .write_response_body(Some(Bytes::from(served.body)), true)
        .await
}

async fn preflight(session: &mut Session, ctx: &Ctx) -> Result<()> {
    let mut resp = Own::new(204, 5, None, ctx)?;
    resp.cors();
    resp.put(header::ACCESS_CONTROL_ALLOW_METHODS, CORS_ALLOW_METHODS);
    resp.put(header::ACCESS_CONTROL_ALLOW_HEADERS, CORS_ALLOW_HEADERS);
    resp.put(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    session.write_response_header(resp.done(), true).await
}

/// CORS on a forwarded upstream response, whose header-name case is kept (so the names go
/// through Pingora's `insert_header`).
pub(crate) fn add_cors(resp: &mut ResponseHeader) -> Result<()> {
    resp.insert_header("access-control-allow-origin", ANY)?;
    resp.insert_header("access-control-expose-headers", CORS_EXPOSE_HEADERS)
}
