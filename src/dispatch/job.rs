//! Messages between the pump and the destination-owning cores.
//!
//! The pump sends each admitted event to its destination's owner core as a [`Job`] through that
//! core's bounded job ring; the core reports back through the pump's outcome ring with a
//! [`JobOutcome`]. A job is *outstanding* from admission until a terminal outcome
//! (`Delivered` or `DeadLetter`) reaches the pump; the pump admits at most `max_outstanding`
//! jobs, so each job ring (capacity `max_outstanding`) can never be full.

use crate::dispatch::dlq::DlqReason;
use crate::wal::{EventRecord, Lsn};

/// One event to deliver.
#[derive(Debug)]
pub struct Job {
    /// LSN of the event record (its identity in the WAL).
    pub lsn: Lsn,
    pub event: EventRecord,
    /// Index into `Config::destinations`.
    pub dest: usize,
    /// The attempt about to be made (1 = first).
    pub attempt: u32,
    /// Unix ms before which the attempt must not start (a recovered retry schedule); 0 = now.
    pub due_at_ms: u64,
}

/// What became of a job (or of one attempt of it).
#[derive(Debug)]
pub enum JobOutcome {
    /// A 2xx: done.
    Delivered {
        lsn: Lsn,
        attempts: u32,
        received_at_ms: u64,
    },
    /// An attempt failed retryably; the next one is due at `due_at_ms` (not terminal: the job
    /// stays with the core). The pump persists the schedule.
    RetryScheduled {
        lsn: Lsn,
        next_attempt: u32,
        due_at_ms: u64,
        last_error: String,
    },
    /// Terminal failure: the pump writes the DLQ entry, then the outcome.
    DeadLetter {
        job: Job,
        reason: DlqReason,
        attempts: u32,
        last_error: String,
    },
}

impl JobOutcome {
    pub fn lsn(&self) -> Lsn {
        match self {
            JobOutcome::Delivered { lsn, .. } | JobOutcome::RetryScheduled { lsn, .. } => *lsn,
            JobOutcome::DeadLetter { job, .. } => job.lsn,
        }
    }
}
