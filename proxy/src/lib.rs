//! paygate's hot path: one Pingora `ProxyHttp` that owns the public listener. `/gateway/*` is
//! answered here: look up the route, challenge (402), or verify, reserve, settle and forward to
//! the route's upstream. Every other path is passed to the control plane on its loopback address.

mod payment;

use async_trait::async_trait;
use bytes::Bytes;
use paygate_shared::facilitator::Facilitator;
use paygate_shared::ids::new_request_id;
use paygate_shared::model::GatewayPayment;
use paygate_shared::route_path::lookup_key;
use paygate_shared::route_table::{RouteEntry, RouteTable};
use paygate_shared::store::Store;
use paygate_shared::x402::payment::ProtocolVersion;
use paygate_shared::x402::Challenge;
use paygate_shared::{ErrorBody, ErrorCode};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const GATEWAY_PREFIX: &str = "/gateway/";

/// Upstream timeouts (fixed here; configurable with the forwarding work).
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const UPSTREAM_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The proxy service: the route table it reads, the facilitator it settles through, the store
/// that guards nonces, and where the control plane listens.
pub struct Gateway {
    table: Arc<RouteTable>,
    control_plane: SocketAddr,
    facilitator: Option<Arc<dyn Facilitator>>,
    store: Arc<dyn Store>,
}

impl Gateway {
    pub fn new(
        table: Arc<RouteTable>,
        control_plane: SocketAddr,
        facilitator: Option<Arc<dyn Facilitator>>,
        store: Arc<dyn Store>,
    ) -> Self {
        Self {
            table,
            control_plane,
            facilitator,
            store,
        }
    }
}

/// A settled payment travelling with its request: the receipt to attach to the answer.
pub struct Paid {
    receipt_header: &'static str,
    receipt: String,
    record: GatewayPayment,
}

/// Per-request state.
pub struct Ctx {
    request_id: String,
    start: Instant,
    /// The outcome's name for the access log, once known.
    outcome: Option<&'static str>,
    /// The route being forwarded to (set once paid).
    route: Option<Arc<RouteEntry>>,
    paid: Option<Paid>,
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

    /// Writes a JSON error; a settled payment's receipt header goes with it.
    async fn respond_error(
        session: &mut Session,
        ctx: &mut Ctx,
        code: ErrorCode,
        message: &str,
    ) -> Result<()> {
        ctx.outcome = Some(code.as_str());
        let body = Bytes::from(ErrorBody::new(code, message, &ctx.request_id).to_json());
        let mut resp = ResponseHeader::build(code.status(), Some(5))?;
        resp.insert_header("content-type", "application/json")?;
        resp.insert_header("content-length", body.len())?;
        resp.insert_header("x-request-id", ctx.request_id.as_str())?;
        if let Some(p) = &ctx.paid {
            resp.insert_header(p.receipt_header, p.receipt.as_str())?;
        }
        session.write_response_header(Box::new(resp), false).await?;
        session.write_response_body(Some(body), true).await
    }

    async fn respond_challenge(
        session: &mut Session,
        ctx: &mut Ctx,
        challenge: &Challenge,
    ) -> Result<()> {
        ctx.outcome = Some("PAYMENT_REQUIRED");
        Self::write_402(session, ctx, challenge, challenge.body.clone()).await
    }

    async fn write_402(
        session: &mut Session,
        ctx: &Ctx,
        challenge: &Challenge,
        body: Bytes,
    ) -> Result<()> {
        let mut resp = ResponseHeader::build(402, Some(6))?;
        resp.insert_header("content-type", "application/json")?;
        resp.insert_header("content-length", body.len())?;
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
        session.write_response_body(Some(body), true).await
    }

