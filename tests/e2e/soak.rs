//! Soak: a mixed workload against the real binary on anvil with Circle's USDC, at half of the
//! capacity measured at the start of the same run, while the gateway's RSS is sampled.
//!
//! The mix (by weight): unpaid calls answered `402` (60), paid calls settled on chain and proxied
//! (5), management cycles (create, patch, delete a route: 15), corridor payouts (quote, pay:
//! 10), MCP sessions with the rmcp client (initialize, list tools, close: 10). Every answer must
//! be the expected one; at the end every payout must have reached `SETTLED` and the upstream
//! must have served each paid call once.
//!
//! First the mix runs closed-loop (32 in flight) for `PAYGATE_SOAK_CALIBRATE_SECONDS` (default
//! 5): its rate is the capacity. Then it runs open-loop at half that rate for
//! `PAYGATE_SOAK_SECONDS` (default 20 in `make test`; `make soak` runs 1800), sampling RSS every
//! `duration / 20`. Memory must be flat: the median RSS of the last quarter may exceed that of
//! the second quarter (after warm-up) by at most 10 % + 8 MiB. The report (rates, error counts,
//! p50/p99 per kind, RSS over time) is printed and, with `PAYGATE_SOAK_REPORT=<file>`, written
//! as JSON.

use crate::common;

use common::chain::{address, Chain, PaymentSpec};
use common::upstream::Upstream;
use common::*;
use reqwest::Method;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PRICE: u64 = 10_000; // $0.01
const RECEIVER: usize = 9;
const PAYERS: usize = 6;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Unpaid,
    Paid,
    Management,
    Corridor,
    Mcp,
}

const MIX: [(Kind, u32); 5] = [
    (Kind::Unpaid, 60),
    (Kind::Paid, 5),
    (Kind::Management, 15),
    (Kind::Corridor, 10),
    (Kind::Mcp, 10),
];

/// The mix: [`MIX`], or `PAYGATE_SOAK_MIX` (e.g. `mcp=1` or `unpaid=60,paid=5`) to look at
/// one kind's memory alone.
fn mix() -> &'static [(Kind, u32)] {
    static MIXED: std::sync::OnceLock<Vec<(Kind, u32)>> = std::sync::OnceLock::new();
    MIXED.get_or_init(|| {
        let Ok(spec) = std::env::var("PAYGATE_SOAK_MIX") else {
            return MIX.to_vec();
        };
        let weights: Vec<(Kind, u32)> = spec
            .split(',')
            .map(|part| {
                let (name, w) = part.split_once('=').expect("kind=weight");
                let kind = match name.trim() {
                    "unpaid" => Kind::Unpaid,
                    "paid" => Kind::Paid,
                    "management" => Kind::Management,
                    "corridor" => Kind::Corridor,
                    "mcp" => Kind::Mcp,
                    other => panic!("unknown kind {other} in PAYGATE_SOAK_MIX"),
                };
                (kind, w.trim().parse().expect("a weight"))
            })
            .collect();
        assert!(
            weights.iter().any(|(_, w)| *w > 0),
            "PAYGATE_SOAK_MIX has no weight"
        );
        weights
    })
}

impl Kind {
    /// The `n`-th operation of the repeating mix (deterministic interleaving).
    fn nth(n: u64) -> Kind {
        let total: u64 = mix().iter().map(|(_, w)| u64::from(*w)).sum();
        let mut at = (n.wrapping_mul(7919)) % total;
        for &(k, w) in mix() {
            if at < u64::from(w) {
                return k;
            }
            at -= u64::from(w);
        }
        Kind::Unpaid
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Unpaid => "unpaid (402)",
            Kind::Paid => "paid (settle + proxy)",
            Kind::Management => "management (create, patch, delete)",
            Kind::Corridor => "corridor (quote, pay)",
            Kind::Mcp => "MCP (initialize, tools/list, close)",
        }
    }
}

#[derive(Default)]
struct Samples {
    latencies_us: Vec<u64>,
    errors: Vec<String>,
}

struct Ctx {
    gw: Gateway,
    key: String,
    corridor: String,
    pay_to: alloy_primitives::Address,
    next: AtomicU64,
    samples: Mutex<std::collections::HashMap<Kind, Samples>>,
    payouts: Mutex<Vec<String>>,
    paid_ok: AtomicU64,
}

