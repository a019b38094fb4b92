//! "Where is my event": one event's fate, recent events and the per-trigger ledger, read from
//! the retained logs of a data dir (issue 27). Read-only (segments through read-only maps, no
//! lock taken), so it is safe beside a running server, like `sluice dlq list`; a batch being
//! written reads as a torn tail and simply ends the scan.
//!
//! # Cost
//!
//! - [`show`]: the event id carries its millisecond and its worker (`event_id::parse`), and the
//!   ids of one log increase with its LSNs (one generator per worker). So the log of that
//!   worker is searched first (then the others), each by a binary search over its segments on
//!   their first event id (one map and one record read per probe: `O(log segments)`), then a
//!   bisection inside the chosen segment on the same order (`events_seek`: about
//!   `log2(segment / 64 KiB)` probes of a few KiB each), then one forward scan from there. The scan stops at the first event id above the one
//!   asked (not found), and otherwise goes on from the event only until its `Done` entry (its
//!   attempts are written before or with it): bounded by the bytes the log took between the
//!   event and its outcome, or by the end of the log for an event still pending.
//! - [`list`]: segments from the newest back, each scanned once, stopping after the segment
//!   that brings the matches to `limit` or starts before `since`; segments wholly after the
//!   upper bound (`until`, the page cursor; a binary search on first event ids as for
//!   [`show`]) are read for their outcomes only, no event decoded. Memory: the outcomes of the
//!   scanned segments' events, and at most the events of the segments read in full.
//! - With a running outcome index (`wal::outcomes`; [`show_indexed`], [`list_indexed`], the
//!   online routes): the event is found as above, its status read from the index, and only its
//!   attempt records read (`indexed`); a list reads no segment above its page.
//! - [`ledger`]: one forward scan of every retained record (what recovery reads at start-up)
//!   plus each log's `RETIRED` file (what retention deleted, per trigger, with the outcomes:
//!   `crate::wal::retire::retired`), so its counts are over the log's life and `retired` is what retention
//!   deleted; memory: the events without a `Done` entry.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::storage::StdFs;
use crate::wal::event_id;
use crate::wal::format::{
    decode_payload, parse_event, AttemptEntry, AttemptOutcome, DoneStatus, EventRecord, Record,
};
use crate::wal::layout::{log_dirs, LogDir};
use crate::wal::outcomes::SharedIndex;
use crate::wal::read::reader::WalReader;
use crate::wal::retire::retired::{self, Retired};
use crate::wal::segment::list_segments;
use crate::wal::tools::WAL_SUBDIR;
use crate::wal::{Lsn, WalError};

/// Why [`show`] found nothing, or could not look.
#[derive(Debug)]
pub enum ShowError {
    /// Not an event id (26 characters of Crockford base32, upper case).
    BadId(String),
    /// No retained log holds it; `maybe_retired`: it is older than the oldest retained event
    /// of its log and that log has had segments retired, so retention may have deleted it.
    NotFound {
        maybe_retired: bool,
    },
    Wal(WalError),
}

impl From<WalError> for ShowError {
    fn from(e: WalError) -> ShowError {
        ShowError::Wal(e)
    }
}

/// The records of `dir` from the segment starting at `from` on, in LSN order.
fn records_from(
    dir: &Path,
    from: Lsn,
) -> Result<impl Iterator<Item = Result<(Lsn, Record), WalError>>, WalError> {
    let mut reader = WalReader::open_from(dir, from)?.skipping();
    Ok(std::iter::from_fn(move || reader.next_record()))
}

