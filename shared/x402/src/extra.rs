//! The `extra` object of a requirement: the token's EIP-712 domain, its transfer method, and
//! for `batch-settlement` the channel terms and the state a corrective `402` carries.

use serde::Serialize;

/// The `extra` object of a requirement: the token's EIP-712 domain name and version, and for
/// `batch-settlement` the channel terms (receiver authorizer, withdraw delay).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenExtra {
    pub name: String,
    pub version: String,
    /// `"permit2"` for a token paid through Permit2 (and every `upto` requirement); absent for
    /// EIP-3009.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset_transfer_method: Option<String>,
    /// `upto`: the one facilitator the payer's Permit2 witness lets settle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facilitator_address: Option<String>,
    /// The order of settlement and the resource (x402's payment flows): absent for the default
    /// `authorization` (verify, serve, settle); `"escrow"` for `auth-capture` (held before the
    /// resource, captured after it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_flow: Option<String>,
    /// `batch-settlement`'s terms and state (boxed: an `exact` requirement carries none).
    #[serde(
        flatten,
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "channel_extra"
    )]
    pub channel: Option<Box<ChannelExtra>>,
    /// `auth-capture`'s escrow terms (boxed: other requirements carry none).
    #[serde(
        flatten,
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "escrow_extra"
    )]
    pub escrow: Option<Box<EscrowExtra>>,
}

impl TokenExtra {
    /// Whether `other` states the same terms: an `assetTransferMethod` of `"eip3009"` (what
    /// some servers write out) is the same as none.
    pub fn same_terms(&self, other: &Self) -> bool {
        fn method(e: &TokenExtra) -> Option<&str> {
            e.asset_transfer_method
                .as_deref()
                .filter(|m| *m != EIP3009_METHOD)
        }
        self.name == other.name
            && self.version == other.version
            && method(self) == method(other)
            && self.facilitator_address == other.facilitator_address
            && self.channel == other.channel
    }
}

impl TokenExtra {
    /// The requirement's payment flow, `"authorization"` when none is named. Not one of the
    /// terms [`Self::same_terms`] compares: it orders the server's own steps (a facilitator
    /// settles the same transfer in any flow), and a payer's echo of it changes nothing paygate
    /// does; `auth-capture` refuses a flow other than its own.
    pub fn flow(&self) -> &str {
        self.payment_flow.as_deref().unwrap_or(AUTHORIZATION_FLOW)
    }
}

/// x402's default payment flow: verified before the resource, settled after it (never written
/// out).
pub const AUTHORIZATION_FLOW: &str = "authorization";

/// x402's `escrow` payment flow: settled (held) before the resource and again (captured) after.
pub const ESCROW_FLOW: &str = "escrow";

/// The `assetTransferMethod` of EIP-3009 payments (the default, when none is named).
pub const EIP3009_METHOD: &str = "eip3009";

/// A flattened `ChannelExtra` with none of its fields is no channel extra at all (so an `exact`
/// requirement read back equals the one rendered).
fn channel_extra<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Box<ChannelExtra>>, D::Error> {
    let e = <ChannelExtra as serde::Deserialize>::deserialize(d)?;
    Ok((e != ChannelExtra::default()).then(|| Box::new(e)))
}

/// A flattened `EscrowExtra` with none of its fields is none at all.
fn escrow_extra<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Box<EscrowExtra>>, D::Error> {
    let e = <EscrowExtra as serde::Deserialize>::deserialize(d)?;
    Ok((e != EscrowExtra::default()).then(|| Box::new(e)))
}

/// The `extra` fields of an `auth-capture` requirement: who may capture, void and refund (the
/// escrow's operator), the fee bounds and their recipient, the deadlines (unix seconds) and the
/// escrow contract.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EscrowExtra {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_authorizer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fee_recipient: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_deadline: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund_deadline: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_fee_bps: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_fee_bps: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_capture_escrow: Option<String>,
}

/// The `extra` fields of a `batch-settlement` requirement.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelExtra {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver_authorizer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withdraw_delay: Option<u64>,
    /// A corrective 402's channel state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_state: Option<ChannelStateWire>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voucher_state: Option<VoucherStateWire>,
}

/// A channel's state as the scheme's messages carry it (the corrective 402's
/// `extra.channelState`, the payment response's `extra.channelState`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelStateWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_claimed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withdraw_requested_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund_nonce: Option<String>,
    pub charged_cumulative_amount: String,
}

/// The highest voucher the server holds for a channel (the corrective 402's
/// `extra.voucherState`): the client checks its signature and resumes from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VoucherStateWire {
    pub signed_max_claimable: String,
    pub signature: String,
}
