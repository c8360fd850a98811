//! The voucher journal: how a voucher's charge outlives the process without a flush of sled's
//! log per answer.
//!
//! A flush of sled's log costs this machine 130-200 us of CPU when one writer pays it alone
//! (sled 0.34 wakes its seven idle IO threads for it, then the kernel's `fsync` costs 65-80 us
//! on its own): more than everything else a voucher costs together, and still 15-20 us a
//! voucher when 32 connections share flushes. So a voucher's charges entry, once swapped into
//! sled, is also appended here with one `write` before the answer. A `write` is in the kernel's
//! page cache when it returns, so a `kill -9`, a panic or an OOM kill of the process loses
//! nothing; a background thread syncs the file to disk every `voucher_sync` interval, so a power
//! loss or kernel crash loses at most that interval's charges (the seller's loss, never a
//! double charge: the payer's next voucher is answered with the corrective 402 and resyncs).
//!
//! The same thread checkpoints: once the file holds enough, appends move to a new file, sled's
//! log is flushed (which covers every entry in the old file: each was in sled before it was
//! appended), and the old file is deleted. Opening the store replays what the files hold
//! (`SledStore::replay_journal`) before anything reads it.
//!
//! A record: the payload's length (u32, little-endian), its CRC-32, then the payload: the
//! channel id's length (u16), the id, the charges entry as sled holds it. Reading a file stops at
//! the first record cut short or failing its checksum (what a power loss can leave at the end).

use super::codec::backend;
use paygate_domain::StoreResult;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The journal's directory inside sled's.
const DIR: &str = "voucher-journal";
/// A file is checkpointed once it holds this much...
const CHECKPOINT_BYTES: u64 = 4 << 20;
/// ... or once its first record is this old.
const CHECKPOINT_AGE: Duration = Duration::from_secs(10);

pub(super) struct Journal {
    dir: PathBuf,
    active: Mutex<Active>,
    /// Appended to since the last sync.
    dirty: AtomicBool,
    /// Flushed by a checkpoint (the journal holds the database, not the other way round, so
    /// the store's last handle going closes both).
    db: sled::Db,
}

struct Active {
    file: Arc<File>,
    seq: u64,
    bytes: u64,
    /// When the file's first record was appended.
    since: Option<Instant>,
}

fn file_name(seq: u64) -> String {
    format!("{seq:020}.journal")
}

/// The journal files in sled's directory `sled_dir`, oldest first, with their sequence numbers.
pub(super) fn files(sled_dir: &Path) -> StoreResult<Vec<(u64, PathBuf)>> {
    files_in(&sled_dir.join(DIR))
}

fn files_in(dir: &Path) -> StoreResult<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(backend(e)),
    };
    for entry in entries {
        let path = entry.map_err(backend)?.path();
        let seq = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".journal"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(seq) = seq {
            out.push((seq, path));
        }
    }
    out.sort();
    Ok(out)
}

/// The `(channel id, charges entry)` records of one file, up to the first damaged one.
pub(super) fn records(path: &Path) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
    let bytes = fs::read(path).map_err(backend)?;
    let mut out = Vec::new();
    let mut rest = bytes.as_slice();
    while let Some((payload, after)) = next_record(rest) {
        let Some((id, entry)) = split_payload(payload) else {
            break;
        };
        out.push((id.to_vec(), entry.to_vec()));
        rest = after;
    }
    Ok(out)
}

fn next_record(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(b.get(4..8)?.try_into().ok()?);
    let payload = b.get(8..8usize.checked_add(len)?)?;
    (crc32fast::hash(payload) == crc).then(|| (payload, &b[8 + len..]))
}

fn split_payload(p: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = u16::from_le_bytes(p.get(..2)?.try_into().ok()?) as usize;
    Some((p.get(2..2 + n)?, p.get(2 + n..)?))
}

fn encode(id: &[u8], entry: &[u8]) -> StoreResult<Vec<u8>> {
    let id_len = u16::try_from(id.len()).map_err(backend)?;
    let len = u32::try_from(2 + id.len() + entry.len()).map_err(backend)?;
    let mut out = Vec::with_capacity(8 + len as usize);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // the payload's CRC, once written
    out.extend_from_slice(&id_len.to_le_bytes());
    out.extend_from_slice(id);
    out.extend_from_slice(entry);
    let crc = crc32fast::hash(&out[8..]);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

fn create(dir: &Path, seq: u64) -> StoreResult<Arc<File>> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(file_name(seq)))
        .map_err(backend)?;
    // The new file's name must outlive a power loss too.
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(backend)?;
    Ok(Arc::new(file))
}

