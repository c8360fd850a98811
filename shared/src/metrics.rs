//! Request metrics, recorded off the hot path's critical section: a request hands one small
//! [`RequestEvent`] to an unbounded channel (lock-free) when it ends; a single aggregator task
//! owns every counter. It keeps per-organisation one-minute buckets that it merges into the store
//! every `flush_interval_seconds` (so `GET /api/gateway/metrics` windows survive restarts), the
//! Prometheus families behind `GET /metrics`, and the facilitator's last health probe.

use crate::model::MetricBucket;
use crate::store::Store;
use arc_swap::ArcSwap;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// How a gateway request ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `402` with a challenge because no payment came.
    Challenge,
    /// Any other `402` (payment rejected, replayed, plan limit).
    Rejected,
    /// Settled and proxied.
    Paid,
    /// Any other answer (404, 403, 400, ...).
    Other,
}

impl Outcome {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Challenge => "challenge",
            Self::Rejected => "rejected",
            Self::Paid => "paid",
            Self::Other => "other",
        }
    }
}

/// One finished gateway request of a known organisation.
#[derive(Debug, Clone)]
pub struct RequestEvent {
    pub org_id: Arc<str>,
    /// Route id, or `""` when no route matched.
    pub route_id: Arc<str>,
    pub status: u16,
    pub outcome: Outcome,
    /// Time to answer the challenge (unpaid requests).
    pub challenge_us: Option<u64>,
    /// Verification + settlement time (paid requests).
    pub settle_ms: Option<u64>,
    /// USDC base units received (settled payments).
    pub revenue: u64,
    /// Status the upstream answered, if it was reached.
    pub upstream_status: Option<u16>,
    /// Unix seconds when the request ended.
    pub at: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    org: String,
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    org: String,
    route: String,
    outcome: String,
    status_class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    org: String,
    route: String,
    class: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        5.0, 10.0, 30.0,
    ])
}

struct Prom {
    registry: Registry,
    requests: Family<OutcomeLabels, Counter>,
    challenge_seconds: Family<RouteLabels, Histogram, fn() -> Histogram>,
    settle_seconds: Family<RouteLabels, Histogram, fn() -> Histogram>,
    revenue: Family<RouteLabels, Counter>,
    upstream: Family<UpstreamLabels, Counter>,
    facilitator_up: Gauge,
    facilitator_latency_ms: Gauge,
}

impl Prom {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("paygate");
        let requests = Family::<OutcomeLabels, Counter>::default();
        let challenge_seconds =
            Family::<RouteLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            );
        let settle_seconds =
            Family::<RouteLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            );
        let revenue = Family::<RouteLabels, Counter>::default();
        let upstream = Family::<UpstreamLabels, Counter>::default();
        let facilitator_up = Gauge::default();
        let facilitator_latency_ms = Gauge::default();
        registry.register(
            "gateway_requests",
            "Gateway requests by route, outcome and status class",
            requests.clone(),
        );
        registry.register(
            "challenge_latency_seconds",
            "Time to answer an unpaid request with its 402 challenge",
            challenge_seconds.clone(),
        );
        registry.register(
            "settle_latency_seconds",
            "Verification plus settlement time of paid requests",
            settle_seconds.clone(),
        );
        registry.register(
            "revenue_base_units",
            "USDC base units settled to the organisation",
            revenue.clone(),
        );
        registry.register(
            "upstream_responses",
            "Upstream answers by status class",
            upstream.clone(),
        );
        registry.register(
            "facilitator_up",
            "Facilitator health: 2 up, 1 degraded, 0 down",
            facilitator_up.clone(),
        );
        registry.register(
            "facilitator_probe_latency_ms",
            "Round trip of the last facilitator probe",
            facilitator_latency_ms.clone(),
        );
        Self {
            registry,
            requests,
            challenge_seconds,
            settle_seconds,
            revenue,
            upstream,
            facilitator_up,
            facilitator_latency_ms,
        }
    }

    fn record(&self, e: &RequestEvent) {
        let route = RouteLabels {
            org: e.org_id.to_string(),
            route: e.route_id.to_string(),
        };
        self.requests
            .get_or_create(&OutcomeLabels {
                org: route.org.clone(),
                route: route.route.clone(),
                outcome: e.outcome.as_str().into(),
                status_class: format!("{}xx", e.status / 100),
            })
            .inc();
        if let Some(us) = e.challenge_us {
            self.challenge_seconds
                .get_or_create(&route)
                .observe(us as f64 / 1e6);
        }
        if let Some(ms) = e.settle_ms {
            self.settle_seconds
                .get_or_create(&route)
                .observe(ms as f64 / 1e3);
        }
        if e.revenue > 0 {
            self.revenue.get_or_create(&route).inc_by(e.revenue);
        }
        if let Some(s) = e.upstream_status {
            self.upstream
                .get_or_create(&UpstreamLabels {
                    org: route.org,
                    route: route.route,
                    class: format!("{}xx", s / 100),
                })
                .inc();
        }
    }
}

