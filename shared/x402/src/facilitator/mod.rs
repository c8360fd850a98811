//! The facilitator: verifies and settles x402 payments. A small trait with two implementations:
//! [`embedded::EmbeddedFacilitator`] (settles on-chain itself through JSON-RPC with a relayer
//! key) and [`remote::RemoteFacilitator`] (an HTTP client of the standard facilitator API).
//! Wire types of that API live in [`wire`]; this module speaks domain types.

pub mod embedded;
pub mod failover;
pub mod reads;
pub mod remote;
pub mod wire;

/// One facilitator of a failover list, as reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberReport {
    /// The network's v1 name.
    pub network: String,
    pub url: String,
    pub fee: String,
    pub healthy: bool,
    /// Settlements it made since this process started.
    pub settled: u64,
}

use crate::payment::{PaymentPayload, SignedAuthorization};
use crate::verify::Rejection;
use crate::PaymentRequirements;
use alloy_primitives::{Address, B256, U256};
use async_trait::async_trait;
use std::sync::Arc;

/// One payment to verify or settle: the payload as received, its authorization in domain types,
/// and the requirement regenerated for the route.
pub struct PaymentRequest<'a> {
    pub payment: &'a PaymentPayload,
    pub auth: &'a SignedAuthorization,
    pub requirements: &'a PaymentRequirements,
}

/// A completed on-chain settlement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    pub transaction: B256,
    pub payer: Address,
}

/// Why a facilitator could not be built from the configuration.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("relayer key is not a valid secp256k1 private key")]
    RelayerKey,
    #[error("networks.{0}.rpc_url is not a URL")]
    RpcUrl(String),
    #[error("HTTP client: {0}")]
    Http(#[from] reqwest::Error),
}

/// How a facilitator call failed. The distinction decides the client's answer: a rejection is
/// final (`402`); unavailability means nothing was broadcast (`503`); an ambiguous outcome means
/// the transfer may still land (`504` and a reconciliation record, never `402`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FacilitatorError {
    #[error("payment rejected: {0}")]
    Rejected(Rejection),
    #[error("facilitator unavailable: {0}")]
    Unavailable(String),
    #[error("settlement outcome unknown: {0}")]
    Ambiguous(String),
    /// Sent, and its transaction is known, but not confirmed within the request's time (x402's
    /// `settlement_pending`): it may still land; reconciliation finishes it.
    #[error("settlement pending: transaction {transaction}: {message}")]
    Pending { transaction: B256, message: String },
}

impl FacilitatorError {
    /// Whether the transfer may still land (its outcome is reconciliation's to decide).
    pub fn may_land(&self) -> bool {
        matches!(self, Self::Ambiguous(_) | Self::Pending { .. })
    }
}

/// How a contract call the relayer sends (or reads) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The call reverts (in simulation, or mined): nothing moved.
    #[error("the call reverts: {0}")]
    Reverted(String),
    /// The chain could not be reached, or the relayer cannot pay for gas: nothing was sent.
    #[error("the chain is unavailable: {0}")]
    Unavailable(String),
    /// Sent, outcome unknown: it may still land.
    #[error("outcome unknown: {0}")]
    Ambiguous(String),
    /// Sent as this transaction, not confirmed in time: it may still land, and
    /// [`ChainCalls::transaction_outcome`] tells when it did.
    #[error("outcome unknown: transaction {0}: {1}")]
    Pending(B256, String),
}

/// What the chain says of a transaction sent before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxOutcome {
    /// Mined, and it succeeded.
    Succeeded,
    /// Mined, and it reverted: nothing of it moved.
    Reverted,
    /// Not mined: the node still holds it, or does not know it (dropped, or never received).
    NotMined,
}

alloy_sol_types::sol! {
    /// Multicall3 (at the same address on every chain that has it): several calls in one.
    interface IMulticall3 {
        struct Call3 { address target; bool allowFailure; bytes callData; }
        struct Result3 { bool success; bytes returnData; }
        function aggregate3(Call3[] calldata calls) external payable returns (Result3[] memory returnData);
    }
}

/// Multicall3's address.
pub const MULTICALL3_ADDRESS: Address =
    alloy_primitives::address!("cA11bde05977b3631167028862bE2a173976CA11");

