//! The receipts signed in the current second for requests served without a record of their
//! own, kept so each is signed once (`receipts.rs` signs them).

use std::sync::Mutex;

/// The receipts signed in the current second for requests served without a record of their own
/// (channel vouchers, calls in an access window), by what they say. A receipt's payload has no
/// field of the request's own (network, resource, payer, transaction, the second it was
/// issued), and its signature is deterministic (RFC 6979), so every such request of one payer
/// to one resource under one transaction in one second has the very same receipt: it is signed
/// once and given to each (issue 54: the signature was 28.5 us of a voucher's CPU).
#[derive(Default)]
pub(crate) struct RecentReceipts(Mutex<Recent>);

#[derive(Default)]
struct Recent {
    second: u64,
    /// `network \0 resource \0 payer \0 transaction` to the receipt's `extensions` value.
    signed: std::collections::HashMap<String, serde_json::Value>,
}

/// The most receipts kept for one second (beyond it, the second starts again).
const RECENT_RECEIPTS: usize = 16_384;

impl RecentReceipts {
    /// The receipt kept for `key` in second `now`.
    pub(super) fn get(&self, now: u64, key: &str) -> Option<serde_json::Value> {
        let recent = self.0.lock().ok()?;
        (recent.second == now)
            .then(|| recent.signed.get(key).cloned())
            .flatten()
    }

    /// Keeps `signed` for `key` in second `now` (an earlier second's are let go).
    pub(super) fn keep(&self, now: u64, key: String, signed: serde_json::Value) {
        let Ok(mut recent) = self.0.lock() else {
            return;
        };
        if recent.second != now || recent.signed.len() >= RECENT_RECEIPTS {
            recent.second = now;
            recent.signed.clear();
        }
        recent.signed.insert(key, signed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_is_kept_for_its_key_within_its_second_only() {
        let recent = RecentReceipts::default();
        let v = |n: u64| serde_json::json!({ "n": n });
        recent.keep(100, "a".into(), v(1));
        assert_eq!(recent.get(100, "a"), Some(v(1)));
        // Another payer, resource or transaction is another key.
        assert_eq!(recent.get(100, "b"), None);
        // The next second signs again (the receipt says when it was issued).
        assert_eq!(recent.get(101, "a"), None);
        recent.keep(101, "b".into(), v(2));
        assert_eq!(recent.get(100, "a"), None);
        assert_eq!(recent.get(101, "b"), Some(v(2)));
    }
}
