//! Tests of [`super::DlqStore`] against real files.

use super::*;
use crate::dispatch::dlq::entry::tests::sample_entry;
use crate::dispatch::dlq::{check_record, encode_entry, DlqReason};
use crate::wal::format::MAX_ERROR_BYTES;

#[test]
fn put_get_list_remove_round_trip_and_survive_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dlq");
    let store = DlqStore::open(&dir, 10).unwrap();
    assert!(store.is_empty());
    let mut entries: Vec<_> = (0..3).map(sample_entry).collect();
    entries[1].reason = DlqReason::CircuitOpen;
    entries[2].event.replay_of = Some(sample_entry(9).id);
    entries[2].event.body = vec![0xFF, 0x00, 0x80];
    for e in &entries {
        store.put(e).unwrap();
    }
    assert_eq!(store.len(), 3);
    for e in &entries {
        assert_eq!(&store.get(&e.id).unwrap(), e);
    }
    // Sorted by dead_lettered_at: sample_entry(2) died first.
    let list = store.list().unwrap().entries;
    let ids: Vec<_> = list.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, [&entries[2].id, &entries[1].id, &entries[0].id]);
    assert_eq!(list[1].reason, DlqReason::CircuitOpen);
    assert_eq!(list[0].replay_of, entries[2].event.replay_of);
    assert_eq!(
        (list[2].trigger_id.as_str(), list[2].body_len),
        ("github-push", 7)
    );
    // Replacing an entry does not count twice.
    let mut again = entries[0].clone();
    again.attempts = 9;
    store.put(&again).unwrap();
    assert_eq!(store.len(), 3);
    drop(store);
    let store = DlqStore::open(&dir, 10).unwrap();
    assert_eq!(store.len(), 3);
    assert_eq!(store.get(&again.id).unwrap().attempts, 9);
    store.remove(&entries[1].id).unwrap();
    assert!(matches!(
        store.get(&entries[1].id),
        Err(DlqError::NotFound { .. })
    ));
    assert!(matches!(
        store.remove(&entries[1].id),
        Err(DlqError::NotFound { .. })
    ));
    assert_eq!(store.len(), 2);
}

#[test]
fn full_store_refuses_new_ids_until_one_is_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DlqStore::open(tmp.path(), 2).unwrap();
    store.put(&sample_entry(0)).unwrap();
    store.put(&sample_entry(1)).unwrap();
    assert!(matches!(
        store.put(&sample_entry(2)),
        Err(DlqError::Full { max_entries: 2 })
    ));
    store.put(&sample_entry(1)).unwrap(); // a replacement is not a new entry
                                          // Removed behind the store's back (offline `dlq discard`): noticed before refusing.
    DlqStore::open_existing(tmp.path())
        .unwrap()
        .remove(&sample_entry(0).id)
        .unwrap();
    store.put(&sample_entry(2)).unwrap();
    assert_eq!(store.len(), 2);
}

#[test]
fn ids_are_validated_before_touching_files() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DlqStore::open(&tmp.path().join("dlq"), 10).unwrap();
    for bad in [
        "../../etc/passwd",
        "",
        "01HZX3K9V7Q2W8E5R4T6Y1U0a",
        "01HZX3K9V7Q2W8E5R4T6Y1U0AB/",
        "01HZX3K9V7Q2W8E5R4T6Y1U0A.tmp",
    ] {
        assert!(
            matches!(store.get(bad), Err(DlqError::InvalidId { .. })),
            "{bad}"
        );
        assert!(matches!(store.remove(bad), Err(DlqError::InvalidId { .. })));
        let mut e = sample_entry(0);
        e.id = bad.to_owned();
        assert!(matches!(store.put(&e), Err(DlqError::InvalidId { .. })));
    }
    assert!(valid_id("01HZX3K9V7Q2W8E5R4T6Y1U0AB"));
    let mut e = sample_entry(0);
    e.last_error = "x".repeat(MAX_ERROR_BYTES + 1);
    assert!(matches!(store.put(&e), Err(DlqError::Encode(_))));
    assert_eq!(std::fs::read_dir(store.dir()).unwrap().count(), 0);
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn batches(dir: &Path) -> Vec<String> {
    names(dir)
        .into_iter()
        .filter(|n| n.starts_with("B-"))
        .collect()
}

