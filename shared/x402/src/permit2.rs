//! Permit2 and x402's Permit2 proxies: where the official clients expect them on every EVM
//! chain (the `exact` scheme's `assetTransferMethod: "permit2"` signs for the exact proxy, the
//! `upto` scheme for the upto proxy, each as Permit2's spender).

use alloy_primitives::{address, Address};

/// Uniswap's Permit2, at its canonical address.
pub const PERMIT2_ADDRESS: Address = address!("000000000022D473030F116dDEE9F6B43aC78BA3");

/// `x402ExactPermit2Proxy`: settles a whole permitted amount to the witnessed receiver.
pub const EXACT_PROXY_ADDRESS: Address = address!("402085c248EeA27D92E8b30b2C58ed07f9E20001");

/// `x402UptoPermit2Proxy`: settles up to the permitted amount, called by the witnessed
/// facilitator.
pub const UPTO_PROXY_ADDRESS: Address = address!("4020A4f3b7b90ccA423B9fabCc0CE57C6C240002");

/// The development chain's test token without EIP-3009 (`TestDollar`, "TDOL", 6 decimals), which
/// `paygate devchain setup` places and mints: what Permit2 payments are tried with locally.
pub const DEV_TEST_TOKEN_ADDRESS: Address = address!("7E57D011A0000000000000000000000000000D01");

/// The EIP-712 domain of Permit2 on `chain_id` (Permit2's has no version).
pub fn domain(chain_id: u64) -> alloy_sol_types::Eip712Domain {
    alloy_sol_types::eip712_domain! {
        name: "Permit2",
        chain_id: chain_id,
        verifying_contract: PERMIT2_ADDRESS,
    }
}

/// What a payer signs for the `exact` scheme's Permit2 transfer method: spender the exact proxy,
/// the witness naming the receiver.
pub mod exact {
    alloy_sol_types::sol! {
        #[derive(Debug, PartialEq, Eq)]
        struct TokenPermissions {
            address token;
            uint256 amount;
        }

        #[derive(Debug, PartialEq, Eq)]
        struct Witness {
            address to;
            uint256 validAfter;
        }

        #[derive(Debug, PartialEq, Eq)]
        struct PermitWitnessTransferFrom {
            TokenPermissions permitted;
            address spender;
            uint256 nonce;
            uint256 deadline;
            Witness witness;
        }
    }
}

/// What a payer signs for the `upto` scheme: spender the upto proxy, the witness naming the
/// receiver and the one facilitator that may settle it.
pub mod upto {
    alloy_sol_types::sol! {
        #[derive(Debug, PartialEq, Eq)]
        struct TokenPermissions {
            address token;
            uint256 amount;
        }

        #[derive(Debug, PartialEq, Eq)]
        struct Witness {
            address to;
            address facilitator;
            uint256 validAfter;
        }

        #[derive(Debug, PartialEq, Eq)]
        struct PermitWitnessTransferFrom {
            TokenPermissions permitted;
            address spender;
            uint256 nonce;
            uint256 deadline;
            Witness witness;
        }
    }
}

/// The EIP-712 digest a Permit2 payment's payer signed: `exact`'s witness, or `upto`'s when
/// the witness names a facilitator. (`auth` carries the fields shared with EIP-3009, see
/// [`crate::payment::Permit2Terms`].)
pub fn signing_hash(
    auth: &crate::payment::SignedAuthorization,
    p: &crate::payment::Permit2Terms,
    chain_id: u64,
) -> alloy_primitives::B256 {
    use alloy_sol_types::SolStruct;
    let nonce = alloy_primitives::U256::from_be_bytes(auth.nonce.0);
    let domain = domain(chain_id);
    match p.facilitator {
        None => exact::PermitWitnessTransferFrom {
            permitted: exact::TokenPermissions {
                token: p.token,
                amount: auth.value,
            },
            spender: p.spender,
            nonce,
            deadline: auth.valid_before,
            witness: exact::Witness {
                to: auth.to,
                validAfter: auth.valid_after,
            },
        }
        .eip712_signing_hash(&domain),
        Some(facilitator) => upto::PermitWitnessTransferFrom {
            permitted: upto::TokenPermissions {
                token: p.token,
                amount: auth.value,
            },
            spender: p.spender,
            nonce,
            deadline: auth.valid_before,
            witness: upto::Witness {
                to: auth.to,
                facilitator,
                validAfter: auth.valid_after,
            },
        }
        .eip712_signing_hash(&domain),
    }
}

