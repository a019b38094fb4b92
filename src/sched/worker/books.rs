//! What a worker keeps track of between loop turns, kept apart from the methods that use it (so
//! that the loop's own file names no file that adds methods to the worker): deferred scrapes
//! (`budgets.rs`). The online replays' books are `dispatch::dlq::online`'s.

/// A worker's deferred `/metrics` scrapes.
#[derive(Debug, Default)]
pub(super) struct Edge {
    /// Connections holding a `Slot::Deferred` scrape (duplicates possible).
    pub(super) scrapes: Vec<usize>,
    /// The latest `read_at` of those connections: the rendering must start after it.
    pub(super) scrapes_read_at: u64,
}
