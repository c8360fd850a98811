// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

// The deployment-wide operator (issue 52) of `auth-capture` payments and the facilitator `upto`
// payments name: the escrow lets only a payment's `operator` authorize, capture, void and refund
// it, the x402 upto proxy lets only the witnessed facilitator settle, and each paygate node sends
// from its own relayer key (one key a node, so their transaction nonces never collide). This
// contract is that identity for every node: it forwards a call to the escrow or the upto proxy
// when one of the deployment's relayers sends it, so a hold taken by one node can be captured,
// voided, refunded and reconciled by any other, an `upto` authorization is settled by any node,
// and a 402 rendered by one node is paid at another.
//
// Deployed with its owner and relayers (constructor), or, on the dev chain where the code is
// placed without a constructor (`anvil_setCode`), initialised once by `initialize`. The owner
// adds and removes relayers. It forwards to the escrow only (it holds no funds: the escrow keeps
// held tokens, captures pay the receiver, refunds are funded by the receiver's collector).

address constant ESCROW = 0xf96815976523E00e65Be8f34cA5e64b4f41EB19c;
address constant UPTO_PROXY = 0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002;

contract PaygateOperator {
    address public owner;
    mapping(address => bool) public relayers;

    error NotOwner();
    error NotRelayer(address sender);
    error Initialised();

    event RelayerSet(address indexed relayer, bool allowed);

    constructor(address owner_, address[] memory relayers_) {
        _init(owner_, relayers_);
    }

    /// For code placed without its constructor: sets the owner and relayers once.
    function initialize(address owner_, address[] calldata relayers_) external {
        if (owner != address(0)) revert Initialised();
        _init(owner_, relayers_);
    }

    function setRelayer(address relayer, bool allowed) external {
        if (msg.sender != owner) revert NotOwner();
        relayers[relayer] = allowed;
        emit RelayerSet(relayer, allowed);
    }

    /// Forwards `data` to the escrow as this operator; a revert is the escrow's own.
    function escrow(bytes calldata data) external returns (bytes memory) {
        return _forward(ESCROW, data);
    }

    /// Forwards `data` to the x402 upto proxy as the witnessed facilitator.
    function upto(bytes calldata data) external returns (bytes memory) {
        return _forward(UPTO_PROXY, data);
    }

    function _forward(address target, bytes calldata data) private returns (bytes memory) {
        if (!relayers[msg.sender]) revert NotRelayer(msg.sender);
        (bool ok, bytes memory ret) = target.call(data);
        if (!ok) {
            assembly {
                revert(add(ret, 32), mload(ret))
            }
        }
        return ret;
    }

    function _init(address owner_, address[] memory relayers_) private {
        owner = owner_;
        for (uint256 i = 0; i < relayers_.length; i++) {
            relayers[relayers_[i]] = true;
            emit RelayerSet(relayers_[i], true);
        }
    }
}
