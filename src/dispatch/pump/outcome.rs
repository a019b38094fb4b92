//! Outcomes: a job's outcome releases its dispatch slot (terminal, or held by a gate) and
//! queues its record; the records go to the commit helper as [`Write`]s, at most one `Done`
//! record per log at a time; once durable, the events' backlog room goes back. Dead letters
//! are written to the DLQ first; one the DLQ refuses waits without a dispatch slot and is
//! retried every [`DLQ_RETRY_EVERY`].
#![forbid(unsafe_code)]

use super::pump_attempts::NO_DESTINATION;
use super::MAX_RECORDS_IN_FLIGHT;
use super::{PumpCore, PumpEnv, Ticket, Write, DLQ_RETRY_EVERY, MAX_DONE_ENTRIES};
use crate::dispatch::dlq::{DlqEntry, DlqError};
use crate::dispatch::job::{split_key, JobOutcome};
use crate::wal::{
    AppendOutcome, AttemptOutcome, DoneEntry, DoneRecord, DoneStatus, Lsn, Record, RetryRecord,
};

impl<E: PumpEnv> PumpCore<E> {
    /// An outcome of a job whose event is in one of this core's logs; `now_ms`: wall-clock
    /// milliseconds (the dead letter's stamp).
    pub fn on_outcome(&mut self, outcome: JobOutcome, now_ms: u64) {
        let key = outcome.lsn();
        let (index, lsn) = split_key(key);
        let Some(&slot) = self.slot_of.get(&index) else {
            eprintln!(
                "sluice: pump: outcome for log {index}, not owned by core {}",
                self.core
            );
            return;
        };
        match outcome {
            JobOutcome::Delivered {
                attempts, attempt, ..
            } => {
                self.note_attempt(slot, attempt.entry(lsn, attempts));
                self.finish(slot, lsn, DoneStatus::Delivered, attempts)
            }
            JobOutcome::Skipped {
                attempts, reason, ..
            } => {
                let status = reason.done_status();
                let skip = AttemptOutcome::Skipped(status);
                self.note_decision(slot, lsn, attempts, now_ms, NO_DESTINATION, skip);
                self.finish(slot, lsn, status, attempts)
            }
            JobOutcome::Held { gate, .. } => self.gate_held(slot, lsn, gate),
            JobOutcome::Resumed { window, .. } => self.gate_released(slot, lsn, window),
            JobOutcome::RetryScheduled {
                next_attempt,
                due_at_ms,
                last_error,
                attempt,
                ..
            } => {
                let made = next_attempt.saturating_sub(1);
                self.note_attempt(slot, attempt.entry(lsn, made));
                self.logs[slot].retry_queue.push_back(RetryRecord {
                    event_lsn: lsn,
                    next_attempt,
                    due_at_ms,
                    last_error,
                })
            }
            JobOutcome::DeadLetter {
                job,
                reason,
                attempts,
                last_error,
                attempt,
            } => {
                if let Some(a) = attempt {
                    self.note_attempt(slot, a.entry(lsn, attempts));
                }
                let dead = AttemptOutcome::DeadLettered(reason as u8);
                self.note_decision(slot, lsn, attempts, now_ms, job.dest as u32, dead);
                let destination = self.routes.destinations.get(job.dest);
                let entry = DlqEntry {
                    id: job.event.event_id.clone(),
                    event_lsn: lsn,
                    destination: destination.map_or_else(String::new, |r| r.uri.clone()),
                    reason,
                    attempts,
                    last_error,
                    dead_lettered_at_ms: now_ms,
                    event: job.event,
                };
                self.dead_letter(entry, attempts, key);
            }
        }
    }

    /// A gate holds the event: its dispatch slot goes back (it stays pending and live).
    /// Sent again when another gate holds it: `unhold` is idempotent.
    fn gate_held(&mut self, slot: usize, lsn: Lsn, gate: &'static str) {
        if let Some(l) = self.logs[slot].live.get_mut(&lsn) {
            l.held = Some(gate);
        }
        self.unhold(slot, lsn)
    }

    /// Released by its gates, the event holds a dispatch slot the dispatcher took, and one of
    /// trigger slot `window`'s cap.
    fn gate_released(&mut self, slot: usize, lsn: Lsn, window: usize) {
        if let Some(l) = self.logs[slot].live.get_mut(&lsn) {
            l.outstanding = true;
            l.held = None;
            l.window = Some(window);
        }
    }

    /// Sends the dead letter to the commit helper; its `Done` entry follows once it is durable.
    fn dead_letter(&mut self, entry: DlqEntry, attempts: u32, key: u64) {
        let ticket = self.ticket(Ticket::DeadLetter { key, attempts });
        self.writes.push(Write::DeadLetter { ticket, entry });
    }

    pub(super) fn retry_dead_letters(&mut self, now: u64) {
        if self.dlq_waiting.is_empty() || now < self.dlq_retry_at {
            return;
        }
        for (entry, attempts, key) in std::mem::take(&mut self.dlq_waiting) {
            self.dead_letter(entry, attempts, key);
        }
        self.dlq_retry_at = now + DLQ_RETRY_EVERY;
    }

    /// A terminal outcome: the job gives its dispatch slot back; its `Done` entry is queued,
    /// awaiting its commit.
    fn finish(&mut self, slot: usize, lsn: Lsn, status: DoneStatus, attempts: u32) {
        self.unhold(slot, lsn);
        self.awaiting += 1;
        self.logs[slot].done_queue.push(DoneEntry {
            event_lsn: lsn,
            status,
            attempts,
        });
    }

