//! Reproduces, without paygate, the memory growth the soak finds: sled 0.34 (the store paygate
//! is built on) keeps resident memory in proportion to the records it holds, whatever its page
//! cache is set to, when records arrive in random key order (idempotency keys, hashes, provider
//! ids); in time-ordered key order it stays nearly flat.
//!
//! `cargo run --release -p paygate-store --example sled_memory -- [records] [value bytes]
//! [cache MiB] [random|sequential]` (defaults: 200000 400 1 random). Each record is one insert
//! into each of two trees and a flush, as a store step is; RSS is printed eight times.

use std::time::Instant;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A well-mixed 64-bit value (splitmix64 finaliser): random-looking but repeatable keys.
fn mix(i: u64) -> u64 {
    let mut x = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: u64| -> Result<u64, Box<dyn std::error::Error>> {
        Ok(args
            .get(i)
            .map(|s| s.parse())
            .transpose()?
            .unwrap_or(default))
    };
    let records = arg(0, 200_000)?.max(8);
    let value_bytes = usize::try_from(arg(1, 400)?)?;
    let cache_mib = arg(2, 1)?.max(1);
    let random = args.get(3).is_none_or(|s| s != "sequential");

    let dir = tempfile::tempdir()?;
    let db = sled::Config::new()
        .path(dir.path())
        .cache_capacity(cache_mib << 20)
        .mode(sled::Mode::HighThroughput)
        .open()?;
    let (a, b) = (db.open_tree("a")?, db.open_tree("b")?);
    let value = vec![7u8; value_bytes];
    println!(
        "{records} records x 2 trees, {value_bytes}-byte values, {cache_mib} MiB cache, {} keys",
        if random { "random" } else { "sequential" }
    );
    println!("records,rss_kib");
    println!("0,{}", rss_kib());
    let started = Instant::now();
    for i in 0..records {
        let (ka, kb) = if random {
            (mix(i), mix(i + records))
        } else {
            (i, i)
        };
        a.insert(format!("{ka:016x}"), value.as_slice())?;
        b.insert(format!("{kb:016x}"), value.as_slice())?;
        db.flush()?;
        if (i + 1) % (records / 8) == 0 {
            println!("{},{}", i + 1, rss_kib());
        }
    }
    println!(
        "# {:.1} s; on disk {} MiB",
        started.elapsed().as_secs_f64(),
        db.size_on_disk()? >> 20
    );
    Ok(())
}