/// Why a counterfactual payer's wallet was not deployed: its balance does not cover the payment
/// (the words map to `insufficient_funds`).
pub const UNCOVERED_PAYER: &str =
    "the payer's balance is insufficient for the payment: its wallet is not deployed";

/// Gas for deploying a counterfactual wallet through its factory (a proxy account's deployment
/// takes ~300k).
pub const WALLET_DEPLOY_GAS: u64 = 1_000_000;

/// Blocks per log query (RPC providers cap the range of one `eth_getLogs`).
pub const LOG_SPAN: u64 = 5_000;

/// Contract calls beyond a token transfer, sent from the relayer (payment channels: deposits,
/// claims, settlement, refunds) and read from the chain.
#[async_trait]
pub trait ChainCalls: Send + Sync + 'static {
    /// Simulates `data` to `to` on chain `chain_id`, then sends it and waits for its receipt:
    /// the transaction hash of a call that succeeded.
    async fn send_call(
        &self,
        chain_id: u64,
        to: Address,
        data: Vec<u8>,
        gas_limit: u64,
    ) -> Result<B256, CallError>;
    /// [`Self::send_call`], telling `sent` the transaction's hash as soon as the node took it,
    /// before it is mined (by default, once it is: calls that cannot tell earlier).
    async fn send_call_told(
        &self,
        chain_id: u64,
        to: Address,
        data: Vec<u8>,
        gas_limit: u64,
        sent: Option<tokio::sync::oneshot::Sender<B256>>,
    ) -> Result<B256, CallError> {
        let mined = self.send_call(chain_id, to, data, gas_limit).await;
        if let (Ok(hash), Some(sent)) = (&mined, sent) {
            let _ = sent.send(*hash);
        }
        mined
    }
    /// A read-only call.
    async fn view_call(
        &self,
        chain_id: u64,
        to: Address,
        data: Vec<u8>,
    ) -> Result<alloy_primitives::Bytes, CallError>;
    /// The address these calls are sent from (the relayer), where there is one.
    fn relayer(&self) -> Option<Address> {
        None
    }
    /// The chains these calls reach.
    fn chain_ids(&self) -> Vec<u64>;
    /// Whether `at` holds contract code (a deployed smart wallet).
    async fn has_code(&self, chain_id: u64, at: Address) -> Result<bool, CallError>;
    /// Whether the relayer deploys counterfactual (ERC-6492) wallets through `factory` on
    /// chain `chain_id` (the network's `smart_wallet_factories`): a deployment costs it gas,
    /// so only factories the operator listed are used.
    fn deploys_through(&self, chain_id: u64, factory: Address) -> bool;
    /// Whether `signer`, a smart wallet, accepts `signature` over `digest` (EIP-1271
    /// `isValidSignature`); an account without code (the call reverts or answers nothing)
    /// does not. An ERC-6492 signature of a wallet not deployed yet is asked of the wallet its
    /// factory would deploy, in one simulated call (Multicall3: the factory call, then the
    /// check), changing nothing; its factory must be one the relayer deploys through.
    async fn wallet_accepts(
        &self,
        chain_id: u64,
        signer: Address,
        digest: B256,
        signature: alloy_primitives::Bytes,
    ) -> Result<bool, CallError> {
        use crate::signature::{Counterfactual, EIP1271_MAGIC, IERC1271};
        use alloy_sol_types::SolCall;
        let accepts = |out: &[u8]| {
            IERC1271::isValidSignatureCall::abi_decode_returns(out)
                .is_ok_and(|magic| magic.0 == EIP1271_MAGIC)
        };
        let wrapped = Counterfactual::of(&signature);
        let check = |signature| {
            IERC1271::isValidSignatureCall {
                hash: digest,
                signature,
            }
            .abi_encode()
        };
        let Some(c) = wrapped else {
            return match self.view_call(chain_id, signer, check(signature)).await {
                Ok(out) => Ok(accepts(&out)),
                Err(CallError::Reverted(_)) => Ok(false),
                Err(e) => Err(e),
            };
        };
        if self.has_code(chain_id, signer).await? {
            // Deployed since it signed: the wallet itself answers for the inner signature.
            return match self.view_call(chain_id, signer, check(c.signature)).await {
                Ok(out) => Ok(accepts(&out)),
                Err(CallError::Reverted(_)) => Ok(false),
                Err(e) => Err(e),
            };
        }
        if !self.deploys_through(chain_id, c.factory) {
            return Ok(false);
        }
        let calls = vec![
            IMulticall3::Call3 {
                target: c.factory,
                allowFailure: true,
                callData: c.factory_calldata,
            },
            IMulticall3::Call3 {
                target: signer,
                allowFailure: true,
                callData: check(c.signature).into(),
            },
        ];
        let data = IMulticall3::aggregate3Call { calls }.abi_encode();
        match self.view_call(chain_id, MULTICALL3_ADDRESS, data).await {
            Ok(out) => Ok(IMulticall3::aggregate3Call::abi_decode_returns(&out)
                .ok()
                .and_then(|r| r.into_iter().nth(1))
                .is_some_and(|r| r.success && accepts(&r.returnData))),
            Err(CallError::Reverted(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }
    /// Readies a payer's signature for the contract that checks it: an ERC-6492 signature's
    /// wallet is deployed first (the relayer sends its factory call, through a listed factory)
    /// and its inner signature returned; any other signature is returned as it is. A
    /// deployment that reverts because the wallet appeared meanwhile (another settlement
    /// deployed it) is no failure.
    ///
    /// The relayer pays the deployment's gas, so it deploys only for a payer that can pay:
    /// `pays` (a token and an amount of its units) must be covered by the counterfactual
    /// address's balance first, else `Reverted` with [`UNCOVERED_PAYER`] and nothing is sent (a
    /// fresh factory salt per request would otherwise cost the deployment a wallet each).
    async fn deploy_payer(
        &self,
        chain_id: u64,
        payer: Address,
        signature: &alloy_primitives::Bytes,
        pays: (Address, U256),
    ) -> Result<alloy_primitives::Bytes, CallError> {
        let Some(c) = crate::signature::Counterfactual::of(signature) else {
            return Ok(signature.clone());
        };
        if self.has_code(chain_id, payer).await? {
            return Ok(c.signature);
        }
        if !self.deploys_through(chain_id, c.factory) {
            return Err(CallError::Reverted(format!(
                "wallet factory {} is not one the relayer deploys through",
                c.factory
            )));
        }
        {
            use alloy_sol_types::SolCall;
            let (token, amount) = pays;
            let read = crate::permit2::IErc20Permit2::balanceOfCall { owner: payer }.abi_encode();
            let out = self.view_call(chain_id, token, read).await?;
            let balance = crate::permit2::IErc20Permit2::balanceOfCall::abi_decode_returns(&out)
                .map_err(|e| CallError::Unavailable(format!("unreadable balance: {e}")))?;
            if balance < amount {
                return Err(CallError::Reverted(UNCOVERED_PAYER.into()));
            }
        }
        self.take_deployment(chain_id, c.factory)?;
        let sent = self
            .send_call(
                chain_id,
                c.factory,
                c.factory_calldata.to_vec(),
                WALLET_DEPLOY_GAS,
            )
            .await;
        match sent {
            Ok(_) => {}
            Err(CallError::Reverted(_)) if self.has_code(chain_id, payer).await? => {}
            Err(e) => return Err(e),
        }
        if !self.has_code(chain_id, payer).await? {
            return Err(CallError::Reverted(
                "the factory call deployed no wallet at the payer's address".into(),
            ));
        }
        Ok(c.signature)
    }
    /// Takes one of the wallet deployments the relayer makes through `factory` (its gas is the
    /// deployment's): `Unavailable` when the factory's share for now is used up.
    fn take_deployment(&self, chain_id: u64, factory: Address) -> Result<(), CallError> {
        let _ = (chain_id, factory);
        Ok(())
    }
    /// The number of the chain's latest block.
    async fn block_number(&self, chain_id: u64) -> Result<u64, CallError>;
    /// Whether `sender` has transactions the chain has not mined yet (its pending transaction
    /// count above its mined one).
    async fn has_unmined(&self, chain_id: u64, sender: Address) -> Result<bool, CallError> {
        let _ = (chain_id, sender);
        Err(CallError::Unavailable(
            "transaction counts are not read here".into(),
        ))
    }
    /// Whether transaction `hash` (one [`CallError::Pending`] named) was mined, and how.
    async fn transaction_outcome(&self, chain_id: u64, hash: B256) -> Result<TxOutcome, CallError> {
        let _ = (chain_id, hash);
        Err(CallError::Unavailable(
            "transaction receipts are not read here".into(),
        ))
    }
    /// The logs `address` emitted with one of `events` as first topic in blocks `from..=to`,
    /// in the chain's order.
    async fn logs(
        &self,
        chain_id: u64,
        address: Address,
        events: &[B256],
        from: u64,
        to: u64,
    ) -> Result<Vec<alloy_primitives::Log>, CallError>;
    /// The transaction of the first log `address` emitted with `event` and `topic` as its first
    /// two topics, from the block transaction `since` landed in to the latest (`None`: none, or
    /// `since` not found).
    async fn find_event(
        &self,
        chain_id: u64,
        address: Address,
        event: B256,
        topic: B256,
        since: B256,
    ) -> Result<Option<B256>, CallError>;
}

/// A `(version, scheme, network)` the facilitator can settle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupportedKind {
    pub x402_version: u8,
    pub scheme: String,
    pub network: String,
}

/// What a facilitator settles, and which of those networks answered just now (a health probe).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reach {
    /// Every kind it settles when its networks answer.
    pub supported: Vec<SupportedKind>,
    /// The kinds whose network answered the probe.
    pub answering: Vec<SupportedKind>,
}

