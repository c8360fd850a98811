//! The embedded facilitator: settles by sending `transferWithAuthorization` to the token itself,
//! signed by a relayer key, after an `eth_call` simulation. Transaction nonces come from a small
//! per-chain manager so concurrent settlements are pipelined without colliding.

use super::{
    CallError, ChainCalls, Facilitator, FacilitatorError, PaymentRequest, Reach, Settlement,
    SetupError, SupportedKind,
};
use crate::gas_sponsoring::Eip2612Permit;
use crate::network::{Network, Networks};
use crate::verify::Rejection;
use alloy_network::Ethereum;
use alloy_network::TransactionBuilder;
use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_provider::{DynProvider, PendingTransactionBuilder, Provider, ProviderBuilder};
use alloy_rpc_types_eth::{TransactionReceipt, TransactionRequest};
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{sol, SolCall, SolValue};
use async_trait::async_trait;
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::Mutex;
use tracing::Instrument;

mod calls;
mod node_errors;

pub use node_errors::revert_reason;
use node_errors::{is_revert, nonce_refused, relayer_unfunded};

pub use super::reads::{authorization_state, balance_of, permit2_nonce_used, ChainReadError};

sol! {
    function transferWithAuthorization(
        address from, address to, uint256 value, uint256 validAfter, uint256 validBefore,
        bytes32 nonce, bytes signature
    ) external;
}

/// The token's `transferWithAuthorization` call carrying `a`.
pub fn transfer_call_data(a: &crate::payment::SignedAuthorization) -> Vec<u8> {
    transferWithAuthorizationCall {
        from: a.from,
        to: a.to,
        value: a.value,
        validAfter: a.valid_after,
        validBefore: a.valid_before,
        nonce: a.nonce,
        signature: a.signature.clone(),
    }
    .abi_encode()
}

/// How often a pending settlement reads its receipt itself, in case the block heartbeat missed
/// the block it was included in.
const RECEIPT_FALLBACK: Duration = Duration::from_secs(2);

/// How many counterfactual wallets the relayer deploys through one factory a minute, at most.
pub const DEPLOYS_PER_MINUTE: u32 = 60;

/// Gas limit for one relayed transfer (measured ~96k on FiatTokenV2_2; headroom for 1271 wallets).
const GAS_LIMIT: u64 = 200_000;

struct Chain {
    network: Network,
    provider: DynProvider,
    /// Next transaction nonce of the relayer; `None` = fetch from the chain.
    next_nonce: Mutex<Option<u64>>,
}

pub struct EmbeddedFacilitator {
    chains: HashMap<u64, Chain>,
    relayer: Address,
    /// The deployment's operator contract (`crate::operator`), when it has one: an `upto`
    /// authorization naming it as its facilitator is settled through it.
    operator: Option<Address>,
    /// Counterfactual wallet deployments through each factory (the relayer pays their gas): at
    /// most [`DEPLOYS_PER_MINUTE`] a factory, replenished over the minute.
    deploys: governor::DefaultKeyedRateLimiter<(u64, Address)>,
    settle_timeout: Duration,
    rpc_timeout: Duration,
}

fn unavailable(e: impl std::fmt::Display) -> FacilitatorError {
    FacilitatorError::Unavailable(e.to_string())
}

impl EmbeddedFacilitator {
    /// One chain per configured network with an RPC URL.
    pub fn new(
        networks: &Networks,
        relayer_key: &str,
        settle_timeout: Duration,
        rpc_timeout: Duration,
    ) -> Result<Self, SetupError> {
        let signer: PrivateKeySigner = relayer_key
            .trim()
            .parse()
            .map_err(|_| SetupError::RelayerKey)?;
        let relayer = signer.address();
        let mut chains = HashMap::new();
        for network in networks.all() {
            if network.config.rpc_url.is_empty() {
                continue;
            }
            let url = network
                .config
                .rpc_url
                .parse()
                .map_err(|_| SetupError::RpcUrl(network.v1_name.clone()))?;
            let http = reqwest::Client::builder().timeout(rpc_timeout).build()?;
            let provider = ProviderBuilder::new()
                .disable_recommended_fillers()
                .with_gas_estimation()
                .with_chain_id(network.config.chain_id)
                .wallet(signer.clone())
                .connect_reqwest(http, url)
                .erased();
            chains.insert(
                network.config.chain_id,
                Chain {
                    network: network.clone(),
                    provider,
                    next_nonce: Mutex::new(None),
                },
            );
        }
        Ok(Self {
            chains,
            relayer,
            operator: None,
            deploys: governor::RateLimiter::keyed(governor::Quota::per_minute(
                std::num::NonZeroU32::new(DEPLOYS_PER_MINUTE).unwrap_or(std::num::NonZeroU32::MIN),
            )),
            settle_timeout,
            rpc_timeout,
        })
    }

