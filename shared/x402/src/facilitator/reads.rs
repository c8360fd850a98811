//! Read-only calls to a chain by RPC URL, outside any facilitator: what reconciliation reads
//! back (an EIP-3009 authorization's state, a Permit2 nonce) and a token balance.

use alloy_network::TransactionBuilder;
use alloy_primitives::{Address, U256};
use alloy_provider::{Provider, ProviderBuilder};
use alloy_rpc_types_eth::TransactionRequest;
use alloy_sol_types::{sol, SolCall};

sol! {
    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
    function balanceOf(address account) external view returns (uint256);
}

/// Why a read-only call to the chain failed.
#[derive(Debug, thiserror::Error)]
pub enum ChainReadError {
    #[error("not an RPC URL: {0}")]
    Url(String),
    #[error("chain RPC: {0}")]
    Rpc(#[from] alloy_provider::transport::TransportError),
    #[error("unexpected answer: {0}")]
    Decode(#[from] alloy_sol_types::Error),
}

/// A read-only `eth_call` of `data` on `token` through `rpc_url`.
async fn call_view(
    rpc_url: &str,
    token: Address,
    data: Vec<u8>,
) -> Result<alloy_primitives::Bytes, ChainReadError> {
    let url = rpc_url
        .parse()
        .map_err(|_| ChainReadError::Url(rpc_url.to_string()))?;
    let provider = ProviderBuilder::new()
        .disable_recommended_fillers()
        .connect_http(url);
    Ok(provider
        .call(
            TransactionRequest::default()
                .with_to(token)
                .with_input(data),
        )
        .await?)
}

/// The token balance of `who` (used by tests and the dev environment).
pub async fn balance_of(
    rpc_url: &str,
    token: Address,
    who: Address,
) -> Result<U256, ChainReadError> {
    let out = call_view(rpc_url, token, balanceOfCall { account: who }.abi_encode()).await?;
    Ok(balanceOfCall::abi_decode_returns(&out)?)
}

/// `authorizationState(from, nonce)` of `token`: whether the EIP-3009 authorization was used.
pub async fn authorization_state(
    rpc_url: &str,
    token: Address,
    from: Address,
    nonce: alloy_primitives::B256,
) -> Result<bool, ChainReadError> {
    let data = authorizationStateCall {
        authorizer: from,
        nonce,
    }
    .abi_encode();
    let out = call_view(rpc_url, token, data).await?;
    Ok(authorizationStateCall::abi_decode_returns(&out)?)
}

/// Whether Permit2 `nonce` of `owner` was used (its bit in `nonceBitmap` set): a Permit2
/// payment's settlement, read back.
pub async fn permit2_nonce_used(
    rpc_url: &str,
    owner: Address,
    nonce: alloy_primitives::B256,
) -> Result<bool, ChainReadError> {
    use crate::permit2::IPermit2Nonces::nonceBitmapCall;
    let n = U256::from_be_bytes(nonce.0);
    let data = nonceBitmapCall {
        owner,
        word: n >> 8,
    }
    .abi_encode();
    let out = call_view(rpc_url, crate::permit2::PERMIT2_ADDRESS, data).await?;
    let bitmap = nonceBitmapCall::abi_decode_returns(&out)?;
    let bit = U256::from(1u8) << (n & U256::from(255u8)).to::<usize>();
    Ok(bitmap & bit != U256::ZERO)
}
