//! Attempt entries (kind 8, `wal::AttemptsRecord`): the pump queues each attempt's facts, each
//! gate's skip and each dead-lettering for the log holding the event, and `flush_records`
//! writes them ahead of its `Done` and `Retry` records, in the same group commit.
//!
//! Bound: ≤ [`MAX_ATTEMPTS_QUEUED`] entries queued per log; more are counted
//! (`sluice_pump_attempts_unrecorded_total`), as are the entries of a record the log could not
//! make durable (not written again: history, not state).
#![forbid(unsafe_code)]

use super::{PumpCore, PumpEnv, Ticket, Write, MAX_ATTEMPTS_QUEUED};
use crate::wal::{AttemptEntry, AttemptOutcome, AttemptsRecord, Lsn, Record, MAX_ATTEMPT_ENTRIES};

/// `AttemptEntry::destination` of a gate's skip: the gates are the trigger's, before any
/// destination's call.
pub const NO_DESTINATION: u32 = u32::MAX;

impl<E: PumpEnv> PumpCore<E> {
    /// Queues an attempt entry for the log in slot `slot` (its next `Attempts` record), or
    /// counts it when the queue is at [`MAX_ATTEMPTS_QUEUED`].
    pub(super) fn note_attempt(&mut self, slot: usize, entry: AttemptEntry) {
        let queue = &mut self.logs[slot].attempt_queue;
        if queue.len() < MAX_ATTEMPTS_QUEUED {
            queue.push(entry);
        } else {
            self.metrics.attempts_unrecorded_by(1);
        }
    }

    /// Records a decision that ended the event without a call (a gate's skip, a dead-lettering)
    /// as an attempt entry, at `now_ms`, with the attempts made.
    pub(super) fn note_decision(
        &mut self,
        slot: usize,
        lsn: Lsn,
        attempts: u32,
        now_ms: u64,
        destination: u32,
        outcome: AttemptOutcome,
    ) {
        let entry = AttemptEntry {
            event_lsn: lsn,
            attempt: attempts,
            at_ms: now_ms,
            destination,
            outcome,
            latency_us: 0,
            retry_after_ms: None,
            response_prefix: Vec::new(),
        };
        self.note_attempt(slot, entry);
    }

    /// Sends up to [`MAX_ATTEMPT_ENTRIES`] queued entries of log slot `slot` as one `Attempts`
    /// record; false when none are queued.
    pub(super) fn flush_attempts(&mut self, slot: usize) -> bool {
        let log = &mut self.logs[slot];
        if log.attempt_queue.is_empty() {
            return false;
        }
        let n = log.attempt_queue.len().min(MAX_ATTEMPT_ENTRIES);
        let record = Record::Attempts(AttemptsRecord {
            entries: log.attempt_queue.drain(..n).collect(),
        });
        log.records_in_flight += 1;
        let ticket = self.ticket(Ticket::Attempts { slot, entries: n });
        self.writes.push(Write::Record {
            log: slot,
            ticket,
            record,
        });
        true
    }
}
