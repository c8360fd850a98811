//! One active route as the proxy sees it: the stored route, its parsed upstream (or balancer)
//! and its rendered challenge. Built by the route table; read by the proxy and the payment
//! service (which import this, never the table).

use crate::balancer::Balancer;
use crate::upstream_target::UpstreamTarget;
use paygate_domain::model::Route;
use paygate_x402::{Challenge, PaymentRequirements};
use std::sync::Arc;

/// One active route as the proxy sees it.
#[derive(Debug)]
pub struct RouteEntry {
    pub route: Route,
    /// The route id, shared cheaply with per-request records (metrics).
    pub id: Arc<str>,
    /// Parsed `targetUrl` (the first target); `None` for the sandbox route.
    pub upstream: Option<UpstreamTarget>,
    /// Several targets or health checks: the target is picked per request.
    pub balancer: Option<Arc<Balancer>>,
    /// The requirements and their rendered challenge; `None` when the org has no receiver wallet.
    pub payment: Option<(PaymentRequirements, Challenge)>,
    /// The sandbox route: always answers `402`, never reaches an upstream.
    pub sandbox: bool,
    /// What a way of paying renders once per route change and reuses on every request (MPP's
    /// charge: its request and the challenge id's keyed hash); a new entry starts empty.
    pub rendered: std::sync::OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
}
