// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

// paygate's own implementation of the published interface of the commerce-payments escrow that
// x402's `auth-capture` scheme settles through (`AuthCaptureEscrow`, its ERC-3009 token collector
// and its operator refund collector), for the development chain only. The chain setup places the
// runtime code at the v1.1 addresses the official client signs for (@x402/evm's
// `AUTH_CAPTURE_ESCROW_ADDRESS` and friends); production chains carry the audited deployment
// there. No constructor runs (`anvil_setCode`), so nothing here is immutable: the escrow holds
// the escrowed tokens itself (it is every operator's token store), and each collector names the
// escrow by its constant address.
//
// Lifecycle of one payment (keyed by the hash of its PaymentInfo): `authorize` pulls up to
// `maxAmount` from the payer through a collector into escrow; `capture` pays escrowed funds to the
// receiver (less a fee within the payer-signed bounds), any number of times up to what is held;
// `void` gives the rest back to the payer; after `authorizationExpiry` the payer may `reclaim`
// it; `refund` gives captured funds back (funded through a refund collector) until
// `refundExpiry`. `charge` is authorize and capture in one step.

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";

/// The escrow's view of a payment's terms; the order and types are the published typehash's.
struct PaymentInfo {
    address operator;
    address payer;
    address receiver;
    address token;
    uint120 maxAmount;
    uint48 preApprovalExpiry;
    uint48 authorizationExpiry;
    uint48 refundExpiry;
    uint16 minFeeBps;
    uint16 maxFeeBps;
    address feeReceiver;
    uint256 salt;
}

/// What a collector is for: pulling a payment from its payer, or funding a refund.
enum CollectorType {
    Payment,
    Refund
}

interface ITokenCollector {
    function collectorType() external view returns (CollectorType);
    function collectTokens(PaymentInfo calldata paymentInfo, address tokenStore, uint256 amount, bytes calldata collectorData)
        external;
}

