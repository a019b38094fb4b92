//! The DLQ's in-memory index: entry id → the file and offset of its newest version, and per
//! batch file the accounting that decides when the file can go (no bookkeeping here touches a
//! file; [`crate::dispatch::dlq::store`] does the I/O and calls in).
//!
//! Rebuilt at every open from the directory ([`crate::dispatch::dlq::batch`] names): batch files, legacy
//! entry files and tombstones, in any order (the newest version wins by `(seq, offset)`, a
//! tombstone removes every version).
//!
//! Bounds: one [`Loc`] per live entry (at most `max_dlq_entries`), and per batch file the ids of
//! its records (live or not; files whose entries are all gone are deleted, and files less than
//! half live are compacted, so these stay within twice the live entries plus one file).
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::dispatch::dlq::batch::Found;

/// Where an entry's newest version is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loc {
    /// The batch file's sequence number; 0 for a legacy one-file-per-entry file.
    pub seq: u64,
    pub offset: u64,
    pub len: u32,
    /// Why the record cannot be read (found at the scan), if it cannot.
    pub damage: Option<String>,
}

impl Loc {
    pub const LEGACY: Loc = Loc {
        seq: 0,
        offset: 0,
        len: 0,
        damage: None,
    };
}

/// One batch file's accounting.
#[derive(Debug, Clone, Default)]
pub struct BatchInfo {
    /// File size.
    pub bytes: u64,
    /// Entries whose newest version is in this file, and their record bytes.
    pub live: u32,
    pub live_bytes: u64,
    /// The id of every record in the file (live, superseded or removed).
    pub ids: Vec<String>,
    /// Unreadable from this offset on (never deleted automatically).
    pub tail: Option<(u64, String)>,
}

/// What [`Index::remove`] took out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    pub loc: Loc,
    /// Some batch file holds a version of the id: a tombstone must be written.
    pub tombstone: bool,
    /// A legacy entry file of the id exists (its size): it must be deleted.
    pub legacy: Option<u64>,
}

/// The index (see the module header).
#[derive(Debug, Default)]
pub struct Index {
    live: HashMap<String, Loc>,
    batches: BTreeMap<u64, BatchInfo>,
    /// Batch records per id (any file, any state): a tombstone can go when this reaches 0.
    versions: HashMap<String, u32>,
    /// Tombstones on disk.
    gone: HashSet<String>,
    /// Legacy entry files on disk and their sizes.
    legacy: HashMap<String, u64>,
    /// Bytes of every batch and legacy file.
    bytes: u64,
    /// New entries reserved by puts whose files are being written.
    pub pending: usize,
}

