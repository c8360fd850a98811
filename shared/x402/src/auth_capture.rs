//! x402's `auth-capture` scheme on EVM: the payer signs one ERC-3009 `ReceiveWithAuthorization`
//! for the route's price, its nonce the payer-agnostic hash of the payment's terms
//! ([`PaymentInfo`]); the operator (`captureAuthorizer`, this deployment's relayer) authorizes it
//! into the commerce-payments escrow before the request is served, then captures what was served
//! and voids the rest, and may refund a capture until the refund deadline. Here: the terms a
//! requirement offers ([`EscrowTerms`], rendered into `extra`), the facilitator's checks of a
//! payload in the scheme's order ([`verify`]), the escrow's calls and its payment state.

pub mod client;

pub use crate::operator::DEV_OPERATOR_ADDRESS;

use crate::extra::EIP3009_METHOD;
use crate::payment::{PaymentPayload, SignedAuthorization};
use crate::requirements::PaymentRequirements;
use crate::signature::{payer_signed, Signed};
use crate::verify::Rejection;
use alloy_primitives::{address, Address, B256, U256};
use alloy_sol_types::{sol, SolStruct, SolValue};
use serde::{Deserialize, Serialize};

pub use crate::requirements::{
    EscrowTerms, AUTH_CAPTURE_ESCROW as ESCROW_ADDRESS, AUTH_CAPTURE_SCHEME as SCHEME,
};

/// The collector that pulls a payment with the payer's ERC-3009 authorization.
pub const ERC3009_COLLECTOR_ADDRESS: Address = address!("8612dfdc421f80336cd14E8EF9cb1E765dB5ab88");
/// The collector that funds a refund from the operator's balance (commerce-payments'; paygate
/// does not use it: a seller's refund is never the deployment's money).
pub const OPERATOR_REFUND_COLLECTOR_ADDRESS: Address =
    address!("7a03443724d14798c4AB4622F1DAAcA761Fea486");
/// paygate's collector that funds a refund from the payment's receiver (the seller's wallet,
/// which approves it once): the dev chain places it here; a deployment on another chain deploys
/// its build (`shared/contracts`, `ReceiverRefundCollector`) and names it in `[facilitator]
/// refund_collector`.
pub const RECEIVER_REFUND_COLLECTOR_ADDRESS: Address =
    address!("5e11e7000000000000000000000000000000ef0d");

/// How much later than this node's clock a capture deadline may be: the `402` the payer signed
/// against may come from another node, its clock a little ahead.
const RENDER_SKEW_SECS: u64 = 60;

/// Seconds of margin the scheme's deadline checks keep (`SAFETY_MARGIN_SECONDS`).
pub const SAFETY_MARGIN_SECONDS: u64 = 6;

sol! {
    /// The escrow's terms of one payment (the published typehash's order and types).
    #[derive(Debug, PartialEq, Eq)]
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

    /// EIP-3009 `ReceiveWithAuthorization`, what the payer signs.
    struct ReceiveWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }

    interface IAuthCaptureEscrow {
        function authorize(PaymentInfo paymentInfo, uint256 amount, address tokenCollector, bytes collectorData) external;
        function capture(PaymentInfo paymentInfo, uint256 amount, uint16 feeBps, address feeReceiver) external;
        function charge(PaymentInfo paymentInfo, uint256 amount, address tokenCollector, bytes collectorData, uint16 feeBps, address feeReceiver) external;
        function void(PaymentInfo paymentInfo) external;
        function reclaim(PaymentInfo paymentInfo) external;
        function refund(PaymentInfo paymentInfo, uint256 amount, address tokenCollector, bytes collectorData) external;
        function paymentState(bytes32 paymentInfoHash) external view returns (bool hasCollectedPayment, uint120 capturableAmount, uint120 refundableAmount);
        event PaymentReclaimed(bytes32 indexed paymentInfoHash, uint256 amount);
    }
}

