//! The DLQ store's reading side: listings, and picking up what other processes changed (a
//! child module of [`super`], so it shares the store's private state; the directory scan that
//! builds the index is `scan.rs`).
#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};

use super::removals::Removed;
use super::scan::{exists, read_names, scan_listed};
use super::{DlqListing, DlqStore, Unreadable};
use crate::dispatch::dlq::batch::{self as batch, Name};
use crate::dispatch::dlq::entry::{parse_entry, summary_of, DlqError, DlqSummary};
use crate::dispatch::dlq::index::{Index, Loc};

impl DlqStore {
    /// Records that the entries `ids` left the DLQ ([`super::removals`]).
    pub(super) fn note_removed<'a>(&self, ids: impl IntoIterator<Item = &'a str>) {
        let mut r = self.removals.lock();
        for id in ids {
            r.push(id);
        }
    }

    /// The ids removed since removal number `from` (0: since the store opened; pass
    /// [`Removed::next`] again). Takes a short lock of its own, never the index's.
    pub fn removed_since(&self, from: u64) -> Removed {
        self.removals.lock().since(from)
    }

    /// Is `id` a live entry (as far as this store knows)? An index lookup, no file read.
    pub fn is_live(&self, id: &str) -> bool {
        self.index.lock().contains(id)
    }

    /// Is `id` a live entry (as far as this store knows)? `None` when the index is busy.
    pub fn contains(&self, id: &str) -> Option<bool> {
        Some(self.index.try_lock()?.contains(id))
    }

    /// Picks up removals made beside this server (`sluice dlq discard`), without waiting: false
    /// when the index is busy or the directory cannot be read (try again later).
    pub fn refresh_removals(&self) -> bool {
        let Some(mut ix) = self.index.try_lock() else {
            return false;
        };
        self.refresh(&mut ix).is_ok()
    }

    /// After a batch file vanished under a reader: the server's index already knows where its
    /// entries went (it moved them); an offline tool's index is rebuilt from the directory
    /// (the server compacted or deleted the file meanwhile).
    pub(super) fn reload(&self) {
        if self.owner {
            return;
        }
        match scan_listed(&*self.storage, &self.dir) {
            Ok(ix) => *self.index.lock() = ix,
            Err(e) => eprintln!("sluice: DLQ: cannot re-read {}: {e}", self.dir.display()),
        }
    }

    /// Applies what other processes changed (tombstones written, legacy files deleted).
    pub(super) fn refresh(&self, ix: &mut Index) -> Result<(), DlqError> {
        let names = read_names(&*self.storage, &self.dir)?;
        let mut legacy = HashSet::new();
        for name in names {
            match batch::classify(&name) {
                Name::Gone(id) if !ix.has_tombstone(&id) => {
                    // A discard beside this server: the entry left.
                    if ix.contains(&id) {
                        self.note_removed([id.as_str()]);
                    }
                    ix.add_gone(id)
                }
                Name::Legacy(id) => {
                    legacy.insert(id);
                }
                _ => {}
            }
        }
        for id in ix.legacy_ids() {
            if !legacy.contains(&id) {
                if ix.get(&id) == Some(&Loc::LEGACY) {
                    self.note_removed([id.as_str()]);
                }
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
        // Where the entries are now: a snapshot taken again only when a file was compacted
        // since the last one (not per entry: a removal running beside this list holds the lock
        // for a while).
        let mut fresh: Option<HashMap<String, Loc>> = None;
        for (id, mut loc) in snapshot {
            let mut bytes = self.read(&id, &loc);
            // Compacted meanwhile: read where it is now (or skip it if removed), at most twice.
            for _ in 0..2 {
                if bytes.is_ok() {
                    break;
                }
                let now = match &fresh {
                    Some(f) if f.get(&id) != Some(&loc) => f,
                    _ => fresh.insert({
                        self.reload();
                        self.index.lock().snapshot().into_iter().collect()
                    }),
                };
                let Some(now) = now.get(&id).cloned() else {
                    break;
                };
                loc = now;
                bytes = self.read(&id, &loc);
            }
            let Ok(bytes) = bytes else {
                continue; // removed while listing
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