impl Index {
    /// Live entries.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Bytes of the DLQ's files (batches and legacy entries; tombstones are empty).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn get(&self, id: &str) -> Option<&Loc> {
        self.live.get(id)
    }

    pub fn contains(&self, id: &str) -> bool {
        self.live.contains_key(id)
    }

    pub fn has_tombstone(&self, id: &str) -> bool {
        self.gone.contains(id)
    }

    /// Every live entry with its location (a snapshot for listings).
    pub fn snapshot(&self) -> Vec<(String, Loc)> {
        let mut v: Vec<_> = self
            .live
            .iter()
            .map(|(id, l)| (id.clone(), l.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Damaged tails of batch files: `(seq, offset, why)`.
    pub fn tails(&self) -> Vec<(u64, u64, String)> {
        self.batches
            .iter()
            .filter_map(|(&seq, b)| b.tail.as_ref().map(|(o, w)| (seq, *o, w.clone())))
            .collect()
    }

    /// The highest batch sequence number known.
    pub fn max_seq(&self) -> u64 {
        self.batches.keys().next_back().copied().unwrap_or(0)
    }

    pub fn batch(&self, seq: u64) -> Option<&BatchInfo> {
        self.batches.get(&seq)
    }

    /// Adds a batch file's records (at open, or once a put's file is durable).
    pub fn add_batch(
        &mut self,
        seq: u64,
        bytes: u64,
        records: Vec<Found>,
        tail: Option<(u64, String)>,
    ) {
        self.bytes += bytes;
        let mut info = BatchInfo {
            bytes,
            tail,
            ..BatchInfo::default()
        };
        info.ids = records.iter().map(|f| f.id.clone()).collect();
        self.batches.insert(seq, info);
        for f in records {
            *self.versions.entry(f.id.clone()).or_default() += 1;
            if self.gone.contains(&f.id) {
                continue;
            }
            let loc = Loc {
                seq,
                offset: f.offset,
                len: f.len,
                damage: f.damage,
            };
            self.offer(f.id, loc);
        }
    }

    /// A put made `id` live again: its tombstone was deleted, and so is the index's.
    /// Returns the batch files whose live entries it superseded (an id dead-lettered again):
    /// they may now be empty or worth compacting.
    pub fn put_done(&mut self, seq: u64, bytes: u64, records: Vec<Found>) -> Vec<u64> {
        let mut superseded = Vec::new();
        for f in &records {
            self.gone.remove(&f.id);
            if let Some(old) = self.live.get(&f.id).filter(|l| l.seq != 0) {
                if !superseded.contains(&old.seq) {
                    superseded.push(old.seq);
                }
            }
        }
        self.add_batch(seq, bytes, records, None);
        superseded
    }

    /// `loc` for `id` if it is newer than what is there.
    fn offer(&mut self, id: String, loc: Loc) {
        if let Some(old) = self.live.get(&id) {
            if (old.seq, old.offset) > (loc.seq, loc.offset) {
                return;
            }
            let old = old.clone();
            self.release(&old);
        }
        if let Some(b) = self.batches.get_mut(&loc.seq) {
            b.live += 1;
            b.live_bytes += u64::from(loc.len);
        }
        self.live.insert(id, loc);
    }

    fn release(&mut self, loc: &Loc) {
        if let Some(b) = self.batches.get_mut(&loc.seq) {
            b.live -= 1;
            b.live_bytes -= u64::from(loc.len);
        }
    }

    /// A legacy entry file (at open).
    pub fn add_legacy(&mut self, id: String, bytes: u64) {
        self.bytes += bytes;
        self.legacy.insert(id.clone(), bytes);
        if !self.gone.contains(&id) {
            self.offer(id, Loc::LEGACY);
        }
    }

    /// A tombstone (at open, or written by another process and found later).
    pub fn add_gone(&mut self, id: String) {
        if let Some(loc) = self.live.remove(&id) {
            self.release(&loc);
        }
        self.gone.insert(id);
    }

    /// A legacy file deleted by another process (found later).
    pub fn legacy_vanished(&mut self, id: &str) {
        if let Some(bytes) = self.legacy.remove(id) {
            self.bytes -= bytes;
        }
        if self.live.get(id) == Some(&Loc::LEGACY) {
            self.live.remove(id);
        }
    }

    /// Legacy ids on disk.
    pub fn legacy_ids(&self) -> Vec<String> {
        self.legacy.keys().cloned().collect()
    }

    /// Takes `id` out; `None` if it is not live.
    pub fn remove(&mut self, id: &str) -> Option<Removed> {
        let loc = self.live.remove(id)?;
        self.release(&loc);
        let tombstone = self.versions.get(id).is_some_and(|&n| n > 0);
        if tombstone {
            self.gone.insert(id.to_owned());
        }
        let legacy = self.legacy.remove(id);
        if let Some(bytes) = legacy {
            self.bytes -= bytes;
        }
        Some(Removed {
            loc,
            tombstone,
            legacy,
        })
    }

    /// Puts back what [`Index::remove`] took when its files could not be changed.
    pub fn undo_remove(&mut self, id: &str, r: Removed) {
        if r.tombstone {
            self.gone.remove(id);
        }
        if let Some(bytes) = r.legacy {
            self.bytes += bytes;
            self.legacy.insert(id.to_owned(), bytes);
        }
        self.offer(id.to_owned(), r.loc);
    }

    /// Batch files with no live entry and no damaged tail: to delete.
    pub fn empty_batches(&self) -> Vec<u64> {
        self.batches
            .iter()
            .filter(|(_, b)| b.live == 0 && b.tail.is_none())
            .map(|(&s, _)| s)
            .collect()
    }

    /// True if `seq` is less than half live (by bytes), still has live entries, and is worth
    /// rewriting (at least `min_bytes`).
    pub fn wants_compaction(&self, seq: u64, min_bytes: u64) -> bool {
        self.batches.get(&seq).is_some_and(|b| {
            b.live > 0 && b.tail.is_none() && b.bytes >= min_bytes && b.live_bytes * 2 < b.bytes
        })
    }

    /// The live entries of batch `seq`, by offset.
    pub fn live_in(&self, seq: u64) -> Vec<(String, Loc)> {
        let mut v: Vec<_> = self
            .live
            .iter()
            .filter(|(_, l)| l.seq == seq)
            .map(|(id, l)| (id.clone(), l.clone()))
            .collect();
        v.sort_by_key(|(_, l)| l.offset);
        v
    }

    /// Forgets batch `seq` (its file is deleted); returns the tombstones no file needs any more.
    pub fn drop_batch(&mut self, seq: u64) -> Vec<String> {
        let Some(b) = self.batches.remove(&seq) else {
            return Vec::new();
        };
        self.bytes -= b.bytes;
        let mut free = Vec::new();
        for id in b.ids {
            let n = self.versions.get_mut(&id).map(|n| {
                *n -= 1;
                *n
            });
            if n == Some(0) {
                self.versions.remove(&id);
                if !self.legacy.contains_key(&id) && self.gone.remove(&id) {
                    free.push(id);
                }
            }
        }
        free
    }

    /// Tombstones with no version left anywhere (after a crash between deleting a batch and
    /// its tombstones): to delete at open.
    pub fn orphan_tombstones(&mut self) -> Vec<String> {
        let orphans: Vec<String> = self
            .gone
            .iter()
            .filter(|id| !self.versions.contains_key(*id) && !self.legacy.contains_key(*id))
            .cloned()
            .collect();
        for id in &orphans {
            self.gone.remove(id);
        }
        orphans
    }

    /// Legacy files whose id has a tombstone (a crash between the two steps of a removal).
    pub fn tombstoned_legacy(&self) -> Vec<String> {
        self.legacy
            .keys()
            .filter(|id| self.gone.contains(*id))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(id: &str, offset: u64) -> Found {
        Found {
            id: id.to_owned(),
            offset,
            len: 100,
            damage: None,
        }
    }

    #[test]
    fn newest_version_wins_in_any_order_and_tombstones_remove_all() {
        let mut ix = Index::default();
        ix.add_batch(2, 1000, vec![found("A", 16), found("B", 116)], None);
        ix.add_legacy("A".into(), 50);
        ix.add_batch(1, 1000, vec![found("A", 16)], None);
        assert_eq!(ix.get("A").unwrap().seq, 2);
        assert_eq!(ix.batch(1).unwrap().live, 0);
        assert_eq!(ix.batch(2).unwrap().live, 2);
        assert_eq!(ix.bytes(), 2050);
        ix.add_gone("A".into());
        assert!(!ix.contains("A") && ix.len() == 1);
        assert_eq!(ix.empty_batches(), [1]);
        assert_eq!(ix.tombstoned_legacy(), ["A"]);
        // Dropping batch 1 frees nothing: batch 2 and the legacy file still hold A.
        assert!(ix.drop_batch(1).is_empty());
        ix.legacy_vanished("A");
        let r = ix.remove("B").unwrap();
        assert!(r.tombstone && r.legacy.is_none());
        assert_eq!(ix.empty_batches(), [2]);
        let mut free = ix.drop_batch(2);
        free.sort();
        assert_eq!(free, ["A", "B"]);
        assert_eq!((ix.len(), ix.bytes()), (0, 0));
        assert!(ix.orphan_tombstones().is_empty());
    }

    #[test]
    fn a_put_after_a_tombstone_is_live_and_compaction_is_by_live_bytes() {
        let mut ix = Index::default();
        let ids = ["A", "B", "C", "D"];
        ix.add_batch(
            1,
            400,
            ids.iter()
                .enumerate()
                .map(|(i, id)| found(id, 16 + 100 * i as u64))
                .collect(),
            None,
        );
        for id in &ids[..2] {
            ix.remove(id).unwrap();
        }
        assert!(!ix.wants_compaction(1, 0), "half live is not below half");
        ix.remove("C").unwrap();
        assert!(ix.wants_compaction(1, 0));
        assert!(!ix.wants_compaction(1, 1 << 20), "too small to bother");
        assert_eq!(ix.live_in(1).len(), 1);
        assert!(ix.put_done(2, 116, vec![found("A", 16)]).is_empty());
        assert_eq!(
            ix.put_done(3, 116, vec![found("A", 16)]),
            [2],
            "A's version in 2 superseded"
        );
        assert!(ix.contains("A") && !ix.has_tombstone("A"));
        // Legacy-only removal needs no tombstone.
        ix.add_legacy("L".into(), 10);
        let r = ix.remove("L").unwrap();
        assert!(r.legacy == Some(10) && !r.tombstone);
        ix.undo_remove("L", r);
        assert_eq!(ix.get("L"), Some(&Loc::LEGACY));
    }

    #[test]
    fn tails_pin_their_file() {
        let mut ix = Index::default();
        ix.add_batch(3, 100, vec![], Some((16, "bad".into())));
        assert!(ix.empty_batches().is_empty());
        assert_eq!(ix.tails(), [(3, 16, "bad".to_owned())]);
        ix.add_gone("Z".into());
        assert_eq!(ix.orphan_tombstones(), ["Z"]);
    }
}
