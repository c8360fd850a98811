//! Identifier generation: time-ordered ids for records, cheap unique ids for requests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// A new time-ordered record id with a readable prefix, e.g. `rt_0192...`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// A random UUID in its canonical hyphenated form (for ids another system's API expects as
/// UUIDs).
pub fn uuid_v4() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

/// The lowest id `prefix` gives at `unix_ms` and after (ids from [`new_id`] sort by time, their
/// first 48 bits being UUIDv7's milliseconds): a time range's bound as an id.
pub fn time_bound(prefix: &str, unix_ms: u64) -> String {
    format!(
        "{prefix}_{:012x}{}",
        unix_ms & 0xffff_ffff_ffff,
        "0".repeat(20)
    )
}

static REQ_PREFIX: OnceLock<String> = OnceLock::new();
static REQ_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A request id unique across restarts: a random per-process prefix and a counter.
/// Cheaper than a UUID per request on the hot path.
pub fn new_request_id() -> String {
    let prefix = REQ_PREFIX.get_or_init(|| {
        let r: u64 = rand::random();
        format!("req_{r:016x}")
    });
    let n = REQ_COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{n:08x}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_id_sorts_between_the_time_bounds_around_it() {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let id = super::new_id("pay");
        let lo = super::time_bound("pay", before);
        let hi = super::time_bound("pay", before + 60_000);
        assert!(lo <= id && id < hi, "{lo} {id} {hi}");
        assert_eq!(lo.len(), id.len());
    }

    #[test]
    fn request_ids_differ() {
        let a = super::new_request_id();
        let b = super::new_request_id();
        assert_ne!(a, b);
        assert!(a.starts_with("req_"));
    }

    #[test]
    fn record_ids_are_time_ordered() {
        let a = super::new_id("rt");
        let b = super::new_id("rt");
        assert!(b > a, "{b} should sort after {a}");
    }
}
