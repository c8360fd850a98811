//! The seeding command of `make bench`'s seller's-view benchmark (benches/ledger.py): fills a
//! stopped paygate's sled store with one organisation's history through the store's own
//! operations, so every index is built as the gateway would build it: `--payments` gateway
//! payments (spread over the org's routes, 16 payers, the last 30 days, one in 50 failed),
//! `--payouts` corridor payouts on the org's BRL corridor, and 30 days of hourly and daily
//! roll-ups for every route. Prints one JSON line with what it wrote and how long it took.

use clap::Parser;
use paygate_domain::ids::new_id;
use paygate_domain::model::{GatewayPayment, PaymentStatus};
use paygate_domain::rollup::{CountBatch, RollupBucket, RollupRow, Tier, COUNT_BATCH_PREFIX};
use paygate_payouts::money::QuoteBreakdown;
use paygate_payouts::store::PayoutStore;
use paygate_payouts::{Beneficiary, Corridor, CorridorStatus, Currency, PayIdempotency, Payout};
use paygate_payouts::{PayoutStatus, Quote};
use paygate_store::prelude::*;
use paygate_store::SledStore;
use paygate_x402::money::UsdcAmount;
use std::sync::Arc;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// The gateway's sled directory (`storage.path`); the gateway must be stopped.
    #[arg(long)]
    data: std::path::PathBuf,
    /// The organisation's slug.
    #[arg(long)]
    org: String,
    #[arg(long, default_value_t = 1_000_000)]
    payments: usize,
    #[arg(long, default_value_t = 100_000)]
    payouts: usize,
    /// Writes in flight (they share sled's flushes).
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
}

/// A UUIDv7-shaped id `at_ms` into the epoch (so the ledger's time ranges hold).
fn id_at(prefix: &str, at_ms: u64, n: u64) -> String {
    format!("{prefix}_{:012x}7{:03x}8{:015x}", at_ms, n & 0xfff, n)
}