/// Writes `e` the way the one-file-per-entry DLQ did: `dlq/<ID>`, one record.
pub(crate) fn write_legacy(dir: &Path, e: &DlqEntry) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(&e.id), encode_entry(e).unwrap()).unwrap();
}

#[test]
fn one_commit_is_one_file_and_every_entry_gets_its_result() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DlqStore::open(tmp.path(), 3).unwrap();
    let entries: Vec<_> = (0..5).map(sample_entry).collect();
    let mut bad = sample_entry(9);
    bad.last_error = "x".repeat(MAX_ERROR_BYTES + 1);
    let mut items: Vec<(usize, &DlqEntry)> = entries.iter().enumerate().collect();
    items.push((5, &bad));
    items.push((6, &entries[0])); // the same id twice in one commit: one entry
    items.push((7, &entries[4])); // a refused id stays refused
    let mut got = store.put_batch(items);
    got.sort_by_key(|(k, _)| *k);
    let kinds: Vec<&str> = got
        .iter()
        .map(|(_, r)| match r {
            Ok(()) => "ok",
            Err(DlqError::Full { .. }) => "full",
            Err(DlqError::Encode(_)) => "encode",
            Err(e) => panic!("{e}"),
        })
        .collect();
    assert_eq!(
        kinds,
        ["ok", "ok", "ok", "full", "full", "encode", "ok", "full"]
    );
    assert_eq!(batches(tmp.path()).len(), 1, "one file for the commit");
    assert_eq!(store.len(), 3);
    assert_eq!(store.get(&entries[2].id).unwrap(), entries[2]);
    let g = store.gauges();
    assert_eq!(g.entries.load(Ordering::Relaxed), 3);
    let file_bytes = std::fs::metadata(tmp.path().join(&batches(tmp.path())[0]))
        .unwrap()
        .len();
    assert_eq!(g.bytes.load(Ordering::Relaxed), file_bytes);
    assert_eq!(store.bytes(), file_bytes);
    assert!(store.put_batch(Vec::<((), &DlqEntry)>::new()).is_empty());
}

#[test]
fn removing_every_entry_deletes_the_file_and_its_tombstones_and_reopen_agrees() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let store = DlqStore::open(dir, 100).unwrap();
    let a: Vec<_> = (0..4).map(sample_entry).collect();
    let b: Vec<_> = (4..6).map(sample_entry).collect();
    store.put_batch(a.iter().map(|e| ((), e)).collect());
    store.put_batch(b.iter().map(|e| ((), e)).collect());
    assert_eq!(batches(dir).len(), 2);
    store.remove(&a[0].id).unwrap();
    store.remove(&a[1].id).unwrap();
    assert!(dir.join(format!("{}.gone", a[0].id)).exists());
    // Reopened, the tombstones still hold.
    drop(store);
    let store = DlqStore::open(dir, 100).unwrap();
    assert_eq!(store.len(), 4);
    assert!(matches!(
        store.get(&a[0].id),
        Err(DlqError::NotFound { .. })
    ));
    store.remove(&a[2].id).unwrap();
    store.remove(&a[3].id).unwrap();
    assert_eq!(batches(dir).len(), 1, "the first batch is gone");
    assert!(
        !names(dir).iter().any(|n| n.ends_with(".gone")),
        "{:?}",
        names(dir)
    );
    assert_eq!(store.list().unwrap().entries.len(), 2);
    // A crash after deleting a batch, before its tombstones: the next open deletes them.
    std::fs::write(dir.join(format!("{}.gone", a[0].id)), b"").unwrap();
    let store = DlqStore::open(dir, 100).unwrap();
    assert_eq!(store.len(), 2);
    assert!(!dir.join(format!("{}.gone", a[0].id)).exists());
}

