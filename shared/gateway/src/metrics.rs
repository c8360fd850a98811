//! Request metrics, recorded off the hot path's critical section: a request hands one small
//! [`RequestEvent`] to an unbounded channel (lock-free) when it ends; a single aggregator task
//! owns every counter. It keeps per-organisation one-minute buckets that it merges into the store
//! every `flush_interval_seconds` (so `GET /api/gateway/metrics` windows survive restarts), the
//! Prometheus families behind `GET /metrics`, and the facilitator's last health probe.

use crate::unflushed::{Counts, Unflushed};
use crate::FastMap;
use arc_swap::ArcSwap;
use paygate_domain::model::{MetricBucket, PaymentProtocol};
use paygate_domain::rollup::{RollupBucket, RollupRow, Tier};
use paygate_domain::StoreResult;
use paygate_store::Store;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

mod prom;
use prom::{
    ChannelLabels, OutcomeLabels, Prom, ProtocolLabels, RouteLabels, TargetLabels, UpstreamLabels,
};

/// How a gateway request ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// The protocol a paid request's payment came in (none when it was not paid).
    pub protocol: Option<PaymentProtocol>,
    /// Unix seconds when the request ended.
    pub at: u64,
}

/// A refund to a payer of what an organisation's route received: counted against its revenue
/// in the period it is made.
#[derive(Debug, Clone)]
pub struct RefundEvent {
    pub org_id: Arc<str>,
    pub route_id: Arc<str>,
    /// USDC base units returned.
    pub amount: u64,
    /// Unix seconds when it was recorded.
    pub at: u64,
}

/// What the aggregator counts.
enum Counted {
    Request(RequestEvent),
    Refund(RefundEvent),
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
    /// Each network's facilitators, when a network lists several (failover).
    pub members: Vec<paygate_x402::facilitator::failover::MemberReport>,
}

/// The metrics hub shared by the proxy (records) and the control plane (reads).
pub struct Metrics {
    tx: mpsc::UnboundedSender<Counted>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<Counted>>>,
    prom: Prom,
    health: ArcSwap<FacilitatorHealth>,
    unflushed: Unflushed,
    /// Asks the aggregator to count what is queued, store everything and return.
    stop: tokio::sync::Notify,
    /// The live nodes this node shares the rate limits with, itself included (1 on one node).
    limit_nodes: std::sync::atomic::AtomicUsize,
}

/// Whether the event is a paid request that was served (counted in `paid`).
fn paid(e: &RequestEvent) -> bool {
    e.outcome == Outcome::Paid && e.status < 500
}

fn bucket_of(e: &RequestEvent) -> MetricBucket {
    MetricBucket {
        total: 1,
        unpaid402: u64::from(e.status == 402),
        paid: u64::from(paid(e)),
        paid_mpp: u64::from(paid(e) && e.protocol == Some(PaymentProtocol::Mpp)),
        errors: u64::from(e.status >= 500),
        challenge_us_sum: e.challenge_us.unwrap_or(0),
        challenge_count: u64::from(e.challenge_us.is_some()),
        settle_ms_sum: e.settle_ms.unwrap_or(0),
        settle_count: u64::from(e.settle_ms.is_some()),
        revenue: e.revenue,
        refunded: 0,
    }
}

/// The event's share of its route's hour (from its minute bucket, which classified it).
fn rollup_of(m: &MetricBucket, e: &RequestEvent) -> RollupBucket {
    let mut b = RollupBucket {
        requests: m.total,
        paid: m.paid,
        errors: m.errors,
        revenue: m.revenue,
        ..Default::default()
    };
    if let Some(ms) = e.settle_ms {
        b.observe_settle(ms);
    }
    b
}

/// How long a finished request may wait in the channel before it is counted.
pub const DRAIN_EVERY: Duration = Duration::from_millis(50);

/// One drained batch of events, folded by Prometheus series.
#[derive(Default)]
struct Batch {
    requests: FastMap<(Arc<str>, Arc<str>, Outcome, u16), u64>,
    challenge: FastMap<(Arc<str>, Arc<str>), Vec<u64>>,
    settle: FastMap<(Arc<str>, Arc<str>), Vec<u64>>,
    revenue: FastMap<(Arc<str>, Arc<str>), u64>,
    paid: FastMap<(Arc<str>, Arc<str>, PaymentProtocol), u64>,
    refunded: FastMap<(Arc<str>, Arc<str>), u64>,
    upstream: FastMap<(Arc<str>, Arc<str>, u16), u64>,
}

