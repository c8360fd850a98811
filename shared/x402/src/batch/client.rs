//! The payer's side of a channel, for paygate's own clients (the load generator of
//! `make bench`, the tests' hand-made payments): the channel a payer opens on a route's
//! `batch-settlement` offer, its vouchers and ERC-3009 deposits, and the payment header that
//! carries them. Interop is proven with the official clients; this signs what they sign.

use super::{
    deposit_nonce, voucher_digest, ChannelConfig, ChannelConfigWire, ChannelPayloadWire,
    DepositAuthorizationWire, DepositWire, Erc3009DepositWire, ReceiveWithAuthorization,
    VoucherWire, ERC3009_COLLECTOR_ADDRESS,
};
use alloy_primitives::aliases::U40;
use alloy_primitives::{Address, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{Eip712Domain, SolStruct};
use base64::Engine;
use serde_json::Value;
use std::borrow::Cow;

/// A payer's channel on one offer.
#[derive(Debug, Clone)]
pub struct PayerChannel {
    pub config: ChannelConfig,
    pub chain_id: u64,
    /// The token's EIP-712 domain (for deposits).
    pub token_domain: Eip712Domain,
    /// The offer as the server sent it (echoed as `accepted`).
    pub accepted: Value,
}

fn address_of(v: &Value) -> Option<Address> {
    v.as_str()?.parse().ok()
}

impl PayerChannel {
    /// `payer`'s channel (told apart by `salt`) on `accepted`, a `batch-settlement`
    /// requirement as the server sent it; `None` when it is not one.
    pub fn for_offer(payer: Address, accepted: &Value, salt: B256) -> Option<Self> {
        let extra = &accepted["extra"];
        let chain_id = accepted["network"]
            .as_str()?
            .strip_prefix("eip155:")?
            .parse()
            .ok()?;
        let token = address_of(&accepted["asset"])?;
        let config = ChannelConfig {
            payer,
            payerAuthorizer: payer,
            receiver: address_of(&accepted["payTo"])?,
            receiverAuthorizer: address_of(&extra["receiverAuthorizer"])?,
            token,
            withdrawDelay: U40::from(extra["withdrawDelay"].as_u64()?),
            salt,
        };
        let token_domain = Eip712Domain::new(
            Some(Cow::Owned(extra["name"].as_str()?.to_string())),
            Some(Cow::Owned(extra["version"].as_str()?.to_string())),
            Some(U256::from(chain_id)),
            Some(token),
            None,
        );
        Some(Self {
            config,
            chain_id,
            token_domain,
            accepted: accepted.clone(),
        })
    }

    pub fn id(&self) -> B256 {
        self.config.channel_id(self.chain_id)
    }

    /// The voucher for `max` on `config`'s channel, signed by `signer`.
    pub fn voucher_on(
        config: &ChannelConfig,
        chain_id: u64,
        max: u128,
        signer: &PrivateKeySigner,
    ) -> VoucherWire {
        let id = config.channel_id(chain_id);
        let signature = signer
            .sign_hash_sync(&voucher_digest(chain_id, id, max))
            .map(|s| alloy_primitives::Bytes::from(s.as_bytes().to_vec()).to_string())
            .unwrap_or_default();
        VoucherWire {
            channel_id: format!("{id:#x}"),
            max_claimable_amount: max.to_string(),
            signature,
        }
    }

    /// A `voucher` payload for `max`, signed by `signer`.
    pub fn voucher(&self, max: u128, signer: &PrivateKeySigner) -> ChannelPayloadWire {
        ChannelPayloadWire::Voucher {
            channel_config: ChannelConfigWire::from(&self.config),
            voucher: Self::voucher_on(&self.config, self.chain_id, max, signer),
        }
    }

    /// A `deposit` payload of `amount` (its ERC-3009 authorization valid until `valid_before`,
    /// told apart by `salt`) with the first voucher of `max`, signed by `signer`.
    pub fn deposit(
        &self,
        amount: u128,
        max: u128,
        valid_before: u64,
        salt: U256,
        signer: &PrivateKeySigner,
    ) -> ChannelPayloadWire {
        let auth = ReceiveWithAuthorization {
            from: self.config.payer,
            to: ERC3009_COLLECTOR_ADDRESS,
            value: U256::from(amount),
            validAfter: U256::ZERO,
            validBefore: U256::from(valid_before),
            nonce: deposit_nonce(self.id(), salt),
        };
        let signature = signer
            .sign_hash_sync(&auth.eip712_signing_hash(&self.token_domain))
            .map(|s| alloy_primitives::Bytes::from(s.as_bytes().to_vec()).to_string())
            .unwrap_or_default();
        ChannelPayloadWire::Deposit {
            channel_config: ChannelConfigWire::from(&self.config),
            voucher: Self::voucher_on(&self.config, self.chain_id, max, signer),
            deposit: DepositWire {
                amount: amount.to_string(),
                authorization: DepositAuthorizationWire {
                    erc3009_authorization: Some(Erc3009DepositWire {
                        valid_after: "0".into(),
                        valid_before: valid_before.to_string(),
                        salt: format!("{:#x}", B256::from(salt)),
                        signature,
                    }),
                    permit2_authorization: None,
                },
            },
        }
    }

    /// The `PAYMENT-SIGNATURE` header carrying `payload` (any JSON, malformed ones included).
    pub fn header(&self, payload: &impl serde::Serialize) -> String {
        let message = serde_json::json!({
            "x402Version": 2,
            "accepted": self.accepted,
            "payload": payload,
        });
        base64::engine::general_purpose::STANDARD.encode(message.to_string())
    }
}