/// The proxy call that settles a Permit2 payment: the exact proxy's `settle` for the whole
/// permitted amount, or the upto proxy's for `amount` (at most the permitted one); its
/// `settleWithPermit` when the payer sent its token's permit to Permit2 (`permit2612`).
pub fn settle_call(
    auth: &crate::payment::SignedAuthorization,
    p: &crate::payment::Permit2Terms,
    amount: alloy_primitives::U256,
    permit2612: Option<EIP2612Permit>,
) -> (Address, Vec<u8>) {
    use alloy_sol_types::SolCall;
    let permit = PermitTransferFrom {
        permitted: TokenAmount {
            token: p.token,
            amount: auth.value,
        },
        nonce: alloy_primitives::U256::from_be_bytes(auth.nonce.0),
        deadline: auth.valid_before,
    };
    let (owner, signature) = (auth.from, auth.signature.clone());
    match p.facilitator {
        None => {
            let witness = ExactWitness {
                to: auth.to,
                validAfter: auth.valid_after,
            };
            let data = match permit2612 {
                None => IExactPermit2Proxy::settleCall {
                    permit,
                    owner,
                    witness,
                    signature,
                }
                .abi_encode(),
                Some(permit2612) => IExactPermit2Proxy::settleWithPermitCall {
                    permit2612,
                    permit,
                    owner,
                    witness,
                    signature,
                }
                .abi_encode(),
            };
            (EXACT_PROXY_ADDRESS, data)
        }
        Some(facilitator) => {
            let witness = UptoWitness {
                to: auth.to,
                facilitator,
                validAfter: auth.valid_after,
            };
            let data = match permit2612 {
                None => IUptoPermit2Proxy::settleCall {
                    permit,
                    amount,
                    owner,
                    witness,
                    signature,
                }
                .abi_encode(),
                Some(permit2612) => IUptoPermit2Proxy::settleWithPermitCall {
                    permit2612,
                    permit,
                    amount,
                    owner,
                    witness,
                    signature,
                }
                .abi_encode(),
            };
            (UPTO_PROXY_ADDRESS, data)
        }
    }
}

alloy_sol_types::sol! {
    /// Permit2's transfer as the proxies take it.
    #[derive(Debug)]
    struct TokenAmount {
        address token;
        uint256 amount;
    }

    #[derive(Debug)]
    struct PermitTransferFrom {
        TokenAmount permitted;
        uint256 nonce;
        uint256 deadline;
    }

    #[derive(Debug)]
    struct ExactWitness {
        address to;
        uint256 validAfter;
    }

    #[derive(Debug)]
    struct UptoWitness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    /// The payer's EIP-2612 permit to Permit2, split as the proxies take it.
    #[derive(Debug)]
    struct EIP2612Permit {
        uint256 value;
        uint256 deadline;
        bytes32 r;
        bytes32 s;
        uint8 v;
    }

    /// `x402ExactPermit2Proxy`.
    interface IExactPermit2Proxy {
        function settle(PermitTransferFrom permit, address owner, ExactWitness witness, bytes signature) external;
        function settleWithPermit(EIP2612Permit permit2612, PermitTransferFrom permit, address owner, ExactWitness witness, bytes signature) external;
    }

    /// `x402UptoPermit2Proxy`.
    interface IUptoPermit2Proxy {
        function settle(PermitTransferFrom permit, uint256 amount, address owner, UptoWitness witness, bytes signature) external;
        function settleWithPermit(EIP2612Permit permit2612, PermitTransferFrom permit, uint256 amount, address owner, UptoWitness witness, bytes signature) external;
    }

    /// The ERC-20 calls around Permit2: the payer's one approval, and its check.
    /// Permit2's unordered nonces: bit `nonce & 255` of word `nonce >> 8` is set once used.
    interface IPermit2Nonces {
        function nonceBitmap(address owner, uint256 word) external view returns (uint256);
    }

    interface IErc20Permit2 {
        function approve(address spender, uint256 amount) external returns (bool);
        function allowance(address owner, address spender) external view returns (uint256);
        function balanceOf(address owner) external view returns (uint256);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::{keccak256, U256};
    use alloy_sol_types::SolStruct;

    #[test]
    fn the_witness_types_are_the_proxies_strings() {
        // Permit2 hashes its stub followed by the proxy's WITNESS_TYPE_STRING; alloy's
        // encodeType must give the same.
        let stub = "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,";
        assert_eq!(
            exact::PermitWitnessTransferFrom::eip712_encode_type(),
            format!("{stub}Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)")
        );
        assert_eq!(
            upto::PermitWitnessTransferFrom::eip712_encode_type(),
            format!("{stub}Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)")
        );
        let w = exact::Witness {
            to: EXACT_PROXY_ADDRESS,
            validAfter: U256::ZERO,
        };
        assert_eq!(
            w.eip712_type_hash(),
            keccak256("Witness(address to,uint256 validAfter)")
        );
        assert_eq!(domain(84532).name.as_deref(), Some("Permit2"));
    }
}
