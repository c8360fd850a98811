//! How much CPU the store spends per committed voucher: `writers` channels (32 by default), each
//! written by its own task on one thread (as that many connections, each its own channel, do on
//! one proxy thread), one charges-only compare-and-set a voucher, each durable (concurrent
//! writers share flushes, or PostgreSQL statements). `cargo run --release -p paygate-store
//! --example channel_writes [writes per channel] [writers] [full] [flush]` (`full`: whole-record
//! writes instead; `flush`: sled without its voucher journal, each write waiting for a flush of
//! sled's log). On sled in a temp dir; on PostgreSQL when `PAYGATE_DATABASE_URL` names one (a
//! scratch database: its channels table is emptied), the server's CPU reported beside.

use paygate_domain::channel::{ChannelOpening, ChannelRecord};
use paygate_store::postgres::{PgSettings, PgStore};
use paygate_store::{ChannelStore, SledOptions, SledStore};
use paygate_x402::batch::ChannelConfigWire;
use std::sync::Arc;

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / 100.0
}

/// CPU seconds of every `postgres` process this user can read (0 when none).
fn postgres_cpu_seconds() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let tick = |stat: &str| -> Option<f64> {
        let (name, rest) = stat.split_once(" (")?.1.split_once(") ")?;
        if !name.starts_with("postgres") {
            return None;
        }
        let f: Vec<&str> = rest.split_whitespace().collect();
        Some(f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?)
    };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
        .filter_map(|s| tick(&s))
        .sum::<f64>()
        / 100.0
}

async fn open_store(dir: &std::path::Path, flush: bool) -> Arc<dyn ChannelStore> {
    let Ok(url) = std::env::var("PAYGATE_DATABASE_URL") else {
        let mut options = SledOptions::default();
        if flush {
            options.voucher_sync = None;
        }
        return Arc::new(SledStore::open_with(dir, &options).expect("sled"));
    };
    let settings = PgSettings {
        url,
        pool_size: 16,
        statement_timeout: std::time::Duration::from_secs(10),
        acquire_timeout: std::time::Duration::from_secs(10),
    };
    let store = PgStore::open(&settings, |_| {}).await.expect("postgres");
    sqlx::query("DELETE FROM channels")
        .execute(store.pool())
        .await
        .expect("empty channels");
    Arc::new(store)
}

fn channel(i: usize) -> ChannelRecord {
    let mut c = ChannelRecord::opened(ChannelOpening {
        id: format!("0x{i:064x}"),
        org_id: "org_0123456789abcdef".into(),
        route_id: "rt_0123456789abcdef".into(),
        network: "eip155:84532".into(),
        config: ChannelConfigWire {
            payer: format!("0x{:040x}", i + 1),
            payer_authorizer: format!("0x{:040x}", i + 1),
            receiver: format!("0x{:040x}", 2),
            receiver_authorizer: format!("0x{:040x}", 3),
            token: format!("0x{:040x}", 4),
            withdraw_delay: 900,
            salt: format!("0x{:064x}", 0),
        },
        balance: 1_000_000_000,
        total_claimed: 0,
        now: "2026-11-25T00:00:00Z".into(),
    });
    c.owner = Some("node_0123456789abcdef".into());
    c.version = 1;
    c
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(2000);
    let conc: usize = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(32);
    let full = args.iter().any(|a| a == "full");
    let flush = args.iter().any(|a| a == "flush");
    let dir = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let store = open_store(dir.path(), flush).await;
        for i in 0..conc {
            store.put_channel_if(0, &channel(i)).await.expect("create");
        }
        let (c0, p0, t0) = (
            cpu_seconds(),
            postgres_cpu_seconds(),
            std::time::Instant::now(),
        );
        let tasks: Vec<_> = (0..conc)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut read = channel(i);
                    read.charged = 1; // unclaimed from the first write on
                    read.version = 2;
                    store.put_channel_if(1, &read).await.expect("first");
                    for _ in 0..n {
                        let mut next = read.clone();
                        next.charged += 1_000;
                        next.voucher_max = next.charged;
                        next.voucher_signature = format!("0x{}", "ab".repeat(65));
                        next.requests += 1;
                        next.version += 1;
                        let ok = if full {
                            store.put_channel_if(read.version, &next).await
                        } else {
                            store.put_channel_charges_if(read.version, &next).await
                        };
                        assert!(ok.expect("write"));
                        read = next;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        let writes = (conc * n) as f64;
        println!(
            "{} writes: {:.1} us CPU, {:.1} us wall per write (PostgreSQL: {:.1} us CPU)",
            if full { "full" } else { "charges" },
            1e6 * (cpu_seconds() - c0) / writes,
            1e6 * t0.elapsed().as_secs_f64() / writes,
            1e6 * (postgres_cpu_seconds() - p0) / writes,
        );
    });
}
