//! The runtime: one thread per core (one event loop each), each core's commit helper thread, and
//! shutdown.
//!
//! - [`runtime`] builds the node (recover the logs, build the shared state, bind the listeners,
//!   wire the cores), starts everything, waits for SIGTERM/SIGINT and drains; [`error`] is why
//!   it could not.
//! - [`worker`] is one core's event loop over the `net::io` reactor (mio or io_uring): its own
//!   `SO_REUSEPORT` listener, its own bounded connection table, per-core metrics and
//!   source-bucket cache; [`handler`] is what a request may touch of its core, lent by the loop
//!   for each call of its server (the routes that are not ingest, the staging of the front and
//!   the replays, the answers that come later).
//! - [`state`] is what the cores share, grouped by role: the ingest and dispatch contexts
//!   ([`context`], each built by a small constructor from the config), the ops view it lends
//!   to `ops` (`ops::view::OpsView`), and the node-wide parts (config, clock, logs' published
//!   state, metric shards, lifecycle).
//! - [`commit`] is a core's commit helper thread and rings (the batch is `wal::group`'s);
//!   [`pump`] assembles a core's pump shell (`dispatch::pump::shell`) from the shared state;
//!   [`logs`] the logs a run opens and which core owns each.
//! - [`alloc`] sets the allocator up so that large request bodies are returned when freed.
//! - [`readers`] are the threads that answer operator reads (event lookups and lists, the
//!   ledger, the dashboard's state) off the core loops; [`read_board`] their bound and counters.
//! - [`wiring`] is the rings and wakers between the cores, wired once at start-up.
//! - [`exposition`] renders `/metrics` from that state (below both the runtime and the worker).
//!
//! Dependencies go one way: `runtime` → `worker` → (`commit`, `pump`, `exposition`, `state`) →
//! `context` → `ingest`, `wal`, `dispatch`; `sched` → `ops`, never back; `.ci/structure.py`
//! checks the edges.

pub mod alloc;
pub mod commit;
pub mod context;
pub mod error;
pub mod exposition;
pub mod handler;
pub mod logs;
pub mod pump;
pub mod read_board;
pub mod readers;
pub mod replicated;
pub mod runtime;
pub mod state;
pub mod thread_policy;
pub mod wiring;
pub mod worker;
