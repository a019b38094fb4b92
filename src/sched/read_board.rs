//! The operator reads' slots and counters, node-wide (`Shared::reads`): at most [`MAX_READS`]
//! reads outstanding (`sync::slots`), and what `/metrics` says of them. Taken and given back by
//! the cores and the reader threads (`sched::readers`).
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use crate::metrics::PromWriter;
use crate::sync::slots::Slots;

/// Reads outstanding at once, node-wide (`sched::readers`, "Bounds").
pub const MAX_READS: usize = 32;

/// The node's read counters and slots (in `Shared`: `/metrics` renders them).
#[derive(Debug)]
pub struct ReadBoard {
    slots: Slots,
    served: AtomicU64,
    refused: AtomicU64,
    /// Nanoseconds readers spent answering.
    busy_nanos: AtomicU64,
    /// Segment maps the readers keep for reuse (`storage::map_cache`), after their last read.
    kept_maps: AtomicU64,
}

impl Default for ReadBoard {
    fn default() -> ReadBoard {
        ReadBoard {
            slots: Slots::new(MAX_READS as u64),
            served: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            busy_nanos: AtomicU64::new(0),
            kept_maps: AtomicU64::new(0),
        }
    }
}

impl ReadBoard {
    /// Takes a read slot; false (counted as a refusal) when [`MAX_READS`] are taken.
    pub fn try_take(&self) -> bool {
        let ok = self.slots.try_take();
        if !ok {
            self.refuse();
        }
        ok
    }

    /// Gives a read slot back (its answer was taken, or it never reached a reader).
    pub fn give_back(&self) {
        self.slots.give_back();
    }

    /// Counts a refused read.
    pub fn refuse(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Counts a read answered in `nanos`, the reader then keeping `kept_maps` segment maps.
    pub fn served(&self, nanos: u64, kept_maps: u64) {
        self.busy_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.served.fetch_add(1, Ordering::Relaxed);
        self.kept_maps.store(kept_maps, Ordering::Relaxed);
    }

    /// Reads outstanding now.
    pub fn outstanding(&self) -> u64 {
        self.slots.taken()
    }

    pub fn render_prometheus(&self, w: &mut PromWriter) {
        w.gauge(
            "sluice_ops_reads_outstanding",
            "Operator reads (event lookups and lists, ledger, dashboard state) queued, being \
             read or answered and not yet taken by their core; at most sluice_ops_reads_max.",
            self.outstanding() as f64,
        );
        w.gauge(
            "sluice_ops_reads_max",
            "The bound on outstanding operator reads (past it: 503 readers_busy).",
            MAX_READS as f64,
        );
        w.header(
            "sluice_ops_reads_total",
            "Operator reads by result: served by a reader thread, or refused (503 readers_busy).",
            crate::metrics::MetricType::Counter,
        );
        let served = self.served.load(Ordering::Relaxed);
        let refused = self.refused.load(Ordering::Relaxed);
        w.sample_u64("sluice_ops_reads_total", &[("result", "served")], served);
        w.sample_u64("sluice_ops_reads_total", &[("result", "refused")], refused);
        w.header(
            "sluice_ops_read_seconds_total",
            "Time reader threads spent answering operator reads.",
            crate::metrics::MetricType::Counter,
        );
        let busy = self.busy_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        w.sample("sluice_ops_read_seconds_total", &[], busy);
        w.gauge(
            "sluice_ops_reader_maps",
            "Segment maps the reader keeps for reuse (at most 16; a deleted segment's is dropped \
             within a second).",
            self.kept_maps.load(Ordering::Relaxed) as f64,
        );
    }
}