    /// The event at `lsn` of log slot `slot` stops holding its dispatch slot and its trigger's
    /// window cap (it is done, held by a gate, or waits for room in the DLQ); idempotent.
    fn unhold(&mut self, slot: usize, lsn: Lsn) {
        let Some(l) = self.logs[slot].live.get_mut(&lsn) else {
            return;
        };
        if !std::mem::replace(&mut l.outstanding, false) {
            return;
        }
        if let Some(w) = l.window.take() {
            self.slots.caps.give(w);
        }
        self.release_slot();
    }

    /// Queues the `Attempts`, `Done` and `Retry` records for the commit helper (as [`Write`]s).
    pub(super) fn flush_records(&mut self) {
        for slot in 0..self.logs.len() {
            if !self.env.writable(self.logs[slot].index) {
                continue; // a failed disk: written again once its probe succeeds
            }
            while self.logs[slot].records_in_flight < MAX_RECORDS_IN_FLIGHT {
                // Attempts first: a `Done` record is never durable before the attempts that
                // led to it (the same batch, or an earlier one).
                if self.flush_attempts(slot) {
                    continue;
                }
                let log = &mut self.logs[slot];
                let (record, entries) = if !log.done_queue.is_empty() && !log.done_in_flight {
                    let n = log.done_queue.len().min(MAX_DONE_ENTRIES);
                    let entries: Vec<DoneEntry> = log.done_queue.drain(..n).collect();
                    let record = Record::Done(DoneRecord {
                        entries: entries.clone(),
                    });
                    log.done_in_flight = true;
                    (record, entries)
                } else if let Some(r) = log.retry_queue.pop_front() {
                    (Record::Retry(r), Vec::new())
                } else {
                    break;
                };
                log.records_in_flight += 1;
                let ticket = self.ticket(Ticket::Record { slot, entries });
                self.writes.push(Write::Record {
                    log: slot,
                    ticket,
                    record,
                });
            }
        }
    }

    /// The commit helper's answer for one of the pump's records.
    pub fn on_record_done(&mut self, ticket: u64, outcome: AppendOutcome) {
        let (slot, entries) = match self.tickets.remove(&ticket) {
            Some(Ticket::Record { slot, entries }) => (slot, entries),
            Some(Ticket::Attempts { slot, entries }) => {
                self.logs[slot].records_in_flight -= 1;
                // Not written again: an attempt entry is history, not state; its loss is
                // counted (the event's outcome is still kept by its `Done` entry).
                if outcome == AppendOutcome::Unavailable {
                    self.metrics.attempts_unrecorded_by(entries as u64);
                }
                return;
            }
            _ => return,
        };
        let log = &mut self.logs[slot];
        log.records_in_flight -= 1;
        if !entries.is_empty() {
            log.done_in_flight = false;
        }
        match outcome {
            AppendOutcome::Durable { lsn } => {
                log.durable = log.durable.max(lsn);
                // The entries `finish` queued (a `no_handler` entry never awaited).
                let finished = entries
                    .iter()
                    .filter(|e| e.status != DoneStatus::NoHandler)
                    .count();
                self.awaiting = self.awaiting.saturating_sub(finished);
                // Released per backlog slot (few distinct per record): (slot, events, bytes).
                let mut by_slot: Vec<(usize, u64, u64)> = Vec::new();
                for e in &entries {
                    if let Some(l) = log.live.remove(&e.event_lsn) {
                        self.ledger.done(l.trigger, e.status);
                        match by_slot.iter_mut().find(|s| s.0 == l.slot) {
                            Some(s) => (s.1, s.2) = (s.1 + 1, s.2 + l.cost),
                            None => by_slot.push((l.slot, 1, l.cost)),
                        }
                    }
                }
                for (slot, n, bytes) in by_slot {
                    self.env.release_done(slot, n, bytes);
                    self.drained += n;
                }
            }
            // Not durable: written again (the log retries its disk). A retry record is only
            // a schedule: after a restart without it the event is simply due at once.
            AppendOutcome::Unavailable => log.done_queue.extend(entries),
        }
    }

    /// The commit helper's answer for one of the pump's dead letters; `now_ms`: wall-clock
    /// milliseconds, `now`: clock nanos.
    pub fn on_dead_letter_done(
        &mut self,
        ticket: u64,
        entry: DlqEntry,
        result: Result<(), DlqError>,
        now_ms: u64,
        now: u64,
    ) {
        let Some(Ticket::DeadLetter { key, attempts }) = self.tickets.remove(&ticket) else {
            return;
        };
        let (index, lsn) = split_key(key);
        let slot = self.slot_of.get(&index).copied();
        match result {
            Ok(()) => {
                self.metrics.observe_accepted_to_dlq(
                    entry.reason,
                    now_ms.saturating_sub(entry.event.received_at_ms),
                );
                if let Some(slot) = slot {
                    self.finish(slot, lsn, DoneStatus::DeadLettered, attempts);
                }
            }
            Err(e) => {
                // Full: backpressure, not loss — the event stays pending (in its trigger's
                // backlog share) and is retried, but gives its dispatch slot back so that other
                // triggers' events keep flowing (`finish` then releases nothing).
                if let Some(slot) = slot {
                    self.unhold(slot, lsn);
                }
                if !matches!(e, DlqError::Full { .. }) {
                    eprintln!(
                        "sluice: pump: writing DLQ entry {} failed: {e}; retrying",
                        entry.id
                    );
                }
                if self.dlq_waiting.is_empty() {
                    self.dlq_retry_at = now + DLQ_RETRY_EVERY;
                }
                self.dlq_waiting.push_back((entry, attempts, key));
            }
        }
    }
}