/// Sends the escrow call `data` as the payment's `operator` from this node's relayer: directly
/// when the operator is the relayer itself (one node), else through the operator contract at
/// `operator`, which forwards it for any of the deployment's relayers (a cluster).
pub async fn send_as_operator(
    chain: &dyn crate::facilitator::ChainCalls,
    chain_id: u64,
    operator: Address,
    data: Vec<u8>,
    gas: u64,
) -> Result<B256, crate::facilitator::CallError> {
    send_as_operator_told(chain, chain_id, operator, data, gas, None).await
}

/// [`send_as_operator`], telling `sent` the transaction's hash once the node took it.
pub async fn send_as_operator_told(
    chain: &dyn crate::facilitator::ChainCalls,
    chain_id: u64,
    operator: Address,
    data: Vec<u8>,
    gas: u64,
    sent: Option<tokio::sync::oneshot::Sender<B256>>,
) -> Result<B256, crate::facilitator::CallError> {
    if chain.relayer() == Some(operator) {
        return chain
            .send_call_told(chain_id, ESCROW_ADDRESS, data, gas, sent)
            .await;
    }
    use alloy_sol_types::SolCall;
    let call = crate::operator::IPaygateOperator::escrowCall { data: data.into() }.abi_encode();
    chain
        .send_call_told(
            chain_id,
            operator,
            call,
            gas + crate::operator::OPERATOR_GAS,
            sent,
        )
        .await
}

/// The key of a payment in the escrow: its terms hashed with the chain and the escrow.
pub fn payment_hash(chain_id: u64, info: &PaymentInfo) -> B256 {
    let inner = info.eip712_hash_struct();
    alloy_primitives::keccak256((U256::from(chain_id), ESCROW_ADDRESS, inner).abi_encode())
}

/// The nonce the payer signs: [`payment_hash`] of the terms with no payer.
pub fn payer_agnostic_hash(chain_id: u64, info: &PaymentInfo) -> B256 {
    let mut any = info.clone();
    any.payer = Address::ZERO;
    payment_hash(chain_id, &any)
}

/// The EIP-712 digest of `auth` as the payer signs it: an ERC-3009 `ReceiveWithAuthorization`
/// under `req`'s token.
pub(crate) fn signing_hash(auth: &SignedAuthorization, req: &PaymentRequirements) -> B256 {
    ReceiveWithAuthorization {
        from: auth.from,
        to: auth.to,
        value: auth.value,
        validAfter: auth.valid_after,
        validBefore: auth.valid_before,
        nonce: auth.nonce,
    }
    .eip712_signing_hash(&crate::verify::token_domain(req))
}

/// Whether `capture` and `refund` are deadlines a `402` of these terms offered: the capture
/// deadline within `[earliest, latest]`, the refund deadline `refund_window` after it.
fn offered_deadlines(
    capture: u64,
    refund: u64,
    earliest: u64,
    latest: u64,
    refund_window: u64,
) -> bool {
    (earliest..=latest).contains(&capture) && refund.checked_sub(capture) == Some(refund_window)
}

/// A payment verified for the escrow: its terms and the authorization.
#[derive(Debug, Clone)]
pub struct Escrowed {
    pub info: PaymentInfo,
    pub auth: SignedAuthorization,
    /// The digest the payer must accept on chain: a signature its own key did not make (a
    /// smart wallet's, EIP-1271 or ERC-6492); `None` when the payer's key signed it.
    pub wallet_check: Option<B256>,
}

impl Escrowed {
    /// The escrow's `authorize` call: the whole authorization held, through the ERC-3009
    /// collector, `signature` its data (the payer's, or a counterfactual wallet's inner one
    /// once the wallet is deployed).
    pub fn authorize_call(&self, signature: &alloy_primitives::Bytes) -> Vec<u8> {
        use alloy_sol_types::SolCall;
        IAuthCaptureEscrow::authorizeCall {
            paymentInfo: self.info.clone(),
            amount: U256::from(self.info.maxAmount),
            tokenCollector: ERC3009_COLLECTOR_ADDRESS,
            collectorData: signature.clone(),
        }
        .abi_encode()
    }