contract AuthCaptureEscrow {
    using SafeERC20 for IERC20;

    struct PaymentState {
        bool hasCollectedPayment;
        uint120 capturableAmount;
        uint120 refundableAmount;
    }

    bytes32 public constant PAYMENT_INFO_TYPEHASH = keccak256(
        "PaymentInfo(address operator,address payer,address receiver,address token,uint120 maxAmount,uint48 preApprovalExpiry,uint48 authorizationExpiry,uint48 refundExpiry,uint16 minFeeBps,uint16 maxFeeBps,address feeReceiver,uint256 salt)"
    );

    mapping(bytes32 => PaymentState) public paymentState;
    uint256 private entered;

    event PaymentCharged(
        bytes32 indexed paymentInfoHash,
        PaymentInfo paymentInfo,
        uint256 amount,
        address tokenCollector,
        uint16 feeBps,
        address feeReceiver
    );
    event PaymentAuthorized(bytes32 indexed paymentInfoHash, PaymentInfo paymentInfo, uint256 amount, address tokenCollector);
    event PaymentCaptured(bytes32 indexed paymentInfoHash, uint256 amount, uint16 feeBps, address feeReceiver);
    event PaymentVoided(bytes32 indexed paymentInfoHash, uint256 amount);
    event PaymentReclaimed(bytes32 indexed paymentInfoHash, uint256 amount);
    event PaymentRefunded(bytes32 indexed paymentInfoHash, uint256 amount, address tokenCollector);

    error InvalidSender(address sender, address expected);
    error ZeroAmount();
    error AmountOverflow(uint256 amount, uint256 limit);
    error ExceedsMaxAmount(uint256 amount, uint256 maxAmount);
    error AfterPreApprovalExpiry(uint48 timestamp, uint48 expiry);
    error InvalidExpiries(uint48 preApproval, uint48 authorization, uint48 refund);
    error FeeBpsOverflow(uint16 feeBps);
    error InvalidFeeBpsRange(uint16 minFeeBps, uint16 maxFeeBps);
    error FeeBpsOutOfRange(uint16 feeBps, uint16 minFeeBps, uint16 maxFeeBps);
    error ZeroFeeReceiver();
    error InvalidFeeReceiver(address attempted, address expected);
    error InvalidCollectorForOperation();
    error TokenCollectionFailed();
    error PaymentAlreadyCollected(bytes32 paymentInfoHash);
    error AfterAuthorizationExpiry(uint48 timestamp, uint48 expiry);
    error InsufficientAuthorization(bytes32 paymentInfoHash, uint256 authorizedAmount, uint256 requestedAmount);
    error ZeroAuthorization(bytes32 paymentInfoHash);
    error BeforeAuthorizationExpiry(uint48 timestamp, uint48 expiry);
    error AfterRefundExpiry(uint48 timestamp, uint48 expiry);
    error RefundExceedsCapture(uint256 refund, uint256 captured);
    error Reentered();

    modifier guarded() {
        if (entered == 1) revert Reentered();
        entered = 1;
        _;
        entered = 0;
    }

    modifier from(address expected) {
        if (msg.sender != expected) revert InvalidSender(msg.sender, expected);
        _;
    }

    modifier nonZero(uint256 amount) {
        if (amount == 0) revert ZeroAmount();
        if (amount > type(uint120).max) revert AmountOverflow(amount, type(uint120).max);
        _;
    }

    /// The payment's key: its terms hashed with the chain and this escrow.
    function getHash(PaymentInfo calldata p) public view returns (bytes32) {
        return keccak256(abi.encode(block.chainid, address(this), keccak256(abi.encode(PAYMENT_INFO_TYPEHASH, p))));
    }

    /// Where an operator's escrowed tokens are held: here, for every operator.
    function getTokenStore(address) external view returns (address) {
        return address(this);
    }

    function authorize(PaymentInfo calldata p, uint256 amount, address collector, bytes calldata data)
        external
        guarded
        from(p.operator)
        nonZero(amount)
    {
        checkTerms(p, amount);
        bytes32 h = getHash(p);
        if (paymentState[h].hasCollectedPayment) revert PaymentAlreadyCollected(h);
        paymentState[h] = PaymentState(true, uint120(amount), 0);
        emit PaymentAuthorized(h, p, amount, collector);
        pull(p, amount, collector, data, CollectorType.Payment);
    }

    function charge(
        PaymentInfo calldata p,
        uint256 amount,
        address collector,
        bytes calldata data,
        uint16 feeBps,
        address feeReceiver
    ) external guarded from(p.operator) nonZero(amount) {
        checkTerms(p, amount);
        checkFee(p, feeBps, feeReceiver);
        bytes32 h = getHash(p);
        if (paymentState[h].hasCollectedPayment) revert PaymentAlreadyCollected(h);
        paymentState[h] = PaymentState(true, 0, uint120(amount));
        emit PaymentCharged(h, p, amount, collector, feeBps, feeReceiver);
        pull(p, amount, collector, data, CollectorType.Payment);
        payOut(p, amount, feeBps, feeReceiver);
    }

    function capture(PaymentInfo calldata p, uint256 amount, uint16 feeBps, address feeReceiver)
        external
        guarded
        from(p.operator)
        nonZero(amount)
    {
        checkFee(p, feeBps, feeReceiver);
        if (block.timestamp >= p.authorizationExpiry) {
            revert AfterAuthorizationExpiry(uint48(block.timestamp), p.authorizationExpiry);
        }
        bytes32 h = getHash(p);
        PaymentState storage s = paymentState[h];
        if (s.capturableAmount < amount) revert InsufficientAuthorization(h, s.capturableAmount, amount);
        s.capturableAmount -= uint120(amount);
        s.refundableAmount += uint120(amount);
        emit PaymentCaptured(h, amount, feeBps, feeReceiver);
        payOut(p, amount, feeBps, feeReceiver);
    }

    function void(PaymentInfo calldata p) external guarded from(p.operator) {
        bytes32 h = getHash(p);
        uint256 held = release(h);
        emit PaymentVoided(h, held);
        IERC20(p.token).safeTransfer(p.payer, held);
    }

    function reclaim(PaymentInfo calldata p) external guarded from(p.payer) {
        if (block.timestamp < p.authorizationExpiry) {
            revert BeforeAuthorizationExpiry(uint48(block.timestamp), p.authorizationExpiry);
        }
        bytes32 h = getHash(p);
        uint256 held = release(h);
        emit PaymentReclaimed(h, held);
        IERC20(p.token).safeTransfer(p.payer, held);
    }

    function refund(PaymentInfo calldata p, uint256 amount, address collector, bytes calldata data)
        external
        guarded
        from(p.operator)
        nonZero(amount)
    {
        if (block.timestamp >= p.refundExpiry) revert AfterRefundExpiry(uint48(block.timestamp), p.refundExpiry);
        bytes32 h = getHash(p);
        PaymentState storage s = paymentState[h];
        if (s.refundableAmount < amount) revert RefundExceedsCapture(amount, s.refundableAmount);
        s.refundableAmount -= uint120(amount);
        emit PaymentRefunded(h, amount, collector);
        pull(p, amount, collector, data, CollectorType.Refund);
        IERC20(p.token).safeTransfer(p.payer, amount);
    }

    /// Clears what is held for `h`, returning it (a payment holding nothing cannot be released).
    function release(bytes32 h) private returns (uint256 held) {
        held = paymentState[h].capturableAmount;
        if (held == 0) revert ZeroAuthorization(h);
        paymentState[h].capturableAmount = 0;
    }

    function checkTerms(PaymentInfo calldata p, uint256 amount) private view {
        if (amount > p.maxAmount) revert ExceedsMaxAmount(amount, p.maxAmount);
        if (block.timestamp >= p.preApprovalExpiry) {
            revert AfterPreApprovalExpiry(uint48(block.timestamp), p.preApprovalExpiry);
        }
        if (p.preApprovalExpiry > p.authorizationExpiry || p.authorizationExpiry > p.refundExpiry) {
            revert InvalidExpiries(p.preApprovalExpiry, p.authorizationExpiry, p.refundExpiry);
        }
        if (p.maxFeeBps > 10_000) revert FeeBpsOverflow(p.maxFeeBps);
        if (p.minFeeBps > p.maxFeeBps) revert InvalidFeeBpsRange(p.minFeeBps, p.maxFeeBps);
    }

    function checkFee(PaymentInfo calldata p, uint16 feeBps, address feeReceiver) private pure {
        if (feeBps < p.minFeeBps || feeBps > p.maxFeeBps) revert FeeBpsOutOfRange(feeBps, p.minFeeBps, p.maxFeeBps);
        if (feeBps > 0 && feeReceiver == address(0)) revert ZeroFeeReceiver();
        if (p.feeReceiver != address(0) && p.feeReceiver != feeReceiver) {
            revert InvalidFeeReceiver(feeReceiver, p.feeReceiver);
        }
    }

    /// Pulls exactly `amount` into escrow through `collector`, which must be of `kind`.
    function pull(PaymentInfo calldata p, uint256 amount, address collector, bytes calldata data, CollectorType kind)
        private
    {
        if (ITokenCollector(collector).collectorType() != kind) revert InvalidCollectorForOperation();
        uint256 before = IERC20(p.token).balanceOf(address(this));
        ITokenCollector(collector).collectTokens(p, address(this), amount, data);
        if (IERC20(p.token).balanceOf(address(this)) != before + amount) revert TokenCollectionFailed();
    }

    function payOut(PaymentInfo calldata p, uint256 amount, uint16 feeBps, address feeReceiver) private {
        uint256 fee = amount * feeBps / 10_000;
        if (fee > 0) IERC20(p.token).safeTransfer(feeReceiver, fee);
        if (amount > fee) IERC20(p.token).safeTransfer(p.receiver, amount - fee);
    }
}

