//! The state of `ordering` (`super::ordering`): a key stopped by a dead letter, the engine's
//! watch on the DLQ, and a waiter's place id (a leaf: the engine's files import it).
#![forbid(unsafe_code)]

use std::sync::Arc;

use crate::dispatch::dlq::DlqStore;
use crate::dispatch::flow::spec::ConcurrencyGate;
use crate::dispatch::job::Job;

/// How often the DLQ's removal log is read while a key is stopped (100 ms).
pub const STOP_POLL: u64 = 100_000_000;
/// How often the DLQ directory is read for discards made beside the server (1 s).
pub const REFRESH_EVERY: u64 = 1_000_000_000;
/// How often the ordering metrics are gathered (1 s).
pub const PUBLISH_EVERY: u64 = 1_000_000_000;
/// Names of stopped keys published per trigger.
pub const NAMES_SHOWN: usize = 8;

/// A key of an `ordering` gate with `on_exhausted = "hold"` stopped by a dead letter.
#[derive(Debug, Clone)]
pub struct Stop {
    /// The DLQ entry id (the dead-lettered event's id): a replay of it goes first.
    pub entry: String,
    /// The entry left the DLQ without a replay of it in line: the order time (of the moment it
    /// was seen gone) the horizon must pass before the key moves on.
    pub gone: Option<u64>,
}

/// The engine's view of the DLQ, for stopped keys.
#[derive(Debug)]
pub struct DlqWatch {
    pub store: Arc<DlqStore>,
    /// The next removal number to read ([`DlqStore::removed_since`]).
    pub next: u64,
    pub poll_at: u64,
    pub refresh_at: u64,
}

/// `g`'s place id for `p`: its own event id, or for an `ordering` gate the replayed event's.
pub fn place_id<'a>(g: &ConcurrencyGate, job: &'a Job) -> &'a str {
    match (&g.ordering, &job.event.replay_of) {
        (Some(_), Some(original)) => original,
        _ => &job.event.event_id,
    }
}
