//! Several upstreams per route (issue 18): which target a request goes to, with
//! `pingora-load-balancing` doing the selection (weighted round robin, or consistent hashing on
//! a header) and the active health checks, and passive ejection on connect failures.
//!
//! Each target is a backend of its own in the load balancer, named by its index (a placeholder
//! address that is never connected to), so that two targets behind one IP address stay two;
//! the real address is resolved and checked against the SSRF policy on every request, exactly
//! as for a route with one target, and by each health check.

use crate::target_policy::TargetPolicy;
use crate::upstream_target::UpstreamTarget;
use async_trait::async_trait;
use paygate_domain::model::{Balancing, HealthCheck as HealthSpec, RouteTarget};
use pingora_core::protocols::l4::socket::SocketAddr as PingoraAddr;
use pingora_load_balancing::discovery::Static;
use pingora_load_balancing::health_check::{HealthCheck, HttpHealthCheck};
use pingora_load_balancing::selection::{Consistent, RoundRobin};
use pingora_load_balancing::{Backend, Backends, LoadBalancer};
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Connect failures in a row that eject a target.
const EJECT_AFTER_FAILURES: u32 = 3;
/// How long an ejected target is left out before it is tried again.
const EJECTED_FOR: Duration = Duration::from_secs(30);

/// The index of a target, in its backend's extensions.
#[derive(Clone, Copy)]
struct TargetIndex(usize);

fn index_of(b: &Backend) -> usize {
    b.ext.get::<TargetIndex>().map_or(0, |i| i.0)
}

enum Selector {
    RoundRobin(LoadBalancer<RoundRobin>),
    Hash(LoadBalancer<Consistent>, http::HeaderName),
}

/// Passive state of one target.
#[derive(Default)]
struct Passive {
    failures: AtomicU32,
    /// Milliseconds since the balancer's start until which the target is ejected; 0: it is not.
    ejected_until_ms: AtomicU64,
}

/// A target picked for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Picked {
    pub index: usize,
}

/// The health of one target as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetHealth {
    pub url: String,
    /// Passing its health checks (always true without active checks) and not ejected.
    pub healthy: bool,
    /// Ejected after connect failures, until its ejection ends.
    pub ejected: bool,
}

/// The targets of one route and how requests are spread over them.
pub struct Balancer {
    selector: Selector,
    backends: Vec<Backend>,
    targets: Vec<UpstreamTarget>,
    specs: Vec<RouteTarget>,
    passive: Vec<Passive>,
    started: Instant,
}

impl std::fmt::Debug for Balancer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Balancer")
            .field("targets", &self.specs)
            .finish()
    }
}

impl Balancer {
    /// A balancer over `specs` (already validated: each URL parses). Active health checks,
    /// when `health` is given, run on the current tokio runtime for as long as the balancer
    /// lives.
    pub fn start(
        specs: &[RouteTarget],
        balancing: &Balancing,
        health: Option<&HealthSpec>,
        policy: Arc<TargetPolicy>,
        insecure_tls_hosts: &[String],
    ) -> Option<Arc<Self>> {
        let targets: Vec<UpstreamTarget> = specs
            .iter()
            .map(|t| UpstreamTarget::parse(&t.url))
            .collect::<Option<_>>()?;
        let backends: Vec<Backend> = specs
            .iter()
            .enumerate()
            .map(|(i, t)| {
                // A placeholder address per target: its identity in the load balancer.
                let port = u16::try_from(i + 1).unwrap_or(u16::MAX);
                let mut b = Backend {
                    addr: PingoraAddr::Inet(SocketAddr::V4(SocketAddrV4::new(
                        Ipv4Addr::UNSPECIFIED,
                        port,
                    ))),
                    weight: t.weight.max(1) as usize,
                    ext: Default::default(),
                };
                b.ext.insert(TargetIndex(i));
                b
            })
            .collect();
        let mut view = Backends::new(Static::new(
            backends.iter().cloned().collect::<BTreeSet<_>>(),
        ));
        if let Some(h) = health {
            view.set_health_check(Box::new(Probe::new(
                &targets,
                h,
                policy,
                insecure_tls_hosts,
            )));
        }
        let selector = match balancing {
            Balancing::RoundRobin => Selector::RoundRobin(LoadBalancer::from_backends(view)),
            Balancing::Hash { header } => Selector::Hash(
                LoadBalancer::from_backends(view),
                http::HeaderName::from_bytes(header.as_bytes()).ok()?,
            ),
        };
        let balancer = Arc::new(Self {
            selector,
            backends,
            passive: specs.iter().map(|_| Passive::default()).collect(),
            targets,
            specs: specs.to_vec(),
            started: Instant::now(),
        });
        balancer.update_now();
        if let Some(h) = health {
            let every = Duration::from_secs(u64::from(h.interval_seconds.max(1)));
            tokio::spawn(check_while_alive(Arc::downgrade(&balancer), every));
        }
        Some(balancer)
    }

    /// Publishes the static membership (no I/O: the discovery is static).
    fn update_now(&self) {
        use futures_util::FutureExt;
        let done = match &self.selector {
            Selector::RoundRobin(lb) => lb.update().now_or_never(),
            Selector::Hash(lb, _) => lb.update().now_or_never(),
        };
        debug_assert!(matches!(done, Some(Ok(()))));
    }

    fn backends_view(&self) -> &Backends {
        match &self.selector {
            Selector::RoundRobin(lb) => lb.backends(),
            Selector::Hash(lb, _) => lb.backends(),
        }
    }

    pub fn target(&self, p: Picked) -> &UpstreamTarget {
        &self.targets[p.index]
    }

    pub fn target_count(&self) -> usize {
        self.targets.len()
    }

