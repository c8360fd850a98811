//! The x402 `batch-settlement` scheme on EVM: payment channels. The payer deposits once into a
//! channel of the `x402BatchSettlement` contract, then signs a cumulative voucher per request
//! (`maxClaimableAmount` grows by each request's charge); the receiver claims many channels'
//! vouchers in one transaction later and settles the claimed sum to its wallet.
//!
//! This module holds the scheme's protocol facts, apart from any store or server: the canonical
//! contract addresses and limits, the EIP-712 types and digests (channel id, voucher, refund,
//! claim batch, the deposit's `ReceiveWithAuthorization`), the contract's ABI, and local voucher
//! verification (one secp256k1 recovery).

use crate::signature::check_eoa_signature;
use alloy_primitives::{Address, B256, U256};
use alloy_sol_types::{Eip712Domain, SolStruct, SolValue};
use std::borrow::Cow;

pub mod client;
mod contract;
mod known;
mod wire;
pub use contract::*;
pub use known::KnownConfig;
pub use wire::*;
use wire::{b256_of, bytes_of, u128_of, uint_of};

/// A signature the signer's own key did not make, for a signer that may be a smart wallet:
/// valid when `signer.isValidSignature(digest, signature)` answers [`EIP1271_MAGIC`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainCheck {
    pub signer: Address,
    pub digest: B256,
    pub signature: alloy_primitives::Bytes,
}

pub use crate::signature::{EIP1271_MAGIC, IERC1271};

/// The settlement contract's EIP-712 domain on `chain_id`.
pub fn settlement_domain(chain_id: u64) -> Eip712Domain {
    Eip712Domain::new(
        Some(Cow::Borrowed("x402 Batch Settlement")),
        Some(Cow::Borrowed("1")),
        Some(U256::from(chain_id)),
        Some(SETTLEMENT_ADDRESS),
        None,
    )
}

/// The EIP-712 signing hash of `message` under the settlement domain on `chain_id`; the
/// domain's separator is hashed once per chain and thread (a voucher takes two such hashes).
fn settlement_signing_hash(chain_id: u64, message: &impl SolStruct) -> B256 {
    thread_local! {
        static SEPARATOR: std::cell::Cell<Option<(u64, B256)>> = const { std::cell::Cell::new(None) };
    }
    let separator = SEPARATOR.with(|cached| match cached.get() {
        Some((id, separator)) if id == chain_id => separator,
        _ => {
            let separator = settlement_domain(chain_id).separator();
            cached.set(Some((chain_id, separator)));
            separator
        }
    });
    let mut input = [0u8; 66];
    input[..2].copy_from_slice(&[0x19, 0x01]);
    input[2..34].copy_from_slice(separator.as_slice());
    input[34..].copy_from_slice(message.eip712_hash_struct().as_slice());
    alloy_primitives::keccak256(input)
}

impl ChannelConfig {
    /// The channel id: the EIP-712 hash of this configuration under the settlement domain.
    pub fn channel_id(&self, chain_id: u64) -> B256 {
        settlement_signing_hash(chain_id, self)
    }

    /// Who signs this channel's vouchers: the payer authorizer, or the payer itself when none
    /// is named (then only the chain can check a smart wallet's signature).
    pub fn voucher_signer(&self) -> Address {
        if self.payerAuthorizer == Address::ZERO {
            self.payer
        } else {
            self.payerAuthorizer
        }
    }
}

/// The digest a payer signs for a voucher of `max` on `channel_id`.
pub fn voucher_digest(chain_id: u64, channel_id: B256, max: u128) -> B256 {
    settlement_signing_hash(
        chain_id,
        &Voucher {
            channelId: channel_id,
            maxClaimableAmount: max,
        },
    )
}

/// The digest the receiver authorizer signs for a cooperative refund.
pub fn refund_digest(chain_id: u64, channel_id: B256, nonce: U256, amount: u128) -> B256 {
    Refund {
        channelId: channel_id,
        nonce,
        amount,
    }
    .eip712_signing_hash(&settlement_domain(chain_id))
}

/// The digest the receiver authorizer signs to claim `claims` in one transaction.
pub fn claim_batch_digest(chain_id: u64, claims: &[ClaimEntry]) -> B256 {
    ClaimBatch {
        claims: claims.to_vec(),
    }
    .eip712_signing_hash(&settlement_domain(chain_id))
}

