// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

// paygate's own implementation of the x402 Permit2 proxies' published interface (the `exact`
// scheme's `assetTransferMethod: "permit2"` and the `upto` scheme), for the local development
// chain only: production chains have the deployed proxies at the same addresses. Placed with
// `anvil_setCode` (no constructor runs): Permit2's address is a constant, nothing is immutable.
//
// The payer signs a Permit2 transfer whose spender is the proxy and whose witness names the
// receiver (and, for `upto`, the one facilitator allowed to settle it). Anyone may submit an
// `exact` settlement (it can only move the permitted amount to the witnessed receiver); an `upto`
// settlement comes from the witnessed facilitator, for at most the permitted amount.
// `settleWithPermit` first submits the payer's EIP-2612 permit giving Permit2 its allowance (the
// `eip2612GasSponsoring` extension: a payer that never approved Permit2 pays its first call with
// no transaction of its own); a permit someone already submitted is no failure.

import {ISignatureTransfer} from "./Permit2.sol";
import {IERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/IERC20Permit.sol";

abstract contract X402Permit2ProxyBase {
    ISignatureTransfer public constant PERMIT2 = ISignatureTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);

    uint256 private entered;

    /// An EIP-2612 permit of the token to Permit2, signed by the payer (65 bytes split).
    struct EIP2612Permit {
        uint256 value;
        uint256 deadline;
        bytes32 r;
        bytes32 s;
        uint8 v;
    }

    event Settled();
    event SettledWithPermit();

    error InvalidDestination();
    error InvalidOwner();
    error PaymentTooEarly();
    error ReentrancyGuardReentrantCall();

    modifier nonReentrant() {
        if (entered == 1) revert ReentrancyGuardReentrantCall();
        entered = 1;
        _;
        entered = 0;
    }

    /// Submits `p` for `owner` (a permit already used, e.g. submitted by someone else first, is
    /// skipped: the settlement then fails on its own if the allowance is missing).
    function permitPermit2(address token, address owner, EIP2612Permit calldata p) internal {
        try IERC20Permit(token).permit(owner, address(PERMIT2), p.value, p.deadline, p.v, p.r, p.s) {} catch {}
        emit SettledWithPermit();
    }

    function check(address owner, address to, uint256 validAfter) internal view {
        if (owner == address(0)) revert InvalidOwner();
        if (to == address(0)) revert InvalidDestination();
        if (block.timestamp < validAfter) revert PaymentTooEarly();
    }
}

contract X402ExactPermit2Proxy is X402Permit2ProxyBase {
    struct Witness {
        address to;
        uint256 validAfter;
    }

    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,uint256 validAfter)");

    error InvalidAmount();

    /// Moves the whole permitted amount from `owner` to `witness.to`.
    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        transfer(permit, owner, witness, signature);
    }

    /// [`settle`] after `owner`'s EIP-2612 permit to Permit2.
    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        permitPermit2(permit.permitted.token, owner, permit2612);
        transfer(permit, owner, witness, signature);
    }

    function transfer(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) internal {
        check(owner, witness.to, witness.validAfter);
        if (permit.permitted.amount == 0) revert InvalidAmount();
        PERMIT2.permitWitnessTransferFrom(
            permit,
            ISignatureTransfer.SignatureTransferDetails({to: witness.to, requestedAmount: permit.permitted.amount}),
            owner,
            keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.validAfter)),
            WITNESS_TYPE_STRING,
            signature
        );
        emit Settled();
    }
}

contract X402UptoPermit2Proxy is X402Permit2ProxyBase {
    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,address facilitator,uint256 validAfter)");

    error AmountExceedsPermitted();
    error UnauthorizedFacilitator();

    /// Moves `amount`, at most the permitted amount, from `owner` to `witness.to`; only the
    /// witnessed facilitator may call it.
    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        transfer(permit, amount, owner, witness, signature);
    }

    /// [`settle`] after `owner`'s EIP-2612 permit to Permit2.
    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        permitPermit2(permit.permitted.token, owner, permit2612);
        transfer(permit, amount, owner, witness, signature);
    }

    function transfer(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) internal {
        check(owner, witness.to, witness.validAfter);
        if (msg.sender != witness.facilitator) revert UnauthorizedFacilitator();
        if (amount > permit.permitted.amount) revert AmountExceedsPermitted();
        PERMIT2.permitWitnessTransferFrom(
            permit,
            ISignatureTransfer.SignatureTransferDetails({to: witness.to, requestedAmount: amount}),
            owner,
            keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter)),
            WITNESS_TYPE_STRING,
            signature
        );
        emit Settled();
    }
}