    /// A healthy target for a request with `headers`, other than those in `tried`.
    pub fn pick(&self, headers: &http::HeaderMap, tried: &[usize]) -> Option<Picked> {
        self.readmit_due();
        let accept = |b: &Backend, healthy: bool| healthy && !tried.contains(&index_of(b));
        let iterations = 4 * self.targets.len() + 4;
        let picked = match &self.selector {
            Selector::RoundRobin(lb) => lb.select_with(b"", iterations, accept),
            Selector::Hash(lb, header) => {
                let key = headers.get(header).map_or(&b""[..], |v| v.as_bytes());
                lb.select_with(key, iterations, accept)
            }
        }?;
        Some(Picked {
            index: index_of(&picked),
        })
    }

    /// A connection to the target failed: after a few in a row it is ejected for a while.
    pub fn failed(&self, p: Picked) {
        let state = &self.passive[p.index];
        if state.failures.fetch_add(1, Ordering::Relaxed) + 1 < EJECT_AFTER_FAILURES {
            return;
        }
        let until = self.now_ms() + EJECTED_FOR.as_millis() as u64;
        if state.ejected_until_ms.swap(until, Ordering::Relaxed) == 0 {
            tracing::warn!(target = %self.specs[p.index].url, "upstream target ejected after connect failures");
            self.backends_view()
                .set_enable(&self.backends[p.index], false);
        }
    }

    /// The target answered: its failure count starts again.
    pub fn succeeded(&self, p: Picked) {
        self.passive[p.index].failures.store(0, Ordering::Relaxed);
    }

    /// Takes ejected targets back once their ejection is over.
    fn readmit_due(&self) {
        let now = self.now_ms();
        for (i, state) in self.passive.iter().enumerate() {
            let until = state.ejected_until_ms.load(Ordering::Relaxed);
            if until != 0
                && until <= now
                && state
                    .ejected_until_ms
                    .compare_exchange(until, 0, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                state.failures.store(0, Ordering::Relaxed);
                self.backends_view().set_enable(&self.backends[i], true);
            }
        }
    }

    fn now_ms(&self) -> u64 {
        (self.started.elapsed().as_millis() as u64).max(1)
    }

    /// Every target's health as this node sees it.
    pub fn health(&self) -> Vec<TargetHealth> {
        self.readmit_due();
        let view = self.backends_view();
        self.specs
            .iter()
            .zip(&self.backends)
            .zip(&self.passive)
            .map(|((spec, backend), passive)| TargetHealth {
                url: spec.url.clone(),
                healthy: view.ready(backend),
                ejected: passive.ejected_until_ms.load(Ordering::Relaxed) != 0,
            })
            .collect()
    }
}

/// Runs the health checks every `every` until the balancer is dropped (its route changed or
/// was deleted).
async fn check_while_alive(balancer: Weak<Balancer>, every: Duration) {
    loop {
        {
            let Some(b) = balancer.upgrade() else { return };
            b.backends_view().run_health_check(false).await;
        }
        tokio::time::sleep(every).await;
    }
}

/// The active health check: `GET path` on each target, at its address resolved and checked
/// against the SSRF policy now, through pingora's own HTTP health check.
struct Probe {
    targets: Vec<UpstreamTarget>,
    checks: Vec<HttpHealthCheck>,
    policy: Arc<TargetPolicy>,
    healthy_threshold: usize,
    unhealthy_threshold: usize,
}

impl Probe {
    fn new(
        targets: &[UpstreamTarget],
        spec: &HealthSpec,
        policy: Arc<TargetPolicy>,
        insecure_tls_hosts: &[String],
    ) -> Self {
        let checks = targets
            .iter()
            .map(|t| {
                let mut c = HttpHealthCheck::new(&t.host, t.tls);
                if let Ok(mut req) =
                    pingora_http::RequestHeader::build("GET", spec.path.as_bytes(), None)
                {
                    let _ = req.insert_header("host", t.host_header.as_str());
                    let _ = req.insert_header("user-agent", "paygate-health-check");
                    c.req = req;
                }
                let verify = !insecure_tls_hosts.contains(&t.host);
                c.peer_template.options.verify_cert = verify;
                c.peer_template.options.verify_hostname = verify;
                c.peer_template.options.connection_timeout = Some(Duration::from_secs(2));
                c.peer_template.options.read_timeout = Some(Duration::from_secs(2));
                c
            })
            .collect();
        Self {
            targets: targets.to_vec(),
            checks,
            policy,
            healthy_threshold: spec.healthy_threshold.max(1) as usize,
            unhealthy_threshold: spec.unhealthy_threshold.max(1) as usize,
        }
    }
}

#[async_trait]
impl HealthCheck for Probe {
    async fn check(&self, target: &Backend) -> pingora_error::Result<()> {
        let i = index_of(target);
        let t = &self.targets[i];
        let addr = self.policy.resolve(&t.host, t.port).await.map_err(|e| {
            pingora_error::Error::explain(pingora_error::ErrorType::ConnectNoRoute, e)
        })?;
        let real = Backend {
            addr: PingoraAddr::Inet(addr),
            weight: 1,
            ext: Default::default(),
        };
        self.checks[i].check(&real).await
    }

    async fn health_status_change(&self, target: &Backend, healthy: bool) {
        let t = &self.targets[index_of(target)];
        if healthy {
            tracing::info!(host = %t.host_header, path = %t.path, "upstream target healthy again");
        } else {
            tracing::warn!(host = %t.host_header, path = %t.path, "upstream target failing its health checks");
        }
    }

    fn health_threshold(&self, success: bool) -> usize {
        if success {
            self.healthy_threshold
        } else {
            self.unhealthy_threshold
        }
    }
}
