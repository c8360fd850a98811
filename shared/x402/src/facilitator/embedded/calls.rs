//! The embedded facilitator's contract calls beyond a token transfer ([`ChainCalls`]): sent from
//! the relayer (simulated first) or read, on the chains it settles on.

use super::node_errors::{is_revert, relayer_unfunded};
use super::{Broadcast, Chain, EmbeddedFacilitator};
use crate::facilitator::{CallError, ChainCalls, TxOutcome, LOG_SPAN};
use alloy_network::TransactionBuilder;
use alloy_primitives::{Address, B256};
use alloy_provider::Provider;
use alloy_rpc_types_eth::TransactionRequest;
use async_trait::async_trait;

impl EmbeddedFacilitator {
    fn call_chain(&self, chain_id: u64) -> Result<&Chain, CallError> {
        self.chains
            .get(&chain_id)
            .ok_or_else(|| CallError::Unavailable(format!("no RPC for chain {chain_id}")))
    }
}

#[async_trait]
impl ChainCalls for EmbeddedFacilitator {
    async fn send_call(
        &self,
        chain_id: u64,
        to: Address,
        data: Vec<u8>,
        gas_limit: u64,
    ) -> Result<B256, CallError> {
        self.send_call_told(chain_id, to, data, gas_limit, None)
            .await
    }

    async fn send_call_told(
        &self,
        chain_id: u64,
        to: Address,
        data: Vec<u8>,
        gas_limit: u64,
        sent: Option<tokio::sync::oneshot::Sender<B256>>,
    ) -> Result<B256, CallError> {
        let chain = self.call_chain(chain_id)?;
        let tx = TransactionRequest::default()
            .with_from(self.relayer)
            .with_to(to)
            .with_input(data);
        match chain.provider.call(tx.clone()).await {
            Ok(_) => {}
            Err(e) if relayer_unfunded(&e.to_string()) => {
                self.unfunded();
                return Err(CallError::Unavailable(
                    "the relayer cannot pay for gas".into(),
                ));
            }
            Err(e) if is_revert(&e) => return Err(CallError::Reverted(e.to_string())),
            Err(e) => return Err(CallError::Unavailable(e.to_string())),
        }
        self.broadcast(chain, tx, gas_limit, sent)
            .await
            .map_err(|e| match e {
                Broadcast::Unfunded => {
                    self.unfunded();
                    CallError::Unavailable("the relayer cannot pay for gas".into())
                }
                Broadcast::Unavailable(m) => CallError::Unavailable(m),
                Broadcast::Refused(m) => CallError::Reverted(m),
                Broadcast::Ambiguous(m) => CallError::Ambiguous(m),
                Broadcast::Pending(h, m) => CallError::Pending(h, m),
                Broadcast::Reverted(h) => CallError::Reverted(format!("transaction {h} reverted")),
            })
    }

    async fn view_call(
        &self,
        chain_id: u64,
        to: Address,
        data: Vec<u8>,
    ) -> Result<alloy_primitives::Bytes, CallError> {
        let chain = self.call_chain(chain_id)?;
        let tx = TransactionRequest::default().with_to(to).with_input(data);
        chain.provider.call(tx).await.map_err(|e| {
            if is_revert(&e) {
                CallError::Reverted(e.to_string())
            } else {
                CallError::Unavailable(e.to_string())
            }
        })
    }

    fn relayer(&self) -> Option<Address> {
        Some(self.relayer)
    }

    fn chain_ids(&self) -> Vec<u64> {
        self.chains.keys().copied().collect()
    }

    async fn has_code(&self, chain_id: u64, at: Address) -> Result<bool, CallError> {
        self.call_chain(chain_id)?
            .provider
            .get_code_at(at)
            .await
            .map(|code| !code.is_empty())
            .map_err(|e| CallError::Unavailable(e.to_string()))
    }

    fn take_deployment(&self, chain_id: u64, factory: Address) -> Result<(), CallError> {
        if self.deploys.check_key(&(chain_id, factory)).is_err() {
            tracing::warn!(%factory, "counterfactual wallet deployments capped for this minute");
            return Err(CallError::Unavailable(format!(
                "the relayer deploys at most {} wallets a minute through factory {factory}; try again shortly",
                super::DEPLOYS_PER_MINUTE
            )));
        }
        Ok(())
    }

    fn deploys_through(&self, chain_id: u64, factory: Address) -> bool {
        self.chains
            .get(&chain_id)
            .is_some_and(|c| c.network.config.smart_wallet_factories.contains(&factory))
    }

    async fn block_number(&self, chain_id: u64) -> Result<u64, CallError> {
        self.call_chain(chain_id)?
            .provider
            .get_block_number()
            .await
            .map_err(|e| CallError::Unavailable(e.to_string()))
    }

    async fn has_unmined(&self, chain_id: u64, sender: Address) -> Result<bool, CallError> {
        let provider = &self.call_chain(chain_id)?.provider;
        let read =
            |e: alloy_provider::transport::TransportError| CallError::Unavailable(e.to_string());
        let pending = provider
            .get_transaction_count(sender)
            .pending()
            .await
            .map_err(read)?;
        let mined = provider
            .get_transaction_count(sender)
            .latest()
            .await
            .map_err(read)?;
        Ok(pending > mined)
    }

    async fn transaction_outcome(&self, chain_id: u64, hash: B256) -> Result<TxOutcome, CallError> {
        let receipt = self
            .call_chain(chain_id)?
            .provider
            .get_transaction_receipt(hash)
            .await
            .map_err(|e| CallError::Unavailable(e.to_string()))?;
        Ok(match receipt {
            Some(r) if r.status() => TxOutcome::Succeeded,
            Some(_) => TxOutcome::Reverted,
            None => TxOutcome::NotMined,
        })
    }

    async fn logs(
        &self,
        chain_id: u64,
        address: Address,
        events: &[B256],
        from: u64,
        to: u64,
    ) -> Result<Vec<alloy_primitives::Log>, CallError> {
        let filter = alloy_rpc_types_eth::Filter::new()
            .address(address)
            .event_signature(events.to_vec())
            .from_block(from)
            .to_block(to);
        let logs = self
            .call_chain(chain_id)?
            .provider
            .get_logs(&filter)
            .await
            .map_err(|e| CallError::Unavailable(e.to_string()))?;
        Ok(logs.into_iter().map(|l| l.inner).collect())
    }

    async fn find_event(
        &self,
        chain_id: u64,
        address: Address,
        event: B256,
        topic: B256,
        since: B256,
    ) -> Result<Option<B256>, CallError> {
        let provider = &self.call_chain(chain_id)?.provider;
        let unavailable =
            |e: alloy_provider::transport::TransportError| CallError::Unavailable(e.to_string());
        let Some(from) = provider
            .get_transaction_receipt(since)
            .await
            .map_err(unavailable)?
            .and_then(|r| r.block_number)
        else {
            return Ok(None);
        };
        let latest = provider.get_block_number().await.map_err(unavailable)?;
        let mut start = from;
        while start <= latest {
            let end = (start + LOG_SPAN - 1).min(latest);
            let filter = alloy_rpc_types_eth::Filter::new()
                .address(address)
                .event_signature(event)
                .topic1(topic)
                .from_block(start)
                .to_block(end);
            let logs = provider.get_logs(&filter).await.map_err(unavailable)?;
            if let Some(tx) = logs.first().and_then(|l| l.transaction_hash) {
                return Ok(Some(tx));
            }
            start = end + 1;
        }
        Ok(None)
    }
}
