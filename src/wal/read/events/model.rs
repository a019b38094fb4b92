//! What the event reader reports and how it finds an event: an event's [`Fate`] and
//! [`EventReport`], the outcomes a scan has seen of it (`Seen`), the list filter
//! ([`ListFilter`]), and the segment search on first event ids (`candidate_segment`). Shared by
//! the scans (`events`) and the indexed reads (`events::indexed`); a leaf of both.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::wal::event_id;
use crate::wal::format::{
    parse_event, AttemptEntry, AttemptOutcome, DoneStatus, EventRecord, Record,
};
use crate::wal::read::reader::{RawRecord, WalReader};
use crate::wal::segment::list_segments;
use crate::wal::{Lsn, WalError};

/// What became of an event, as far as its log says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// No outcome yet and no retry scheduled.
    Pending,
    /// A retry is scheduled at this Unix millisecond.
    Retrying {
        next_attempt_at_ms: u64,
    },
    Delivered,
    /// With the DLQ reason when its entry was recorded (kind 8).
    DeadLettered {
        reason: Option<&'static str>,
    },
    /// With the gate's reason when recorded.
    Skipped {
        reason: Option<&'static str>,
    },
    NoHandler,
    /// Without an outcome after a range accepted as lost (`--accept-wal-loss`) that may have
    /// held it; it is delivered again (recovery counts it pending) and reads its new outcome
    /// once that lands. Only a lookup through the outcome index knows it.
    OutcomeLost,
}

impl Fate {
    /// `pending`, `retrying`, `delivered`, `dead_lettered`, `skipped`, `no_handler` or
    /// `outcome_lost`.
    pub fn as_str(self) -> &'static str {
        match self {
            Fate::Pending => "pending",
            Fate::Retrying { .. } => "retrying",
            Fate::Delivered => "delivered",
            Fate::DeadLettered { .. } => "dead_lettered",
            Fate::Skipped { .. } => "skipped",
            Fate::NoHandler => "no_handler",
            Fate::OutcomeLost => "outcome_lost",
        }
    }
}

/// One event and its fate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventReport {
    pub event: EventRecord,
    /// The log (`core-K`, `legacy`) and LSN holding it.
    pub log: String,
    pub lsn: Lsn,
    pub fate: Fate,
    /// Its calls in order (kind-8 entries that are calls; skips and dead-letterings are the
    /// fate's reason).
    pub attempts: Vec<AttemptEntry>,
    /// The search for its outcome stopped at its bound (`show_bounded`) before finding a
    /// `Done` entry: the fate is what the records read so far say.
    pub bounded: bool,
    /// Its attempt records span more than the read's bound (a lookup through the outcome
    /// index): `attempts` holds the first ones read and those of its last attempt record; the
    /// status is exact all the same.
    pub attempts_bounded: bool,
}

/// Outcomes seen for one event so far in a scan.
#[derive(Debug, Default, Clone)]
pub(super) struct Seen {
    pub(super) attempts: Vec<AttemptEntry>,
    pub(super) decision: Option<AttemptOutcome>,
    pub(super) retry_due: Option<u64>,
    pub(super) done: Option<DoneStatus>,
}

impl Seen {
    /// Folds `rec` into `seen` for the events `want` selects; true when it held the `Done`
    /// entry of an event selected.
    pub(super) fn observe(
        rec: &Record,
        seen: &mut HashMap<Lsn, Seen>,
        want: &dyn Fn(Lsn) -> bool,
    ) -> bool {
        let mut done = false;
        match rec {
            Record::Attempts(a) => {
                for e in a.entries.iter().filter(|e| want(e.event_lsn)) {
                    let s = seen.entry(e.event_lsn).or_default();
                    if e.outcome.is_call() {
                        s.attempts.push(e.clone());
                    } else {
                        s.decision = Some(e.outcome);
                    }
                }
            }
            Record::Retry(r) if want(r.event_lsn) => {
                seen.entry(r.event_lsn).or_default().retry_due = Some(r.due_at_ms);
            }
            Record::Done(d) => {
                for e in d.entries.iter().filter(|e| want(e.event_lsn)) {
                    seen.entry(e.event_lsn).or_default().done = Some(e.status);
                    done = true;
                }
            }
            _ => {}
        }
        done
    }

