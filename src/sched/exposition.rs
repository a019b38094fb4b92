//! The `/metrics` exposition of a node: the merged per-core counters plus the families of the
//! state the cores share (the logs, sources, budgets, return schedule, dispatch, guards and the
//! backlog).
//!
//! Its own module so that the dependency goes one way: the worker's scrape path
//! (`worker::budgets`) and the runtime both depend on it and on [`Shared`]; it depends on
//! neither (`.ci/structure.py` checks). It reads through the ops view ([`OpsView`], what the
//! dashboard reads) plus the ingest context's guards and return schedule.

use crate::metrics::PromWriter;
use crate::ops::view::OpsView;
use crate::sched::state::Shared;
use crate::sync::clock::unix_millis;
use std::sync::atomic::Ordering::Relaxed;

/// Renders `/metrics`: the merged per-core counters plus the WAL's and the sources' families.
pub fn render_metrics(shared: &Shared) -> String {
    let node = shared.ops_view();
    let ingest = shared.ingest();
    node.metrics.render(&mut |w| {
        render_wal_progress(&node, w);
        w.header(
            "sluice_io_backend",
            "The cores' I/O backend: 1 on the backend in use (server.io, resolved at start-up).",
            crate::metrics::MetricType::Gauge,
        );
        w.sample_u64(
            "sluice_io_backend",
            &[("backend", shared.io_backend().name())],
            1,
        );
        render_wal_health(&node, w);
        node.sources.render_prometheus(w);
        node.body_budget.render_prometheus(w);
        shared.scrapes().render_prometheus(w);
        shared.reads().render_prometheus(w);
        ingest.returns.render_prometheus(w, node.clock.now_nanos());
        node.dispatch
            .render(w, unix_millis(), node.backlog.pending_events());
        ingest.guards.render_prometheus(w);
        node.backlog.render_prometheus(w);
        node.caps.render_prometheus(w);
        node.cluster.render_prometheus(w);
        node.reload.render_prometheus(w);
        if let Some(r) = node.replication {
            r.render_prometheus(w);
        }
    })
}

/// The logs' progress: records appended, durable LSN and unsynced bytes per log.
fn render_wal_progress(node: &OpsView<'_>, w: &mut PromWriter) {
    w.counter(
        "sluice_wal_appends_total",
        "Records appended to the WAL and reported durable, over all logs.",
        node.wal_appends(),
    );
    w.header(
        "sluice_wal_durable_lsn",
        "Highest LSN known durable, per log (own logs are core-K).",
        crate::metrics::MetricType::Gauge,
    );
    for (i, l) in node.wal.iter().enumerate() {
        let log = i.to_string();
        w.sample_u64("sluice_wal_durable_lsn", &[("log", &log)], l.durable_lsn());
    }
    w.header(
        "sluice_wal_os_unsynced_bytes",
        "durability = os: committed bytes of the log's active segment not yet fdatasynced, \
         kept in memory to rewrite after a failed sync (at most 4 MiB plus one batch), per \
         log; 0 in fsync mode.",
        crate::metrics::MetricType::Gauge,
    );
    for (i, l) in node.wal.iter().enumerate() {
        let log = i.to_string();
        let bytes = l.os_unsynced_bytes.load(Relaxed);
        w.sample_u64("sluice_wal_os_unsynced_bytes", &[("log", &log)], bytes);
    }
    w.header(
        "sluice_wal_outcome_index_bytes",
        "Memory of the log's outcome index (an event's status and attempts by LSN, for \
         lookups): 20 bytes per retained record plus growth slack, per log; absent when the \
         index stopped (lookups then read the log).",
        crate::metrics::MetricType::Gauge,
    );
    for (i, l) in node.wal.iter().enumerate() {
        if let Some((_, bytes)) = l.outcomes.size() {
            let log = i.to_string();
            w.sample_u64(
                "sluice_wal_outcome_index_bytes",
                &[("log", &log)],
                bytes as u64,
            );
        }
    }
}

/// The logs' health: writable, checkpoints, sync latency, losses accepted at start-up.
fn render_wal_health(node: &OpsView<'_>, w: &mut PromWriter) {
    w.gauge(
        "sluice_wal_healthy",
        "1 when every log accepts writes, 0 after a write or sync error.",
        if node.wal_healthy() { 1.0 } else { 0.0 },
    );
    w.header(
        "sluice_wal_commit_failures_total",
        "Failed WAL commits, segment rolls and probe writes by reason (enospc, eio, other), per \
         log (core: the log's index; core K's own log is K). While a log is unhealthy only its \
         probe writes, at most once a second.",
        crate::metrics::MetricType::Counter,
    );
    for (i, l) in node.wal.iter().enumerate() {
        let core = i.to_string();
        for (reason, n) in crate::wal::COMMIT_FAILURE_REASONS
            .iter()
            .zip(&l.commit_failures)
        {
            let labels = [("core", core.as_str()), ("reason", *reason)];
            w.sample_u64("sluice_wal_commit_failures_total", &labels, n.load(Relaxed));
        }
    }
    w.counter(
        "sluice_wal_checkpoint_failures_total",
        "Checkpoint writes that failed, over all logs (each is retried a second later).",
        node.wal
            .iter()
            .map(|l| l.checkpoint_failures_total.load(Relaxed))
            .sum(),
    );
    w.gauge(
        "sluice_wal_checkpoint_failing",
        "Logs whose checkpoint writes have failed for 10 s or more (/readyz: \
         wal_checkpoint_failing).",
        node.wal_checkpoint_stale_logs() as f64,
    );
    if let Some(first) = node.wal.first() {
        // One histogram shared by every log.
        first.render_prometheus(w.buffer_mut());
    }
    w.counter(
        "sluice_wal_loss_accepted_total",
        "Missing WAL ranges accepted at start-up with --accept-wal-loss, over all logs.",
        node.wal
            .iter()
            .map(|l| l.loss_accepted_total.load(Relaxed))
            .sum(),
    );
    w.gauge(
        "sluice_wal_lost_lsns_accepted",
        "LSNs the checkpoints promised that were missing and accepted as lost at start-up.",
        node.wal
            .iter()
            .map(|l| l.lost_lsns_accepted.load(Relaxed))
            .sum::<u64>() as f64,
    );
    w.counter(
        "sluice_wal_torn_tail_truncations_total",
        "Torn final batches recovery truncated, over the logs' lives (each named at error level, \
         its bytes kept in the log's quarantine/, recorded in quarantine/TORN).",
        node.wal
            .iter()
            .map(|l| l.torn_tails_total.load(Relaxed))
            .sum(),
    );
    w.counter(
        "sluice_wal_torn_tail_lsns_total",
        "LSNs those truncations dropped (at least: a range without its marker ends at the last \
         LSN a readable record names).",
        node.wal
            .iter()
            .map(|l| l.torn_tail_lsns_total.load(Relaxed))
            .sum(),
    );
}
