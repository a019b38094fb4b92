//! Messages between the pump and the destination-owning cores.
//!
//! The pump sends each admitted event to its destination's owner core as a [`Job`] through that
//! core's bounded job ring; the core reports back through the pump's outcome ring with a
//! [`JobOutcome`]. A job is *outstanding* from admission until a terminal outcome
//! (`Delivered` or `DeadLetter`) reaches the pump; the pump admits at most `max_outstanding`
//! jobs, so each job ring (capacity `max_outstanding`) can never be full. A flow-control gate
//! may also end a job with `Skipped` (a durable outcome: the event is done, never delivered),
//! and an event held by a gate is not outstanding meanwhile (`Held` gives its slot back,
//! `Resumed` says the dispatcher took one again; see `dispatch::flow`).
//!
//! A `batch` gate merges several jobs into one *carrier* job whose `batch` lists the members;
//! every member gets the carrier's outcome, reported under its own LSN.

use std::path::Path;
use std::sync::Arc;

use crate::dispatch::dlq::DlqReason;
use crate::net::outbound::RESPONSE_PREFIX_BYTES;
use crate::wal::{AttemptEntry, AttemptOutcome, EventRecord, Lsn};

/// Bits of an event key (a job's `lsn`: the log index above, the LSN below) that hold the LSN.
pub use crate::wal::key::{event_key, split_key, KEY_LSN_BITS};

/// One event to deliver.
#[derive(Debug)]
pub struct Job {
    /// LSN of the event record (its identity in the WAL).
    pub lsn: Lsn,
    pub event: EventRecord,
    /// Destination id: its index in every generation's `Config::destinations`
    /// (`ops::reload::ids`).
    pub dest: usize,
    /// The attempt about to be made (1 = first).
    pub attempt: u32,
    /// Unix ms before which the attempt must not start (a recovered retry schedule); 0 = now.
    pub due_at_ms: u64,
    /// Empty for one event; for a batch carrier, its members (see `dispatch::flow::batch`).
    pub batch: Vec<Job>,
    /// The directory of the log holding the event, so that a gate holding it may drop its body
    /// and read it back ([`crate::dispatch::flow::payload`]); `None`: the body is always kept.
    pub log_dir: Option<Arc<Path>>,
    /// Admitted without its trigger's cap of the dispatch window (the trigger has gates and was
    /// at its cap: `dispatch::pump` never parks such a trigger there). Once through its gates it
    /// takes the cap with a dispatch slot, in the dispatcher's slot wait, before it is sent.
    pub capless: bool,
}

impl Job {
    /// A job for one event.
    pub fn new(lsn: Lsn, event: EventRecord, dest: usize, attempt: u32, due_at_ms: u64) -> Job {
        Job {
            lsn,
            event,
            dest,
            attempt,
            due_at_ms,
            batch: Vec::new(),
            log_dir: None,
            capless: false,
        }
    }

    /// A call carrying `members` (at least one): an `application/json` `body` identified by `id`
    /// (its `webhook-id`), with the first member's LSN, destination, trigger, source and receipt
    /// time, and the largest of the members' attempt numbers.
    pub fn carrier(id: String, body: Vec<u8>, members: Vec<Job>, due_at_ms: u64) -> Job {
        debug_assert!(!members.is_empty());
        let first = &members[0];
        let event = EventRecord {
            event_id: id,
            trigger_id: first.event.trigger_id.clone(),
            source: first.event.source.clone(),
            received_at_ms: first.event.received_at_ms,
            headers: vec![("content-type".into(), b"application/json".to_vec())],
            body,
            replay_of: None,
            body_json: crate::wal::BodyJson::Undecided,
        };
        Job {
            lsn: first.lsn,
            event,
            dest: first.dest,
            attempt: members.iter().map(|m| m.attempt).max().unwrap_or(1),
            due_at_ms,
            log_dir: None,
            capless: false,
            batch: members,
        }
    }

    /// The job, naming the directory of the log that holds its event.
    pub fn from_log(mut self, dir: Arc<Path>) -> Job {
        self.log_dir = Some(dir);
        self
    }

    /// Events this job stands for: 1, or the members of a batch.
    pub fn events(&self) -> usize {
        self.batch.len().max(1)
    }

    /// The LSNs of the events this job stands for.
    pub fn lsns(&self) -> Vec<Lsn> {
        if self.batch.is_empty() {
            vec![self.lsn]
        } else {
            self.batch.iter().map(|m| m.lsn).collect()
        }
    }

    /// The jobs of the events this job stands for (itself, or the batch members).
    pub fn into_members(self) -> Vec<Job> {
        if self.batch.is_empty() {
            vec![self]
        } else {
            self.batch
        }
    }
}

