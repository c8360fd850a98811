// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

// A minimal smart wallet for the development chain's tests: it holds tokens and answers EIP-1271's
// `isValidSignature` for what its owner's key signed. It stands for the smart-wallet payers a
// payment channel without a payer authorizer serves (the channel contract and USDC check their
// signatures through EIP-1271). The tests place its code with `anvil_setCode` and its owner in
// storage slot 0 with `anvil_setStorageAt`; it is never deployed anywhere else.

import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

contract Eip1271Wallet {
    address public owner;

    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
        (address signer, ECDSA.RecoverError err,) = ECDSA.tryRecover(hash, signature);
        if (err == ECDSA.RecoverError.NoError && signer == owner) return 0x1626ba7e;
        return 0xffffffff;
    }
}