    /// The escrow's `charge` call: the whole authorization held and captured at once (no fee),
    /// refundable until the refund deadline; `signature` as for [`Self::authorize_call`].
    pub fn charge_call(&self, signature: &alloy_primitives::Bytes) -> Vec<u8> {
        use alloy_sol_types::SolCall;
        IAuthCaptureEscrow::chargeCall {
            paymentInfo: self.info.clone(),
            amount: U256::from(self.info.maxAmount),
            tokenCollector: ERC3009_COLLECTOR_ADDRESS,
            collectorData: signature.clone(),
            feeBps: 0,
            feeReceiver: self.info.feeReceiver,
        }
        .abi_encode()
    }
}

fn field<T: Copy>(v: Option<T>) -> Result<T, Rejection> {
    v.ok_or(Rejection::RequirementsMismatch)
}

/// Checks an `auth-capture` payment against the route's `req` and this deployment's `terms` at
/// `now`, in the order the scheme's facilitator does: scheme, network, the `extra` the payer
/// accepted (this operator, no fee, an escrow this deployment knows, deadlines in order and
/// within the terms), the transfer method, the time window, the collector, the signature, the
/// amount, and the nonce (the payer-agnostic hash of the terms rebuilt from all of it). The
/// simulation of `authorize` is the chain's part.
pub fn verify(
    payment: &PaymentPayload,
    req: &PaymentRequirements,
    terms: &EscrowTerms,
    now: u64,
) -> Result<Escrowed, Rejection> {
    let PaymentPayload::V2(p) = payment else {
        return Err(Rejection::UnsupportedScheme);
    };
    let a = &p.accepted;
    if a.scheme != SCHEME {
        return Err(Rejection::UnsupportedScheme);
    }
    if a.network != req.network.caip2 {
        return Err(Rejection::NetworkMismatch);
    }
    let want = req.to_v2();
    let same = a.amount == want.amount
        && a.asset.eq_ignore_ascii_case(&want.asset)
        && a.pay_to.eq_ignore_ascii_case(&want.pay_to)
        && a.extra.name == want.extra.name
        && a.extra.version == want.extra.version
        && matches!(
            a.extra.payment_flow.as_deref(),
            None | Some(crate::extra::ESCROW_FLOW)
        );
    if !same {
        return Err(Rejection::RequirementsMismatch);
    }
    let e = a
        .extra
        .escrow
        .as_deref()
        .ok_or(Rejection::RequirementsMismatch)?;
    let addr = |s: &Option<String>| {
        s.as_deref()
            .and_then(crate::address::parse_address)
            .ok_or(Rejection::RequirementsMismatch)
    };
    let operator = addr(&e.capture_authorizer)?;
    let fee_recipient = addr(&e.fee_recipient)?;
    let escrow = match &e.auth_capture_escrow {
        None => ESCROW_ADDRESS,
        some => addr(some)?,
    };
    let (min_fee, max_fee) = (field(e.min_fee_bps)?, field(e.max_fee_bps)?);
    if operator != terms.operator || escrow != ESCROW_ADDRESS || min_fee != 0 || max_fee != 0 {
        return Err(Rejection::RequirementsMismatch);
    }
    let capture = field(e.capture_deadline)?;
    let refund = field(e.refund_deadline)?;
    let margin = now.saturating_add(SAFETY_MARGIN_SECONDS);
    if refund < capture || capture <= margin {
        return Err(Rejection::DeadlineOrdering);
    }
    // The deadlines are the ones a `402` offered: a capture deadline `capture_window` after a
    // challenge rendered at most the requirement's `maxTimeoutSeconds` ago (within the render
    // skew between nodes), so a payer cannot pick one that passes before a slow answer is
    // captured; and the refund deadline exactly the route's refund window after it, so a payer
    // cannot turn refunds on (or lengthen them) where the route offers less.
    let earliest = now
        .saturating_add(terms.capture_window)
        .saturating_sub(req.max_timeout_seconds.saturating_add(RENDER_SKEW_SECS));
    let latest = now.saturating_add(terms.capture_window + RENDER_SKEW_SECS);
    if !offered_deadlines(capture, refund, earliest, latest, terms.refund_window) {
        return Err(Rejection::DeadlineOrdering);
    }
    let method = a
        .extra
        .asset_transfer_method
        .as_deref()
        .unwrap_or(EIP3009_METHOD);
    let exact = payment.exact();
    if method != EIP3009_METHOD || exact.authorization.is_none() {
        // The Permit2 collector is not served here: the route's token pays with EIP-3009.
        return Err(Rejection::UnsupportedScheme);
    }
    let auth = payment
        .authorization()
        .map_err(|_| Rejection::InvalidPayload)?;
    if auth.valid_before > U256::from(capture) {
        return Err(Rejection::DeadlineOrdering);
    }
    if auth.valid_before <= U256::from(margin) {
        return Err(Rejection::Expired);
    }
    if !auth.valid_after.is_zero() {
        // The ERC-3009 collector receives the transfer as valid from 0: any other start is a
        // signature the token would refuse.
        return Err(Rejection::NotYetValid);
    }
    if auth.to != ERC3009_COLLECTOR_ADDRESS {
        return Err(Rejection::InvalidCollector);
    }
    let digest = signing_hash(&auth, req);
    // A signature the payer's key did not make may be its smart wallet's: the caller asks the
    // chain (EIP-1271) before anything is reserved.
    let wallet_check = match payer_signed(digest, &auth.signature, auth.from) {
        Signed::ByKey => None,
        Signed::ByWallet(digest) => Some(digest),
    };
    if auth.value != req.token_amount() {
        return Err(Rejection::WrongAmount);
    }
    let salt = exact
        .salt
        .as_deref()
        .and_then(|s| s.parse::<U256>().ok())
        .ok_or(Rejection::InvalidPayload)?;
    let max_amount =
        alloy_primitives::Uint::<120, 2>::checked_from_limbs_slice(auth.value.as_limbs())
            .ok_or(Rejection::WrongAmount)?;
    let uint48 = |v: u64| {
        alloy_primitives::Uint::<48, 1>::try_from(v).map_err(|_| Rejection::DeadlineOrdering)
    };
    let info = PaymentInfo {
        operator,
        payer: auth.from,
        receiver: req.pay_to,
        token: req.network.config.asset,
        maxAmount: max_amount,
        preApprovalExpiry: uint48(u64::try_from(auth.valid_before).unwrap_or(u64::MAX))?,
        authorizationExpiry: uint48(capture)?,
        refundExpiry: uint48(refund)?,
        minFeeBps: min_fee,
        maxFeeBps: max_fee,
        feeReceiver: fee_recipient,
        salt,
    };
    let chain_id = req.network.config.chain_id;
    if payer_agnostic_hash(chain_id, &info) != auth.nonce {
        return Err(Rejection::NonceMismatch);
    }
    Ok(Escrowed {
        info,
        auth,
        wallet_check,
    })
}