/// What became of a job (or of one attempt of it).
#[derive(Debug)]
pub enum JobOutcome {
    /// A 2xx: done.
    Delivered {
        lsn: Lsn,
        attempts: u32,
        received_at_ms: u64,
        /// The attempt that delivered it.
        attempt: AttemptFacts,
    },
    /// An attempt failed retryably; the next one is due at `due_at_ms` (not terminal: the job
    /// stays with the core). The pump persists the schedule.
    RetryScheduled {
        lsn: Lsn,
        next_attempt: u32,
        due_at_ms: u64,
        last_error: String,
        /// The attempt that failed.
        attempt: AttemptFacts,
    },
    /// Terminal failure: the pump writes the DLQ entry, then the outcome.
    DeadLetter {
        /// Boxed: a cold path, and a `Job` would make every outcome in the rings that large.
        job: Box<Job>,
        reason: DlqReason,
        attempts: u32,
        last_error: String,
        /// The attempt that ended it; `None` when none was made this time (an open circuit
        /// failing it fast, a request that could not be encoded).
        attempt: Option<AttemptFacts>,
    },
    /// Not terminal: a flow-control gate holds the event; the pump gives its
    /// `max_outstanding` slot back (the event stays pending). Sent again when another gate
    /// holds it. `gate`: the gate's name (`batch`, `debounce`, …).
    Held { lsn: Lsn, gate: &'static str },
    /// Not terminal: the gates released the event (a batch: its carrier, under its first
    /// member's key) and the dispatcher took a `max_outstanding` slot for it, and one of the
    /// window cap of trigger slot `window`; the pump gives both back at its terminal outcome.
    Resumed { lsn: Lsn, window: usize },
    /// Terminal: a flow-control gate decided the event is not delivered. The pump writes a
    /// `Done` entry with status `Skipped` and the gate's reason.
    Skipped {
        lsn: Lsn,
        reason: SkipReason,
        attempts: u32,
    },
}

/// The facts of one attempt, carried in its outcome to the pump of the event's log, which
/// records them (kind 8, `wal::AttemptsRecord`) in its next group commit. 56 bytes; one
/// allocation per attempt only when the response had a body (its prefix, at most
/// [`RESPONSE_PREFIX_BYTES`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptFacts {
    /// Wall-clock end of the attempt, Unix milliseconds.
    pub at_ms: u64,
    /// The destination's id.
    pub destination: u32,
    pub outcome: AttemptOutcome,
    /// Microseconds from the attempt's start to its end (saturating).
    pub latency_us: u32,
    /// The `Retry-After` the response carried, milliseconds (saturating).
    pub retry_after_ms: Option<u32>,
    /// The first bytes of the response body (`net::outbound::RESPONSE_PREFIX_BYTES` at most).
    pub response_prefix: Vec<u8>,
}

// The pool keeps no more of a body than an attempt entry can hold.
const _: () = assert!(RESPONSE_PREFIX_BYTES <= crate::wal::MAX_RESPONSE_PREFIX_BYTES);

impl AttemptFacts {
    /// The log entry for attempt number `attempt` of the event at `lsn`.
    pub fn entry(self, lsn: Lsn, attempt: u32) -> AttemptEntry {
        AttemptEntry {
            event_lsn: lsn,
            attempt,
            at_ms: self.at_ms,
            destination: self.destination,
            outcome: self.outcome,
            latency_us: self.latency_us,
            retry_after_ms: self.retry_after_ms,
            response_prefix: self.response_prefix,
        }
    }
}

/// Why a gate skipped an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// `rate_limit`: the window was full.
    RateLimited,
    /// `debounce`: a later event for the same key superseded it.
    Debounced,
    /// `singleton`: a delivery for the same key was in progress.
    SingletonActive,
}

impl SkipReason {
    /// The `Done` status that records this reason.
    pub fn done_status(self) -> crate::wal::DoneStatus {
        match self {
            SkipReason::RateLimited => crate::wal::DoneStatus::SkippedRateLimited,
            SkipReason::Debounced => crate::wal::DoneStatus::SkippedDebounced,
            SkipReason::SingletonActive => crate::wal::DoneStatus::SkippedSingletonActive,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::RateLimited => "rate_limited",
            SkipReason::Debounced => "debounced",
            SkipReason::SingletonActive => "singleton_active",
        }
    }
}

impl JobOutcome {
    pub fn lsn(&self) -> Lsn {
        match self {
            JobOutcome::Delivered { lsn, .. }
            | JobOutcome::RetryScheduled { lsn, .. }
            | JobOutcome::Skipped { lsn, .. }
            | JobOutcome::Held { lsn, .. }
            | JobOutcome::Resumed { lsn, .. } => *lsn,
            JobOutcome::DeadLetter { job, .. } => job.lsn,
        }
    }
}

/// A job for `lsn` carrying a minimal event `id` of trigger `t` (source `p`, body `{}`): the
/// tests' fixture.
#[cfg(test)]
pub(crate) fn test_job(id: &str, lsn: Lsn) -> Job {
    let event = EventRecord {
        event_id: id.into(),
        trigger_id: "t".into(),
        source: "p".into(),
        received_at_ms: 0,
        headers: vec![],
        body: b"{}".to_vec(),
        replay_of: None,
        body_json: Default::default(),
    };
    Job::new(lsn, event, 0, 1, 0)
}