/// USDC's `receiveWithAuthorization` (EIP-3009), with a bytes signature (EOA or EIP-1271).
interface IReceiveWithAuthorization {
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes calldata signature
    ) external;
}

// The escrow at its v1.1 address (the collectors' only caller).
address constant ESCROW = 0xf96815976523E00e65Be8f34cA5e64b4f41EB19c;

/// Pulls a payment with the payer's `ReceiveWithAuthorization` for `maxAmount`, its nonce the
/// payer-agnostic hash of the payment's terms (so the signature binds every term but the payer);
/// keeps `amount` in escrow and gives the rest back. `collectorData` is the signature.
contract Erc3009PaymentCollector is ITokenCollector {
    using SafeERC20 for IERC20;

    error OnlyEscrow();

    function collectorType() external pure returns (CollectorType) {
        return CollectorType.Payment;
    }

    function collectTokens(PaymentInfo calldata p, address tokenStore, uint256 amount, bytes calldata signature)
        external
    {
        if (msg.sender != ESCROW) revert OnlyEscrow();
        PaymentInfo memory anyPayer = p;
        anyPayer.payer = address(0);
        bytes32 nonce = AuthCaptureEscrow(ESCROW).getHash(anyPayer);
        IReceiveWithAuthorization(p.token).receiveWithAuthorization(
            p.payer, address(this), p.maxAmount, 0, p.preApprovalExpiry, nonce, signature
        );
        if (p.maxAmount > amount) IERC20(p.token).safeTransfer(p.payer, p.maxAmount - amount);
        IERC20(p.token).safeTransfer(tokenStore, amount);
    }
}

/// Funds a refund from the operator's own balance (the operator approves this collector).
contract OperatorRefundCollector is ITokenCollector {
    using SafeERC20 for IERC20;

    error OnlyEscrow();

    function collectorType() external pure returns (CollectorType) {
        return CollectorType.Refund;
    }

    function collectTokens(PaymentInfo calldata p, address tokenStore, uint256 amount, bytes calldata) external {
        if (msg.sender != ESCROW) revert OnlyEscrow();
        IERC20(p.token).safeTransferFrom(p.operator, tokenStore, amount);
    }
}

/// Funds a refund from the seller: the payment's receiver, which approves this collector once
/// (paygate's own collector, issue 52: the deployment, its operator, never pays a seller's
/// refund). Only the escrow calls it, and the escrow refunds at most what that payment captured
/// to that receiver, so a receiver's approval lets no one take more than it was paid.
contract ReceiverRefundCollector is ITokenCollector {
    using SafeERC20 for IERC20;

    error OnlyEscrow();

    function collectorType() external pure returns (CollectorType) {
        return CollectorType.Refund;
    }

    function collectTokens(PaymentInfo calldata p, address tokenStore, uint256 amount, bytes calldata) external {
        if (msg.sender != ESCROW) revert OnlyEscrow();
        IERC20(p.token).safeTransferFrom(p.receiver, tokenStore, amount);
    }
}