/// A payment's terms as a record keeps them (every number a string or an integer), enough to
/// call the escrow again (capture, void, refund) and read its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentInfoWire {
    pub operator: String,
    pub receiver: String,
    pub token: String,
    pub max_amount: String,
    pub pre_approval_expiry: u64,
    pub authorization_expiry: u64,
    pub refund_expiry: u64,
    pub min_fee_bps: u16,
    pub max_fee_bps: u16,
    pub fee_receiver: String,
    pub salt: String,
}

impl PaymentInfoWire {
    pub fn of(info: &PaymentInfo) -> Self {
        Self {
            operator: info.operator.to_checksum(None),
            receiver: info.receiver.to_checksum(None),
            token: info.token.to_checksum(None),
            max_amount: info.maxAmount.to_string(),
            pre_approval_expiry: info.preApprovalExpiry.to::<u64>(),
            authorization_expiry: info.authorizationExpiry.to::<u64>(),
            refund_expiry: info.refundExpiry.to::<u64>(),
            min_fee_bps: info.minFeeBps,
            max_fee_bps: info.maxFeeBps,
            fee_receiver: info.feeReceiver.to_checksum(None),
            salt: format!("{:#x}", info.salt),
        }
    }

    /// The terms again, for `payer`; `None` when the record is malformed.
    pub fn info(&self, payer: Address) -> Option<PaymentInfo> {
        let a = crate::address::parse_address;
        Some(PaymentInfo {
            operator: a(&self.operator)?,
            payer,
            receiver: a(&self.receiver)?,
            token: a(&self.token)?,
            maxAmount: self.max_amount.parse().ok()?,
            preApprovalExpiry: alloy_primitives::Uint::try_from(self.pre_approval_expiry).ok()?,
            authorizationExpiry: alloy_primitives::Uint::try_from(self.authorization_expiry)
                .ok()?,
            refundExpiry: alloy_primitives::Uint::try_from(self.refund_expiry).ok()?,
            minFeeBps: self.min_fee_bps,
            maxFeeBps: self.max_fee_bps,
            feeReceiver: a(&self.fee_receiver)?,
            salt: self.salt.parse().ok()?,
        })
    }
}

