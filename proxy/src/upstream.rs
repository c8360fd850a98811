//! Where a paid request goes: the route's upstream resolved (a healthy target, checked against
//! the SSRF policy) and, for a payment taken before forwarding, connected to once; and the
//! proxy's side of admission ([`ProxyGate`]), which the payment service's schemes ask.

use crate::gateway::Gateway;
use crate::limits::Refused;
use alloy_primitives::Address;
use paygate_domain::ErrorCode;
use paygate_gateway::balancer::Picked;
use paygate_gateway::payments::way::{Gate, Upstream};
use paygate_gateway::payments::{Refusal, Stop};
use paygate_gateway::route_table::RouteEntry;
use pingora::http::RequestHeader;
use std::net::SocketAddr;

impl Gateway {
    /// The upstream a paid request goes to, connected to once before the payment is taken, so
    /// that an origin refusing connections is a `503` with nothing charged. A target that does
    /// not accept is marked failed and the next healthy one tried. What can still fail after
    /// settlement (the origin going away between this check and the forwarded request, or in
    /// the middle of its answer) is said in RELIABILITY.md.
    pub(crate) async fn reachable_upstream(
        &self,
        entry: &RouteEntry,
        headers: &http::HeaderMap,
    ) -> Result<(SocketAddr, Option<Picked>), Refusal> {
        let mut tried = Vec::new();
        loop {
            let (addr, picked) = self.upstream_address(entry, headers, &tried).await?;
            let connect = tokio::net::TcpStream::connect(addr);
            let error = match tokio::time::timeout(self.settings.connect_timeout, connect).await {
                Ok(Ok(_)) => return Ok((addr, picked)),
                Ok(Err(e)) => e.to_string(),
                Err(_) => "connection timed out".to_string(),
            };
            tracing::warn!(route = %entry.id, %addr, %error, "upstream refused before payment");
            match (picked, &entry.balancer) {
                (Some(p), Some(b)) => {
                    b.failed(p);
                    tried.push(p.index);
                }
                _ => {
                    return Err(Refusal::UpstreamUnavailable(format!(
                        "the upstream does not accept connections ({error}); nothing was charged"
                    )))
                }
            }
        }
    }

    /// Resolves the route's upstream (a healthy one of its targets, other than `tried`) and
    /// checks it against the SSRF policy, before any payment is taken (and so again on every
    /// request: DNS answers may change).
    pub(crate) async fn upstream_address(
        &self,
        entry: &RouteEntry,
        headers: &http::HeaderMap,
        tried: &[usize],
    ) -> Result<(SocketAddr, Option<Picked>), Refusal> {
        let refuse = |msg: String| {
            tracing::warn!(route = %entry.id, error = %msg, "upstream refused before payment");
            Refusal::UpstreamUnavailable(msg)
        };
        let policy = &self.settings.policy;
        let Some(balancer) = &entry.balancer else {
            let target = entry
                .upstream
                .as_ref()
                .ok_or_else(|| refuse("route has no upstream".into()))?;
            let addr = policy
                .resolve(&target.host, target.port)
                .await
                .map_err(refuse)?;
            return Ok((addr, None));
        };
        let mut skipped = tried.to_vec();
        let mut last = "no healthy upstream target".to_string();
        while let Some(p) = balancer.pick(headers, &skipped) {
            let t = balancer.target(p);
            match policy.resolve(&t.host, t.port).await {
                Ok(addr) => return Ok((addr, Some(p))),
                Err(e) => {
                    last = e;
                    skipped.push(p.index);
                }
            }
        }
        Err(refuse(last))
    }
}

/// The proxy's side of admission ([`Gate`]): the route's rate limit and the body's size for a
/// paying request, the payer's rate limit, and the route's upstream.
pub(crate) struct ProxyGate<'a> {
    pub(crate) gateway: &'a Gateway,
    pub(crate) entry: &'a RouteEntry,
    pub(crate) req: &'a RequestHeader,
}

#[async_trait::async_trait]
impl Gate for ProxyGate<'_> {
    fn paying(&self) -> Result<(), Refusal> {
        let limits = &self.gateway.limits;
        limits.check_route(&self.entry.id).map_err(limited)?;
        // A declared body larger than the gateway forwards is refused before any payment.
        let declared = self
            .req
            .headers
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.gateway.settings.max_body_bytes) {
            return Err(Refusal::Stopped(Stop {
                code: ErrorCode::PayloadTooLarge,
                message: "request body is larger than this gateway forwards".into(),
                retry_after: None,
            }));
        }
        Ok(())
    }

    fn payer(&self, payer: &Address) -> Result<(), Refusal> {
        self.gateway
            .limits
            .check_payer(&payer.0 .0)
            .map_err(limited)
    }

    async fn upstream(&self, connect: bool) -> Result<Upstream, Refusal> {
        let headers = &self.req.headers;
        if connect {
            self.gateway.reachable_upstream(self.entry, headers).await
        } else {
            self.gateway
                .upstream_address(self.entry, headers, &[])
                .await
        }
    }
}

/// A rate limit's stop, as the payment side carries it.
pub(crate) fn limited(r: Refused) -> Refusal {
    Refusal::Stopped(r.stop())
}
