//! paygate's hot path: one Pingora `ProxyHttp` that owns the public listener. `/gateway/*` is
//! answered here: look up the route, challenge (402), or verify, reserve, settle and forward to
//! the route's upstream. Every other path is passed to the control plane on its loopback address.

mod payment;

use async_trait::async_trait;
use bytes::Bytes;
use paygate_shared::config::UpstreamConfig;
use paygate_shared::facilitator::Facilitator;
use paygate_shared::ids::new_request_id;
use paygate_shared::metrics::{Metrics, Outcome, RequestEvent};
use paygate_shared::model::GatewayPayment;
use paygate_shared::route_path::lookup_key;
use paygate_shared::route_table::{RouteEntry, RouteTable};
use paygate_shared::store::Store;
use paygate_shared::target_policy::TargetPolicy;
use paygate_shared::usage::{PlanUsage, Slot};
use paygate_shared::x402::payment::ProtocolVersion;
use paygate_shared::x402::Challenge;
use paygate_shared::{ErrorBody, ErrorCode};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const GATEWAY_PREFIX: &str = "/gateway/";

/// Request headers never forwarded upstream: hop-by-hop ones (RFC 9110 7.6.1; Pingora frames
/// bodies itself) and the payment, which is the gateway's business.
const REQUEST_HOP_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "x-payment",
    "payment-signature",
];
/// Hop-by-hop headers of an upstream response, not passed to the client.
const RESPONSE_HOP_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];
/// CORS on `/gateway/`: browsers may send payments and read receipts and challenges.
const CORS_ALLOW_HEADERS: &str =
    "X-PAYMENT, PAYMENT-SIGNATURE, Payment-Retry, Content-Type, Authorization, Accept";
const CORS_EXPOSE_HEADERS: &str = "X-PAYMENT-RESPONSE, PAYMENT-RESPONSE, PAYMENT-REQUIRED, \
                                   X-Payment-Requirements, X-Request-Id";
const CORS_ALLOW_METHODS: &str = "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS";

/// How upstreams are reached: timeouts, the SSRF policy, TLS exceptions and size limits.
pub struct ProxySettings {
    pub policy: TargetPolicy,
    pub connect_timeout: Duration,
    pub total_timeout: Duration,
    pub stream_idle_timeout: Duration,
    pub insecure_tls_hosts: HashSet<String>,
    pub max_body_bytes: u64,
    pub max_header_bytes: usize,
}

impl ProxySettings {
    pub fn from_config(c: &UpstreamConfig) -> Self {
        Self {
            policy: TargetPolicy::new(c.allow_private_networks.clone()),
            connect_timeout: Duration::from_secs(c.connect_timeout_seconds),
            total_timeout: Duration::from_secs(c.total_timeout_seconds),
            stream_idle_timeout: Duration::from_secs(c.stream_idle_timeout_seconds),
            insecure_tls_hosts: c.insecure_tls_hosts.iter().cloned().collect(),
            max_body_bytes: c.max_request_body_bytes,
            max_header_bytes: c.max_request_header_bytes,
        }
    }
}

/// The proxy service: the route table it reads, the facilitator it settles through, the store
/// that guards nonces, plan counters, the metrics hub, and where the control plane listens.
pub struct Gateway {
    table: Arc<RouteTable>,
    control_plane: SocketAddr,
    facilitator: Option<Arc<dyn Facilitator>>,
    store: Arc<dyn Store>,
    settings: ProxySettings,
    metrics: Arc<Metrics>,
    usage: Arc<PlanUsage>,
}

/// What the gateway is built from.
pub struct GatewayParts {
    pub table: Arc<RouteTable>,
    pub control_plane: SocketAddr,
    pub facilitator: Option<Arc<dyn Facilitator>>,
    pub store: Arc<dyn Store>,
    pub settings: ProxySettings,
    pub metrics: Arc<Metrics>,
    pub usage: Arc<PlanUsage>,
}

