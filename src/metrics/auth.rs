//! Per-trigger counters of the ingest edge checks:
//!
//! - `sluice_signature_failures_total{reason,trigger}`: requests refused `401` by signature
//!   verification; `reason` is `missing_signature`, `bad_signature` or
//!   `timestamp_out_of_window`.
//! - `sluice_dedupe_dropped_total{trigger}`: duplicates answered `200 duplicate_dropped`.
//!
//! Cardinality is bounded by the manifest: one series per (trigger with `verify`, reason) and
//! one per trigger with `dedupe`; every series is rendered, zeros included. Counters are shared
//! [`Counter`]s (std atomics, `Relaxed`), indexed by the trigger's cells.
//!
//! The cells are the start-up guarded triggers' plus [`RELOAD_CELLS`] spare ones, which a reload
//! claims ([`AuthMetrics::cell_for`], before it publishes) for a trigger that gets `verify` or
//! `dedupe` and has no cells yet; past that the reload is refused. A claimed cell keeps its id
//! for the run; its families are rendered from the first generation that configures them.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use super::counter::Counter;
use super::prom::{MetricType, PromWriter};

/// Spare trigger cells a run's reloads may claim for triggers that get `verify`/`dedupe`.
pub const RELOAD_CELLS: usize = 64;

/// `reason` label values of `sluice_signature_failures_total`, in index order (the same order as
/// `ingest::verify::Failure::ALL`).
pub const SIGNATURE_REASONS: [&str; 3] = [
    "missing_signature",
    "bad_signature",
    "timestamp_out_of_window",
];

#[derive(Debug)]
struct TriggerCells {
    /// Set at start, or by the reload that claims a spare cell.
    name: OnceLock<Box<str>>,
    /// Rendered families (`Relaxed`: flags read at render time, set before the first count).
    verified: AtomicBool,
    deduped: AtomicBool,
    signature_failures: [Counter; SIGNATURE_REASONS.len()],
    dedupe_dropped: Counter,
}

/// The two families for a fixed set of triggers.
#[derive(Debug, Default)]
pub struct AuthMetrics {
    triggers: Vec<TriggerCells>,
    /// Start-up trigger id → cells (fixed); the spare cells are `triggers[start..]`.
    index: HashMap<Box<str>, usize>,
    start: usize,
    /// Spare cells claimed (names set before the `Release` store; loaded `Acquire`).
    claimed: AtomicUsize,
    claiming: Mutex<()>,
}

fn cells(name: Option<&str>, verified: bool, deduped: bool) -> TriggerCells {
    TriggerCells {
        name: name.map_or_else(OnceLock::new, |n| OnceLock::from(Box::<str>::from(n))),
        verified: AtomicBool::new(verified),
        deduped: AtomicBool::new(deduped),
        signature_failures: Default::default(),
        dedupe_dropped: Counter::new(),
    }
}

impl TriggerCells {
    fn name(&self) -> &str {
        self.name.get().map_or("", |n| n)
    }
}

impl AuthMetrics {
    /// `triggers`: `(id, has verify, has dedupe)`, indexed by position.
    pub fn new<'a>(triggers: impl IntoIterator<Item = (&'a str, bool, bool)>) -> AuthMetrics {
        let mut cells_: Vec<TriggerCells> = triggers
            .into_iter()
            .map(|(name, verified, deduped)| cells(Some(name), verified, deduped))
            .collect();
        let start = cells_.len();
        let index = cells_
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name().into(), i))
            .collect();
        cells_.extend((0..RELOAD_CELLS).map(|_| cells(None, false, false)));
        AuthMetrics {
            triggers: cells_,
            index,
            start,
            claimed: AtomicUsize::new(0),
            claiming: Mutex::new(()),
        }
    }

    /// The cells of trigger `id`, if it has some (start-up, or claimed by a reload).
    pub fn index_of(&self, id: &str) -> Option<usize> {
        if let Some(&i) = self.index.get(id) {
            return Some(i);
        }
        let claimed = self.claimed.load(Ordering::Acquire);
        (self.start..self.start + claimed).find(|&i| self.triggers[i].name() == id)
    }

    /// The cells of trigger `id`, claiming a spare one if it has none (a reload, before it
    /// publishes). `Err` when the spare cells are all taken.
    pub fn cell_for(&self, id: &str) -> Result<usize, String> {
        let _serial = self.claiming.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = self.index_of(id) {
            return Ok(i);
        }
        let claimed = self.claimed.load(Ordering::Acquire);
        let Some(cell) = self.triggers.get(self.start + claimed) else {
            return Err(format!(
                "trigger {id:?} needs signature/dedupe metric cells and this run's \
                 {RELOAD_CELLS} spare ones are taken by triggers given verify/dedupe by earlier \
                 reloads"
            ));
        };
        let _ = cell.name.set(id.into());
        // After the name: a reader that sees the count sees it.
        self.claimed.store(claimed + 1, Ordering::Release);
        Ok(self.start + claimed)
    }

    /// Renders cells `t`'s `verify` / `dedupe` families from now on (set, never cleared: a
    /// series once rendered stays, as counters do).
    pub fn mark_configured(&self, t: usize, verified: bool, deduped: bool) {
        if let Some(c) = self.triggers.get(t) {
            if verified {
                c.verified.store(true, Ordering::Relaxed);
            }
            if deduped {
                c.deduped.store(true, Ordering::Relaxed);
            }
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
        for t in self
            .triggers
            .iter()
            .filter(|t| t.verified.load(Ordering::Relaxed))
        {
            for (reason, c) in SIGNATURE_REASONS.iter().zip(&t.signature_failures) {
                w.sample_u64(SIG, &[("reason", reason), ("trigger", t.name())], c.get());
            }
        }
        w.header(
            DEDUPE,
            "Duplicate deliveries dropped (200 duplicate_dropped), by trigger.",
            MetricType::Counter,
        );
        for t in self
            .triggers
            .iter()
            .filter(|t| t.deduped.load(Ordering::Relaxed))
        {
            w.sample_u64(DEDUPE, &[("trigger", t.name())], t.dedupe_dropped.get());
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

    #[test]
    fn reloads_claim_spare_cells_up_to_the_bound() {
        let m = AuthMetrics::new([("gh", true, false)]);
        assert_eq!(m.cell_for("gh"), Ok(0), "start-up cells: no claim");
        let n = m.cell_for("new").unwrap();
        assert_eq!(m.cell_for("new"), Ok(n), "claimed once");
        m.incr_signature_failure(n, 0);
        let render = |m: &AuthMetrics| {
            let mut w = PromWriter::new();
            m.render_prometheus(&mut w);
            w.finish()
        };
        assert!(
            !render(&m).contains("trigger=\"new\""),
            "not configured yet"
        );
        m.mark_configured(n, true, false);
        assert!(render(&m).contains(
            "sluice_signature_failures_total{reason=\"missing_signature\",trigger=\"new\"} 1\n"
        ));
        for i in 1..RELOAD_CELLS {
            m.cell_for(&format!("t{i}")).unwrap();
        }
        let e = m.cell_for("one-too-many").unwrap_err();
        assert!(e.contains("one-too-many"), "{e}");
        assert_eq!(m.index_of("one-too-many"), None);
    }
}
