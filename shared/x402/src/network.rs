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
