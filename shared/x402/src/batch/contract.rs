//! The scheme's fixed facts: its name, the canonical addresses and limits, the contract's
//! EIP-712 types and ABI, and the refusals with their reason words.

use alloy_primitives::{address, Address};
use alloy_sol_types::sol;

/// The scheme's name in requirements and payloads.
pub const SCHEME: &str = "batch-settlement";
/// Where the official clients expect the settlement contract on every chain.
pub const SETTLEMENT_ADDRESS: Address = address!("4020074e9dF2ce1deE5A9C1b5c3f541D02a10003");
/// The ERC-3009 deposit collector the payer's `ReceiveWithAuthorization` names as `to`.
pub const ERC3009_COLLECTOR_ADDRESS: Address = address!("4020806089470a89826cB9fB1f4059150b550004");
/// The Permit2 deposit collector (tokens without ERC-3009).
pub const PERMIT2_COLLECTOR_ADDRESS: Address = address!("4020425FAf3B746C082C2f942b4E5159887B0005");
/// The withdraw delay's bounds, in seconds (15 minutes to 30 days), as the contract enforces.
pub const MIN_WITHDRAW_DELAY: u64 = 900;
pub const MAX_WITHDRAW_DELAY: u64 = 2_592_000;

sol! {
    /// A channel's immutable configuration; its EIP-712 hash is the channel id.
    #[derive(Debug, PartialEq, Eq)]
    struct ChannelConfig {
        address payer;
        address payerAuthorizer;
        address receiver;
        address receiverAuthorizer;
        address token;
        uint40 withdrawDelay;
        bytes32 salt;
    }

    /// The payer's cumulative promise: the receiver may claim up to this much in total.
    struct Voucher {
        bytes32 channelId;
        uint128 maxClaimableAmount;
    }

    /// A cooperative refund the receiver authorizer signs.
    struct Refund {
        bytes32 channelId;
        uint256 nonce;
        uint128 amount;
    }

    struct ClaimEntry {
        bytes32 channelId;
        uint128 maxClaimableAmount;
        uint128 totalClaimed;
    }

    /// What the receiver authorizer signs to claim many channels in one transaction.
    struct ClaimBatch {
        ClaimEntry[] claims;
    }

    /// The deposit's ERC-3009 authorization (to the collector, nonce bound to the channel).
    struct ReceiveWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }

    /// The contract's interface, as the official clients call it.
    interface IBatchSettlement {
        struct VoucherBody {
            ChannelConfig channel;
            uint128 maxClaimableAmount;
        }
        struct VoucherClaim {
            VoucherBody voucher;
            bytes signature;
            uint128 totalClaimed;
        }
        function deposit(ChannelConfig config, uint128 amount, address collector, bytes collectorData) external;
        function claim(VoucherClaim[] voucherClaims) external;
        function claimWithSignature(VoucherClaim[] voucherClaims, bytes authorizerSignature) external;
        function settle(address receiver, address token) external;
        function initiateWithdraw(ChannelConfig config, uint128 amount) external;
        function finalizeWithdraw(ChannelConfig config) external;
        function refund(ChannelConfig config, uint128 amount) external;
        function refundWithSignature(ChannelConfig config, uint128 amount, uint256 nonce, bytes receiverAuthorizerSignature) external;
        function multicall(bytes[] data) external returns (bytes[] results);
        function getChannelId(ChannelConfig config) external view returns (bytes32);
        function getVoucherDigest(bytes32 channelId, uint128 maxClaimableAmount) external view returns (bytes32);
        function getRefundDigest(bytes32 channelId, uint256 nonce, uint128 amount) external view returns (bytes32);
        function getClaimBatchDigest(VoucherClaim[] voucherClaims) external view returns (bytes32);
        function channels(bytes32 channelId) external view returns (uint128 balance, uint128 totalClaimed);
        function pendingWithdrawals(bytes32 channelId) external view returns (uint128 amount, uint40 initiatedAt);
        function receivers(address receiver, address token) external view returns (uint128 totalClaimed, uint128 totalSettled);
        function refundNonce(bytes32 channelId) external view returns (uint256);
        event Deposited(bytes32 indexed channelId, address indexed payer, address indexed token, uint128 amount, uint128 balance);
        event Claimed(bytes32 indexed channelId, address indexed receiver, uint128 totalClaimed, uint128 amount);
        event Settled(address indexed receiver, address indexed token, address indexed sender, uint128 amount);
        event WithdrawInitiated(bytes32 indexed channelId, uint128 amount, uint40 initiatedAt, uint40 finalizeAt);
        event WithdrawFinalized(bytes32 indexed channelId, uint128 amount);
        event Refunded(bytes32 indexed channelId, uint128 amount, uint256 nonce);
    }
}