impl SupportedKind {
    /// The `exact` kinds of `networks`, by v1 name (x402 v1) and CAIP-2 id (v2), sorted by
    /// version then network.
    pub fn exact<'a>(networks: impl Iterator<Item = &'a crate::network::Network>) -> Vec<Self> {
        let mut out: Vec<Self> = networks
            .flat_map(|n| [(1, n.v1_name.clone()), (2, n.caip2.clone())])
            .map(|(x402_version, network)| Self {
                x402_version,
                scheme: "exact".into(),
                network,
            })
            .collect();
        out.sort_by(|a, b| (a.x402_version, &a.network).cmp(&(b.x402_version, &b.network)));
        out
    }

    /// The `batch-settlement` kinds of `networks`: a v2 scheme, by CAIP-2 id, sorted by network.
    pub fn batch<'a>(networks: impl Iterator<Item = &'a crate::network::Network>) -> Vec<Self> {
        let mut out: Vec<Self> = networks
            .map(|n| Self {
                x402_version: 2,
                scheme: crate::batch::SCHEME.into(),
                network: n.caip2.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.network.cmp(&b.network));
        out
    }
}

/// Verifies and settles payments. Implementations must be safe to call concurrently.
#[async_trait]
pub trait Facilitator: Send + Sync + 'static {
    /// Checks that the payment would settle now (signature, balance, nonce unused); returns the
    /// payer. Changes nothing.
    async fn verify(&self, req: &PaymentRequest<'_>) -> Result<Address, FacilitatorError>;
    /// Executes the transfer and waits for its receipt.
    async fn settle(&self, req: &PaymentRequest<'_>) -> Result<Settlement, FacilitatorError>;
    /// What it can settle.
    async fn supported(&self) -> Result<Vec<SupportedKind>, FacilitatorError>;
    /// What it is, for health reports any organisation sees: never a credential nor an RPC URL
    /// (which often embeds a provider's key).
    fn url(&self) -> String;
    /// A cheap health check: what it settles and which of it answers now. By default one
    /// `supported` call, all of whose kinds count as answering.
    async fn reach(&self) -> Result<Reach, FacilitatorError> {
        let supported = self.supported().await?;
        Ok(Reach {
            answering: supported.clone(),
            supported,
        })
    }
    /// The facilitators behind it, when it tries several (`failover`): each with its health
    /// and how many settlements it made. Empty for a single one.
    fn members(&self) -> Vec<MemberReport> {
        Vec::new()
    }
}

#[async_trait]
impl<T: Facilitator + ?Sized> Facilitator for Arc<T> {
    async fn verify(&self, req: &PaymentRequest<'_>) -> Result<Address, FacilitatorError> {
        (**self).verify(req).await
    }
    async fn settle(&self, req: &PaymentRequest<'_>) -> Result<Settlement, FacilitatorError> {
        (**self).settle(req).await
    }
    async fn supported(&self) -> Result<Vec<SupportedKind>, FacilitatorError> {
        (**self).supported().await
    }
    fn url(&self) -> String {
        (**self).url()
    }
    async fn reach(&self) -> Result<Reach, FacilitatorError> {
        (**self).reach().await
    }
    fn members(&self) -> Vec<MemberReport> {
        (**self).members()
    }
}
