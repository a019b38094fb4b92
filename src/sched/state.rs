//! The state the cores share, grouped by role: one [`Shared`] per node, behind one `Arc`.
//!
//! - [`Shared::ingest`]: the ingest role's handles ([`IngestContext`]);
//! - [`Shared::dispatch`]: the pumps' and dispatchers' ([`DispatchContext`]);
//! - [`Shared::ops_view`]: the narrow view the dashboard, `/readyz` and `/metrics` read
//!   ([`OpsView`], `ops`'s own type: `ops` never names this one);
//! - node-wide: the start-up configuration and the clock (public: immutable, read by every
//!   role), the logs' published state, the metric shards, the shared `/metrics` rendering, the
//!   published configuration generation, the I/O backend and the lifecycle (phase, drain).
//!
//! Built once by the runtime (`sched::runtime`, through the constructors of `sched::context`)
//! before any core starts; read-mostly afterwards. The only writes are the lifecycle (main
//! thread, and the cores' drain input) and the atomics inside the handles.

use std::sync::Arc;

use crate::config::Config;
use crate::ingest::router::Router;
use crate::metrics::shared::SharedRendering;
use crate::metrics::Metrics;
use crate::ops::lifecycle::Lifecycle;
pub use crate::ops::lifecycle::Phase;
use crate::ops::reload::Published;
use crate::ops::view::OpsView;
use crate::replication::mirror::Mirror;
use crate::replication::state::ReplicationState;
use crate::sched::context::{DispatchContext, IngestContext};
use crate::sched::replicated::Replicate;
use crate::sync::clock::Clock;
use crate::wal::WalShared;

/// The node-wide parts of [`Shared`] that are not a role's.
#[derive(Debug)]
pub struct NodeParts {
    /// The start-up routes (the first published generation's).
    pub router: Router,
    /// The published state of every log of this run, by log index (own logs first).
    pub wal: Vec<Arc<WalShared>>,
    pub metrics: Arc<Metrics>,
    /// The cores' I/O backend, resolved at start-up from `server.io` (`net::io::select`).
    pub io_backend: crate::net::io::Backend,
    /// `[replication]`'s mirror thread, when replication is on.
    pub mirror: Option<Mirror>,
}

/// Everything the cores share (module docs).
#[derive(Debug)]
pub struct Shared {
    /// The start-up configuration: what a reload cannot change (the running generation is
    /// [`Shared::reload`]'s).
    pub config: Arc<Config>,
    pub clock: Arc<dyn Clock>,
    ingest: IngestContext,
    dispatch: DispatchContext,
    wal: Vec<Arc<WalShared>>,
    metrics: Arc<Metrics>,
    /// The `/metrics` rendering shared by concurrent scrapes (`metrics::shared`).
    scrapes: SharedRendering,
    /// The operator reads' slots and counters (`sched::readers`).
    reads: crate::sched::read_board::ReadBoard,
    /// The configuration generation cores pick up at the top of a turn (`ops::reload`).
    reload: Published,
    io_backend: crate::net::io::Backend,
    lifecycle: Lifecycle,
    mirror: Option<Mirror>,
    /// Logs adopted from other nodes while the node runs, on their way to their cores
    /// (`sched::logs`).
    adoptions: Arc<crate::sched::logs::AdoptInbox>,
}

impl Shared {
    /// The shared state over the role contexts; publishes the start-up generation.
    pub fn new(
        config: Arc<Config>,
        clock: Arc<dyn Clock>,
        ingest: IngestContext,
        dispatch: DispatchContext,
        node: NodeParts,
    ) -> Shared {
        let adoptions = Arc::new(crate::sched::logs::AdoptInbox::new(config.server.workers));
        let reload = Published::new(config.clone(), node.router, &ingest.guards)
            .with_flow_cells(Arc::clone(&dispatch.metrics))
            .with_backlog(Arc::clone(&ingest.backlog));
        Shared {
            config,
            clock,
            ingest,
            dispatch,
            wal: node.wal,
            metrics: node.metrics,
            scrapes: SharedRendering::default(),
            reads: Default::default(),
            reload,
            io_backend: node.io_backend,
            lifecycle: Lifecycle::new(),
            mirror: node.mirror,
            adoptions,
        }
    }