impl Batch {
    /// Takes every queued event; `false` once the channel is closed and empty.
    fn drain(&mut self, rx: &mut mpsc::UnboundedReceiver<Counted>, counts: &mut Counts) -> bool {
        loop {
            match rx.try_recv() {
                Ok(Counted::Refund(r)) => self.refund(r, counts),
                Ok(Counted::Request(e)) => {
                    let minute = bucket_of(&e);
                    counts
                        .hours
                        .entry((
                            e.org_id.clone(),
                            e.route_id.clone(),
                            Tier::Hour.period_of(e.at),
                        ))
                        .or_default()
                        .merge(&rollup_of(&minute, &e));
                    counts
                        .minutes
                        .entry((e.org_id.clone(), e.at / 60))
                        .or_default()
                        .merge(&minute);
                    let series = (e.org_id.clone(), e.route_id.clone());
                    if let Some(p) = e.protocol.filter(|_| paid(&e)) {
                        *self
                            .paid
                            .entry((series.0.clone(), series.1.clone(), p))
                            .or_default() += 1;
                    }
                    *self
                        .requests
                        .entry((e.org_id, e.route_id, e.outcome, e.status / 100))
                        .or_default() += 1;
                    if let Some(us) = e.challenge_us {
                        self.challenge.entry(series.clone()).or_default().push(us);
                    }
                    if let Some(ms) = e.settle_ms {
                        self.settle.entry(series.clone()).or_default().push(ms);
                    }
                    if e.revenue > 0 {
                        *self.revenue.entry(series.clone()).or_default() += e.revenue;
                    }
                    if let Some(s) = e.upstream_status {
                        *self
                            .upstream
                            .entry((series.0, series.1, s / 100))
                            .or_default() += 1;
                    }
                }
                Err(mpsc::error::TryRecvError::Empty) => return true,
                Err(mpsc::error::TryRecvError::Disconnected) => return false,
            }
        }
    }

    /// A refund: its route's hour, its organisation's minute and the series.
    fn refund(&mut self, r: RefundEvent, counts: &mut Counts) {
        counts
            .hours
            .entry((
                r.org_id.clone(),
                r.route_id.clone(),
                Tier::Hour.period_of(r.at),
            ))
            .or_default()
            .refunded += r.amount;
        counts
            .minutes
            .entry((r.org_id.clone(), r.at / 60))
            .or_default()
            .refunded += r.amount;
        *self.refunded.entry((r.org_id, r.route_id)).or_default() += r.amount;
    }

    /// Adds the batch to the Prometheus families and empties it.
    fn apply(&mut self, prom: &Prom) {
        let labels = |org: &str, route: &str| RouteLabels {
            org: org.to_string(),
            route: route.to_string(),
        };
        for ((org, route, outcome, class), n) in self.requests.drain() {
            prom.requests
                .get_or_create(&OutcomeLabels {
                    org: org.to_string(),
                    route: route.to_string(),
                    outcome: outcome.as_str().into(),
                    status_class: format!("{class}xx"),
                })
                .inc_by(n);
        }
        for ((org, route), v) in self.challenge.drain() {
            let h = prom.challenge_seconds.get_or_create(&labels(&org, &route));
            v.iter().for_each(|us| h.observe(*us as f64 / 1e6));
        }
        for ((org, route), v) in self.settle.drain() {
            let h = prom.settle_seconds.get_or_create(&labels(&org, &route));
            v.iter().for_each(|ms| h.observe(*ms as f64 / 1e3));
        }
        for ((org, route), n) in self.revenue.drain() {
            prom.revenue.get_or_create(&labels(&org, &route)).inc_by(n);
        }
        for ((org, route, protocol), n) in self.paid.drain() {
            prom.paid
                .get_or_create(&ProtocolLabels {
                    org: org.to_string(),
                    route: route.to_string(),
                    protocol: protocol.as_str().into(),
                })
                .inc_by(n);
        }
        for ((org, route), n) in self.refunded.drain() {
            prom.refunded.get_or_create(&labels(&org, &route)).inc_by(n);
        }
        for ((org, route, class), n) in self.upstream.drain() {
            prom.upstream
                .get_or_create(&UpstreamLabels {
                    org: org.to_string(),
                    route: route.to_string(),
                    class: format!("{class}xx"),
                })
                .inc_by(n);
        }
    }
}

