//! One context per role, each built by a small constructor from the start-up configuration:
//!
//! - [`IngestContext`]: what a core's ingest role reads of the node — the `[ingest]` spec, the
//!   trigger guards (signatures, dedupe index rebuilt from the logs), the buckets, the return
//!   schedule, the durable-queue bound, the source table and the in-flight body budget.
//!   [`IngestContext::node`] lends it to the pipeline as [`pipeline::Node`].
//! - [`DispatchContext`]: what the pumps and the dispatchers share — the triggers' caps of the
//!   dispatch window, the dispatch metric cells, the dead-letter queue, the cluster's shared
//!   destination budgets, and the durable-queue bound they release.
//! - The ops view is `ops`'s own type ([`crate::ops::view::OpsView`]), borrowed from the
//!   shared state by [`Shared::ops_view`](crate::sched::state::Shared::ops_view).
//!
//! The contexts live by value inside [`Shared`](crate::sched::state::Shared) (one `Arc` for
//! all), so reaching a handle through `shared.ingest()` costs what a field of the old bag did.
//! Their fields are public but reachable only through `&`: every handle is immutable or
//! synchronises itself (atomics, its own locks), so nothing can be swapped behind a core.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;

use crate::cluster::Cluster;
use crate::config::Config;
use crate::dispatch::dlq::DlqStore;
use crate::dispatch::metrics::DispatchMetrics;
use crate::dispatch::trigger_caps::TriggerCaps;
use crate::ingest::backlog::{absorbing_triggers, trigger_shares, Backlog};
use crate::ingest::bucket::{Admission, BucketParams};
use crate::ingest::pipeline;
use crate::ingest::schedule::ReturnSchedule;
use crate::ingest::sources::SourceTable;
use crate::ingest::spec::IngestSpec;
use crate::ingest::Guards;
use crate::net::budget::BodyBudget;
use crate::sched::error::RuntimeError;

/// Events and bytes pending in the recovered logs (committed, not done): the backlog counts
/// them from the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    pub events: u64,
    pub bytes: u64,
}

/// The ingest role's handles (module docs).
#[derive(Debug)]
pub struct IngestContext {
    /// `[ingest]`: stored headers, offer timeout, buckets' refill.
    pub spec: IngestSpec,
    /// `wal.segment_bytes`: the disk bound refuses once one more segment would pass it.
    pub segment_bytes: u64,
    /// Per-trigger signature verifiers and the dedupe index.
    pub guards: Guards,
    pub admission: Admission,
    /// `Retry-After` of `queue_full` / `ingest_saturated` refusals.
    pub returns: ReturnSchedule,
    /// The durable-queue bound (ingest reserves, the pump releases).
    pub backlog: Arc<Backlog>,
    pub sources: Arc<SourceTable>,
    /// The in-flight body budget (`server.max_inflight_body_bytes`), one for all cores.
    pub body_budget: crate::sync::Arc<BodyBudget>,
}

impl IngestContext {
    /// The context of `config` at clock reading `now`, with the backlog preloaded with
    /// `pending` and the dedupe index rebuilt from the logs in `log_dirs` (before any core
    /// appends). `now_unix_secs` ages the dedupe keys.
    pub fn build(
        config: &Config,
        now: u64,
        pending: Pending,
        log_dirs: &[PathBuf],
        now_unix_secs: u64,
    ) -> Result<IngestContext, RuntimeError> {
        let backlog = Arc::new(backlog(config)?);
        backlog.preload(pending.events, pending.bytes);
        let bucket = |capacity| {
            BucketParams::new(capacity, config.ingest.refill_per_sec)
                .map_err(|e| RuntimeError::Config(format!("ingest bucket: {e}")))
        };
        let triggers = config.triggers.iter();
        let sources = SourceTable::new(
            config.ingest.max_sources,
            bucket(config.ingest.per_source_capacity)?,
        )
        .with_metrics_top(config.ingest.metrics_top_sources)
        .with_triggers(triggers.map(|t| (t.id.as_str(), t.provider.as_str())));
        let guards = Guards::new(&config.ingest_triggers(), config.ingest.dedupe_max_keys);
        let mut rebuilt = 0;
        for dir in log_dirs {
            rebuilt += guards
                .rebuild_dedupe(dir, now_unix_secs)
                .map_err(RuntimeError::Wal)?;
        }
        if rebuilt > 0 {
            eprintln!("sluice: dedupe index rebuilt from the wal: {rebuilt} keys");
        }
        Ok(IngestContext {
            spec: config.ingest.clone(),
            segment_bytes: config.wal.segment_bytes,
            guards,
            admission: Admission::new(bucket(config.ingest.global_capacity)?, now),
            returns: ReturnSchedule::new(config.ingest.refill_per_sec),
            backlog,
            sources: Arc::new(sources),
            body_budget: crate::sync::Arc::new(BodyBudget::new(
                config.server.max_inflight_body_bytes,
            )),
        })
    }

