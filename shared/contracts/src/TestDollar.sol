// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

// A plain ERC-20 without EIP-3009 for the development chain's tests and `make run`: the kind of
// token x402 pays through Permit2. Placed with `anvil_setCode` (no constructor runs), so its name,
// symbol and decimals are constants; anyone may mint (a test token, never deployed elsewhere).

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";

contract TestDollar is ERC20 {
    constructor() ERC20("", "") {}

    function name() public pure override returns (string memory) {
        return "Test Dollar";
    }

    function symbol() public pure override returns (string memory) {
        return "TDOL";
    }

    function decimals() public pure override returns (uint8) {
        return 6;
    }

    function mint(address to, uint256 amount) external {
        _mint(to, amount);
    }
}
