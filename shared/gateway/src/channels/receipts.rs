//! What a channel payment's answers carry: the payment response (`PAYMENT-RESPONSE`) of a
//! charge, and the channel's state as the scheme's messages (and corrective 402s) carry it.

use alloy_primitives::B256;
use paygate_domain::channel::ChannelRecord;
use paygate_x402::batch::{ChannelStateWire, VoucherStateWire};
use paygate_x402::facilitator::wire::SettleResponse;

/// A committed charge: what was charged and the payment response saying so.
#[derive(Debug, Clone)]
pub struct ChannelReceipt {
    pub charged: u128,
    /// The `PAYMENT-RESPONSE` header's content (its `extensions` left for a signed receipt).
    pub response: SettleResponse,
}

impl ChannelReceipt {
    /// The charge of `charged` committed on `record`, with `deposit` (its transaction and
    /// amount) when the request carried one. The header is the scheme's payment response
    /// contract (base64 JSON): `extra.chargedAmount` and `extra.channelState`, an empty
    /// `transaction` for a voucher alone; with a deposit, its transaction and (`amount`) what
    /// it moved.
    pub fn new(charged: u128, record: &ChannelRecord, deposit: Option<(B256, u128)>) -> Self {
        let response = settle_response(
            record,
            deposit.map(|(tx, _)| tx),
            deposit.map(|(_, amount)| amount),
            serde_json::json!({
                "chargedAmount": charged.to_string(),
                "channelState": state_wire(record),
            }),
        );
        Self { charged, response }
    }

    /// The `PAYMENT-RESPONSE` header's value.
    pub fn header(&self) -> String {
        encoded(&self.response)
    }
}

/// A successful settle response about `r`'s channel.
pub(super) fn settle_response(
    r: &ChannelRecord,
    transaction: Option<B256>,
    amount: Option<u128>,
    extra: serde_json::Value,
) -> SettleResponse {
    SettleResponse {
        success: true,
        error_reason: None,
        error_message: None,
        transaction: transaction.map(|t| format!("{t:#x}")).unwrap_or_default(),
        network: r.network.clone(),
        payer: Some(r.config.payer.clone()),
        amount: amount.map(|a| a.to_string()),
        extra: Some(extra),
        extensions: None,
    }
}

/// A settle response as a payment response header (base64 JSON).
pub(super) fn encoded(response: &SettleResponse) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .encode(serde_json::to_vec(response).unwrap_or_default())
}

/// A record's state as the scheme's messages carry it.
pub fn state_wire(r: &ChannelRecord) -> ChannelStateWire {
    ChannelStateWire {
        channel_id: Some(r.id.clone()),
        balance: Some(r.balance.to_string()),
        total_claimed: Some(r.total_claimed.to_string()),
        withdraw_requested_at: Some(
            r.withdraw_due
                .map_or(0, |due| due.saturating_sub(r.config.withdraw_delay)),
        ),
        refund_nonce: Some(r.refund_nonce.to_string()),
        charged_cumulative_amount: r.charged.to_string(),
    }
}

/// The record's highest voucher, for a corrective 402 (`None` before the first charge).
pub fn voucher_wire(r: &ChannelRecord) -> Option<VoucherStateWire> {
    (!r.voucher_signature.is_empty()).then(|| VoucherStateWire {
        signed_max_claimable: r.voucher_max.to_string(),
        signature: r.voucher_signature.clone(),
    })
}
