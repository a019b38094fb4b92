//! The DLQ store: group-committed batch files ([`crate::dispatch::dlq::batch`]), tombstones, legacy entry
//! files, and the index over them ([`crate::dispatch::dlq::index`]).
//!
//! # Why batch files
//!
//! One immutable file per commit (write, `fdatasync`, rename, directory `fsync`) rather than a
//! per-core append-only log: a file is never seen half written (the rename publishes it whole),
//! so the offline tools (`sluice dlq list/show/discard`) can read and tombstone while the server
//! runs without any coordination, exactly as with the one-file-per-entry layout; removal is
//! one empty tombstone file (one directory `fsync`, the cost of the old unlink); compaction is
//! "write the live entries to a new file, delete the old one", with no log head to move and no
//! tombstone ordering to keep (a tombstone removes every version of its id). It costs a second
//! sync per commit against an append log's one; a commit carries a whole batch, so that is two
//! syncs per batch, not per entry (BENCHMARKS.md rows D1 and D2).
//!
//! # Durability
//!
//! [`DlqStore::put_batch`] returns once every file it wrote is renamed and the directory synced:
//! the entries are durable before the caller writes their events' `Done` records. A removal is
//! durable when it returns (tombstone created or legacy file deleted, directory synced).
//! Deleting a batch file: the file, a directory `fsync`, then its tombstones that no other file
//! needs, another `fsync` — a crash between leaves tombstones that the next open deletes, never
//! an entry without its tombstone.
//!
//! # Who changes what
//!
//! The server's store ([`DlqStore::open`]) writes batches, tombstones, and deletes and compacts
//! batch files; several commit helpers share it (one lock over the index: a put holds it for
//! bookkeeping only, never across its write or syncs; a removal — cold: an operator's discard
//! or a replay — holds it across its tombstone's directory `fsync` and any deletion or
//! compaction it triggers, so that a put of the same id cannot interleave with it). The offline tools' store
//! ([`DlqStore::open_existing`]) only creates tombstones and deletes legacy entry files; the
//! server notices those before it lists, before it refuses a put as full, and (a `stat`) before
//! it reads an entry; their space is reclaimed when the server removes the files' other entries
//! or at its next start.
//!
//! # Bounds
//!
//! Live entries ≤ `max_entries` (`dispatch.max_dlq_entries`). Bytes: a batch file with no live
//! entry is deleted, and one less than half live (by bytes, at least [`COMPACT_MIN_BYTES`]) is
//! rewritten, so the files hold at most about twice the live entries' bytes, each entry at most
//! [`crate::dispatch::dlq::entry::MAX_DLQ_RECORD_BYTES`]. Published as `sluice_dlq_entries` and `sluice_dlq_bytes`.
//!
//! # Storage
//!
//! Every file operation (create, write, `fdatasync`, rename, directory `fsync`, list, read,
//! remove) goes through [`crate::storage::Storage`]: [`DlqStore::open`] and
//! [`DlqStore::open_existing`] use the real file system, [`DlqStore::open_in`] and
//! [`DlqStore::open_existing_in`] any storage (the power-loss test, `tests/it/powerloss_dlq.rs`,
//! runs this store over `storage::sim::SimFs` and cuts the power at seeded points).
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::dispatch::dlq::batch::{self as batch, Found, Name};
use crate::dispatch::dlq::claims::ReplayClaims;
use crate::dispatch::dlq::entry::{
    decode_entry, encode_entry_into, io_err, valid_id, DlqEntry, DlqError, DlqSummary,
};
use crate::dispatch::dlq::index::{Index, Loc};
use crate::storage::{self, OpenMode, Storage};

/// Batch files smaller than this are not compacted (their dead bytes are bounded anyway).
pub const COMPACT_MIN_BYTES: u64 = 64 * 1024;

/// The DLQ's gauges and counters, read by `/metrics`. Written under the store's lock; every
/// access is `Relaxed`: each is a standalone number, published for display only.
#[derive(Debug, Default)]
pub struct DlqGauges {
    /// Live entries.
    pub entries: AtomicU64,
    /// Bytes of the batch and legacy files.
    pub bytes: AtomicU64,
    /// Batch files written (commits, plus compactions).
    pub files_written: AtomicU64,
    /// Entries written.
    pub entries_written: AtomicU64,
    /// Entries claimed by a replay and not yet removed or given back ([`ReplayClaims`]).
    pub replays_in_flight: Arc<AtomicU64>,
}

