//! Metrics: per-core sharded counters and the Prometheus text exposition.
//!
//! - [`counter`]: the fixed families every worker core counts into without sharing a cache line
//!   ([`CoreMetrics`]), summed at scrape time ([`Metrics`]); plus [`Counter`] for counters keyed
//!   at run time (per-source refusals in `ingest::sources`).
//! - [`prom`]: the text writer ([`PromWriter`]) and [`render`], which other modules extend with
//!   their own families (WAL histograms, ring depth, per-source counters) through a callback.
//!
//! - [`auth`]: per-trigger `sluice_signature_failures_total` and `sluice_dedupe_dropped_total`.
//! - [`flow`]: per-trigger `sluice_flow_control_total{trigger,gate,decision}`.
//! - [`shared`]: the one `/metrics` rendering concurrent scrapes share.
//!
//! Counters here use `std` atomics with `Relaxed` ordering and bypass the `crate::sync` shim.

pub mod auth;
pub mod counter;
pub mod dispatch;
pub mod flow;
pub mod prom;
pub mod shared;

pub use counter::{
    status_slot, Action, ConnRefusal, CoreMetrics, Counter, Dimension, Metrics, PauseBound, Route,
    TimeoutKind, STATUS_CODES,
};
pub use prom::{render, MetricType, PromWriter};