#[test]
fn a_put_after_a_removal_makes_the_id_live_again_across_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let store = DlqStore::open(dir, 100).unwrap();
    let e = sample_entry(1);
    store.put_batch(vec![((), &e), ((), &sample_entry(2))]);
    store.remove(&e.id).unwrap();
    let mut again = e.clone();
    again.attempts = 7;
    store.put(&again).unwrap();
    assert!(!dir.join(format!("{}.gone", e.id)).exists());
    drop(store);
    let store = DlqStore::open(dir, 100).unwrap();
    assert_eq!(store.get(&e.id).unwrap().attempts, 7);
    // Dead-lettered again while live (a crash lost its `Done`): the file holding only the
    // superseded version is deleted at once.
    let files = batches(dir).len();
    let mut third = e.clone();
    third.attempts = 8;
    store.put(&third).unwrap();
    assert_eq!(
        batches(dir).len(),
        files,
        "one file written, the superseded one deleted"
    );
    assert_eq!(store.get(&e.id).unwrap().attempts, 8);
    // The old version's file still holds entry 2; removing the new version removes both.
    store.remove(&e.id).unwrap();
    drop(store);
    let store = DlqStore::open(dir, 100).unwrap();
    assert!(matches!(store.get(&e.id), Err(DlqError::NotFound { .. })));
    assert_eq!(store.len(), 1);
}

#[test]
fn a_mostly_dead_batch_is_compacted_and_reads_keep_working() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let store = DlqStore::open(dir, 1000).unwrap();
    let entries: Vec<_> = (0..40)
        .map(|i| {
            let mut e = sample_entry(i);
            e.event.body = vec![b'x'; 4096];
            e
        })
        .collect();
    store.put_batch(entries.iter().map(|e| ((), e)).collect());
    let first = batches(dir);
    let offline = DlqStore::open_existing(dir).unwrap(); // indexed before the compaction
                                                         // The 20th removal leaves 20 of 40 equal records: less than half the file (its header).
    for e in &entries[..20] {
        store.remove(&e.id).unwrap();
    }
    let now = batches(dir);
    assert_eq!(now.len(), 1);
    assert_ne!(now, first, "rewritten into a new file");
    let record = encode_entry(&entries[0]).unwrap().len() as u64;
    assert_eq!(
        store.bytes(),
        16 + 20 * record,
        "only the live entries are left"
    );
    for e in &entries[20..] {
        assert_eq!(&store.get(&e.id).unwrap(), e);
    }
    // An offline tool whose index predates the compaction finds the entries where they went.
    assert_eq!(&offline.get(&entries[30].id).unwrap(), &entries[30]);
    assert_eq!(offline.list().unwrap().entries.len(), 20);
    assert!(
        !names(dir).iter().any(|n| n.ends_with(".gone")),
        "tombstones of compacted-away records go too: {:?}",
        names(dir)
    );
    drop(store);
    let store = DlqStore::open(dir, 1000).unwrap();
    assert_eq!(store.list().unwrap().entries.len(), 20);
}

#[test]
fn the_one_file_per_entry_layout_is_read_listed_and_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dlq");
    let old: Vec<_> = (0..3).map(sample_entry).collect();
    for e in &old {
        write_legacy(&dir, e);
    }
    let store = DlqStore::open(&dir, 10).unwrap();
    assert_eq!(store.len(), 3);
    store.put(&sample_entry(5)).unwrap();
    let listed: Vec<String> = store
        .list()
        .unwrap()
        .entries
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed.len(), 4);
    assert_eq!(store.get(&old[1].id).unwrap(), old[1]);
    store.remove(&old[1].id).unwrap();
    assert!(!dir.join(&old[1].id).exists());
    assert!(
        !dir.join(format!("{}.gone", old[1].id)).exists(),
        "no tombstone needed"
    );
    // A legacy entry dead-lettered again: the batch version wins; removal takes both.
    let mut again = old[0].clone();
    again.attempts = 11;
    store.put(&again).unwrap();
    assert_eq!(store.get(&old[0].id).unwrap().attempts, 11);
    assert_eq!(store.len(), 3);
    store.remove(&old[0].id).unwrap();
    assert!(!dir.join(&old[0].id).exists());
    drop(store);
    let offline = DlqStore::open_existing(&dir).unwrap();
    assert_eq!(offline.len(), 2);
    assert!(matches!(
        offline.get(&old[0].id),
        Err(DlqError::NotFound { .. })
    ));
}