impl Metrics {
    /// The live nodes sharing the rate limits, as this node last applied them.
    pub fn limit_nodes(&self) -> usize {
        self.limit_nodes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records the live nodes the rate limits are now shared by.
    pub fn set_limit_nodes(&self, n: usize) {
        self.limit_nodes
            .store(n, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn new() -> Arc<Self> {
        let (tx, rx) = mpsc::unbounded_channel();
        Arc::new(Self {
            tx,
            rx: Mutex::new(Some(rx)),
            prom: Prom::new(),
            health: ArcSwap::from_pointee(FacilitatorHealth {
                status: "down",
                latency_ms: 0,
                checked_at: paygate_domain::now_rfc3339(),
                url: String::new(),
                members: Vec::new(),
            }),
            unflushed: Unflushed::default(),
            stop: tokio::sync::Notify::new(),
            limit_nodes: std::sync::atomic::AtomicUsize::new(1),
        })
    }

    /// Hands a finished request to the aggregator. Never blocks.
    pub fn record(&self, event: RequestEvent) {
        let _ = self.tx.send(Counted::Request(event));
    }

    /// Hands a refund to the aggregator (counted against its route's revenue). Never blocks.
    pub fn record_refund(&self, event: RefundEvent) {
        let _ = self.tx.send(Counted::Refund(event));
    }

    /// Runs the aggregator until the channel closes: counts into Prometheus and per-minute
    /// buckets, merging buckets into the store every `flush_every` (and on exit).
    ///
    /// The channel is drained on a short timer rather than awaited per event: a receiver that
    /// waits would be woken (a cross-thread wake-up and a context switch) by every request the
    /// proxy answers. Events wait at most [`DRAIN_EVERY`] before they count; the drained batch
    /// is folded by label set first, so Prometheus is touched once per distinct series.
    pub async fn run_aggregator(self: Arc<Self>, store: Arc<dyn Store>, flush_every: Duration) {
        let Some(mut rx) = self.rx.lock().ok().and_then(|mut r| r.take()) else {
            return;
        };
        let mut flush = tokio::time::interval(flush_every);
        let mut drain = tokio::time::interval(DRAIN_EVERY);
        drain.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut batch = Batch::default();
        loop {
            tokio::select! {
                _ = drain.tick() => {
                    let open = self.unflushed.with(|c| batch.drain(&mut rx, c));
                    batch.apply(&self.prom);
                    if !open {
                        break;
                    }
                }
                _ = flush.tick() => {
                    if let Err(e) = self.unflushed.flush(store.as_ref()).await {
                        tracing::warn!(error = %e, "could not store counts; kept for the next flush");
                    }
                }
                _ = self.stop.notified() => {
                    // Counted, not stored: the exit path stores it (`flush_now`) once every
                    // runtime has stopped (a flush cut half-way would be sent again with
                    // its batch id and counted once, but need not be cut at all).
                    self.unflushed.with(|c| batch.drain(&mut rx, c));
                    batch.apply(&self.prom);
                    return;
                }
            }
        }
        let _ = self.unflushed.flush(store.as_ref()).await;
    }

    /// Ends [`Metrics::run_aggregator`] once it has counted what is queued (at shutdown; then
    /// [`Metrics::flush_now`] stores it).
    pub fn stop(&self) {
        self.stop.notify_one();
    }

    /// Stores what is counted and not stored yet (at exit, once the aggregator is gone). A
    /// few tries: the store's pooled connections may belong to a runtime that has stopped,
    /// and each failed try retires one.
    pub async fn flush_now(&self, store: &dyn Store) {
        let mut last = Ok(());
        for _ in 0..5 {
            last = self.unflushed.flush(store).await;
            if last.is_ok() {
                return;
            }
        }
        if let Err(e) = last {
            tracing::warn!(error = %e, "counts of the last seconds not stored at exit");
        }
    }

    /// The organisation's counters from `from_minute` on, including what is not stored yet.
    pub async fn minutes_since(
        &self,
        store: &dyn Store,
        org_id: &str,
        from_minute: u64,
    ) -> StoreResult<MetricBucket> {
        self.unflushed
            .minutes_since(store, org_id, from_minute)
            .await
    }

    /// The organisation's roll-up rows of `tier` from `from_period` on, including what is not
    /// stored yet.
    pub async fn rollups(
        &self,
        store: &dyn Store,
        org_id: &str,
        tier: Tier,
        from_period: u64,
    ) -> StoreResult<Vec<RollupRow>> {
        self.unflushed
            .rollups(store, org_id, tier, from_period)
            .await
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
    /// Replaces the upstream target health series: `(org, route, target url, healthy)`.
    pub fn set_target_health<'a>(
        &self,
        rows: impl Iterator<Item = (&'a str, &'a str, String, bool)>,
    ) {
        let family = &self.prom.target_healthy;
        family.clear();
        for (org, route, target, healthy) in rows {
            family
                .get_or_create(&TargetLabels {
                    org: org.to_string(),
                    route: route.to_string(),
                    target,
                })
                .set(i64::from(healthy));
        }
    }

    /// Counts a payment channel event of `org` moving `amount` base units.
    pub fn channel_event(&self, org: &str, event: &'static str, amount: u128) {
        let labels = ChannelLabels {
            org: org.to_string(),
            event: event.to_string(),
        };
        self.prom.channel_events.get_or_create(&labels).inc();
        if amount > 0 {
            self.prom
                .channel_base_units
                .get_or_create(&labels)
                .inc_by(u64::try_from(amount).unwrap_or(u64::MAX));
        }
    }

    pub fn prometheus_text(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.prom.registry).is_err() {
            out.clear();
        }
        out
    }
}
