//! The flow-control gates' metrics (see `dispatch::flow`), and the per-gate held counts that
//! double as the gates' bound.
//!
//! `sluice_flow_control_total{trigger,gate,decision}`: **one decision per event per gate it
//! reaches**, counted when the event leaves the gate:
//! - `pass`: went on at once (for `batch`: the member that filled the batch);
//! - `wait`: was held, then went on (a throttled event once the window had room, a concurrency
//!   waiter once admitted, a batch member flushed by size or timeout, a debounced event after
//!   its quiet period — `debounce` holds every event, so its `pass` is always 0);
//! - `skip`: ended at this gate without delivery, held first or not (`rate_limit` →
//!   `rate_limited`, `debounce` → `debounced` when superseded, `singleton` →
//!   `singleton_active`).
//!
//! So for every gate `pass + wait + skip + held = events that reached it` (held: the gauge
//! below; events held across a restart are evaluated again and counted again; an event a
//! reload offers again to its gate is counted once, when it leaves, `dispatch::flow::rekey`).
//!
//! `sluice_flow_held{trigger,gate}` (gauge): events a gate holds now (throttle queue, debounce
//! window, batch being filled, concurrency waiters), plus `gate="dispatch"`: events a gate
//! released that wait for a `max_outstanding` slot. `gate="dispatch"` is bounded by `[flow]
//! max_held`: while it is at the bound the trigger's pumps admit none of its events (they stay
//! in the log, covered by the backlog bound, and are admitted in order once slots come back),
//! see [`FlowMetrics::full`]. The gates keep their bounds themselves: `batch` and `debounce`
//! (`dispatch::flow::collect`), `throttle` and `concurrency` by holding their waiters past it
//! by reference (`dispatch::flow::waiters`), so the pumps never stop at a gate's bound.
//!
//! `sluice_flow_held_in_log{trigger,gate}` (gauge, `throttle` and `concurrency`): the held
//! events among `sluice_flow_held` kept by reference only, their records left in the log.
//! `sluice_flow_left_in_log_total{trigger,gate,bound}`: events held that way because their key
//! held `[flow] max_held_per_key` in full (`bound="key"`) or the gate `max_held`
//! (`bound="gate"`).
//!
//! `sluice_flow_key_overflow_total{trigger,gate}`: `rate_limit`/`throttle` events that found
//! the per-core key table full (`[flow] max_gate_keys`) and used the gate's shared overflow key;
//! `debounce` keys delivered early and `batch` batches flushed early because an event with a
//! new key found the gate holding `max_held` events (one count per early release).
//!
//! `sluice_flow_read_back_failures_total`: held events whose body could not be read back from
//! their log (`dispatch::flow::payload`); they stay pending.
//!
//! The dashboard (`ops::dashboard`) reads these same cells: a trigger's events "waiting in
//! gates" are the sum of its `sluice_flow_held` over the six gates (there is no second gauge).
//!
//! Cardinality is bounded by the manifest: one series per (trigger, configured gate, label), all
//! rendered, zeros included. The cells are those of the start-up triggers plus at most
//! [`RELOAD_CELLS`] spare ones, which a reload claims ([`FlowMetrics::claim`], before it
//! publishes) for a trigger with gates that has none yet — a trigger it adds, or one added
//! earlier without gates; a reload that would need more is refused (restart to re-size). A
//! claimed cell keeps its trigger id for the rest of the run (a trigger removed and added again
//! finds its cells, counts included). The engine maps its triggers to cells by id,
//! [`FlowMetrics::index_of`], and a gate a reload adds is rendered from then on,
//! [`FlowMetrics::mark_configured`]. Cells are shared std atomics (`Relaxed`: each is a count that
//! publishes no other memory; the bound check reads a count that may be a few events late,
//! see `dispatch::flow` "Bounds"), indexed by the trigger's position in the config, written by
//! the trigger's owner core.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