#[test]
fn leftover_tmp_files_are_ignored_and_cleaned_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let store = DlqStore::open(dir, 10).unwrap();
    let e = sample_entry(0);
    store.put(&e).unwrap();
    // A crash mid-commit: half a batch; and a legacy writer's tmp file.
    let torn = dir.join("B-00000000000000ff.dlq.tmp");
    let mut bytes = crate::dispatch::dlq::batch::header(1).to_vec();
    bytes.extend(&encode_entry(&sample_entry(1)).unwrap()[..30]);
    std::fs::write(&torn, &bytes).unwrap();
    let other = dir.join(format!("{}.tmp", sample_entry(5).id));
    std::fs::write(&other, b"junk").unwrap();
    let offline = DlqStore::open_existing(dir).unwrap();
    assert_eq!(offline.len(), 1);
    let listing = offline.list().unwrap();
    assert_eq!((listing.entries.len(), listing.unreadable.len()), (1, 0));
    assert!(torn.exists(), "offline tools never delete");
    let store = DlqStore::open(dir, 10).unwrap();
    assert!(!torn.exists() && !other.exists());
    assert_eq!(
        store.get(&e.id).unwrap(),
        e,
        "the committed entry is intact"
    );
    assert_eq!(store.len(), 1);
}

#[test]
fn corrupt_entries_are_reported_with_their_path_and_discard_clears_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let store = DlqStore::open(dir, 10).unwrap();
    let e = sample_entry(3);
    store.put_batch(vec![
        ((), &sample_entry(2)),
        ((), &e),
        ((), &sample_entry(4)),
    ]);
    let name = batches(dir).remove(0);
    let path = dir.join(&name);
    let pristine = std::fs::read(&path).unwrap();
    let at = crate::dispatch::dlq::batch::scan(&pristine, check_record).records[1].offset as usize;
    let check = |bytes: &[u8], readable: usize| {
        std::fs::write(&path, bytes).unwrap();
        let store = DlqStore::open_existing(dir).unwrap();
        let got = store.get(&e.id);
        if readable == 2 {
            assert!(
                matches!(&got, Err(DlqError::Corrupt { path: p, .. }) if *p == path),
                "{got:?}"
            );
        } else {
            // Past a frame that cannot be followed no id is known: listed as the file's tail.
            assert!(matches!(got, Err(DlqError::NotFound { .. })), "{got:?}");
        }
        let listing = store.list().unwrap();
        assert_eq!(listing.entries.len(), readable, "{listing:?}");
        assert_eq!(listing.unreadable.len(), 1, "{listing:?}");
        assert!(
            listing.unreadable[0].problem.contains("corrupt"),
            "{listing:?}"
        );
        listing
    };
    let mut flipped = pristine.clone();
    flipped[at + 60] ^= 1;
    let l = check(&flipped, 2);
    assert_eq!(l.unreadable[0].id, e.id);
    assert!(l.unreadable[0].problem.contains(&e.id), "{l:?}");
    // Fields damaged behind a valid CRC.
    let mut fields = pristine.clone();
    let len = u32::from_le_bytes(fields[at..at + 4].try_into().unwrap()) as usize;
    fields[at + 17 + 28 + 2] = b'\xff'; // inside `destination`
    crate::dispatch::dlq::batch::reseal_record(&mut fields[at..at + len]);
    assert_eq!(check(&fields, 2).unreadable[0].id, e.id);
    // A frame that cannot be followed: the rest of the file is one unreadable tail.
    let mut frame = pristine.clone();
    frame[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let l = check(&frame, 1);
    assert_eq!(l.unreadable[0].id, format!("{name}@{at}"));
    // Discarding the damaged entry by id clears the listing (a tombstone hides it).
    std::fs::write(&path, &flipped).unwrap();
    let store = DlqStore::open(dir, 10).unwrap();
    store.remove(&e.id).unwrap();
    let listing = store.list().unwrap();
    assert_eq!((listing.entries.len(), listing.unreadable.len()), (2, 0));
    // A damaged legacy file is reported as before.
    write_legacy(dir, &sample_entry(7));
    let lp = dir.join(sample_entry(7).id);
    let mut b = std::fs::read(&lp).unwrap();
    b[40] ^= 1;
    std::fs::write(&lp, b).unwrap();
    let listing = DlqStore::open_existing(dir).unwrap().list().unwrap();
    assert_eq!(listing.unreadable[0].id, sample_entry(7).id);
    assert!(listing.unreadable[0].problem.contains(&sample_entry(7).id));
}

