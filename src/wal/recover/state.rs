//! Dispatch state recovery: which events are unfinished after a restart, and when each is due.
//!
//! One pass over the log ([`recover_dispatch`]), in LSN order:
//!
//! * an event record (kind 1, 5, 9 or 10) becomes *pending* with its record length, receive
//!   time and trigger, due now (`next_attempt = 1`, `due_at_ms = 0`);
//! * a retry record (kind 3) for a pending event replaces its `next_attempt` / `due_at_ms` (the
//!   latest one wins);
//! * a done record (kind 2) removes each listed event from the pending set.
//!
//! Retry and done entries for an LSN that is not pending are ignored: the event finished earlier
//! (a duplicate outcome written again after a crash) or lies below the first segment (retention
//! only deletes segments wholly below the done cursor) — except a done entry for an event the
//! log's `RETIRED` file owes an outcome (`crate::wal::retire::retired`), which counts in the ledger. Records
//! below that file's covered LSN are passed over: they are counted there (a segment a crash
//! left behind before its deletion), and the ledger is the file's tallies plus the scan's. An entry naming its own record's LSN or a
//! later one is impossible for a correct writer (an outcome follows its event) and is reported as
//! corruption at that record.
//!
//! # Memory bound
//!
//! One [`PendingMeta`] (~80 bytes + the trigger id) per pending event, nothing per finished one.
//! At runtime the pending count is bounded by `max_pending_events` through ingest refusal
//! (DESIGN.md, "The backpressure chain", hop 3), so the map recovered from a log written under
//! that bound is bounded by it too. Payloads are parsed in place from read-only maps; bodies are
//! never copied.
//!
//! Call it after [`crate::wal::open`] (which holds the lock and zeroes a torn tail) and before the
//! writer starts appending; a torn tail found anyway just ends the scan, as in recovery.
#![forbid(unsafe_code)]

use crate::storage::{StdFs, Storage};
use crate::wal::format::{decode_payload, parse_event, Record, RecordRef};
use crate::wal::outcomes::OutcomeIndex;
use crate::wal::recover::{scan_dir, Finding, ScanOpts};
use crate::wal::retire::retired::{Retired, TriggerTally};
use crate::wal::{Lsn, WalError};
use std::collections::BTreeMap;
use std::path::Path;

/// What the pump needs to know about one unfinished event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingMeta {
    /// Length of the event's WAL record, header included (for the `max_pending_bytes` bound).
    pub bytes: u64,
    /// Unix milliseconds (for `harn_trigger_oldest_pending_age_seconds`).
    pub received_at_ms: u64,
    pub trigger_id: String,
    /// The attempt to make next: 1 if never tried.
    pub next_attempt: u32,
    /// Unix milliseconds when that attempt is due; 0 if due now.
    pub due_at_ms: u64,
    /// A replay's: the dead letter it replays (the DLQ entry that must be gone: start-up
    /// removes it if a crash came between the replay's commit and the entry's removal).
    pub replay_of: Option<String>,
}

/// The dispatch state recovered from the log.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DispatchRecovery {
    /// Every event without a done entry, with its latest retry schedule applied.
    pub pending: BTreeMap<Lsn, PendingMeta>,
    /// The durable "done" cursor: the lowest pending LSN, or `next_lsn` if none is pending.
    pub done_cursor: Lsn,
    /// The LSN after the last valid record (`last_lsn + 1`).
    pub next_lsn: Lsn,
    /// Per trigger id, the events of the log over its life (the `RETIRED` file's plus the
    /// retained ones above what it covers), how many are done by status, how many retired:
    /// what the event ledger starts from (`dispatch::ledger`).
    pub ledger: BTreeMap<String, TriggerTally>,
    /// Every retained record's outcome slot, continuing at `next_lsn` (`wal::outcomes`): the
    /// runtime hands it to the log's writer, which feeds it each commit.
    pub outcomes: OutcomeIndex,
}

