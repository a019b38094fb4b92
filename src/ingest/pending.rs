//! An admitted event waiting to be durable before its `202`: the record the worker keeps in its
//! connection's response queue (`net::conn::Slot::Pending`) until the commit answers.

use std::sync::Arc;

use crate::ingest::sources::SourceEntry;
use crate::wal::AppendRequest;

/// An admitted event waiting to be durable before its 202.
#[derive(Debug)]
pub struct PendingIngest {
    pub ticket: u64,
    /// `Some` while waiting for room in the core's commit batch; `None` once staged.
    pub offer: Option<AppendRequest>,
    /// When waiting for room stops and the request is refused (`wal_busy`).
    pub offer_deadline: u64,
    pub event_id: String,
    pub trigger_id: String,
    /// The source's entry (per-source refusal accounting).
    pub source: Arc<SourceEntry>,
    pub keep_alive: bool,
    /// The share of the durable backlog reserved for this event (released if it fails).
    pub cost: u64,
    /// Set for an admin replay: the DLQ entry to remove once the new event is durable.
    pub replay_of: Option<String>,
}
