//! Permit2 payments signed in the tests (the harnesses sign hundreds; the official npm client
//! signs in the interop tests): an `upto` authorization for the upto proxy, or an `exact` one
//! for the exact proxy, over Permit2's EIP-712 domain, as `@x402/evm`'s client builds them.

use super::chain::{address, now, signer, USDC};
use alloy_primitives::{Address, B256, U256};
use alloy_signer::SignerSync;
use paygate_x402::payment::{Permit2Terms, SignedAuthorization};
use paygate_x402::permit2;
use serde_json::{json, Value};

/// The network's test-token entry (`TDOL`, no EIP-3009: paid through Permit2), as an operator
/// writes it (here through the environment).
pub fn token_env() -> Vec<(String, String)> {
    let k = |f: &str| format!("PAYGATE__NETWORKS__BASE-SEPOLIA__TOKENS__TDOL__{f}");
    vec![
        (
            k("ADDRESS"),
            permit2::DEV_TEST_TOKEN_ADDRESS.to_checksum(None),
        ),
        (k("DECIMALS"), "6".into()),
        (k("EIP712_NAME"), "\"Test Dollar\"".into()),
        (k("EIP712_VERSION"), "\"1\"".into()),
        (k("EIP3009"), "false".into()),
    ]
}

/// A Permit2 authorization of `payer` for `ceiling` base units of `token` to `pay_to`: `upto`,
/// settled by `facilitator`, or `exact` (no facilitator: the whole amount, through the exact
/// proxy).
pub struct UptoSpec {
    pub payer: usize,
    pub pay_to: Address,
    pub ceiling: u64,
    pub deadline: u64,
    pub nonce: U256,
    pub facilitator: Option<Address>,
    pub token: Address,
}

impl UptoSpec {
    pub fn new(payer: usize, pay_to: Address, ceiling: u64, facilitator: Address) -> Self {
        Self {
            payer,
            pay_to,
            ceiling,
            deadline: now() + 300,
            nonce: U256::from_be_bytes(rand::random::<[u8; 32]>()),
            facilitator: Some(facilitator),
            token: USDC.parse().expect("USDC address"),
        }
    }

    /// An `exact` payment of `amount` of `token` through Permit2.
    pub fn exact(payer: usize, pay_to: Address, amount: u64, token: Address) -> Self {
        Self {
            facilitator: None,
            token,
            ..Self::new(payer, pay_to, amount, Address::ZERO)
        }
    }

    fn spender(&self) -> Address {
        match self.facilitator {
            Some(_) => permit2::UPTO_PROXY_ADDRESS,
            None => permit2::EXACT_PROXY_ADDRESS,
        }
    }

    fn terms(&self) -> Permit2Terms {
        Permit2Terms {
            token: self.token,
            spender: self.spender(),
            facilitator: self.facilitator,
        }
    }

    /// The authorization in domain types, signed (its nonce as the gateway keys it).
    pub fn authorization(&self) -> SignedAuthorization {
        let mut auth = SignedAuthorization {
            from: address(self.payer),
            to: self.pay_to,
            value: U256::from(self.ceiling),
            valid_after: U256::ZERO,
            valid_before: U256::from(self.deadline),
            nonce: B256::from(self.nonce),
            signature: Default::default(),
        };
        let digest = permit2::signing_hash(&auth, &self.terms(), 84532);
        let sig = signer(self.payer).sign_hash_sync(&digest).expect("sign");
        auth.signature = sig.as_bytes().to_vec().into();
        auth
    }

    /// The `PAYMENT-SIGNATURE` header value, echoing `accepted` from the route's challenge.
    pub fn header(&self, accepted: &Value) -> String {
        use base64::Engine;
        let auth = self.authorization();
        let mut witness = json!({"to": self.pay_to.to_checksum(None), "validAfter": "0"});
        if let Some(f) = self.facilitator {
            witness["facilitator"] = f.to_checksum(None).into();
        }
        let payload = json!({
            "signature": format!("0x{}", alloy_primitives::hex::encode(&auth.signature)),
            "permit2Authorization": {
                "from": auth.from.to_checksum(None),
                "permitted": {"token": self.token.to_checksum(None), "amount": self.ceiling.to_string()},
                "spender": self.spender().to_checksum(None),
                "nonce": self.nonce.to_string(),
                "deadline": self.deadline.to_string(),
                "witness": witness,
            }
        });
        let header = json!({"x402Version": 2, "accepted": accepted, "payload": payload});
        base64::engine::general_purpose::STANDARD.encode(header.to_string())
    }
}