/// Folds records, in LSN order, into a [`DispatchRecovery`].
#[derive(Debug, Default)]
pub(crate) struct DispatchScan {
    pending: BTreeMap<Lsn, PendingMeta>,
    ledger: BTreeMap<String, TriggerTally>,
    /// What retention deleted (the `RETIRED` file): records below its `covered` LSN are
    /// counted there and passed over here; its owed events get their status from the `Done`
    /// entries found here.
    retired: Retired,
    /// The outcome index, from the first record read (a gap in the LSNs read is a range
    /// accepted as lost).
    outcomes: Option<OutcomeIndex>,
}

impl DispatchScan {
    /// A scan of a log whose `RETIRED` file holds `retired`.
    pub(crate) fn with_retired(retired: Retired) -> Self {
        DispatchScan {
            retired,
            ..DispatchScan::default()
        }
    }

    /// Applies one record; `Err(reason)` when its payload does not decode or it refers forward.
    pub(crate) fn observe(&mut self, r: &RecordRef<'_>) -> Result<(), String> {
        if r.lsn < self.retired.covered {
            return Ok(());
        }
        let forward = |what: &str, target: Lsn| {
            format!(
                "{what} refers to LSN {target}, not before its own record {}",
                r.lsn
            )
        };
        let ix = self
            .outcomes
            .get_or_insert_with(|| OutcomeIndex::new(r.lsn));
        if r.lsn > ix.next_lsn() {
            let _ = ix.accept_loss(ix.next_lsn(), r.lsn);
        }
        if r.kind.is_event() {
            let _ = ix.observe_ref(r);
            let ev = parse_event(r.kind, r.payload).map_err(|e| format!("event payload: {e}"))?;
            match self.ledger.get_mut(ev.trigger_id) {
                Some(t) => t.accepted += 1,
                None => {
                    let t = TriggerTally {
                        accepted: 1,
                        ..TriggerTally::default()
                    };
                    self.ledger.insert(ev.trigger_id.to_owned(), t);
                }
            }
            let meta = PendingMeta {
                bytes: r.len as u64,
                received_at_ms: ev.received_at_ms,
                trigger_id: ev.trigger_id.to_owned(),
                next_attempt: 1,
                due_at_ms: 0,
                replay_of: ev.replay_of.map(str::to_owned),
            };
            self.pending.insert(r.lsn, meta);
            return Ok(());
        }
        let rec =
            decode_payload(r.kind, r.payload).map_err(|e| format!("{:?} payload: {e}", r.kind))?;
        let _ = ix.observe(r.lsn, &rec);
        match rec {
            Record::Done(done) => {
                for e in &done.entries {
                    if e.event_lsn >= r.lsn {
                        return Err(forward("done entry", e.event_lsn));
                    }
                    let trigger = match self.pending.remove(&e.event_lsn) {
                        Some(meta) => meta.trigger_id,
                        None => match self.retired.owed.remove(&e.event_lsn) {
                            Some(t) => t,
                            None => continue,
                        },
                    };
                    self.ledger.entry(trigger).or_default().done[e.status as usize] += 1;
                }
            }
            Record::Retry(retry) => {
                if retry.event_lsn >= r.lsn {
                    return Err(forward("retry record", retry.event_lsn));
                }
                if let Some(meta) = self.pending.get_mut(&retry.event_lsn) {
                    meta.next_attempt = retry.next_attempt;
                    meta.due_at_ms = retry.due_at_ms;
                }
            }
            Record::Attempts(a) => {
                if let Some(e) = a.entries.iter().find(|e| e.event_lsn >= r.lsn) {
                    return Err(forward("attempt entry", e.event_lsn));
                }
            }
            // Only the event kinds decode to events; they were handled above.
            Record::Event(_) => {}
        }
        Ok(())
    }