    /// Settles `upto` authorizations that name the deployment's operator contract `operator`
    /// through it (a cluster's nodes share it; each sends from its own relayer).
    pub fn with_operator(mut self, operator: Option<Address>) -> Self {
        self.operator = operator.filter(|o| *o != self.relayer);
        self
    }

    pub fn relayer(&self) -> Address {
        self.relayer
    }

    fn chain(&self, req: &PaymentRequest<'_>) -> Result<&Chain, FacilitatorError> {
        self.chains
            .get(&req.requirements.network.config.chain_id)
            .ok_or(FacilitatorError::Rejected(Rejection::NetworkMismatch))
    }

    /// The settling transaction: the token's `transferWithAuthorization`, or for a Permit2
    /// payment the proxy's `settle` (an `upto` one for the requirement's amount, the charge).
    fn call_tx(&self, req: &PaymentRequest<'_>, signature: &Bytes) -> TransactionRequest {
        let mut auth = req.auth.clone();
        auth.signature = signature.clone();
        let (to, data) = match req.payment.permit2() {
            None => (
                req.requirements.network.config.asset,
                transfer_call_data(&auth),
            ),
            Some(p) => {
                // Checked with the payment (`verify`): a permit in another format refused there.
                let permit2612 = Eip2612Permit::of(req.payment).ok().flatten();
                let amount = req.requirements.token_amount();
                let (to, data) =
                    crate::permit2::settle_call(&auth, &p, amount, permit2612.map(|e| e.split()));
                match self.operator {
                    // Only the witnessed facilitator may settle: the deployment's operator
                    // contract forwards it (only ever to the upto proxy) for this relayer.
                    Some(op) if p.facilitator == Some(op) => (op, crate::operator::upto_call(data)),
                    _ => (to, data),
                }
            }
        };
        TransactionRequest::default()
            .with_from(self.relayer)
            .with_to(to)
            .with_input(data)
    }

    /// A Permit2 payment's preconditions, read before simulating so the payer learns what to
    /// do: the token approved to Permit2 (`permit2_allowance_required`, answered `412`) or a
    /// permit to Permit2 sent with it, and a balance that covers it. `true`: the payment
    /// relies on its permit for the allowance.
    async fn permit2_preconditions(
        &self,
        chain: &Chain,
        req: &PaymentRequest<'_>,
    ) -> Result<bool, FacilitatorError> {
        use crate::permit2::IErc20Permit2;
        if req.payment.permit2().is_none() {
            return Ok(false);
        }
        let token = req.requirements.network.config.asset;
        let read = |data: Vec<u8>| {
            let tx = TransactionRequest::default()
                .with_to(token)
                .with_input(data);
            let provider = &chain.provider;
            async move {
                let out = provider.call(tx).await.map_err(unavailable)?;
                U256::abi_decode(&out).map_err(unavailable)
            }
        };
        let allowance = read(
            IErc20Permit2::allowanceCall {
                owner: req.auth.from,
                spender: crate::permit2::PERMIT2_ADDRESS,
            }
            .abi_encode(),
        )
        .await?;
        let needed = req.requirements.token_amount();
        // A permit sent with the payment gives Permit2 its allowance in the settling
        // transaction itself (`eip2612GasSponsoring`).
        let permitted = Eip2612Permit::of(req.payment)
            .ok()
            .flatten()
            .is_some_and(|p| p.amount >= needed);
        if allowance < needed && !permitted {
            return Err(FacilitatorError::Rejected(
                Rejection::Permit2AllowanceRequired,
            ));
        }
        self.covers(chain, req).await?;
        Ok(allowance < needed)
    }

    /// Whether the payer signed as a smart wallet not deployed yet (ERC-6492, no code at its
    /// address): its transfer cannot be simulated before the relayer deploys it.
    async fn undeployed_payer(&self, req: &PaymentRequest<'_>) -> Result<bool, FacilitatorError> {
        if crate::signature::Counterfactual::of(&req.auth.signature).is_none() {
            return Ok(false);
        }
        let chain_id = req.requirements.network.config.chain_id;
        self.has_code(chain_id, req.auth.from)
            .await
            .map(|deployed| !deployed)
            .map_err(|e| unavailable(e.to_string()))
    }

