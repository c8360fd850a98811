//! What a node's answer to a relayed transaction says: a revert (and the payer's rejection it
//! maps to), the relayer unable to pay for gas, or its nonce refused (another sender used the
//! relayer's key): the last two are the relayer's problems, never the payer's.

use crate::verify::Rejection;

/// Whether a node refused a transaction because the relayer (the sender) cannot pay its gas.
pub(super) fn relayer_unfunded(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    m.contains("insufficient funds for gas")
}

/// Whether a node refused a transaction for its nonce (the relayer's key sent another
/// transaction this process did not count): the relayer's problem, never the payer's.
pub(super) fn nonce_refused(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    [
        "nonce too low",
        "nonce too high",
        "replacement transaction underpriced",
        "invalid nonce",
        "nonce has already been used",
    ]
    .iter()
    .any(|w| m.contains(w))
}

/// Maps a revert message of FiatTokenV2 (or a node's error text) to a rejection.
pub fn revert_reason(msg: &str) -> Rejection {
    let m = msg.to_ascii_lowercase();
    if m.contains("authorization is used") || m.contains("used or canceled") {
        Rejection::NonceReplay
    } else if m.contains("exceeds balance") || m.contains("insufficient") {
        Rejection::InsufficientFunds
    } else if m.contains("invalid signature") || m.contains("signature") {
        Rejection::InvalidSignature
    } else if m.contains("not yet valid") {
        Rejection::NotYetValid
    } else if m.contains("expired") {
        Rejection::Expired
    } else if m.contains("invalid payee") || m.contains("caller must be the payee") {
        Rejection::WrongPayee
    } else {
        Rejection::SettlementFailed
    }
}

/// Whether an RPC error is a node answer (the call reverted) rather than a transport failure.
pub(super) fn is_revert(e: &alloy_provider::transport::TransportError) -> bool {
    e.as_error_resp().is_some()
}
