//! The payer's escape hatch, watched. A payer takes its deposit back with `initiateWithdraw`
//! and, `withdrawDelay` later, `finalizeWithdraw`, which returns what was not claimed by then.
//! The elected claimer reads the contract's `WithdrawInitiated` and `WithdrawFinalized` events
//! before each claim pass and marks the channel (`withdraw_due`): vouchers stop
//! `claim_lead_seconds` before the withdrawal can finish, and a marked channel's charges are
//! claimed at the next pass whatever the thresholds, so a withdrawal never takes money for
//! requests already served.
//!
//! Where the events were read up to is kept in memory: a node that starts claiming (a restart,
//! another node elected) reads back one block per second of the withdraw delay, which covers
//! every withdrawal that can still finish on chains whose blocks are a second or more apart.

use super::{unavailable, ChannelRefusal, Channels};
use alloy_primitives::{Log, B256};
use alloy_sol_types::SolEvent;
use paygate_x402::batch::{self, IBatchSettlement};
use paygate_x402::facilitator::LOG_SPAN;

/// A withdrawal event of one channel.
enum Withdrawal {
    Initiated { channel: B256, finalize_at: u64 },
    Finalized { channel: B256 },
}

fn withdrawal(log: &Log) -> Option<Withdrawal> {
    match log.topics().first().copied()? {
        IBatchSettlement::WithdrawInitiated::SIGNATURE_HASH => {
            let e = IBatchSettlement::WithdrawInitiated::decode_log(log).ok()?;
            Some(Withdrawal::Initiated {
                channel: e.channelId,
                finalize_at: e.finalizeAt.to::<u64>(),
            })
        }
        IBatchSettlement::WithdrawFinalized::SIGNATURE_HASH => {
            let e = IBatchSettlement::WithdrawFinalized::decode_log(log).ok()?;
            Some(Withdrawal::Finalized {
                channel: e.channelId,
            })
        }
        _ => None,
    }
}

impl Channels {
    /// Reads the withdrawals since the last pass on every chain and marks the channels the
    /// store holds; the number of channels whose record changed.
    pub async fn watch_withdrawals(&self) -> Result<usize, ChannelRefusal> {
        let mut changed = 0;
        for chain_id in self.chain.chain_ids() {
            let latest = self
                .chain
                .block_number(chain_id)
                .await
                .map_err(unavailable)?;
            let read_up_to = self
                .watched
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&chain_id)
                .copied();
            let mut from = match read_up_to {
                Some(block) => block + 1,
                None => latest.saturating_sub(self.cfg.withdraw_delay_seconds),
            };
            while from <= latest {
                let to = (from + LOG_SPAN - 1).min(latest);
                let logs = self
                    .chain
                    .logs(
                        chain_id,
                        batch::SETTLEMENT_ADDRESS,
                        &[
                            IBatchSettlement::WithdrawInitiated::SIGNATURE_HASH,
                            IBatchSettlement::WithdrawFinalized::SIGNATURE_HASH,
                        ],
                        from,
                        to,
                    )
                    .await
                    .map_err(unavailable)?;
                for w in logs.iter().filter_map(withdrawal) {
                    changed += usize::from(self.note_withdrawal(chain_id, w).await?);
                }
                self.watched
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(chain_id, to);
                from = to + 1;
            }
        }
        Ok(changed)
    }

    /// Marks a withdrawal on the channel's record (with the chain's figures), if the store
    /// holds the channel; whether the record changed.
    async fn note_withdrawal(&self, chain_id: u64, w: Withdrawal) -> Result<bool, ChannelRefusal> {
        let (channel, due) = match w {
            Withdrawal::Initiated {
                channel,
                finalize_at,
            } => (channel, Some(finalize_at)),
            Withdrawal::Finalized { channel } => (channel, None),
        };
        let id = format!("{channel:#x}");
        let (balance, total_claimed) = self.on_chain(chain_id, channel).await?;
        for _ in 0..8 {
            let Some(read) = self.store.get_channel(&id).await.map_err(unavailable)? else {
                return Ok(false);
            };
            if read.withdraw_due == due && read.balance == balance {
                return Ok(false);
            }
            let mut next = read.clone();
            next.withdraw_due = due;
            next.balance = balance;
            next.total_claimed = total_claimed;
            next.version = read.version + 1;
            next.updated_at = paygate_domain::now_rfc3339();
            if self
                .store
                .put_channel_if(read.version, &next)
                .await
                .map_err(unavailable)?
            {
                self.forget(channel);
                if due.is_some() {
                    self.count(&read.org_id, "withdrawal", 0);
                }
                match due {
                    Some(at) => {
                        tracing::info!(channel = %id, due = at, "the payer asked for a withdrawal; its charges are claimed first")
                    }
                    None => tracing::info!(channel = %id, "the payer's withdrawal finished"),
                }
                return Ok(true);
            }
        }
        Err(ChannelRefusal::Busy)
    }
}
