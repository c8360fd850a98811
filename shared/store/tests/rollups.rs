//! Roll-ups (`MetricStore::merge_rollups` / `rollups`) on both backends: rows of the same tier,
//! period and route add up, histograms element-wise; tiers, periods and organisations stay
//! apart.

mod common;

use common::Both;
use paygate_domain::rollup::{RollupBucket, RollupRow, Tier};

fn row(tier: Tier, period: u64, route: &str, settles: &[u64], revenue: u64) -> RollupRow {
    let mut bucket = RollupBucket {
        requests: settles.len() as u64 + 1,
        paid: settles.len() as u64,
        errors: 1,
        revenue,
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
        s.merge_rollups(
            "o1",
            &[
                row(Tier::Hour, h, "r1", &[4, 40], 20_000),
                row(Tier::Hour, h, "", &[4, 40], 20_000),
                row(Tier::Hour, h - 3_600, "r1", &[4], 10_000),
                row(Tier::Day, Tier::Day.period_of(h), "r1", &[4, 40], 20_000),
            ],
        )
        .await
        .unwrap();
        // A second node's (or flush's) share of the same hour.
        s.merge_rollups(
            "o1",
            &[row(Tier::Hour, h, "r1", &[900], u64::from(u32::MAX) * 4)],
        )
        .await
        .unwrap();
        s.merge_rollups("o2", &[row(Tier::Hour, h, "r1", &[1], 1)])
            .await
            .unwrap();

        let mut got = s.rollups("o1", Tier::Hour, h).await.unwrap();
        got.sort_by(|a, b| a.route_id.cmp(&b.route_id));
        assert_eq!(got.len(), 2, "{name}: {got:?}");
        assert_eq!(got[0].route_id, "", "{name}");
        let r1 = &got[1].bucket;
        assert_eq!((got[1].period, got[1].tier), (h, Tier::Hour), "{name}");
        assert_eq!((r1.requests, r1.paid, r1.errors), (5, 3, 2), "{name}");
        assert_eq!(r1.revenue, 20_000 + u64::from(u32::MAX) * 4, "{name}");
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
