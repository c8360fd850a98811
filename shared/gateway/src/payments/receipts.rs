//! Signed receipts (x402 `offer-and-receipt`) of settled payments, with the deployment's receipt
//! key (which signs the routes' offers too, `offers.rs`): signed from the record alone, so a
//! receipt can be issued again the same; and of channel vouchers and access-window calls, signed
//! as they are served.

use super::offers::Offers;
use super::PaymentService;
use std::sync::{Arc, Mutex};

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
    fn get(&self, now: u64, key: &str) -> Option<serde_json::Value> {
        let recent = self.0.lock().ok()?;
        (recent.second == now)
            .then(|| recent.signed.get(key).cloned())
            .flatten()
    }

    /// Keeps `signed` for `key` in second `now` (an earlier second's are let go).
    fn keep(&self, now: u64, key: String, signed: serde_json::Value) {
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

impl PaymentService {
    /// The signed receipt of a settled payment (x402 `offer-and-receipt`), where this deployment
    /// has a receipt key: the same for the same record (issued at the payment's time; the
    /// signature is deterministic), so `GET /api/payments/{id}/receipt` gives it again.
    pub fn signed_receipt(
        &self,
        record: &paygate_domain::model::GatewayPayment,
    ) -> Option<paygate_x402::offer_receipt::SignedReceipt> {
        let issued_at = time::OffsetDateTime::parse(
            &record.created_at,
            &time::format_description::well_known::Rfc3339,
        )
        .map_or(0, |t| t.unix_timestamp().max(0) as u64);
        self.sign_receipt(
            &record.network,
            &record.resource,
            &record.payer,
            issued_at,
            record.transaction.as_deref().unwrap_or_default(),
        )
    }

    /// The signed receipt, as a payment response's `extensions`, of a request served now that
    /// has no payment record of its own: a channel voucher's (its deposit's `transaction`, or
    /// none) and a call in an access window (none: the window's purchase had its own).
    pub(crate) fn receipt_extension(
        &self,
        network: &str,
        resource_url: &str,
        payer: &str,
        transaction: &str,
    ) -> Option<serde_json::Value> {
        self.receipt_key.as_ref()?;
        let now = paygate_domain::unix_now();
        let key = [network, resource_url, payer, transaction].join("\0");
        if let Some(kept) = self.recent_receipts.get(now, &key) {
            return Some(kept);
        }
        let signed = self
            .sign_receipt(network, resource_url, payer, now, transaction)?
            .extension();
        self.recent_receipts.keep(now, key, signed.clone());
        Some(signed)
    }

    /// A receipt signed with the deployment's receipt key, where it has one (deterministic: the
    /// same payload, the same signature).    /// A receipt signed with the deployment's receipt key, where it has one.
    fn sign_receipt(
        &self,
        network: &str,
        resource_url: &str,
        payer: &str,
        issued_at: u64,
        transaction: &str,
    ) -> Option<paygate_x402::offer_receipt::SignedReceipt> {
        let key = self.receipt_key.as_ref()?;
        paygate_x402::offer_receipt::ReceiptPayload {
            version: paygate_x402::offer_receipt::VERSION,
            network: network.to_string(),
            resource_url: resource_url.to_string(),
            payer: payer.to_string(),
            issued_at,
            transaction: transaction.to_string(),
        }
        .sign(key)
    }

    /// The address receipts are signed by (published at `/.well-known/did.json`).
    pub fn receipt_signer(&self) -> Option<alloy_primitives::Address> {
        self.receipt_key.as_ref().map(|k| k.address())
    }

    /// With receipts and offers signed by `key`.
    pub fn with_receipt_key(mut self, key: alloy_signer_local::PrivateKeySigner) -> Self {
        let key = Arc::new(key);
        self.offers = Some(Offers::new(key.clone()));
        self.receipt_key = Some(key);
        self
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
