//! A payment channel as paygate keeps it (x402 `batch-settlement`): the channel's terms, what
//! the chain holds for it, what paygate charged against it and the voucher that covers the
//! charge. One record per channel, written with compare-and-set on `version`.

use paygate_x402::batch::{ChannelConfigWire, ChannelFigures};
use serde::{Deserialize, Serialize};

/// Amounts are USDC base units, written as decimal strings (a `uint128` does not fit a JSON
/// number every reader handles).
mod amount {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u128, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One channel paying one organisation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelRecord {
    /// The channel id (`0x` and 64 lower-case hex digits).
    pub id: String,
    pub org_id: String,
    /// The route of the channel's first paid request.
    pub route_id: String,
    /// CAIP-2 id of the chain the channel lives on.
    pub network: String,
    pub config: ChannelConfigWire,
    /// What the chain holds for the channel (deposits less refunds and withdrawals).
    #[serde(with = "amount")]
    pub balance: u128,
    /// Everything deposited through paygate.
    #[serde(with = "amount")]
    pub deposited: u128,
    /// What the receiver claimed on chain (the contract's `totalClaimed`).
    #[serde(with = "amount")]
    pub total_claimed: u128,
    /// What paygate charged: the sum of every served request's charge.
    #[serde(with = "amount")]
    pub charged: u128,
    /// Refunded to the payer on chain.
    #[serde(with = "amount")]
    pub refunded: u128,
    /// The highest voucher the payer signed (at least `charged`) and its signature: what a
    /// claim presents.
    #[serde(with = "amount")]
    pub voucher_max: u128,
    pub voucher_signature: String,
    /// Requests served and charged on this channel.
    pub requests: u64,
    /// When the payer's withdrawal can be finalized (unix seconds), once one was initiated.
    pub withdraw_due: Option<u64>,
    /// The contract's refund nonce (the next cooperative refund signs this one).
    pub refund_nonce: u64,
    /// The node serving the channel's vouchers, and until when (unix milliseconds) no other
    /// node may take it over.
    pub owner: Option<String>,
    pub lease_until_ms: u64,
    /// Unix seconds of the oldest charge not yet claimed.
    pub unclaimed_since: Option<u64>,
    /// The last claim transaction.
    pub claim_transaction: Option<String>,
    /// Bumped by every write; a write names the version it read.
    pub version: u64,
    pub created_at: String,
    pub updated_at: String,
}

/// What a served request moves in a channel record, and nothing else: a backend may store it
/// apart from the rest, so the write that commits a voucher is small
/// ([`ChannelRecord::charges`], [`ChannelRecord::apply`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelCharges {
    pub version: u64,
    #[serde(with = "amount")]
    pub charged: u128,
    #[serde(with = "amount")]
    pub voucher_max: u128,
    pub voucher_signature: String,
    pub requests: u64,
    pub unclaimed_since: Option<u64>,
    pub owner: Option<String>,
    pub lease_until_ms: u64,
    pub updated_at: String,
}

/// Where a channel record starts: whose it is and what the chain holds for it.
pub struct ChannelOpening {
    pub id: String,
    pub org_id: String,
    pub route_id: String,
    pub network: String,
    pub config: ChannelConfigWire,
    pub balance: u128,
    pub total_claimed: u128,
    /// RFC 3339, the record's creation and update time.
    pub now: String,
}

impl ChannelRecord {
    /// A record not stored yet (version 0), charged up to what was claimed, nothing else moved.
    pub fn opened(o: ChannelOpening) -> Self {
        Self {
            id: o.id,
            org_id: o.org_id,
            route_id: o.route_id,
            network: o.network,
            config: o.config,
            balance: o.balance,
            deposited: 0,
            total_claimed: o.total_claimed,
            charged: o.total_claimed,
            refunded: 0,
            voucher_max: 0,
            voucher_signature: String::new(),
            requests: 0,
            withdraw_due: None,
            refund_nonce: 0,
            owner: None,
            lease_until_ms: 0,
            unclaimed_since: None,
            claim_transaction: None,
            version: 0,
            created_at: o.now.clone(),
            updated_at: o.now,
        }
    }

    /// The part of the record a served request moves.
    pub fn charges(&self) -> ChannelCharges {
        ChannelCharges {
            version: self.version,
            charged: self.charged,
            voucher_max: self.voucher_max,
            voucher_signature: self.voucher_signature.clone(),
            requests: self.requests,
            unclaimed_since: self.unclaimed_since,
            owner: self.owner.clone(),
            lease_until_ms: self.lease_until_ms,
            updated_at: self.updated_at.clone(),
        }
    }

    /// The record with `c` over the part a served request moves.
    pub fn apply(&mut self, c: ChannelCharges) {
        self.version = c.version;
        self.charged = c.charged;
        self.voucher_max = c.voucher_max;
        self.voucher_signature = c.voucher_signature;
        self.requests = c.requests;
        self.unclaimed_since = c.unclaimed_since;
        self.owner = c.owner;
        self.lease_until_ms = c.lease_until_ms;
        self.updated_at = c.updated_at;
    }

    /// Whether `self` differs from `read` only in what a served request moves.
    pub fn only_charges_moved_from(&self, read: &ChannelRecord) -> bool {
        let mut same = read.clone();
        same.apply(self.charges());
        same == *self
    }

    /// What the voucher checks need of the record.
    pub fn figures(&self) -> ChannelFigures {
        ChannelFigures {
            balance: self.balance,
            total_claimed: self.total_claimed,
            charged: self.charged,
            withdraw_due: self.withdraw_due,
        }
    }

    /// Charged and not yet claimed on chain.
    pub fn unclaimed(&self) -> u128 {
        self.charged.saturating_sub(self.total_claimed)
    }

    /// Whether `node` may serve the channel at `now_ms` without taking it over: it holds the
    /// lease, or nobody holds a live one.
    pub fn servable_by(&self, node: &str, now_ms: u64) -> bool {
        self.owner.as_deref().is_none_or(|o| o == node) || self.lease_until_ms <= now_ms
    }

    /// Whether `node` holds the lease at `now_ms` with `margin_ms` to spare.
    pub fn leased_to(&self, node: &str, now_ms: u64, margin_ms: u64) -> bool {
        self.owner.as_deref() == Some(node) && self.lease_until_ms > now_ms + margin_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_travel_as_strings_and_come_back_exact() {
        let mut r = ChannelRecord::opened(ChannelOpening {
            id: "0x01".into(),
            org_id: "org".into(),
            route_id: "rt".into(),
            network: "eip155:84532".into(),
            config: ChannelConfigWire {
                payer: "0x1".into(),
                payer_authorizer: "0x1".into(),
                receiver: "0x2".into(),
                receiver_authorizer: "0x3".into(),
                token: "0x4".into(),
                withdraw_delay: 900,
                salt: "0x00".into(),
            },
            balance: u128::MAX,
            total_claimed: 1,
            now: String::new(),
        });
        r.deposited = 5;
        r.charged = 3;
        r.voucher_max = 3;
        r.voucher_signature = "0x".into();
        r.requests = 3;
        r.owner = Some("n1".into());
        r.lease_until_ms = 10;
        r.unclaimed_since = Some(1);
        r.version = 1;
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["balance"], u128::MAX.to_string());
        let back: ChannelRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
        assert_eq!(r.unclaimed(), 2);
        assert!(r.servable_by("n1", 100) && r.servable_by("n2", 10) && !r.servable_by("n2", 9));
        assert!(r.leased_to("n1", 5, 4) && !r.leased_to("n1", 5, 5) && !r.leased_to("n2", 0, 0));
    }
}