/// The event `id` in the log `log`, with its fate, if the log holds it; at most `after`
/// records are read past the event (through `index`, when it holds the event: its attempt
/// records only).
fn show_in(
    log: &LogDir,
    id: &str,
    after: u64,
    index: Option<&SharedIndex>,
) -> Result<Option<EventReport>, WalError> {
    let Some((first, segment)) = candidate_segment(&log.dir, id)? else {
        return Ok(None);
    };
    // Within the segment, a bisection on ids finds where to start (`events_seek`).
    let (pos, from) = seek::seek(&segment, first, id)?;
    let mut found: Option<(Lsn, EventRecord)> = None;
    let mut seen = HashMap::new();
    let (mut read, mut bounded) = (0u64, false);
    let reader = WalReader::open_at(&log.dir, first, pos, from)?.skipping();
    for r in reader {
        let r = r?;
        let is_event = r.kind.is_event();
        match &found {
            None if is_event => {
                let ev = parse_event(r.kind, &r.payload).map_err(|e| corrupt(&log.dir, &r, e))?;
                if ev.event_id == id {
                    if let Some(f) = index.and_then(|ix| ix.get(r.lsn)) {
                        let event = (r.lsn, ev.to_record());
                        let seen = Seen::default();
                        return indexed::report(log, event, f, seen, r.lsn + 1, after).map(Some);
                    }
                    found = Some((r.lsn, ev.to_record()));
                } else if ev.event_id > id {
                    return Ok(None);
                }
            }
            None => {}
            Some(_) if read >= after => {
                bounded = true;
                break;
            }
            Some((l, _)) => {
                let l = *l;
                read += 1;
                if is_event {
                    continue;
                }
                let rec =
                    decode_payload(r.kind, &r.payload).map_err(|e| corrupt(&log.dir, &r, e))?;
                if Seen::observe(&rec, &mut seen, &|e| e == l) {
                    break;
                }
            }
        }
    }
    Ok(found.map(|(lsn, event)| {
        let s = seen.remove(&lsn).unwrap_or_default();
        EventReport {
            event,
            log: log.name.clone(),
            lsn,
            fate: s.fate(),
            attempts: s.attempts,
            bounded,
            attempts_bounded: false,
        }
    }))
}

/// The event `id` of the data dir `data_dir` and its fate.
pub fn show(data_dir: &Path, id: &str) -> Result<EventReport, ShowError> {
    show_bounded(data_dir, id, u64::MAX)
}

/// [`show`], reading at most `after` records past the event in search of its outcome (the
/// online route's bound: a pending event would otherwise be searched to the end of its log).
pub fn show_bounded(data_dir: &Path, id: &str, after: u64) -> Result<EventReport, ShowError> {
    show_indexed(data_dir, id, after, &|_| None)
}

/// [`show_bounded`] through each log's outcome index where `index_of` gives one: the status is
/// the index's (exact, O(1)), and only the event's attempt records are read (at most `after`).
pub fn show_indexed(
    data_dir: &Path,
    id: &str,
    after: u64,
    index_of: IndexOf<'_>,
) -> Result<EventReport, ShowError> {
    let Some((_, worker)) = event_id::parse(id) else {
        return Err(ShowError::BadId(id.to_owned()));
    };
    let mut logs = log_dirs(&data_dir.join(WAL_SUBDIR))?;
    // Its worker's log first.
    logs.sort_by_key(|l| l.core != Some(usize::from(worker)));
    let mut maybe_retired = false;
    for log in &logs {
        if let Some(report) = show_in(log, id, after, index_of(log))? {
            return Ok(report);
        }
        let segs = list_segments(&log.dir)?;
        if let Some(&(first, _)) = segs.first() {
            let oldest = first_event_id(&log.dir, first, segs.get(1).map_or(Lsn::MAX, |s| s.0))?;
            let older = oldest.map_or(true, |o| id < o.as_str());
            maybe_retired |= first > 1 && older && log.core == Some(usize::from(worker));
        }
    }
    Err(ShowError::NotFound { maybe_retired })
}