/// The dead-letter queue (see the module header).
#[derive(Debug)]
pub struct DlqStore {
    /// Where the files live (the real file system, or the power-loss simulation).
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    max_entries: usize,
    /// The server's store: may delete and compact batch files.
    owner: bool,
    /// The next batch file's sequence number.
    next_seq: AtomicU64,
    index: Mutex<Index>,
    gauges: Arc<DlqGauges>,
    /// The entries on their way back to the WAL, shared by every core's replays.
    replays: ReplayClaims,
    /// The ids that left, for the keys waiting for one to leave ([`removals`]).
    removals: Mutex<removals::Removals>,
}

/// What [`DlqStore::list`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DlqListing {
    /// Readable entries, oldest dead-lettered first.
    pub entries: Vec<DlqSummary>,
    /// Entries (or parts of batch files) that could not be read, by id.
    pub unreadable: Vec<Unreadable>,
}

/// An entry [`DlqStore::list`] could not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The entry id; for damage in a batch file that names no entry, `B-<seq>.dlq@<offset>`.
    pub id: String,
    /// What is wrong, naming the file (the [`DlqError`] text: corrupt and why, or the I/O error).
    pub problem: String,
}

/// One encoded entry of a put.
struct Staged<K> {
    key: K,
    id: String,
    start: usize,
    len: usize,
}

impl DlqStore {
    /// Opens (creating if absent) the DLQ directory `dir` for the server: deletes leftover
    /// `*.tmp` files of interrupted writes, indexes every file, and deletes what the index
    /// shows is no longer needed (empty batches, their tombstones, tombstoned legacy files).
    pub fn open(dir: &Path, max_entries: usize) -> Result<DlqStore, DlqError> {
        Self::open_in(storage::std_fs(), dir, max_entries)
    }

    /// [`DlqStore::open`] on `storage`.
    pub fn open_in(
        storage: Arc<dyn Storage>,
        dir: &Path,
        max_entries: usize,
    ) -> Result<DlqStore, DlqError> {
        let fs = &*storage;
        // `dlq/` and any missing parent (the data dir itself on a first start): every created
        // entry is synced before an entry is promised in it.
        storage::create_dir_all_durably(fs, dir).map_err(io_err(dir))?;
        let names = read_names(fs, dir)?;
        let mut removed = false;
        for name in names.iter().filter(|n| batch::classify(n) == Name::Tmp) {
            let path = dir.join(name);
            fs.remove(&path).map_err(io_err(&path))?;
            removed = true;
        }
        if removed {
            fs.sync_dir(dir).map_err(io_err(dir))?;
        }
        let ix = scan_dir(fs, dir, &names);
        let store = Self::with_index(storage, dir, max_entries, true, ix)?;
        if let Err(e) = store.reclaim() {
            // Space only: the index is consistent with the files either way.
            eprintln!("sluice: DLQ: reclaiming space at start: {e}");
        }
        Ok(store)
    }

    /// Deletes what the index shows no longer needed: tombstoned legacy files (a removal cut
    /// between its two steps), batch files with no live entry, tombstones no file needs.
    fn reclaim(&self) -> Result<(), DlqError> {
        let mut ix = self.index.lock();
        for id in ix.tombstoned_legacy() {
            let path = self.dir.join(&id);
            self.storage.remove(&path).map_err(io_err(&path))?;
            ix.legacy_vanished(&id);
        }
        let empty = ix.empty_batches();
        self.delete_batches(&mut ix, &empty)?;
        let orphans = ix.orphan_tombstones();
        self.delete_tombstones(&orphans)?;
        self.publish(&ix);
        Ok(())
    }

    /// Opens an existing DLQ directory for the offline tools: creates and deletes nothing but
    /// tombstones and legacy entry files on [`DlqStore::remove`] (a running server may be
    /// writing a batch). A missing directory is empty.
    pub fn open_existing(dir: &Path) -> Result<DlqStore, DlqError> {
        Self::open_existing_in(storage::std_fs(), dir)
    }

    /// [`DlqStore::open_existing`] on `storage`.
    pub fn open_existing_in(storage: Arc<dyn Storage>, dir: &Path) -> Result<DlqStore, DlqError> {
        if !exists(&*storage, dir) {
            return Self::with_index(storage, dir, usize::MAX, false, Index::default());
        }
        let ix = scan_listed(&*storage, dir)?;
        Self::with_index(storage, dir, usize::MAX, false, ix)
    }

