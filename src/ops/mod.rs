//! Operating a running sluice: the dashboard (`GET /ui`, `GET /api/v1/state`) and
//! hot reload of the configuration (SIGHUP, `POST /admin/reload`).
//!
//! Both read or publish process-wide state only through shared atomics and one published
//! `Arc<Config>` (see [`reload`]); neither blocks a core's loop.

pub mod dashboard;
mod dashboard_backlog;
pub mod reload;
mod reload_diff;
pub mod reload_ids;
