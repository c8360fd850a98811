//! A channel configuration already parsed: a channel's later payments carry the same strings,
//! and a node that parsed them once skips the parse (five checksummed addresses, a hash each)
//! and the channel id's hash on every voucher after the first.

use super::contract::ChannelConfig;
use super::wire::ChannelConfigWire;
use alloy_primitives::B256;

/// A configuration parsed from exactly these strings on this chain, with the channel id it
/// hashes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownConfig {
    wire: ChannelConfigWire,
    chain_id: u64,
    channel_id: B256,
    config: ChannelConfig,
}

impl KnownConfig {
    /// `config`, parsed from `wire`, hashed to `channel_id` on `chain_id`.
    pub(super) fn new(
        wire: &ChannelConfigWire,
        chain_id: u64,
        channel_id: B256,
        config: &ChannelConfig,
    ) -> Self {
        Self {
            wire: wire.clone(),
            chain_id,
            channel_id,
            config: config.clone(),
        }
    }

    /// The parsed configuration when `wire` is, string for string, the one parsed before for
    /// `channel_id` on `chain_id` (any other spelling is parsed anew: same input, same result).
    pub(super) fn config_for(
        &self,
        wire: &ChannelConfigWire,
        chain_id: u64,
        channel_id: B256,
    ) -> Option<&ChannelConfig> {
        (self.chain_id == chain_id && self.channel_id == channel_id && self.wire == *wire)
            .then_some(&self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{payer, wire};
    use super::super::{ChannelPayloadWire, ChannelPayment, ChannelRejection};

    fn lower_cased(w: &ChannelPayloadWire) -> ChannelPayloadWire {
        let mut json = serde_json::to_value(w).unwrap();
        let payer = json["channelConfig"]["payer"]
            .as_str()
            .unwrap()
            .to_lowercase();
        json["channelConfig"]["payer"] = payer.into();
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_known_configuration_gives_what_parsing_gives_and_only_for_the_same_strings() {
        let first = wire("100", &payer(), "voucher");
        let parsed = ChannelPayment::parse(&first, 84532).unwrap();
        let known = parsed.known(&first, 84532);
        let next = wire("200", &payer(), "voucher");
        assert_eq!(
            ChannelPayment::parse_known(&next, 84532, next.channel_id().unwrap(), Some(&known)),
            ChannelPayment::parse(&next, 84532)
        );
        // Another spelling of the same addresses is parsed anew (and still valid).
        let lower = lower_cased(&next);
        assert_eq!(
            ChannelPayment::parse_known(&lower, 84532, lower.channel_id().unwrap(), Some(&known))
                .unwrap()
                .config,
            parsed.config
        );
        // Another chain: the configuration hashes to another id, which the voucher does not name.
        assert_eq!(
            ChannelPayment::parse_known(&next, 8453, next.channel_id().unwrap(), Some(&known)),
            Err(ChannelRejection::ChannelIdMismatch)
        );
        // A payload naming another channel with the known strings is hashed and refused.
        let mut json = serde_json::to_value(&next).unwrap();
        json["voucher"]["channelId"] =
            format!("{:#x}", alloy_primitives::B256::repeat_byte(3)).into();
        let other: ChannelPayloadWire = serde_json::from_value(json).unwrap();
        assert_eq!(
            ChannelPayment::parse_known(&other, 84532, other.channel_id().unwrap(), Some(&known)),
            Err(ChannelRejection::ChannelIdMismatch)
        );
    }
}