fn rfc3339(ms: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .map(paygate_domain::rfc3339)
        .unwrap_or_default()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let store = Arc::new(SledStore::open(&a.data)?);
    let org = store
        .get_org_by_slug(&a.org)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no organisation {}", a.org))?;
    let routes: Vec<String> = store
        .list_routes(&org.id)
        .await?
        .into_iter()
        .map(|r| r.id)
        .collect();
    anyhow::ensure!(!routes.is_empty(), "the organisation has no routes");
    let now_ms = paygate_domain::unix_now() * 1000;
    let span_ms = 30 * 86_400_000u64;
    let started = Instant::now();

    // Payments: newest at now, oldest 30 days back.
    let sem = Arc::new(tokio::sync::Semaphore::new(a.concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..a.payments as u64 {
        let at = now_ms - span_ms + span_ms * i / a.payments.max(1) as u64;
        let p = GatewayPayment {
            id: id_at("pay", at, i),
            org_id: org.id.clone(),
            route_id: routes[i as usize % routes.len()].clone(),
            nonce_key: format!("seed:{i}"),
            network: "eip155:84532".into(),
            asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e".into(),
            payer: format!("0x{:040x}", 0xA000 + i % 16),
            pay_to: "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720".into(),
            resource: String::new(),
            amount: UsdcAmount(10_000),
            transfer: Default::default(),
            protocol: Default::default(),
            status: if i % 50 == 0 {
                PaymentStatus::Failed
            } else {
                PaymentStatus::Settled
            },
            transaction: (i % 50 != 0).then(|| format!("0x{:064x}", i)),
            failure: (i % 50 == 0).then(|| "seeded failure".into()),
            verify_us: 150,
            settle_ms: Some(40),
            upstream_status: Some(200),
            valid_before: 0,
            settled_by_reconciliation: false,
            redeemed_at: None,
            plan_slot: None,
            escrow: None,
            created_at: rfc3339(at),
            updated_at: rfc3339(at),
        };
        let (store, permit) = (store.clone(), sem.clone().acquire_owned().await?);
        tasks.spawn(async move {
            let r = store.reserve_payment(&p).await;
            drop(permit);
            r.map(|_| ())
        });
        while let Some(done) = tasks.try_join_next() {
            done??;
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let payments_s = started.elapsed().as_secs_f64();

    // Payouts on a BRL corridor (created ACTIVE if the org has none).
    let now = paygate_domain::now_rfc3339();
    let corridor = Corridor {
        id: new_id("cor"),
        org_id: org.id.clone(),
        dest_currency: Currency::Brl,
        status: CorridorStatus::Active,
        created_at: now.clone(),
        updated_at: now.clone(),
    };
    let (corridor, _) = store.create_corridor(&corridor).await?;
    let breakdown = QuoteBreakdown::compute(
        UsdcAmount(100_000_000),
        50,
        UsdcAmount(300_000),
        rust_decimal::Decimal::new(53955, 4),
    )?;
    let t = Instant::now();
    for i in 0..a.payouts as u64 {
        let at = now_ms - span_ms + span_ms * i / a.payouts.max(1) as u64;
        let quote = Quote {
            id: id_at("qt", at, i),
            org_id: org.id.clone(),
            corridor_id: corridor.id.clone(),
            provider_quote_id: format!("pq_{i}"),
            dest_currency: Currency::Brl,
            breakdown: breakdown.clone(),
            expires_at_unix: i64::MAX,
            created_at: rfc3339(at),
            used_by: None,
            funding_address: None,
            encryption_key: None,
        };
        let payout = Payout {
            id: id_at("po", at, i),
            org_id: org.id.clone(),
            corridor_id: corridor.id.clone(),
            quote_id: quote.id.clone(),
            provider_quote_id: quote.provider_quote_id.clone(),
            idempotency_key: format!("seed-{i}"),
            from_address: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC".into(),
            dest_currency: Currency::Brl,
            breakdown: breakdown.clone(),
            beneficiary: Beneficiary::bank_account(
                "Ana Souza",
                "Banco Teste",
                "0001-23456-7",
                Currency::Brl,
            ),
            status: PayoutStatus::Pending,
            cpn_payment_id: None,
            funding: None,
            events: Vec::new(),
            encryption_key: None,
            rfi: None,
            failure_code: None,
            failure_message: None,
            created_at: rfc3339(at),
            updated_at: rfc3339(at),
        };
        let key = PayIdempotency {
            org_id: org.id.clone(),
            key: payout.idempotency_key.clone(),
            fingerprint: "seed".into(),
            payment_id: payout.id.clone(),
            response: None,
            created_at_unix: (at / 1000) as i64,
        };
        let (store, permit) = (store.clone(), sem.clone().acquire_owned().await?);
        tasks.spawn(async move {
            let r = async {
                store.put_quote(&quote).await?;
                store.begin_payout(&key, &payout).await?;
                Ok::<_, paygate_domain::StoreError>(())
            }
            .await;
            drop(permit);
            r
        });
        while let Some(done) = tasks.try_join_next() {
            done??;
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let payouts_s = t.elapsed().as_secs_f64();

    // Roll-ups: 30 days of hours and days for every route (and the org's total).
    let t = Instant::now();
    let per_hour = (a.payments as u64 / (30 * 24)).max(1);
    let mut bucket = RollupBucket {
        requests: per_hour * 2,
        paid: per_hour,
        errors: 0,
        revenue: per_hour * 10_000,
        ..Default::default()
    };
    (0..per_hour.min(1000)).for_each(|_| bucket.observe_settle(40));
    let now_s = now_ms / 1000;
    for (tier, periods) in [(Tier::Hour, 30 * 24), (Tier::Day, 31)] {
        for k in 0..periods {
            let period = tier.period_of(now_s) - k * tier.seconds();
            let rows: Vec<_> = routes
                .iter()
                .map(String::as_str)
                .chain([""])
                .map(|route| RollupRow {
                    tier,
                    period,
                    route_id: route.to_string(),
                    bucket: bucket.clone(),
                })
                .collect();
            store
                .merge_counts(&CountBatch {
                    id: new_id(COUNT_BATCH_PREFIX),
                    minutes: vec![],
                    rollups: rows.into_iter().map(|r| (org.id.clone(), r)).collect(),
                })
                .await?;
        }
    }
    store.flush().await?;
    println!(
        "{}",
        serde_json::json!({
            "org": org.id, "routes": routes.len(), "payments": a.payments, "payouts": a.payouts,
            "corridor": corridor.id, "paymentsSeconds": payments_s, "payoutsSeconds": payouts_s,
            "rollupSeconds": t.elapsed().as_secs_f64(),
        })
    );
    Ok(())
}
