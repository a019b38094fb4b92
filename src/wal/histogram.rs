//! A fixed-bucket latency histogram of `AtomicU64`s for `sluice_wal_sync_seconds`.
//!
//! Kept here until `crate::metrics` has a shared histogram type. Metrics bypass the loom shim
//! (see `crate::sync`): every access is `Relaxed`, since a scrape only needs each counter's value,
//! not a consistent snapshot across counters or ordering with any other memory.
#![forbid(unsafe_code)]

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Upper bounds (inclusive) of the buckets, in nanoseconds.
pub const SYNC_BUCKETS_NANOS: [u64; 13] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
];

/// The same bounds as Prometheus `le` labels, in seconds.
const LE_LABELS: [&str; 13] = [
    "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1",
    "0.25", "0.5", "1",
];

/// Per-bucket (non-cumulative) counts, plus count and sum; observations above the last bound
/// only show in `count` (the `+Inf` bucket).
#[derive(Debug, Default)]
pub struct SyncHistogram {
    buckets: [AtomicU64; 13],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl SyncHistogram {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one duration.
    pub fn observe_nanos(&self, nanos: u64) {
        if let Some(i) = SYNC_BUCKETS_NANOS.iter().position(|&b| nanos <= b) {
            self.buckets[i].fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_nanos.fetch_add(nanos, Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    pub fn sum_nanos(&self) -> u64 {
        self.sum_nanos.load(Relaxed)
    }

    /// Appends the Prometheus text exposition of this histogram as metric `name`.
    pub fn render_prometheus(&self, name: &str, help: &str, out: &mut String) {
        // `write!` into a `String` cannot fail.
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bucket, le) in self.buckets.iter().zip(LE_LABELS) {
            cumulative += bucket.load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        // Read count after the buckets: concurrent observations may make it larger than the
        // last bucket's cumulative value, never smaller, keeping `+Inf >= le="1"`.
        let count = self.count().max(cumulative);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_nanos() as f64 / 1e9);
        let _ = writeln!(out, "{name}_count {count}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_cumulative_buckets() {
        let h = SyncHistogram::new();
        h.observe_nanos(50_000); // <= 0.0001
        h.observe_nanos(100_000); // <= 0.0001 (inclusive)
        h.observe_nanos(3_000_000); // <= 0.005
        h.observe_nanos(2_000_000_000); // +Inf only
        let mut s = String::new();
        h.render_prometheus("sluice_wal_sync_seconds", "Help.", &mut s);
        assert!(s.starts_with(
            "# HELP sluice_wal_sync_seconds Help.\n# TYPE sluice_wal_sync_seconds histogram\n"
        ));
        assert!(s.contains("sluice_wal_sync_seconds_bucket{le=\"0.0001\"} 2\n"));
        assert!(s.contains("sluice_wal_sync_seconds_bucket{le=\"0.0025\"} 2\n"));
        assert!(s.contains("sluice_wal_sync_seconds_bucket{le=\"0.005\"} 3\n"));
        assert!(s.contains("sluice_wal_sync_seconds_bucket{le=\"1\"} 3\n"));
        assert!(s.contains("sluice_wal_sync_seconds_bucket{le=\"+Inf\"} 4\n"));
        assert!(s.contains("sluice_wal_sync_seconds_sum 2.00315\n"));
        assert!(s.contains("sluice_wal_sync_seconds_count 4\n"));
        assert_eq!(s.lines().count(), 2 + 14 + 2);
    }
}
