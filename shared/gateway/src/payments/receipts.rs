//! Signed receipts (x402 `offer-and-receipt`) of settled payments, with the deployment's receipt
//! key (which signs the routes' offers too, `offers.rs`): signed from the record alone, so a
//! receipt can be issued again the same; and of channel vouchers and access-window calls, signed
//! as they are served.

use super::offers::Offers;
use super::PaymentService;
use std::sync::Arc;

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
    /// same payload, the same signature).
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
