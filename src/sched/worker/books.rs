//! What a worker keeps track of between loop turns, kept apart from the methods that use it (so
//! that the loop's own file names no file that adds methods to the worker): deferred scrapes
//! (`budgets.rs`), and the replays whose append or whose entry's removal has not completed
//! (`replay.rs`, `stage.rs`).

use std::collections::HashMap;

use crate::dispatch::dlq::claims::ReplayClaim;

/// A worker's deferred `/metrics` scrapes.
#[derive(Debug, Default)]
pub(super) struct Edge {
    /// Connections holding a `Slot::Deferred` scrape (duplicates possible).
    pub(super) scrapes: Vec<usize>,
    /// The latest `read_at` of those connections: the rendering must start after it.
    pub(super) scrapes_read_at: u64,
}

/// This core's replays whose append has not completed, by commit ticket: bulk ones (staged as
/// `Owner::Replay`, numbered by [`Replays::next_ticket`]) with their trigger id and backlog
/// cost, and single ones (`POST /admin/dlq/{id}/replay`, an ingest ticket) holding their claim
/// only.
#[derive(Debug, Default)]
pub(super) struct Replays {
    /// The last ticket of this core's `Owner::Replay` items (appends and removals).
    seq: u64,
    /// ticket → (claim, trigger id, backlog cost).
    pub(super) by_ticket: HashMap<u64, (ReplayClaim, String, u64)>,
    /// ingest ticket → claim of a single replay.
    pub(super) single: HashMap<u64, ReplayClaim>,
    /// Replays made durable in the batch being settled, whose entries leave the DLQ next
    /// (`Worker::release_replayed`).
    pub(super) durable: Vec<ReplayClaim>,
    /// Release ticket → claim of a replay whose entry's removal is with the commit (`Item::Release`):
    /// the claim drops when the removal is back. Bound: the claims (`dispatch::dlq::claims`).
    pub(super) releasing: HashMap<u64, ReplayClaim>,
}

impl Replays {
    /// The ticket of this core's next `Owner::Replay` item.
    pub(super) fn next_ticket(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
}
