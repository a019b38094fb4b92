//! The runtime: one thread per core (one event loop each), each core's commit helper thread, and
//! shutdown.
//!
//! - [`runtime`] starts everything, waits for SIGTERM/SIGINT and drains.
//! - [`worker`] is one core's event loop: its own `mio::Poll`, its own `SO_REUSEPORT` listener,
//!   its own bounded connection table, per-core metrics and source-bucket cache.
//! - [`state`] is the little shared state: lifecycle phase and the handles every worker needs.
//! - [`alloc`] sets the allocator up so that large request bodies are returned when freed.
//! - [`exposition`] renders `/metrics` from that state (below both the runtime and the worker).
//!
//! Dependencies go one way: `runtime` → `worker` → (`commit`, `pump`, `exposition`, `state`) →
//! `ingest`, `wal`, `dispatch`; `.ci/structure.py` checks the edges.

pub mod alloc;
pub mod commit;
pub mod context;
pub mod error;
pub mod exposition;
pub mod logs;
pub mod pump;
pub mod runtime;
pub mod state;
pub mod thread_policy;
pub mod worker;