/// The events of one segment (`[first, end)`) that `filter` admits, newest first, given the
/// outcomes of the newer segments in `seen` (which it extends). Also returns whether the
/// segment starts before `filter.since_ms`. With `events` false only its outcomes are read
/// (a segment newer than the filter's upper bound: no event payload is decoded).
fn list_segment(
    log: &LogDir,
    (first, end): (Lsn, Lsn),
    filter: &ListFilter,
    seen: &mut HashMap<Lsn, Seen>,
    events: bool,
) -> Result<(Vec<EventReport>, bool), WalError> {
    let mut found = Vec::new();
    for r in raw_from(&log.dir, first)? {
        let r = r?;
        if r.lsn >= end {
            break;
        }
        let bad = |e| corrupt(&log.dir, &r, e);
        if r.kind.is_event() {
            if events {
                found.push((
                    r.lsn,
                    parse_event(r.kind, &r.payload).map_err(bad)?.to_record(),
                ));
            }
        } else {
            let rec = decode_payload(r.kind, &r.payload).map_err(bad)?;
            Seen::observe(&rec, seen, &|_| true);
        }
    }
    let older = match (found.first(), filter.since_ms) {
        (Some((_, e)), Some(t)) => e.received_at_ms < t,
        _ => false,
    };
    let mut out = Vec::new();
    for (lsn, event) in found.into_iter().rev() {
        let s = seen.remove(&lsn).unwrap_or_default();
        let report = EventReport {
            event,
            log: log.name.clone(),
            lsn,
            fate: s.fate(),
            attempts: s.attempts,
            bounded: false,
            attempts_bounded: false,
        };
        if filter.admits(&report) {
            out.push(report);
        }
    }
    Ok((out, older))
}

/// The newest events `filter` admits, newest first (by id), at most `filter.limit`.
///
/// Per log, segments are read from the newest back: those wholly above the filter's upper
/// bound (`until_ms`, the cursor; found by `candidate_segment`'s binary search on first
/// event ids) for their outcomes only, the others in full, stopping after the segment that
/// brings the matches to `limit` or starts before `since_ms`. An event's outcome is written
/// after it, so the outcomes of every newer segment are read: the cost is the log from the
/// page's oldest event to the end, events decoded only within the filter's time range.
pub fn list(data_dir: &Path, filter: &ListFilter) -> Result<Vec<EventReport>, WalError> {
    list_indexed(data_dir, filter, &|_| None)
}

/// [`list`] through each log's outcome index where `index_of` gives one
/// (`indexed::list_log`): the index is walked newest first over the events whose trigger and
/// status may match, and only those events and their attempt records are read, so a page
/// costs its own events (plus, for a rare trigger, a walk over the index's 20-byte slots), not
/// the log from them to the end.
pub fn list_indexed(
    data_dir: &Path,
    filter: &ListFilter,
    index_of: IndexOf<'_>,
) -> Result<Vec<EventReport>, WalError> {
    let below = filter.below();
    let mut all = Vec::new();
    for log in log_dirs(&data_dir.join(WAL_SUBDIR))? {
        if let Some(ix) = index_of(&log).filter(|ix| ix.size().is_some()) {
            all.extend(indexed::list_log(&log, filter, below.as_deref(), ix)?);
            continue;
        }
        let segs = list_segments(&log.dir)?;
        // Segments after `top` start above the bound: no event of theirs is admitted.
        let top = match &below {
            Some(b) => candidate_segment(&log.dir, b)?.map(|s| s.0),
            None => segs.last().map(|s| s.0),
        };
        let Some(top) = top else {
            continue;
        };
        let mut seen = HashMap::new();
        let mut found = 0;
        for i in (0..segs.len()).rev() {
            let end = segs.get(i + 1).map_or(Lsn::MAX, |s| s.0);
            let events = segs[i].0 <= top;
            let (got, older) = list_segment(&log, (segs[i].0, end), filter, &mut seen, events)?;
            found += got.len();
            all.extend(got);
            if found >= filter.limit || older {
                break;
            }
        }
    }
    all.sort_by(|a, b| b.event.event_id.cmp(&a.event.event_id));
    all.truncate(filter.limit);
    Ok(all)
}

