//! Payers the chain said hold no code, remembered for a while: a flood of forged EOA-length
//! signatures in such a payer's name is refused without asking the chain each time
//! (`wallets.rs` asks and remembers).

use alloy_primitives::Address;
use std::time::{Duration, Instant};

/// How long the chain's "no code here" is trusted (an account can gain code: a wallet deployed
/// at a counterfactual address, an EIP-7702 delegation).
const EOA_MEMORY: Duration = Duration::from_secs(600);

/// At most this many addresses are remembered; past it the memory starts afresh.
const EOA_CAPACITY: usize = 100_000;

/// Payers the chain said hold no code, for [`EOA_MEMORY`]: a flood of forged EOA-length
/// signatures in such a payer's name is refused without asking the chain each time.
#[derive(Default)]
pub(crate) struct KnownEoas {
    seen: dashmap::DashMap<Address, Instant>,
}

impl KnownEoas {
    /// Whether `payer` was seen without code within [`EOA_MEMORY`].
    pub(crate) fn holds(&self, payer: Address) -> bool {
        self.seen
            .get(&payer)
            .is_some_and(|at| at.elapsed() < EOA_MEMORY)
    }

    /// `payer` turned out to be a wallet (one not deployed yet signed through its factory, and
    /// is deployed by its payment).
    pub(crate) fn forget(&self, payer: Address) {
        self.seen.remove(&payer);
    }

    pub(crate) fn remember(&self, payer: Address) {
        if self.seen.len() >= EOA_CAPACITY {
            self.seen.clear();
        }
        self.seen.insert(payer, Instant::now());
    }
}
