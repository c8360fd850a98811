//! Payout funding on chain: each organisation's payout wallet (a key derived from the master
//! key and the organisation's id, never stored) pays the provider the quoted USDC by an EIP-3009
//! `transferWithAuthorization` that the configured facilitator settles.
//!
//! Exactly once: the authorization's nonce is fixed by the payout's id
//! ([`funding_nonce`]), and the token accepts a nonce once. Signing it again after a crash or a
//! timeout makes the same transfer, which the chain refuses the second time; a nonce already
//! used means the payout was funded (paygate never signs another transfer with it). The payout
//! record is written before anything is signed, so no USDC leaves without a payout to show.

use alloy_primitives::{keccak256, Address, B256, U256};
use alloy_sol_types::SolCall;
use async_trait::async_trait;
use paygate_x402::facilitator::reads::{authorizationStateCall, balanceOfCall};
use paygate_x402::facilitator::{
    CallError, ChainCalls, Facilitator, FacilitatorError, PaymentRequest,
};
use paygate_x402::money::UsdcAmount;
use paygate_x402::network::Network;
use paygate_x402::payment::{PaymentPayload, ProtocolVersion};
use paygate_x402::verify::Rejection;
use paygate_x402::PaymentRequirements;
use std::sync::Arc;

/// How long a funding authorization stays valid (seconds).
const VALID_FOR: u64 = 600;

/// The nonce of payout `payout_id`'s funding authorization.
pub fn funding_nonce(payout_id: &str) -> B256 {
    keccak256(format!("paygate/payout-funding/v1/{payout_id}"))
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FundingError {
    /// Nothing moved and nothing will: e.g. the wallet cannot cover it.
    #[error("the funding transfer was refused: {0}")]
    Refused(String),
    /// The chain or the facilitator did not answer, or the outcome is unknown: try again (the
    /// nonce makes that safe).
    #[error("the funding transfer's outcome is unknown: {0}")]
    Unavailable(String),
}

/// What funds payouts.
#[async_trait]
pub trait PayoutFunding: Send + Sync + 'static {
    /// The organisation's payout wallet.
    fn wallet(&self, org_id: &str) -> Address;
    /// The network and token it pays with (CAIP-2 id, token address).
    fn network(&self) -> &Network;
    /// The wallet's USDC balance.
    async fn balance(&self, org_id: &str) -> Result<UsdcAmount, FundingError>;
    /// Moves `amount` from the organisation's payout wallet to `to` for payout `payout_id`,
    /// once whatever the number of calls: the transaction when this call sent it, `None` when an
    /// earlier attempt did.
    async fn fund(
        &self,
        org_id: &str,
        payout_id: &str,
        to: Address,
        amount: UsdcAmount,
    ) -> Result<Option<B256>, FundingError>;
}

/// Payout wallets derived from the master key, paid out through a facilitator, read through
/// the chain.
pub struct ChainFunding {
    /// The master key, hex (from the environment); never logged (no `Debug`).
    master: String,
    network: Network,
    facilitator: Arc<dyn Facilitator>,
    chain: Arc<dyn ChainCalls>,
}

fn call_error(e: CallError) -> FundingError {
    FundingError::Unavailable(e.to_string())
}

impl ChainFunding {
    /// `None` when the master key is not one.
    pub fn new(
        master_hex: &str,
        network: Network,
        facilitator: Arc<dyn Facilitator>,
        chain: Arc<dyn ChainCalls>,
    ) -> Option<Self> {
        paygate_domain::secrets::payout_wallet_from_master(master_hex, "probe")?;
        Some(Self {
            master: master_hex.trim().to_string(),
            network,
            facilitator,
            chain,
        })
    }

    fn signer(&self, org_id: &str) -> alloy_signer_local::PrivateKeySigner {
        // The master key was checked in `new`.
        paygate_domain::secrets::payout_wallet_from_master(&self.master, org_id)
            .unwrap_or_else(|| unreachable!("checked master key"))
    }

    async fn used(&self, from: Address, nonce: B256) -> Result<bool, FundingError> {
        authorization_used(self.chain.as_ref(), &self.network, from, nonce).await
    }
}

/// Whether `from`'s EIP-3009 authorization with `nonce` was used on `network`'s token (what a
/// provider funded on chain checks before it moves a payment on).
pub async fn authorization_used(
    chain: &dyn ChainCalls,
    network: &Network,
    from: Address,
    nonce: B256,
) -> Result<bool, FundingError> {
    let data = authorizationStateCall {
        authorizer: from,
        nonce,
    }
    .abi_encode();
    let out = chain
        .view_call(network.config.chain_id, network.config.asset, data)
        .await
        .map_err(call_error)?;
    authorizationStateCall::abi_decode_returns(&out)
        .map_err(|e| FundingError::Unavailable(format!("authorizationState: {e}")))
}

#[async_trait]
impl PayoutFunding for ChainFunding {
    fn wallet(&self, org_id: &str) -> Address {
        self.signer(org_id).address()
    }

