//! A core's handler side: what a request may touch of its core, lent for one call of the
//! core's server ([`Core`], `lent.rs`; the loop lends it, `sched::worker`). The server's handler is
//! `ingest::serve::Serve` (routing, ingest through the core's front, the body gate); [`Core`]
//! is what it asks the core for (`ingest::serve::Rest`): the reload to follow before routing,
//! the node and the stage, the drain, and every route but ingest, as `ops::routes` plans it
//! (`routes.rs`) — answered at once, or handed on:
//!
//! - ingest's staging into the core's commit batch and the single replays' claims it holds
//!   (`stage.rs`);
//! - the DLQ's admin routes, decided by `dispatch::dlq::online`, with what the core lends them
//!   (`replay.rs`);
//! - operator reads to the reader threads, and `/metrics` scrapes to one rendering per turn
//!   (`reads.rs`); the loop fills both when they are ready ([`Core::answer_reads`],
//!   [`Core::answer_scrapes`]).
//!
//! Nothing here waits or owns a thread: the loop is `sched::worker`'s, and a handler never
//! reaches into it.

mod lent;
mod reads;
mod replay;
mod routes;
mod stage;

pub use lent::{Core, Scrapes};
pub use replay::CoreReplayPort;
pub use stage::{CoreStage, ReplayHolds};
