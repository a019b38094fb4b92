//! Counting what retention is about to delete (`crate::wal::retire::retired` says why and where it goes):
//! the events of the segments below the first kept one, per trigger, and the statuses of their
//! `Done` entries — found in those segments, or by reading on into the kept ones, at most
//! [`FORWARD_BYTES`] (plus the rest of the segment where the budget runs out). An event still
//! unresolved then is *owed* (listed in the file with its trigger).
//!
//! Runs on the log's commit helper between group commits (with `commit = "ring"`, on the
//! core's loop), [`SLICE_BYTES`] per turn ([`Counting`]), so a count delays a commit by about
//! a millisecond instead of a whole segment's read (18–45 ms for 64 MiB); the records are
//! parsed in place from a read-only map (only trigger ids and `Done` entries are decoded). A damaged record ends the count of its segment (the records after it
//! cannot be read by anything; recovery refuses such a log unless its loss was accepted).
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::storage::Storage;
use crate::wal::format::{decode_payload, parse_event, Record, RecordKind, RecordRef};
use crate::wal::recover::scanner::{Scanner, Step};
use crate::wal::retire::retired::{Retired, TriggerTally, MAX_OWED, MAX_TRIGGERS};
use crate::wal::Lsn;

/// How far past the deleted segments the count reads for `Done` entries.
pub const FORWARD_BYTES: u64 = 128 << 20;

/// How much the commit helper reads per turn of a count in progress ([`Counting`]): about
/// 1 ms of its time from the page cache (a whole 64 MiB segment measured 18–22 ms cached,
/// 40–45 ms not).
pub const SLICE_BYTES: u64 = 4 << 20;

/// The running count: `old`'s tallies, then what the segments add.
#[derive(Debug)]
struct Count {
    names: Vec<String>,
    index: HashMap<String, u32>,
    tallies: Vec<TriggerTally>,
    /// Retired events without a `Done` entry yet: LSN → row.
    open: HashMap<Lsn, u32>,
    /// Events counted by this retirement.
    events: u64,
}

impl Count {
    fn new(old: &Retired) -> Count {
        let mut c = Count {
            names: Vec::new(),
            index: HashMap::new(),
            tallies: Vec::new(),
            open: HashMap::new(),
            events: 0,
        };
        for (name, t) in &old.tallies {
            let i = c.row(name);
            c.tallies[i as usize] = *t;
        }
        for (lsn, name) in &old.owed {
            let i = c.row(name);
            c.open.insert(*lsn, i);
        }
        c
    }

    fn row(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_owned());
        self.index.insert(name.to_owned(), i);
        self.tallies.push(TriggerTally::default());
        i
    }

    /// Folds the records `from..until` of one segment's `bytes` (first LSN `first`; the
    /// records below `from` were counted by an earlier retirement): events too when `events`,
    /// else only `Done` entries (and then stops once nothing is open). Reads on from `sc` for
    /// about `budget` bytes (at least one record); returns whether the segment is done.
    fn segment(
        &mut self,
        bytes: &[u8],
        sc: &mut Scanner,
        (from, until): (Lsn, Lsn),
        events: bool,
        budget: u64,
    ) -> bool {
        let start = sc.pos;
        loop {
            if (sc.pos - start) as u64 >= budget {
                return false;
            }
            let r = match sc.step(bytes) {
                Step::Record(_, r) => r,
                Step::Gap { .. } => continue,
                Step::End | Step::Bad { .. } => return true,
            };
            if r.lsn >= until || (!events && self.open.is_empty()) {
                return true;
            }
            if r.lsn < from {
                continue;
            }
            self.fold(&r, events);
        }
    }

    /// One record: an event of a deleted segment opens its row's count, a `Done` entry closes it.
    fn fold(&mut self, r: &RecordRef<'_>, events: bool) {
        match r.kind {
            k if k.is_event() && events => {
                let Ok(ev) = parse_event(r.kind, r.payload) else {
                    return;
                };
                let i = self.row(ev.trigger_id);
                self.tallies[i as usize].accepted += 1;
                self.open.insert(r.lsn, i);
                self.events += 1;
            }
            RecordKind::Done => {
                let Ok(Record::Done(d)) = decode_payload(r.kind, r.payload) else {
                    return;
                };
                for e in &d.entries {
                    if let Some(i) = self.open.remove(&e.event_lsn) {
                        self.tallies[i as usize].done[e.status as usize] += 1;
                    }
                }
            }
            _ => {}
        }
    }
}

/// What a retirement counted.
#[derive(Debug)]
pub(crate) struct Counted {
    /// The new file: `old` plus the deleted segments' events, covering up to the first kept
    /// segment.
    pub(crate) retired: Retired,
    /// Events of the deleted segments.
    pub(crate) events: u64,
}

