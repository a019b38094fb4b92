//! `sluice_flow_control_total{trigger,gate,decision}`: what the per-trigger flow-control gates
//! decided (see `dispatch::flow`).
//!
//! - `gate`: `batch`, `debounce`, `rate_limit`, `throttle`, `singleton`, `concurrency`.
//! - `decision`: `pass` (through at once), `wait` (held; it passes later: a throttled event, a
//!   concurrency waiter, a batch member, a debounced event waiting for quiet), `skip` (done
//!   without delivery: `rate_limit` → `rate_limited`, `debounce` → `debounced`, `singleton` →
//!   `singleton_active`; a debounced event counts `wait` then `skip` when superseded),
//!   `overflow` (the per-core key table was full and the event used the shared overflow key).
//!
//! Cardinality is bounded by the manifest: one series per (trigger, configured gate, decision),
//! all rendered, zeros included. Counters are shared [`Counter`]s (std atomics, `Relaxed`),
//! indexed by the trigger's position in the config, written by the trigger's owner core.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use crate::config::TriggerConfig;
use crate::metrics::counter::Counter;
use crate::metrics::prom::{MetricType, PromWriter};

/// `gate` label values, in evaluation order (index = `dispatch::flow::Stage as usize`).
pub const GATES: [&str; 6] = [
    "batch",
    "debounce",
    "rate_limit",
    "throttle",
    "singleton",
    "concurrency",
];
/// `decision` label values (index = `dispatch::flow::Decision as usize`).
pub const DECISIONS: [&str; 4] = ["pass", "wait", "skip", "overflow"];

const NAME: &str = "sluice_flow_control_total";

#[derive(Debug)]
struct TriggerCells {
    name: Box<str>,
    /// Gates rendered for this trigger: those of the start-up configuration, plus any a reload
    /// gave it (`Relaxed`: a flag read at render time, set before the first count).
    configured: [AtomicBool; GATES.len()],
    counts: [[Counter; DECISIONS.len()]; GATES.len()],
    /// Events held in this trigger's gates now (`sluice_flow_waiting_events`), changed by the
    /// owner core(s) by deltas (`Relaxed`: a gauge, carries no data).
    waiting: AtomicI64,
}

/// The family for a fixed set of triggers.
#[derive(Debug, Default)]
pub struct FlowMetrics {
    triggers: Vec<TriggerCells>,
}

impl FlowMetrics {
    pub fn new(triggers: &[TriggerConfig]) -> FlowMetrics {
        FlowMetrics {
            triggers: triggers
                .iter()
                .map(|t| {
                    let f = &t.flow;
                    TriggerCells {
                        name: t.id.as_str().into(),
                        configured: gates_of(f).map(AtomicBool::new),
                        counts: Default::default(),
                        waiting: AtomicI64::new(0),
                    }
                })
                .collect(),
        }
    }

    /// Counts one decision of `gate` for trigger `t` (indices as in [`GATES`], [`DECISIONS`]).
    #[inline]
    pub fn incr(&self, t: usize, gate: usize, decision: usize) {
        if let Some(c) = self
            .triggers
            .get(t)
            .and_then(|c| c.counts.get(gate))
            .and_then(|g| g.get(decision))
        {
            c.incr();
        }
    }

    /// `delta` more events held in trigger cells `t`'s gates.
    pub fn add_waiting(&self, t: usize, delta: i64) {
        if let Some(c) = self.triggers.get(t) {
            c.waiting.fetch_add(delta, Ordering::Relaxed);
        }
    }

    /// Events held in trigger cells `t`'s gates now.
    pub fn waiting(&self, t: usize) -> u64 {
        self.triggers
            .get(t)
            .map_or(0, |c| c.waiting.load(Ordering::Relaxed).max(0) as u64)
    }