impl Gateway {
    pub fn new(p: GatewayParts) -> Self {
        Self {
            table: p.table,
            control_plane: p.control_plane,
            facilitator: p.facilitator,
            store: p.store,
            settings: p.settings,
            metrics: p.metrics,
            usage: p.usage,
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
    /// A `/gateway/` request (CORS headers, metrics).
    gateway: bool,
    /// The outcome's name for the access log, once known.
    outcome: Option<&'static str>,
    /// The outcome for the counters.
    kind: Outcome,
    /// The organisation the request addressed, once known (metrics).
    org_id: Option<Arc<str>>,
    route_id: Option<Arc<str>>,
    /// The route being forwarded to (set once paid) and its checked address.
    route: Option<Arc<RouteEntry>>,
    upstream_addr: Option<SocketAddr>,
    /// Non-streaming routes: when the whole upstream response must have arrived.
    deadline: Option<Instant>,
    upstream_status: Option<u16>,
    body_bytes: u64,
    paid: Option<Paid>,
    /// The plan slot this paid request holds.
    slot: Option<Slot>,
}

/// What a `/gateway/` lookup found.
enum Lookup {
    Route(Arc<str>, Arc<RouteEntry>, u64),
    Refuse(Option<Arc<str>>, ErrorCode, &'static str),
}

impl Gateway {
    fn lookup(&self, rest: &str) -> Lookup {
        let (slug, suffix) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let snapshot = self.table.snapshot();
        let Some(org) = snapshot.org(slug) else {
            return Lookup::Refuse(None, ErrorCode::RouteNotFound, "no route at this address");
        };
        let org_id = Some(org.org_id.clone());
        let Some(entry) = org.routes.get(lookup_key(suffix)) else {
            return Lookup::Refuse(org_id, ErrorCode::RouteNotFound, "no route at this address");
        };
        if org.suspended {
            return Lookup::Refuse(
                org_id,
                ErrorCode::OrgSuspended,
                "this organisation is suspended",
            );
        }
        if entry.payment.is_none() {
            return Lookup::Refuse(
                org_id,
                ErrorCode::Misconfigured,
                "this organisation has no receiver wallet configured",
            );
        }
        Lookup::Route(org.org_id.clone(), entry.clone(), org.plan_limit)
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
        if ctx.gateway {
            add_cors(&mut resp)?;
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
        ctx.kind = Outcome::Challenge;
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
            challenge.requirements_header.clone(),
        )?;
        resp.insert_header(
            "payment-required",
            challenge.payment_required_header.clone(),
        )?;
        resp.insert_header("x-request-id", ctx.request_id.as_str())?;
        add_cors(&mut resp)?;
        session.write_response_header(Box::new(resp), false).await?;
        session.write_response_body(Some(body), true).await
    }

    /// Answers a CORS preflight on `/gateway/`.
    async fn respond_preflight(session: &mut Session, ctx: &mut Ctx) -> Result<()> {
        ctx.outcome = Some("PREFLIGHT");
        let mut resp = ResponseHeader::build(204, Some(6))?;
        add_cors(&mut resp)?;
        resp.insert_header("access-control-allow-methods", CORS_ALLOW_METHODS)?;
        resp.insert_header("access-control-allow-headers", CORS_ALLOW_HEADERS)?;
        resp.insert_header("access-control-max-age", "600")?;
        resp.insert_header("x-request-id", ctx.request_id.as_str())?;
        session.write_response_header(Box::new(resp), true).await
    }

    /// Size of the request line and header block, roughly as sent.
    fn header_bytes(req: &RequestHeader) -> usize {
        let uri = req.uri.path_and_query().map_or(0, |p| p.as_str().len());
        req.headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 4)
            .sum::<usize>()
            + uri
    }

    /// Resolves the route's upstream and checks it against the SSRF policy, before any payment
    /// is taken (and so again on every request: DNS answers may change).
    async fn upstream_address(
        &self,
        entry: &RouteEntry,
    ) -> std::result::Result<SocketAddr, String> {
        let target = entry
            .upstream
            .as_ref()
            .ok_or_else(|| "route has no upstream".to_string())?;
        let addr = resolve(&target.host, target.port)
            .await
            .map_err(|e| format!("cannot resolve the upstream host: {e}"))?;
        if !self.settings.policy.allows(addr.ip()) {
            return Err(
                "the upstream resolves to an internal address, which is not allowed".into(),
            );
        }
        Ok(addr)
    }

    /// The checked upstream address, or `None` once a 503 has been written.
    async fn checked_upstream(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        entry: &RouteEntry,
    ) -> Result<Option<SocketAddr>> {
        match self.upstream_address(entry).await {
            Ok(a) => Ok(Some(a)),
            Err(msg) => {
                tracing::warn!(route = %entry.id, error = %msg, "upstream refused before payment");
                Self::respond_error(session, ctx, ErrorCode::UpstreamUnavailable, &msg).await?;
                Ok(None)
            }
        }
    }

    /// A plan slot for this paid request, or `None` once `402 PLAN_LIMIT_EXCEEDED` (or a 500)
    /// has been written.
    async fn plan_slot(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        plan_limit: u64,
    ) -> Result<Option<Slot>> {
        let org_id = ctx.org_id.clone().unwrap_or_else(|| Arc::from(""));
        match self.usage.try_take(&org_id, plan_limit).await {
            Ok(Some(slot)) => Ok(Some(slot)),
            Ok(None) => {
                ctx.kind = Outcome::Rejected;
                Self::respond_error(
                    session,
                    ctx,
                    ErrorCode::PlanLimitExceeded,
                    "this organisation has used its plan's requests for this month; nothing was charged",
                )
                .await?;
                Ok(None)
            }
            Err(e) => {
                tracing::error!(error = %e, "plan usage unavailable");
                Self::respond_error(session, ctx, ErrorCode::InternalError, "internal error")
                    .await?;
                Ok(None)
            }
        }
    }

    /// The paid step and everything before it: body limit, upstream address, plan slot, payment.
    /// `Ok(true)`: answered.
    async fn gateway_request(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        entry: Arc<RouteEntry>,
        plan_limit: u64,
    ) -> Result<bool> {
        let Some((requirements, challenge)) = &entry.payment else {
            return Ok(true);
        };
        #[cfg(feature = "bench-free-pass")]
        if !entry.sandbox
            && session
                .req_header()
                .headers
                .contains_key("x-paygate-bench-free")
        {
            let Some(addr) = self.checked_upstream(session, ctx, &entry).await? else {
                return Ok(true);
            };
            ctx.outcome = Some("BENCH_FREE");
            ctx.upstream_addr = Some(addr);
            ctx.route = Some(entry);
            return Ok(false);
        }
        let header = if entry.sandbox {
            None // The sandbox never takes a payment.
        } else {
            Self::payment_header(session.req_header())
        };
        let Some((version, raw)) = header else {
            Self::respond_challenge(session, ctx, challenge).await?;
            return Ok(true);
        };
        let declared = session
            .req_header()
            .headers
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.settings.max_body_bytes) {
            Self::respond_error(
                session,
                ctx,
                ErrorCode::PayloadTooLarge,
                "request body is larger than this gateway forwards",
            )
            .await?;
            return Ok(true);
        }
        match self
            .take_payment(
                session,
                ctx,
                &entry,
                requirements,
                challenge,
                version,
                &raw,
                plan_limit,
            )
            .await?
        {
            Some((paid, addr, slot)) => {
                ctx.outcome = Some("PAID");
                ctx.kind = Outcome::Paid;
                ctx.paid = Some(paid);
                ctx.slot = Some(slot);
                ctx.upstream_addr = Some(addr);
                ctx.route = Some(entry);
                Ok(false)
            }
            None => Ok(true),
        }
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
            gateway: false,
            outcome: None,
            kind: Outcome::Other,
            org_id: None,
            route_id: None,
            route: None,
            upstream_addr: None,
            deadline: None,
            upstream_status: None,
            body_bytes: 0,
            paid: None,
            slot: None,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        if Self::header_bytes(session.req_header()) > self.settings.max_header_bytes {
            Self::respond_error(
                session,
                ctx,
                ErrorCode::HeadersTooLarge,
                "request headers are too large",
            )
            .await?;
            return Ok(true);
        }
        let Some(rest) = session.req_header().uri.path().strip_prefix(GATEWAY_PREFIX) else {
            return Ok(false);
        };
        ctx.gateway = true;
        let req = session.req_header();
        if req.method == http::Method::OPTIONS
            && req.headers.contains_key("access-control-request-method")
        {
            Self::respond_preflight(session, ctx).await?;
            return Ok(true);
        }
        match self.lookup(rest) {
            Lookup::Refuse(org_id, code, msg) => {
                ctx.org_id = org_id;
                Self::respond_error(session, ctx, code, msg).await?;
                Ok(true)
            }
            Lookup::Route(org_id, entry, plan_limit) => {
                ctx.org_id = Some(org_id);
                ctx.route_id = Some(entry.id.clone());
                self.gateway_request(session, ctx, entry, plan_limit).await
            }
        }
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if ctx.route.is_some() {
            ctx.body_bytes += body.as_ref().map_or(0, |b| b.len() as u64);
            if ctx.body_bytes > self.settings.max_body_bytes {
                return Error::e_explain(ErrorType::HTTPStatus(413), "request body too large");
            }
        }
        Ok(())
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let Some(entry) = &ctx.route else {
            return Ok(Box::new(HttpPeer::new(
                self.control_plane,
                false,
                String::new(),
            )));
        };
        let (Some(target), Some(addr)) = (&entry.upstream, ctx.upstream_addr) else {
            return Error::e_explain(ErrorType::ConnectNoRoute, "route has no upstream");
        };
        let s = &self.settings;
        let mut peer = HttpPeer::new(addr, target.tls, target.host.clone());
        peer.options.connection_timeout = Some(s.connect_timeout);
        peer.options.total_connection_timeout = Some(s.connect_timeout);
        if entry.route.streaming {
            peer.options.read_timeout = Some(s.stream_idle_timeout);
        } else {
            peer.options.read_timeout = Some(s.total_timeout);
            ctx.deadline = Some(Instant::now() + s.total_timeout);
        }
        peer.options.write_timeout = Some(s.total_timeout.max(s.stream_idle_timeout));
        let verify = !s.insecure_tls_hosts.contains(&target.host);
        peer.options.verify_cert = verify;
        peer.options.verify_hostname = verify;
        Ok(Box::new(peer))
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let client_ip = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip().to_string());
        if let Some(target) = ctx.route.as_ref().and_then(|e| e.upstream.as_ref()) {
            // Headers named by `Connection` are hop-by-hop too.
            let listed: Vec<String> = upstream
                .headers
                .get_all("connection")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect();
            for h in REQUEST_HOP_HEADERS
                .iter()
                .copied()
                .chain(listed.iter().map(String::as_str))
            {
                upstream.remove_header(h);
            }
            let original_host = session
                .req_header()
                .headers
                .get("host")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let pq = target.path_and_query(session.req_header().uri.query());
            let uri = pq
                .parse()
                .map_err(|_| Error::explain(ErrorType::InternalError, "bad upstream path"))?;
            upstream.set_uri(uri);
            upstream.insert_header("host", target.host_header.as_str())?;
            if let Some(h) = original_host {
                upstream.insert_header("x-forwarded-host", h)?;
            }
        }
        if let Some(ip) = client_ip {
            let xff = match upstream
                .headers
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok())
            {
                Some(prev) if !prev.trim().is_empty() => format!("{prev}, {ip}"),
                _ => ip,
            };
            upstream.insert_header("x-forwarded-for", xff)?;
        }
        upstream.insert_header("x-forwarded-proto", "http")?;
        upstream.insert_header("x-request-id", ctx.request_id.as_str())?;
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if ctx.route.is_some() {
            ctx.upstream_status = Some(resp.status.as_u16());
            for h in RESPONSE_HOP_HEADERS {
                resp.remove_header(*h);
            }
        }
        Ok(())
    }

    fn upstream_response_body_filter(
        &self,
        _session: &mut Session,
        _body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<Duration>> {
        if ctx.deadline.is_some_and(|d| Instant::now() > d) {
            return Error::e_explain(ErrorType::ReadTimedout, "upstream total timeout");
        }
        Ok(None)
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
        if ctx.gateway && resp.headers.get("access-control-allow-origin").is_none() {
            add_cors(resp)?;
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
            // The client connection is not reused after a failed proxy attempt: say so.
            session.set_keepalive(None);
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
        if let Some(org_id) = ctx.org_id.take() {
            let elapsed_us = ctx.start.elapsed().as_micros() as u64;
            let paid = ctx.paid.as_ref().map(|p| &p.record);
            self.metrics.record(RequestEvent {
                org_id,
                route_id: ctx.route_id.take().unwrap_or_else(|| Arc::from("")),
                status,
                outcome: ctx.kind,
                challenge_us: (ctx.kind == Outcome::Challenge).then_some(elapsed_us),
                settle_ms: paid.map(|r| r.settle_ms.unwrap_or(0) + r.verify_us / 1000),
                revenue: paid.map_or(0, |r| r.amount.0),
                upstream_status: ctx.upstream_status,
                at: paygate_shared::unix_now(),
            });
        }
        if let Some(slot) = ctx.slot.take() {
            let usage = self.usage.clone();
            tokio::spawn(async move { usage.commit(slot).await });
        }
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

fn add_cors(resp: &mut ResponseHeader) -> Result<()> {
    resp.insert_header("access-control-allow-origin", "*")?;
    resp.insert_header("access-control-expose-headers", CORS_EXPOSE_HEADERS)
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
