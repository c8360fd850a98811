// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

// A minimal smart wallet for the development chain's tests: it holds tokens, answers EIP-1271's
// `isValidSignature` for what its owner's key signed, and makes calls its owner asks for (an
// approval, say). It stands for the smart-wallet payers (ERC-4337 accounts) every scheme
// serves: deployed (the tests place its runtime code with `anvil_setCode` and its owner in
// storage slot 0), or counterfactual: an ERC-6492 signature names `Eip1271WalletFactory` and
// its `createWallet` call, which the relayer sends before settling the wallet's first payment.

import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

contract Eip1271Wallet {
    address public owner;

    error NotOwner();
    error CallFailed(bytes reason);

    constructor(address owner_) {
        owner = owner_;
    }

    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
        (address signer, ECDSA.RecoverError err,) = ECDSA.tryRecover(hash, signature);
        if (err == ECDSA.RecoverError.NoError && signer == owner) return 0x1626ba7e;
        return 0xffffffff;
    }

    /// A call the owner makes as the wallet.
    function execute(address to, bytes calldata data) external returns (bytes memory) {
        if (msg.sender != owner) revert NotOwner();
        (bool ok, bytes memory out) = to.call(data);
        if (!ok) revert CallFailed(out);
        return out;
    }
}

/// Deploys `Eip1271Wallet`s at addresses known before they exist (CREATE2 on owner and salt).
contract Eip1271WalletFactory {
    event WalletCreated(address indexed wallet, address indexed owner);

    /// Deploys the wallet of `owner` and `salt`; reverts if it exists already.
    function createWallet(address owner, bytes32 salt) external returns (address wallet) {
        wallet = address(new Eip1271Wallet{salt: salt}(owner));
        emit WalletCreated(wallet, owner);
    }

    /// The address `createWallet(owner, salt)` deploys to.
    function walletAddress(address owner, bytes32 salt) external view returns (address) {
        bytes32 code = keccak256(abi.encodePacked(type(Eip1271Wallet).creationCode, abi.encode(owner)));
        return address(uint160(uint256(keccak256(abi.encodePacked(bytes1(0xff), address(this), salt, code)))));
    }
}