/// The ERC-3009 nonce of a deposit into `channel_id` with the payer's `salt`.
pub fn deposit_nonce(channel_id: B256, salt: U256) -> B256 {
    alloy_primitives::keccak256((channel_id, salt).abi_encode())
}

/// The collector's `collectorData` for an ERC-3009 deposit.
pub fn erc3009_collector_data(
    valid_after: U256,
    valid_before: U256,
    salt: U256,
    signature: &[u8],
) -> Vec<u8> {
    (
        valid_after,
        valid_before,
        salt,
        alloy_primitives::Bytes::copy_from_slice(signature),
    )
        .abi_encode_params()
}

/// The settlement contract's `deposit` of `d` into `config`'s channel through the ERC-3009
/// collector.
pub fn deposit_call(config: &ChannelConfig, d: &Erc3009Deposit) -> IBatchSettlement::depositCall {
    IBatchSettlement::depositCall {
        config: config.clone(),
        amount: d.amount,
        collector: ERC3009_COLLECTOR_ADDRESS,
        collectorData: erc3009_collector_data(d.valid_after, d.valid_before, d.salt, &d.signature)
            .into(),
    }
}

/// A deposit's ERC-3009 authorization in domain types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Erc3009Deposit {
    pub amount: u128,
    pub valid_after: U256,
    pub valid_before: U256,
    pub salt: U256,
    pub signature: alloy_primitives::Bytes,
}

/// What the payment asks of the channel besides its voucher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelAction {
    Deposit(Erc3009Deposit),
    Voucher,
    /// A cooperative refund of `amount` (all that is unclaimed when `None`).
    Refund(Option<u128>),
}

/// A channel payment, parsed: the channel, its signed voucher and what it asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelPayment {
    pub config: ChannelConfig,
    pub channel_id: B256,
    pub max_claimable: u128,
    pub signature: alloy_primitives::Bytes,
    pub action: ChannelAction,
}

/// What a route offers channels: the channel configuration it accepts, on one chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelOffer {
    pub receiver: Address,
    pub receiver_authorizer: Address,
    pub token: Address,
    pub withdraw_delay: u64,
}

/// A channel as the gateway last knew it (on-chain figures and what it charged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChannelFigures {
    pub balance: u128,
    pub total_claimed: u128,
    pub charged: u128,
    /// When the payer's withdrawal can be finalized (unix seconds), if one was initiated.
    pub withdraw_due: Option<u64>,
}

impl ChannelPayment {
    /// Parses a payload for `chain_id`: every field well-formed and the voucher's channel id the
    /// hash of the configuration sent with it.
    pub fn parse(wire: &ChannelPayloadWire, chain_id: u64) -> Result<Self, ChannelRejection> {
        Self::parse_known(wire, chain_id, wire.channel_id()?, None)
    }

    /// [`Self::parse`] of a payload whose voucher names `channel_id` (the caller read it, with
    /// [`ChannelPayloadWire::channel_id`], to find `known`), taking the configuration from
    /// `known` when the payload carries the very strings it was parsed from ([`Self::known`]
    /// makes one).
    pub fn parse_known(
        wire: &ChannelPayloadWire,
        chain_id: u64,
        channel_id: B256,
        known: Option<&KnownConfig>,
    ) -> Result<Self, ChannelRejection> {
        let (config_wire, voucher) = wire.parts();
        let config = match known.and_then(|k| k.config_for(config_wire, chain_id, channel_id)) {
            Some(config) => config.clone(),
            None => {
                let config = config_wire.parse()?;
                if channel_id != config.channel_id(chain_id) {
                    return Err(ChannelRejection::ChannelIdMismatch);
                }
                config
            }
        };
        let action = match wire {
            ChannelPayloadWire::Deposit { deposit, .. } => {
                let auth = deposit
                    .authorization
                    .erc3009_authorization
                    .as_ref()
                    .ok_or(ChannelRejection::Erc3009Required)?;
                ChannelAction::Deposit(Erc3009Deposit {
                    amount: u128_of(&deposit.amount)?,
                    valid_after: uint_of(&auth.valid_after)?,
                    valid_before: uint_of(&auth.valid_before)?,
                    salt: b256_of(&auth.salt)
                        .map(|b| U256::from_be_bytes(b.0))
                        .or_else(|_| uint_of(&auth.salt))?,
                    signature: bytes_of(&auth.signature)?,
                })
            }
            ChannelPayloadWire::Voucher { .. } => ChannelAction::Voucher,
            ChannelPayloadWire::Refund { amount, .. } => {
                ChannelAction::Refund(amount.as_deref().map(u128_of).transpose()?)
            }
        };
        Ok(Self {
            config,
            channel_id,
            max_claimable: u128_of(&voucher.max_claimable_amount)?,
            signature: bytes_of(&voucher.signature)?,
            action,
        })
    }

