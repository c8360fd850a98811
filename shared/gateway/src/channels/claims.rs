//! Claims: what vouchers promised, claimed on chain in batches (one `multicall` of
//! `claimWithSignature` over a batch of channels and `settle` of each receiver), then the
//! records updated from what the chain says was claimed.

use super::{unavailable, ChannelRefusal, Channels, CLAIM_GAS_BASE, CLAIM_GAS_PER_CHANNEL};
use alloy_primitives::{Bytes, B256};
use alloy_sol_types::SolCall;
use paygate_domain::channel::ChannelRecord;
use paygate_x402::batch::{self, IBatchSettlement};
use std::collections::HashMap;

impl Channels {
    /// One claim pass (the elected claimer's): every channel whose unclaimed amount or age
    /// passed the thresholds (all of them with `all`), in batches of `claim_batch_max`, each
    /// batch one transaction (`claimWithSignature` over the batch, then `settle` of each
    /// receiver), the records updated after. Returns the channels claimed.
    pub async fn claim_due(&self, all: bool) -> Result<usize, ChannelRefusal> {
        self.claim_matching(all, None).await
    }

    /// Claims every unclaimed charge of `org_id`'s channels now (all organisations' with
    /// `None`), whatever the thresholds.
    pub async fn claim_due_for(&self, org_id: Option<&str>) -> Result<usize, ChannelRefusal> {
        self.claim_matching(true, org_id).await
    }

    async fn claim_matching(
        &self,
        all: bool,
        org_id: Option<&str>,
    ) -> Result<usize, ChannelRefusal> {
        let now = paygate_domain::unix_now();
        let due: Vec<ChannelRecord> = self
            .store
            .unclaimed_channels()
            .await
            .map_err(unavailable)?
            .into_iter()
            .filter(|r| org_id.is_none_or(|o| o == r.org_id))
            .filter(|r| {
                all || r.unclaimed() >= u128::from(self.cfg.claim_min_base_units)
                    || r.unclaimed_since
                        .is_some_and(|t| now.saturating_sub(t) >= self.cfg.claim_max_age_seconds)
                    || r.withdraw_due.is_some()
            })
            .collect();
        let mut by_network: HashMap<String, Vec<ChannelRecord>> = HashMap::new();
        for r in due {
            by_network.entry(r.network.clone()).or_default().push(r);
        }
        let mut claimed = 0;
        for (network, records) in by_network {
            let Some(chain_id) = network
                .strip_prefix("eip155:")
                .and_then(|c| c.parse::<u64>().ok())
            else {
                continue;
            };
            for batch in records.chunks(self.cfg.claim_batch_max) {
                claimed += self.claim_batch(chain_id, batch).await?;
            }
        }
        Ok(claimed)
    }

    async fn claim_batch(
        &self,
        chain_id: u64,
        records: &[ChannelRecord],
    ) -> Result<usize, ChannelRefusal> {
        let (calls, count) = self.claim_calls(chain_id, records)?;
        if count == 0 {
            return Ok(0);
        }
        let gas = CLAIM_GAS_BASE + CLAIM_GAS_PER_CHANNEL * count as u64;
        let tx = self.multicall(chain_id, calls, gas).await.map_err(|e| {
            tracing::warn!(error = %e, channels = count, "claim not made");
            unavailable(e)
        })?;
        tracing::info!(transaction = %tx, channels = count, "channels claimed");
        for r in records {
            self.mark_claimed(r, chain_id, tx).await;
        }
        Ok(count)
    }

    /// The calls that claim `records`' highest vouchers up to what each was charged (one
    /// `claimWithSignature` the receiver authorizer signs over the batch) and settle each
    /// receiver, and how many channels they claim (none: no calls).
    pub(super) fn claim_calls(
        &self,
        chain_id: u64,
        records: &[ChannelRecord],
    ) -> Result<(Vec<Bytes>, usize), ChannelRefusal> {
        let mut claims = Vec::new();
        let mut entries = Vec::new();
        let mut receivers = Vec::new();
        for r in records.iter().filter(|r| r.unclaimed() > 0) {
            let Ok(config) = r.config.parse() else {
                continue;
            };
            let Ok(signature) = r.voucher_signature.parse::<Bytes>() else {
                continue;
            };
            let id = config.channel_id(chain_id);
            entries.push(batch::ClaimEntry {
                channelId: id,
                maxClaimableAmount: r.voucher_max,
                totalClaimed: r.charged,
            });
            if !receivers.contains(&(config.receiver, config.token)) {
                receivers.push((config.receiver, config.token));
            }
            claims.push(IBatchSettlement::VoucherClaim {
                voucher: IBatchSettlement::VoucherBody {
                    channel: config,
                    maxClaimableAmount: r.voucher_max,
                },
                signature,
                totalClaimed: r.charged,
            });
        }
        if claims.is_empty() {
            return Ok((Vec::new(), 0));
        }
        let count = claims.len();
        let digest = batch::claim_batch_digest(chain_id, &entries);
        let signature = self.sign(&digest)?;
        let mut calls: Vec<Bytes> = vec![IBatchSettlement::claimWithSignatureCall {
            voucherClaims: claims,
            authorizerSignature: signature,
        }
        .abi_encode()
        .into()];
        for (receiver, token) in receivers {
            calls.push(
                IBatchSettlement::settleCall { receiver, token }
                    .abi_encode()
                    .into(),
            );
        }
        Ok((calls, count))
    }

    /// The receiver authorizer's signature of `digest`.
    pub(super) fn sign(&self, digest: &B256) -> Result<Bytes, ChannelRefusal> {
        alloy_signer::SignerSync::sign_hash_sync(&self.authorizer, digest)
            .map(|s| s.as_bytes().to_vec().into())
            .map_err(unavailable)
    }

    /// Records what the chain now says was claimed of `r`'s channel (re-read until the write
    /// lands: the node serving it may write between).
    async fn mark_claimed(&self, r: &ChannelRecord, chain_id: u64, tx: B256) {
        let Ok(id) = r.id.parse::<B256>() else { return };
        let Ok((balance, total_claimed)) = self.on_chain(chain_id, id).await else {
            return;
        };
        for _ in 0..8 {
            let Ok(Some(read)) = self.store.get_channel(&r.id).await else {
                return;
            };
            let mut next = read.clone();
            next.balance = balance;
            next.total_claimed = total_claimed;
            next.claim_transaction = Some(format!("{tx:#x}"));
            if next.unclaimed() == 0 {
                next.unclaimed_since = None;
            }
            next.version = read.version + 1;
            next.updated_at = paygate_domain::now_rfc3339();
            if let Ok(true) = self.store.put_channel_if(read.version, &next).await {
                let moved = total_claimed.saturating_sub(read.total_claimed);
                if moved > 0 {
                    self.count(&read.org_id, "claimed", moved);
                    let extra = serde_json::json!({"amount": moved.to_string(), "transaction": format!("{tx:#x}")});
                    self.channel_event("channel.claimed", &next, extra);
                }
                self.forget(id);
                return;
            }
        }
        tracing::warn!(channel = %r.id, "claimed, but the record could not be updated; the next pass reads the chain again");
    }
}
