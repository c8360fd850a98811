//! The scheme's facilitator interface, for other x402 servers (`POST /facilitator/verify` and
//! `/facilitator/settle` with `batch-settlement` payloads): such a server keeps its channels'
//! state itself and asks paygate to check a client's payload against its requirements and the
//! chain, and to send the on-chain operations (a deposit, its own claims, the settlement to its
//! receiver, a cooperative refund) through the embedded relayer. Claims and refunds carry the
//! server's own receiver-authorizer signatures: paygate's authorizer signs for paygate's routes
//! only. Nothing here touches paygate's own channel records.

use super::{unavailable, ChannelRefusal, Channels};
use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_sol_types::SolCall;
use paygate_x402::batch::{
    self, ChannelAction, ChannelConfigWire, ChannelOffer, ChannelPayloadWire, ChannelPayment,
    ChannelRejection, IBatchSettlement,
};
use paygate_x402::{BatchTerms, PaymentRequirements};
use serde::Deserialize;

alloy_sol_types::sol! {
    function balanceOf(address owner) external view returns (uint256);
}

/// Gas for a facilitated claim or refund of `rows` channels.
const GAS_PER_ROW: u64 = 60_000;
const GAS_BASE: u64 = 200_000;

/// A channel's figures on chain, as the facilitator interface returns them (`extra` of a verify
/// answer, `extra.channelState` of a settle answer).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainSnapshot {
    pub channel_id: String,
    pub balance: String,
    pub total_claimed: String,
    pub withdraw_requested_at: u64,
    pub refund_nonce: String,
}

/// A client's payload found acceptable: its payer and the channel as the chain has it.
pub struct Verdict {
    pub payer: Address,
    pub snapshot: ChainSnapshot,
}

/// What a facilitated settle did on chain.
pub struct Sent {
    pub transaction: B256,
    /// The amount moved (a deposit's, a refund's, what a settlement transferred; empty for a
    /// claim, which moves no token).
    pub amount: Option<u128>,
    pub payer: Option<Address>,
    pub snapshot: Option<ChainSnapshot>,
}

/// A server-authored settle payload (the scheme's `claim`, `settle` and completed `refund`).
#[derive(Debug, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "lowercase",
    rename_all_fields = "camelCase"
)]
pub enum ServerPayload {
    Claim {
        claims: Vec<ClaimWire>,
        claim_authorizer_signature: Option<String>,
    },
    Settle {
        receiver: String,
        token: String,
    },
    Refund(Box<RefundWire>),
}

/// A cooperative refund the server completed: the refund's nonce and amount, the claims in
/// front of it, and its receiver authorizer's signatures.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RefundWire {
    channel_config: ChannelConfigWire,
    amount: Option<String>,
    refund_nonce: String,
    #[serde(default)]
    claims: Vec<ClaimWire>,
    refund_authorizer_signature: Option<String>,
    claim_authorizer_signature: Option<String>,
}

/// One row of a claim, as the scheme's payloads carry it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimWire {
    voucher: ClaimVoucherWire,
    signature: String,
    total_claimed: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClaimVoucherWire {
    channel: ChannelConfigWire,
    max_claimable_amount: String,
}

fn rejected(r: ChannelRejection) -> ChannelRefusal {
    ChannelRefusal::Rejected {
        rejection: r,
        state: None,
    }
}

fn amount(s: &str) -> Result<u128, ChannelRefusal> {
    s.parse().map_err(|_| rejected(ChannelRejection::Malformed))
}

fn bytes(s: &str) -> Result<Bytes, ChannelRefusal> {
    s.parse().map_err(|_| rejected(ChannelRejection::Malformed))
}

impl ClaimWire {
    fn call_row(&self) -> Result<IBatchSettlement::VoucherClaim, ChannelRefusal> {
        Ok(IBatchSettlement::VoucherClaim {
            voucher: IBatchSettlement::VoucherBody {
                channel: self.voucher.channel.parse().map_err(rejected)?,
                maxClaimableAmount: amount(&self.voucher.max_claimable_amount)?,
            },
            signature: bytes(&self.signature)?,
            totalClaimed: amount(&self.total_claimed)?,
        })
    }
}

