//! Payment channels on sled: the record by id; what served requests moved of it
//! (`channel_charges`: small, and all the write committing a voucher writes); an index of the
//! channels with a charge not yet claimed, and one of each organisation's channels (written with
//! the record that opens a channel; built once for stores from before it).
//!
//! A charges entry is the version of the record it sits on and its own version (8 bytes each,
//! big-endian), then the JSON of [`ChannelCharges`] (a voucher's write compares the version
//! without decoding the rest). Every full write (a transaction) writes the record and an entry
//! on it; a voucher's write swaps the entry alone (sled keeps its transactions and single writes
//! apart, and the swap fails if the entry moved since it was read). A reader takes the record and
//! the entry in two reads and, should a full write fall between them (the entry then sits on
//! another version), reads again.

use super::*;
use crate::traits::ChannelStore;
use paygate_domain::channel::{ChannelCharges, ChannelRecord};

/// A stored record's version, read without the rest of it.
#[derive(serde::Deserialize)]
struct Versioned {
    version: u64,
}

/// What a voucher's compare-and-set of the charges entry alone did.
enum Swap {
    /// Swapped in: the entry as written.
    Written(Vec<u8>),
    /// The entry moved since it was read: nothing written.
    Moved,
    /// Not tried: it takes a full write (no entry yet, or the channel's standing in the
    /// unclaimed index changes).
    NeedsFullWrite,
}

/// How often a read torn by concurrent full writes is taken again before giving up.
const READ_TRIES: usize = 64;

/// A charges entry: the version of the record it sits on, its own version, then its charges.
fn charges_entry(base: u64, c: &ChannelCharges) -> StoreResult<Vec<u8>> {
    let mut out = Vec::with_capacity(320);
    out.extend_from_slice(&base.to_be_bytes());
    out.extend_from_slice(&c.version.to_be_bytes());
    serde_json::to_writer(&mut out, c).map_err(backend)?;
    Ok(out)
}

/// The record version an entry sits on and the entry's version.
fn entry_versions(v: &[u8]) -> StoreResult<(u64, u64)> {
    match (v.get(..8), v.get(8..16)) {
        (Some(base), Some(version)) => Ok((
            u64::from_be_bytes(base.try_into().map_err(backend)?),
            u64::from_be_bytes(version.try_into().map_err(backend)?),
        )),
        _ => Err(backend("a channel's charges entry is cut short")),
    }
}

fn entry_charges(v: &[u8]) -> StoreResult<ChannelCharges> {
    dec(v.get(16..).unwrap_or_default())
}

impl SledStore {
    /// Channel `id` as last written: its record with its charges over it.
    fn channel(&self, id: &[u8]) -> StoreResult<Option<ChannelRecord>> {
        for _ in 0..READ_TRIES {
            let Some(v) = self.channels.get(id).map_err(backend)? else {
                return Ok(None);
            };
            let mut record: ChannelRecord = dec(&v)?;
            match self.channel_charges.get(id).map_err(backend)? {
                None => return Ok(Some(record)),
                Some(e) => {
                    if entry_versions(&e)?.0 == record.version {
                        record.apply(entry_charges(&e)?);
                        return Ok(Some(record));
                    }
                    // A full write fell between the two reads.
                }
            }
        }
        Err(backend("a channel kept moving while it was read"))
    }

