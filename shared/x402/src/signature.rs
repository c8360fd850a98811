//! An EOA signature checked against its signer: one secp256k1 recovery (the exact scheme's
//! authorizations and the channels' vouchers alike); what else a payer may sign with (a smart
//! wallet's EIP-1271 signature, ERC-6492-wrapped while the wallet is not deployed) is told apart
//! here and left to the chain ([`crate::facilitator::ChainCalls::wallet_accepts`]).

use alloy_primitives::{Address, Bytes, Signature, B256};

alloy_sol_types::sol! {
    /// A smart wallet's signature check (EIP-1271).
    interface IERC1271 {
        function isValidSignature(bytes32 hash, bytes signature) external view returns (bytes4);
    }
}

/// What an EIP-1271 wallet's `isValidSignature` answers for a signature it accepts.
pub const EIP1271_MAGIC: [u8; 4] = [0x16, 0x26, 0xba, 0x7e];

/// The 32 bytes an ERC-6492 signature ends with.
pub const ERC6492_SUFFIX: [u8; 32] = [
    0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92,
    0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92,
];

/// The development chain's smart-wallet factory (the tests' `Eip1271WalletFactory`), which
/// `make run` and the tests list in `smart_wallet_factories`.
pub const DEV_WALLET_FACTORY_ADDRESS: Address =
    alloy_primitives::address!("6492fac700000000000000000000000000006492");

/// An ERC-6492 signature: a wallet not deployed yet, the factory call that deploys it, and the
/// signature the deployed wallet will accept
/// (`abi.encode(factory, factoryCalldata, signature) ++ ERC6492_SUFFIX`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counterfactual {
    pub factory: Address,
    pub factory_calldata: Bytes,
    pub signature: Bytes,
}

impl Counterfactual {
    /// Reads an ERC-6492 signature; `None` for any other (no suffix, or not the encoding).
    pub fn of(signature: &[u8]) -> Option<Self> {
        use alloy_sol_types::SolValue;
        let body = signature.strip_suffix(&ERC6492_SUFFIX[..])?;
        let (factory, factory_calldata, signature) =
            <(Address, Bytes, Bytes)>::abi_decode_params(body).ok()?;
        Some(Self {
            factory,
            factory_calldata,
            signature,
        })
    }

    /// The wrapped form of `signature` (what a payer's client sends).
    pub fn wrap(&self) -> Bytes {
        use alloy_sol_types::SolValue;
        let mut out = (
            self.factory,
            self.factory_calldata.clone(),
            self.signature.clone(),
        )
            .abi_encode_params();
        out.extend_from_slice(&ERC6492_SUFFIX);
        out.into()
    }
}

/// The signature a deployed wallet is asked about: an ERC-6492 signature's inner one, any
/// other as it is.
pub fn unwrapped(signature: &Bytes) -> Bytes {
    Counterfactual::of(signature).map_or_else(|| signature.clone(), |c| c.signature)
}

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

/// Who vouches for a payer's signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signed {
    /// The payer's own key: recovered here.
    ByKey,
    /// Not the payer's key (a longer signature, or one that recovers to another address):
    /// only a smart wallet at the payer's address can accept it, asked (EIP-1271, ERC-6492)
    /// over this digest before anything is reserved.
    ByWallet(B256),
}

/// [`check_eoa_signature`] for a payer, who may be a smart wallet: what the key does not
/// prove is left to the wallet.
pub fn payer_signed(digest: B256, signature: &[u8], payer: Address) -> Signed {
    match check_eoa_signature(&digest, signature, payer) {
        Ok(()) => Signed::ByKey,
        Err(_) => Signed::ByWallet(digest),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_erc6492_signature_reads_back_and_others_are_not_one() {
        let c = Counterfactual {
            factory: Address::repeat_byte(0x64),
            factory_calldata: Bytes::from(vec![1, 2, 3, 4]),
            signature: Bytes::from(vec![7; 65]),
        };
        let wrapped = c.wrap();
        assert_eq!(Counterfactual::of(&wrapped), Some(c.clone()));
        assert_eq!(unwrapped(&wrapped), c.signature);
        // A 65-byte signature, one without the suffix, and a suffix over junk are not.
        assert_eq!(Counterfactual::of(&[7; 65]), None);
        assert_eq!(Counterfactual::of(&wrapped[..wrapped.len() - 1]), None);
        assert_eq!(Counterfactual::of(&ERC6492_SUFFIX), None);
        let plain = Bytes::from(vec![9; 65]);
        assert_eq!(unwrapped(&plain), plain);
    }
}