    pub(crate) fn finish(mut self, next_lsn: Lsn) -> DispatchRecovery {
        let done_cursor = self.pending.keys().next().copied().unwrap_or(next_lsn);
        let mut outcomes = self
            .outcomes
            .take()
            .unwrap_or_else(|| OutcomeIndex::new(next_lsn));
        if outcomes.next_lsn() < next_lsn {
            // A range accepted as lost at the end of the log.
            let _ = outcomes.accept_loss(outcomes.next_lsn(), next_lsn);
        }
        for (trigger, r) in &self.retired.tallies {
            let t = self.ledger.entry(trigger.clone()).or_default();
            t.accepted += r.accepted;
            t.retired += r.accepted;
            for (d, x) in t.done.iter_mut().zip(r.done) {
                *d += x;
            }
        }
        DispatchRecovery {
            pending: self.pending,
            done_cursor,
            next_lsn,
            ledger: self.ledger,
            outcomes,
        }
    }
}

/// Scans the WAL directory `wal_dir` once and returns the unfinished events (see the module
/// docs). `Err(Corrupt)` on damage that is not a torn tail, or on an undecodable payload.
pub fn recover_dispatch(wal_dir: &Path) -> Result<DispatchRecovery, WalError> {
    recover_dispatch_in(&StdFs, wal_dir)
}

