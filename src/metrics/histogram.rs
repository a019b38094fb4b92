//! The one Prometheus histogram type: fixed buckets of `AtomicU64`, observed in nanoseconds,
//! exposed in seconds.
//!
//! Used for `sluice_wal_sync_seconds` (each log's commit), `sluice_dispatch_duration_seconds`
//! (destination cores) and `harn_trigger_accepted_to_dlq_seconds` (the pump). Each user owns its
//! bucket bounds as a `&'static [u64]` of nanoseconds (inclusive upper bounds, ascending); the
//! `le` labels are those bounds in seconds, formatted by [`PromWriter`] (`0.0001`, `1`, `30`).
//! An observation is one bounds scan (≤ 15 integer compares) and two `fetch_add`s; memory is
//! `bounds.len() + 2` words whatever the number of observations.
//!
//! The loadgen's latency histogram (`crate::tools::histogram`) is a different instrument on
//! purpose: single-threaded, log-linear (HdrHistogram style) for percentiles, never exposed to
//! Prometheus; it shares no code with this one.
//!
//! Metrics bypass the loom shim (see `crate::sync`): every access is `Relaxed`, since a scrape
//! only needs each counter's value, not a consistent snapshot across counters or ordering with
//! any other memory. `+Inf` and `_count` are the sum of the bucket counts read, so a scrape
//! racing observations still shows cumulative buckets that never decrease.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::prom::PromWriter;

/// A fixed-bucket histogram, lock-free, shared by reference between its writers and `/metrics`.
#[derive(Debug)]
pub struct Histogram {
    /// Inclusive upper bounds in nanoseconds, ascending.
    bounds: &'static [u64],
    /// `counts[i]`: observations in `(bounds[i-1], bounds[i]]`; `counts[bounds.len()]`: above
    /// the last bound.
    counts: Box<[AtomicU64]>,
    sum_nanos: AtomicU64,
}

impl Histogram {
    /// A histogram over `bounds_nanos` (inclusive upper bounds, ascending, non-empty).
    pub fn new(bounds_nanos: &'static [u64]) -> Histogram {
        debug_assert!(!bounds_nanos.is_empty());
        debug_assert!(
            bounds_nanos.windows(2).all(|w| w[0] < w[1]),
            "bounds must ascend"
        );
        Histogram {
            bounds: bounds_nanos,
            counts: (0..=bounds_nanos.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    /// Records one duration.
    pub fn observe_nanos(&self, nanos: u64) {
        let i = self
            .bounds
            .iter()
            .position(|&b| nanos <= b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_nanos.fetch_add(nanos, Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts
            .iter()
            .fold(0u64, |n, c| n.wrapping_add(c.load(Relaxed)))
    }

    /// Sum of the observed durations.
    pub fn sum_nanos(&self) -> u64 {
        self.sum_nanos.load(Relaxed)
    }

    /// The samples of this histogram as series `name{labels}` (the family's header is the
    /// caller's: one per family, before its first series).
    pub fn render(&self, w: &mut PromWriter, name: &str, labels: &[(&str, &str)]) {
        let counts: Vec<u64> = self.counts.iter().map(|c| c.load(Relaxed)).collect();
        let bounds: Vec<f64> = self.bounds.iter().map(|&b| b as f64 / 1e9).collect();
        let sum = self.sum_nanos() as f64 / 1e9;
        w.histogram(name, labels, &bounds, &counts, sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::MetricType;

    const BOUNDS: &[u64] = &[100_000, 250_000, 1_000_000_000, 30_000_000_000];

    #[test]
    fn buckets_are_inclusive_cumulative_and_overflow_counts_only_in_inf() {
        let h = Histogram::new(BOUNDS);
        h.observe_nanos(50_000); // <= 0.0001
        h.observe_nanos(100_000); // <= 0.0001 (inclusive)
        h.observe_nanos(200_000); // <= 0.00025
        h.observe_nanos(40_000_000_000); // +Inf only
        assert_eq!(h.count(), 4);
        assert_eq!(h.sum_nanos(), 40_000_350_000);
        let mut w = PromWriter::new();
        w.header("x_seconds", "X.", MetricType::Histogram);
        h.render(&mut w, "x_seconds", &[("k", "v")]);
        let text = w.finish();
        let want = "# HELP x_seconds X.\n# TYPE x_seconds histogram\n\
                    x_seconds_bucket{k=\"v\",le=\"0.0001\"} 2\n\
                    x_seconds_bucket{k=\"v\",le=\"0.00025\"} 3\n\
                    x_seconds_bucket{k=\"v\",le=\"1\"} 3\n\
                    x_seconds_bucket{k=\"v\",le=\"30\"} 3\n\
                    x_seconds_bucket{k=\"v\",le=\"+Inf\"} 4\n\
                    x_seconds_sum{k=\"v\"} 40.00035\n\
                    x_seconds_count{k=\"v\"} 4\n";
        assert_eq!(text, want);
    }

    #[test]
    fn observations_from_many_threads_all_count() {
        let h = Histogram::new(BOUNDS);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let h = &h;
                s.spawn(move || {
                    for i in 0..1000 {
                        h.observe_nanos((t * 1000 + i) * 1_000);
                    }
                });
            }
        });
        assert_eq!(h.count(), 4000);
    }
}
