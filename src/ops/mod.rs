//! Operating a running sluice: the dashboard (`GET /ui`, `GET /api/v1/state`) and
//! hot reload of the configuration (SIGHUP, `POST /admin/reload`).
//!
//! Both read or publish process-wide state only through shared atomics and one published
//! `Arc<Config>` (see [`reload`]); neither blocks a core's loop.
//!
//! - [`view`]: [`view::OpsView`], the narrow borrowed view of a running node that the runtime
//!   builds and hands to the dashboard, `/readyz` and `/metrics`; `ops` never names the
//!   runtime's types (`sched` → `ops`, one way).
//! - [`lifecycle`]: the phase (`/readyz`) and the drain's cells, owned by the runtime's
//!   shared state, read here.

pub mod dashboard;
mod dashboard_backlog;
pub mod lifecycle;
pub mod reload;
mod reload_diff;
pub mod reload_ids;
pub mod view;
