//! State shared by all workers: lifecycle phase, config, admission, WAL status, metrics.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use crate::config::Config;
use crate::dispatch::dlq::DlqStore;
use crate::dispatch::metrics::DispatchMetrics;
use crate::dispatch::trigger_caps::TriggerCaps;
use crate::ingest::backlog::Backlog;
use crate::ingest::bucket::Admission;
use crate::ingest::router::Router;
use crate::ingest::schedule::ReturnSchedule;
use crate::ingest::sources::SourceTable;
use crate::ingest::Guards;
use crate::metrics::shared::SharedRendering;
use crate::metrics::Metrics;
use crate::net::budget::BodyBudget;
use crate::sync::clock::Clock;
use crate::wal::WalShared;

/// Lifecycle of the server, as `/readyz` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Starting = 0,
    Ready = 1,
    Draining = 2,
}

/// Everything the workers share. Read-mostly; the only writes are the phase (main thread) and
/// the atomics inside `admission`, `wal` and `metrics`.
#[derive(Debug)]
pub struct Shared {
    pub config: Arc<Config>,
    pub clock: Arc<dyn Clock>,
    pub router: Router,
    pub admission: Admission,
    pub sources: Arc<SourceTable>,
    /// Per-trigger signature verifiers and the dedupe index.
    pub guards: Guards,
    /// The published state of every log of this run, by log index (own logs first).
    pub wal: Vec<Arc<WalShared>>,
    pub metrics: Arc<Metrics>,
    /// The durable-queue bound (ingest reserves, the pump releases).
    pub backlog: Arc<Backlog>,
    /// Each trigger's cap of the dispatch window (the pumps and dispatchers take and give).
    pub caps: Arc<TriggerCaps>,
    pub metrics_dispatch: Arc<DispatchMetrics>,
    /// The dead-letter queue: the commit helpers write it, the admin routes read and remove.
    pub dlq: Arc<DlqStore>,
    /// The in-flight body budget (`server.max_inflight_body_bytes`), one for all cores.
    pub body_budget: crate::sync::Arc<BodyBudget>,
    /// The `/metrics` rendering shared by concurrent scrapes (`metrics::shared`).
    pub scrapes: SharedRendering,
    /// `Retry-After` of `queue_full` / `ingest_saturated` refusals.
    pub returns: ReturnSchedule,
    /// The configuration generation cores pick up at the top of a turn (`ops::reload`).
    /// `config` and `router` above stay the start-up generation: what a reload cannot change.
    pub reload: crate::ops::reload::Published,
    /// The cores' I/O backend, resolved at start-up from `server.io` (`net::io::select`).
    pub io_backend: crate::net::io::Backend,
    /// Destination budgets shared with other nodes through Redis.
    pub cluster: crate::cluster::Cluster,
    // Written by the main thread at start and at shutdown; read by workers per `/readyz` and per
    // loop turn. `Relaxed` is enough: the phase carries no data with it, and a worker that sees
    // `Draining` one turn late only delays its drain by one poll timeout.
    phase: AtomicU8,
    // When accepting stops (clock nanos): `u64::MAX` until the drain begins, then the signal's
    // time plus `server.drain_grace`. Written once by the main thread ([`Shared::begin_drain`]),
    // read by workers and the pump per loop turn. `Relaxed` is enough for the same reason as
    // `phase`: it carries no data, and a reader that sees it one turn late stops one turn late.
    stop_accepting_at: AtomicU64,
    // When a core last read a client's bytes during the drain (clock nanos; 0: not yet). The
    // drain ends idle connections only once the whole node has been quiet
    // (`sched/worker/drain.rs`). Written by the cores during the drain only; `Relaxed`: it orders
    // nothing, and a core that sees it a turn late ends a connection a sweep later.
    drain_input_at: AtomicU64,
}

/// The triggers' caps of the dispatch window: the triggers configured at start, of which
/// those with a handler take part.
fn trigger_caps(config: &Config) -> TriggerCaps {
    let ids: Vec<&str> = config.triggers.iter().map(|t| t.id.as_str()).collect();
    let with_handler = config.triggers.iter().filter(|t| t.handler.is_some());
    TriggerCaps::new(
        &ids,
        crate::ingest::router::DEFAULT_TRIGGER_ID,
        config.pump.max_outstanding,
        with_handler.count(),
    )
}