#[test]
fn an_offline_discard_is_seen_by_the_server_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let server = DlqStore::open(dir, 10).unwrap();
    server.put_batch(vec![((), &sample_entry(1)), ((), &sample_entry(2))]);
    DlqStore::open_existing(dir)
        .unwrap()
        .remove(&sample_entry(1).id)
        .unwrap();
    assert!(matches!(
        server.get(&sample_entry(1).id),
        Err(DlqError::NotFound { .. })
    ));
    assert_eq!(server.list().unwrap().entries.len(), 1);
    assert_eq!(server.len(), 1);
}

/// The real file system, counting directory syncs.
#[derive(Debug, Default)]
struct CountingFs(std::sync::atomic::AtomicU64);

impl Storage for CountingFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn storage::StorageFile>> {
        storage::StdFs.open(path, mode)
    }
    fn open_segment(
        &self,
        path: &Path,
        kind: crate::wal::WritePath,
    ) -> io::Result<Box<dyn storage::SegmentFile>> {
        storage::StdFs.open_segment(path, kind)
    }
    fn map(&self, path: &Path) -> io::Result<storage::Contents> {
        storage::StdFs.map(path)
    }
    fn len(&self, path: &Path) -> io::Result<u64> {
        storage::StdFs.len(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        storage::StdFs.list(dir)
    }
    fn is_dir(&self, path: &Path) -> bool {
        storage::StdFs.is_dir(path)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        storage::StdFs.create_dir_all(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        storage::StdFs.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        storage::StdFs.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.0.fetch_add(1, Ordering::Relaxed);
        storage::StdFs.sync_dir(dir)
    }
    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn storage::LockGuard>>> {
        storage::StdFs.try_lock(path)
    }
}

#[test]
fn a_group_removal_syncs_the_directory_once_and_reports_each_id() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = Arc::new(CountingFs::default());
    let store = DlqStore::open_in(fs.clone(), tmp.path(), 1000).unwrap();
    let entries: Vec<_> = (0..200).map(sample_entry).collect();
    // Two batch files: the group below empties the first (deleted) and leaves the second
    // more than half live.
    store.put_batch(entries[..100].iter().map(|e| ((), e)).collect());
    store.put_batch(entries[100..].iter().map(|e| ((), e)).collect());
    let before = fs.0.load(Ordering::Relaxed);
    let mut ids: Vec<(usize, &str)> = entries[..120]
        .iter()
        .map(|e| e.id.as_str())
        .enumerate()
        .collect();
    ids.push((120, entries[0].id.as_str())); // twice in one group: gone by then
    ids.push((121, "not-an-id"));
    let out = store.remove_batch(ids);
    let syncs = fs.0.load(Ordering::Relaxed) - before;
    let groups = 120usize.div_ceil(super::remove::REMOVE_GROUP) as u64;
    assert_eq!(
        syncs,
        groups + 2,
        "one per group of tombstones, then the emptied batch file's deletion and its \
         tombstones' (module docs): per group, not per entry"
    );
    assert!(out[..120].iter().all(|(_, r)| r.is_ok()), "{out:?}");
    assert!(matches!(out[120], (120, Err(DlqError::NotFound { .. }))));
    assert!(matches!(out[121], (121, Err(DlqError::InvalidId { .. }))));
    assert_eq!(store.len(), 80);
    assert!(matches!(
        store.get(&entries[5].id),
        Err(DlqError::NotFound { .. })
    ));
    assert!(store.get(&entries[150].id).is_ok());
    drop(store);
    let store = DlqStore::open(tmp.path(), 1000).unwrap();
    assert_eq!(store.len(), 80, "the group removal is durable");
}
