//! An EOA signature checked against its signer: one secp256k1 recovery (the exact scheme's
//! authorizations and the channels' vouchers alike).

use alloy_primitives::{Address, Signature, B256};

alloy_sol_types::sol! {
    /// A smart wallet's signature check (EIP-1271).
    interface IERC1271 {
        function isValidSignature(bytes32 hash, bytes signature) external view returns (bytes4);
    }
}

/// What an EIP-1271 wallet's `isValidSignature` answers for a signature it accepts.
pub const EIP1271_MAGIC: [u8; 4] = [0x16, 0x26, 0xba, 0x7e];

/// Why a signature does not prove what it should.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// Longer than a 65-byte ECDSA signature: a smart wallet's (ERC-1271 / EIP-6492), which
    /// only the chain can check.
    #[error("not an EOA signature")]
    NotEoa,
    #[error("signature does not recover to the expected signer")]
    Mismatch,
}

/// Checks a 65-byte EOA signature (v in {27, 28} or {0, 1}, low s) over `digest` against
/// `signer`: one secp256k1 recovery. A shorter signature is a mismatch.
pub fn check_eoa_signature(
    digest: &B256,
    signature: &[u8],
    signer: Address,
) -> Result<(), SignatureError> {
    if signature.len() > 65 {
        return Err(SignatureError::NotEoa);
    }
    let sig = Signature::from_raw(signature).map_err(|_| SignatureError::Mismatch)?;
    if sig.normalize_s().is_some() {
        // High-s signatures are malleable; the token and the contract reject them.
        return Err(SignatureError::Mismatch);
    }
    match sig.recover_address_from_prehash(digest) {
        Ok(a) if a == signer => Ok(()),
        _ => Err(SignatureError::Mismatch),
    }
}