/// A retirement waiting on its count: the first LSN it keeps, the count, the slices read.
#[derive(Debug)]
pub(crate) struct Retiring {
    pub(crate) keep: Lsn,
    pub(crate) counting: Counting,
    pub(crate) slices: u32,
}

/// A count in progress, read a slice at a time ([`Counting::advance`]) so that the commit
/// helper (or, with `commit = "ring"`, the core's loop) runs it between group commits without
/// holding them up for a whole segment: [`SLICE_BYTES`] per call.
#[derive(Debug)]
pub(crate) struct Counting {
    /// Every segment of the log when the count began, in LSN order (first LSN, path).
    segments: Vec<(Lsn, PathBuf)>,
    /// The first `deleting` of them go.
    deleting: usize,
    /// The first LSN kept: what the new file covers up to.
    cover: Lsn,
    /// What the old file covered (records below were counted before).
    old_covered: Lsn,
    forward_bytes: u64,
    c: Count,
    /// The segment being read, and where in it (`None` before its first slice).
    at: usize,
    scanner: Option<Scanner>,
    /// Forward bytes left to read for outcomes.
    budget: u64,
}

impl Counting {
    /// A count of the first `deleting` of `segments` on top of `old` (nothing read yet).
    pub(crate) fn start(
        segments: Vec<(Lsn, PathBuf)>,
        deleting: usize,
        forward_bytes: u64,
        old: &Retired,
    ) -> Counting {
        Counting {
            cover: segments[deleting].0,
            segments,
            deleting,
            old_covered: old.covered,
            forward_bytes,
            c: Count::new(old),
            at: 0,
            scanner: None,
            budget: forward_bytes,
        }
    }

    /// The segments this count is for (all of the log's when it began) and how many go.
    pub(crate) fn plan(&self) -> (&[(Lsn, PathBuf)], usize) {
        (&self.segments, self.deleting)
    }

    /// Reads on for about `slice` bytes; `active` is the active segment and the end of its
    /// committed records (read no further in it). Returns whether the count is complete.
    pub(crate) fn advance(
        &mut self,
        fs: &dyn Storage,
        active: (&Path, u64),
        slice: u64,
    ) -> io::Result<bool> {
        let mut left = slice;
        while left > 0 && self.at < self.segments.len() {
            let (first, path) = &self.segments[self.at];
            let events = self.at < self.deleting;
            let range = if events {
                ((*first).max(self.old_covered), self.cover)
            } else {
                (0, Lsn::MAX)
            };
            let starting = self.scanner.is_none();
            if starting && events && range.0 >= self.cover {
                // Counted by an earlier retirement (a segment a crash left behind).
                self.at += 1;
                continue;
            }
            if starting && !events && (self.c.open.is_empty() || self.budget == 0) {
                self.at = self.segments.len();
                break;
            }
            let map = fs.map(path)?;
            let end = if path == active.0 {
                (active.1 as usize).min(map.len())
            } else {
                map.len()
            };
            // Commit markers are not checked again (`batch_start` None): these bytes were
            // committed by this log (recovery checked what an earlier process wrote); each
            // record's own CRC still is.
            let sc = self
                .scanner
                .get_or_insert(Scanner::resume_at(0, *first, None));
            let before = sc.pos;
            let done = self.c.segment(&map[..end], sc, range, events, left);
            let read = ((sc.pos - before) as u64).max(1);
            left = left.saturating_sub(read);
            if !events {
                self.budget = self.budget.saturating_sub(read);
            }
            if done {
                self.scanner = None;
                self.at += 1;
            }
        }
        Ok(self.at >= self.segments.len())
    }

    /// The new file's contents, once [`Counting::advance`] said complete. `Err` past the
    /// bounds on trigger ids and owed events (the segments are then kept).
    pub(crate) fn finish(self) -> io::Result<Counted> {
        let c = self.c;
        if c.names.len() > MAX_TRIGGERS {
            return Err(io::Error::other(format!(
                "retired events of {} trigger ids (at most {MAX_TRIGGERS}): segments kept",
                c.names.len()
            )));
        }
        if c.open.len() > MAX_OWED {
            return Err(io::Error::other(format!(
                "{} retired events have no outcome within {} bytes after them \
                 (at most {MAX_OWED} may wait): segments kept",
                c.open.len(),
                self.forward_bytes
            )));
        }
        let mut retired = Retired {
            covered: self.cover,
            ..Retired::default()
        };
        for (i, name) in c.names.iter().enumerate() {
            retired.tallies.insert(name.clone(), c.tallies[i]);
        }
        for (lsn, i) in &c.open {
            retired.owed.insert(*lsn, c.names[*i as usize].clone());
        }
        Ok(Counted {
            retired,
            events: c.events,
        })
    }
}