    pub(super) fn fate(&self) -> Fate {
        let decided = self.decision.and_then(AttemptOutcome::error);
        match self.done {
            Some(DoneStatus::Delivered) => Fate::Delivered,
            Some(DoneStatus::DeadLettered) => Fate::DeadLettered { reason: decided },
            Some(DoneStatus::NoHandler) => Fate::NoHandler,
            Some(s) => Fate::Skipped {
                reason: s.describe().2.or(decided),
            },
            None => match self.retry_due {
                Some(next_attempt_at_ms) => Fate::Retrying { next_attempt_at_ms },
                None => Fate::Pending,
            },
        }
    }
}

/// The raw records of `dir` from the segment starting at `from` on, in LSN order (payloads
/// not decoded: a lookup parses only what it needs).
pub(super) fn raw_from(
    dir: &Path,
    from: Lsn,
) -> Result<impl Iterator<Item = Result<RawRecord, WalError>>, WalError> {
    Ok(WalReader::open_from(dir, from)?.skipping())
}

pub(super) fn corrupt(dir: &Path, r: &RawRecord, e: crate::wal::DecodeError) -> WalError {
    WalError::Corrupt {
        segment: dir.to_path_buf(),
        offset: r.offset,
        reason: format!("LSN {}: {:?} payload: {e}", r.lsn, r.kind),
    }
}

/// The first event id of the segment starting at `first` (before `end`), if it holds one.
pub(super) fn first_event_id(dir: &Path, first: Lsn, end: Lsn) -> Result<Option<String>, WalError> {
    for r in raw_from(dir, first)? {
        let r = r?;
        if r.lsn >= end {
            break;
        }
        if r.kind.is_event() {
            let ev = parse_event(r.kind, &r.payload).map_err(|e| corrupt(dir, &r, e))?;
            return Ok(Some(ev.event_id.to_owned()));
        }
    }
    Ok(None)
}

/// The first LSN and the file of the last segment of `dir` whose first event id is at or below
/// `id` (a segment without events counts as below).
pub(super) fn candidate_segment(dir: &Path, id: &str) -> Result<Option<(Lsn, PathBuf)>, WalError> {
    let segs = list_segments(dir)?;
    let end = |i: usize| segs.get(i + 1).map_or(Lsn::MAX, |s| s.0);
    let (mut lo, mut hi) = (0usize, segs.len());
    // Invariant: segments before `lo` start at or below `id`; from `hi` on, above it.
    while lo < hi {
        let mid = (lo + hi) / 2;
        match first_event_id(dir, segs[mid].0, end(mid))? {
            Some(first) if first.as_str() > id => hi = mid,
            _ => lo = mid + 1,
        }
    }
    Ok(lo.checked_sub(1).map(|i| segs[i].clone()))
}

/// Which events `list` returns.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub trigger: Option<String>,
    /// A [`Fate::as_str`] value.
    pub status: Option<String>,
    /// Only events received at or after this Unix millisecond.
    pub since_ms: Option<u64>,
    /// Only events received at or before this Unix millisecond.
    pub until_ms: Option<u64>,
    /// Only events whose id sorts below this one: the page cursor (the last id of the page
    /// before).
    pub before: Option<String>,
    /// At most this many (the newest).
    pub limit: usize,
}

impl ListFilter {
    pub(super) fn admits(&self, r: &EventReport) -> bool {
        let ev = &r.event;
        self.trigger.as_ref().map_or(true, |t| *t == ev.trigger_id)
            && self.status.as_ref().map_or(true, |s| s == r.fate.as_str())
            && self.since_ms.map_or(true, |t| ev.received_at_ms >= t)
            && self.until_ms.map_or(true, |t| ev.received_at_ms <= t)
            && self.before.as_ref().map_or(true, |b| ev.event_id < *b)
    }

    /// The id every event this filter admits sorts below, if it has an upper bound: the
    /// cursor, or the first id of the millisecond after `until_ms` (ids start with their
    /// millisecond, [`event_id`]).
    pub(super) fn below(&self) -> Option<String> {
        let until = self.until_ms.map(|t| {
            let ms = t.saturating_add(1).min((1 << 48) - 1);
            event_id::encode(u128::from(ms) << 80)
        });
        match (until, self.before.clone()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