    /// The ingest role's handles.
    pub fn ingest(&self) -> &IngestContext {
        &self.ingest
    }

    /// The pumps' and dispatchers' handles.
    pub fn dispatch(&self) -> &DispatchContext {
        &self.dispatch
    }

    /// What the ops pages read (a handful of pointer copies; build one per request).
    pub fn ops_view(&self) -> OpsView<'_> {
        OpsView {
            config: &self.config,
            clock: &*self.clock,
            lifecycle: &self.lifecycle,
            reload: &self.reload,
            metrics: &self.metrics,
            dispatch: &self.dispatch.metrics,
            caps: &self.dispatch.caps,
            backlog: &self.ingest.backlog,
            admission: &self.ingest.admission,
            sources: &self.ingest.sources,
            body_budget: &self.ingest.body_budget,
            wal: &self.wal,
            cluster: &self.dispatch.cluster,
            replication: self.replication().map(|r| &**r),
        }
    }

    /// The mirror thread, when `[replication]` is on.
    pub fn mirror(&self) -> Option<&Mirror> {
        self.mirror.as_ref()
    }

    /// The node's replication state, when `[replication]` is on.
    pub fn replication(&self) -> Option<&Arc<ReplicationState>> {
        self.mirror.as_ref().map(Mirror::state)
    }

    /// What core `core`'s committer needs to replicate its batches, when replication is on;
    /// `logs`: the index of each log it commits, by slot.
    pub fn replicate(&self, core: usize, logs: Vec<u16>) -> Option<Replicate> {
        let spec = self.config.replication.as_ref()?;
        let mirror = self.mirror.as_ref()?;
        Some(Replicate {
            logs,
            link: mirror.link(core)?,
            node: mirror.state().clone(),
            max_inflight: spec.max_inflight,
            ack_timeout: spec.ack_timeout,
        })
    }

    /// Logs adopted while the node runs, waiting for their cores (`sched::logs`).
    pub fn adoptions(&self) -> &Arc<crate::sched::logs::AdoptInbox> {
        &self.adoptions
    }

    /// The operator reads' slots and counters (`sched::readers`).
    pub fn reads(&self) -> &crate::sched::read_board::ReadBoard {
        &self.reads
    }

    /// The published state of every log, by log index (own logs first).
    pub fn wal(&self) -> &[Arc<WalShared>] {
        &self.wal
    }

    /// The per-core metric shards.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The `/metrics` rendering shared by concurrent scrapes.
    pub fn scrapes(&self) -> &SharedRendering {
        &self.scrapes
    }

    /// The published configuration generation (`ops::reload`).
    pub fn reload(&self) -> &Published {
        &self.reload
    }

    /// The cores' I/O backend.
    pub fn io_backend(&self) -> crate::net::io::Backend {
        self.io_backend
    }

    pub fn phase(&self) -> Phase {
        self.lifecycle.phase()
    }

    pub fn set_phase(&self, p: Phase) {
        self.lifecycle.set_phase(p);
    }

    /// SIGTERM/SIGINT: `/readyz` says `draining` from now on; requests are still accepted and
    /// served until `now + grace`, then [`Shared::accepting_stopped`] turns true and the workers
    /// drain (stop accepting, finish what they have, exit).
    pub fn begin_drain(&self, now: u64, grace: std::time::Duration) {
        self.lifecycle.begin_drain(now, grace);
    }

    /// A core read a client's bytes at `now` during the drain.
    pub fn note_drain_input(&self, now: u64) {
        self.lifecycle.note_drain_input(now);
    }

    /// When a core last read a client's bytes during the drain (0: not yet).
    pub fn drain_input_at(&self) -> u64 {
        self.lifecycle.drain_input_at()
    }

    /// Has the drain grace ended (listeners closed, new work held back)?
    pub fn accepting_stopped(&self, now: u64) -> bool {
        self.lifecycle.accepting_stopped(now)
    }

    /// `/readyz`: `None` when ready, else the reason for 503 ([`OpsView::not_ready_reason`]).
    pub fn not_ready_reason(&self) -> Option<&'static str> {
        self.ops_view().not_ready_reason()
    }
}
