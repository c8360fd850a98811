//! Settlement networks: each has a v1 name (`base-sepolia`) and a CAIP-2 id (`eip155:84532`);
//! routes may name either, challenges always use the right one for each protocol version.

use alloy_primitives::Address;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One network as configured (`[networks.<v1 name>]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// EVM chain id; the CAIP-2 id is `eip155:<chain_id>`.
    pub chain_id: u64,
    /// USDC contract address on this chain.
    pub asset: Address,
    /// EIP-712 domain name of the token (`"USD Coin"` on Base, `"USDC"` on Base Sepolia).
    pub eip712_name: String,
    /// EIP-712 domain version of the token.
    pub eip712_version: String,
    /// JSON-RPC endpoint used to settle on this chain (may be empty when unused).
    #[serde(default)]
    pub rpc_url: String,
    /// A block explorer's transaction page, the hash appended (`https://basescan.org/tx/`);
    /// empty: the ledger shows no link.
    #[serde(default)]
    pub explorer_tx_url: String,
    /// Facilitators for this network, in the order they are tried (`[[networks.<name>.facilitators]]`);
    /// empty: the deployment's `[facilitator]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facilitators: Vec<FacilitatorEntry>,
    /// ERC-20 tokens routes may price in besides the network's USDC
    /// (`[networks.<name>.tokens.<SYMBOL>]`), by symbol.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tokens: BTreeMap<String, TokenConfig>,
    /// Smart-wallet factories whose counterfactual (ERC-6492) wallets the relayer deploys when
    /// it settles their first payment (it pays the deployment's gas); empty: a wallet not yet
    /// deployed cannot pay.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub smart_wallet_factories: Vec<Address>,
}

/// One ERC-20 token of a network. Prices stay in USD: a route priced in a token asks the USD
/// price in the token's units, one token to the dollar (listed tokens are dollar stablecoins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub address: Address,
    /// The token's decimals: 6 to 18 (a USD price has six decimal places).
    pub decimals: u8,
    /// EIP-712 domain name and version of the token (what an EIP-3009 authorization is signed
    /// for; informational for Permit2 tokens, whose payers sign for Permit2's domain).
    pub eip712_name: String,
    pub eip712_version: String,
    /// The token implements EIP-3009 `transferWithAuthorization`: paid that way; otherwise
    /// through Permit2 (`assetTransferMethod: "permit2"`).
    #[serde(default)]
    pub eip3009: bool,
}

/// The symbol of the token every network has: its USDC (`asset`).
pub const USDC: &str = "USDC";

/// How a payment moves its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AssetTransfer {
    /// EIP-3009 `transferWithAuthorization` on the token.
    #[default]
    Eip3009,
    /// A Permit2 `permitWitnessTransferFrom` through x402's Permit2 proxies.
    Permit2,
}

/// The token a requirement asks for, beyond the address and EIP-712 domain that the
/// requirement's network carries: its decimals and how it is moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenTerms {
    pub decimals: u8,
    pub transfer: AssetTransfer,
}

impl Default for TokenTerms {
    /// USDC's: six decimals, EIP-3009.
    fn default() -> Self {
        Self {
            decimals: 6,
            transfer: AssetTransfer::Eip3009,
        }
    }
}

impl TokenConfig {
    /// What is wrong with this token's configuration, if anything.
    pub fn problem(&self) -> Option<&'static str> {
        if !(6..=18).contains(&self.decimals) {
            return Some("decimals must be between 6 and 18");
        }
        if self.address.is_zero() {
            return Some("address must not be zero");
        }
        None
    }
}

/// One facilitator of a network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FacilitatorEntry {
    /// `"embedded"` (this deployment's own, with its relayer) or a facilitator's base URL.
    pub url: String,
    /// Environment variable holding the bearer token sent to it (`Authorization: Bearer ...`);
    /// empty: none.
    #[serde(default)]
    pub auth_header_env: String,
    /// What it charges per settlement, in USD (informational: shown beside it).
    #[serde(default)]
    pub fee: String,
}

/// A resolved network: both spellings plus its configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Network {
    pub v1_name: String,
    pub caip2: String,
    pub config: NetworkConfig,
}

impl Network {
    /// Whether `spelling` names this network (its v1 name or its CAIP-2 id).
    pub fn spelled(&self, spelling: &str) -> bool {
        self.v1_name == spelling || self.caip2 == spelling
    }
}