/// The `claimWithSignature` call of `claims` under the server's `signature`.
fn claim_call(claims: &[ClaimWire], signature: Option<&String>) -> Result<Bytes, ChannelRefusal> {
    let signature = signature.ok_or_else(|| rejected(ChannelRejection::Malformed))?;
    let rows = claims
        .iter()
        .map(ClaimWire::call_row)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(IBatchSettlement::claimWithSignatureCall {
        voucherClaims: rows,
        authorizerSignature: bytes(signature)?,
    }
    .abi_encode()
    .into())
}

impl Channels {
    /// The channel `id`'s figures on chain.
    async fn snapshot(&self, chain_id: u64, id: B256) -> Result<ChainSnapshot, ChannelRefusal> {
        let (balance, total_claimed) = self.on_chain(chain_id, id).await?;
        let call = IBatchSettlement::pendingWithdrawalsCall { channelId: id };
        let pending = self.view(chain_id, batch::SETTLEMENT_ADDRESS, call).await?;
        let nonce = self.refund_nonce(chain_id, id).await?;
        Ok(ChainSnapshot {
            channel_id: format!("{id:#x}"),
            balance: balance.to_string(),
            total_claimed: total_claimed.to_string(),
            withdraw_requested_at: pending.initiatedAt.to::<u64>(),
            refund_nonce: nonce.to_string(),
        })
    }

    /// `/verify` of a client's `batch-settlement` payload for another server's `requirements`
    /// and channel `terms`: the configuration is the requirement's and hashes to the channel
    /// id, the voucher (and a deposit's authorization) are the payer's (EIP-1271 asked of the
    /// chain where needed), the channel exists (or the deposit creates it and the payer holds
    /// the deposit), the voucher stays within the balance and above what was claimed (a
    /// refund's may equal it).
    pub async fn verify_for(
        &self,
        wire: &ChannelPayloadWire,
        requirements: &PaymentRequirements,
        terms: &BatchTerms,
        now: u64,
    ) -> Result<Verdict, ChannelRefusal> {
        let chain_id = requirements.network.config.chain_id;
        let payment = ChannelPayment::parse(wire, chain_id).map_err(rejected)?;
        let offer = ChannelOffer {
            receiver: requirements.pay_to,
            receiver_authorizer: terms.receiver_authorizer,
            token: requirements.network.config.asset,
            withdraw_delay: terms.withdraw_delay,
        };
        payment.check_offer(&offer).map_err(rejected)?;
        let check = payment.check_voucher(chain_id).map_err(rejected)?;
        self.chain_checked(chain_id, check, ChannelRejection::VoucherSignature)
            .await?;
        let domain = paygate_x402::verify::token_domain(requirements);
        let check = payment
            .check_deposit(&domain, now, super::DEPOSIT_MIN_VALIDITY)
            .map_err(rejected)?;
        self.chain_checked(chain_id, check, ChannelRejection::DepositSignature)
            .await?;
        let snapshot = self.snapshot(chain_id, payment.channel_id).await?;
        let balance = amount(&snapshot.balance)?;
        let claimed = amount(&snapshot.total_claimed)?;
        let mut effective = balance;
        if let ChannelAction::Deposit(d) = &payment.action {
            let owner = payment.config.payer;
            let held = self
                .view(chain_id, payment.config.token, balanceOfCall { owner })
                .await?;
            if held < U256::from(d.amount) {
                return Err(ChannelRefusal::DepositFailed(
                    "the payer does not hold the deposit".into(),
                ));
            }
            effective = effective.saturating_add(d.amount);
        } else if balance == 0 {
            return Err(rejected(ChannelRejection::MissingChannel));
        }
        if payment.max_claimable > effective {
            return Err(rejected(ChannelRejection::CumulativeExceedsBalance));
        }
        let below = match payment.action {
            ChannelAction::Refund(_) => payment.max_claimable < claimed,
            _ => payment.max_claimable <= claimed,
        };
        if below {
            return Err(rejected(ChannelRejection::CumulativeBelowClaimed));
        }
        Ok(Verdict {
            payer: payment.config.payer,
            snapshot,
        })
    }

