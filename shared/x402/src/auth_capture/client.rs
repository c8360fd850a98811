//! The payer's side of `auth-capture`: read a route's offer (the requirement and its escrow
//! terms), then sign one ERC-3009 `ReceiveWithAuthorization` of the whole price to the ERC-3009
//! collector, its nonce the payer-agnostic hash of the terms with a fresh salt, valid until the
//! earlier of the offer's timeout and its capture deadline.

use super::{
    payer_agnostic_hash, PaymentInfo, ERC3009_COLLECTOR_ADDRESS, ESCROW_ADDRESS,
    SAFETY_MARGIN_SECONDS, SCHEME,
};
use crate::extra::{EscrowExtra, TokenExtra};
use crate::payment::{ProtocolVersion, SignedAuthorization};
use crate::requirements::{PaymentRequirements, RequirementsError};
use alloy_primitives::{Address, Uint, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;

/// Why an `auth-capture` offer cannot be paid.
#[derive(Debug, thiserror::Error)]
pub enum OfferError {
    #[error(transparent)]
    Requirements(#[from] RequirementsError),
    #[error("the offer has no {0}")]
    Missing(&'static str),
    #[error("the offer's {0} is not an address")]
    Address(&'static str),
    #[error("the offer names escrow {0}, not the one this client signs for ({ESCROW_ADDRESS})")]
    UnknownEscrow(Address),
    #[error("the offer's deadlines are out of order or already passed")]
    Deadlines,
    #[error("the price does not fit the escrow's amount")]
    Amount,
    #[error("signing: {0}")]
    Sign(#[from] alloy_signer::Error),
}

/// An `auth-capture` requirement as offered: what is paid, and the escrow's terms.
#[derive(Debug, Clone)]
pub struct EscrowOffer {
    pub req: PaymentRequirements,
    pub escrow: EscrowExtra,
    /// The requirement exactly as the server sent it (echoed back in `accepted`).
    pub offered: serde_json::Value,
}

impl EscrowOffer {
    /// Reads an offered v2 `auth-capture` requirement.
    pub fn read(
        offered: &serde_json::Value,
        networks: &crate::network::Networks,
    ) -> Result<Self, OfferError> {
        let req = PaymentRequirements::read_wire(offered, ProtocolVersion::V2, networks, SCHEME)?;
        let extra: TokenExtra = serde_json::from_value(offered["extra"].clone())
            .map_err(|_| RequirementsError::Field("extra"))?;
        let escrow = extra.escrow.ok_or(OfferError::Missing("escrow terms"))?;
        Ok(Self {
            req,
            escrow: *escrow,
            offered: offered.clone(),
        })
    }

    /// The terms `payer` signs for, salted with `salt`, its authorization valid until
    /// `valid_before`; checked against `now` (unix seconds).
    fn terms(&self, payer: Address, salt: U256, now: u64) -> Result<PaymentInfo, OfferError> {
        let e = &self.escrow;
        let addr = |v: &Option<String>, name: &'static str| {
            let text = v.as_deref().ok_or(OfferError::Missing(name))?;
            crate::address::parse_address(text).ok_or(OfferError::Address(name))
        };
        if let Some(escrow) = &e.auth_capture_escrow {
            let escrow = crate::address::parse_address(escrow)
                .ok_or(OfferError::Address("authCaptureEscrow"))?;
            if escrow != ESCROW_ADDRESS {
                return Err(OfferError::UnknownEscrow(escrow));
            }
        }
        let capture = e
            .capture_deadline
            .ok_or(OfferError::Missing("captureDeadline"))?;
        let refund = e
            .refund_deadline
            .ok_or(OfferError::Missing("refundDeadline"))?;
        let valid_before = capture.min(now.saturating_add(self.req.max_timeout_seconds));
        if refund < capture || valid_before <= now.saturating_add(SAFETY_MARGIN_SECONDS) {
            return Err(OfferError::Deadlines);
        }
        let uint48 = |v: u64| Uint::<48, 1>::try_from(v).map_err(|_| OfferError::Deadlines);
        Ok(PaymentInfo {
            operator: addr(&e.capture_authorizer, "captureAuthorizer")?,
            payer,
            receiver: self.req.pay_to,
            token: self.req.network.config.asset,
            maxAmount: Uint::<120, 2>::checked_from_limbs_slice(self.req.token_amount().as_limbs())
                .ok_or(OfferError::Amount)?,
            preApprovalExpiry: uint48(valid_before)?,
            authorizationExpiry: uint48(capture)?,
            refundExpiry: uint48(refund)?,
            minFeeBps: e.min_fee_bps.ok_or(OfferError::Missing("minFeeBps"))?,
            maxFeeBps: e.max_fee_bps.ok_or(OfferError::Missing("maxFeeBps"))?,
            feeReceiver: addr(&e.fee_recipient, "feeRecipient")?,
            salt,
        })
    }

    /// The base64 v2 `PAYMENT-SIGNATURE` header paying this offer from `signer` at `now`.
    pub fn payment_header(
        &self,
        signer: &PrivateKeySigner,
        now: u64,
    ) -> Result<String, OfferError> {
        let salt = U256::from_be_bytes(rand::random::<[u8; 32]>());
        let info = self.terms(signer.address(), salt, now)?;
        let mut auth = SignedAuthorization {
            from: signer.address(),
            to: ERC3009_COLLECTOR_ADDRESS,
            value: U256::from(info.maxAmount),
            // The collector receives it as valid from 0 (the scheme's rule).
            valid_after: U256::ZERO,
            valid_before: U256::from(info.preApprovalExpiry),
            nonce: payer_agnostic_hash(self.req.network.config.chain_id, &info),
            signature: Default::default(),
        };
        let signature = signer.sign_hash_sync(&super::signing_hash(&auth, &self.req))?;
        auth.signature = signature.as_bytes().to_vec().into();
        let salt = Some(format!("{salt:#x}"));
        Ok(crate::sign::header_value(
            &self.req,
            self.offered.clone(),
            &auth,
            salt,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::UsdcAmount;
    use crate::network::{builtin_networks, Networks};
    use crate::payment::PaymentPayload;
    use crate::requirements::EscrowTerms;

    const NOW: u64 = 1_800_000_000;

    fn offered(terms: &EscrowTerms) -> (PaymentRequirements, serde_json::Value) {
        let networks = Networks::from_config(&builtin_networks());
        let req = PaymentRequirements {
            network: networks.resolve("base-sepolia").unwrap().clone(),
            amount: UsdcAmount(10_000),
            pay_to: Address::repeat_byte(3),
            resource: "http://127.0.0.1/gateway/acme/report".into(),
            description: String::new(),
            mime_type: "application/json".into(),
            max_timeout_seconds: 60,
            token: Default::default(),
        };
        let wire = serde_json::to_value(req.to_v2_auth_capture(terms, NOW)).unwrap();
        (req, wire)
    }

    fn terms() -> EscrowTerms {
        EscrowTerms {
            operator: Address::repeat_byte(1),
            capture_window: 300,
            refund_window: 3_600,
        }
    }

    fn decode(header: &str) -> PaymentPayload {
        PaymentPayload::decode(header.as_bytes(), ProtocolVersion::V2).expect("a v2 payload")
    }

    #[test]
    fn a_signed_offer_passes_the_facilitators_checks() {
        let networks = Networks::from_config(&builtin_networks());
        let (req, wire) = offered(&terms());
        let offer = EscrowOffer::read(&wire, &networks).unwrap();
        let signer = PrivateKeySigner::random();
        let header = offer.payment_header(&signer, NOW).unwrap();
        let escrowed = super::super::verify(&decode(&header), &req, &terms(), NOW).unwrap();
        assert_eq!(escrowed.info.payer, signer.address());
        assert_eq!(escrowed.info.maxAmount, Uint::from(10_000u64));
        assert_eq!(escrowed.info.preApprovalExpiry, Uint::from(NOW + 60));
        assert!(escrowed.wallet_check.is_none());
        // A second payment of the same offer is another escrow payment (a fresh salt).
        let again = offer.payment_header(&signer, NOW).unwrap();
        let again = super::super::verify(&decode(&again), &req, &terms(), NOW).unwrap();
        assert_ne!(again.auth.nonce, escrowed.auth.nonce);
    }

    #[test]
    fn the_offer_states_the_escrow_flow_and_a_payment_echoing_another_is_refused() {
        let networks = Networks::from_config(&builtin_networks());
        let (req, wire) = offered(&terms());
        assert_eq!(wire["extra"]["paymentFlow"], "escrow");
        let signer = PrivateKeySigner::random();
        for (flow, taken) in [
            ("escrow", true),
            ("authorization", false),
            ("upfront", false),
        ] {
            let mut echoed = wire.clone();
            echoed["extra"]["paymentFlow"] = flow.into();
            let offer = EscrowOffer::read(&echoed, &networks).unwrap();
            let header = offer.payment_header(&signer, NOW).unwrap();
            let verdict = super::super::verify(&decode(&header), &req, &terms(), NOW);
            assert_eq!(verdict.is_ok(), taken, "{flow}");
        }
    }

    #[test]
    fn an_offer_it_cannot_pay_is_refused_before_signing() {
        let networks = Networks::from_config(&builtin_networks());
        let signer = PrivateKeySigner::random();
        let (_, wire) = offered(&terms());
        let mut other = wire.clone();
        other["extra"]["authCaptureEscrow"] = Address::repeat_byte(7).to_string().into();
        let offer = EscrowOffer::read(&other, &networks).unwrap();
        assert!(matches!(
            offer.payment_header(&signer, NOW),
            Err(OfferError::UnknownEscrow(_))
        ));
        // Read a minute after its capture deadline passed.
        let offer = EscrowOffer::read(&wire, &networks).unwrap();
        assert!(matches!(
            offer.payment_header(&signer, NOW + 300),
            Err(OfferError::Deadlines)
        ));
        let mut bare = wire.clone();
        bare["extra"]
            .as_object_mut()
            .unwrap()
            .remove("captureAuthorizer");
        let offer = EscrowOffer::read(&bare, &networks).unwrap();
        assert!(matches!(
            offer.payment_header(&signer, NOW),
            Err(OfferError::Missing("captureAuthorizer"))
        ));
        let mut exact = wire;
        exact["scheme"] = "exact".into();
        assert!(EscrowOffer::read(&exact, &networks).is_err());
    }
}
