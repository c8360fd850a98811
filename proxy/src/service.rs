//! The Pingora side of the proxy: `impl ProxyHttp for Gateway`. `/gateway/*` is decided
//! (`decide.rs`) and answered once (`answer.rs`) or forwarded to the route's upstream, the
//! payment service told of the answer's head and end; every other path is passed to the control
//! plane on its loopback address.

use crate::ctx::Ctx;
use crate::decide::{self, Decision, Stage};
use crate::gateway::Gateway;
use crate::headers::{
    carried, drop_payment_credential, prove_payment, REQUEST_HOP_HEADERS, RESPONSE_HOP_HEADERS,
};
use crate::{answer, traces};
use async_trait::async_trait;
use bytes::Bytes;
use http::header;
use paygate_domain::ids::new_request_id;
use paygate_domain::model::PaymentProtocol;
use paygate_domain::ErrorCode;
use paygate_gateway::metrics::{Outcome, RequestEvent};
use paygate_gateway::payments::reply;
use paygate_gateway::payments::way::{Answered, Ended, CHARGE_HEADER};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::protocols::ALPN;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx {
            request_id: new_request_id(),
            start: Instant::now(),
            stage: Stage::ControlPlane,
            gateway: false,
            outcome: None,
            kind: Outcome::Other,
            org_id: None,
            route_id: None,
        }
    }

    /// Decides, then writes once: an answer of the gateway's own, or the stage the request
    /// goes on in.
    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        if self.draining.load(std::sync::atomic::Ordering::Relaxed) {
            session.set_keepalive(None);
        }
        let client = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        let decided = self
            .decide(session.req_header(), client, &ctx.request_id)
            .await;
        let labels = decided.labels;
        (ctx.gateway, ctx.org_id, ctx.route_id) = (labels.gateway, labels.org_id, labels.route_id);
        match decided.decision {
            Decision::PassThrough => {
                // Keep the (small) body, so a request that meets a pooled connection the control
                // plane has just closed can be sent again (`error_while_proxy`).
                session.as_mut().enable_retry_buffering();
                Ok(false)
            }
            Decision::Forward(f) => {
                (ctx.outcome, ctx.kind) = match &f.payment {
                    Some(p) if p.counts_as_paid() => (Some(p.label()), Outcome::Paid),
                    // A window's call was paid for by the payment that opened the window.
                    Some(p) => (Some(p.label()), Outcome::Other),
                    None => (Some("BENCH_FREE"), Outcome::Other),
                };
                ctx.stage = Stage::Forwarding(f);
                Ok(false)
            }
            Decision::Answer(a) => {
                ctx.stage = Stage::Answered;
                answer::write(session, ctx, a).await?;
                Ok(true)
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
        if let Some(f) = ctx.forwarding() {
            f.body_bytes += body.as_ref().map_or(0, |b| b.len() as u64);
            if f.body_bytes > self.settings.max_body_bytes {
                return Error::e_explain(ErrorType::HTTPStatus(413), "request body too large");
            }
        }
        Ok(())
    }

    async fn upstream_peer(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let Some(f) = ctx.forwarding() else {
            return Ok(Box::new(HttpPeer::new(
                self.control_plane,
                false,
                String::new(),
            )));
        };
        if f.repick() {
            // The last target's connection failed: the next healthy one, if any is left.
            let next = self
                .upstream_address(&f.route, &session.req_header().headers, &f.tried)
                .await;
            let Ok((addr, picked)) = next else {
                return Error::e_explain(ErrorType::ConnectNoRoute, "no upstream target left");
            };
            (f.addr, f.picked) = (addr, picked);
        }
        let Some(target) = f.target() else {
            return Error::e_explain(ErrorType::ConnectNoRoute, "route has no upstream");
        };
        let s = &self.settings;
        let mut peer = HttpPeer::new(f.addr, target.tls, target.host.clone());
        let verify = !s.insecure_tls_hosts.contains(&target.host);
        peer.options.verify_cert = verify;
        peer.options.verify_hostname = verify;
        if s.http2_hosts.contains(&target.host) {
            peer.options.alpn = if target.tls { ALPN::H2H1 } else { ALPN::H2 };
        }
        peer.options.connection_timeout = Some(s.connect_timeout);
        peer.options.total_connection_timeout = Some(s.connect_timeout);
        if f.route.route.streaming {
            peer.options.read_timeout = Some(s.stream_idle_timeout);
        } else {
            peer.options.read_timeout = Some(s.total_timeout);
            f.deadline = Some(Instant::now() + s.total_timeout);
        }
        peer.options.write_timeout = Some(s.total_timeout.max(s.stream_idle_timeout));
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
        let mut forwarded_path = None;
        if let Some(target) = ctx.forwarding().and_then(|f| f.target()) {
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
            for h in carried(&upstream.headers, &REQUEST_HOP_HEADERS) {
                upstream.remove_header(&h);
            }
            drop_payment_credential(upstream);
            for h in &listed {
                upstream.remove_header(h.as_str());
            }
            let original_host = session.req_header().headers.get(header::HOST).cloned();
            let pq = target.path_and_query(session.req_header().uri.query());
            let uri = pq
                .parse()
                .map_err(|_| Error::explain(ErrorType::InternalError, "bad upstream path"))?;
            upstream.set_uri(uri);
            upstream.insert_header("host", target.host_header.as_str())?;
            forwarded_path = Some(pq);
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
        if let Some(pq) = forwarded_path {
            prove_payment(upstream, ctx, &pq)?;
        }
        let tls = session.digest().is_some_and(|d| d.ssl_digest.is_some());
        upstream.insert_header("x-forwarded-proto", if tls { "https" } else { "http" })?;
        upstream.insert_header("x-request-id", ctx.request_id.as_str())?;
        if let Some(f) = ctx.forwarding() {
            // The upstream call's span; the origin is sent its context (`traceparent`).
            f.upstream_span = traces::upstream(&f.trace, upstream);
        }
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(f) = ctx.forwarding() {
            f.end.upstream_status = Some(resp.status.as_u16());
            if f.end.body.is_some() {
                f.end.content_type = resp
                    .headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
            }
            if let (Some(p), Some(b)) = (f.picked, &f.route.balancer) {
                b.succeeded(p);
            }
            for h in carried(&resp.headers, &RESPONSE_HOP_HEADERS) {
                resp.remove_header(&h);
            }
            let stated = resp.remove_header(CHARGE_HEADER);
            let head = Answered::Head {
                status: resp.status.as_u16(),
                stated: stated.as_ref(),
            };
            // The upstream answered: its span ends.
            f.upstream_span = tracing::Span::none();
            let finish = self.payments.finish(&mut f.payment, head);
            match finish.instrument(f.trace.clone()).await {
                Ok(r) => f.receipt = r.or(f.receipt.take()),
                Err(refused) => {
                    // `fail_to_proxy` answers the refusal instead of the origin's answer.
                    f.refused = Some(refused);
                    return Error::e_explain(
                        ErrorType::Custom("payment refused at settlement"),
                        "the charge could not be settled",
                    );
                }
            }
        }
        Ok(())
    }

    /// The origin's trailers: a usage charge stated there is taken off (the caller never sees
    /// it) and kept for the end of the answer (the payment service's finish in `logging`).
    fn upstream_response_trailer_filter(
        &self,
        _session: &mut Session,
        trailers: &mut http::HeaderMap,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(stated) = trailers.remove(CHARGE_HEADER) {
            if let Some(f) = ctx.forwarding() {
                f.end.stated = Some(stated);
            }
        }
        Ok(())
    }

    fn upstream_response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<Duration>> {
        if let (Some(f), Some(chunk)) = (ctx.forwarding(), body.as_ref()) {
            // Kept for a retry under the payment's identifier, while small enough.
            if let Some(buf) = &mut f.end.body {
                if buf.len() + chunk.len() > decide::MAX_KEPT_ANSWER_BYTES {
                    f.end.body = None;
                } else {
                    buf.extend_from_slice(chunk);
                }
            }
        }
        if ctx
            .forwarding()
            .and_then(|f| f.deadline)
            .is_some_and(|d| Instant::now() > d)
        {
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
        if let Some(r) = ctx.receipt() {
            resp.insert_header(r.header, r.value.as_str())?;
            resp.insert_header("x-request-id", ctx.request_id.as_str())?;
        }
        if ctx.gateway && resp.headers.get("access-control-allow-origin").is_none() {
            answer::add_cors(resp)?;
        }
        Ok(())
    }

    /// A connection to a route's target failed: nothing was sent, so the request goes to the
    /// next healthy target (the payment was taken once, before; one receipt). The target
    /// counts the failure towards its ejection.
    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut Ctx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        if let Some(f) = ctx.forwarding() {
            if let (Some(p), Some(b)) = (f.picked, &f.route.balancer) {
                b.failed(p);
                f.tried.push(p.index);
                if f.tried.len() < b.target_count() {
                    // `upstream_peer` picks another (`Forwarding::repick`).
                    e.set_retry(true);
                }
            }
        }
        e
    }

    /// Pingora retries only idempotent methods on a reused connection. A pass-through to the
    /// control plane (in this process, on loopback) that fails on a reused connection before
    /// any answer came back met a connection the control plane had closed while it sat in the
    /// pool, so the request was never handled: it is sent again on a new connection, whatever
    /// its method, as long as its body is still buffered. Forwarding to upstreams keeps
    /// Pingora's rule (a paid request must not reach an origin twice).
    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut Ctx,
        client_reused: bool,
    ) -> Box<Error> {
        let stale = matches!(
            e.etype(),
            ErrorType::ConnectionClosed | ErrorType::WriteError | ErrorType::ReadError
        );
        let mut e = e.more_context(format!("Peer: {peer}"));
        let buffered = !session.as_ref().retry_buffer_truncated();
        if matches!(ctx.stage, Stage::ControlPlane) && stale && client_reused && buffered {
            e.retry.decide_reuse(true);
        } else if !session.req_header().method.is_idempotent() || !buffered {
            e.set_retry(false);
        } else {
            e.retry.decide_reuse(client_reused);
        }
        e
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        let request_id = ctx.request_id.clone();
        let refused = ctx.forwarding().and_then(|f| {
            let r = f.refused.take()?;
            Some(reply::refused(*r, &f.route, &request_id))
        });
        if let Some(a) = refused {
            let status = a.status();
            session.set_keepalive(None);
            if let Err(err) = answer::write(session, ctx, a).await {
                tracing::debug!(error = %err, "could not send the refusal");
            }
            return FailToProxy {
                error_code: status,
                can_reuse_downstream: false,
            };
        }
        let forwarding = matches!(ctx.stage, Stage::Forwarding(_));
        let status = match e.etype() {
            ErrorType::HTTPStatus(code) => *code,
            ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout
                if forwarding =>
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
                    if forwarding && matches!(e.etype(), ErrorType::ConnectNoRoute) {
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
            let a = reply::Answer::Error(code, Cow::Borrowed(msg));
            if let Err(err) = answer::write(session, ctx, a).await {
                tracing::debug!(error = %err, "could not send error response");
            }
        }
        FailToProxy {
            error_code: status,
            can_reuse_downstream: false,
        }
    }

    /// Pingora's last phase, after the answer was written (or failed): the payment's end
    /// step first ([`Gateway::finish_answer`]), then the request's counters and its access line.
    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        let paid = self.finish_answer(e.is_none(), ctx).await;
        let trace_id = ctx.forwarding().and_then(|f| traces::trace_id(&f.trace));
        if let Some(org_id) = ctx.org_id.take() {
            let elapsed_us = ctx.start.elapsed().as_micros() as u64;
            self.metrics.record(RequestEvent {
                org_id,
                route_id: ctx.route_id.take().unwrap_or_else(|| Arc::from("")),
                status,
                outcome: ctx.kind,
                challenge_us: (ctx.kind == Outcome::Challenge).then_some(elapsed_us),
                settle_ms: paid.settle_ms,
                revenue: paid.revenue,
                upstream_status: paid.upstream_status,
                protocol: paid.protocol,
                at: paygate_domain::unix_now(),
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
            trace_id,
        );
    }
}

/// What a forwarded request's payment came to, for the counters.
#[derive(Default)]
struct PaidEnd {
    /// Verification and settlement, in milliseconds.
    settle_ms: Option<u64>,
    upstream_status: Option<u16>,
    /// USDC base units charged.
    revenue: u64,
    /// The protocol the payment came in.
    protocol: Option<PaymentProtocol>,
}

impl Gateway {
    /// The explicit end of a paid answer, once it was written whole (`completed`) or failed:
    /// what the answer commits for its payment (a kept answer, a plan slot, the origin's
    /// status, a usage charge that waited for a streamed answer's trailer), through the payment
    /// service's `finish`. Pingora calls no later hook that may wait than `logging`, so that
    /// phase calls this first, before anything is counted or logged.
    async fn finish_answer(&self, completed: bool, ctx: &mut Ctx) -> PaidEnd {
        let Some(f) = ctx.forwarding() else {
            return PaidEnd::default();
        };
        let settle_ms = f.payment.as_ref().and_then(|p| p.settle_ms());
        let protocol = f.payment.as_ref().map(|p| p.protocol());
        let upstream_status = f.end.upstream_status;
        let end = Answered::End(Ended {
            completed,
            upstream_status,
            body: f.end.body.take(),
            content_type: f.end.content_type.take(),
            stated: f.end.stated.take(),
        });
        let finish = self.payments.finish(&mut f.payment, end);
        if let Ok(Some(r)) = finish.instrument(f.trace.clone()).await {
            f.receipt = Some(r);
        }
        PaidEnd {
            settle_ms,
            upstream_status,
            revenue: f.receipt.as_ref().map_or(0, |r| r.charged),
            protocol,
        }
    }
}