    /// `/settle` of a client's deposit (verified first): sent on chain through the relayer.
    pub async fn deposit_for(
        &self,
        wire: &ChannelPayloadWire,
        requirements: &PaymentRequirements,
        terms: &BatchTerms,
        now: u64,
    ) -> Result<Sent, ChannelRefusal> {
        let verdict = self.verify_for(wire, requirements, terms, now).await?;
        let chain_id = requirements.network.config.chain_id;
        let payment = ChannelPayment::parse(wire, chain_id).map_err(rejected)?;
        let ChannelAction::Deposit(d) = &payment.action else {
            return Err(rejected(ChannelRejection::Malformed));
        };
        let (tx, _) = self.deposit(&payment, d, chain_id).await?;
        Ok(Sent {
            transaction: tx,
            amount: Some(d.amount),
            payer: Some(verdict.payer),
            snapshot: Some(self.snapshot(chain_id, payment.channel_id).await?),
        })
    }

    /// `/settle` of a server-authored payload on `chain_id`: its claims (with its own
    /// authorizer's signature), the settlement of what it claimed to its receiver, or a
    /// cooperative refund it completed (nonce, amount, its authorizer's signatures).
    pub async fn settle_for(
        &self,
        chain_id: u64,
        payload: &ServerPayload,
    ) -> Result<Sent, ChannelRefusal> {
        let send = |data: Vec<u8>, gas: u64| async move {
            self.chain
                .send_call(chain_id, batch::SETTLEMENT_ADDRESS, data, gas)
                .await
                .map_err(|e| match e {
                    paygate_x402::facilitator::CallError::Reverted(m) => {
                        ChannelRefusal::ContractRefused(m)
                    }
                    other => unavailable(other),
                })
        };
        match payload {
            ServerPayload::Claim {
                claims,
                claim_authorizer_signature,
            } => {
                let call = claim_call(claims, claim_authorizer_signature.as_ref())?;
                let gas = GAS_BASE + GAS_PER_ROW * claims.len() as u64;
                Ok(Sent {
                    transaction: send(call.to_vec(), gas).await?,
                    amount: None,
                    payer: None,
                    snapshot: None,
                })
            }
            ServerPayload::Settle { receiver, token } => {
                let receiver: Address = receiver
                    .parse()
                    .map_err(|_| rejected(ChannelRejection::Malformed))?;
                let token: Address = token
                    .parse()
                    .map_err(|_| rejected(ChannelRejection::Malformed))?;
                let call = IBatchSettlement::receiversCall { receiver, token };
                let r = self.view(chain_id, batch::SETTLEMENT_ADDRESS, call).await?;
                let call = IBatchSettlement::settleCall { receiver, token }.abi_encode();
                Ok(Sent {
                    transaction: send(call, GAS_BASE).await?,
                    amount: Some(r.totalClaimed.saturating_sub(r.totalSettled)),
                    payer: None,
                    snapshot: None,
                })
            }
            ServerPayload::Refund(r) => {
                let RefundWire {
                    channel_config,
                    amount: refunded,
                    refund_nonce,
                    claims,
                    refund_authorizer_signature,
                    claim_authorizer_signature,
                } = r.as_ref();
                let config = channel_config.parse().map_err(rejected)?;
                let refunded = amount(
                    refunded
                        .as_deref()
                        .ok_or_else(|| rejected(ChannelRejection::Malformed))?,
                )?;
                let nonce: U256 = refund_nonce
                    .parse()
                    .map_err(|_| rejected(ChannelRejection::Malformed))?;
                let signature = refund_authorizer_signature
                    .as_deref()
                    .ok_or_else(|| rejected(ChannelRejection::Malformed))?;
                let mut calls = Vec::new();
                if !claims.is_empty() {
                    calls.push(claim_call(claims, claim_authorizer_signature.as_ref())?);
                }
                calls.push(
                    IBatchSettlement::refundWithSignatureCall {
                        config: config.clone(),
                        amount: refunded,
                        nonce,
                        receiverAuthorizerSignature: bytes(signature)?,
                    }
                    .abi_encode()
                    .into(),
                );
                let gas = GAS_BASE + GAS_PER_ROW * (claims.len() as u64 + 1);
                let call = IBatchSettlement::multicallCall { data: calls }.abi_encode();
                let tx = send(call, gas).await?;
                let id = config.channel_id(chain_id);
                Ok(Sent {
                    transaction: tx,
                    amount: Some(refunded),
                    payer: Some(config.payer),
                    snapshot: Some(self.snapshot(chain_id, id).await?),
                })
            }
        }
    }
}