    /// The payment header, if any: `PAYMENT-SIGNATURE` (v2) wins over `X-PAYMENT` (v1).
    fn payment_header(req: &RequestHeader) -> Option<(ProtocolVersion, Vec<u8>)> {
        if let Some(v) = req.headers.get("payment-signature") {
            return Some((ProtocolVersion::V2, v.as_bytes().to_vec()));
        }
        req.headers
            .get("x-payment")
            .map(|v| (ProtocolVersion::V1, v.as_bytes().to_vec()))
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
            route: None,
            paid: None,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let lookup = match session.req_header().uri.path().strip_prefix(GATEWAY_PREFIX) {
            Some(rest) => self.lookup(rest),
            None => return Ok(false),
        };
        let entry = match lookup {
            Lookup::Refuse(code, msg) => {
                Self::respond_error(session, ctx, code, msg).await?;
                return Ok(true);
            }
            Lookup::Route(entry) => entry,
        };
        let Some((requirements, challenge)) = &entry.payment else {
            return Ok(true);
        };
        let header = if entry.sandbox {
            None // The sandbox never takes a payment.
        } else {
            Self::payment_header(session.req_header())
        };
        let Some((version, raw)) = header else {
            Self::respond_challenge(session, ctx, challenge).await?;
            return Ok(true);
        };
        match self
            .take_payment(session, ctx, &entry, requirements, challenge, version, &raw)
            .await?
        {
            Some(paid) => {
                ctx.outcome = Some("PAID");
                ctx.paid = Some(paid);
                ctx.route = Some(entry);
                Ok(false)
            }
            None => Ok(true),
        }
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let Some(entry) = &ctx.route else {
            return Ok(Box::new(HttpPeer::new(
                self.control_plane,
                false,
                String::new(),
            )));
        };
        let Some(target) = &entry.upstream else {
            return Error::e_explain(ErrorType::ConnectNoRoute, "route has no upstream");
        };
        let addr = resolve(&target.host, target.port).await?;
        let mut peer = HttpPeer::new(addr, target.tls, target.host.clone());
        peer.options.connection_timeout = Some(UPSTREAM_CONNECT_TIMEOUT);
        peer.options.read_timeout = Some(UPSTREAM_READ_TIMEOUT);
        Ok(Box::new(peer))
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
        if let Some(target) = ctx.route.as_ref().and_then(|e| e.upstream.as_ref()) {
            let pq = target.path_and_query(session.req_header().uri.query());
            let uri = pq
                .parse()
                .map_err(|_| Error::explain(ErrorType::InternalError, "bad upstream path"))?;
            upstream.set_uri(uri);
            upstream.insert_header("host", target.host_header.as_str())?;
            upstream.remove_header("x-payment");
            upstream.remove_header("payment-signature");
        }
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(p) = &ctx.paid {
            resp.insert_header(p.receipt_header, p.receipt.as_str())?;
            resp.insert_header("x-request-id", ctx.request_id.as_str())?;
        }
        Ok(())
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        let status = match e.etype() {
            ErrorType::HTTPStatus(code) => *code,
            ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout
                if ctx.route.is_some() =>
            {
                504
            }
            _ => match e.esource() {
                ErrorSource::Upstream => 503,
                ErrorSource::Downstream => match e.etype() {
                    ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed => 0,
                    _ => 400,
                },
                ErrorSource::Internal | ErrorSource::Unset => {
                    if ctx.route.is_some() && matches!(e.etype(), ErrorType::ConnectNoRoute) {
                        503
                    } else {
                        500
                    }
                }
            },
        };
        if status > 0 {
            let code = ErrorCode::for_status(status);
            let msg = match code {
                ErrorCode::UpstreamUnavailable => "upstream unavailable",
                ErrorCode::UpstreamTimeout => "upstream timed out",
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
        if let Some(p) = ctx.paid.take() {
            // Record how the upstream answered against the payment, off the response path.
            let mut record = p.record;
            record.upstream_status = Some(status);
            record.updated_at = paygate_shared::now_rfc3339();
            let store = self.store.clone();
            tokio::spawn(async move {
                if let Err(e) = store.update_payment(&record).await {
                    tracing::warn!(error = %e, payment = %record.id, "could not record upstream status");
                }
            });
        }
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

/// Resolves an upstream host without blocking (IP literals need no lookup).
async fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let mut addrs = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| Error::because(ErrorType::ConnectNoRoute, "resolving upstream", e))?;
    addrs
        .next()
        .ok_or_else(|| Error::explain(ErrorType::ConnectNoRoute, "upstream host has no address"))
}
