// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

// Multicall3's `aggregate3`, for the development chain: every real chain paygate settles on has
// Multicall3 at 0xcA11bde05977b3631167028862bE2a173976CA11, and the gateway asks a counterfactual
// (ERC-6492) wallet about its signature through it in one simulated call: the factory call that
// deploys the wallet, then the wallet's `isValidSignature`. Our implementation of that published
// interface; the chain setup places it at the same address.

contract Multicall3 {
    struct Call3 {
        address target;
        bool allowFailure;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    error Call3Failed(uint256 index, bytes reason);

    /// Makes each call in order; a failed call reverts the whole unless it allows failure.
    function aggregate3(Call3[] calldata calls) external payable returns (Result[] memory returnData) {
        returnData = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; i++) {
            (bool ok, bytes memory out) = calls[i].target.call(calls[i].callData);
            if (!ok && !calls[i].allowFailure) revert Call3Failed(i, out);
            returnData[i] = Result(ok, out);
        }
    }
}
