//! `eip2612GasSponsoring` (x402's gas-sponsoring extension): a Permit2 payer that never approved
//! Permit2 signs the token's EIP-2612 permit to Permit2 with its payment, and the facilitator
//! submits it in the same transaction as the settlement (the Permit2 proxy's
//! `settleWithPermit`): its first call costs it no approval transaction. Declared in the `402` of
//! a Permit2 requirement whose token implements EIP-2612 (USDC); read from the payment
//! payload's `extensions`, checked as the extension's facilitator checks it.

use crate::payment::PaymentPayload;
use crate::verify::Rejection;
use alloy_primitives::{Address, Bytes, U256};
use serde::Deserialize;
use serde_json::{json, Value};

/// The extension's name in `extensions`.
pub const EIP2612_GAS_SPONSORING: &str = "eip2612GasSponsoring";

/// How long a permit must stay valid to be submitted (as the extension's facilitator asks).
const MIN_VALIDITY_SECONDS: u64 = 6;

/// The server's declaration: the facilitator submits the payer's permit to Permit2. The
/// schema is the extension's, for the payer's `info`.
pub fn declaration() -> Value {
    let address = json!({"type": "string", "pattern": "^0x[a-fA-F0-9]{40}$"});
    let number = json!({"type": "string", "pattern": "^[0-9]+$"});
    json!({
        "info": {
            "description": "The facilitator accepts EIP-2612 gasless Permit to `Permit2` canonical contract.",
            "version": "1",
        },
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "from": address, "asset": address, "spender": address,
                "amount": number, "nonce": number, "deadline": number,
                "signature": {"type": "string", "pattern": "^0x[a-fA-F0-9]+$"},
                "version": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)*$"},
            },
            "required": ["from", "asset", "spender", "amount", "nonce", "deadline", "signature", "version"],
        },
    })
}

/// The extension's `info` as a payer sends it (every field a string).
#[derive(Deserialize)]
struct InfoWire {
    from: String,
    asset: String,
    spender: String,
    amount: String,
    nonce: String,
    deadline: String,
    signature: String,
    version: String,
}

/// The fields a permit has, present and not empty: an `info` without them is no permit (the
/// declaration a client echoes back, say), as the extension's facilitator reads it.
const FIELDS: [&str; 8] = [
    "from",
    "asset",
    "spender",
    "amount",
    "nonce",
    "deadline",
    "signature",
    "version",
];

/// A payer's EIP-2612 permit of its token to Permit2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eip2612Permit {
    pub from: Address,
    pub asset: Address,
    pub spender: Address,
    pub amount: U256,
    pub nonce: U256,
    pub deadline: U256,
    /// 65 bytes r || s || v (the proxy submits it split); a counterfactual wallet's inner one.
    pub signature: Bytes,
}

