//! The scheme's messages as they travel: the payload's channel configuration, voucher and
//! deposit (strings throughout, parsed into domain types here), the channel and voucher state of
//! corrective 402s and payment responses, and the probe that tells a channel payment from any
//! other v2 payment.

use super::contract::{ChannelConfig, ChannelRejection, SCHEME};
pub use crate::extra::{ChannelStateWire, VoucherStateWire};
use alloy_primitives::{Address, B256, U256};

/// A channel configuration as it travels (addresses and salt as hex strings).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChannelConfigWire {
    pub payer: String,
    pub payer_authorizer: String,
    pub receiver: String,
    pub receiver_authorizer: String,
    pub token: String,
    pub withdraw_delay: u64,
    pub salt: String,
}

/// A signed voucher as it travels.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VoucherWire {
    pub channel_id: String,
    pub max_claimable_amount: String,
    pub signature: String,
}

/// A deposit's ERC-3009 `ReceiveWithAuthorization` (to the collector; the nonce is derived from
/// the channel id and this salt).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Erc3009DepositWire {
    pub valid_after: String,
    pub valid_before: String,
    pub salt: String,
    pub signature: String,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DepositAuthorizationWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erc3009_authorization: Option<Erc3009DepositWire>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permit2_authorization: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DepositWire {
    pub amount: String,
    pub authorization: DepositAuthorizationWire,
}

/// The scheme's payload (`payload` of a v2 payment): a deposit with its first voucher, a
/// voucher, or a zero-charge voucher asking for a cooperative refund.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(
    tag = "type",
    rename_all = "lowercase",
    rename_all_fields = "camelCase",
    try_from = "PayloadFields"
)]
pub enum ChannelPayloadWire {
    Deposit {
        channel_config: ChannelConfigWire,
        voucher: VoucherWire,
        deposit: DepositWire,
    },
    Voucher {
        channel_config: ChannelConfigWire,
        voucher: VoucherWire,
    },
    Refund {
        channel_config: ChannelConfigWire,
        voucher: VoucherWire,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        amount: Option<String>,
    },
}

impl ChannelPayloadWire {
    /// The channel configuration and voucher every payload type carries.
    pub fn parts(&self) -> (&ChannelConfigWire, &VoucherWire) {
        match self {
            Self::Deposit {
                channel_config,
                voucher,
                ..
            }
            | Self::Voucher {
                channel_config,
                voucher,
            }
            | Self::Refund {
                channel_config,
                voucher,
                ..
            } => (channel_config, voucher),
        }
    }

    /// The voucher's channel id.
    pub fn channel_id(&self) -> Result<B256, ChannelRejection> {
        b256_of(&self.parts().1.channel_id)
    }
}

/// The payload's fields read in one pass (serde reads an internally tagged enum by buffering
/// the whole payload first, on every voucher): `type` says which of them make the
/// [`ChannelPayloadWire`]; fields its type does not use are ignored, as the enum ignores them.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PayloadFields {
    #[serde(rename = "type")]
    kind: String,
    channel_config: ChannelConfigWire,
    voucher: VoucherWire,
    #[serde(default)]
    deposit: Option<DepositWire>,
    #[serde(default)]
    amount: Option<String>,
}

impl TryFrom<PayloadFields> for ChannelPayloadWire {
    type Error = String;

    fn try_from(f: PayloadFields) -> Result<Self, String> {
        let (channel_config, voucher) = (f.channel_config, f.voucher);
        match f.kind.as_str() {
            "deposit" => Ok(Self::Deposit {
                channel_config,
                voucher,
                deposit: f.deposit.ok_or("missing field `deposit`")?,
            }),
            "voucher" => Ok(Self::Voucher {
                channel_config,
                voucher,
            }),
            "refund" => Ok(Self::Refund {
                channel_config,
                voucher,
                amount: f.amount,
            }),
            other => Err(format!(
                "unknown variant `{other}`, expected one of `deposit`, `voucher`, `refund`"
            )),
        }
    }
}

/// The scheme a v2 payment names (the rest is skipped unread: an `exact` payment pays for no
/// more than this look).
#[derive(serde::Deserialize)]
struct HeaderProbe {
    accepted: AcceptedProbe,
}

/// A v2 payment naming `batch-settlement`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChannelMessage {
    x402_version: u8,
    payload: ChannelPayloadWire,
}

#[derive(serde::Deserialize)]
struct AcceptedProbe {
    scheme: String,
}

/// The channel payload of a v2 payment's JSON (a decoded `PAYMENT-SIGNATURE`) when its
/// `accepted.scheme` is `batch-settlement`; `None` for any other scheme (or JSON that is not a
/// v2 payment at all: the `exact` decoder says what is wrong with it).
pub fn channel_payload(
    json: &[u8],
) -> Option<Result<ChannelPayloadWire, crate::payment::DecodeError>> {
    // The scheme first (a light scan): an `exact` payment pays for no more than this look.
    let probe: HeaderProbe = serde_json::from_slice(json).ok()?;
    if probe.accepted.scheme != SCHEME {
        return None;
    }
    Some(channel_message(json))
}