/// Why a channel payment is refused, with the scheme's own reason words (what the official
/// clients read: a `cumulative_amount_mismatch` makes an honest client resync from the corrective
/// 402's `channelState` / `voucherState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChannelRejection {
    #[error("a channel field is malformed")]
    Malformed,
    #[error("the channel id is not the hash of the channel's configuration")]
    ChannelIdMismatch,
    #[error("the channel pays another receiver")]
    ReceiverMismatch,
    #[error("the channel names another receiver authorizer")]
    ReceiverAuthorizerMismatch,
    #[error("the channel holds another token")]
    TokenMismatch,
    #[error("the channel's withdraw delay is not this route's")]
    WithdrawDelayMismatch,
    #[error("the voucher's signature does not recover to the payer authorizer")]
    VoucherSignature,
    #[error("the deposit's ERC-3009 authorization is missing")]
    Erc3009Required,
    #[error("the deposit's authorization signature is invalid")]
    DepositSignature,
    #[error("the deposit's authorization has expired or expires too soon")]
    DepositExpired,
    #[error("the deposit's authorization is not valid yet")]
    DepositNotYetValid,
    #[error("the voucher's cumulative amount is not the charged amount plus this request's price")]
    CumulativeMismatch,
    #[error("the voucher's cumulative amount is not above what was already claimed")]
    CumulativeBelowClaimed,
    #[error("the voucher's cumulative amount is above the channel's balance")]
    CumulativeExceedsBalance,
    #[error("the channel's withdrawal finishes before a claim could land")]
    WithdrawalDue,
    #[error("the channel has nothing left to refund")]
    RefundNoBalance,
    #[error("the refund amount must be a positive amount within what is left in the channel")]
    RefundAmountInvalid,
    #[error("no such channel")]
    MissingChannel,
}

impl ChannelRejection {
    /// The x402 reason word for this refusal.
    pub const fn reason(self) -> &'static str {
        match self {
            Self::Malformed => "invalid_batch_settlement_evm_payload_type",
            Self::ChannelIdMismatch => "invalid_batch_settlement_evm_channel_id_mismatch",
            Self::ReceiverMismatch => "invalid_batch_settlement_evm_receiver_mismatch",
            Self::ReceiverAuthorizerMismatch => {
                "invalid_batch_settlement_evm_receiver_authorizer_mismatch"
            }
            Self::TokenMismatch => "invalid_batch_settlement_evm_token_mismatch",
            Self::WithdrawDelayMismatch => "invalid_batch_settlement_evm_withdraw_delay_mismatch",
            Self::VoucherSignature => "invalid_batch_settlement_evm_voucher_signature",
            Self::Erc3009Required => "invalid_batch_settlement_evm_erc3009_authorization_required",
            Self::DepositSignature => {
                "invalid_batch_settlement_evm_receive_authorization_signature"
            }
            Self::DepositExpired => {
                "invalid_batch_settlement_evm_payload_authorization_valid_before"
            }
            Self::DepositNotYetValid => {
                "invalid_batch_settlement_evm_payload_authorization_valid_after"
            }
            Self::CumulativeMismatch => "invalid_batch_settlement_evm_cumulative_amount_mismatch",
            Self::CumulativeBelowClaimed => "invalid_batch_settlement_evm_cumulative_below_claimed",
            Self::CumulativeExceedsBalance => {
                "invalid_batch_settlement_evm_cumulative_exceeds_balance"
            }
            // The official clients know no word for it; a withdrawing channel cannot be paid.
            Self::WithdrawalDue => "invalid_batch_settlement_evm_withdraw_pending",
            Self::RefundNoBalance => "invalid_batch_settlement_evm_refund_no_balance",
            Self::RefundAmountInvalid => "invalid_batch_settlement_evm_refund_amount_invalid",
            Self::MissingChannel => "invalid_batch_settlement_evm_missing_channel",
        }
    }
}
