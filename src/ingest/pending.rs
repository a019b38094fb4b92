//! An admitted event waiting to be durable before its `202`: the record the core's ingest front
//! (`ingest::front`) keeps in its connection's response queue (`net::conn::Slot::Pending`) until the commit answers. What the
//! answer says is the pipeline's [`PendingReply`]; the rest is the loop's bookkeeping.

use crate::ingest::pipeline::PendingReply;
use crate::wal::AppendRequest;

/// An admitted event waiting to be durable before its 202.
#[derive(Debug)]
pub struct PendingIngest {
    pub ticket: u64,
    /// The core keeps something of its own for the ticket (`ingest::stage::Holds::admitted`: a
    /// DLQ replay's claim), ended by `Holds::settled`; false for every client's event.
    pub held: bool,
    /// `Some` while waiting for room in the core's commit batch; `None` once staged.
    pub offer: Option<AppendRequest>,
    /// When waiting for room stops and the request is refused (`wal_busy`).
    pub offer_deadline: u64,
    pub keep_alive: bool,
    /// The answer's inputs (event id, trigger, source, backlog cost, replayed DLQ entry).
    pub reply: PendingReply,
}
