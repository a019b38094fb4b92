//! Metrics: per-core sharded counters, the histogram type and the Prometheus text exposition.
//!
//! A leaf: nothing here imports a domain module (only `crate::sync` for padding). Domain
//! families are built from these parts where their types live: `dispatch::metrics` (destination
//! gauges, attempt counters, delivery and accepted-to-DLQ histograms), `dispatch::flow::metrics`
//! (`sluice_flow_control_total`), `ingest::sources` (per-source refusals), the WAL's
//! `sluice_wal_sync_seconds`.
//!
//! - [`counter`]: the fixed families every worker core counts into without sharing a cache line
//!   ([`CoreMetrics`]), summed at scrape time ([`Metrics`]); plus [`Counter`] for counters keyed
//!   at run time (per-source refusals in `ingest::sources`).
//! - [`prom`]: the text writer ([`PromWriter`]); [`render`] writes the core families with it
//!   and lets other modules extend the body with their own (WAL histograms, per-source counters)
//!   through a callback.
//!
//! - [`histogram`]: the one Prometheus histogram type (fixed buckets, nanoseconds in, seconds
//!   out), used by the WAL's sync timing and dispatch durations.
//!
//! - [`auth`]: per-trigger `sluice_signature_failures_total` and `sluice_dedupe_dropped_total`
//!   (keyed by trigger id strings; no domain types).
//! - [`shared`]: the one `/metrics` rendering concurrent scrapes share.
//!
//! Counters here use `std` atomics with `Relaxed` ordering and bypass the `crate::sync` shim.

pub mod auth;
pub mod counter;
pub mod histogram;
pub mod prom;
pub mod shared;

pub use counter::{
    status_slot, Action, ConnRefusal, CoreMetrics, Counter, Dimension, Metrics, PauseBound, Route,
    TimeoutKind, STATUS_CODES,
};
pub use prom::{MetricType, PromWriter};

/// The whole `/metrics` body: the core families of `metrics`, then whatever `extra` appends
/// (WAL histograms, ring depth, per-source refusal counters, ...). Same as [`Metrics::render`].
pub fn render(metrics: &Metrics, extra: &mut dyn FnMut(&mut PromWriter)) -> String {
    metrics.render(extra)
}

#[cfg(test)]
mod tests {
    /// `metrics` stays a leaf: no code line of it (comments may point elsewhere) refers to a
    /// crate module other than `metrics` itself and `sync` (padding).
    #[test]
    fn imports_no_domain_module() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/metrics");
        let needle = ["crate", "::"].concat();
        let mut files = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            files += 1;
            for (n, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                for (i, _) in line.match_indices(&needle) {
                    let rest = &line[i + needle.len()..];
                    assert!(
                        rest.starts_with("sync") || rest.starts_with("metrics"),
                        "{}:{}: {line}",
                        path.display(),
                        n + 1
                    );
                }
            }
        }
        assert!(files >= 5, "read {files} files of {dir}");
    }
}
