//! The batched deliveries' metric families ([`crate::dispatch::deliver::batch`]):
//!
//! - `sluice_dispatch_batch_events` (histogram): events per batched call, observed at every
//!   attempt of a call (a retried batch is observed again: the histogram counts calls made).
//! - `sluice_dispatch_batch_open_events{destination}` (gauge): members of the batch being filled
//!   on the destination's owner core (bound: its `batch.max_events`; 0 for a destination that
//!   does not batch).
//!
//! Events delivered are not counted here (`sluice_dispatch_attempts_total` counts calls; the
//! per-event counters are the event log's). Cells by destination id, as
//! [`crate::dispatch::metrics::DispatchMetrics`]'s. Writers: the owner cores; reader: `/metrics`. All
//! `Relaxed`: each cell is its own message.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::metrics::prom::{MetricType, PromWriter};

/// Upper bounds (inclusive) of `sluice_dispatch_batch_events`' buckets, in events.
pub const EVENTS_BOUNDS: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 10_000];

/// Shared by the cores (one per process, inside `DispatchMetrics`).
#[derive(Debug)]
pub struct BatchMetrics {
    /// `counts[i]`: calls of `(EVENTS_BOUNDS[i-1], EVENTS_BOUNDS[i]]` events; the last cell:
    /// above the last bound (never, `batch.max_events` ≤ 10000).
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
    /// Per destination id: members of the batch being filled.
    open: Box<[AtomicU64]>,
}

impl BatchMetrics {
    /// Cells for `destinations` ids.
    pub fn new(destinations: usize) -> BatchMetrics {
        BatchMetrics {
            counts: (0..=EVENTS_BOUNDS.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            sum: AtomicU64::new(0),
            open: (0..destinations).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// A batched call of `events` members is about to be sent.
    pub fn observe_call(&self, events: usize) {
        let i = EVENTS_BOUNDS
            .iter()
            .position(|&b| events as u64 <= b)
            .unwrap_or(EVENTS_BOUNDS.len());
        self.counts[i].fetch_add(1, Relaxed);
        self.sum.fetch_add(events as u64, Relaxed);
    }

    /// Destination `dest`'s batch being filled holds `events` members.
    pub fn set_open(&self, dest: usize, events: usize) {
        if let Some(c) = self.open.get(dest) {
            c.store(events as u64, Relaxed);
        }
    }

    /// Batched calls made and the events they carried (the histogram's count and sum).
    pub fn calls_and_events(&self) -> (u64, u64) {
        let calls = self.counts.iter().map(|c| c.load(Relaxed)).sum();
        (calls, self.sum.load(Relaxed))
    }

    /// Renders both families; `exported` lists the rendered destinations as (uri, id).
    pub fn render<'a>(&self, w: &mut PromWriter, exported: impl Iterator<Item = (&'a str, usize)>) {
        w.header(
            "sluice_dispatch_batch_events",
            "Events per batched delivery call (destinations with batch = { ... }), observed at each attempt of a call.",
            MetricType::Histogram,
        );
        let bounds: Vec<f64> = EVENTS_BOUNDS.iter().map(|&b| b as f64).collect();
        let counts: Vec<u64> = self.counts.iter().map(|c| c.load(Relaxed)).collect();
        let sum = self.sum.load(Relaxed) as f64;
        w.histogram("sluice_dispatch_batch_events", &[], &bounds, &counts, sum);
        w.header(
            "sluice_dispatch_batch_open_events",
            "Events in the batch being filled per destination on its owner core (bound: the destination's batch.max_events).",
            MetricType::Gauge,
        );
        for (uri, id) in exported {
            let v = self.open.get(id).map_or(0, |c| c.load(Relaxed));
            w.sample_u64(
                "sluice_dispatch_batch_open_events",
                &[("destination", uri)],
                v,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_land_in_their_bucket_and_open_gauges_by_destination() {
        let m = BatchMetrics::new(2);
        m.observe_call(1);
        m.observe_call(50);
        m.observe_call(64);
        m.set_open(1, 7);
        m.set_open(9, 1); // no such id: ignored
        assert_eq!(m.calls_and_events(), (3, 115));
        let mut w = PromWriter::new();
        m.render(&mut w, [("http://a/", 0), ("http://b/", 1)].into_iter());
        let text = w.finish();
        for line in [
            "sluice_dispatch_batch_events_bucket{le=\"1\"} 1\n",
            "sluice_dispatch_batch_events_bucket{le=\"32\"} 1\n",
            "sluice_dispatch_batch_events_bucket{le=\"64\"} 3\n",
            "sluice_dispatch_batch_events_count 3\n",
            "sluice_dispatch_batch_events_sum 115\n",
            "sluice_dispatch_batch_open_events{destination=\"http://a/\"} 0\n",
            "sluice_dispatch_batch_open_events{destination=\"http://b/\"} 7\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