    /// The compare-and-set of a channel's record, its charges entry and its unclaimed index, in
    /// one transaction (not flushed).
    fn swap_channel(&self, expected: u64, next: &ChannelRecord) -> StoreResult<bool> {
        let bytes = enc(next)?;
        let entry = charges_entry(next.version, &next.charges())?;
        let id = next.id.as_bytes();
        let open = next.unclaimed() > 0;
        let by_org = org_key(&next.org_id, id);
        (
            &self.channels,
            &self.channels_unclaimed,
            &self.channel_charges,
            &self.channels_by_org,
        )
            .transaction(|(records, unclaimed, charges, orgs)| {
                let stored = match (charges.get(id)?, records.get(id)?) {
                    (Some(e), _) => entry_versions(&e).map(|(_, v)| v).or_else(abort)?,
                    (None, Some(v)) => dec::<Versioned>(&v).map(|r| r.version).or_else(abort)?,
                    (None, None) => 0,
                };
                if stored != expected {
                    return Ok(false);
                }
                records.insert(id, bytes.as_slice())?;
                charges.insert(id, entry.as_slice())?;
                if expected == 0 {
                    orgs.insert(by_org.as_slice(), &[][..])?;
                }
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

    /// The compare-and-set of a channel's charges entry alone (not flushed).
    fn swap_charges(&self, expected: u64, next: &ChannelRecord) -> StoreResult<Swap> {
        let id = next.id.as_bytes();
        let open = next.unclaimed() > 0;
        if open != self.channels_unclaimed.contains_key(id).map_err(backend)? {
            return Ok(Swap::NeedsFullWrite);
        }
        let Some(current) = self.channel_charges.get(id).map_err(backend)? else {
            return Ok(Swap::NeedsFullWrite);
        };
        let (base, stored) = entry_versions(&current)?;
        if stored != expected {
            return Ok(Swap::Moved);
        }
        let entry = charges_entry(base, &next.charges())?;
        let swapped = self
            .channel_charges
            .compare_and_swap(id, Some(current), Some(entry.as_slice()))
            .map_err(backend)?;
        Ok(match swapped {
            Ok(()) => Swap::Written(entry),
            Err(_) => Swap::Moved,
        })
    }

    /// Replays the voucher journal's files in sled's directory `dir` (`journal.rs`), each
    /// channel's newest entry once, then flushes and deletes them; the sequence number the next
    /// file takes.
    pub(super) fn replay_journal(&self, dir: &std::path::Path) -> StoreResult<u64> {
        let files = journal::files(dir)?;
        let Some(&(last, _)) = files.last() else {
            return Ok(0);
        };
        let mut newest: std::collections::HashMap<Vec<u8>, (u64, Vec<u8>)> = Default::default();
        for (_, path) in &files {
            for (id, entry) in journal::records(path)? {
                let version = entry_versions(&entry)?.1;
                if newest.get(&id).is_none_or(|(kept, _)| *kept < version) {
                    newest.insert(id, (version, entry));
                }
            }
        }
        for (id, (_, entry)) in &newest {
            self.replay_charges(id, entry)?;
        }
        self.db.flush().map_err(backend)?;
        for (_, path) in files {
            std::fs::remove_file(path).map_err(backend)?;
        }
        Ok(last + 1)
    }

    /// One journal record: channel `id`'s charges entry, put over the record sled holds when
    /// it is newer. A full write (the record with the entry on it) even when the entry sits on
    /// the record sled holds: a full write the voucher followed (a claim's, say) may not have
    /// reached sled's disk, and the charges belong over what did.
    fn replay_charges(&self, id: &[u8], entry: &[u8]) -> StoreResult<()> {
        let (_, version) = entry_versions(entry)?;
        let Some(mut record) = self.channel(id)? else {
            // Never expected: a channel's first write is flushed before any voucher on it.
            tracing::warn!(
                channel = %String::from_utf8_lossy(id),
                "the voucher journal holds a charge of a channel the store does not"
            );
            return Ok(());
        };
        if record.version >= version {
            return Ok(());
        }
        let expected = record.version;
        record.apply(entry_charges(entry)?);
        if self.swap_channel(expected, &record)? {
            Ok(())
        } else {
            Err(backend(
                "a channel moved while the voucher journal was replayed",
            ))
        }
    }

    fn records_of(
        &self,
        ids: impl Iterator<Item = sled::Result<sled::IVec>>,
    ) -> StoreResult<Vec<ChannelRecord>> {
        let mut out = Vec::new();
        for id in ids {
            if let Some(r) = self.channel(&id.map_err(backend)?)? {
                out.push(r);
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl ChannelStore for SledStore {
    async fn get_channel(&self, id: &str) -> StoreResult<Option<ChannelRecord>> {
        self.channel(id.as_bytes())
    }

    async fn put_channel_if(&self, expected: u64, next: &ChannelRecord) -> StoreResult<bool> {
        let written = self.swap_channel(expected, next)?;
        if written {
            self.durable().await?;
        }
        Ok(written)
    }

    async fn put_channel_charges_if(
        &self,
        expected: u64,
        next: &ChannelRecord,
    ) -> StoreResult<bool> {
        match (self.swap_charges(expected, next)?, &self.journal) {
            (Swap::Moved, _) => Ok(false),
            (Swap::Written(entry), Some(journal)) => {
                journal.append(next.id.as_bytes(), &entry)?;
                Ok(true)
            }
            (Swap::Written(_), None) => {
                self.durable().await?;
                Ok(true)
            }
            (Swap::NeedsFullWrite, _) => self.put_channel_if(expected, next).await,
        }
    }

    async fn list_channels(&self, org_id: &str) -> StoreResult<Vec<ChannelRecord>> {
        let start = prefix(org_id);
        let ids = self
            .channels_by_org
            .range(start.clone()..prefix_end(start.clone()))
            .keys()
            .map(|k| k.map(|k| sled::IVec::from(&k[start.len()..])));
        let mut own = self.records_of(ids)?;
        own.retain(|r| r.org_id == org_id);
        Ok(own)
    }

    async fn unclaimed_channels(&self) -> StoreResult<Vec<ChannelRecord>> {
        let mut open = self.records_of(self.channels_unclaimed.iter().keys())?;
        open.retain(|r| r.unclaimed() > 0);
        Ok(open)
    }
}
