//! paygate's hot path: one Pingora `ProxyHttp` that owns the public listener. `/gateway/*` is
//! answered here (404 / 403 / 503 / 402 challenge); every other path is passed to the control
//! plane on its internal loopback address.

use async_trait::async_trait;
use bytes::Bytes;
use paygate_shared::ids::new_request_id;
use paygate_shared::route_path::lookup_key;
use paygate_shared::route_table::{RouteEntry, RouteTable};
use paygate_shared::x402::Challenge;
use paygate_shared::{ErrorBody, ErrorCode};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

const GATEWAY_PREFIX: &str = "/gateway/";

/// The proxy service: the route table it reads and where the control plane listens.
pub struct Gateway {
    table: Arc<RouteTable>,
    control_plane: SocketAddr,
}

impl Gateway {
    pub fn new(table: Arc<RouteTable>, control_plane: SocketAddr) -> Self {
        Self {
            table,
            control_plane,
        }
    }
}

/// Per-request state.
pub struct Ctx {
    request_id: String,
    start: Instant,
    /// `Some` once a gateway request was answered here, with the outcome's name for the log.
    outcome: Option<&'static str>,
}

/// What a `/gateway/` lookup found.
enum Lookup {
    Route(Arc<RouteEntry>),
    Refuse(ErrorCode, &'static str),
}

impl Gateway {
    fn lookup(&self, rest: &str) -> Lookup {
        let (slug, suffix) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let snapshot = self.table.snapshot();
        let Some(org) = snapshot.org(slug) else {
            return Lookup::Refuse(ErrorCode::RouteNotFound, "no route at this address");
        };
        let Some(entry) = org.routes.get(lookup_key(suffix)) else {
            return Lookup::Refuse(ErrorCode::RouteNotFound, "no route at this address");
        };
        if org.suspended {
            return Lookup::Refuse(ErrorCode::OrgSuspended, "this organisation is suspended");
        }
        if entry.payment.is_none() {
            return Lookup::Refuse(
                ErrorCode::Misconfigured,
                "this organisation has no receiver wallet configured",
            );
        }
        Lookup::Route(entry.clone())
    }

    async fn respond_error(
        session: &mut Session,
        ctx: &mut Ctx,
        code: ErrorCode,
        message: &str,
    ) -> Result<()> {
        ctx.outcome = Some(code.as_str());
        let body = Bytes::from(ErrorBody::new(code, message, &ctx.request_id).to_json());
        let mut resp = ResponseHeader::build(code.status(), Some(4))?;
        resp.insert_header("content-type", "application/json")?;
        resp.insert_header("content-length", body.len())?;
        resp.insert_header("x-request-id", ctx.request_id.as_str())?;
        session.write_response_header(Box::new(resp), false).await?;
        session.write_response_body(Some(body), true).await
    }

    async fn respond_challenge(
        session: &mut Session,
        ctx: &mut Ctx,
        challenge: &Challenge,
    ) -> Result<()> {
        ctx.outcome = Some("PAYMENT_REQUIRED");
        let mut resp = ResponseHeader::build(402, Some(6))?;
        resp.insert_header("content-type", "application/json")?;
        resp.insert_header("content-length", challenge.body.len())?;
        resp.insert_header(
            "x-payment-requirements",
            challenge.requirements_header.as_str(),
        )?;
        resp.insert_header(
            "payment-required",
            challenge.payment_required_header.as_str(),
        )?;
        resp.insert_header("x-request-id", ctx.request_id.as_str())?;
        session.write_response_header(Box::new(resp), false).await?;
        session
            .write_response_body(Some(challenge.body.clone()), true)
            .await
    }
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx {
            request_id: new_request_id(),
            start: Instant::now(),
            outcome: None,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let lookup = match session.req_header().uri.path().strip_prefix(GATEWAY_PREFIX) {
            Some(rest) => self.lookup(rest),
            None => return Ok(false),
        };
        match lookup {
            Lookup::Refuse(code, msg) => Self::respond_error(session, ctx, code, msg).await?,
            Lookup::Route(entry) => {
                // Payment verification arrives with settlement; until then every request is
                // treated as unpaid. The sandbox route always answers this way.
                if let Some((_, challenge)) = &entry.payment {
                    Self::respond_challenge(session, ctx, challenge).await?;
                }
            }
        }
        Ok(true)
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(
            self.control_plane,
            false,
            String::new(),
        )))
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        upstream.insert_header("x-request-id", ctx.request_id.as_str())?;
        if let Some(addr) = session.client_addr().and_then(|a| a.as_inet()) {
            upstream.insert_header("x-forwarded-for", addr.ip().to_string())?;
        }
        upstream.insert_header("x-forwarded-proto", "http")?;
        Ok(())
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        let status = match e.etype() {
            ErrorType::HTTPStatus(code) => *code,
            _ => match e.esource() {
                ErrorSource::Upstream => 502,
                ErrorSource::Downstream => match e.etype() {
                    ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed => 0,
                    _ => 400,
                },
                ErrorSource::Internal | ErrorSource::Unset => 500,
            },
        };
        if status > 0 {
            let code = ErrorCode::for_status(status);
            let msg = match code {
                ErrorCode::UpstreamUnavailable => "service temporarily unavailable",
                ErrorCode::UpstreamTimeout => "service timed out",
                ErrorCode::BadRequest => "malformed request",
                _ => "internal error; quote the requestId to support",
            };
            if let Err(err) = Self::respond_error(session, ctx, code, msg).await {
                tracing::debug!(error = %err, "could not send error response");
            }
        }
        FailToProxy {
            error_code: status,
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        let req = session.req_header();
        tracing::info!(
            target: "paygate::access",
            request_id = %ctx.request_id,
            method = %req.method,
            path = %req.uri.path(),
            status,
            outcome = ctx.outcome.unwrap_or("-"),
            elapsed_us = ctx.start.elapsed().as_micros() as u64,
            error = e.map(|e| e.to_string()),
        );
    }
}
