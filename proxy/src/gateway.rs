//! The proxy service's parts: the route table it reads, the payment service that takes
//! payments, the metrics hub, the rate limits, where the control plane listens, and how
//! upstreams are reached ([`ProxySettings`]). Its Pingora side is `service.rs`.

use crate::limits::Limits;
use paygate_config::UpstreamConfig;
use paygate_gateway::metrics::Metrics;
use paygate_gateway::payments::way::Payments;
use paygate_gateway::route_table::RouteTable;
use paygate_gateway::target_policy::TargetPolicy;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The proxy service: the route table it reads, the payment service that takes payments, the
/// metrics hub, and where the control plane listens.
pub struct Gateway {
    pub(crate) table: Arc<RouteTable>,
    pub(crate) control_plane: SocketAddr,
    pub(crate) payments: Arc<Payments>,
    pub(crate) settings: ProxySettings,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) limits: Arc<Limits>,
    pub(crate) draining: Arc<std::sync::atomic::AtomicBool>,
}

/// What the gateway is built from.
pub struct GatewayParts {
    pub table: Arc<RouteTable>,
    pub control_plane: SocketAddr,
    pub payments: Arc<Payments>,
    pub settings: ProxySettings,
    pub metrics: Arc<Metrics>,
    pub limits: Arc<Limits>,
    /// Set once this process is handing over (upgrade) or shutting down: every answer then
    /// closes its connection, so clients open new ones instead of reusing one that is about to
    /// be closed under a request.
    pub draining: Arc<std::sync::atomic::AtomicBool>,
}

impl Gateway {
    pub fn new(p: GatewayParts) -> Self {
        Self {
            table: p.table,
            control_plane: p.control_plane,
            payments: p.payments,
            settings: p.settings,
            metrics: p.metrics,
            limits: p.limits,
            draining: p.draining,
        }
    }
}

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
