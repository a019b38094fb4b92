//! The ops view: what the operator's pages read of a running node — the dashboard
//! (`/api/v1/state`, [`crate::ops::dashboard`]), `/readyz` and the `/metrics` exposition — as
//! one narrow, borrowed type. The runtime builds it from its shared state on demand
//! (`sched::state::Shared::ops_view`, a handful of pointer copies) and hands it over; `ops`
//! never names the runtime's types, so the dependency runs one way (`sched` → `ops`).
//!
//! Everything here is read through shared atomics, `Relaxed`, cell by cell: a view is a
//! snapshot that may be one event off between two cells, never blocks a core and writes
//! nothing but `/readyz`'s saturation hysteresis ([`Backlog::is_saturated`]).

#![forbid(unsafe_code)]

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::cluster::Cluster;
use crate::config::Config;
use crate::dispatch::metrics::DispatchMetrics;
use crate::dispatch::trigger_caps::TriggerCaps;
use crate::ingest::backlog::Backlog;
use crate::ingest::bucket::Admission;
use crate::ingest::sources::SourceTable;
use crate::metrics::Metrics;
use crate::net::budget::BodyBudget;
use crate::ops::lifecycle::{Lifecycle, Phase};
use crate::ops::reload::Published;
use crate::sync::clock::Clock;
use crate::wal::WalShared;

/// The node's state as the ops pages read it (module docs).
#[derive(Clone, Copy)]
pub struct OpsView<'a> {
    /// The start-up configuration (`server.ui`, the admin token); the running generation is
    /// `reload.current()`.
    pub config: &'a Config,
    pub clock: &'a dyn Clock,
    pub lifecycle: &'a Lifecycle,
    pub reload: &'a Published,
    /// The per-core counter shards (summed when read).
    pub metrics: &'a Metrics,
    /// The cells each destination's owner core publishes, the pump's and the flow gates'.
    pub dispatch: &'a DispatchMetrics,
    pub caps: &'a TriggerCaps,
    pub backlog: &'a Backlog,
    pub admission: &'a Admission,
    pub sources: &'a SourceTable,
    pub body_budget: &'a BodyBudget,
    /// The published state of every log of this run, by log index (own logs first).
    pub wal: &'a [Arc<WalShared>],
    pub cluster: &'a Cluster,
}

impl std::fmt::Debug for OpsView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpsView")
            .field("phase", &self.lifecycle.phase())
            .field("logs", &self.wal.len())
            .finish_non_exhaustive()
    }
}

impl OpsView<'_> {
    /// True while every log accepts writes.
    pub fn wal_healthy(&self) -> bool {
        self.wal.iter().all(|w| w.is_healthy())
    }

    /// Logs whose checkpoint writes have failed for `wal::checkpoint::STALE_AFTER`.
    pub fn wal_checkpoint_stale_logs(&self) -> usize {
        self.wal
            .iter()
            .filter(|w| w.checkpoint_stale.load(Relaxed))
            .count()
    }

    /// Records appended and reported durable, over all logs.
    pub fn wal_appends(&self) -> u64 {
        self.wal.iter().map(|l| l.appends_total.load(Relaxed)).sum()
    }

    /// `/readyz`: `None` when ready, else the reason for 503.
    pub fn not_ready_reason(&self) -> Option<&'static str> {
        match self.lifecycle.phase() {
            Phase::Starting => Some("starting"),
            Phase::Draining => Some("draining"),
            Phase::Ready if !self.wal_healthy() => Some("wal_unavailable"),
            Phase::Ready if self.wal_checkpoint_stale_logs() > 0 => Some("wal_checkpoint_failing"),
            Phase::Ready if self.backlog.is_saturated() => Some("saturated"),
            Phase::Ready => self.cluster.not_ready_reason(),
        }
    }
}
