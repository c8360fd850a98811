//! Smart-wallet payers: a signature the payer's key did not make is asked of the payer's
//! wallet (EIP-1271, or ERC-6492 for one its factory has yet to deploy) before anything is
//! reserved or counted against the payer. The one check every way of paying uses
//! ([`PaymentService::ask_wallet`] for the settling ways, [`PaymentService::wallet_must_accept`]
//! for the others).

use super::{PaymentService, Refusal, Verified};
use alloy_primitives::{Address, Bytes, B256};
use paygate_x402::payment::SignedAuthorization;
use paygate_x402::verify::{Rejection, Signed};
use paygate_x402::PaymentRequirements;

impl PaymentService {
    /// Asks `v`'s payer's wallet (on `requirements`' chain) about a signature its key did not
    /// make, once: vouched for, `v` is not asked again. A wallet that says no (or no wallet
    /// there) is the scheme's invalid-signature rejection.
    pub async fn ask_wallet(
        &self,
        v: &mut Verified,
        requirements: &PaymentRequirements,
    ) -> Result<(), Refusal> {
        self.vouched(v, requirements).await?;
        v.signed = Signed::ByKey;
        Ok(())
    }

    /// [`Self::ask_wallet`] without keeping the answer. Without a chain of its own (a remote
    /// facilitator settles) a longer signature is left to the facilitator.
    pub(super) async fn vouched(
        &self,
        v: &Verified,
        requirements: &PaymentRequirements,
    ) -> Result<(), Refusal> {
        let Signed::ByWallet(digest) = v.signed else {
            return Ok(());
        };
        let forged = match v.payment.permit2() {
            Some(_) => Rejection::Permit2InvalidSignature,
            None => Rejection::InvalidSignature,
        };
        let auth = &v.auth;
        if self.chain.is_none() && auth.signature.len() > 65 {
            return Ok(());
        }
        let chain_id = requirements.network.config.chain_id;
        self.wallet_must_accept(chain_id, auth, digest, forged)
            .await
    }

    /// `auth`'s payer's smart wallet accepts its signature over `digest`, or the payment is
    /// refused with `forged` (the scheme's invalid-signature reason).
    pub async fn wallet_must_accept(
        &self,
        chain_id: u64,
        auth: &SignedAuthorization,
        digest: B256,
        forged: Rejection,
    ) -> Result<(), Refusal> {
        match self
            .wallet_signed(chain_id, auth.from, digest, &auth.signature)
            .await?
        {
            true => Ok(()),
            false => Err(Refusal::Rejected(forged)),
        }
    }

    /// Whether `payer`'s smart wallet accepts `signature` over `digest` on chain `chain_id`;
    /// `false` without a chain to ask. A chain that does not answer leaves an EOA-length
    /// signature that does not recover to the payer refused (`false`: nothing says it is a
    /// wallet's), and a smart wallet's (longer) undecided: the facilitator is down.
    pub async fn wallet_signed(
        &self,
        chain_id: u64,
        payer: Address,
        digest: B256,
        signature: &Bytes,
    ) -> Result<bool, Refusal> {
        let Some(chain) = &self.chain else {
            return Ok(false);
        };
        let eoa_length = signature.len() <= 65;
        if eoa_length && self.eoas.holds(payer) {
            // Known to hold no code: a plain signature its key did not make is a forgery.
            return Ok(false);
        }
        match chain
            .wallet_accepts(chain_id, payer, digest, signature.clone())
            .await
        {
            Ok(true) => {
                // A wallet after all (a counterfactual one, say, before its deployment).
                self.eoas.forget(payer);
                Ok(true)
            }
            Ok(false) => {
                if eoa_length && matches!(chain.has_code(chain_id, payer).await, Ok(false)) {
                    self.eoas.remember(payer);
                }
                Ok(false)
            }
            Err(_) if eoa_length => Ok(false),
            Err(e) => {
                tracing::warn!(error = %e, "could not ask a smart wallet about its signature");
                Err(Refusal::FacilitatorDown)
            }
        }
    }
}