/// One trigger's balance over the log's life: `retired` of its `accepted` events were deleted
/// by retention (their fates stay counted in `delivered` .. `no_handler`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LedgerRow {
    pub accepted: u64,
    pub delivered: u64,
    pub dead_lettered: u64,
    pub skipped: u64,
    pub no_handler: u64,
    pub pending: u64,
    /// Events of this trigger retention deleted (the log's `RETIRED` file, `wal::retired`).
    pub retired: u64,
}

impl LedgerRow {
    /// `accepted = delivered + dead_lettered + skipped + no_handler + pending`.
    pub fn balances(&self) -> bool {
        self.accepted
            == self.delivered + self.dead_lettered + self.skipped + self.no_handler + self.pending
    }

    /// Adds `n` outcomes of status code `status` ([`DoneStatus`] as `u8`).
    fn add_done(&mut self, status: usize, n: u64) {
        match status {
            s if s == DoneStatus::Delivered as usize => self.delivered += n,
            s if s == DoneStatus::DeadLettered as usize => self.dead_lettered += n,
            s if s == DoneStatus::NoHandler as usize => self.no_handler += n,
            _ => self.skipped += n,
        }
    }
}

/// The ledger: per trigger, and the oldest retained event's receive time (Unix ms).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    pub triggers: BTreeMap<String, LedgerRow>,
    pub since_ms: Option<u64>,
}