use crate::dispatch::spec::TriggerRoute;
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
pub const DECISIONS: [&str; 3] = ["pass", "wait", "skip"];
/// Index of the `gate="dispatch"` held count (released, waiting for a dispatch slot).
pub const DISPATCH: usize = GATES.len();
/// Gates (`batch`, `debounce`) that keep `[flow] max_held` themselves ([`FlowMetrics::full`]).
const SELF_BOUNDED: [usize; 4] = [0, 1, 3, 5];

/// Spare trigger cells a run's reloads may claim for triggers with gates (the bound on the
/// series reloads add: this many triggers, each with the start-up triggers' families).
pub const RELOAD_CELLS: usize = 64;

const NAME: &str = "sluice_flow_control_total";
const HELD: &str = "sluice_flow_held";
const OVERFLOW: &str = "sluice_flow_key_overflow_total";
const IN_LOG: &str = "sluice_flow_held_in_log";
const LEFT: &str = "sluice_flow_left_in_log_total";
/// `bound` label values of `sluice_flow_left_in_log_total` (index = `dispatch::flow::waiters::Bound as usize`).
pub const BOUNDS: [&str; 2] = ["key", "gate"];
/// Gates whose waiters may be held by reference (`throttle`, `concurrency`).
const BY_REFERENCE: [usize; 2] = [3, 5];

#[derive(Debug)]
struct TriggerCells {
    /// The trigger id: set at start, or by the reload that claims a spare cell.
    name: OnceLock<Box<str>>,
    /// Gates rendered for this trigger: those of the start-up configuration, plus any a reload
    /// gave it (`Relaxed`: a flag read at render time, set before the first count).
    configured: [AtomicBool; GATES.len()],
    counts: [[Counter; DECISIONS.len()]; GATES.len()],
    /// Indexed like [`GATES`], then [`DISPATCH`].
    held: [AtomicU64; GATES.len() + 1],
    overflow: [Counter; GATES.len()],
    /// Of `held`, the events kept by reference, indexed like [`GATES`].
    in_log: [AtomicU64; GATES.len()],
    /// Events held by reference, by gate and [`BOUNDS`].
    left: [[Counter; BOUNDS.len()]; GATES.len()],
    /// An `ordering` gate's keys, as its owner core last gathered them (once a second).
    ordering: Mutex<Option<OrderingView>>,
}

/// An `ordering` gate's keys (`dispatch::flow::ordering`): gathered once a second by the
/// trigger's owner core, rendered by `/metrics` and the dashboard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrderingView {
    /// `on_exhausted = "hold"`.
    pub hold: bool,
    /// Keys with at least one event waiting.
    pub keys_waiting: u64,
    /// Keys stopped by a dead letter (`hold`).
    pub keys_stopped: u64,
    /// Age of the oldest waiting event (since its acceptance), ms; 0 when none waits.
    pub oldest_wait_ms: u64,
    /// The key of that event.
    pub oldest_key: Option<String>,
    /// The first stopped keys, sorted, with the DLQ entry each waits for (at most
    /// `ordering::NAMES_SHOWN`).
    pub stopped: Vec<(String, String)>,
}

/// The family for a fixed set of triggers.
#[derive(Debug, Default)]
pub struct FlowMetrics {
    triggers: Vec<TriggerCells>,
    /// Trigger id → index in `triggers`, for the start-up triggers (fixed).
    index: HashMap<Box<str>, usize>,
    /// Start-up triggers: the spare cells are `triggers[start..]`.
    start: usize,
    /// Spare cells claimed so far (their names are set): stored with `Release` after the name,
    /// loaded with `Acquire` by [`FlowMetrics::index_of`].
    claimed: AtomicUsize,
    /// Serializes claims.
    claiming: Mutex<()>,
    /// `sluice_flow_read_back_failures_total` (`dispatch::flow::payload`).
    read_back_failures: Counter,
    /// `sluice_ordering_removal_log_overruns_total`: polls of stopped keys that found the DLQ's
    /// removal log past what it keeps (`dlq::store::removals`), and looked entries up instead.
    removal_log_overruns: Counter,
    /// `sluice_flow_order_horizon_floored_total` (`dispatch::horizon`, "Bound").
    horizon_floored: Counter,
    /// `[flow] max_held`.
    max_held: u64,
}