    fn network(&self) -> &Network {
        &self.network
    }

    async fn balance(&self, org_id: &str) -> Result<UsdcAmount, FundingError> {
        let data = balanceOfCall {
            account: self.wallet(org_id),
        }
        .abi_encode();
        let out = self
            .chain
            .view_call(
                self.network.config.chain_id,
                self.network.config.asset,
                data,
            )
            .await
            .map_err(call_error)?;
        let v: U256 = balanceOfCall::abi_decode_returns(&out)
            .map_err(|e| FundingError::Unavailable(format!("balanceOf: {e}")))?;
        Ok(UsdcAmount(u64::try_from(v).unwrap_or(u64::MAX)))
    }

    async fn fund(
        &self,
        org_id: &str,
        payout_id: &str,
        to: Address,
        amount: UsdcAmount,
    ) -> Result<Option<B256>, FundingError> {
        let signer = self.signer(org_id);
        let nonce = funding_nonce(payout_id);
        // Asked first, not left to the facilitator's refusal of a used nonce: once funded, the
        // wallet may no longer cover the amount, and the facilitator checks the balance too.
        if self.used(signer.address(), nonce).await? {
            return Ok(None);
        }
        let req = PaymentRequirements {
            network: self.network.clone(),
            amount,
            pay_to: to,
            resource: format!("paygate:payout:{payout_id}"),
            description: "payout funding".into(),
            mime_type: "application/json".into(),
            max_timeout_seconds: VALID_FOR,
            token: Default::default(),
        };
        let header = paygate_x402::sign::payment_header_with_nonce(
            &req,
            &signer,
            paygate_domain::unix_now(),
            nonce,
        )
        .map_err(|e| FundingError::Refused(format!("signing: {e}")))?;
        let payment = PaymentPayload::decode(header.as_bytes(), ProtocolVersion::V2)
            .map_err(|e| FundingError::Refused(format!("authorization: {e}")))?;
        let auth = payment
            .authorization()
            .map_err(|e| FundingError::Refused(format!("authorization: {e}")))?;
        let settled = self
            .facilitator
            .settle(&PaymentRequest {
                payment: &payment,
                auth: &auth,
                requirements: &req,
            })
            .await;
        match settled {
            Ok(s) => Ok(Some(s.transaction)),
            // A concurrent attempt made it.
            Err(FacilitatorError::Rejected(Rejection::NonceReplay)) => Ok(None),
            Err(FacilitatorError::Rejected(r)) => Err(FundingError::Refused(r.to_string())),
            Err(e) => Err(FundingError::Unavailable(e.to_string())),
        }
    }
}

/// Gas for one relayed `transferWithAuthorization` (as the embedded facilitator allows).
const TRANSFER_GAS: u64 = 200_000;

/// Sends `amount` of `network`'s USDC from `signer`'s address to `to` by an EIP-3009
/// authorization with `nonce`, through the relayer's `chain` calls: what a provider funded on
/// chain does to give a payout's USDC back. Once per nonce: `None` when that nonce was used
/// already, else the transaction.
pub async fn send_authorized(
    chain: &dyn ChainCalls,
    network: &Network,
    signer: &alloy_signer_local::PrivateKeySigner,
    to: Address,
    amount: UsdcAmount,
    nonce: B256,
) -> Result<Option<B256>, FundingError> {
    use alloy_signer::SignerSync;
    let from = signer.address();
    if authorization_used(chain, network, from, nonce).await? {
        return Ok(None);
    }
    let now = paygate_domain::unix_now();
    let mut auth = paygate_x402::payment::SignedAuthorization {
        from,
        to,
        value: U256::from(amount.0),
        valid_after: U256::from(now.saturating_sub(60)),
        valid_before: U256::from(now + VALID_FOR),
        nonce,
        signature: Default::default(),
    };
    let domain = alloy_sol_types::eip712_domain! {
        name: network.config.eip712_name.clone(),
        version: network.config.eip712_version.clone(),
        chain_id: network.config.chain_id,
        verifying_contract: network.config.asset,
    };
    let sig = signer
        .sign_hash_sync(&paygate_x402::verify::signing_hash(&auth, &domain))
        .map_err(|e| FundingError::Refused(format!("signing: {e}")))?;
    auth.signature = sig.as_bytes().to_vec().into();
    let data = paygate_x402::facilitator::embedded::transfer_call_data(&auth);
    match chain
        .send_call(
            network.config.chain_id,
            network.config.asset,
            data,
            TRANSFER_GAS,
        )
        .await
    {
        Ok(tx) => Ok(Some(tx)),
        Err(CallError::Reverted(why)) => Err(FundingError::Refused(why)),
        Err(e) => Err(FundingError::Unavailable(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payout_has_one_funding_nonce() {
        assert_eq!(funding_nonce("po_1"), funding_nonce("po_1"));
        assert_ne!(funding_nonce("po_1"), funding_nonce("po_2"));
    }
}