impl Eip2612Permit {
    /// The permit a payment carries, if any (an `info` missing a field is none); one not in
    /// the extension's format is refused (`invalid_eip2612_extension_format`).
    pub fn of(payment: &PaymentPayload) -> Result<Option<Self>, Rejection> {
        let PaymentPayload::V2(p) = payment else {
            return Ok(None);
        };
        let Some(info) = p
            .extensions
            .as_ref()
            .and_then(|e| e.get(EIP2612_GAS_SPONSORING))
            .and_then(|e| e.get("info"))
        else {
            return Ok(None);
        };
        let present = |f: &str| {
            info.get(f)
                .is_some_and(|v| !v.is_null() && v.as_str() != Some(""))
        };
        if !FIELDS.iter().all(|f| present(f)) {
            return Ok(None);
        }
        let w = InfoWire::deserialize(info).map_err(|_| Rejection::Eip2612Format)?;
        let address = |s: &str| crate::address::parse_address(s).ok_or(Rejection::Eip2612Format);
        let number = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<U256>().ok())
                .flatten()
                .ok_or(Rejection::Eip2612Format)
        };
        let version_ok = !w.version.is_empty()
            && w.version
                .split('.')
                .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()));
        let signature: Bytes = w.signature.parse().map_err(|_| Rejection::Eip2612Format)?;
        // A wallet not deployed yet wraps what it signs (ERC-6492); the token checks the inner
        // signature once the relayer has deployed it.
        let signature = crate::signature::unwrapped(&signature);
        if !version_ok || signature.len() != 65 {
            return Err(Rejection::Eip2612Format);
        }
        Ok(Some(Self {
            from: address(&w.from)?,
            asset: address(&w.asset)?,
            spender: address(&w.spender)?,
            amount: number(&w.amount)?,
            nonce: number(&w.nonce)?,
            deadline: number(&w.deadline)?,
            signature,
        }))
    }

    /// The permit a Permit2 payment of `payer` carries, checked ([`Self::check`]) against its
    /// payer and token at `now`; `None` without one (an EIP-3009 payment is not read further).
    pub fn checked(
        payment: &PaymentPayload,
        payer: Address,
        now: u64,
    ) -> Result<Option<Self>, Rejection> {
        let Some(terms) = payment.permit2() else {
            return Ok(None);
        };
        let permit = Self::of(payment)?;
        if let Some(p) = &permit {
            p.check(payer, terms.token, now)?;
        }
        Ok(permit)
    }

    /// The permit as the Permit2 proxies' `settleWithPermit` takes it (r, s, v split).
    pub fn split(&self) -> crate::permit2::EIP2612Permit {
        let sig = &self.signature;
        let v = sig[64];
        crate::permit2::EIP2612Permit {
            value: self.amount,
            deadline: self.deadline,
            r: alloy_primitives::B256::from_slice(&sig[..32]),
            s: alloy_primitives::B256::from_slice(&sig[32..64]),
            v: if v < 27 { v + 27 } else { v },
        }
    }

    /// The extension's checks: the payer's own permit, of the payment's `token`, to Permit2,
    /// valid for a few seconds more at `now`.
    pub fn check(&self, payer: Address, token: Address, now: u64) -> Result<(), Rejection> {
        if self.from != payer {
            return Err(Rejection::Eip2612FromMismatch);
        }
        if self.asset != token {
            return Err(Rejection::Eip2612AssetMismatch);
        }
        if self.spender != crate::permit2::PERMIT2_ADDRESS {
            return Err(Rejection::Eip2612SpenderNotPermit2);
        }
        if self.deadline < U256::from(now.saturating_add(MIN_VALIDITY_SECONDS)) {
            return Err(Rejection::Eip2612DeadlineExpired);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payment(info: Value) -> PaymentPayload {
        let doc = json!({
            "x402Version": 2,
            "accepted": {"scheme": "upto", "network": "eip155:84532", "amount": "1",
                "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "payTo": "0x0000000000000000000000000000000000000009",
                "maxTimeoutSeconds": 60, "extra": {"name": "USDC", "version": "2"}},
            "payload": {"signature": format!("0x{}", "11".repeat(65)), "authorization": {
                "from": "0x0000000000000000000000000000000000000005",
                "to": "0x0000000000000000000000000000000000000009", "value": "1",
                "validAfter": "0", "validBefore": "2000000000",
                "nonce": format!("0x{}", "22".repeat(32))}},
            "extensions": {EIP2612_GAS_SPONSORING: {"info": info}},
        });
        PaymentPayload::from_json(
            doc.to_string().as_bytes(),
            crate::payment::ProtocolVersion::V2,
        )
        .expect("a v2 payload")
    }

    fn info() -> Value {
        json!({"from": "0x0000000000000000000000000000000000000005",
            "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            "spender": "0x000000000022D473030F116dDEE9F6B43aC78BA3",
            "amount": "10000", "nonce": "0", "deadline": "2000000000",
            "signature": format!("0x{}", "11".repeat(65)), "version": "1"})
    }

    #[test]
    fn a_permit_is_read_and_checked_as_the_extension_says() {
        let p = Eip2612Permit::of(&payment(info())).unwrap().unwrap();
        let payer = Address::with_last_byte(5);
        let usdc = p.asset;
        assert_eq!(p.check(payer, usdc, 1_000_000_000), Ok(()));
        assert_eq!(
            p.check(Address::with_last_byte(6), usdc, 1_000_000_000),
            Err(Rejection::Eip2612FromMismatch)
        );
        assert_eq!(
            p.check(payer, Address::with_last_byte(7), 1_000_000_000),
            Err(Rejection::Eip2612AssetMismatch)
        );
        assert_eq!(
            p.check(payer, usdc, 2_000_000_000 - 5),
            Err(Rejection::Eip2612DeadlineExpired)
        );
        let mut other = p.clone();
        other.spender = Address::with_last_byte(8);
        assert_eq!(
            other.check(payer, usdc, 1_000_000_000),
            Err(Rejection::Eip2612SpenderNotPermit2)
        );
        // Not the format: a number with a sign, a short signature, a missing field, a version
        // that is not dotted digits.
        for (field, bad) in [
            ("amount", json!("-1")),
            ("signature", json!("0x1234")),
            ("version", json!("v1")),
            ("from", json!("0x12")),
        ] {
            let mut i = info();
            i[field] = bad;
            assert_eq!(
                Eip2612Permit::of(&payment(i)),
                Err(Rejection::Eip2612Format),
                "{field}"
            );
        }
        // A field missing (the server's declaration echoed back): no permit at all.
        let mut i = info();
        i.as_object_mut().unwrap().remove("nonce");
        assert_eq!(Eip2612Permit::of(&payment(i)), Ok(None));
        let echoed = declaration()["info"].clone();
        assert_eq!(Eip2612Permit::of(&payment(echoed)), Ok(None));
    }
}
