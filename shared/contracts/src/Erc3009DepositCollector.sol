// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

// paygate's own implementation of the x402 batch-settlement ERC-3009 deposit collector, for the
// local development chain (placed at the canonical address with `anvil_setCode`). The payer signs
// `ReceiveWithAuthorization` to this contract with the nonce `keccak256(abi.encode(channelId,
// salt))`, so an authorization deposits into one channel only and only once.

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";

interface IERC3009 {
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external;
}

contract Erc3009DepositCollector {
    using SafeERC20 for IERC20;

    address public constant SETTLEMENT = 0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003;

    error OnlySettlement();

    /// `data` is `abi.encode(validAfter, validBefore, salt, signature)`.
    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata data) external {
        if (msg.sender != SETTLEMENT) revert OnlySettlement();
        (uint256 validAfter, uint256 validBefore, uint256 salt, bytes memory signature) =
            abi.decode(data, (uint256, uint256, uint256, bytes));
        bytes32 nonce = keccak256(abi.encode(channelId, salt));
        IERC3009(token).receiveWithAuthorization(payer, address(this), amount, validAfter, validBefore, nonce, signature);
        IERC20(token).safeTransfer(SETTLEMENT, amount);
    }
}