impl Network {
    /// This network as seen by a route priced in `symbol` (`USDC`, or a listed token's symbol):
    /// its `asset` and EIP-712 domain are the token's, with the token's decimals and transfer
    /// method. `None` when the network does not list the token.
    pub fn with_token(&self, symbol: &str) -> Option<(Network, TokenTerms)> {
        if symbol.eq_ignore_ascii_case(USDC) {
            return Some((self.clone(), TokenTerms::default()));
        }
        // Symbols match whatever their case (environment variables arrive lower-cased).
        let (_, t) = self
            .config
            .tokens
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(symbol))?;
        let mut n = self.clone();
        n.config.asset = t.address;
        n.config.eip712_name = t.eip712_name.clone();
        n.config.eip712_version = t.eip712_version.clone();
        let transfer = if t.eip3009 {
            AssetTransfer::Eip3009
        } else {
            AssetTransfer::Permit2
        };
        Some((
            n,
            TokenTerms {
                decimals: t.decimals,
                transfer,
            },
        ))
    }

    /// The symbol of the token at `address` on this network (USDC or a listed one), in
    /// capitals.
    pub fn token_symbol(&self, address: Address) -> Option<String> {
        if address == self.config.asset {
            return Some(USDC.to_string());
        }
        self.config
            .tokens
            .iter()
            .find(|(_, t)| t.address == address)
            .map(|(s, _)| s.to_ascii_uppercase())
    }

    /// Every token symbol a route on this network may name, in capitals.
    pub fn token_symbols(&self) -> Vec<String> {
        std::iter::once(USDC.to_string())
            .chain(self.config.tokens.keys().map(|k| k.to_ascii_uppercase()))
            .collect()
    }
}

/// The configured networks, looked up by either spelling.
#[derive(Debug, Clone, Default)]
pub struct Networks {
    by_name: BTreeMap<String, Network>,
}

impl Networks {
    pub fn from_config(map: &BTreeMap<String, NetworkConfig>) -> Self {
        let by_name = map
            .iter()
            .map(|(name, cfg)| {
                let net = Network {
                    v1_name: name.clone(),
                    caip2: format!("eip155:{}", cfg.chain_id),
                    config: cfg.clone(),
                };
                (name.clone(), net)
            })
            .collect();
        Self { by_name }
    }

    /// Finds a network by its v1 name (`base`) or its CAIP-2 id (`eip155:8453`).
    pub fn resolve(&self, spelling: &str) -> Option<&Network> {
        if let Some(n) = self.by_name.get(spelling) {
            return Some(n);
        }
        self.by_name.values().find(|n| n.spelled(spelling))
    }

    /// Every configured network.
    pub fn all(&self) -> impl Iterator<Item = &Network> {
        self.by_name.values()
    }

    /// Every accepted spelling, for error messages.
    pub fn spellings(&self) -> Vec<String> {
        self.by_name
            .values()
            .flat_map(|n| [n.v1_name.clone(), n.caip2.clone()])
            .collect()
    }
}

/// The built-in networks: Base mainnet and Base Sepolia with Circle's USDC.
pub fn builtin_networks() -> BTreeMap<String, NetworkConfig> {
    let mut m = BTreeMap::new();
    m.insert(
        "base".to_string(),
        NetworkConfig {
            chain_id: 8453,
            asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
                .parse()
                .expect("valid address literal"),
            eip712_name: "USD Coin".into(),
            eip712_version: "2".into(),
            rpc_url: "https://mainnet.base.org".into(),
            facilitators: Vec::new(),
            tokens: BTreeMap::new(),
            smart_wallet_factories: Vec::new(),
            explorer_tx_url: "https://basescan.org/tx/".into(),
        },
    );
    m.insert(
        "base-sepolia".to_string(),
        NetworkConfig {
            chain_id: 84532,
            asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
                .parse()
                .expect("valid address literal"),
            eip712_name: "USDC".into(),
            eip712_version: "2".into(),
            rpc_url: "https://sepolia.base.org".into(),
            facilitators: Vec::new(),
            tokens: BTreeMap::new(),
            smart_wallet_factories: Vec::new(),
            explorer_tx_url: "https://sepolia.basescan.org/tx/".into(),
        },
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_resolve_to_the_same_network() {
        let n = Networks::from_config(&builtin_networks());
        assert_eq!(n.resolve("base").unwrap().caip2, "eip155:8453");
        assert_eq!(n.resolve("eip155:8453").unwrap().v1_name, "base");
        assert_eq!(n.resolve("base-sepolia").unwrap().caip2, "eip155:84532");
        assert_eq!(n.resolve("eip155:84532").unwrap().v1_name, "base-sepolia");
        assert!(n.resolve("eip155:1").is_none());
        assert!(n.resolve("Base").is_none());
        assert_eq!(
            n.resolve("base-sepolia").unwrap().config.eip712_name,
            "USDC"
        );
        assert_eq!(n.resolve("base").unwrap().config.eip712_name, "USD Coin");
    }
}