/// The per-trigger ledger of every log of `data_dir`, over the logs' lives: each log's
/// `RETIRED` file (what retention deleted) plus its retained records above what that file
/// covers. Safe beside a running server: when retention moved a log's file while it was read,
/// that log is read again (three tries, then the error or the last reading stands).
pub fn ledger(data_dir: &Path) -> Result<Ledger, WalError> {
    let mut ledger = Ledger::default();
    for log in log_dirs(&data_dir.join(WAL_SUBDIR))? {
        let mut tries = 0;
        let part = loop {
            let retired = retired::load(&StdFs, &log.dir)?;
            let covered = retired.covered;
            let part = log_ledger(&log.dir, retired);
            tries += 1;
            if tries == 3 || retired::load(&StdFs, &log.dir)?.covered == covered {
                break part?;
            }
        };
        for (t, r) in part.triggers {
            let row = ledger.triggers.entry(t).or_default();
            row.accepted += r.accepted;
            row.pending += r.pending;
            row.retired += r.retired;
            row.delivered += r.delivered;
            row.dead_lettered += r.dead_lettered;
            row.skipped += r.skipped;
            row.no_handler += r.no_handler;
        }
        ledger.since_ms = match (ledger.since_ms, part.since_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(ledger)
}

/// The ledger of the log in `dir` whose `RETIRED` file holds `retired`.
fn log_ledger(dir: &Path, mut retired: Retired) -> Result<Ledger, WalError> {
    let mut ledger = Ledger::default();
    let mut open: HashMap<Lsn, String> = HashMap::new();
    for r in records_from(dir, 0)? {
        match r? {
            (lsn, _) if lsn < retired.covered => {}
            (lsn, Record::Event(ev)) => {
                let since = ledger.since_ms.get_or_insert(ev.received_at_ms);
                *since = (*since).min(ev.received_at_ms);
                let row = ledger.triggers.entry(ev.trigger_id.clone()).or_default();
                row.accepted += 1;
                open.insert(lsn, ev.trigger_id);
            }
            (_, Record::Done(d)) => {
                for e in &d.entries {
                    let lsn = e.event_lsn;
                    let Some(t) = open.remove(&lsn).or_else(|| retired.owed.remove(&lsn)) else {
                        continue;
                    };
                    let row = ledger.triggers.entry(t).or_default();
                    row.add_done(e.status as usize, 1);
                }
            }
            _ => {}
        }
    }
    for t in open.into_values() {
        ledger.triggers.entry(t).or_default().pending += 1;
    }
    for (t, x) in &retired.tallies {
        let row = ledger.triggers.entry(t.clone()).or_default();
        row.accepted += x.accepted;
        row.retired += x.accepted;
        for (status, n) in x.done.iter().enumerate() {
            row.add_done(status, *n);
        }
    }
    // Owed events whose `Done` entry is not in the retained log (a range given up with
    // `--accept-wal-loss`): still without a known outcome.
    for t in retired.owed.into_values() {
        ledger.triggers.entry(t).or_default().pending += 1;
    }
    Ok(ledger)
}

/// `report` as the event API's JSON (a stable format: README, "HTTP interface"): `id`, `trigger`,
/// `source`, `received_at`, `bytes`, `status`, `attempts` (`at`, `status`, `latency_ms`,
/// `error`, `retry_after`, `response_prefix`), `next_attempt_at`, and `reason`, `log`, `lsn`,
/// `outcome_search: "bounded"` when [`show_bounded`] stopped before an outcome,
/// `attempts_search: "bounded"` when an indexed lookup read only the first and the last of the
/// event's attempt records (they span more than its bound);
/// `body` (UTF-8; else `body_hex`) only when `with_body`.
pub fn report_json(report: &EventReport, with_body: bool) -> serde_json::Value {
    use serde_json::json;
    let ev = &report.event;
    let attempts: Vec<serde_json::Value> = report.attempts.iter().map(attempt_json).collect();
    let mut v = json!({
        "id": ev.event_id,
        "trigger": ev.trigger_id,
        "source": ev.source,
        "received_at": ev.received_at_ms,
        "bytes": ev.body.len(),
        "status": report.fate.as_str(),
        "attempts": attempts,
        "log": report.log,
        "lsn": report.lsn,
    });
    match report.fate {
        Fate::Retrying { next_attempt_at_ms } => v["next_attempt_at"] = next_attempt_at_ms.into(),
        Fate::DeadLettered { reason: Some(r) } | Fate::Skipped { reason: Some(r) } => {
            v["reason"] = r.into()
        }
        _ => {}
    }
    if report.bounded {
        v["outcome_search"] = "bounded".into();
    }
    if report.attempts_bounded {
        v["attempts_search"] = "bounded".into();
    }
    if with_body {
        match std::str::from_utf8(&ev.body) {
            Ok(s) => v["body"] = s.into(),
            Err(_) => v["body_hex"] = hex(&ev.body).into(),
        }
    }
    v
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn attempt_json(a: &AttemptEntry) -> serde_json::Value {
    let mut v = serde_json::json!({
        "at": a.at_ms,
        "attempt": a.attempt,
        "destination": a.destination,
        "latency_ms": f64::from(a.latency_us) / 1000.0,
    });
    v["status"] = match a.outcome {
        AttemptOutcome::Status(code) => code.into(),
        _ => serde_json::Value::Null,
    };
    if let Some(e) = a.outcome.error() {
        v["error"] = e.into();
    }
    if let Some(ms) = a.retry_after_ms {
        v["retry_after"] = (f64::from(ms) / 1000.0).into();
    }
    if !a.response_prefix.is_empty() {
        v["response_prefix"] = printable(&a.response_prefix).into();
    }
    v
}

/// `bytes` as printable ASCII: `0x20..=0x7E` as themselves but `\` as `\\`, every other byte
/// as `\xNN` (lower-case hex). Lossless and unambiguous, so a response prefix in JSON shows
/// what the destination sent, control bytes and invalid UTF-8 included.
pub fn printable(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out
}

pub mod indexed;
pub use indexed::IndexOf;
mod model;
use model::{candidate_segment, corrupt, first_event_id, raw_from, Seen};
pub use model::{EventReport, Fate, ListFilter};
pub(in crate::wal) mod seek;
#[cfg(test)]
mod tests;
