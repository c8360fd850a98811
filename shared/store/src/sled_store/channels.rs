//! Payment channels on sled: the record by id, and an index of the channels with a charge not
//! yet claimed. The compare-and-set reads the stored version inside the transaction.

use super::*;
use crate::ChannelStore;
use paygate_domain::channel::ChannelRecord;

#[async_trait]
impl ChannelStore for SledStore {
    async fn get_channel(&self, id: &str) -> StoreResult<Option<ChannelRecord>> {
        Self::get(&self.channels, id.as_bytes())
    }

    async fn put_channel_if(&self, expected: u64, next: &ChannelRecord) -> StoreResult<bool> {
        let bytes = enc(next)?;
        let id = next.id.as_bytes();
        let written = (&self.channels, &self.channels_unclaimed)
            .transaction(|(records, unclaimed)| {
                let stored = match records.get(id)? {
                    Some(v) => dec::<ChannelRecord>(&v).map(|r| r.version).or_else(abort)?,
                    None => 0,
                };
                if stored != expected {
                    return Ok(false);
                }
                put_tracked(records, unclaimed, id, &bytes, next.unclaimed() > 0)?;
                Ok(true)
            })
            .map_err(tx_err)?;
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
