//! Payment channels on sled: the record by id, and an index of the channels with a charge not
//! yet claimed. The compare-and-set reads the stored version inside the transaction.

use super::*;
use crate::ChannelStore;
use paygate_domain::channel::ChannelRecord;

/// A stored channel record's version, read without the rest of it.
#[derive(serde::Deserialize)]
struct Versioned {
    version: u64,
}

impl SledStore {
    /// The compare-and-set of a channel record and its unclaimed index, in one transaction
    /// (not flushed).
    fn swap_channel(&self, expected: u64, next: &ChannelRecord) -> StoreResult<bool> {
        let bytes = enc(next)?;
        let id = next.id.as_bytes();
        let open = next.unclaimed() > 0;
        (&self.channels, &self.channels_unclaimed)
            .transaction(|(records, unclaimed)| {
                // Only the version is compared: read without decoding the whole record.
                let stored = match records.get(id)? {
                    Some(v) => dec::<Versioned>(&v).map(|r| r.version).or_else(abort)?,
                    None => 0,
                };
                if stored != expected {
                    return Ok(false);
                }
                records.insert(id, bytes.as_slice())?;
                // The index is written only when the channel's standing changes (a voucher of a
                // channel already unclaimed writes the record alone).
                match (open, unclaimed.get(id)?.is_some()) {
                    (true, false) => {
                        unclaimed.insert(id, &[][..])?;
                    }
                    (false, true) => {
                        unclaimed.remove(id)?;
                    }
                    _ => {}
                }
                Ok(true)
            })
            .map_err(tx_err)
    }
}

#[async_trait]
impl ChannelStore for SledStore {
    async fn get_channel(&self, id: &str) -> StoreResult<Option<ChannelRecord>> {
        Self::get(&self.channels, id.as_bytes())
    }

    async fn put_channel_if(&self, expected: u64, next: &ChannelRecord) -> StoreResult<bool> {
        let written = self.swap_channel(expected, next)?;
        if written {
            self.durable().await?;
        }
        Ok(written)
    }

    async fn list_channels(&self, org_id: &str) -> StoreResult<Vec<ChannelRecord>> {
        let mut out = Vec::new();
        for kv in self.channels.iter() {
            let (_, v) = kv.map_err(backend)?;
            let record: ChannelRecord = dec(&v)?;
            if record.org_id == org_id {
                out.push(record);
            }
        }
        Ok(out)
    }

    async fn unclaimed_channels(&self) -> StoreResult<Vec<ChannelRecord>> {
        open_records(
            &self.channels,
            &self.channels_unclaimed,
            |r: &ChannelRecord| r.unclaimed() > 0,
        )
    }
}
