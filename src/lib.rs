//! sluice: a webhook ingest and dispatch server with end-to-end backpressure.
//!
//! The architecture, the backpressure chain and the module map are described in `DESIGN.md`
//! (kept beside the README). In brief: one thread per core (`sched`) runs an event loop with its
//! own listener and connections; the sans-IO HTTP/1.1 codec (`net::http`) turns bytes into
//! requests; `ingest` routes them and admits them through token buckets; an accepted event is
//! staged in the core's next batch, which the core's commit helper writes and syncs to the
//! core's own log (`wal`, one log per core); only then does the core answer 202. Durable events
//! go from memory to the core's pump and on to the dispatcher of the destination's owner core
//! (`dispatch`), through lock-free rings between cores (`ring`).
#![warn(missing_debug_implementations)]

pub mod cluster;
pub mod config;
pub mod dispatch;
pub mod ingest;
pub mod metrics;
pub mod net;
pub mod ops;
pub mod replication;
pub mod ring;
pub mod sched;
pub mod sign;
pub mod storage;
pub mod sync;
pub mod tools;
pub mod wal;