    /// The cells of trigger `id`, if the start-up configuration named it.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.triggers.iter().position(|t| &*t.name == id)
    }

    /// Renders the gates `f` configures for trigger cells `t` from now on (a reload adding one).
    pub fn mark_configured(&self, t: usize, f: &crate::config::FlowConfig) {
        if let Some(cells) = self.triggers.get(t) {
            for (c, on) in cells.configured.iter().zip(gates_of(f)) {
                if on {
                    c.store(true, Ordering::Relaxed);
                }
            }
        }
    }

    /// Trigger `t`'s counts for `gate` (in [`DECISIONS`] order), if that gate is configured.
    pub fn decisions(&self, t: usize, gate: usize) -> Option<[u64; DECISIONS.len()]> {
        let cells = self.triggers.get(t)?;
        if !cells.configured.get(gate)?.load(Ordering::Relaxed) {
            return None;
        }
        Some(std::array::from_fn(|d| cells.counts[gate][d].get()))
    }

    pub fn get(&self, t: usize, gate: usize, decision: usize) -> u64 {
        self.triggers[t].counts[gate][decision].get()
    }

    /// Renders the family; nothing at all when no trigger has a gate.
    pub fn render_prometheus(&self, w: &mut PromWriter) {
        let on = |t: &TriggerCells, g: usize| t.configured[g].load(Ordering::Relaxed);
        if !self
            .triggers
            .iter()
            .any(|t| (0..GATES.len()).any(|g| on(t, g)))
        {
            return;
        }
        w.header(
            NAME,
            "Flow-control gate decisions, by trigger, gate and decision.",
            MetricType::Counter,
        );
        for t in &self.triggers {
            for (g, gate) in GATES.iter().enumerate() {
                if !on(t, g) {
                    continue;
                }
                for (d, decision) in DECISIONS.iter().enumerate() {
                    w.sample_u64(
                        NAME,
                        &[("trigger", &t.name), ("gate", gate), ("decision", decision)],
                        t.counts[g][d].get(),
                    );
                }
            }
        }
        w.header(
            "sluice_flow_waiting_events",
            "Events held in a trigger's flow-control gates now (batch, debounce, throttle, concurrency).",
            MetricType::Gauge,
        );
        for (i, t) in self.triggers.iter().enumerate() {
            if (0..GATES.len()).any(|g| on(t, g)) {
                w.sample_u64(
                    "sluice_flow_waiting_events",
                    &[("trigger", &t.name)],
                    self.waiting(i),
                );
            }
        }
    }
}

/// The gates `f` configures, in [`GATES`] order.
fn gates_of(f: &crate::config::FlowConfig) -> [bool; GATES.len()] {
    [
        f.batch.is_some(),
        f.debounce.is_some(),
        f.rate_limit.is_some(),
        f.throttle.is_some(),
        f.singleton.is_some(),
        f.concurrency.is_some(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_configured_gates_only() {
        let c = crate::config::Config::build(
            crate::config::Config::parse_manifest(
                "[[triggers]]\nid = \"a\"\nprovider = \"p\"\npath = \"/a\"\nsingleton = {}\n\
                 [[triggers]]\nid = \"b\"\nprovider = \"p\"\npath = \"/b\"\n",
            )
            .unwrap(),
            &|_| None,
            &crate::config::Overrides::default(),
        )
        .unwrap();
        let m = FlowMetrics::new(&c.triggers);
        m.incr(0, 4, 2);
        m.incr(7, 0, 0); // unknown trigger: ignored
        let mut w = PromWriter::new();
        m.render_prometheus(&mut w);
        let text = w.finish();
        assert!(text.contains(
            "sluice_flow_control_total{decision=\"skip\",gate=\"singleton\",trigger=\"a\"} 1\n"
        ));
        assert!(text.contains(
            "sluice_flow_control_total{decision=\"pass\",gate=\"singleton\",trigger=\"a\"} 0\n"
        ));
        assert!(!text.contains("trigger=\"b\""));
        assert!(!text.contains("gate=\"batch\""));
    }
}
