//! The DLQ store's reading side: the directory scan that builds the index, listings, and
//! picking up what other processes changed (a child module of [`super`], so it shares the
//! store's private state).
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::io;
use std::path::Path;

use super::{DlqListing, DlqStore, Unreadable, Vanished};
use crate::dispatch::dlq::{
    check_record, io_err, parse_entry, summary_of, DlqError, DlqSummary, MAX_DLQ_RECORD_BYTES,
};
use crate::dispatch::dlq_batch::{self as batch, Name};
use crate::dispatch::dlq_index::{Index, Loc};
use crate::storage::Storage;
use crate::wal::format::RECORD_HEADER_BYTES;

impl DlqStore {
    /// After a batch file vanished under a reader: the server's index already knows where its
    /// entries went (it moved them); an offline tool's index is rebuilt from the directory
    /// (the server compacted or deleted the file meanwhile).
    pub(super) fn reload(&self) {
        if self.owner {
            return;
        }
        match read_names(&*self.storage, &self.dir) {
            Ok(names) => *self.index.lock() = scan_dir(&*self.storage, &self.dir, &names),
            Err(e) => eprintln!("sluice: DLQ: cannot re-read {}: {e}", self.dir.display()),
        }
    }

    /// Applies what other processes changed (tombstones written, legacy files deleted).
    pub(super) fn refresh(&self, ix: &mut Index) -> Result<(), DlqError> {
        let names = read_names(&*self.storage, &self.dir)?;
        let mut legacy = HashSet::new();
        for name in names {
            match batch::classify(&name) {
                Name::Gone(id) if !ix.has_tombstone(&id) => ix.add_gone(id),
                Name::Legacy(id) => {
                    legacy.insert(id);
                }
                _ => {}
            }
        }
        for id in ix.legacy_ids() {
            if !legacy.contains(&id) {
                ix.legacy_vanished(&id);
            }
        }
        self.publish(ix);
        Ok(())
    }

    /// Every entry, sorted by `dead_lettered_at_ms` (then id), and every entry that cannot be
    /// read (damaged: bad length, CRC or fields; stored under another id's name; or an I/O
    /// error reading it), sorted by id, plus damage in a batch file that names no entry. One
    /// damaged entry never hides the others. `Err` only when the directory cannot be read.
    /// Holds one entry in memory at a time; the listing holds one summary (or one
    /// [`Unreadable`]) per entry, at most `max_entries` of them.
    pub fn list(&self) -> Result<DlqListing, DlqError> {
        let mut listing = DlqListing::default();
        if !exists(&*self.storage, &self.dir) {
            return Ok(listing);
        }
        let (snapshot, tails) = {
            let mut ix = self.index.lock();
            if self.owner {
                self.refresh(&mut ix)?;
            }
            (ix.snapshot(), ix.tails())
        };
        for (id, mut loc) in snapshot {
            let bytes = match self.read(&id, &loc) {
                Ok(b) => b,
                // Compacted meanwhile: read where it is now (or skip it if removed).
                Err(Vanished) => {
                    self.reload();
                    let Some(now) = self.index.lock().get(&id).cloned() else {
                        continue;
                    };
                    loc = now;
                    match self.read(&id, &loc) {
                        Ok(b) => b,
                        Err(Vanished) => continue,
                    }
                }
            };
            match bytes.and_then(|b| self.summary(&id, &loc, &b)) {
                Ok(s) => listing.entries.push(s),
                Err(DlqError::NotFound { .. }) => {} // removed while listing
                Err(e) => listing.unreadable.push(Unreadable {
                    id,
                    problem: e.to_string(),
                }),
            }
        }
        for (seq, offset, why) in tails {
            let name = batch::batch_name(seq);
            listing.unreadable.push(Unreadable {
                id: format!("{name}@{offset}"),
                problem: format!(
                    "DLQ batch {} is corrupt from offset {offset}: {why}",
                    self.dir.join(&name).display()
                ),
            });
        }
        listing
            .entries
            .sort_by(|a, b| (a.dead_lettered_at_ms, &a.id).cmp(&(b.dead_lettered_at_ms, &b.id)));
        listing.unreadable.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(listing)
    }

    fn summary(&self, id: &str, loc: &Loc, bytes: &[u8]) -> Result<DlqSummary, DlqError> {
        let v = parse_entry(bytes).map_err(|reason| self.corrupt(id, loc, reason))?;
        let s = summary_of(&v);
        if s.id != id {
            let reason = format!("holds entry {} under another name", s.id);
            return Err(self.corrupt(id, loc, reason));
        }
        Ok(s)
    }
}

/// Indexes every file in `dir` (`names`). Never fails: a batch file that cannot be read is a
/// damaged tail at offset 0 (listed as unreadable), never skipped.
pub(super) fn scan_dir(fs: &dyn Storage, dir: &Path, names: &[String]) -> Index {
    let mut ix = Index::default();
    for name in names {
        match batch::classify(name) {
            Name::Batch(seq) => {
                let path = dir.join(name);
                let (bytes, scanned) = match read_batch(fs, &path) {
                    Ok(bytes) => (bytes.len() as u64, batch::scan(&bytes, check_record)),
                    Err((len, why)) => (
                        len,
                        batch::Scanned {
                            records: Vec::new(),
                            tail: Some((0, why)),
                        },
                    ),
                };
                ix.add_batch(seq, bytes, scanned.records, scanned.tail);
            }
            Name::Legacy(id) => {
                let len = fs.len(&dir.join(name)).unwrap_or(0);
                ix.add_legacy(id, len);
            }
            Name::Gone(id) => ix.add_gone(id),
            Name::Tmp | Name::Other => {}
        }
    }
    ix
}

/// A batch file's bytes, or its size and why it cannot be read.
fn read_batch(fs: &dyn Storage, path: &Path) -> Result<Vec<u8>, (u64, String)> {
    let len = fs.len(path).map_err(|e| (0, e.to_string()))?;
    if len > batch::MAX_FILE_BYTES as u64 {
        return Err((len, format!("file of {len} bytes is larger than any batch")));
    }
    fs.read(path).map_err(|e| (len, e.to_string()))
}

/// The names in `dir` (names that are not UTF-8 are no file of ours and are left out).
pub(super) fn read_names(fs: &dyn Storage, dir: &Path) -> Result<Vec<String>, DlqError> {
    fs.list(dir).map_err(io_err(dir))
}

/// True if `path` names a file or directory (`Path::exists`: an error reads as absent).
pub(super) fn exists(fs: &dyn Storage, path: &Path) -> bool {
    fs.is_dir(path) || fs.len(path).is_ok()
}

/// A legacy entry file's bytes (length checked before reading).
pub(super) fn read_legacy(fs: &dyn Storage, path: &Path, id: &str) -> Result<Vec<u8>, DlqError> {
    let not_found = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => DlqError::NotFound { id: id.to_owned() },
        _ => io_err(path)(e),
    };
    let len = fs.len(path).map_err(not_found)?;
    if len > MAX_DLQ_RECORD_BYTES as u64 || len < RECORD_HEADER_BYTES as u64 {
        return Err(DlqError::Corrupt {
            path: path.to_owned(),
            reason: format!("file length {len} outside a valid entry's"),
        });
    }
    fs.read(path).map_err(not_found)
}
