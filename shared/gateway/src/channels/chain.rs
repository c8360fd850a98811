//! The channels' calls to the chain: the settlement contract's figures for a channel, any
//! read-only contract call, a smart wallet's signature check (EIP-1271, ERC-6492), deposits
//! (a counterfactual payer's wallet deployed first) and the
//! `multicall` transactions of claims and refunds.

use super::{unavailable, ChannelRefusal, Channels, DEPOSIT_GAS};
use alloy_primitives::{Address, B256};
use alloy_sol_types::SolCall;
use paygate_x402::batch::{self, ChannelPayment, ChannelRejection, IBatchSettlement};
use paygate_x402::facilitator::CallError;

impl Channels {
    /// A signature the signer's own key did not make, asked of the chain: valid when the signer
    /// is a smart wallet that accepts it (EIP-1271 `isValidSignature`); `rejection` otherwise
    /// (an account without code answers nothing). Nothing to ask: `Ok`.
    pub(super) async fn chain_checked(
        &self,
        chain_id: u64,
        check: Option<batch::ChainCheck>,
        rejection: ChannelRejection,
    ) -> Result<(), ChannelRefusal> {
        let Some(c) = check else { return Ok(()) };
        let valid = self
            .chain
            .wallet_accepts(chain_id, c.signer, c.digest, c.signature)
            .await
            .map_err(unavailable)?;
        if valid {
            Ok(())
        } else {
            Err(ChannelRefusal::rejected(rejection))
        }
    }

    /// `(balance, totalClaimed)` of a channel on chain.
    pub(super) async fn on_chain(
        &self,
        chain_id: u64,
        id: B256,
    ) -> Result<(u128, u128), ChannelRefusal> {
        let call = IBatchSettlement::channelsCall { channelId: id };
        let r = self.view(chain_id, batch::SETTLEMENT_ADDRESS, call).await?;
        Ok((r.balance, r.totalClaimed))
    }

    /// A read-only `call` to `to` on `chain_id`, decoded.
    pub(super) async fn view<C: SolCall>(
        &self,
        chain_id: u64,
        to: Address,
        call: C,
    ) -> Result<C::Return, ChannelRefusal> {
        let out = self
            .chain
            .view_call(chain_id, to, call.abi_encode())
            .await
            .map_err(unavailable)?;
        C::abi_decode_returns(&out).map_err(unavailable)
    }

    /// Sends the deposit on chain; the channel's figures on chain afterwards.
    pub(super) async fn deposit(
        &self,
        payment: &ChannelPayment,
        d: &batch::Erc3009Deposit,
        chain_id: u64,
    ) -> Result<(B256, (u128, u128)), ChannelRefusal> {
        // A counterfactual wallet is deployed first; the collector sees its inner signature.
        let signature = match self
            .chain
            .deploy_payer(
                chain_id,
                payment.config.payer,
                &d.signature,
                (payment.config.token, alloy_primitives::U256::from(d.amount)),
            )
            .await
        {
            Ok(signature) => signature,
            Err(CallError::Reverted(m)) if m == paygate_x402::facilitator::UNCOVERED_PAYER => {
                return Err(ChannelRefusal::DepositFailed(m));
            }
            Err(CallError::Reverted(m)) => {
                tracing::debug!(error = %m, "payer wallet deployment refused");
                return Err(ChannelRefusal::rejected(ChannelRejection::DepositSignature));
            }
            Err(other) => return Err(unavailable(other)),
        };
        let d = batch::Erc3009Deposit {
            signature,
            ..d.clone()
        };
        let call = batch::deposit_call(&payment.config, &d);
        let tx = self
            .chain
            .send_call(
                chain_id,
                batch::SETTLEMENT_ADDRESS,
                call.abi_encode(),
                DEPOSIT_GAS,
            )
            .await
            .map_err(|e| match e {
                CallError::Reverted(m) => {
                    tracing::debug!(error = %m, "deposit reverted");
                    ChannelRefusal::DepositFailed(
                        "the deposit's transfer was refused (authorization used, expired, or \
                         funds missing)"
                            .into(),
                    )
                }
                other => {
                    tracing::warn!(error = %other, "deposit not sent");
                    unavailable(other)
                }
            })?;
        let figures = self.on_chain(chain_id, payment.channel_id).await?;
        Ok((tx, figures))
    }

    /// Sends `calls` to the settlement contract in one `multicall` transaction.
    pub(super) async fn multicall(
        &self,
        chain_id: u64,
        calls: Vec<alloy_primitives::Bytes>,
        gas: u64,
    ) -> Result<B256, CallError> {
        self.chain
            .send_call(
                chain_id,
                batch::SETTLEMENT_ADDRESS,
                IBatchSettlement::multicallCall { data: calls }.abi_encode(),
                gas,
            )
            .await
    }
}