impl Journal {
    /// Starts a journal in sled's directory `sled_dir` at file `seq` (after every file a
    /// replay read) and its background thread syncing every `interval`.
    pub(super) fn start(
        sled_dir: &Path,
        seq: u64,
        db: sled::Db,
        interval: Duration,
    ) -> StoreResult<Arc<Self>> {
        let dir = sled_dir.join(DIR);
        fs::create_dir_all(&dir).map_err(backend)?;
        let journal = Arc::new(Self {
            active: Mutex::new(Active {
                file: create(&dir, seq)?,
                seq,
                bytes: 0,
                since: None,
            }),
            dir,
            dirty: AtomicBool::new(false),
            db,
        });
        let weak = Arc::downgrade(&journal);
        std::thread::Builder::new()
            .name("paygate-journal".into())
            .spawn(move || background(weak, interval))
            .map_err(backend)?;
        Ok(journal)
    }

    /// Appends channel `id`'s charges entry as sled now holds it: in the kernel's page cache
    /// (safe from the process's death) when this returns.
    pub(super) fn append(&self, id: &[u8], entry: &[u8]) -> StoreResult<()> {
        let record = encode(id, entry)?;
        let mut active = self.active.lock().map_err(backend)?;
        (&*active.file).write_all(&record).map_err(backend)?;
        active.bytes += record.len() as u64;
        active.since.get_or_insert_with(Instant::now);
        self.dirty.store(true, SeqCst);
        Ok(())
    }

    /// Syncs the active file if anything was appended since the last sync.
    fn sync(&self) -> StoreResult<()> {
        if !self.dirty.swap(false, SeqCst) {
            return Ok(());
        }
        let file = self.active.lock().map_err(backend)?.file.clone();
        file.sync_data().map_err(|e| {
            self.dirty.store(true, SeqCst);
            backend(e)
        })
    }

    /// Moves appends to a new file once the active one holds enough, flushes sled's log (which
    /// then holds everything the older files do) and deletes the older files.
    fn checkpoint(&self) -> StoreResult<()> {
        let active_seq = {
            let mut active = self.active.lock().map_err(backend)?;
            let due = active.bytes >= CHECKPOINT_BYTES
                || active.since.is_some_and(|t| t.elapsed() >= CHECKPOINT_AGE);
            if !due {
                return Ok(());
            }
            let seq = active.seq + 1;
            *active = Active {
                file: create(&self.dir, seq)?,
                seq,
                bytes: 0,
                since: None,
            };
            seq
        };
        self.db.flush().map_err(backend)?;
        for (seq, path) in files_in(&self.dir)? {
            if seq < active_seq {
                fs::remove_file(path).map_err(backend)?;
            }
        }
        Ok(())
    }
}

/// The journal's thread: syncs, then checkpoints when due, every `interval`; ends once the
/// store is gone.
fn background(journal: Weak<Journal>, interval: Duration) {
    let mut failing = false;
    loop {
        std::thread::sleep(interval);
        let Some(j) = journal.upgrade() else {
            return;
        };
        match j.sync().and_then(|_| j.checkpoint()) {
            Ok(()) => failing = false,
            // Once per failing spell: the disk or the file system needs an operator.
            Err(e) if !failing => {
                failing = true;
                tracing::error!(error = %e, "the voucher journal cannot be synced or checkpointed");
            }
            Err(_) => {}
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        // A store closed in order leaves its last charges on disk (sled flushes its own log
        // when its last handle goes).
        if let Ok(active) = self.active.lock() {
            let _ = active.file.sync_data();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_up_to_the_first_damaged_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.journal");
        let mut bytes = encode(b"chan-a", b"entry one").unwrap();
        bytes.extend(encode(b"chan-b", b"entry two").unwrap());
        let mut third = encode(b"chan-c", b"entry three").unwrap();
        third.truncate(third.len() - 1);
        bytes.extend(&third);
        fs::write(&path, &bytes).unwrap();
        assert_eq!(
            records(&path).unwrap(),
            vec![
                (b"chan-a".to_vec(), b"entry one".to_vec()),
                (b"chan-b".to_vec(), b"entry two".to_vec())
            ]
        );
        // A flipped byte in the second record ends the read before it.
        let first_len = encode(b"chan-a", b"entry one").unwrap().len();
        bytes[first_len + 12] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert_eq!(records(&path).unwrap().len(), 1);
    }
}