impl Shared {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: Arc<Config>,
        clock: Arc<dyn Clock>,
        router: Router,
        admission: Admission,
        sources: Arc<SourceTable>,
        guards: Guards,
        wal: Vec<Arc<WalShared>>,
        metrics: Arc<Metrics>,
        backlog: Arc<Backlog>,
        metrics_dispatch: Arc<DispatchMetrics>,
        dlq: Arc<DlqStore>,
    ) -> Shared {
        let budget = BodyBudget::new(config.server.max_inflight_body_bytes);
        let body_budget = crate::sync::Arc::new(budget);
        let returns = ReturnSchedule::new(config.ingest.refill_per_sec);
        let caps = Arc::new(trigger_caps(&config));
        Shared {
            caps,
            cluster: crate::cluster::Cluster::new(config.shared_destinations()),
            returns,
            reload: crate::ops::reload::Published::new(config.clone(), router.clone(), &guards)
                .with_flow_cells(Arc::clone(&metrics_dispatch))
                .with_backlog(Arc::clone(&backlog)),
            config,
            clock,
            router,
            admission,
            sources,
            guards,
            wal,
            metrics,
            backlog,
            body_budget,
            scrapes: SharedRendering::default(),
            io_backend: crate::net::io::Backend::Mio,
            metrics_dispatch,
            dlq,
            phase: AtomicU8::new(Phase::Starting as u8),
            stop_accepting_at: AtomicU64::new(u64::MAX),
            drain_input_at: AtomicU64::new(0),
        }
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            0 => Phase::Starting,
            1 => Phase::Ready,
            _ => Phase::Draining,
        }
    }

    pub fn set_phase(&self, p: Phase) {
        self.phase.store(p as u8, Ordering::Relaxed);
    }

    /// True while some log's checkpoint writes have failed for `wal::checkpoint::STALE_AFTER`.
    pub fn wal_checkpoint_stale(&self) -> bool {
        self.wal_checkpoint_stale_logs() > 0
    }

    /// Logs whose checkpoint writes have failed for `wal::checkpoint::STALE_AFTER`.
    pub fn wal_checkpoint_stale_logs(&self) -> usize {
        self.wal
            .iter()
            .filter(|w| w.checkpoint_stale.load(Ordering::Relaxed))
            .count()
    }

    /// True while every log accepts writes.
    pub fn wal_healthy(&self) -> bool {
        self.wal.iter().all(|w| w.is_healthy())
    }

    /// SIGTERM/SIGINT: `/readyz` says `draining` from now on; requests are still accepted and
    /// served until `now + grace`, then [`Shared::accepting_stopped`] turns true and the workers
    /// drain (stop accepting, finish what they have, exit).
    pub fn begin_drain(&self, now: u64, grace: std::time::Duration) {
        let grace = u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX);
        self.stop_accepting_at
            .store(now.saturating_add(grace), Ordering::Relaxed);
        self.set_phase(Phase::Draining);
    }

    /// A core read a client's bytes at `now` during the drain.
    pub fn note_drain_input(&self, now: u64) {
        self.drain_input_at.fetch_max(now, Ordering::Relaxed);
    }

    /// When a core last read a client's bytes during the drain (0: not yet).
    pub fn drain_input_at(&self) -> u64 {
        self.drain_input_at.load(Ordering::Relaxed)
    }

    /// Has the drain grace ended (listeners closed, new work held back)?
    pub fn accepting_stopped(&self, now: u64) -> bool {
        now >= self.stop_accepting_at.load(Ordering::Relaxed)
    }

    /// `/readyz`: `None` when ready, else the reason for 503.
    pub fn not_ready_reason(&self) -> Option<&'static str> {
        match self.phase() {
            Phase::Starting => Some("starting"),
            Phase::Draining => Some("draining"),
            Phase::Ready if !self.wal_healthy() => Some("wal_unavailable"),
            Phase::Ready if self.wal_checkpoint_stale() => Some("wal_checkpoint_failing"),
            Phase::Ready if self.backlog.is_saturated() => Some("saturated"),
            Phase::Ready if self.cluster.not_ready_reason().is_some() => {
                self.cluster.not_ready_reason()
            }
            Phase::Ready => None,
        }
    }
}