    /// What [`Self::parse_known`] takes to skip parsing `wire`'s configuration again: `wire`
    /// must be the payload this payment was parsed from on `chain_id`.
    pub fn known(&self, wire: &ChannelPayloadWire, chain_id: u64) -> KnownConfig {
        KnownConfig::new(wire.parts().0, chain_id, self.channel_id, &self.config)
    }

    /// The channel must be one the route offers: its receiver, receiver authorizer, token and
    /// withdraw delay.
    pub fn check_offer(&self, offer: &ChannelOffer) -> Result<(), ChannelRejection> {
        let c = &self.config;
        if c.receiver != offer.receiver {
            return Err(ChannelRejection::ReceiverMismatch);
        }
        if c.receiverAuthorizer != offer.receiver_authorizer {
            return Err(ChannelRejection::ReceiverAuthorizerMismatch);
        }
        if c.token != offer.token {
            return Err(ChannelRejection::TokenMismatch);
        }
        if c.withdrawDelay.to::<u64>() != offer.withdraw_delay {
            return Err(ChannelRejection::WithdrawDelayMismatch);
        }
        Ok(())
    }

    /// The voucher's signature: `Ok(None)` recovered to the payer authorizer (one recovery);
    /// `Ok(Some(check))` when the channel has no payer authorizer and the payer's own key did
    /// not sign it: the payer may be a smart wallet, which only the chain can ask (EIP-1271,
    /// as the contract's `SignatureChecker` does).
    pub fn check_voucher(&self, chain_id: u64) -> Result<Option<ChainCheck>, ChannelRejection> {
        let digest = voucher_digest(chain_id, self.channel_id, self.max_claimable);
        match check_eoa_signature(&digest, &self.signature, self.config.voucher_signer()) {
            Ok(()) => Ok(None),
            Err(_) if self.config.payerAuthorizer == Address::ZERO => Ok(Some(ChainCheck {
                signer: self.config.payer,
                digest,
                signature: self.signature.clone(),
            })),
            Err(_) => Err(ChannelRejection::VoucherSignature),
        }
    }

    /// The deposit's authorization, for the token whose EIP-712 domain is `token_domain`, at
    /// `now`: signed by the payer for this channel, not expiring within `min_validity` seconds.
    /// `Ok(Some(check))` when the payer's own key did not sign it: the payer may be a smart
    /// wallet, which only the chain can ask (the token checks EIP-1271 signatures too).
    pub fn check_deposit(
        &self,
        token_domain: &Eip712Domain,
        now: u64,
        min_validity: u64,
    ) -> Result<Option<ChainCheck>, ChannelRejection> {
        let ChannelAction::Deposit(d) = &self.action else {
            return Ok(None);
        };
        if d.valid_after > U256::from(now) {
            return Err(ChannelRejection::DepositNotYetValid);
        }
        if d.valid_before < U256::from(now.saturating_add(min_validity)) {
            return Err(ChannelRejection::DepositExpired);
        }
        let digest = ReceiveWithAuthorization {
            from: self.config.payer,
            to: ERC3009_COLLECTOR_ADDRESS,
            value: U256::from(d.amount),
            validAfter: d.valid_after,
            validBefore: d.valid_before,
            nonce: deposit_nonce(self.channel_id, d.salt),
        }
        .eip712_signing_hash(token_domain);
        Ok(
            check_eoa_signature(&digest, &d.signature, self.config.payer)
                .err()
                .map(|_| ChainCheck {
                    signer: self.config.payer,
                    digest,
                    signature: d.signature.clone(),
                }),
        )
    }

