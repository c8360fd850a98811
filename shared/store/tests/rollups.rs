//! Roll-ups (`MetricStore::merge_counts` / `rollups`) on both backends: rows of the same tier,
//! period and route add up, histograms element-wise; tiers, periods and organisations stay
//! apart.

mod common;

use common::Both;
use paygate_domain::ids::{new_id, time_bound};
use paygate_domain::rollup::{CountBatch, RollupBucket, RollupRow, Tier, COUNT_BATCH_PREFIX};
use paygate_store::MetricStore;

/// Adds `rows` of `org` as one new batch.
async fn merge(s: &dyn MetricStore, org: &str, rows: &[RollupRow]) {
    s.merge_counts(&batch(new_id(COUNT_BATCH_PREFIX), org, rows))
        .await
        .unwrap();
}

fn batch(id: String, org: &str, rows: &[RollupRow]) -> CountBatch {
    CountBatch {
        id,
        minutes: vec![],
        rollups: rows.iter().map(|r| (org.to_string(), r.clone())).collect(),
    }
}

fn row(tier: Tier, period: u64, route: &str, settles: &[u64], revenue: u64) -> RollupRow {
    let mut bucket = RollupBucket {
        requests: settles.len() as u64 + 1,
        paid: settles.len() as u64,
        errors: 1,
        revenue,
        refunded: revenue / 10,
        ..Default::default()
    };
    settles.iter().for_each(|ms| bucket.observe_settle(*ms));
    RollupRow {
        tier,
        period,
        route_id: route.into(),
        bucket,
    }
}

#[tokio::test]
async fn rows_add_up_by_tier_period_and_route() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        let h = Tier::Hour.period_of(1_800_000_000);
        merge(
            &*s,
            "o1",
            &[
                row(Tier::Hour, h, "r1", &[4, 40], 20_000),
                row(Tier::Hour, h, "", &[4, 40], 20_000),
                row(Tier::Hour, h - 3_600, "r1", &[4], 10_000),
                row(Tier::Day, Tier::Day.period_of(h), "r1", &[4, 40], 20_000),
            ],
        )
        .await;
        // A second node's (or flush's) share of the same hour.
        merge(
            &*s,
            "o1",
            &[row(Tier::Hour, h, "r1", &[900], u64::from(u32::MAX) * 4)],
        )
        .await;
        merge(&*s, "o2", &[row(Tier::Hour, h, "r1", &[1], 1)]).await;

        let mut got = s.rollups("o1", Tier::Hour, h).await.unwrap();
        got.sort_by(|a, b| a.route_id.cmp(&b.route_id));
        assert_eq!(got.len(), 2, "{name}: {got:?}");
        assert_eq!(got[0].route_id, "", "{name}");
        let r1 = &got[1].bucket;
        assert_eq!((got[1].period, got[1].tier), (h, Tier::Hour), "{name}");
        assert_eq!((r1.requests, r1.paid, r1.errors), (5, 3, 2), "{name}");
        assert_eq!(r1.revenue, 20_000 + u64::from(u32::MAX) * 4, "{name}");
        assert_eq!(r1.refunded, 2_000 + u64::from(u32::MAX) * 4 / 10, "{name}");
        assert_eq!(r1.settle_count, 3, "{name}");
        assert_eq!(r1.settle_ms_sum, 944, "{name}");
        assert_eq!(r1.settle_quantile_ms(0.5), Some(50), "{name}");
        assert_eq!(r1.settle_quantile_ms(1.0), Some(1_000), "{name}");
        assert_eq!(r1.settle_hist.iter().sum::<u64>(), 3, "{name}");

        assert_eq!(
            s.rollups("o1", Tier::Hour, h - 3_600).await.unwrap().len(),
            3
        );
        let days = s.rollups("o1", Tier::Day, 0).await.unwrap();
        assert_eq!(days.len(), 1, "{name}: {days:?}");
        assert_eq!(days[0].bucket.paid, 2, "{name}");
        assert!(s
            .rollups("o1", Tier::Hour, h + 3_600)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(
            s.rollups("o2", Tier::Hour, 0).await.unwrap().len(),
            1,
            "{name}"
        );
        assert!(
            s.rollups("o3", Tier::Day, 0).await.unwrap().is_empty(),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_batch_is_added_once_and_forgotten_after_a_day() {
    let both = Both::new().await;
    let h = Tier::Hour.period_of(1_800_000_000);
    let now_ms = paygate_domain::unix_now() * 1000;
    for (name, s) in both.each() {
        // Sent twice (the first answer lost, or the flush cut at exit): counted once.
        let b = batch(
            new_id(COUNT_BATCH_PREFIX),
            "o1",
            &[row(Tier::Hour, h, "r1", &[4], 10)],
        );
        s.merge_counts(&b).await.unwrap();
        s.merge_counts(&b).await.unwrap();
        let got = s.rollups("o1", Tier::Hour, h).await.unwrap();
        assert_eq!(got[0].bucket.revenue, 10, "{name}: {got:?}");

        // A batch older than a day is forgotten when a batch is stored; a younger one is not.
        let at = |ago_ms: u64| batch(time_bound(COUNT_BATCH_PREFIX, now_ms - ago_ms), "o9", &[]);
        let (old, young) = (at(2 * 24 * 3_600_000), at(23 * 3_600_000));
        s.merge_counts(&old).await.unwrap();
        s.merge_counts(&young).await.unwrap();
        merge(&*s, "o9", &[]).await;
        assert!(!s.count_batch_stored(&old.id).await.unwrap(), "{name}");
        assert!(s.count_batch_stored(&young.id).await.unwrap(), "{name}");
        assert!(s.count_batch_stored(&b.id).await.unwrap(), "{name}");
    }
}