/// [`recover_dispatch`] on `storage`.
pub fn recover_dispatch_in(
    storage: &dyn Storage,
    wal_dir: &Path,
) -> Result<DispatchRecovery, WalError> {
    let mut state =
        DispatchScan::with_retired(crate::wal::retire::retired::load(storage, wal_dir)?);
    // After `open`, which truncated a torn tail and wrote a lost-range record over every
    // range it gave up (no checkpoint needed for what is left).
    let opts = ScanOpts {
        promised: None,
        skip_damage: false,
    };
    let scan = scan_dir(storage, wal_dir, opts, &mut |_, _, r| state.observe(r))?;
    if let Some(Finding::Corrupt {
        segment,
        offset,
        reason,
    }) = scan.finding
    {
        return Err(WalError::Corrupt {
            segment,
            offset,
            reason,
        });
    }
    Ok(state.finish(scan.next_lsn))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::format::tests::sample_event;
    use crate::wal::recover::tests::test_cfg;
    use crate::wal::{open, DoneEntry, DoneRecord, DoneStatus, RetryRecord, WritePath};

    fn done(entries: &[(Lsn, DoneStatus)]) -> Record {
        Record::Done(DoneRecord {
            entries: entries
                .iter()
                .map(|&(event_lsn, status)| DoneEntry {
                    event_lsn,
                    status,
                    attempts: 1,
                })
                .collect(),
        })
    }

    fn retry(event_lsn: Lsn, next_attempt: u32, due_at_ms: u64) -> Record {
        Record::Retry(RetryRecord {
            event_lsn,
            next_attempt,
            due_at_ms,
            last_error: "HTTP 503".to_owned(),
        })
    }

    #[test]
    fn pending_is_every_event_without_done_with_latest_retry() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
        let (mut wal, _) = open(&cfg).unwrap();
        let ev = |i| Record::Event(sample_event(i, 100));
        let mut replay = sample_event(9, 5);
        replay.replay_of = Some("01HZX3K9V7Q2W8E5R4T6Y1U0AB".to_owned());
        let log = vec![
            ev(1),                                                         // 1
            ev(2),                                                         // 2
            ev(3),                                                         // 3
            retry(2, 2, 5_000),                                            // 4
            done(&[(1, DoneStatus::Delivered), (0, DoneStatus::Skipped)]), // 5 (0: not pending)
            retry(2, 3, 9_000),                                            // 6
            Record::Event(replay),                                         // 7
            retry(1, 2, 1),                                                // 8 (1 is done: ignored)
            done(&[(3, DoneStatus::NoHandler)]),                           // 9
        ];
        assert_eq!(wal.append(&log).unwrap(), 9);
        drop(wal);
        let r = recover_dispatch(&cfg.dir).unwrap();
        assert_eq!(r.pending.keys().copied().collect::<Vec<_>>(), [2, 7]);
        // Every event is one trigger's: 1 delivered, 3 no_handler (0 was never an event).
        let t = r.ledger["github-push"];
        assert_eq!((t.accepted, t.pending()), (4, 2));
        assert_eq!((t.done[1], t.done[4], t.done[3]), (1, 1, 0));
        assert_eq!((r.done_cursor, r.next_lsn), (2, 10));
        let two = &r.pending[&2];
        assert_eq!((two.next_attempt, two.due_at_ms), (3, 9_000));
        assert_eq!(two.received_at_ms, sample_event(2, 0).received_at_ms);
        assert_eq!(two.trigger_id, "github-push");
        let seven = &r.pending[&7];
        assert_eq!((seven.next_attempt, seven.due_at_ms), (1, 0));
        let rec_len = crate::wal::format::RECORD_HEADER_BYTES
            + crate::wal::format::event_payload_len(&sample_event(2, 100)).unwrap();
        assert_eq!(two.bytes, rec_len as u64);
        // Everything done: the cursor is past the last record.
        let (mut wal, _) = open(&cfg).unwrap();
        wal.append(&[done(&[
            (2, DoneStatus::Delivered),
            (7, DoneStatus::DeadLettered),
        ])])
        .unwrap();
        drop(wal);
        let r = recover_dispatch(&cfg.dir).unwrap();
        assert!(r.pending.is_empty());
        assert_eq!((r.done_cursor, r.next_lsn), (11, 11));
    }

    #[test]
    fn empty_log_and_forward_references() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
        let (mut wal, _) = open(&cfg).unwrap();
        let r = recover_dispatch(&cfg.dir).unwrap();
        assert_eq!((r.pending.len(), r.done_cursor, r.next_lsn), (0, 1, 1));
        wal.append(&[
            Record::Event(sample_event(1, 1)),
            done(&[(2, DoneStatus::Delivered)]),
        ])
        .unwrap();
        drop(wal);
        match recover_dispatch(&cfg.dir) {
            Err(WalError::Corrupt { reason, .. }) => assert!(reason.contains("LSN 2"), "{reason}"),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn attempt_records_are_checked_and_change_nothing_pending() {
        use crate::wal::{AttemptEntry, AttemptOutcome, AttemptsRecord};
        let tmp = tempfile::tempdir().unwrap();
        let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
        let (mut wal, _) = open(&cfg).unwrap();
        let attempt = |event_lsn, code| AttemptEntry {
            event_lsn,
            attempt: 1,
            at_ms: 5,
            destination: 0,
            outcome: AttemptOutcome::Status(code),
            latency_us: 9,
            retry_after_ms: None,
            response_prefix: b"no".to_vec(),
        };
        let attempts = |e: Vec<AttemptEntry>| Record::Attempts(AttemptsRecord { entries: e });
        wal.append(&[
            Record::Event(sample_event(1, 1)),
            Record::Event(sample_event(2, 1)),
            attempts(vec![attempt(1, 500), attempt(2, 200)]),
            done(&[(2, DoneStatus::Delivered)]),
        ])
        .unwrap();
        drop(wal);
        let r = recover_dispatch(&cfg.dir).unwrap();
        assert_eq!(r.pending.keys().copied().collect::<Vec<_>>(), [1]);
        assert_eq!(
            r.pending[&1].next_attempt, 1,
            "an attempt entry is history only"
        );
        let (mut wal, _) = open(&cfg).unwrap();
        wal.append(&[attempts(vec![attempt(6, 200)])]).unwrap();
        drop(wal);
        match recover_dispatch(&cfg.dir) {
            Err(WalError::Corrupt { reason, .. }) => {
                assert!(reason.contains("attempt entry refers to LSN 6"), "{reason}")
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
}
