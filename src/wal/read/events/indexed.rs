//! Lookups and lists through a log's outcome index (`wal::outcomes`), when the caller has one
//! (a running node: each log's writer feeds it): the status is the index's, exact however late
//! the outcome landed and across restarts (recovery rebuilds it); the attempts are read from the
//! records the index names (the first to the last kind-8 record holding the event's entries),
//! found by a bisection on LSNs (`seek::seek_lsn`), not by a forward scan from the event.
#![forbid(unsafe_code)]

use std::collections::HashMap;

use super::model::{candidate_segment, corrupt, EventReport, Fate, ListFilter, Seen};
use super::seek;
use crate::wal::format::{decode_payload, parse_event, DoneStatus, EventRecord, Record};
use crate::wal::layout::LogDir;
use crate::wal::outcomes::{Found, Outcome, SharedIndex};
use crate::wal::read::reader::{RawRecord, WalReader};
use crate::wal::segment::list_segments;
use crate::wal::{Lsn, WalError};

/// Which log's index a reader may use: `None` when the log has none running (offline tools).
pub type IndexOf<'a> = &'a dyn Fn(&LogDir) -> Option<&'a SharedIndex>;

/// Reads the records `from..=to` of `log` (at most `max` of them) into `visit`, starting at a
/// record boundary found by a bisection on LSNs. Returns false when `max` cut it short.
pub(super) fn read_range(
    log: &LogDir,
    from: Lsn,
    to: Lsn,
    max: u64,
    visit: &mut dyn FnMut(&RawRecord) -> Result<(), WalError>,
) -> Result<bool, WalError> {
    let segs = list_segments(&log.dir)?;
    let Some(i) = segs.partition_point(|s| s.0 <= from).checked_sub(1) else {
        return Ok(true);
    };
    let (first, path) = &segs[i];
    let (pos, at) = seek::seek_lsn(path, *first, from)?;
    let reader = WalReader::open_at(&log.dir, *first, pos, at)?.skipping();
    let mut read = 0u64;
    for r in reader {
        let r = r?;
        if r.lsn < from {
            continue;
        }
        if r.lsn > to {
            return Ok(true);
        }
        if read >= max {
            return Ok(false);
        }
        read += 1;
        visit(&r)?;
    }
    Ok(true)
}

/// The report of the event `event` at `lsn` of `log`, whose index entry is `found`: `seen`
/// holds what the caller read of its outcome records below `read_end` (nothing for a lookup:
/// `read_end` is the LSN after the event); the rest of its attempt records are read here, at
/// most `after` of them, then its last one (`attempts_bounded`).
pub(super) fn report(
    log: &LogDir,
    (lsn, event): (Lsn, EventRecord),
    found: Found,
    seen: Seen,
    read_end: Lsn,
    after: u64,
) -> Result<EventReport, WalError> {
    let mut map = HashMap::from([(lsn, seen)]);
    let mut bounded = false;
    let mut fold = |r: &RawRecord| -> Result<(), WalError> {
        if r.kind.is_event() {
            return Ok(());
        }
        let rec = decode_payload(r.kind, &r.payload).map_err(|e| corrupt(&log.dir, r, e))?;
        Seen::observe(&rec, &mut map, &|e| e == lsn);
        Ok(())
    };
    if let Some((first, last)) = found.attempts.filter(|a| a.1 >= read_end) {
        bounded = !read_range(log, first.max(read_end), last, after, &mut fold)?;
        if bounded {
            // The last attempt record (its latest call or decision) all the same.
            read_range(log, last, last, 1, &mut fold)?;
        }
    }
    let retry_due = match found.outcome {
        Outcome::Retrying { retry_lsn } => retry_due(log, retry_lsn)?,
        _ => None,
    };
    let s = map.remove(&lsn).unwrap_or_default();
    let fate = match found.outcome {
        Outcome::Pending => Fate::Pending,
        Outcome::Retrying { .. } => match retry_due.or(s.retry_due) {
            Some(next_attempt_at_ms) => Fate::Retrying { next_attempt_at_ms },
            None => Fate::Pending,
        },
        Outcome::Done(status) => Seen {
            done: Some(status),
            ..s.clone()
        }
        .fate(),
        Outcome::Lost => Fate::OutcomeLost,
    };
    Ok(EventReport {
        event,
        log: log.name.clone(),
        lsn,
        fate,
        attempts: s.attempts,
        bounded: false,
        attempts_bounded: bounded,
    })
}

/// The due time of the retry record at `lsn`.
fn retry_due(log: &LogDir, lsn: Lsn) -> Result<Option<u64>, WalError> {
    let mut due = None;
    read_range(log, lsn, lsn, 1, &mut |r| {
        if let Ok(Record::Retry(x)) = decode_payload(r.kind, &r.payload) {
            due = Some(x.due_at_ms);
        }
        Ok(())
    })?;
    Ok(due)
}

/// Records read past what a list has read, at most, for one listed event's attempts.
pub(super) const LIST_ATTEMPTS_READ: u64 = 20_000;

