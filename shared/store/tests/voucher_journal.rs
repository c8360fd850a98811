//! sled's voucher journal on a real database in a temp dir: what a process killed before sled's
//! log reached the disk had written to the journal is put back when the store opens again; the
//! journal's files are checkpointed away while it runs.

mod common;

use common::{channel, reopened};
use paygate_domain::channel::ChannelRecord;
use paygate_store::{ChannelStore, SledOptions, SledStore};
use std::path::Path;
use std::time::Duration;

/// `v` after one more served request.
fn served(v: &ChannelRecord) -> ChannelRecord {
    let mut n = v.clone();
    n.charged += 100;
    n.voucher_max = n.charged;
    n.voucher_signature = format!("0x{}", "ab".repeat(65));
    n.requests += 1;
    n.version += 1;
    n
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn journal_files(sled_dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(sled_dir.join("voucher-journal"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    out.sort();
    out
}

/// The kill of a process that answered five vouchers: sled's files as they were before the
/// vouchers, the journal as the kernel held it (and a record cut short at its end, as a power
/// loss mid-append would leave it). The store opened on them holds every voucher, then goes on.
#[tokio::test]
async fn a_killed_processs_vouchers_come_back_from_the_journal() {
    let work = tempfile::tempdir().unwrap();
    let (live, killed) = (work.path().join("live"), work.path().join("killed"));
    let c = channel("0xj1");
    {
        let s = reopened(|| SledStore::open(&live)).await;
        assert!(s.put_channel_if(0, &c).await.unwrap());
    }
    copy_dir(&live, &killed);
    let mut v = c.clone();
    {
        let s = reopened(|| SledStore::open(&live)).await;
        // The first charge moves the channel into the unclaimed index: a full write (flushed,
        // so not journaled); the four after it are the charges entry alone, journaled.
        for _ in 0..5 {
            let next = served(&v);
            assert!(s.put_channel_charges_if(v.version, &next).await.unwrap());
            v = next;
        }
        copy_dir(
            &live.join("voucher-journal"),
            &killed.join("voucher-journal"),
        );
    }
    // The first run's file (empty) and the second's.
    let files = journal_files(&killed);
    assert_eq!(files.len(), 2, "{files:?}");
    let mut bytes = std::fs::read(&files[1]).unwrap();
    let first = 8 + u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
    let torn = bytes[..first - 1].to_vec();
    bytes.extend_from_slice(&torn);
    std::fs::write(&files[1], bytes).unwrap();

    // Replayed even when the store is opened without a journal from now on.
    let options = SledOptions {
        voucher_sync: None,
        ..Default::default()
    };
    let s = reopened(|| SledStore::open_with(&killed, &options)).await;
    assert_eq!(s.get_channel(&c.id).await.unwrap(), Some(v.clone()));
    assert_eq!(s.unclaimed_channels().await.unwrap(), vec![v.clone()]);
    assert_eq!(s.list_channels("o1").await.unwrap(), vec![v.clone()]);
    assert!(
        journal_files(&killed).is_empty(),
        "replayed files are deleted"
    );
    let next = served(&v);
    assert!(!s
        .put_channel_charges_if(v.version - 1, &next)
        .await
        .unwrap());
    assert!(s.put_channel_charges_if(v.version, &next).await.unwrap());
    drop(s);
    let s = reopened(|| SledStore::open(&killed)).await;
    assert_eq!(s.get_channel(&c.id).await.unwrap(), Some(next));
}

/// A journal past its size is checkpointed while the store runs: appends go to a new file, the
/// old one is deleted once sled's log holds what it did.
#[tokio::test]
async fn a_full_journal_file_is_checkpointed_away() {
    let dir = tempfile::tempdir().unwrap();
    let options = SledOptions {
        voucher_sync: Some(Duration::from_millis(5)),
        ..Default::default()
    };
    let s = SledStore::open_with(dir.path(), &options).unwrap();
    let mut v = channel("0xj2");
    assert!(s.put_channel_if(0, &v).await.unwrap());
    let first = journal_files(dir.path());
    assert_eq!(first.len(), 1);
    // About 300 bytes a record: past the 4 MiB checkpoint.
    for _ in 0..16_000 {
        let next = served(&v);
        assert!(s.put_channel_charges_if(v.version, &next).await.unwrap());
        v = next;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while journal_files(dir.path()).contains(&first[0]) {
        assert!(std::time::Instant::now() < deadline, "never checkpointed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(journal_files(dir.path()).len(), 1);
    drop(s);
    let s = reopened(|| SledStore::open(dir.path())).await;
    assert_eq!(s.get_channel(&v.id).await.unwrap(), Some(v));
}
