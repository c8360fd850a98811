//! Revenue and usage roll-ups (issue 19): per organisation and route, counters for each hour and
//! each day (UTC), with a settlement-latency histogram so percentiles survive merging. Route
//! `""` is the organisation's total. The hourly tier serves 24-hour views, the daily tier 7- and
//! 30-day views, so a view reads at most 31 rows per route.

use serde::{Deserialize, Serialize};

/// Upper edges (inclusive, milliseconds) of the settlement-latency histogram's bins; one more
/// bin holds everything slower. Successive edges differ by at most 1.5x (from 2 ms on), which
/// bounds a percentile's error.
pub const SETTLE_EDGES_MS: [u64; 29] = [
    1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200, 300, 500, 700, 1_000, 1_500, 2_000,
    3_000, 5_000, 7_000, 10_000, 15_000, 20_000, 30_000, 60_000, 120_000,
];
/// Bins in a histogram: one per edge and the overflow.
pub const SETTLE_BINS: usize = SETTLE_EDGES_MS.len() + 1;

/// The granularity of a roll-up row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Hour,
    Day,
}

impl Tier {
    pub const fn seconds(self) -> u64 {
        match self {
            Self::Hour => 3_600,
            Self::Day => 86_400,
        }
    }

    /// The start (unix seconds) of the period holding `unix`.
    pub const fn period_of(self, unix: u64) -> u64 {
        unix - unix % self.seconds()
    }

    pub const fn code(self) -> u8 {
        match self {
            Self::Hour => 1,
            Self::Day => 2,
        }
    }
}

/// One period's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RollupBucket {
    /// Gateway requests.
    pub requests: u64,
    /// Requests settled and forwarded.
    pub paid: u64,
    /// Answers 5xx.
    pub errors: u64,
    /// USDC base units received.
    pub revenue: u64,
    /// USDC base units refunded to payers in this period (of what was received in it or before).
    pub refunded: u64,
    pub settle_count: u64,
    pub settle_ms_sum: u64,
    /// Counts per bin of [`SETTLE_EDGES_MS`] (always [`SETTLE_BINS`] long).
    pub settle_hist: Vec<u64>,
}

impl Default for RollupBucket {
    fn default() -> Self {
        Self {
            requests: 0,
            paid: 0,
            errors: 0,
            revenue: 0,
            refunded: 0,
            settle_count: 0,
            settle_ms_sum: 0,
            settle_hist: vec![0; SETTLE_BINS],
        }
    }
}

impl RollupBucket {
    /// Counts one settlement of `ms` milliseconds.
    pub fn observe_settle(&mut self, ms: u64) {
        let bin = SETTLE_EDGES_MS.partition_point(|edge| *edge < ms);
        self.settle_count += 1;
        self.settle_ms_sum = self.settle_ms_sum.saturating_add(ms);
        self.settle_hist.resize(SETTLE_BINS, 0);
        self.settle_hist[bin] += 1;
    }

    pub fn merge(&mut self, o: &RollupBucket) {
        self.requests += o.requests;
        self.paid += o.paid;
        self.errors += o.errors;
        self.revenue = self.revenue.saturating_add(o.revenue);
        self.refunded = self.refunded.saturating_add(o.refunded);
        self.settle_count += o.settle_count;
        self.settle_ms_sum = self.settle_ms_sum.saturating_add(o.settle_ms_sum);
        self.settle_hist.resize(SETTLE_BINS, 0);
        for (a, b) in self.settle_hist.iter_mut().zip(&o.settle_hist) {
            *a += b;
        }
    }

    /// The compact stored form (an embedded store reads tens of thousands of rows for one
    /// view, where JSON decoding dominated): a version byte, then every counter and bin as a
    /// little-endian `u64`. Version 2 added `refunded` after the six counters of version 1,
    /// which still reads (with nothing refunded).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + 8 * (7 + SETTLE_BINS));
        out.push(2);
        let head = [
            self.requests,
            self.paid,
            self.errors,
            self.revenue,
            self.settle_count,
            self.settle_ms_sum,
            self.refunded,
        ];
        for v in head.iter().chain(&self.settle_hist) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// Reads [`RollupBucket::to_bytes`] (either version); `None` for anything else.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let (version, rest) = b.split_first().map(|(v, r)| (*v, r))?;
        let head = match version {
            1 => 6,
            2 => 7,
            _ => return None,
        };
        if rest.len() % 8 != 0 || rest.len() < 8 * head {
            return None;
        }
        let mut words = rest
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()));
        let mut next = || words.next().unwrap_or(0);
        let mut bucket = Self {
            requests: next(),
            paid: next(),
            errors: next(),
            revenue: next(),
            settle_count: next(),
            settle_ms_sum: next(),
            refunded: 0,
            settle_hist: Vec::new(),
        };
        if head == 7 {
            bucket.refunded = next();
        }
        bucket.settle_hist = words.collect();
        bucket.settle_hist.resize(SETTLE_BINS, 0);
        Some(bucket)
    }

    /// The `q` quantile (0 < q <= 1) of settlement time as its bin's upper edge in
    /// milliseconds (an upper bound within 1.5x); `None` without settlements. The overflow bin
    /// reports the last edge.
    pub fn settle_quantile_ms(&self, q: f64) -> Option<u64> {
        if self.settle_count == 0 {
            return None;
        }
        let rank = ((self.settle_count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.settle_hist.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(SETTLE_EDGES_MS[i.min(SETTLE_EDGES_MS.len() - 1)]);
            }
        }
        SETTLE_EDGES_MS.last().copied()
    }
}

