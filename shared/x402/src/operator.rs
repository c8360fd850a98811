//! paygate's deployment-wide operator (issue 52; `shared/contracts/src/PaygateOperator.sol`):
//! one on-chain identity for every node of a deployment, the `auth-capture` escrow's operator
//! and the facilitator `upto` payments name, that forwards calls from any of the deployment's
//! relayer keys. Without one (a single node), the node's relayer is that identity itself.

use alloy_primitives::{address, Address};
use alloy_sol_types::{sol, SolCall};

sol! {
    /// The operator contract's calls.
    interface IPaygateOperator {
        function escrow(bytes data) external returns (bytes);
        function upto(bytes data) external returns (bytes);
        function initialize(address owner, address[] relayers) external;
        function setRelayer(address relayer, bool allowed) external;
        function relayers(address relayer) external view returns (bool);
    }
}

/// Where `paygate devchain setup` places the operator contract on the dev chain.
pub const DEV_OPERATOR_ADDRESS: Address = address!("5e11e700000000000000000000000000000000e0");

/// Gas the operator contract adds to a forwarded call.
pub const OPERATOR_GAS: u64 = 40_000;

/// The upto proxy's call `data` as the operator contract forwards it.
pub fn upto_call(data: Vec<u8>) -> Vec<u8> {
    IPaygateOperator::uptoCall { data: data.into() }.abi_encode()
}