/// The channel payload of a v2 payment already known to name `batch-settlement`
/// ([`crate::payment::scheme_of`]).
pub fn channel_message(json: &[u8]) -> Result<ChannelPayloadWire, crate::payment::DecodeError> {
    let message = serde_json::from_slice::<ChannelMessage>(json)
        .map_err(|e| crate::payment::DecodeError::Json(2, e.to_string()));
    message.and_then(|m| match m.x402_version {
        2 => Ok(m.payload),
        other => Err(crate::payment::DecodeError::Version(other, 2)),
    })
}

pub(super) fn address_of(s: &str) -> Result<Address, ChannelRejection> {
    crate::address::parse_address(s).ok_or(ChannelRejection::Malformed)
}

pub(super) fn b256_of(s: &str) -> Result<B256, ChannelRejection> {
    s.parse().map_err(|_| ChannelRejection::Malformed)
}

pub(super) fn uint_of(s: &str) -> Result<U256, ChannelRejection> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ChannelRejection::Malformed);
    }
    U256::from_str_radix(s, 10).map_err(|_| ChannelRejection::Malformed)
}

pub(super) fn u128_of(s: &str) -> Result<u128, ChannelRejection> {
    u128::try_from(uint_of(s)?).map_err(|_| ChannelRejection::Malformed)
}

pub(super) fn bytes_of(s: &str) -> Result<alloy_primitives::Bytes, ChannelRejection> {
    s.parse().map_err(|_| ChannelRejection::Malformed)
}

impl From<&ChannelConfig> for ChannelConfigWire {
    fn from(c: &ChannelConfig) -> Self {
        Self {
            payer: c.payer.to_checksum(None),
            payer_authorizer: c.payerAuthorizer.to_checksum(None),
            receiver: c.receiver.to_checksum(None),
            receiver_authorizer: c.receiverAuthorizer.to_checksum(None),
            token: c.token.to_checksum(None),
            withdraw_delay: c.withdrawDelay.to::<u64>(),
            salt: format!("{:#x}", c.salt),
        }
    }
}

impl ChannelConfigWire {
    pub fn parse(&self) -> Result<ChannelConfig, ChannelRejection> {
        if self.withdraw_delay > u64::from(u32::MAX) {
            return Err(ChannelRejection::Malformed);
        }
        Ok(ChannelConfig {
            payer: address_of(&self.payer)?,
            payerAuthorizer: address_of(&self.payer_authorizer)?,
            receiver: address_of(&self.receiver)?,
            receiverAuthorizer: address_of(&self.receiver_authorizer)?,
            token: address_of(&self.token)?,
            withdrawDelay: alloy_primitives::aliases::U40::from(self.withdraw_delay),
            salt: b256_of(&self.salt)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payment::DecodeError;

    fn message(payload: serde_json::Value, scheme: &str) -> Vec<u8> {
        // `payload` before `accepted`, `type` last: the order must not matter.
        serde_json::to_vec(&serde_json::json!({
            "x402Version": 2,
            "payload": payload,
            "accepted": {"scheme": scheme, "network": "eip155:84532"},
        }))
        .unwrap()
    }

    fn fields() -> serde_json::Value {
        serde_json::json!({
            "channelConfig": {
                "payer": "0x1", "payerAuthorizer": "0x1", "receiver": "0x2",
                "receiverAuthorizer": "0x3", "token": "0x4", "withdrawDelay": 900, "salt": "0x00"
            },
            "voucher": {"channelId": "0x05", "maxClaimableAmount": "10", "signature": "0x06"},
        })
    }

    fn with(extra: serde_json::Value) -> serde_json::Value {
        let mut v = fields();
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    }

    #[test]
    fn each_payload_type_reads_without_buffering_and_others_are_refused() {
        let deposit = serde_json::json!({"amount": "100", "authorization": {}});
        let read = |v: serde_json::Value| channel_payload(&message(v, SCHEME));
        assert!(matches!(
            read(with(
                serde_json::json!({"deposit": deposit, "type": "deposit"})
            )),
            Some(Ok(ChannelPayloadWire::Deposit { .. }))
        ));
        // A voucher ignores fields its type does not use, as the tagged enum did.
        assert!(matches!(
            read(with(serde_json::json!({"amount": "1", "type": "voucher"}))),
            Some(Ok(ChannelPayloadWire::Voucher { .. }))
        ));
        assert!(matches!(
            read(with(serde_json::json!({"amount": "7", "type": "refund"}))),
            Some(Ok(ChannelPayloadWire::Refund { amount: Some(a), .. })) if a == "7"
        ));
        for bad in [
            with(serde_json::json!({"type": "deposit"})),
            with(serde_json::json!({"type": "settle"})),
            fields(),
        ] {
            assert!(
                matches!(read(bad.clone()), Some(Err(DecodeError::Json(2, _)))),
                "{bad}"
            );
        }
        // Another scheme's payment is not a channel payment, whatever it carries.
        assert!(channel_payload(&message(serde_json::json!({"x": 1}), "exact")).is_none());
        assert!(channel_payload(&message(
            with(serde_json::json!({"type": "voucher"})),
            "exact"
        ))
        .is_none());
        assert!(channel_payload(b"{}").is_none());
        // A channel payment of another version says so.
        let mut v1: serde_json::Value = serde_json::from_slice(&message(
            with(serde_json::json!({"type": "voucher"})),
            SCHEME,
        ))
        .unwrap();
        v1["x402Version"] = 1.into();
        assert!(matches!(
            channel_payload(&serde_json::to_vec(&v1).unwrap()),
            Some(Err(DecodeError::Version(1, 2)))
        ));
    }
}
