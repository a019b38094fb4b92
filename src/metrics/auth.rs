//! Per-trigger counters of the ingest edge checks:
//!
//! - `sluice_signature_failures_total{reason,trigger}`: requests refused `401` by signature
//!   verification; `reason` is `missing_signature`, `bad_signature` or
//!   `timestamp_out_of_window`.
//! - `sluice_dedupe_dropped_total{trigger}`: duplicates answered `200 duplicate_dropped`.
//!
//! Cardinality is bounded by the manifest: one series per (trigger with `verify`, reason) and
//! one per trigger with `dedupe`; every series is rendered, zeros included. Counters are shared
//! [`Counter`]s (std atomics, `Relaxed`), indexed by the trigger's position.
#![forbid(unsafe_code)]

use super::counter::Counter;
use super::prom::{MetricType, PromWriter};

/// `reason` label values of `sluice_signature_failures_total`, in index order (the same order as
/// `ingest::verify::Failure::ALL`).
pub const SIGNATURE_REASONS: [&str; 3] = [
    "missing_signature",
    "bad_signature",
    "timestamp_out_of_window",
];

#[derive(Debug)]
struct TriggerCells {
    name: Box<str>,
    verified: bool,
    deduped: bool,
    signature_failures: [Counter; SIGNATURE_REASONS.len()],
    dedupe_dropped: Counter,
}

/// The two families for a fixed set of triggers.
#[derive(Debug, Default)]
pub struct AuthMetrics {
    triggers: Vec<TriggerCells>,
}

impl AuthMetrics {
    /// `triggers`: `(id, has verify, has dedupe)`, indexed by position.
    pub fn new<'a>(triggers: impl IntoIterator<Item = (&'a str, bool, bool)>) -> AuthMetrics {
        AuthMetrics {
            triggers: triggers
                .into_iter()
                .map(|(name, verified, deduped)| TriggerCells {
                    name: name.into(),
                    verified,
                    deduped,
                    signature_failures: Default::default(),
                    dedupe_dropped: Counter::new(),
                })
                .collect(),
        }
    }

    /// Counts a `401` of trigger `t` with `SIGNATURE_REASONS[reason]`.
    #[inline]
    pub fn incr_signature_failure(&self, t: usize, reason: usize) {
        if let Some(c) = self
            .triggers
            .get(t)
            .and_then(|c| c.signature_failures.get(reason))
        {
            c.incr();
        }
    }

    #[inline]
    pub fn incr_dedupe_dropped(&self, t: usize) {
        if let Some(c) = self.triggers.get(t) {
            c.dedupe_dropped.incr();
        }
    }

    pub fn signature_failures(&self, t: usize, reason: usize) -> u64 {
        self.triggers[t].signature_failures[reason].get()
    }

    pub fn dedupe_dropped(&self, t: usize) -> u64 {
        self.triggers[t].dedupe_dropped.get()
    }

    pub fn render_prometheus(&self, w: &mut PromWriter) {
        const SIG: &str = "sluice_signature_failures_total";
        const DEDUPE: &str = "sluice_dedupe_dropped_total";
        w.header(
            SIG,
            "Requests refused 401 by signature verification, by trigger and reason.",
            MetricType::Counter,
        );
        for t in self.triggers.iter().filter(|t| t.verified) {
            for (reason, c) in SIGNATURE_REASONS.iter().zip(&t.signature_failures) {
                w.sample_u64(SIG, &[("reason", reason), ("trigger", &t.name)], c.get());
            }
        }
        w.header(
            DEDUPE,
            "Duplicate deliveries dropped (200 duplicate_dropped), by trigger.",
            MetricType::Counter,
        );
        for t in self.triggers.iter().filter(|t| t.deduped) {
            w.sample_u64(DEDUPE, &[("trigger", &t.name)], t.dedupe_dropped.get());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_configured_triggers_only() {
        let m = AuthMetrics::new([
            ("gh", true, true),
            ("plain", false, false),
            ("d", false, true),
        ]);
        m.incr_signature_failure(0, 1);
        m.incr_signature_failure(0, 1);
        m.incr_dedupe_dropped(2);
        m.incr_signature_failure(9, 0); // unknown index: ignored
        assert_eq!(m.signature_failures(0, 1), 2);
        let mut w = PromWriter::new();
        m.render_prometheus(&mut w);
        let text = w.finish();
        assert!(text.contains(
            "sluice_signature_failures_total{reason=\"bad_signature\",trigger=\"gh\"} 2\n"
        ));
        assert!(text.contains(
            "sluice_signature_failures_total{reason=\"missing_signature\",trigger=\"gh\"} 0\n"
        ));
        assert!(!text.contains("trigger=\"plain\""));
        assert!(text.contains("sluice_dedupe_dropped_total{trigger=\"d\"} 1\n"));
        assert!(text.contains("sluice_dedupe_dropped_total{trigger=\"gh\"} 0\n"));
    }
}
