//! Lookups and lists through a log's outcome index (`wal::outcomes`), when the caller has one
//! (a running node: each log's writer feeds it): the status is the index's, exact however late
//! the outcome landed and across restarts (recovery rebuilds it); the attempts are read from the
//! records the index names (the first to the last kind-8 record holding the event's entries),
//! found by a bisection on LSNs (`seek::seek_lsn`), not by a forward scan from the event.
#![forbid(unsafe_code)]

use std::collections::HashMap;

use super::seek;
use super::{corrupt, EventReport, Fate, Seen};
use crate::wal::format::{decode_payload, EventRecord, Record, RecordKind};
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
        if matches!(r.kind, RecordKind::Event | RecordKind::ReplayEvent) {
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
