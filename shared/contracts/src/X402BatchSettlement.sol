// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

// paygate's own implementation of the x402 `batch-settlement` contract interface, for the local
// development chain only: production uses the deployed official contract at the same address.
// It is placed at the canonical address with `anvil_setCode` (no constructor runs), so it holds
// no immutables: the EIP-712 domain is computed from `block.chainid` and `address(this)`.
//
// A channel is identified by the EIP-712 hash of its immutable `ChannelConfig`. `balance` is what
// the payer deposited less what was refunded or withdrawn; `totalClaimed` is the part of it the
// receiver claimed with the payer's cumulative vouchers (so `balance - totalClaimed` is what the
// payer can still get back). Claimed amounts move to the receiver's pool and `settle` pays them out.

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {SignatureChecker} from "@openzeppelin/contracts/utils/cryptography/SignatureChecker.sol";

interface IDepositCollector {
    /// Moves `amount` of `token` from `payer` to the settlement contract, as `data` authorizes.
    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata data) external;
}

contract X402BatchSettlement {
    using SafeERC20 for IERC20;

    struct ChannelConfig {
        address payer;
        address payerAuthorizer;
        address receiver;
        address receiverAuthorizer;
        address token;
        uint40 withdrawDelay;
        bytes32 salt;
    }

    struct Voucher {
        ChannelConfig channel;
        uint128 maxClaimableAmount;
    }

    struct VoucherClaim {
        Voucher voucher;
        bytes signature;
        uint128 totalClaimed;
    }

    struct ChannelState {
        uint128 balance;
        uint128 totalClaimed;
    }

    struct PendingWithdrawal {
        uint128 amount;
        uint40 initiatedAt;
    }

    struct ReceiverState {
        uint128 totalClaimed;
        uint128 totalSettled;
    }

    bytes32 public constant CHANNEL_CONFIG_TYPEHASH = keccak256(
        "ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)"
    );
    bytes32 private constant DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 private constant NAME_HASH = keccak256("x402 Batch Settlement");
    bytes32 private constant VERSION_HASH = keccak256("1");
    bytes32 private constant VOUCHER_TYPEHASH = keccak256("Voucher(bytes32 channelId,uint128 maxClaimableAmount)");
    bytes32 private constant REFUND_TYPEHASH = keccak256("Refund(bytes32 channelId,uint256 nonce,uint128 amount)");
    bytes32 private constant CLAIM_ENTRY_TYPEHASH =
        keccak256("ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)");
    bytes32 private constant CLAIM_BATCH_TYPEHASH = keccak256(
        "ClaimBatch(ClaimEntry[] claims)ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"
    );

    uint40 public constant MIN_WITHDRAW_DELAY = 900;
    uint40 public constant MAX_WITHDRAW_DELAY = 2_592_000;

    // The deposit collectors the official clients authorize (ERC-3009 and Permit2).
    address public constant ERC3009_DEPOSIT_COLLECTOR = 0x4020806089470a89826cB9fB1f4059150b550004;
    address public constant PERMIT2_DEPOSIT_COLLECTOR = 0x4020425FAf3B746C082C2f942b4E5159887B0005;

    mapping(bytes32 => ChannelState) public channels;
    mapping(bytes32 => PendingWithdrawal) public pendingWithdrawals;
    mapping(address => mapping(address => ReceiverState)) public receivers;
    mapping(bytes32 => uint256) public refundNonce;
    // Reentrancy guard (a plain slot: the code is placed without a constructor).
    uint256 private locked;

    event Deposited(bytes32 indexed channelId, address indexed payer, address indexed token, uint128 amount, uint128 balance);
    event Claimed(bytes32 indexed channelId, address indexed receiver, uint128 totalClaimed, uint128 amount);
    event Settled(address indexed receiver, address indexed token, address indexed sender, uint128 amount);
    event WithdrawInitiated(bytes32 indexed channelId, uint128 amount, uint40 initiatedAt, uint40 finalizeAt);
    event WithdrawFinalized(bytes32 indexed channelId, uint128 amount);
    event Refunded(bytes32 indexed channelId, uint128 amount, uint256 nonce);

    error InvalidConfig();
    error UnknownCollector();
    error DepositShortfall();
    error ZeroAmount();
    error InvalidVoucherSignature(bytes32 channelId);
    error InvalidAuthorizerSignature();
    error AuthorizerMismatch(bytes32 channelId);
    error ClaimAboveVoucher(bytes32 channelId);
    error ClaimAboveBalance(bytes32 channelId);
    error NotPayer();
    error NotReceiver();
    error NoWithdrawal();
    error WithdrawNotDue(uint40 finalizeAt);
    error RefundAboveAvailable();
    error BadRefundNonce(uint256 expected);
    error Reentered();

    modifier nonReentrant() {
        if (locked == 1) revert Reentered();
        locked = 1;
        _;
        locked = 0;
    }

    // ---------------------------------------------------------------- views

    function domainSeparator() public view returns (bytes32) {
        return keccak256(abi.encode(DOMAIN_TYPEHASH, NAME_HASH, VERSION_HASH, block.chainid, address(this)));
    }

    function getChannelId(ChannelConfig calldata config) public view returns (bytes32) {
        return _typed(
            keccak256(
                abi.encode(
                    CHANNEL_CONFIG_TYPEHASH,
                    config.payer,
                    config.payerAuthorizer,
                    config.receiver,
                    config.receiverAuthorizer,
                    config.token,
                    config.withdrawDelay,
                    config.salt
                )
            )
        );
    }

    function getVoucherDigest(bytes32 channelId, uint128 maxClaimableAmount) public view returns (bytes32) {
        return _typed(keccak256(abi.encode(VOUCHER_TYPEHASH, channelId, maxClaimableAmount)));
    }

    function getRefundDigest(bytes32 channelId, uint256 nonce, uint128 amount) public view returns (bytes32) {
        return _typed(keccak256(abi.encode(REFUND_TYPEHASH, channelId, nonce, amount)));
    }

    function getClaimBatchDigest(VoucherClaim[] calldata voucherClaims) public view returns (bytes32) {
        bytes32[] memory entries = new bytes32[](voucherClaims.length);
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            VoucherClaim calldata c = voucherClaims[i];
            entries[i] = keccak256(
                abi.encode(
                    CLAIM_ENTRY_TYPEHASH, getChannelId(c.voucher.channel), c.voucher.maxClaimableAmount, c.totalClaimed
                )
            );
        }
        return _typed(keccak256(abi.encode(CLAIM_BATCH_TYPEHASH, keccak256(abi.encodePacked(entries)))));
    }

    // ---------------------------------------------------------------- payer side

    /// Deposits `amount` into the channel of `config`, collected from the payer by `collector`
    /// as `collectorData` authorizes (anyone may submit it: the authorization is the payer's).
    function deposit(ChannelConfig calldata config, uint128 amount, address collector, bytes calldata collectorData)
        external
        nonReentrant
    {
        if (amount == 0) revert ZeroAmount();
        if (collector != ERC3009_DEPOSIT_COLLECTOR && collector != PERMIT2_DEPOSIT_COLLECTOR) {
            revert UnknownCollector();
        }
        _checkConfig(config);
        bytes32 id = getChannelId(config);
        IERC20 token = IERC20(config.token);
        uint256 before = token.balanceOf(address(this));
        IDepositCollector(collector).collect(config.payer, config.token, amount, id, collectorData);
        if (token.balanceOf(address(this)) - before != amount) revert DepositShortfall();
        ChannelState storage ch = channels[id];
        ch.balance += amount;
        emit Deposited(id, config.payer, config.token, amount, ch.balance);
    }

    /// Starts the payer's escape hatch: after `withdrawDelay` the unclaimed balance (up to
    /// `amount`) can be taken back with `finalizeWithdraw`; the receiver may claim until then.
    function initiateWithdraw(ChannelConfig calldata config, uint128 amount) external {
        if (msg.sender != config.payer && msg.sender != config.payerAuthorizer) revert NotPayer();
        if (amount == 0) revert ZeroAmount();
        bytes32 id = getChannelId(config);
        uint40 at = uint40(block.timestamp);
        pendingWithdrawals[id] = PendingWithdrawal(amount, at);
        emit WithdrawInitiated(id, amount, at, at + config.withdrawDelay);
    }

    function finalizeWithdraw(ChannelConfig calldata config) external nonReentrant {
        bytes32 id = getChannelId(config);
        PendingWithdrawal memory p = pendingWithdrawals[id];
        if (p.initiatedAt == 0) revert NoWithdrawal();
        uint40 due = p.initiatedAt + config.withdrawDelay;
        if (block.timestamp < due) revert WithdrawNotDue(due);
        delete pendingWithdrawals[id];
        ChannelState storage ch = channels[id];
        uint128 available = ch.balance - ch.totalClaimed;
        uint128 amount = p.amount < available ? p.amount : available;
        ch.balance -= amount;
        if (amount > 0) IERC20(config.token).safeTransfer(config.payer, amount);
        emit WithdrawFinalized(id, amount);
    }

    // ---------------------------------------------------------------- receiver side

    /// Claims vouchers; the caller is the channels' receiver or receiver authorizer.
    function claim(VoucherClaim[] calldata voucherClaims) external {
        _claim(voucherClaims, address(0));
    }

    /// Claims vouchers of many channels in one transaction, authorized by their common receiver
    /// authorizer's signature over the batch (anyone may submit it).
    function claimWithSignature(VoucherClaim[] calldata voucherClaims, bytes calldata authorizerSignature) external {
        if (voucherClaims.length == 0) return;
        address authorizer = voucherClaims[0].voucher.channel.receiverAuthorizer;
        if (!SignatureChecker.isValidSignatureNow(authorizer, getClaimBatchDigest(voucherClaims), authorizerSignature))
        {
            revert InvalidAuthorizerSignature();
        }
        _claim(voucherClaims, authorizer);
    }

    /// Pays the receiver what its claims moved into its pool for `token`.
    function settle(address receiver, address token) external nonReentrant {
        ReceiverState storage r = receivers[receiver][token];
        uint128 amount = r.totalClaimed - r.totalSettled;
        // Nothing claimed since the last settlement: a no-op, so a claim repeated after a crash
        // (its channels skipped as already claimed) does not revert the transaction around it.
        if (amount == 0) return;
        r.totalSettled = r.totalClaimed;
        IERC20(token).safeTransfer(receiver, amount);
        emit Settled(receiver, token, msg.sender, amount);
    }

    /// Returns `amount` of the unclaimed balance to the payer, by the receiver.
    function refund(ChannelConfig calldata config, uint128 amount) external nonReentrant {
        if (msg.sender != config.receiver && msg.sender != config.receiverAuthorizer) revert NotReceiver();
        bytes32 id = getChannelId(config);
        _refund(config, id, amount, refundNonce[id]);
    }

    /// A cooperative refund the receiver authorizer signed (anyone may submit it); `nonce` must
    /// be the channel's current refund nonce, so a signature refunds once.
    function refundWithSignature(
        ChannelConfig calldata config,
        uint128 amount,
        uint256 nonce,
        bytes calldata receiverAuthorizerSignature
    ) external nonReentrant {
        bytes32 id = getChannelId(config);
        if (nonce != refundNonce[id]) revert BadRefundNonce(refundNonce[id]);
        if (
            !SignatureChecker.isValidSignatureNow(
                config.receiverAuthorizer, getRefundDigest(id, nonce, amount), receiverAuthorizerSignature
            )
        ) revert InvalidAuthorizerSignature();
        _refund(config, id, amount, nonce);
    }

    /// Several calls of this contract in one transaction (e.g. a claim, then a refund).
    function multicall(bytes[] calldata data) external returns (bytes[] memory results) {
        results = new bytes[](data.length);
        for (uint256 i = 0; i < data.length; i++) {
            (bool ok, bytes memory out) = address(this).delegatecall(data[i]);
            if (!ok) {
                assembly {
                    revert(add(out, 32), mload(out))
                }
            }
            results[i] = out;
        }
    }

    // ---------------------------------------------------------------- internals

    function _typed(bytes32 structHash) private view returns (bytes32) {
        return keccak256(abi.encodePacked("\x19\x01", domainSeparator(), structHash));
    }

    function _checkConfig(ChannelConfig calldata config) private pure {
        if (
            config.payer == address(0) || config.receiver == address(0) || config.receiverAuthorizer == address(0)
                || config.token == address(0) || config.withdrawDelay < MIN_WITHDRAW_DELAY
                || config.withdrawDelay > MAX_WITHDRAW_DELAY
        ) revert InvalidConfig();
    }

    function _claim(VoucherClaim[] calldata voucherClaims, address authorizer) private {
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            VoucherClaim calldata c = voucherClaims[i];
            ChannelConfig calldata config = c.voucher.channel;
            bytes32 id = getChannelId(config);
            if (authorizer == address(0)) {
                if (msg.sender != config.receiver && msg.sender != config.receiverAuthorizer) revert NotReceiver();
            } else if (config.receiverAuthorizer != authorizer) {
                revert AuthorizerMismatch(id);
            }
            uint128 max = c.voucher.maxClaimableAmount;
            if (c.totalClaimed > max) revert ClaimAboveVoucher(id);
            address voucherSigner = config.payerAuthorizer == address(0) ? config.payer : config.payerAuthorizer;
            if (!SignatureChecker.isValidSignatureNow(voucherSigner, getVoucherDigest(id, max), c.signature)) {
                revert InvalidVoucherSignature(id);
            }
            ChannelState storage ch = channels[id];
            // A voucher already claimed up to this amount moves nothing again.
            if (c.totalClaimed <= ch.totalClaimed) continue;
            if (c.totalClaimed > ch.balance) revert ClaimAboveBalance(id);
            uint128 amount = c.totalClaimed - ch.totalClaimed;
            ch.totalClaimed = c.totalClaimed;
            receivers[config.receiver][config.token].totalClaimed += amount;
            emit Claimed(id, config.receiver, c.totalClaimed, amount);
        }
    }

    function _refund(ChannelConfig calldata config, bytes32 id, uint128 amount, uint256 nonce) private {
        if (amount == 0) revert ZeroAmount();
        ChannelState storage ch = channels[id];
        if (amount > ch.balance - ch.totalClaimed) revert RefundAboveAvailable();
        refundNonce[id] = nonce + 1;
        ch.balance -= amount;
        IERC20(config.token).safeTransfer(config.payer, amount);
        emit Refunded(id, amount, nonce);
    }
}
