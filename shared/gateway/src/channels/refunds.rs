//! Refunds: the payer's cooperative refund (its `refund` payload) and the seller's refund of
//! what is left in a channel. Both go on chain in one transaction: the charges not claimed yet
//! are claimed first (so a refund never returns money for requests already served), then
//! `refundWithSignature` under the channel's current refund nonce (so a signature refunds
//! once). Both are idempotent: a refund repeated after it landed finds nothing left.

use super::{unavailable, ChannelCharge, ChannelRefusal, Channels};
use alloy_primitives::{B256, U256};
use alloy_sol_types::SolCall;
use paygate_domain::channel::ChannelRecord;
use paygate_x402::batch::{
    self, ChannelAction, ChannelPayloadWire, ChannelRejection, IBatchSettlement,
};
use paygate_x402::facilitator::CallError;
use tokio::sync::OwnedMutexGuard;

/// Gas for a refund, besides the claim in front of it.
const REFUND_GAS: u64 = 120_000;

/// What a refund did.
#[derive(Debug, Clone)]
pub struct Refunded {
    /// Base units returned to the payer (0: nothing was left, nothing was sent).
    pub amount: u128,
    pub transaction: Option<B256>,
    pub record: ChannelRecord,
}

impl Refunded {
    /// The `PAYMENT-RESPONSE` header's value (base64 JSON) for a payer's refund: the refund's
    /// transaction, what it returned (`amount`, as the facilitator API says it),
    /// `extra.refundedAmount` and `extra.channelState`.
    pub fn header(&self) -> String {
        super::receipts::encoded(&super::receipts::settle_response(
            &self.record,
            self.transaction,
            Some(self.amount),
            serde_json::json!({
                "refundedAmount": self.amount.to_string(),
                "channelState": super::receipts::state_wire(&self.record),
            }),
        ))
    }
}

impl Channels {
    /// The payer's `refund` payload: its voucher must be signed for exactly what the channel
    /// was charged (a refund charges nothing); the amount asked (all that is left when none)
    /// goes back to the payer on chain.
    pub async fn refund(
        &self,
        wire: &ChannelPayloadWire,
        charge: &ChannelCharge<'_>,
    ) -> Result<Refunded, ChannelRefusal> {
        let chain_id = charge.requirements.network.config.chain_id;
        let payment = self.checked(wire, charge).await?;
        let ChannelAction::Refund(amount) = payment.action else {
            return Err(ChannelRefusal::rejected(ChannelRejection::Malformed));
        };
        let (mut guard, record) = self.take(&payment, charge).await?;
        if payment.max_claimable != record.charged {
            return Err(ChannelRefusal::Rejected {
                rejection: ChannelRejection::CumulativeMismatch,
                state: Some(Box::new(record)),
            });
        }
        self.refund_held(&mut guard, record, amount, chain_id).await
    }

    /// The seller returns everything left in its channel `channel_id` (what was not charged)
    /// to the payer, after claiming what was. Nothing left: nothing is sent, `amount` 0.
    pub async fn refund_for_seller(
        &self,
        org_id: &str,
        channel_id: &str,
    ) -> Result<Refunded, ChannelRefusal> {
        let id = channel_id
            .parse::<B256>()
            .map_err(|_| ChannelRefusal::rejected(ChannelRejection::MissingChannel))?;
        let mut guard = self.lock(id).await?;
        let record = self.hold(&mut guard, id, None, org_id).await?;
        let chain_id = record
            .network
            .strip_prefix("eip155:")
            .and_then(|c| c.parse::<u64>().ok())
            .ok_or_else(|| unavailable("the channel's network is not an EVM chain"))?;
        match self
            .refund_held(&mut guard, record.clone(), None, chain_id)
            .await
        {
            Err(ChannelRefusal::Rejected {
                rejection: ChannelRejection::RefundNoBalance,
                ..
            }) => Ok(Refunded {
                amount: 0,
                transaction: None,
                record: guard.clone().unwrap_or(record),
            }),
            other => other,
        }
    }