impl FlowMetrics {
    pub fn new(triggers: &[TriggerRoute], max_held: usize) -> FlowMetrics {
        FlowMetrics {
            read_back_failures: Counter::new(),
            removal_log_overruns: Counter::new(),
            horizon_floored: Counter::new(),
            max_held: max_held as u64,
            index: triggers
                .iter()
                .enumerate()
                .map(|(i, t)| (t.id.as_str().into(), i))
                .collect(),
            start: triggers.len(),
            claimed: AtomicUsize::new(0),
            claiming: Mutex::new(()),
            triggers: triggers
                .iter()
                .map(|t| TriggerCells {
                    name: OnceLock::from(Box::<str>::from(t.id.as_str())),
                    configured: gates_of(&t.flow).map(AtomicBool::new),
                    counts: Default::default(),
                    held: Default::default(),
                    overflow: Default::default(),
                    in_log: Default::default(),
                    left: Default::default(),
                    ordering: Mutex::default(),
                })
                .chain((0..RELOAD_CELLS).map(|_| TriggerCells {
                    name: OnceLock::new(),
                    configured: Default::default(),
                    counts: Default::default(),
                    held: Default::default(),
                    overflow: Default::default(),
                    in_log: Default::default(),
                    left: Default::default(),
                    ordering: Mutex::default(),
                }))
                .collect(),
        }
    }