/// A payment's state in the escrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EscrowState {
    /// Authorized (or charged) once: the payer's authorization is spent.
    pub collected: bool,
    /// Held, capturable (token units).
    pub capturable: U256,
    /// Captured and not refunded (token units).
    pub refundable: U256,
}

/// The escrow's `paymentState(hash)` call.
pub fn state_call(hash: B256) -> Vec<u8> {
    use alloy_sol_types::SolCall;
    IAuthCaptureEscrow::paymentStateCall {
        paymentInfoHash: hash,
    }
    .abi_encode()
}

/// Reads the answer of [`state_call`].
pub fn decode_state(out: &[u8]) -> Option<EscrowState> {
    use alloy_sol_types::SolCall;
    let r = IAuthCaptureEscrow::paymentStateCall::abi_decode_returns(out).ok()?;
    Some(EscrowState {
        collected: r.hasCollectedPayment,
        capturable: U256::from(r.capturableAmount),
        refundable: U256::from(r.refundableAmount),
    })
}

/// The escrow's state of the payment keyed `hash`, read through `chain`.
pub async fn read_state(
    chain: &dyn crate::facilitator::ChainCalls,
    chain_id: u64,
    hash: B256,
) -> Result<EscrowState, crate::facilitator::CallError> {
    let out = chain
        .view_call(chain_id, ESCROW_ADDRESS, state_call(hash))
        .await?;
    decode_state(&out)
        .ok_or_else(|| crate::facilitator::CallError::Unavailable("unreadable escrow state".into()))
}

/// The escrow's `capture` of `amount` (no fee).
pub fn capture_call(info: &PaymentInfo, amount: U256) -> Vec<u8> {
    use alloy_sol_types::SolCall;
    IAuthCaptureEscrow::captureCall {
        paymentInfo: info.clone(),
        amount,
        feeBps: 0,
        feeReceiver: info.feeReceiver,
    }
    .abi_encode()
}

/// The escrow's `void`: whatever is held goes back to the payer.
pub fn void_call(info: &PaymentInfo) -> Vec<u8> {
    use alloy_sol_types::SolCall;
    IAuthCaptureEscrow::voidCall {
        paymentInfo: info.clone(),
    }
    .abi_encode()
}

