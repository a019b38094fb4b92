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

use crate::replication::state::{Refuse, ReplicationState};

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
    /// `[replication]`'s state, when replication is on.
    pub replication: Option<&'a ReplicationState>,
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

    /// Why replication refuses new events now, if it is on and does.
    pub fn replication_refusal(&self) -> Option<Refuse> {
        self.replication.and_then(ReplicationState::refusal)
    }

    /// `/readyz`: `None` when ready, else the reason for 503.
    pub fn not_ready_reason(&self) -> Option<&'static str> {
        match self.lifecycle.phase() {
            Phase::Starting => Some("starting"),
            Phase::Draining => Some("draining"),
            Phase::Ready if !self.wal_healthy() => Some("wal_unavailable"),
            Phase::Ready if self.replication_refusal().is_some() => {
                self.replication_refusal().map(|r| r.as_str())
            }
            Phase::Ready if self.wal_checkpoint_stale_logs() > 0 => Some("wal_checkpoint_failing"),
            Phase::Ready if self.backlog.is_saturated() => Some("saturated"),
            Phase::Ready => self.cluster.not_ready_reason(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Overrides;
    use crate::ingest::bucket::BucketParams;
    use crate::ingest::router::Router;
    use crate::ingest::Guards;
    use crate::sync::clock::ManualClock;

    /// The handles a view borrows, built without the runtime.
    struct Parts {
        config: Arc<Config>,
        clock: ManualClock,
        lifecycle: Lifecycle,
        reload: Published,
        metrics: Metrics,
        dispatch: DispatchMetrics,
        caps: TriggerCaps,
        backlog: Backlog,
        admission: Admission,
        sources: SourceTable,
        body_budget: BodyBudget,
        wal: Vec<Arc<WalShared>>,
        cluster: Cluster,
    }

    fn parts() -> Parts {
        let config = Arc::new(Config::load(None, &Overrides::default()).unwrap());
        let triggers = config.ingest_triggers();
        let guards = Guards::new(&triggers, config.ingest.dedupe_max_keys);
        let router = Router::new(&triggers, config.ingest.default_route);
        let bucket = BucketParams::new(10, 10).unwrap();
        Parts {
            reload: Published::new(config.clone(), router, &guards),
            config,
            clock: ManualClock::new(0),
            lifecycle: Lifecycle::new(),
            metrics: Metrics::new(1),
            dispatch: DispatchMetrics::new(&[]),
            caps: TriggerCaps::new(&[], "default", 16, 0),
            backlog: Backlog::new(10, 1 << 20, 0.9, 0.7),
            admission: Admission::new(bucket, 0),
            sources: SourceTable::new(4, bucket),
            body_budget: BodyBudget::new(1 << 20),
            wal: vec![Arc::new(WalShared::new()), Arc::new(WalShared::new())],
            cluster: Cluster::new(Vec::new()),
        }
    }

    impl Parts {
        fn view(&self) -> OpsView<'_> {
            OpsView {
                config: &self.config,
                clock: &self.clock,
                lifecycle: &self.lifecycle,
                reload: &self.reload,
                metrics: &self.metrics,
                dispatch: &self.dispatch,
                caps: &self.caps,
                backlog: &self.backlog,
                admission: &self.admission,
                sources: &self.sources,
                body_budget: &self.body_budget,
                wal: &self.wal,
                cluster: &self.cluster,
                replication: None,
            }
        }
    }

    #[test]
    fn readiness_names_the_first_reason_that_holds() {
        let p = parts();
        assert_eq!(p.view().not_ready_reason(), Some("starting"));
        p.lifecycle.set_phase(Phase::Ready);
        assert_eq!(p.view().not_ready_reason(), None);
        for _ in 0..9 {
            p.backlog.reserve_for("default", 1).unwrap();
        }
        assert_eq!(p.view().not_ready_reason(), Some("saturated"));
        p.wal[1].checkpoint_stale.store(true, Relaxed);
        assert_eq!(p.view().wal_checkpoint_stale_logs(), 1);
        assert_eq!(p.view().not_ready_reason(), Some("wal_checkpoint_failing"));
        p.wal[0].healthy.store(false, Relaxed);
        assert_eq!(p.view().not_ready_reason(), Some("wal_unavailable"));
        p.lifecycle.begin_drain(0, std::time::Duration::ZERO);
        assert_eq!(p.view().not_ready_reason(), Some("draining"));
    }

    #[test]
    fn the_dashboard_state_is_read_from_the_view_alone() {
        let p = parts();
        p.lifecycle.set_phase(Phase::Ready);
        p.wal[0].appends_total.fetch_add(3, Relaxed);
        p.wal[1].appends_total.fetch_add(4, Relaxed);
        p.backlog.reserve_for("default", 100).unwrap();
        let state = crate::ops::dashboard::state(&p.view());
        assert_eq!(state["phase"], "ready");
        assert_eq!(state["config_generation"], 1);
        assert_eq!(state["wal"]["healthy"], true);
        assert_eq!(state["wal"]["appends"], 7);
        assert_eq!(state["backlog"]["events"], 1);
        assert_eq!(state["backlog"]["bytes"], 100);
    }
}