/// One row: an organisation's route (or `""`, the organisation) in one period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupRow {
    pub tier: Tier,
    /// The period's start, unix seconds.
    pub period: u64,
    pub route_id: String,
    pub bucket: RollupBucket,
}

/// Counts one process stores in one go (the metrics aggregator's flush): minute buckets and
/// roll-up rows of any organisations. Its id makes a retry safe: a batch whose outcome is unknown
/// (the store's answer lost, a flush cut short at exit) is sent again with the same id, and the
/// store adds a batch once. Ids come from [`crate::ids::new_id`] with [`COUNT_BATCH_PREFIX`], so
/// they sort by time and old ones are forgotten after [`COUNT_BATCH_KEEP_MS`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CountBatch {
    pub id: String,
    /// Organisation, unix minute, counts.
    pub minutes: Vec<(String, u64, crate::model::MetricBucket)>,
    /// Organisation and row.
    pub rollups: Vec<(String, RollupRow)>,
}

pub const COUNT_BATCH_PREFIX: &str = "cb";

/// How long a store remembers the batches it took: a batch retried later than this would be
/// added again. Retries come seconds apart (the next flush, the exit path), so a day is ample.
pub const COUNT_BATCH_KEEP_MS: u64 = 24 * 3_600_000;

impl CountBatch {
    pub fn is_empty(&self) -> bool {
        self.minutes.is_empty() && self.rollups.is_empty()
    }

    /// The id below which remembered batches may be forgotten, `now_ms` being the time now.
    pub fn forget_below(now_ms: u64) -> String {
        crate::ids::time_bound(
            COUNT_BATCH_PREFIX,
            now_ms.saturating_sub(COUNT_BATCH_KEEP_MS),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_the_bins_and_survive_merging() {
        let mut a = RollupBucket::default();
        for ms in [4, 4, 4, 4, 4, 4, 4, 4, 4, 900] {
            a.observe_settle(ms);
        }
        assert_eq!(a.settle_quantile_ms(0.5), Some(5));
        assert_eq!(a.settle_quantile_ms(0.99), Some(1_000));
        let mut b = RollupBucket::default();
        for _ in 0..90 {
            b.observe_settle(1);
        }
        b.merge(&a);
        assert_eq!(b.settle_count, 100);
        assert_eq!(b.settle_quantile_ms(0.5), Some(1));
        assert_eq!(b.settle_quantile_ms(0.95), Some(5));
        assert_eq!(b.settle_quantile_ms(1.0), Some(1_000));
        assert_eq!(RollupBucket::default().settle_quantile_ms(0.5), None);
        let mut slow = RollupBucket::default();
        slow.observe_settle(10_000_000);
        assert_eq!(slow.settle_quantile_ms(0.5), Some(120_000));
    }

    #[test]
    fn the_stored_form_reads_back_and_refuses_anything_else() {
        let mut b = RollupBucket {
            requests: 7,
            paid: 5,
            errors: 1,
            revenue: u64::MAX - 3,
            refunded: 9,
            ..Default::default()
        };
        b.observe_settle(40);
        b.observe_settle(4_000);
        assert_eq!(RollupBucket::from_bytes(&b.to_bytes()), Some(b.clone()));
        // A version-1 row (before refunds were counted) reads with nothing refunded.
        let mut v1 = b.to_bytes();
        v1[0] = 1;
        v1.drain(1 + 6 * 8..1 + 7 * 8);
        let old = RollupBucket::from_bytes(&v1).expect("version 1 reads");
        assert_eq!((old.revenue, old.refunded), (b.revenue, 0));
        assert_eq!(old.settle_hist, b.settle_hist);
        assert_eq!(RollupBucket::from_bytes(b"{}"), None);
        assert_eq!(RollupBucket::from_bytes(&[1, 0, 0]), None);
        assert_eq!(RollupBucket::from_bytes(&[]), None);
    }

    #[test]
    fn periods_start_on_the_hour_and_the_day() {
        assert_eq!(Tier::Hour.period_of(7_199), 3_600);
        assert_eq!(Tier::Day.period_of(86_399), 0);
        assert_eq!(Tier::Day.period_of(86_400), 86_400);
    }
}