/// The escrow's `reclaim`: the payer takes back what is still held after the capture deadline.
pub fn reclaim_call(info: &PaymentInfo) -> Vec<u8> {
    use alloy_sol_types::SolCall;
    IAuthCaptureEscrow::reclaimCall {
        paymentInfo: info.clone(),
    }
    .abi_encode()
}

/// The escrow's `refund` of `amount`, funded by the seller (the payment's receiver) through
/// the receiver refund collector at `collector`.
pub fn refund_call(info: &PaymentInfo, amount: U256, collector: Address) -> Vec<u8> {
    use alloy_sol_types::SolCall;
    IAuthCaptureEscrow::refundCall {
        paymentInfo: info.clone(),
        amount,
        tokenCollector: collector,
        collectorData: Default::default(),
    }
    .abi_encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> PaymentInfo {
        PaymentInfo {
            operator: Address::repeat_byte(1),
            payer: Address::repeat_byte(2),
            receiver: Address::repeat_byte(3),
            token: Address::repeat_byte(4),
            maxAmount: alloy_primitives::Uint::from(10_000u64),
            preApprovalExpiry: alloy_primitives::Uint::from(100u64),
            authorizationExpiry: alloy_primitives::Uint::from(200u64),
            refundExpiry: alloy_primitives::Uint::from(300u64),
            minFeeBps: 0,
            maxFeeBps: 0,
            feeReceiver: Address::repeat_byte(1),
            salt: U256::from(7u64),
        }
    }

    #[test]
    fn the_typehash_is_the_published_one() {
        // keccak256 of the struct's published type string, as the escrow contract states it.
        let published = alloy_primitives::keccak256(
            "PaymentInfo(address operator,address payer,address receiver,address token,uint120 maxAmount,uint48 preApprovalExpiry,uint48 authorizationExpiry,uint48 refundExpiry,uint16 minFeeBps,uint16 maxFeeBps,address feeReceiver,uint256 salt)",
        );
        assert_eq!(info().eip712_type_hash(), published);
    }

    #[test]
    fn the_nonce_ignores_the_payer_and_the_key_does_not() {
        let mut other = info();
        other.payer = Address::repeat_byte(9);
        assert_eq!(
            payer_agnostic_hash(1, &info()),
            payer_agnostic_hash(1, &other)
        );
        assert_ne!(payment_hash(1, &info()), payment_hash(1, &other));
        assert_ne!(payment_hash(1, &info()), payment_hash(2, &info()));
    }

    #[test]
    fn only_the_offered_deadlines_are_taken() {
        // Offered at 1000 with a 900 s capture window and a 3600 s refund window.
        let (earliest, latest) = (1000 + 900 - 120, 1000 + 900 + 60);
        assert!(offered_deadlines(1900, 5500, earliest, latest, 3600));
        assert!(offered_deadlines(
            earliest,
            earliest + 3600,
            earliest,
            latest,
            3600
        ));
        // A capture deadline the payer shortened (75 s away) or lengthened past the skew.
        assert!(!offered_deadlines(1075, 4675, earliest, latest, 3600));
        assert!(!offered_deadlines(
            latest + 1,
            latest + 3601,
            earliest,
            latest,
            3600
        ));
        // Refunds turned on, or lengthened, or shortened, against the route's window.
        assert!(!offered_deadlines(1900, 1901, earliest, latest, 0));
        assert!(!offered_deadlines(1900, 9000, earliest, latest, 3600));
        assert!(!offered_deadlines(1900, 5499, earliest, latest, 3600));
        assert!(offered_deadlines(1900, 1900, earliest, latest, 0));
    }

    #[test]
    fn a_record_gives_back_the_same_terms() {
        let wire = PaymentInfoWire::of(&info());
        assert_eq!(wire.info(Address::repeat_byte(2)), Some(info()));
        let json = serde_json::to_string(&wire).unwrap();
        let back: PaymentInfoWire = serde_json::from_str(&json).unwrap();
        assert_eq!(back, wire);
    }
}