impl Ctx {
    async fn expect(&self, rb: reqwest::RequestBuilder, want: u16) -> Result<Value, String> {
        let r = rb.send().await.map_err(|e| format!("transport: {e}"))?;
        let status = r.status().as_u16();
        let text = r.text().await.map_err(|e| format!("body: {e}"))?;
        if status != want {
            return Err(format!("{status} (want {want}): {text:.200}"));
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    fn api(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.gw
            .http
            .request(method, self.gw.url(path))
            .bearer_auth(&self.key)
    }

    async fn run(&self, kind: Kind, n: u64) -> Result<(), String> {
        match kind {
            Kind::Unpaid => {
                self.expect(self.gw.http.get(self.gw.url("/gateway/soak/weather")), 402)
                    .await?;
            }
            Kind::Paid => {
                let spec = PaymentSpec::new(1 + (n as usize % PAYERS), self.pay_to, PRICE);
                let rb = self
                    .gw
                    .http
                    .get(self.gw.url("/gateway/soak/weather"))
                    .header("X-PAYMENT", spec.v1_header());
                self.expect(rb, 200).await?;
                self.paid_ok.fetch_add(1, Ordering::Relaxed);
            }
            Kind::Management => {
                let body = json!({"path": format!("/m/{n}"), "priceUSD": 0.02,
                    "targetUrl": "https://api.example.com/x", "network": "base-sepolia"});
                let route = self
                    .expect(self.api(Method::POST, "/api/routes").json(&body), 201)
                    .await?;
                let id = route["id"].as_str().ok_or("no route id")?.to_string();
                let path = format!("/api/routes/{id}");
                self.expect(
                    self.api(Method::PATCH, &path)
                        .json(&json!({"priceUSD": 0.03})),
                    200,
                )
                .await?;
                self.expect(self.api(Method::DELETE, &path), 204).await?;
            }
            Kind::Corridor => {
                let q = self
                    .expect(
                        self.api(
                            Method::GET,
                            &format!("/corridors/{}/quote?amount=25", self.corridor),
                        ),
                        200,
                    )
                    .await?;
                let body = json!({
                    "quoteId": q["quoteId"], "fromAddress": WALLET_B, "amountUSDC": q["amount"],
                    "beneficiary": {"name": "Ada Obi", "bankName": "First Bank",
                        "accountNumber": "0123456785", "bankCode": "058", "country": "NG",
                        "currency": "NGN"},
                });
                let p = self
                    .expect(
                        self.api(Method::POST, &format!("/corridors/{}/pay", self.corridor))
                            .header("Idempotency-Key", format!("soak-{n}"))
                            .json(&body),
                        202,
                    )
                    .await?;
                let id = p["paymentId"].as_str().ok_or("no paymentId")?.to_string();
                self.payouts.lock().unwrap().push(id);
            }
            Kind::Mcp => {
                let transport = StreamableHttpClientTransport::from_config(
                    StreamableHttpClientTransportConfig::with_uri(self.gw.url("/mcp"))
                        .auth_header(self.key.clone()),
                );
                let client = ().serve(transport).await.map_err(|e| format!("initialize: {e}"))?;
                let tools = client
                    .list_all_tools()
                    .await
                    .map_err(|e| format!("tools/list: {e}"))?;
                if tools.is_empty() {
                    return Err("tools/list is empty".into());
                }
                client.cancel().await.map_err(|e| format!("close: {e}"))?;
            }
        }
        Ok(())
    }

    async fn one(self: Arc<Self>) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let kind = Kind::nth(n);
        let t = Instant::now();
        let res = self.run(kind, n).await;
        let us = t.elapsed().as_micros() as u64;
        let mut s = self.samples.lock().unwrap();
        let e = s.entry(kind).or_default();
        e.latencies_us.push(us);
        if let Err(err) = res {
            e.errors.push(err);
        }
    }

    fn take_samples(&self) -> std::collections::HashMap<Kind, Samples> {
        std::mem::take(&mut *self.samples.lock().unwrap())
    }
}

fn env_secs(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn median(v: &[u64]) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    percentile(&v, 0.5)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_workload_at_half_capacity_keeps_errors_at_zero_and_memory_flat() {
    let calibrate = env_secs("PAYGATE_SOAK_CALIBRATE_SECONDS", 5);
    let duration = env_secs("PAYGATE_SOAK_SECONDS", 20);

    let chain = Chain::start();
    let upstream = Upstream::start().await;
    let mut env = chain.gateway_env();
    env.extend([
        ("PAYGATE_LOG".to_string(), "warn".to_string()),
        (
            "PAYGATE__PAYOUT__SANDBOX__WEBHOOK_DELAY_MS".into(),
            "100".into(),
        ),
    ]);
    let gw = Gateway::start_with_owned(env).await;
    let pay_to = address(RECEIVER);
    let (_, key) = gw.create_org("soak", Some(&pay_to.to_checksum(None))).await;
    gw.create_paid_route(
        &key,
        "/weather",
        &format!("{}/weather", upstream.url),
        false,
    )
    .await;
    let corridor = gw.active_corridor(&key, "NGN").await;

    let ctx = Arc::new(Ctx {
        gw,
        key,
        corridor,
        pay_to,
        next: AtomicU64::new(0),
        samples: Mutex::default(),
        payouts: Mutex::default(),
        paid_ok: AtomicU64::new(0),
    });

    // 1. Capacity: the mix closed-loop, 32 in flight.
    let t0 = Instant::now();
    let stop = t0 + Duration::from_secs(calibrate);
    let workers: Vec<_> = (0..32)
        .map(|_| {
            let c = ctx.clone();
            tokio::spawn(async move {
                while Instant::now() < stop {
                    c.clone().one().await;
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let calib = ctx.take_samples();
    let calib_ops: usize = calib.values().map(|s| s.latencies_us.len()).sum();
    let calib_errors: Vec<&String> = calib.values().flat_map(|s| &s.errors).collect();
    assert!(
        calib_errors.is_empty(),
        "errors at capacity: {calib_errors:?}"
    );
    let capacity = calib_ops as f64 / t0.elapsed().as_secs_f64();
    let rate = (capacity / 2.0).max(1.0);

    // 2. Soak: open loop at half capacity, RSS sampled 20 times.
    let interval = Duration::from_secs_f64(1.0 / rate);
    let sample_every = Duration::from_secs_f64((duration as f64 / 20.0).max(0.5));
    let mut rss: Vec<(f64, u64)> = vec![(0.0, ctx.gw.rss_kb())];
    let start = Instant::now();
    let end = start + Duration::from_secs(duration);
    let mut next_sample = start + sample_every;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let inflight = Arc::new(tokio::sync::Semaphore::new(512));
    let mut issued = 0u64;
    while Instant::now() < end {
        tick.tick().await;
        let permit = inflight.clone().acquire_owned().await.unwrap();
        let c = ctx.clone();
        tokio::spawn(async move {
            c.one().await;
            drop(permit);
        });
        issued += 1;
        if Instant::now() >= next_sample {
            rss.push((start.elapsed().as_secs_f64(), ctx.gw.rss_kb()));
            next_sample += sample_every;
        }
    }
    let _all = inflight.acquire_many(512).await.unwrap();
    let elapsed = start.elapsed().as_secs_f64();
    rss.push((elapsed, ctx.gw.rss_kb()));
    let soak = ctx.take_samples();

    // 3. Nothing lost: every payout settles, every paid call reached the upstream once.
    let payouts = ctx.payouts.lock().unwrap().clone();
    let incomplete = ctx
        .gw
        .unsettled_payouts(
            &ctx.key,
            &ctx.corridor,
            payouts.clone(),
            Duration::from_secs(60),
        )
        .await;
    let paid = ctx.paid_ok.load(Ordering::Relaxed);

    // Report.
    let mut kinds = Vec::new();
    let mut total_ops = 0usize;
    let mut total_errors = 0usize;
    for &(kind, _) in mix() {
        let Some(s) = soak.get(&kind) else { continue };
        let mut l = s.latencies_us.clone();
        l.sort_unstable();
        total_ops += l.len();
        total_errors += s.errors.len();
        kinds.push(json!({
            "kind": kind.name(), "ops": l.len(), "errors": s.errors.len(),
            "p50_ms": percentile(&l, 0.5) as f64 / 1000.0,
            "p99_ms": percentile(&l, 0.99) as f64 / 1000.0,
            "first_errors": s.errors.iter().take(3).collect::<Vec<_>>(),
        }));
    }
    let q = rss.len() / 4;
    let second_quarter: Vec<u64> = rss[q..2 * q].iter().map(|r| r.1).collect();
    let last_quarter: Vec<u64> = rss[rss.len() - q..].iter().map(|r| r.1).collect();
    let (warm, last) = (median(&second_quarter), median(&last_quarter));
    let report = json!({
        "calibrate_seconds": calibrate, "capacity_ops_per_s": capacity,
        "target_ops_per_s": rate, "duration_s": elapsed, "issued": issued,
        "achieved_ops_per_s": total_ops as f64 / elapsed,
        "ops": total_ops, "errors": total_errors,
        "error_rate": total_errors as f64 / total_ops.max(1) as f64,
        "kinds": kinds,
        "payouts": payouts.len(), "payouts_not_completed": incomplete.len(),
        "paid_served": paid, "upstream_hits": upstream.hits(),
        "rss_kb": rss.iter().map(|(t, kb)| json!([(t * 10.0).round() / 10.0, kb])).collect::<Vec<_>>(),
        "rss_median_second_quarter_kb": warm, "rss_median_last_quarter_kb": last,
    });
    let pretty = serde_json::to_string_pretty(&report).unwrap();
    println!("{pretty}");
    if let Ok(path) = std::env::var("PAYGATE_SOAK_REPORT") {
        std::fs::write(path, &pretty).expect("write soak report");
    }

    assert_eq!(total_errors, 0, "errors during the soak:\n{pretty}");
    assert!(total_ops as u64 == issued, "{pretty}");
    assert!(incomplete.is_empty(), "payouts not completed:\n{pretty}");
    // Each successful paid call (calibration included) reached the upstream exactly once.
    assert_eq!(upstream.hits() as u64, paid, "{pretty}");
    assert!(
        last <= warm + warm / 10 + 8 * 1024,
        "RSS grew: second quarter {warm} KiB, last quarter {last} KiB\n{pretty}"
    );
    let log = ctx.gw.log();
    assert!(!log.contains("panicked"), "{log}");
}
