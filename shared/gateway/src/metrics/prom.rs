//! The Prometheus families `/metrics` exposes, registered once, and their label sets.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RouteLabels {
    pub(super) org: String,
    pub(super) route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct OutcomeLabels {
    pub(super) org: String,
    pub(super) route: String,
    pub(super) outcome: String,
    pub(super) status_class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ProtocolLabels {
    pub(super) org: String,
    pub(super) route: String,
    pub(super) protocol: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TargetLabels {
    pub(super) org: String,
    pub(super) route: String,
    pub(super) target: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ChannelLabels {
    pub(super) org: String,
    pub(super) event: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct UpstreamLabels {
    pub(super) org: String,
    pub(super) route: String,
    pub(super) class: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        5.0, 10.0, 30.0,
    ])
}

pub(super) struct Prom {
    pub(super) registry: Registry,
    pub(super) requests: Family<OutcomeLabels, Counter>,
    pub(super) challenge_seconds: Family<RouteLabels, Histogram, fn() -> Histogram>,
    pub(super) settle_seconds: Family<RouteLabels, Histogram, fn() -> Histogram>,
    pub(super) revenue: Family<RouteLabels, Counter>,
    pub(super) paid: Family<ProtocolLabels, Counter>,
    pub(super) refunded: Family<RouteLabels, Counter>,
    pub(super) upstream: Family<UpstreamLabels, Counter>,
    pub(super) target_healthy: Family<TargetLabels, Gauge>,
    pub(super) facilitator_up: Gauge,
    pub(super) facilitator_latency_ms: Gauge,
    pub(super) channel_events: Family<ChannelLabels, Counter>,
    pub(super) channel_base_units: Family<ChannelLabels, Counter>,
}

impl Prom {
    pub(super) fn new() -> Self {
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
        let refunded = Family::<RouteLabels, Counter>::default();
        let paid = Family::<ProtocolLabels, Counter>::default();
        let upstream = Family::<UpstreamLabels, Counter>::default();
        let target_healthy = Family::<TargetLabels, Gauge>::default();
        let facilitator_up = Gauge::default();
        let facilitator_latency_ms = Gauge::default();
        let channel_events = Family::<ChannelLabels, Counter>::default();
        let channel_base_units = Family::<ChannelLabels, Counter>::default();
        registry.register(
            "channel_events",
            "Payment channel events: voucher (a charge committed), deposit, claimed (a channel \
             claimed on chain), refund, withdrawal (a payer asked for its deposit back)",
            channel_events.clone(),
        );
        registry.register(
            "channel_base_units",
            "USDC base units of payment channels by event: voucher (charged), deposit, claimed, \
             refund",
            channel_base_units.clone(),
        );
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
            "USDC base units settled to the organisation (before refunds)",
            revenue.clone(),
        );
        registry.register(
            "paid_requests",
            "Paid requests served, by the payment protocol they came in (x402, mpp)",
            paid.clone(),
        );
        registry.register(
            "refunded_base_units",
            "USDC base units the organisation refunded to payers (net revenue: revenue minus this)",
            refunded.clone(),
        );
        registry.register(
            "upstream_responses",
            "Upstream answers by status class",
            upstream.clone(),
        );
        registry.register(
            "upstream_target_healthy",
            "Targets of routes with several upstreams or health checks: 1 healthy, 0 not (this node)",
            target_healthy.clone(),
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
            paid,
            refunded,
            upstream,
            target_healthy,
            facilitator_up,
            facilitator_latency_ms,
            channel_events,
            channel_base_units,
        }
    }
}