    /// The node's part of the pipeline, with the start-up generation's checks (a core running
    /// a later generation replaces `table`).
    pub fn node(&self) -> pipeline::Node<'_> {
        pipeline::Node {
            ingest: &self.spec,
            segment_bytes: self.segment_bytes,
            guards: &self.guards,
            table: self.guards.start_table(),
            admission: &self.admission,
            returns: &self.returns,
            backlog: &self.backlog,
            // Read-side and start-up uses: replication's gate is the cores' (`sched::handler`).
            replication: None,
        }
    }
}

/// The durable-queue bound of `config`: its shares per trigger, the default route's, the
/// absorb budget and the disk bound.
fn backlog(config: &Config) -> Result<Backlog, RuntimeError> {
    let d = &config.dispatch;
    let triggers = config.ingest_triggers();
    let backlog = Backlog::with_wal_limit(
        d.max_pending_events,
        d.max_pending_bytes,
        d.saturated_high,
        d.saturated_low,
        d.max_wal_bytes,
    )
    .with_triggers(
        &trigger_shares(&triggers),
        config.ingest.default_route_spec(),
        d.reserved_fraction,
    )
    .map_err(RuntimeError::Config)?;
    Ok(backlog.with_absorb(d.absorb_max_bytes, &absorbing_triggers(&triggers)))
}

/// The dispatch role's handles (module docs).
#[derive(Debug)]
pub struct DispatchContext {
    /// Each trigger's cap of the dispatch window (the pumps and dispatchers take and give).
    pub caps: Arc<TriggerCaps>,
    /// Every destination's, the pumps' and the flow gates' metric cells.
    pub metrics: Arc<DispatchMetrics>,
    /// The dead-letter queue: the commit helpers write it, the admin routes read and remove.
    pub dlq: Arc<DlqStore>,
    /// Destination budgets shared with other nodes through Redis.
    pub cluster: Cluster,
    /// The durable-queue bound (the pumps release what is done): the ingest context's.
    pub backlog: Arc<Backlog>,
}

impl DispatchContext {
    /// The context of `config` (its `server.workers` cores), releasing into `backlog`; opens the
    /// dead-letter queue under the data dir.
    pub fn build(config: &Config, backlog: Arc<Backlog>) -> Result<DispatchContext, RuntimeError> {
        let dlq = DlqStore::open(
            &config.server.data_dir.join("dlq"),
            config.dispatch.max_dlq_entries as usize,
        )
        .map_err(|e| RuntimeError::Config(format!("dead-letter queue: {e}")))?;
        let destinations: Vec<(String, u64)> = config
            .destinations
            .iter()
            .map(|d| (d.handler.uri.clone(), d.initial_permits() as u64))
            .collect();
        let metrics = DispatchMetrics::new(&destinations)
            .with_flow(&config.dispatch_spec().triggers, config.flow.max_held)
            .with_cores(config.server.workers)
            .with_dlq(dlq.gauges());
        Ok(DispatchContext {
            caps: Arc::new(trigger_caps(config)),
            metrics: Arc::new(metrics),
            dlq: Arc::new(dlq),
            cluster: Cluster::new(config.shared_destinations()),
            backlog,
        })
    }
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