/// The events of `log` that `filter` admits, newest first, at most `filter.limit`, through its
/// running `index`: the index is walked newest first over the events whose trigger may match
/// and whose status may (`SharedIndex::newest_events`, a bounded walk per hold of its lock),
/// and only those events and their attempt records are read. `below`: the id every admitted
/// event sorts below (the cursor or `until`), found in the log by the id bisection.
pub(super) fn list_log(
    log: &LogDir,
    filter: &ListFilter,
    below: Option<&str>,
    index: &SharedIndex,
) -> Result<Vec<EventReport>, WalError> {
    let mut cursor = match below {
        Some(b) => first_at_or_after(log, b)?,
        None => Lsn::MAX,
    };
    let mut out = Vec::new();
    loop {
        let want = (filter.limit - out.len()).clamp(16, 256);
        let (events, next) = index.newest_events(cursor, filter.trigger.as_deref(), want);
        let events: Vec<(Lsn, Found)> = (events.into_iter())
            .filter(|(_, f)| status_may_be(filter.status.as_deref(), f.outcome))
            .collect();
        let (mut records, mut seen, read_end) = read_clusters(log, &events)?;
        for (lsn, found) in events {
            // Gone meanwhile (retention): not listed.
            let Some(event) = records.remove(&lsn) else {
                continue;
            };
            // Ids, hence receive times, do not decrease along a log: the rest is older.
            if filter.since_ms.is_some_and(|t| event.received_at_ms < t) {
                return Ok(out);
            }
            let s = seen.remove(&lsn).unwrap_or_default();
            let end = read_end.get(&lsn).copied().unwrap_or(lsn + 1);
            let r = report(log, (lsn, event), found, s, end, LIST_ATTEMPTS_READ)?;
            if filter.admits(&r) {
                out.push(r);
                if out.len() >= filter.limit {
                    return Ok(out);
                }
            }
        }
        match next {
            Some(n) => cursor = n,
            None => return Ok(out),
        }
    }
}

/// Events closer than this (in LSNs) are read in one forward scan.
const CLUSTER_GAP: Lsn = 1_024;
/// Records a cluster's scan reads past its last event, for their outcomes.
const CLUSTER_TAIL: Lsn = 4_096;

/// What reading a list's candidates gave: their records, the outcomes read for them, and per
/// event the LSN after the last record read for it (its attempts below that are in `seen`).
type Clusters = (
    HashMap<Lsn, EventRecord>,
    HashMap<Lsn, Seen>,
    HashMap<Lsn, Lsn>,
);

/// Reads the events `events` (newest first) in clusters of nearby LSNs, one forward scan each
/// from the cluster's first event up to its last event's last attempt record (at most
/// [`CLUSTER_TAIL`] records past its last event), folding the outcome records read into `seen`.
fn read_clusters(log: &LogDir, events: &[(Lsn, Found)]) -> Result<Clusters, WalError> {
    let (mut records, mut seen, mut ends) = (HashMap::new(), HashMap::new(), HashMap::new());
    let mut lsns: Vec<(Lsn, Found)> = events.to_vec();
    lsns.sort_by_key(|e| e.0);
    let mut i = 0;
    while i < lsns.len() {
        let mut j = i + 1;
        while j < lsns.len() && lsns[j].0 - lsns[j - 1].0 <= CLUSTER_GAP {
            j += 1;
        }
        let cluster = &lsns[i..j];
        let (lo, last) = (cluster[0].0, cluster[j - i - 1].0);
        let want: std::collections::HashSet<Lsn> = cluster.iter().map(|e| e.0).collect();
        let outcomes_end = (cluster.iter())
            .filter_map(|e| e.1.attempts.map(|a| a.1))
            .max()
            .unwrap_or(last);
        let hi = outcomes_end.clamp(last, last + CLUSTER_TAIL);
        let mut read_to = lo;
        read_range(log, lo, hi, hi - lo + 1, &mut |r| {
            read_to = r.lsn + 1;
            if r.kind.is_event() {
                if want.contains(&r.lsn) {
                    let ev =
                        parse_event(r.kind, &r.payload).map_err(|e| corrupt(&log.dir, r, e))?;
                    records.insert(r.lsn, ev.to_record());
                }
                return Ok(());
            }
            let rec = decode_payload(r.kind, &r.payload).map_err(|e| corrupt(&log.dir, r, e))?;
            Seen::observe(&rec, &mut seen, &|e| want.contains(&e));
            Ok(())
        })?;
        for e in cluster {
            ends.insert(e.0, read_to.max(e.0 + 1));
        }
        i = j;
    }
    Ok((records, seen, ends))
}

/// Whether an event whose index entry says `outcome` may have the listed `status` (the report
/// decides; this only skips reading events that cannot).
fn status_may_be(status: Option<&str>, outcome: Outcome) -> bool {
    let Some(status) = status else {
        return true;
    };
    match outcome {
        Outcome::Pending => status == "pending",
        // Without its retry record's due time it reads pending.
        Outcome::Retrying { .. } => status == "retrying" || status == "pending",
        Outcome::Lost => status == "outcome_lost",
        Outcome::Done(DoneStatus::Delivered) => status == "delivered",
        Outcome::Done(DoneStatus::DeadLettered) => status == "dead_lettered",
        Outcome::Done(DoneStatus::NoHandler) => status == "no_handler",
        Outcome::Done(_) => status == "skipped",
    }
}

/// The LSN of the first event of `log` whose id sorts at or above `id` (its ids increase with
/// its LSNs): every event below it sorts below `id`. `Lsn::MAX` when none does.
fn first_at_or_after(log: &LogDir, id: &str) -> Result<Lsn, WalError> {
    let Some((first, path)) = candidate_segment(&log.dir, id)? else {
        // Every segment starts above `id`.
        return Ok(0);
    };
    let (pos, from) = seek::seek(&path, first, id)?;
    for r in WalReader::open_at(&log.dir, first, pos, from)?.skipping() {
        let r = r?;
        if r.kind.is_event() {
            let ev = parse_event(r.kind, &r.payload).map_err(|e| corrupt(&log.dir, &r, e))?;
            if ev.event_id >= id {
                return Ok(r.lsn);
            }
        }
    }
    Ok(Lsn::MAX)
}
