//! Permit2 payments signed in the tests (the harnesses sign hundreds; the official npm client
//! signs in the interop tests): an `upto` authorization for the upto proxy, over Permit2's
//! EIP-712 domain, as `@x402/evm`'s client builds it.

use super::chain::{address, now, signer, USDC};
use alloy_primitives::{Address, B256, U256};
use alloy_signer::SignerSync;
use paygate_x402::payment::{Permit2Terms, SignedAuthorization};
use paygate_x402::permit2;
use serde_json::{json, Value};

/// An `upto` authorization of `payer` for `ceiling` base units of `token` to `pay_to`, settled
/// by `facilitator`.
pub struct UptoSpec {
    pub payer: usize,
    pub pay_to: Address,
    pub ceiling: u64,
    pub deadline: u64,
    pub nonce: U256,
    pub facilitator: Address,
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
            facilitator,
            token: USDC.parse().expect("USDC address"),
        }
    }

    fn terms(&self) -> Permit2Terms {
        Permit2Terms {
            token: self.token,
            spender: permit2::UPTO_PROXY_ADDRESS,
            facilitator: Some(self.facilitator),
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
        let payload = json!({
            "signature": format!("0x{}", alloy_primitives::hex::encode(&auth.signature)),
            "permit2Authorization": {
                "from": auth.from.to_checksum(None),
                "permitted": {"token": self.token.to_checksum(None), "amount": self.ceiling.to_string()},
                "spender": permit2::UPTO_PROXY_ADDRESS.to_checksum(None),
                "nonce": self.nonce.to_string(),
                "deadline": self.deadline.to_string(),
                "witness": {"to": self.pay_to.to_checksum(None),
                    "facilitator": self.facilitator.to_checksum(None), "validAfter": "0"},
            }
        });
        let header = json!({"x402Version": 2, "accepted": accepted, "payload": payload});
        base64::engine::general_purpose::STANDARD.encode(header.to_string())
    }
}