    /// Refunds `amount` (all that is left when `None`) of the channel this node holds, with
    /// the figures read from the chain first. The record's balance drops *before* the
    /// transaction is sent, so no voucher is accepted against money on its way back (a crash
    /// between leaves the record below the chain until the chain is read again, never above).
    async fn refund_held(
        &self,
        guard: &mut OwnedMutexGuard<Option<ChannelRecord>>,
        record: ChannelRecord,
        amount: Option<u128>,
        chain_id: u64,
    ) -> Result<Refunded, ChannelRefusal> {
        let id = record
            .id
            .parse::<B256>()
            .map_err(|_| ChannelRefusal::rejected(ChannelRejection::MissingChannel))?;
        let config = record
            .config
            .parse()
            .map_err(|_| ChannelRefusal::rejected(ChannelRejection::Malformed))?;
        let (balance, claimed) = self.on_chain(chain_id, id).await?;
        let left = balance.saturating_sub(record.charged.max(claimed));
        if left == 0 {
            return Err(ChannelRefusal::Rejected {
                rejection: ChannelRejection::RefundNoBalance,
                state: Some(Box::new(record)),
            });
        }
        let amount = match amount {
            None => left,
            Some(a) if a == 0 || a > left => {
                return Err(ChannelRefusal::Rejected {
                    rejection: ChannelRejection::RefundAmountInvalid,
                    state: Some(Box::new(record)),
                })
            }
            Some(a) => a,
        };
        let mut next = record.clone();
        next.balance = balance - amount;
        next.total_claimed = claimed;
        let record = self.write(guard, &record, next).await?;
        let nonce = self.refund_nonce(chain_id, id).await?;
        let (mut calls, claims) = self.claim_calls(chain_id, std::slice::from_ref(&record))?;
        let signature = self.sign(&batch::refund_digest(chain_id, id, nonce, amount))?;
        calls.push(
            IBatchSettlement::refundWithSignatureCall {
                config,
                amount,
                nonce,
                receiverAuthorizerSignature: signature,
            }
            .abi_encode()
            .into(),
        );
        let gas = super::CLAIM_GAS_BASE + super::CLAIM_GAS_PER_CHANNEL * claims as u64 + REFUND_GAS;
        let sent = self.multicall(chain_id, calls, gas).await;
        if let Err(CallError::Ambiguous(m) | CallError::Pending(_, m)) = &sent {
            // It may still land: the record keeps the lowered balance until the chain is read.
            tracing::warn!(channel = %record.id, error = %m, "refund sent, outcome unknown");
            return Err(unavailable(m));
        }
        // Landed or refused: the record takes the chain's figures again.
        let (balance, claimed) = self.on_chain(chain_id, id).await?;
        let mut next = record.clone();
        next.balance = balance;
        next.total_claimed = claimed;
        let claimed_now = claimed.saturating_sub(record.total_claimed);
        if claimed_now > 0 {
            self.count(&record.org_id, "claimed", claimed_now);
        }
        if let Ok(tx) = &sent {
            next.refunded = next.refunded.saturating_add(amount);
            next.refund_nonce = nonce.saturating_to::<u64>().saturating_add(1);
            if claims > 0 {
                next.claim_transaction = Some(format!("{tx:#x}"));
            }
        }
        if next.unclaimed() == 0 {
            next.unclaimed_since = None;
        }
        let record = self.write(guard, &record, next).await?;
        match sent {
            Ok(tx) => {
                tracing::info!(channel = %record.id, transaction = %tx, amount, "channel refunded");
                // What the refund's transaction claimed first is a claim to the seller too.
                let transaction = format!("{tx:#x}");
                let mut changes = Vec::new();
                if claimed_now > 0 {
                    let claim = serde_json::json!({"amount": claimed_now.to_string(), "transaction": transaction});
                    changes.push(("channel.claimed", claim));
                }
                let refund =
                    serde_json::json!({"amount": amount.to_string(), "transaction": transaction});
                changes.push(("payment.refunded", refund));
                self.channel_events(&record, changes);
                self.count(&record.org_id, "refund", amount);
                Ok(Refunded {
                    amount,
                    transaction: Some(tx),
                    record,
                })
            }
            Err(CallError::Reverted(m)) => {
                tracing::warn!(channel = %record.id, error = %m, "refund reverted");
                Err(ChannelRefusal::rejected(
                    ChannelRejection::RefundAmountInvalid,
                ))
            }
            Err(e) => {
                tracing::warn!(channel = %record.id, error = %e, "refund not sent");
                Err(unavailable(e))
            }
        }
    }

    pub(super) async fn refund_nonce(
        &self,
        chain_id: u64,
        id: B256,
    ) -> Result<U256, ChannelRefusal> {
        let call = IBatchSettlement::refundNonceCall { channelId: id };
        self.view(chain_id, batch::SETTLEMENT_ADDRESS, call).await
    }
}