    /// The cumulative step against what the gateway knows of the channel (`figures`, with a
    /// deposit's amount already added to the balance): a paid voucher must be exactly
    /// `charged + price` (a refund's: `charged`), above what was claimed, within the balance,
    /// and the channel must not be withdrawing within `claim_lead` seconds of `now`.
    pub fn check_step(
        &self,
        figures: &ChannelFigures,
        price: u128,
        now: u64,
        claim_lead: u64,
    ) -> Result<(), ChannelRejection> {
        let expected = match self.action {
            ChannelAction::Refund(_) => figures.charged,
            _ => figures
                .charged
                .checked_add(price)
                .ok_or(ChannelRejection::CumulativeExceedsBalance)?,
        };
        if self.max_claimable != expected {
            return Err(ChannelRejection::CumulativeMismatch);
        }
        if !matches!(self.action, ChannelAction::Refund(_))
            && self.max_claimable <= figures.total_claimed
        {
            return Err(ChannelRejection::CumulativeBelowClaimed);
        }
        if self.max_claimable > figures.balance {
            return Err(ChannelRejection::CumulativeExceedsBalance);
        }
        if figures
            .withdraw_due
            .is_some_and(|due| due <= now.saturating_add(claim_lead))
        {
            return Err(ChannelRejection::WithdrawalDue);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::SignatureError;
    use alloy_primitives::address;
    use alloy_primitives::aliases::U40;
    use alloy_signer::SignerSync;
    use alloy_signer_local::PrivateKeySigner;

    fn config() -> ChannelConfig {
        ChannelConfig {
            payer: address!("70997970C51812dc3A010C7d01b50e0d17dc79C8"),
            payerAuthorizer: address!("70997970C51812dc3A010C7d01b50e0d17dc79C8"),
            receiver: address!("209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            receiverAuthorizer: address!("3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"),
            token: address!("036CbD53842c5426634e7929541eC2318f3dCF7e"),
            withdrawDelay: U40::from(900),
            salt: B256::ZERO,
        }
    }

    #[test]
    fn channel_id_depends_on_every_field_and_the_chain() {
        let base = config();
        let id = base.channel_id(84532);
        assert_ne!(id, base.channel_id(8453));
        let mut other = config();
        other.withdrawDelay = U40::from(901);
        assert_ne!(id, other.channel_id(84532));
        let mut other = config();
        other.salt = B256::repeat_byte(1);
        assert_ne!(id, other.channel_id(84532));
    }

    #[test]
    fn the_cached_separator_hashes_as_alloy_does_on_every_chain() {
        let c = config();
        let voucher = Voucher {
            channelId: B256::repeat_byte(7),
            maxClaimableAmount: 1_000,
        };
        // Alternating chains: the per-thread cache must follow the chain id.
        for chain_id in [84532, 8453, 84532, 1] {
            let domain = settlement_domain(chain_id);
            assert_eq!(c.channel_id(chain_id), c.eip712_signing_hash(&domain));
            assert_eq!(
                voucher_digest(chain_id, voucher.channelId, 1_000),
                voucher.eip712_signing_hash(&domain)
            );
        }
    }

    #[test]
    fn a_voucher_recovers_to_its_signer_only() {
        let key: PrivateKeySigner =
            "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
                .parse()
                .unwrap();
        let c = config();
        let digest = voucher_digest(84532, c.channel_id(84532), 1000);
        let sig = key.sign_hash_sync(&digest).unwrap().as_bytes();
        assert_eq!(
            check_eoa_signature(&digest, &sig, c.voucher_signer()),
            Ok(())
        );
        let other = voucher_digest(84532, c.channel_id(84532), 1001);
        assert_eq!(
            check_eoa_signature(&other, &sig, c.voucher_signer()),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            check_eoa_signature(&digest, &sig[..64], c.voucher_signer()),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            check_eoa_signature(
                &digest,
                &[sig.as_slice(), &[0; 32]].concat(),
                c.voucher_signer()
            ),
            Err(SignatureError::NotEoa)
        );
    }

    pub(super) fn wire(max: &str, key: &PrivateKeySigner, kind: &str) -> ChannelPayloadWire {
        let c = config();
        let id = c.channel_id(84532);
        let sig = key
            .sign_hash_sync(&voucher_digest(84532, id, max.parse().unwrap()))
            .unwrap()
            .as_bytes();
        let json = serde_json::json!({
            "type": kind,
            "channelConfig": {
                "payer": c.payer.to_checksum(None),
                "payerAuthorizer": c.payerAuthorizer.to_checksum(None),
                "receiver": c.receiver.to_checksum(None),
                "receiverAuthorizer": c.receiverAuthorizer.to_checksum(None),
                "token": c.token.to_checksum(None),
                "withdrawDelay": 900,
                "salt": format!("{:#x}", c.salt),
            },
            "voucher": {
                "channelId": format!("{id:#x}"),
                "maxClaimableAmount": max,
                "signature": format!("0x{}", alloy_primitives::hex::encode(sig)),
            },
        });
        serde_json::from_value(json).unwrap()
    }

    pub(super) fn payer() -> PrivateKeySigner {
        "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
            .parse()
            .unwrap()
    }

    #[test]
    fn a_voucher_is_one_exact_cumulative_step_within_the_balance() {
        let p = ChannelPayment::parse(&wire("300", &payer(), "voucher"), 84532).unwrap();
        assert_eq!(p.check_voucher(84532), Ok(None));
        let f = ChannelFigures {
            balance: 1000,
            total_claimed: 0,
            charged: 200,
            withdraw_due: None,
        };
        assert_eq!(p.check_step(&f, 100, 0, 60), Ok(()));
        // A step that skips or repeats: the corrective 402's reason.
        for charged in [100, 300, 150] {
            let f = ChannelFigures { charged, ..f };
            assert_eq!(
                p.check_step(&f, 100, 0, 60),
                Err(ChannelRejection::CumulativeMismatch)
            );
        }
        let f2 = ChannelFigures { balance: 299, ..f };
        assert_eq!(
            p.check_step(&f2, 100, 0, 60),
            Err(ChannelRejection::CumulativeExceedsBalance)
        );
        let f3 = ChannelFigures {
            total_claimed: 300,
            ..f
        };
        assert_eq!(
            p.check_step(&f3, 100, 0, 60),
            Err(ChannelRejection::CumulativeBelowClaimed)
        );
        // A withdrawal finishing before a claim could land refuses; a later one does not.
        let f4 = ChannelFigures {
            withdraw_due: Some(1_000),
            ..f
        };
        assert_eq!(
            p.check_step(&f4, 100, 950, 60),
            Err(ChannelRejection::WithdrawalDue)
        );
        assert_eq!(p.check_step(&f4, 100, 900, 60), Ok(()));
        // A refund's voucher repeats the charged amount.
        let r = ChannelPayment::parse(&wire("200", &payer(), "refund"), 84532).unwrap();
        assert_eq!(r.action, ChannelAction::Refund(None));
        assert_eq!(r.check_step(&f, 100, 0, 60), Ok(()));
    }

    #[test]
    fn forged_and_malformed_payloads_are_refused() {
        let other: PrivateKeySigner =
            "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a"
                .parse()
                .unwrap();
        let forged = ChannelPayment::parse(&wire("300", &other, "voucher"), 84532).unwrap();
        assert_eq!(
            forged.check_voucher(84532),
            Err(ChannelRejection::VoucherSignature)
        );
        // Without a payer authorizer the payer may be a smart wallet: the chain is asked.
        let mut c = config();
        c.payerAuthorizer = Address::ZERO;
        let id = c.channel_id(84532);
        let mut p = forged.clone();
        (p.config, p.channel_id) = (c.clone(), id);
        let digest = voucher_digest(84532, id, 300);
        assert_eq!(
            p.check_voucher(84532),
            Ok(Some(ChainCheck {
                signer: c.payer,
                digest,
                signature: forged.signature.clone()
            }))
        );
        // Another chain's id for the same configuration.
        assert_eq!(
            ChannelPayment::parse(&wire("300", &payer(), "voucher"), 8453),
            Err(ChannelRejection::ChannelIdMismatch)
        );
        let malformed: [fn(&mut ChannelConfigWire, &mut VoucherWire); 4] = [
            |_, v| v.max_claimable_amount = "-1".into(),
            |_, v| v.signature = "0xzz".into(),
            |c, _| c.payer = "0xnot-an-address".into(),
            |c, _| c.withdraw_delay = u64::MAX,
        ];
        for mutate in malformed {
            let mut w = wire("300", &payer(), "voucher");
            if let ChannelPayloadWire::Voucher {
                channel_config,
                voucher,
            } = &mut w
            {
                mutate(channel_config, voucher);
            }
            assert_eq!(
                ChannelPayment::parse(&w, 84532),
                Err(ChannelRejection::Malformed)
            );
        }
        assert!(serde_json::from_value::<ChannelPayloadWire>(
            serde_json::json!({"type": "claim", "claims": []})
        )
        .is_err());
    }

    #[test]
    fn the_deposit_nonce_binds_channel_and_salt() {
        let id = config().channel_id(84532);
        assert_ne!(
            deposit_nonce(id, U256::ZERO),
            deposit_nonce(id, U256::from(1))
        );
        assert_ne!(
            deposit_nonce(id, U256::ZERO),
            deposit_nonce(B256::ZERO, U256::ZERO)
        );
    }
}