    /// Gives every trigger of `triggers` that has gates and no cells a spare cell (a reload,
    /// before it publishes `triggers`). `Err` names the first trigger left without one: the
    /// reload must then publish nothing.
    pub fn claim(&self, triggers: &[TriggerRoute]) -> Result<(), String> {
        let _serial = self.claiming.lock().unwrap_or_else(|p| p.into_inner());
        let need: Vec<&TriggerRoute> = triggers
            .iter()
            .filter(|t| !t.flow.is_empty() && self.index_of(&t.id).is_none())
            .collect();
        let claimed = self.claimed.load(Ordering::Acquire);
        let spare = (self.triggers.len() - self.start).saturating_sub(claimed);
        if let Some(t) = need.get(spare) {
            return Err(format!(
                "trigger {:?} needs flow-control metric cells and this run's {RELOAD_CELLS} spare \
                 ones are taken by triggers added by earlier reloads",
                t.id
            ));
        }
        for (i, t) in need.iter().enumerate() {
            let _ = self.triggers[self.start + claimed + i]
                .name
                .set(t.id.as_str().into());
        }
        // After the names: a reader that sees the count sees them.
        self.claimed.store(claimed + need.len(), Ordering::Release);
        Ok(())
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

    /// Counts `n` decisions at once.
    pub fn incr_n(&self, t: usize, gate: usize, decision: usize, n: usize) {
        if let Some(c) = self
            .triggers
            .get(t)
            .and_then(|c| c.counts.get(gate))
            .and_then(|g| g.get(decision))
        {
            c.add(n as u64);
        }
    }

    /// A held event's body could not be read back from its log.
    pub fn read_back_failed(&self) {
        self.read_back_failures.incr();
    }

    pub fn read_back_failures(&self) -> u64 {
        self.read_back_failures.get()
    }

    /// Counts one key-table overflow of `gate` for trigger `t`.
    pub fn overflowed(&self, t: usize, gate: usize) {
        if let Some(c) = self.triggers.get(t).and_then(|c| c.overflow.get(gate)) {
            c.incr();
        }
    }

    /// Moves the held count of (`t`, `gate`) by `delta` (`gate` may be [`DISPATCH`]).
    #[inline]
    pub fn held_add(&self, t: usize, gate: usize, delta: i64) {
        if let Some(c) = self.triggers.get(t).and_then(|c| c.held.get(gate)) {
            match delta >= 0 {
                true => c.fetch_add(delta as u64, Relaxed),
                false => c.fetch_sub(delta.unsigned_abs(), Relaxed),
            };
        }
    }

    /// Events held by (`t`, `gate`).
    pub fn held(&self, t: usize, gate: usize) -> u64 {
        self.triggers
            .get(t)
            .and_then(|c| c.held.get(gate))
            .map_or(0, |c| c.load(Relaxed))
    }

    /// Moves the count of (`t`, `gate`)'s held events kept by reference by `delta`.
    #[inline]
    pub fn in_log_add(&self, t: usize, gate: usize, delta: i64) {
        if let Some(c) = self.triggers.get(t).and_then(|c| c.in_log.get(gate)) {
            match delta >= 0 {
                true => c.fetch_add(delta as u64, Relaxed),
                false => c.fetch_sub(delta.unsigned_abs(), Relaxed),
            };
        }
    }

    /// Events (`t`, `gate`) holds by reference.
    pub fn in_log(&self, t: usize, gate: usize) -> u64 {
        self.triggers
            .get(t)
            .and_then(|c| c.in_log.get(gate))
            .map_or(0, |c| c.load(Relaxed))
    }

    /// Counts one event (`t`, `gate`) held by reference at `bound` (index in [`BOUNDS`]).
    pub fn left_in_log(&self, t: usize, gate: usize, bound: usize) {
        if let Some(c) = (self.triggers.get(t))
            .and_then(|c| c.left.get(gate))
            .and_then(|g| g.get(bound))
        {
            c.incr();
        }
    }

    /// Events (`t`, `gate`) held by reference at `bound` so far.
    pub fn left(&self, t: usize, gate: usize, bound: usize) -> u64 {
        self.triggers[t].left[gate][bound].get()
    }

    /// True while trigger `t`'s events released by its gates wait for `max_outstanding` slots
    /// at `[flow] max_held` (`gate="dispatch"`): its pumps admit none of its events until slots
    /// come back. The gates themselves are not looked at: each keeps its own bound (`batch` and
    /// `debounce` must take an event that joins or supersedes one they hold, which the pump
    /// cannot tell from a new key, `dispatch::flow::collect`; `throttle` and `concurrency` hold
    /// their waiters past it by reference, `dispatch::flow::waiters`).
    pub fn full(&self, t: usize) -> bool {
        self.triggers.get(t).is_some_and(|c| {
            c.held
                .iter()
                .enumerate()
                .filter(|(g, _)| !SELF_BOUNDED.contains(g))
                .any(|(_, h)| h.load(Relaxed) >= self.max_held)
        })
    }

    /// The cells of trigger `id`: the start-up triggers' by map, then a scan of the spare cells
    /// claimed by reloads (at most [`RELOAD_CELLS`]).
    pub fn index_of(&self, id: &str) -> Option<usize> {
        if let Some(&i) = self.index.get(id) {
            return Some(i);
        }
        let claimed = self.claimed.load(Ordering::Acquire);
        (self.start..self.start + claimed)
            .find(|&i| self.triggers[i].name.get().is_some_and(|n| &**n == id))
    }

    /// Whether trigger `t` has a flow gate now (any configured, `mark_configured` on reloads).
    pub fn has_gates(&self, t: usize) -> bool {
        self.triggers
            .get(t)
            .is_some_and(|c| c.configured.iter().any(|g| g.load(Relaxed)))
    }

    /// True while trigger `id`'s cells are at `[flow] max_held` ([`FlowMetrics::full`]).
    pub fn full_id(&self, id: &str) -> bool {
        self.index_of(id).is_some_and(|t| self.full(t))
    }

    /// Renders the gates `f` configures for trigger cells `t` from now on (a reload adding one).
    pub fn mark_configured(&self, t: usize, f: &super::spec::FlowSpec) {
        if let Some(cells) = self.triggers.get(t) {
            for (c, on) in cells.configured.iter().zip(gates_of(f)) {
                if on {
                    c.store(true, Relaxed);
                }
            }
        }
    }

    /// Trigger cells `t`'s counts for `gate` (in [`DECISIONS`] order), if that gate is rendered.
    pub fn decisions(&self, t: usize, gate: usize) -> Option<[u64; DECISIONS.len()]> {
        let cells = self.triggers.get(t)?;
        if !cells.configured.get(gate)?.load(Relaxed) {
            return None;
        }
        Some(std::array::from_fn(|d| cells.counts[gate][d].get()))
    }

    /// Events held in trigger cells `t`'s gates now (the six gates; not `gate="dispatch"`).
    pub fn held_in_gates(&self, t: usize) -> u64 {
        self.triggers.get(t).map_or(0, |c| {
            c.held[..GATES.len()].iter().map(|h| h.load(Relaxed)).sum()
        })
    }

    pub fn get(&self, t: usize, gate: usize, decision: usize) -> u64 {
        self.triggers[t].counts[gate][decision].get()
    }

    pub fn overflows(&self, t: usize, gate: usize) -> u64 {
        self.triggers[t].overflow[gate].get()
    }

    /// Publishes trigger `t`'s `ordering` keys (its owner core, once a second); `None` when a
    /// reload removed the gate.
    pub fn set_ordering(&self, t: usize, v: Option<OrderingView>) {
        if let Some(c) = self.triggers.get(t) {
            *c.ordering.lock().unwrap_or_else(|p| p.into_inner()) = v;
        }
    }

    /// Trigger `id`'s `ordering` keys as last published.
    pub fn ordering(&self, id: &str) -> Option<OrderingView> {
        let c = self.triggers.get(self.index_of(id)?)?;
        c.ordering.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A turn in which events waited for the order horizon and it was raised to its floor.
    pub fn horizon_floored(&self) {
        self.horizon_floored.incr();
    }

    /// Turns counted by [`FlowMetrics::horizon_floored`].
    pub fn horizon_floors(&self) -> u64 {
        self.horizon_floored.get()
    }

    /// A poll of stopped keys fell behind the DLQ's removal log (`ordering::watch_stops`).
    pub fn removal_log_overrun(&self) {
        self.removal_log_overruns.incr();
    }

    /// `sluice_ordering_*`, for the triggers with an `ordering` gate.
    fn render_ordering(&self, w: &mut PromWriter) {
        let views: Vec<(&str, OrderingView)> = (self.triggers.iter())
            .filter_map(|t| {
                let v = t
                    .ordering
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone()?;
                Some((t.name(), v))
            })
            .collect();
        if views.is_empty() {
            return;
        }
        type Family = (&'static str, &'static str, fn(&OrderingView) -> f64);
        let families: [Family; 3] = [
            (
                "sluice_ordering_keys_waiting",
                "Keys of an ordering gate with at least one event waiting.",
                |v| v.keys_waiting as f64,
            ),
            (
                "sluice_ordering_keys_stopped",
                "Keys of an ordering gate stopped by a dead letter (on_exhausted = \"hold\").",
                |v| v.keys_stopped as f64,
            ),
            (
                "sluice_ordering_oldest_wait_seconds",
                "Age of the oldest event waiting in an ordering gate's keys (0: none waits).",
                |v| v.oldest_wait_ms as f64 / 1000.0,
            ),
        ];
        for (name, help, value) in families {
            w.header(name, help, MetricType::Gauge);
            for (trigger, v) in &views {
                w.sample(name, &[("trigger", trigger)], value(v));
            }
        }
        let name = "sluice_ordering_removal_log_overruns_total";
        w.header(
            name,
            "Polls of keys stopped by a dead letter that fell behind the DLQ's removal log (entries looked up instead).",
            MetricType::Counter,
        );
        w.sample_u64(name, &[], self.removal_log_overruns.get());
    }

    /// Renders the families; nothing at all when no trigger has a gate.
    pub fn render_prometheus(&self, w: &mut PromWriter) {
        if !self.triggers.iter().any(TriggerCells::any_gate) {
            return;
        }
        self.render_ordering(w);
        w.header(
            NAME,
            "Flow-control gate decisions, one per event per gate, by trigger, gate and decision.",
            MetricType::Counter,
        );
        self.each_gate(|t, g, gate| {
            for (d, decision) in DECISIONS.iter().enumerate() {
                w.sample_u64(
                    NAME,
                    &[
                        ("trigger", t.name()),
                        ("gate", gate),
                        ("decision", decision),
                    ],
                    t.counts[g][d].get(),
                );
            }
        });
        w.header(
            HELD,
            "Events a flow-control gate holds now (gate=dispatch: released, waiting for a slot).",
            MetricType::Gauge,
        );
        for t in self.triggers.iter().filter(|t| t.any_gate()) {
            for (g, gate) in GATES.iter().chain(["dispatch"].iter()).enumerate() {
                if g < GATES.len() && !t.configured[g].load(Relaxed) {
                    continue;
                }
                let n = t.held[g].load(Relaxed);
                w.sample_u64(HELD, &[("trigger", t.name()), ("gate", gate)], n);
            }
        }
        self.render_in_log(w);
        w.header(
            "sluice_flow_read_back_failures_total",
            "Held events whose body could not be read back from their log (left pending).",
            MetricType::Counter,
        );
        w.sample_u64(
            "sluice_flow_read_back_failures_total",
            &[],
            self.read_back_failures.get(),
        );
        let name = "sluice_flow_order_horizon_floored_total";
        w.header(
            name,
            "Turns in which events waited for the order horizon and a core more than 1 s behind made it go to its floor (ordered gates went on, best effort).",
            MetricType::Counter,
        );
        w.sample_u64(name, &[], self.horizon_floored.get());
        w.header(
            OVERFLOW,
            "Window-gate events that used the shared overflow key (key table full); debounce keys and batches released early for a new key (gate at max_held).",
            MetricType::Counter,
        );
        self.each_gate(|t, g, gate| {
            if g <= 3 {
                let n = t.overflow[g].get();
                w.sample_u64(OVERFLOW, &[("trigger", t.name()), ("gate", gate)], n);
            }
        });
    }

    /// [`IN_LOG`] and [`LEFT`], for the configured gates that hold waiters by reference.
    fn render_in_log(&self, w: &mut PromWriter) {
        w.header(
            IN_LOG,
            "Held events (throttle, concurrency) kept by reference only, their records left in the log.",
            MetricType::Gauge,
        );
        self.each_gate(|t, g, gate| {
            if BY_REFERENCE.contains(&g) {
                let n = t.in_log[g].load(Relaxed);
                w.sample_u64(IN_LOG, &[("trigger", t.name()), ("gate", gate)], n);
            }
        });
        w.header(
            LEFT,
            "Events held by reference because their key (bound=key: max_held_per_key) or the gate (bound=gate: max_held) held its bound in full.",
            MetricType::Counter,
        );
        self.each_gate(|t, g, gate| {
            if BY_REFERENCE.contains(&g) {
                for (b, bound) in BOUNDS.iter().enumerate() {
                    let labels = [("trigger", t.name()), ("gate", gate), ("bound", *bound)];
                    w.sample_u64(LEFT, &labels, t.left[g][b].get());
                }
            }
        });
    }

    fn each_gate(&self, mut f: impl FnMut(&TriggerCells, usize, &str)) {
        for t in &self.triggers {
            for (g, gate) in GATES.iter().enumerate() {
                if t.configured[g].load(Relaxed) {
                    f(t, g, gate);
                }
            }
        }
    }
}

impl TriggerCells {
    fn name(&self) -> &str {
        self.name.get().map_or("", |n| n)
    }

    fn any_gate(&self) -> bool {
        self.configured.iter().any(|c| c.load(Relaxed))
    }
}

/// The gates `f` configures, in [`GATES`] order.
fn gates_of(f: &super::spec::FlowSpec) -> [bool; GATES.len()] {
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
        .unwrap()
        .dispatch_spec();
        let m = FlowMetrics::new(&c.triggers, 10);
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

    #[test]
    fn held_gauges_render_and_bound_the_trigger() {
        let c = crate::config::Config::build(
            crate::config::Config::parse_manifest(
                "[[triggers]]\nid = \"a\"\nprovider = \"p\"\npath = \"/a\"\n\
                 throttle = { period = \"1s\", max = 1 }\n",
            )
            .unwrap(),
            &|_| None,
            &crate::config::Overrides::default(),
        )
        .unwrap()
        .dispatch_spec();
        let m = FlowMetrics::new(&c.triggers, 2);
        m.held_add(0, 3, 1);
        assert!(!m.full(0));
        // The throttle past max_held holds the rest by reference: the trigger is never full
        // for it (issue 38: a gate at its bound does not stop the pumps).
        m.held_add(0, 3, 4);
        m.in_log_add(0, 3, 3);
        m.left_in_log(0, 3, 1);
        assert!(!m.full(0), "a gate keeps its own bound");
        m.held_add(0, 3, -4);
        m.in_log_add(0, 3, -2);
        m.held_add(0, DISPATCH, 2);
        assert!(m.full(0), "released events waiting for a slot at max_held");
        m.held_add(0, DISPATCH, -1);
        assert!(!m.full(0) && !m.full(5), "unknown slots are never full");
        m.overflowed(0, 3);
        let mut w = PromWriter::new();
        m.render_prometheus(&mut w);
        let text = w.finish();
        for line in [
            "sluice_flow_held{gate=\"throttle\",trigger=\"a\"} 1\n",
            "sluice_flow_held{gate=\"dispatch\",trigger=\"a\"} 1\n",
            "sluice_flow_key_overflow_total{gate=\"throttle\",trigger=\"a\"} 1\n",
            "sluice_flow_read_back_failures_total 0\n",
            "sluice_flow_held_in_log{gate=\"throttle\",trigger=\"a\"} 1\n",
            "sluice_flow_left_in_log_total{bound=\"gate\",gate=\"throttle\",trigger=\"a\"} 1\n",
            "sluice_flow_left_in_log_total{bound=\"key\",gate=\"throttle\",trigger=\"a\"} 0\n",
        ] {
            assert!(text.contains(line), "{line} not in {text}");
        }
        assert!(!text.contains("gate=\"batch\""));
    }

    #[test]
    fn reloads_claim_spare_cells_up_to_the_bound() {
        let cfg = |n: usize| {
            let mut text =
                String::from("[[triggers]]\nid = \"a\"\nprovider = \"p\"\npath = \"/a\"\n");
            for i in 0..n {
                text += &format!("[[triggers]]\nid = \"n{i}\"\nprovider = \"p\"\npath = \"/n{i}\"\nsingleton = {{}}\n");
            }
            crate::config::Config::build(
                crate::config::Config::parse_manifest(&text).unwrap(),
                &|_| None,
                &crate::config::Overrides::default(),
            )
            .unwrap()
            .dispatch_spec()
        };
        let m = FlowMetrics::new(&cfg(0).triggers, 1);
        assert_eq!(m.index_of("n0"), None);
        m.claim(&cfg(2).triggers).unwrap();
        let (n0, n1) = (m.index_of("n0").unwrap(), m.index_of("n1").unwrap());
        assert!(n0 >= 1 && n1 >= 1 && n0 != n1, "spare cells after a's");
        m.held_add(n1, 4, 1);
        assert!(m.full_id("n1") && !m.full_id("n0") && !m.full_id("a"));
        // Claiming again keeps the cells; past the bound nothing is claimed.
        m.claim(&cfg(2).triggers).unwrap();
        assert_eq!(m.index_of("n1"), Some(n1));
        let e = m.claim(&cfg(RELOAD_CELLS + 1).triggers).unwrap_err();
        assert!(e.contains(&format!("\"n{RELOAD_CELLS}\"")), "{e}");
        assert_eq!(m.index_of("n2"), None, "a refused claim takes no cell");
        m.claim(&cfg(RELOAD_CELLS).triggers).unwrap();
    }
}