/// Facilitator health as last probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FacilitatorHealth {
    /// `up`, `degraded` or `down`.
    pub status: &'static str,
    pub latency_ms: u64,
    /// RFC 3339 time of the probe.
    pub checked_at: String,
    pub url: String,
}

/// The metrics hub shared by the proxy (records) and the control plane (reads).
pub struct Metrics {
    tx: mpsc::UnboundedSender<RequestEvent>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<RequestEvent>>>,
    prom: Prom,
    health: ArcSwap<FacilitatorHealth>,
}

fn bucket_of(e: &RequestEvent) -> MetricBucket {
    MetricBucket {
        total: 1,
        unpaid402: u64::from(e.status == 402),
        paid: u64::from(e.outcome == Outcome::Paid && e.status < 500),
        errors: u64::from(e.status >= 500),
        challenge_us_sum: e.challenge_us.unwrap_or(0),
        challenge_count: u64::from(e.challenge_us.is_some()),
        settle_ms_sum: e.settle_ms.unwrap_or(0),
        settle_count: u64::from(e.settle_ms.is_some()),
    }
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        let (tx, rx) = mpsc::unbounded_channel();
        Arc::new(Self {
            tx,
            rx: Mutex::new(Some(rx)),
            prom: Prom::new(),
            health: ArcSwap::from_pointee(FacilitatorHealth {
                status: "down",
                latency_ms: 0,
                checked_at: crate::now_rfc3339(),
                url: String::new(),
            }),
        })
    }

    /// Hands a finished request to the aggregator. Never blocks.
    pub fn record(&self, event: RequestEvent) {
        let _ = self.tx.send(event);
    }

    /// Runs the aggregator until the channel closes: counts into Prometheus and per-minute
    /// buckets, merging buckets into the store every `flush_every` (and on exit).
    pub async fn run_aggregator(self: Arc<Self>, store: Arc<dyn Store>, flush_every: Duration) {
        let Some(mut rx) = self.rx.lock().ok().and_then(|mut r| r.take()) else {
            return;
        };
        let mut pending: HashMap<(Arc<str>, u64), MetricBucket> = HashMap::new();
        let mut tick = tokio::time::interval(flush_every);
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Some(e) => {
                        self.prom.record(&e);
                        pending
                            .entry((e.org_id.clone(), e.at / 60))
                            .or_default()
                            .merge(&bucket_of(&e));
                    }
                    None => break,
                },
                _ = tick.tick() => Self::flush(store.as_ref(), &mut pending).await,
            }
        }
        Self::flush(store.as_ref(), &mut pending).await;
    }

    async fn flush(store: &dyn Store, pending: &mut HashMap<(Arc<str>, u64), MetricBucket>) {
        for ((org, minute), b) in pending.drain() {
            if let Err(e) = store.merge_metrics(&org, minute, &b).await {
                tracing::warn!(error = %e, "could not store metrics");
            }
        }
    }

    pub fn set_health(&self, h: FacilitatorHealth) {
        let up = match h.status {
            "up" => 2,
            "degraded" => 1,
            _ => 0,
        };
        self.prom.facilitator_up.set(up);
        self.prom
            .facilitator_latency_ms
            .set(i64::try_from(h.latency_ms).unwrap_or(i64::MAX));
        self.health.store(Arc::new(h));
    }

    pub fn health(&self) -> Arc<FacilitatorHealth> {
        self.health.load_full()
    }

    /// The Prometheus text exposition of every family.
    pub fn prometheus_text(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.prom.registry).is_err() {
            out.clear();
        }
        out
    }
}
