//! Operating a running sluice: the dashboard (`GET /ui`, `GET /api/v1/state`,
//! `GET /api/v1/ledger`), one event's status and attempts (`GET /api/v1/events/{id}`,
//! [`events_api`]) and hot reload of the configuration (SIGHUP, `POST /admin/reload`).
//!
//! The dashboard and reload read or publish process-wide state only through shared atomics and
//! one published `Arc<Config>` (see [`reload`]); neither blocks a core's loop. An event lookup
//! or list reads the log's files within a bound ([`events_api`]); the runtime runs it, with the
//! ledger and the state, on its reader thread (`sched::readers`), never on a core's loop.
//!
//! - [`view`]: [`view::OpsView`], the narrow borrowed view of a running node that the runtime
//!   builds and hands to the dashboard, the event API, `/readyz` and `/metrics`; `ops` never
//!   names the runtime's types (`sched` → `ops`, one way).
//! - [`routes`]: what a core does with a request that is not an ingest — the probes, the admin
//!   gate and the router's refusals answered at once, the rest handed on.
//! - [`lifecycle`]: the phase (`/readyz`) and the drain's cells, owned by the runtime's
//!   shared state, read here.
//! - [`restore`]: a node's data dir restored from the JetStream stream (`sluice replication
//!   restore`, and the start of a node with an empty data dir): the dead-letter side of
//!   `replication::restore`.

pub mod dashboard;
pub mod events_api;
pub mod lifecycle;
pub mod reload;
pub mod restore;
pub mod routes;
pub mod view;
