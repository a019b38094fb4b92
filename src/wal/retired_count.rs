//! Counting what retention is about to delete (`super::retired` says why and where it goes):
//! the events of the segments below the first kept one, per trigger, and the statuses of their
//! `Done` entries — found in those segments, or by reading on into the kept ones, at most
//! [`FORWARD_BYTES`] (plus the rest of the segment where the budget runs out). An event still
//! unresolved then is *owed* (listed in the file with its trigger).
//!
//! Runs on the log's commit helper, between group commits, so it delays them while it reads:
//! one segment's records, parsed in place from a read-only map (only trigger ids and `Done`
//! entries are decoded). A damaged record ends the count of its segment (the records after it
//! cannot be read by anything; recovery refuses such a log unless its loss was accepted).
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use super::format::{decode_payload, parse_event, Record, RecordKind};
use super::retired::{Retired, TriggerTally, MAX_OWED, MAX_TRIGGERS};
use super::scanner::{Scanner, Step};
use super::Lsn;
use crate::storage::Storage;

/// How far past the deleted segments the count reads for `Done` entries.
pub const FORWARD_BYTES: u64 = 128 << 20;

/// What one retirement deletes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan<'a> {
    /// Every segment of the log, in LSN order (first LSN, path).
    pub(crate) segments: &'a [(Lsn, PathBuf)],
    /// The first `deleting` of them go.
    pub(crate) deleting: usize,
    /// The active segment and the end of its committed records (read no further in it).
    pub(crate) active: (&'a Path, u64),
    /// The forward read's budget ([`FORWARD_BYTES`]; smaller in tests).
    pub(crate) forward_bytes: u64,
}

/// The running count: `old`'s tallies, then what the segments add.
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
    /// else only `Done` entries (and then stops once nothing is open). Returns the bytes
    /// scanned.
    fn segment(
        &mut self,
        bytes: &[u8],
        first: Lsn,
        (from, until): (Lsn, Lsn),
        events: bool,
    ) -> u64 {
        // Commit markers are not checked again (`batch_start` None): these bytes were
        // committed by this log (recovery checked what an earlier process wrote); each
        // record's own CRC still is.
        let mut sc = Scanner::resume_at(0, first, None);
        loop {
            let r = match sc.step(bytes) {
                Step::Record(_, r) => r,
                Step::Gap { .. } => continue,
                Step::End | Step::Bad { .. } => break,
            };
            if r.lsn >= until || (!events && self.open.is_empty()) {
                break;
            }
            if r.lsn < from {
                continue;
            }
            match r.kind {
                RecordKind::Event | RecordKind::ReplayEvent if events => {
                    let Ok(ev) = parse_event(r.kind, r.payload) else {
                        continue;
                    };
                    let i = self.row(ev.trigger_id);
                    self.tallies[i as usize].accepted += 1;
                    self.open.insert(r.lsn, i);
                    self.events += 1;
                }
                RecordKind::Done => {
                    let Ok(Record::Done(d)) = decode_payload(r.kind, r.payload) else {
                        continue;
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
        sc.pos as u64
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

/// Counts the events of `plan`'s deleted segments at or above `old.covered` (module docs).
/// `Err` when a segment cannot be read, or when more than [`MAX_OWED`] events would stay
/// owed (the segments are then kept).
pub(crate) fn count(fs: &dyn Storage, plan: &Plan<'_>, old: &Retired) -> io::Result<Counted> {
    let cover = plan.segments[plan.deleting].0;
    let mut c = Count::new(old);
    for (first, path) in &plan.segments[..plan.deleting] {
        let map = fs.map(path)?;
        let from = (*first).max(old.covered);
        if from >= cover {
            continue;
        }
        // Records below `old.covered` (in a segment a crash left behind) were counted before.
        c.segment(&map, *first, (from, cover), true);
    }
    let mut budget = plan.forward_bytes;
    for (first, path) in &plan.segments[plan.deleting..] {
        if c.open.is_empty() || budget == 0 {
            break;
        }
        let map = fs.map(path)?;
        let end = if path == plan.active.0 {
            (plan.active.1 as usize).min(map.len())
        } else {
            map.len()
        };
        let scanned = c.segment(&map[..end], *first, (0, Lsn::MAX), false);
        budget = budget.saturating_sub(scanned.max(1));
    }
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
            plan.forward_bytes
        )));
    }
    let mut retired = Retired {
        covered: cover,
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
