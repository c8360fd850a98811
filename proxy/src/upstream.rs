//! Where a paid request goes: the route's upstream resolved (a healthy target, checked against
//! the SSRF policy) and, for a payment taken before forwarding, connected to once; and the
//! proxy's side of admission ([`ProxyGate`]), which the payment service's schemes ask.

use crate::limits::Refused;
use crate::Gateway;
use alloy_primitives::Address;
use paygate_config::UpstreamConfig;
use paygate_gateway::balancer::Picked;
use paygate_gateway::payments::schemes::{Gate, Upstream};
use paygate_gateway::payments::Refusal;
use paygate_gateway::route_table::RouteEntry;
use paygate_gateway::target_policy::TargetPolicy;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How upstreams are reached: timeouts, the SSRF policy, TLS exceptions and size limits.
pub struct ProxySettings {
    pub policy: Arc<TargetPolicy>,
    pub connect_timeout: Duration,
    pub total_timeout: Duration,
    pub stream_idle_timeout: Duration,
    pub insecure_tls_hosts: HashSet<String>,
    /// Hosts reached in HTTP/2 (`upstream.http2_hosts`).
    pub http2_hosts: HashSet<String>,
    pub max_body_bytes: u64,
    pub max_header_bytes: usize,
}

impl ProxySettings {
    pub fn from_config(c: &UpstreamConfig, policy: Arc<TargetPolicy>) -> Self {
        Self {
            policy,
            connect_timeout: Duration::from_secs(c.connect_timeout_seconds),
            total_timeout: Duration::from_secs(c.total_timeout_seconds),
            stream_idle_timeout: Duration::from_secs(c.stream_idle_timeout_seconds),
            insecure_tls_hosts: c.insecure_tls_hosts.iter().cloned().collect(),
            http2_hosts: c.http2_hosts.iter().cloned().collect(),
            max_body_bytes: c.max_request_body_bytes,
            max_header_bytes: c.max_request_header_bytes,
        }
    }
}

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

/// The proxy's side of admission ([`Gate`]): its payer rate limit, and the route's upstream.
pub(crate) struct ProxyGate<'a> {
    pub(crate) gateway: &'a Gateway,
    pub(crate) entry: &'a RouteEntry,
    pub(crate) headers: &'a http::HeaderMap,
}

impl Gate for ProxyGate<'_> {
    type Stop = Refused;

    fn payer(&self, payer: &Address) -> Result<(), Refused> {
        self.gateway.limits.check_payer(&payer.0 .0)
    }

    async fn upstream(&self, connect: bool) -> Result<Upstream, Refusal> {
        if connect {
            self.gateway
                .reachable_upstream(self.entry, self.headers)
                .await
        } else {
            self.gateway
                .upstream_address(self.entry, self.headers, &[])
                .await
        }
    }
}