    /// The payer's token balance covers the requirement.
    async fn covers(
        &self,
        chain: &Chain,
        req: &PaymentRequest<'_>,
    ) -> Result<(), FacilitatorError> {
        use crate::permit2::IErc20Permit2;
        let tx = TransactionRequest::default()
            .with_to(req.requirements.network.config.asset)
            .with_input(
                IErc20Permit2::balanceOfCall {
                    owner: req.auth.from,
                }
                .abi_encode(),
            );
        let out = chain.provider.call(tx).await.map_err(unavailable)?;
        if U256::abi_decode(&out).map_err(unavailable)? < req.requirements.token_amount() {
            return Err(FacilitatorError::Rejected(Rejection::InsufficientFunds));
        }
        Ok(())
    }

    /// Simulates the transfer; a revert is mapped to its rejection.
    async fn simulate(
        &self,
        chain: &Chain,
        tx: &TransactionRequest,
    ) -> Result<(), FacilitatorError> {
        let call = std::future::IntoFuture::into_future(chain.provider.call(tx.clone()));
        match call.instrument(crate::span!("rpc.eth_call")).await {
            Ok(_) => Ok(()),
            Err(e) if relayer_unfunded(&e.to_string()) => Err(self.unfunded()),
            Err(e) if is_revert(&e) => {
                tracing::debug!(error = %e, "transfer simulation reverted");
                Err(FacilitatorError::Rejected(revert_reason(&e.to_string())))
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    /// The relayer cannot pay for gas: an operator's problem (an ERROR line), never the payer's.
    fn unfunded(&self) -> FacilitatorError {
        tracing::error!(
            relayer = %self.relayer,
            "the relayer cannot pay for gas: fund it with the chain's native token"
        );
        FacilitatorError::Unavailable("the relayer cannot pay for gas".into())
    }

    async fn take_nonce(&self, chain: &Chain) -> Result<u64, FacilitatorError> {
        let mut next = chain.next_nonce.lock().await;
        let n = match *next {
            Some(n) => n,
            None => chain
                .provider
                .get_transaction_count(self.relayer)
                .pending()
                .await
                .map_err(unavailable)?,
        };
        *next = Some(n + 1);
        Ok(n)
    }

    /// Waits for a sent transaction's receipt. The provider's block heartbeat (one block read per
    /// poll interval, shared by every pending settlement) says when the transaction is in a
    /// block; then one receipt read. A slow fallback read covers a block the heartbeat missed;
    /// the watch's own timeout (`settle_timeout`) ends the wait.
    /// (alloy's `get_receipt` reads each pending transaction's receipt at every poll interval:
    /// 3.6 reads per settlement were measured on anvil with one-second blocks.)
    async fn await_receipt(
        &self,
        chain: &Chain,
        pending: PendingTransactionBuilder<Ethereum>,
    ) -> Result<TransactionReceipt, ReceiptError> {
        let hash = *pending.tx_hash();
        let watch = pending
            .with_timeout(Some(self.settle_timeout))
            .register()
            .await?;
        tokio::pin!(watch);
        let mut fallback = tokio::time::interval_at(
            tokio::time::Instant::now() + RECEIPT_FALLBACK,
            RECEIPT_FALLBACK,
        );
        loop {
            let included = tokio::select! {
                r = &mut watch => { r?; true }
                _ = fallback.tick() => false,
            };
            let receipt = chain.provider.get_transaction_receipt(hash).await?;
            match receipt {
                Some(r) => return Ok(r),
                None if included => return Err(ReceiptError::Missing),
                None => {}
            }
        }
    }

    /// Sends `tx` (simulated already) with the relayer's next nonce and waits for its receipt;
    /// `sent` hears the transaction's hash as soon as the node took it. A node that refuses the
    /// nonce (another sender used the relayer's key, say `paygate devchain fund`) is asked again
    /// once with the chain's own nonce; refused again, the relayer is unavailable (never the
    /// payer's rejection).
    async fn broadcast(
        &self,
        chain: &Chain,
        tx: TransactionRequest,
        gas_limit: u64,
        sent: Option<tokio::sync::oneshot::Sender<B256>>,
    ) -> Result<B256, Broadcast> {
        let mut resynced = false;
        let pending = loop {
            let nonce = self.take_nonce(chain).await.map_err(|e| match e {
                FacilitatorError::Unavailable(m) => Broadcast::Unavailable(m),
                other => Broadcast::Unavailable(other.to_string()),
            })?;
            let tx = tx.clone().with_nonce(nonce).with_gas_limit(gas_limit);
            let sending = chain.provider.send_transaction(tx);
            match sending
                .instrument(crate::span!("rpc.send_transaction"))
                .await
            {
                Ok(p) => break p,
                Err(e) => {
                    // The nonce may not have been used; re-read it before the next transaction.
                    self.resync_nonce(chain).await;
                    let msg = e.to_string();
                    tracing::debug!(error = %msg, nonce, "transaction not sent");
                    if relayer_unfunded(&msg) {
                        // The operator's problem, not the payer's: nothing was sent or charged.
                        return Err(Broadcast::Unfunded);
                    }
                    if is_revert(&e) && nonce_refused(&msg) {
                        if !resynced {
                            resynced = true;
                            tracing::info!(nonce, relayer = %self.relayer, "the relayer's transaction nonce was taken by another sender; resynchronised from the chain");
                            continue;
                        }
                        return Err(Broadcast::Unavailable(format!(
                            "the relayer's transaction nonce was refused twice: {msg}"
                        )));
                    }
                    return Err(if is_revert(&e) {
                        Broadcast::Refused(msg)
                    } else {
                        // A transport error after the request left: it may have been broadcast.
                        Broadcast::Ambiguous(msg)
                    });
                }
            }
        };
        let hash = *pending.tx_hash();
        if let Some(sent) = sent {
            let _ = sent.send(hash);
        }
        let receipt = self
            .await_receipt(chain, pending)
            .instrument(crate::span!("rpc.wait_receipt"))
            .await
            .map_err(|e| Broadcast::Pending(hash, e.to_string()))?;
        if !receipt.status() {
            return Err(Broadcast::Reverted(hash));
        }
        Ok(hash)
    }

    async fn resync_nonce(&self, chain: &Chain) {
        *chain.next_nonce.lock().await = None;
    }
}

#[async_trait]
impl Facilitator for EmbeddedFacilitator {
    async fn verify(&self, req: &PaymentRequest<'_>) -> Result<Address, FacilitatorError> {
        let chain = self.chain(req)?;
        let on_permit = self.permit2_preconditions(chain, req).await?;
        if self.undeployed_payer(req).await? {
            // A wallet not deployed yet: nothing to simulate against until it is (its
            // signature was asked of the wallet its factory deploys); its balance must cover.
            return self.covers(chain, req).await.map(|()| req.auth.from);
        }
        self.simulate(chain, &self.call_tx(req, &req.auth.signature))
            .await
            .map_err(|e| permit_refused(on_permit, e))?;
        Ok(req.auth.from)
    }

    async fn settle(&self, req: &PaymentRequest<'_>) -> Result<Settlement, FacilitatorError> {
        let chain = self.chain(req)?;
        let on_permit = self
            .permit2_preconditions(chain, req)
            .instrument(crate::span!("rpc.permit2_checks"))
            .await?;
        // A counterfactual wallet is deployed first; the token sees its inner signature.
        let signature = self
            .deploy_payer(
                chain.network.config.chain_id,
                req.auth.from,
                &req.auth.signature,
                (
                    req.requirements.network.config.asset,
                    req.requirements.token_amount(),
                ),
            )
            .await
            .map_err(|e| match e {
                CallError::Reverted(m) if m == super::UNCOVERED_PAYER => {
                    FacilitatorError::Rejected(Rejection::InsufficientFunds)
                }
                CallError::Reverted(m) => {
                    tracing::debug!(error = %m, "payer wallet deployment refused");
                    FacilitatorError::Rejected(Rejection::InvalidSignature)
                }
                CallError::Unavailable(m) => FacilitatorError::Unavailable(m),
                CallError::Ambiguous(m) | CallError::Pending(_, m) => {
                    FacilitatorError::Unavailable(m)
                }
            })?;
        let tx = self.call_tx(req, &signature);
        self.simulate(chain, &tx)
            .await
            .map_err(|e| permit_refused(on_permit, e))?;
        // Forwarded by the operator contract: its own gas on top.
        let forwarded = self.operator.is_some_and(|op| tx.to == Some(op.into()));
        let gas = GAS_LIMIT
            + if forwarded {
                crate::operator::OPERATOR_GAS
            } else {
                0
            };
        let transaction = self
            .broadcast(chain, tx, gas, None)
            .await
            .map_err(|e| match e {
                Broadcast::Unfunded => self.unfunded(),
                Broadcast::Unavailable(m) => FacilitatorError::Unavailable(m),
                Broadcast::Refused(m) => FacilitatorError::Rejected(revert_reason(&m)),
                Broadcast::Ambiguous(m) => FacilitatorError::Ambiguous(m),
                Broadcast::Pending(transaction, message) => FacilitatorError::Pending {
                    transaction,
                    message,
                },
                Broadcast::Reverted(_) => FacilitatorError::Rejected(Rejection::SettlementFailed),
            })?;
        Ok(Settlement {
            transaction,
            payer: req.auth.from,
        })
    }

    async fn supported(&self) -> Result<Vec<SupportedKind>, FacilitatorError> {
        Ok(kinds_of(self.chains.values()))
    }

    /// The chains' health: a latest-block round trip on each, all at once; a chain that does
    /// not answer within the RPC timeout is not answering.
    async fn reach(&self) -> Result<Reach, FacilitatorError> {
        let rounds = self.chains.values().map(|chain| async move {
            let round = tokio::time::timeout(self.rpc_timeout, chain.provider.get_block_number());
            matches!(round.await, Ok(Ok(_))).then_some(chain)
        });
        let answering = futures_util::future::join_all(rounds).await;
        Ok(Reach {
            supported: kinds_of(self.chains.values()),
            answering: kinds_of(answering.into_iter().flatten()),
        })
    }

    /// `embedded:` and the networks it settles on (their RPC URLs stay private).
    fn url(&self) -> String {
        let mut names: Vec<_> = self
            .chains
            .values()
            .map(|c| c.network.v1_name.clone())
            .collect();
        names.sort();
        format!("embedded:{}", names.join(","))
    }
}

/// A settlement relying on the payer's permit for Permit2's allowance that would fail: the
/// permit did not give it (not the payer's signature, or used), so the allowance is what is
/// missing, as the extension's facilitator reports it.
fn permit_refused(on_permit: bool, e: FacilitatorError) -> FacilitatorError {
    match e {
        FacilitatorError::Rejected(_) if on_permit => {
            FacilitatorError::Rejected(Rejection::Permit2AllowanceRequired)
        }
        e => e,
    }
}

/// The `exact` kinds of `chains`' networks.
fn kinds_of<'a>(chains: impl Iterator<Item = &'a Chain>) -> Vec<SupportedKind> {
    SupportedKind::exact(chains.map(|c| &c.network))
}

/// How a transaction the relayer sends failed.
enum Broadcast {
    /// The relayer cannot pay for gas: nothing was sent.
    Unfunded,
    /// The node refused it (nothing was sent), with its message.
    Refused(String),
    /// The relayer could not send it (its nonce refused again after a resynchronisation, or the
    /// chain not reached for one): nothing was sent, and it is not the payer's doing.
    Unavailable(String),
    /// It may have been broadcast; its outcome is not known.
    Ambiguous(String),
    /// It was broadcast (this transaction), and not confirmed in time.
    Pending(B256, String),
    /// Mined, and reverted.
    Reverted(B256),
}

/// Why a receipt could not be read after broadcasting (the settlement is then ambiguous).
#[derive(Debug, thiserror::Error)]
enum ReceiptError {
    #[error("watching the transaction: {0}")]
    Watch(#[from] alloy_provider::PendingTransactionError),
    #[error("chain RPC: {0}")]
    Rpc(#[from] alloy_provider::transport::TransportError),
    #[error("included, but the node has no receipt")]
    Missing,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::{builtin_networks, Networks};

    #[test]
    fn wallet_deployments_are_capped_per_factory_a_minute() {
        // No RPC URLs: no chain is reached (the cap is counted before any call).
        let mut configs = builtin_networks();
        configs.values_mut().for_each(|c| c.rpc_url.clear());
        let networks = Networks::from_config(&configs);
        let key = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
        let f = EmbeddedFacilitator::new(
            &networks,
            key,
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
        .unwrap();
        let (one, two) = (Address::repeat_byte(1), Address::repeat_byte(2));
        for _ in 0..DEPLOYS_PER_MINUTE {
            f.take_deployment(84532, one).unwrap();
        }
        assert!(matches!(
            f.take_deployment(84532, one),
            Err(CallError::Unavailable(_))
        ));
        // Another factory, or another chain, has its own share.
        f.take_deployment(84532, two).unwrap();
        f.take_deployment(8453, one).unwrap();
    }

    #[test]
    fn a_refused_nonce_is_the_relayers_problem() {
        assert!(nonce_refused(
            "server returned an error response: error code -32003: nonce too low"
        ));
        assert!(nonce_refused("replacement transaction underpriced"));
        assert!(!nonce_refused(
            "execution reverted: FiatTokenV2: invalid signature"
        ));
        assert!(!nonce_refused("insufficient funds for gas * price + value"));
    }
}