    fn with_index(
        storage: Arc<dyn Storage>,
        dir: &Path,
        max: usize,
        owner: bool,
        ix: Index,
    ) -> Result<DlqStore, DlqError> {
        let gauges = Arc::new(DlqGauges::default());
        let store = DlqStore {
            storage,
            dir: dir.to_owned(),
            max_entries: max,
            owner,
            next_seq: AtomicU64::new(ix.max_seq() + 1),
            index: Mutex::new(ix),
            replays: ReplayClaims::new(max, gauges.replays_in_flight.clone()),
            removals: Mutex::default(),
            gauges,
        };
        store.publish(&store.index.lock());
        Ok(store)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The gauges `/metrics` renders.
    pub fn gauges(&self) -> Arc<DlqGauges> {
        self.gauges.clone()
    }

    /// The entries replays are handing to the WAL (claim one before reading it; see
    /// [`ReplayClaims`]).
    pub fn replays(&self) -> &ReplayClaims {
        &self.replays
    }

    /// Live entries.
    pub fn len(&self) -> usize {
        self.index.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the DLQ's files.
    pub fn bytes(&self) -> u64 {
        self.index.lock().bytes()
    }

    fn publish(&self, ix: &Index) {
        self.gauges
            .entries
            .store(ix.len() as u64, Ordering::Relaxed);
        self.gauges.bytes.store(ix.bytes(), Ordering::Relaxed);
    }

    /// Stores one entry durably; see [`DlqStore::put_batch`].
    pub fn put(&self, entry: &DlqEntry) -> Result<(), DlqError> {
        let mut r = self.put_batch(vec![((), entry)]);
        r.pop().map_or(Ok(()), |(_, r)| r)
    }

    /// Stores `entries` durably as one commit: one batch file per [`batch::MAX_BATCH_FILE_BYTES`]
    /// (one write and one `fdatasync` each) and one directory `fsync`. Each entry gets its own
    /// result, keyed by the caller's `K`: `Ok` once durable (an id already stored gets a newer
    /// version, not a second entry); [`DlqError::Full`] for new ids past `max_entries`;
    /// `InvalidId`/`Encode` for entries that cannot be stored; `Io` if the write failed.
    pub fn put_batch<K>(&self, entries: Vec<(K, &DlqEntry)>) -> Vec<(K, Result<(), DlqError>)> {
        let mut out = Vec::with_capacity(entries.len());
        let mut buf = Vec::new();
        let mut staged = Vec::with_capacity(entries.len());
        for (key, e) in entries {
            let start = buf.len();
            match encode_entry_into(e, &mut buf) {
                Ok(()) => staged.push(Staged {
                    key,
                    id: e.id.clone(),
                    start,
                    len: buf.len() - start,
                }),
                Err(err) => out.push((key, Err(err))),
            }
        }
        let (staged, reserved) = self.admit(staged, &mut out);
        if staged.is_empty() {
            return out;
        }
        let (files, failure) = self.write_files(&buf, &staged);
        let mut ix = self.index.lock();
        ix.pending -= reserved;
        let mut superseded = Vec::new();
        for (seq, bytes, found) in files {
            superseded.extend(ix.put_done(seq, bytes, found));
            self.gauges.files_written.fetch_add(1, Ordering::Relaxed);
        }
        // Rare (an event dead-lettered again after a crash): the older file may now be empty.
        for seq in superseded.into_iter().filter(|_| self.owner) {
            if let Err(e) = self.collect(&mut ix, seq) {
                eprintln!(
                    "sluice: DLQ: reclaiming batch {}: {e}",
                    batch::batch_name(seq)
                );
            }
        }
        self.publish(&ix);
        drop(ix);
        // A failure fails the whole commit (files already renamed stay, indexed: the caller
        // retries, and the retry's newer version supersedes them).
        for s in staged {
            let r = match &failure {
                Some((path, e)) => Err(DlqError::Io {
                    path: path.clone(),
                    source: io::Error::new(e.kind(), e.to_string()),
                }),
                None => {
                    self.gauges.entries_written.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
            };
            out.push((s.key, r));
        }
        out
    }

    /// Decides which staged entries fit: new ids while live + pending < `max_entries` (looking
    /// at the directory once for removals by other processes before refusing). Reserves them.
    fn admit<K>(
        &self,
        staged: Vec<Staged<K>>,
        out: &mut Vec<(K, Result<(), DlqError>)>,
    ) -> (Vec<Staged<K>>, usize) {
        let mut ix = self.index.lock();
        let mut seen = HashSet::new();
        let mut reserved = 0;
        let mut refreshed = false;
        let mut taken = Vec::with_capacity(staged.len());
        for s in staged {
            // An id twice in one commit is one new entry (if its first copy was admitted).
            let new = !ix.contains(&s.id) && !seen.contains(&s.id);
            if new {
                if ix.len() + ix.pending + reserved >= self.max_entries && !refreshed {
                    refreshed = true;
                    if let Err(e) = self.refresh(&mut ix) {
                        eprintln!("sluice: DLQ: cannot re-read {}: {e}", self.dir.display());
                    }
                }
                if ix.len() + ix.pending + reserved >= self.max_entries {
                    let max_entries = self.max_entries;
                    out.push((s.key, Err(DlqError::Full { max_entries })));
                    continue;
                }
                reserved += 1;
                seen.insert(s.id.clone());
            }
            taken.push(s);
        }
        ix.pending += reserved;
        (taken, reserved)
    }

    /// Writes the staged entries as batch files, then deletes their ids' tombstones and syncs
    /// the directory. Returns the files written (`seq`, size, records) and the failure, if any.
    #[allow(clippy::type_complexity)]
    fn write_files<K>(
        &self,
        buf: &[u8],
        staged: &[Staged<K>],
    ) -> (Vec<(u64, u64, Vec<Found>)>, Option<(PathBuf, io::Error)>) {
        let mut files = Vec::new();
        let mut file = Vec::new();
        let mut i = 0;
        while i < staged.len() {
            let mut end = i;
            let mut bytes = 0;
            while end < staged.len()
                && (end == i || bytes + staged[end].len <= batch::MAX_BATCH_FILE_BYTES)
            {
                bytes += staged[end].len;
                end += 1;
            }
            let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
            let chunk = &staged[i..end];
            file.clear();
            file.extend_from_slice(&batch::header(chunk.len() as u32));
            let mut found = Vec::with_capacity(chunk.len());
            for s in chunk {
                found.push(Found {
                    id: s.id.clone(),
                    offset: file.len() as u64,
                    len: s.len as u32,
                    damage: None,
                });
                file.extend_from_slice(&buf[s.start..s.start + s.len]);
            }
            if let Err((path, err)) = self.write_batch_file(seq, &file) {
                return (files, Some((path, err)));
            }
            files.push((seq, file.len() as u64, found));
            i = end;
        }
        // A put makes its id live again: its tombstone goes (before the outcome is reported).
        for s in staged {
            let path = self.dir.join(batch::gone_name(&s.id));
            match self.storage.remove(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return (files, Some((path, e)));
                }
                _ => {}
            }
        }
        if let Err(e) = self.storage.sync_dir(&self.dir) {
            return (files, Some((self.dir.clone(), e)));
        }
        (files, None)
    }

    /// `B-<seq>.dlq.tmp`: write, `fdatasync`, rename to `B-<seq>.dlq`.
    fn write_batch_file(&self, seq: u64, bytes: &[u8]) -> Result<(), (PathBuf, io::Error)> {
        let name = batch::batch_name(seq);
        let tmp = self.dir.join(format!("{name}{}", batch::TMP_SUFFIX));
        let path = self.dir.join(name);
        let written = (|| {
            let mut f = self.storage.open(&tmp, OpenMode::NEW)?;
            f.write_at(0, bytes)?;
            f.sync_data()
        })();
        if let Err(e) = written {
            let _ = self.storage.remove(&tmp);
            return Err((tmp, e));
        }
        self.storage.rename(&tmp, &path).map_err(|e| (path, e))
    }

    /// The entry `id`; [`DlqError::NotFound`] if absent, [`DlqError::Corrupt`] if damaged.
    pub fn get(&self, id: &str) -> Result<DlqEntry, DlqError> {
        if !valid_id(id) {
            return Err(DlqError::InvalidId { id: id.to_owned() });
        }
        for attempt in 0..2 {
            let Some(loc) = self.index.lock().get(id).cloned() else {
                break;
            };
            let gone = self.dir.join(batch::gone_name(id));
            if self.owner && loc.seq != 0 && exists(&*self.storage, &gone) {
                break; // discarded by an offline tool
            }
            match self.read(id, &loc) {
                Err(Vanished) if attempt == 0 => self.reload(), // compacted meanwhile
                Err(Vanished) => break,
                Ok(bytes) => return self.decode(id, &loc, bytes),
            }
        }
        Err(DlqError::NotFound { id: id.to_owned() })
    }

    fn decode(
        &self,
        id: &str,
        loc: &Loc,
        bytes: Result<Vec<u8>, DlqError>,
    ) -> Result<DlqEntry, DlqError> {
        match decode_entry(&bytes?) {
            Ok(e) if e.id == id => Ok(e),
            Ok(e) => Err(self.corrupt(id, loc, format!("holds entry {} under another name", e.id))),
            Err(reason) => Err(self.corrupt(id, loc, reason)),
        }
    }

    fn corrupt(&self, id: &str, loc: &Loc, reason: String) -> DlqError {
        if loc.seq == 0 {
            return DlqError::Corrupt {
                path: self.dir.join(id),
                reason,
            };
        }
        DlqError::Corrupt {
            path: self.dir.join(batch::batch_name(loc.seq)),
            reason: format!("entry {id} at offset {}: {reason}", loc.offset),
        }
    }

    /// The bytes of `id`'s record at `loc`: `Err(Vanished)` if its batch file is gone (compacted
    /// or deleted meanwhile), else the bytes or the error reading them.
    fn read(&self, id: &str, loc: &Loc) -> Result<Result<Vec<u8>, DlqError>, Vanished> {
        if let Some(why) = &loc.damage {
            return Ok(Err(self.corrupt(id, loc, why.clone())));
        }
        if loc.seq == 0 {
            return Ok(read_legacy(&*self.storage, &self.dir.join(id), id));
        }
        let path = self.dir.join(batch::batch_name(loc.seq));
        match self
            .storage
            .read_exact_at(&path, loc.offset, loc.len as usize)
        {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Vanished),
            r => Ok(r.map_err(io_err(&path))),
        }
    }

    /// Deletes batch `seq` if no entry in it is live, or rewrites it if less than half is.
    pub(super) fn collect(&self, ix: &mut MutexGuard<'_, Index>, seq: u64) -> Result<(), DlqError> {
        if ix.empty_batches().contains(&seq) {
            return self.delete_batches(ix, &[seq]);
        }
        if !ix.wants_compaction(seq, COMPACT_MIN_BYTES) {
            return Ok(());
        }
        let live = ix.live_in(seq);
        let path = self.dir.join(batch::batch_name(seq));
        let old = self.storage.read(&path).map_err(io_err(&path))?;
        let mut file = batch::header(live.len() as u32).to_vec();
        let mut found = Vec::with_capacity(live.len());
        for (id, loc) in live {
            let range = loc.offset as usize..(loc.offset + u64::from(loc.len)) as usize;
            let Some(rec) = old.get(range) else {
                return Err(self.corrupt(&id, &loc, "beyond the end of its file".to_owned()));
            };
            found.push(Found {
                id,
                offset: file.len() as u64,
                len: loc.len,
                damage: loc.damage,
            });
            file.extend_from_slice(rec);
        }
        let new = self.next_seq.fetch_add(1, Ordering::Relaxed);
        self.write_batch_file(new, &file)
            .map_err(|(path, source)| DlqError::Io { path, source })?;
        self.storage
            .sync_dir(&self.dir)
            .map_err(io_err(&self.dir))?;
        self.gauges.files_written.fetch_add(1, Ordering::Relaxed);
        ix.add_batch(new, file.len() as u64, found, None);
        self.delete_batches(ix, &[seq])
    }

    /// Deletes batch files (then a directory `fsync`), then the tombstones no file needs.
    fn delete_batches(&self, ix: &mut Index, seqs: &[u64]) -> Result<(), DlqError> {
        if seqs.is_empty() {
            return Ok(());
        }
        for &seq in seqs {
            let path = self.dir.join(batch::batch_name(seq));
            self.storage.remove(&path).map_err(io_err(&path))?;
        }
        self.storage
            .sync_dir(&self.dir)
            .map_err(io_err(&self.dir))?;
        let mut free = Vec::new();
        for &seq in seqs {
            free.extend(ix.drop_batch(seq));
        }
        self.delete_tombstones(&free)
    }

    fn delete_tombstones(&self, ids: &[String]) -> Result<(), DlqError> {
        if ids.is_empty() {
            return Ok(());
        }
        for id in ids {
            let path = self.dir.join(batch::gone_name(id));
            match self.storage.remove(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(&path)(e)),
                _ => {}
            }
        }
        self.storage.sync_dir(&self.dir).map_err(io_err(&self.dir))
    }
}

/// A batch file that was there when the index was read is gone (compacted or deleted).
struct Vanished;

mod read;
pub mod removals;
pub mod remove;
mod scan;
use scan::{exists, read_legacy, read_names, scan_dir, scan_listed};

#[cfg(test)]
mod tests;
