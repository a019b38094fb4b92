//! Removals: one entry ([`DlqStore::remove`]: an operator's discard) or a group
//! ([`DlqStore::remove_batch`]: the dead letters whose replays one commit made durable, removed
//! by the commit helper with one directory `fsync` for the group, `wal::group::Item::Release`).
//! Both hold the index lock across their tombstones' sync and the deletion or compaction of
//! the batch files they emptied (module docs of `store`).

use std::io;

use super::DlqStore;
use crate::dispatch::dlq::batch;
use crate::dispatch::dlq::entry::{io_err, valid_id, DlqError};
use crate::dispatch::dlq::index::{Index, Removed};
use crate::storage::OpenMode;

/// Removals of one [`DlqStore::remove_batch`] group: its tombstones share one directory
/// `fsync`, and its reclaiming (deleting or compacting the batch files it emptied) holds the
/// index lock. Measured on this machine's disk, a tombstone costs ~0.9 ms to create and
/// ~0.3 ms to delete: 1,024 in one group held the lock for 1.1–1.3 s
/// (`cargo test --test it replay_bulk`).
pub const REMOVE_GROUP: usize = 64;

impl DlqStore {
    /// Deletes the entry `id` durably (every version); [`DlqError::NotFound`] if absent. The
    /// server's store then deletes or compacts the batch file that held it if it is now empty
    /// or less than half live.
    pub fn remove(&self, id: &str) -> Result<(), DlqError> {
        if !valid_id(id) {
            return Err(DlqError::InvalidId { id: id.to_owned() });
        }
        let mut ix = self.index.lock();
        let Some(r) = ix.remove(id) else {
            return Err(DlqError::NotFound { id: id.to_owned() });
        };
        let done = self
            .unlink(id, &r)
            .and_then(|()| self.storage.sync_dir(&self.dir).map_err(io_err(&self.dir)));
        if let Err(e) = done {
            ix.undo_remove(id, r);
            return Err(e);
        }
        self.reclaim_files(&mut ix, &[r.loc.seq]);
        self.publish(&ix);
        self.note_removed([id]);
        Ok(())
    }

    /// Deletes the entries `ids` durably (every version), each with its key `K`, in groups of
    /// at most [`REMOVE_GROUP`]: per group, its tombstones, then one directory `fsync`, then the
    /// batch files it emptied deleted or compacted, as [`DlqStore::remove`] does. The index lock
    /// is not held while the tombstones are written and synced (the dominant cost), and is
    /// taken again per group for the reclaiming, so a reader (a list or a lookup on a core's
    /// loop) waits for one group's reclaiming at most. The ids are replayed dead letters, which
    /// no put names again: unlike [`DlqStore::remove`], a put of the same id is not kept out
    /// while the tombstones are written. An id absent is [`DlqError::NotFound`] (discarded
    /// meanwhile); if a group's writes or sync fail, its entries stay and each gets the error.
    pub fn remove_batch<K>(&self, ids: Vec<(K, &str)>) -> Vec<(K, Result<(), DlqError>)> {
        let mut out = Vec::with_capacity(ids.len());
        let mut ids = ids.into_iter().peekable();
        while ids.peek().is_some() {
            out.extend(self.remove_group(ids.by_ref().take(REMOVE_GROUP).collect()));
        }
        out
    }

    /// One group of [`DlqStore::remove_batch`]: the index under its lock, the tombstones and
    /// their sync without it, then the reclaiming under it again.
    fn remove_group<K>(&self, ids: Vec<(K, &str)>) -> Vec<(K, Result<(), DlqError>)> {
        let mut ix = self.index.lock();
        let mut out: Vec<(K, Result<(), DlqError>)> = Vec::with_capacity(ids.len());
        let mut taken: Vec<(usize, String, Removed)> = Vec::new();
        for (k, id) in ids {
            let r = match (valid_id(id), valid_id(id).then(|| ix.remove(id)).flatten()) {
                (false, _) => Err(DlqError::InvalidId { id: id.to_owned() }),
                (true, None) => Err(DlqError::NotFound { id: id.to_owned() }),
                (true, Some(r)) => {
                    taken.push((out.len(), id.to_owned(), r));
                    Ok(())
                }
            };
            out.push((k, r));
        }
        if taken.is_empty() {
            return out;
        }
        // The files without the lock: readers see the group gone from the index now (a crash
        // before the sync brings it back: its removal has not returned).
        drop(ix);
        let done = (taken.iter())
            .try_for_each(|(_, id, r)| self.unlink(id, r))
            .and_then(|()| self.storage.sync_dir(&self.dir).map_err(io_err(&self.dir)));
        let mut ix = self.index.lock();
        if let Err(e) = done {
            let (path, kind, text) = match &e {
                DlqError::Io { path, source } => (path.clone(), source.kind(), source.to_string()),
                other => (self.dir.clone(), io::ErrorKind::Other, other.to_string()),
            };
            for (i, id, r) in taken.into_iter().rev() {
                ix.undo_remove(&id, r);
                let source = io::Error::new(kind, text.clone());
                out[i].1 = Err(DlqError::Io {
                    path: path.clone(),
                    source,
                });
            }
            return out;
        }
        let seqs: Vec<u64> = taken.iter().map(|(_, _, r)| r.loc.seq).collect();
        self.reclaim_files(&mut ix, &seqs);
        self.publish(&ix);
        self.note_removed(taken.iter().map(|(_, id, _)| id.as_str()));
        out
    }

    /// Entry `id`'s tombstone (some batch file holds a version of it) and its legacy file's
    /// deletion; not synced.
    fn unlink(&self, id: &str, r: &Removed) -> Result<(), DlqError> {
        if r.tombstone {
            let path = self.dir.join(batch::gone_name(id));
            (self.storage.open(&path, OpenMode::REPLACE)).map_err(io_err(&path))?;
        }
        if r.legacy.is_some() {
            let path = self.dir.join(id);
            match self.storage.remove(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(&path)(e)),
                _ => {}
            }
        }
        Ok(())
    }

    /// The server's store deletes or compacts the batch files `seqs` (each once) that removals
    /// emptied or left less than half live; a failure is logged (the entries are gone already).
    fn reclaim_files(&self, ix: &mut parking_lot::MutexGuard<'_, Index>, seqs: &[u64]) {
        if !self.owner {
            return;
        }
        let mut seqs: Vec<u64> = seqs.iter().copied().filter(|&s| s != 0).collect();
        seqs.sort_unstable();
        seqs.dedup();
        for seq in seqs {
            if let Err(e) = self.collect(ix, seq) {
                eprintln!(
                    "sluice: DLQ: reclaiming batch {}: {e}",
                    batch::batch_name(seq)
                );
            }
        }
    }
}
