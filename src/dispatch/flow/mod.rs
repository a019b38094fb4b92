//! Per-trigger flow-control gates (Harn reference §5; manifest syntax in
//! [`crate::config::flow`]): `batch → debounce → rate_limit → throttle → singleton →
//! concurrency`, applied on the destination's owner core after the pump hands the event over
//! and before the destination's permits.
//!
//! **Where the state lives.** A trigger has one handler, so one destination, so one owner core
//! (`sched::placement`). Every gate of a trigger therefore lives in that core's
//! [`FlowEngine`], inside its `Dispatcher`, and is only touched by that core's thread: plain
//! maps, no locks, no atomics (the metrics counters aside), hence no loom model. Decisions take
//! `now` (nanoseconds of the injected clock), so every gate is tested on a manual clock.
//!
//! **Semantics** (per key; the key comes from the gate's selector, see [`key`]):
//! - `batch`: members are collected until `size` or `timeout` after the first, then leave as one
//!   carrier job ([`batch::carrier`]); every member gets the carrier's outcome.
//! - `debounce` (trailing edge): the latest event of a key is held until `period` passes without
//!   a newer one; each superseded event is skipped (`debounced`).
//! - `rate_limit`: sliding-window log ([`window`]); past `max` per `period` the event is skipped
//!   (`rate_limited`), never retried.
//! - `throttle`: the same window, but excess events wait (FIFO per key) until the window has
//!   room, then go on.
//! - `singleton`: while an event of the key is in progress (from passing this gate to its
//!   terminal outcome, retries and concurrency waits included) others are skipped
//!   (`singleton_active`).
//! - `concurrency`: at most `max` in progress per key (same span); waiters leave in order of
//!   (`priority` rank, arrival), rank = position of the priority key's value in `order`,
//!   unlisted values last.
//!
//! Skips are reported as [`FlowOut::skipped`]; the dispatcher turns them into durable
//! `Skipped` outcomes. Held events are still jobs held by the core, so they count against the
//! pump's `max_outstanding`; after a restart they are pending in the WAL and evaluated again.
//!
//! **Bounds.** Events held here ≤ jobs held by the core ≤ `max_outstanding`. Keys of `batch`,
//! `debounce`, `singleton` and `concurrency` exist only while an event of the key is held or in
//! progress, so they are bounded the same way. `rate_limit`/`throttle` keys outlive their events
//! (the window remembers); there are at most `[flow] max_gate_keys` of them per core, each with at
//! most `max` timestamps (8 bytes each). A new key past the bound first evicts idle keys (empty
//! window, no waiters; a sweep at most every [`SWEEP_EVERY`]); if none is idle, the event is
//! counted against the gate's shared overflow key (metrics decision `overflow`): it is limited
//! more strictly, never less. Timers ≤ held keys, plus for `batch` one stale entry per batch
//! flushed by size before its timeout.
#![forbid(unsafe_code)]

pub mod batch;
pub mod key;
pub mod metrics;
mod rekey;
pub mod window;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::config::flow::{BatchGate, ConcurrencyGate, DebounceGate, FlowConfig, WindowGate};
use crate::config::Config;
use crate::dispatch::job::{Job, SkipReason};
use crate::dispatch::metrics::DispatchMetrics;
use crate::wal::{EventRecord, Lsn};
use key::{Resolver, OVERFLOW_KEY};
use window::Window;

/// Shortest interval between two sweeps for idle window keys when the key table is full.
pub const SWEEP_EVERY: u64 = 100_000_000;
/// Idle window keys are also swept this often, to give memory back.
const IDLE_SWEEP_EVERY: u64 = 10_000_000_000;

/// The gates in evaluation order (the index is the metrics `gate` label's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    Batch = 0,
    Debounce = 1,
    RateLimit = 2,
    Throttle = 3,
    Singleton = 4,
    Concurrency = 5,
}

const STAGES: [Stage; 6] = [
    Stage::Batch,
    Stage::Debounce,
    Stage::RateLimit,
    Stage::Throttle,
    Stage::Singleton,
    Stage::Concurrency,
];

/// A gate's decision (the metrics `decision` label's index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Pass = 0,
    Wait = 1,
    Skip = 2,
    Overflow = 3,
}

/// What an engine call produced: jobs through every gate, jobs skipped.
#[derive(Debug, Default)]
pub struct FlowOut {
    pub ready: Vec<Job>,
    pub skipped: Vec<(Job, SkipReason)>,
}

/// An event inside the gates, with its keys resolved once.
#[derive(Debug)]
struct Pending {
    job: Job,
    keys: Box<Keys>,
}

#[derive(Debug, Default)]
struct Keys {
    /// Indexed by `Stage`; empty for a gate the trigger does not have.
    by_stage: [String; 6],
    /// Concurrency waiter rank (0 without `priority`).
    rank: usize,
}

#[derive(Debug, Default)]
struct WindowKey {
    window: Window,
    /// `throttle` only: events waiting for room, FIFO.
    waiters: VecDeque<Pending>,
    /// A timer is set for this key.
    armed: bool,
}

#[derive(Debug)]
struct DebounceKey {
    latest: Pending,
    deadline: u64,
}

#[derive(Debug)]
struct BatchKey {
    members: Vec<Job>,
    deadline: u64,
}

#[derive(Debug, Default)]
struct ConcurrencyKey {
    active: usize,
    waiters: BTreeMap<(usize, u64), Pending>,
}

/// One trigger's gate state.
#[derive(Debug, Default)]
struct TriggerGates {
    batch: HashMap<String, BatchKey>,
    debounce: HashMap<String, DebounceKey>,
    rate_limit: HashMap<String, WindowKey>,
    throttle: HashMap<String, WindowKey>,
    singleton: HashSet<String>,
    concurrency: HashMap<String, ConcurrencyKey>,
}

/// What an event in progress holds, released at its terminal outcome.
#[derive(Debug)]
struct Hold {
    trigger: usize,
    singleton: Option<String>,
    concurrency: Option<String>,
}

/// One core's flow-control state for the triggers whose destination it owns.
#[derive(Debug)]
pub struct FlowEngine {
    config: Arc<Config>,
    metrics: Arc<DispatchMetrics>,
    /// Trigger id → index in `config.triggers`, for triggers with at least one gate.
    by_id: HashMap<String, usize>,
    /// Indexed like `config.triggers`.
    gates: Vec<TriggerGates>,
    /// Indexed like `config.triggers`: the trigger's cells in `metrics.flow` (built from the
    /// start-up configuration; a reload may reorder the triggers).
    metric_index: Vec<Option<usize>>,
    holds: HashMap<Lsn, Hold>,
    timers: BinaryHeap<Reverse<(u64, usize, Stage, String)>>,
    window_keys: usize,
    max_window_keys: usize,
    sweep_at: u64,
    idle_sweep_at: u64,
    seq: u64,
    waiting: usize,
}

impl FlowEngine {
    pub fn new(config: Arc<Config>, metrics: Arc<DispatchMetrics>) -> FlowEngine {
        let by_id = config
            .triggers
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.flow.is_empty())
            .map(|(i, t)| (t.id.clone(), i))
            .collect();
        let gates = config
            .triggers
            .iter()
            .map(|_| TriggerGates::default())
            .collect();
        let metric_index = config
            .triggers
            .iter()
            .map(|t| {
                let m = metrics.flow.index_of(&t.id)?;
                metrics.flow.mark_configured(m, &t.flow);
                Some(m)
            })
            .collect();
        FlowEngine {
            metric_index,
            max_window_keys: config.flow.max_gate_keys,
            config,
            metrics,
            by_id,
            gates,
            holds: HashMap::new(),
            timers: BinaryHeap::new(),
            window_keys: 0,
            sweep_at: 0,
            idle_sweep_at: 0,
            seq: 0,
            waiting: 0,
        }
    }

    /// Events held in gates (waiting, collecting, debouncing).
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// `rate_limit`/`throttle` keys counted against `max_gate_keys`.
    pub fn window_keys(&self) -> usize {
        self.window_keys
    }

    /// The earliest timer (batch timeout, debounce quiet time, throttle room).
    pub fn next_deadline(&self) -> Option<u64> {
        self.timers.peek().map(|Reverse((t, ..))| *t)
    }

    /// Does trigger `id` have any gate? (Without, [`FlowEngine::offer`] just passes the job.)
    pub fn gates(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    /// An event from the pump enters the gates of its trigger.
    pub fn offer(&mut self, job: Job, now: u64, out: &mut FlowOut) {
        let Some(&t) = self.by_id.get(job.event.trigger_id.as_str()) else {
            out.ready.push(job);
            return;
        };
        let keys = Box::new(resolve(&self.config.triggers[t].flow, &job.event));
        self.run(t, Pending { job, keys }, Stage::Batch, now, out);
    }

    /// The event at `lsn` reached a terminal outcome: give back its singleton and concurrency
    /// holds, admitting concurrency waiters.
    pub fn release(&mut self, lsn: Lsn, out: &mut FlowOut) {
        let Some(h) = self.holds.remove(&lsn) else {
            return;
        };
        let t = h.trigger;
        if let Some(k) = h.singleton {
            self.gates[t].singleton.remove(&k);
        }
        let Some(k) = h.concurrency else { return };
        let cfg = Arc::clone(&self.config);
        let Some(g) = &cfg.triggers[t].flow.concurrency else {
            return;
        };
        let Some(ck) = self.gates[t].concurrency.get_mut(&k) else {
            return;
        };
        ck.active = ck.active.saturating_sub(1);
        let mut admitted = Vec::new();
        while ck.active < g.max {
            let Some((_, p)) = ck.waiters.pop_first() else {
                break;
            };
            ck.active += 1;
            admitted.push(p);
        }
        if ck.active == 0 && ck.waiters.is_empty() {
            self.gates[t].concurrency.remove(&k);
        }
        self.note_waiting(t, -(admitted.len() as i64));
        for p in admitted {
            self.hold(p.job.lsn, t).concurrency = Some(k.clone());
            out.ready.push(p.job);
        }
    }

    /// Runs the timers due at `now`.
    pub fn on_tick(&mut self, now: u64, out: &mut FlowOut) {
        while self
            .timers
            .peek()
            .is_some_and(|Reverse((at, ..))| *at <= now)
        {
            let Some(Reverse((_, t, stage, key))) = self.timers.pop() else {
                break;
            };
            match stage {
                Stage::Batch => self.fire_batch(t, &key, now, out),
                Stage::Debounce => self.fire_debounce(t, key, now, out),
                Stage::Throttle => self.fire_throttle(t, key, now, out),
                _ => {}
            }
        }
        if now >= self.idle_sweep_at {
            self.idle_sweep_at = now + IDLE_SWEEP_EVERY;
            self.sweep(now);
        }
    }

    /// `delta` events more (or fewer) held in trigger `t`'s gates: the core's total and the
    /// trigger's `sluice_flow_waiting_events`.
    fn note_waiting(&mut self, t: usize, delta: i64) {
        self.waiting = self.waiting.saturating_add_signed(delta as isize);
        if let Some(&Some(m)) = self.metric_index.get(t) {
            self.metrics.flow.add_waiting(m, delta);
        }
    }

    fn count(&self, t: usize, stage: Stage, d: Decision) {
        if let Some(&Some(m)) = self.metric_index.get(t) {
            self.metrics.flow.incr(m, stage as usize, d as usize);
        }
    }

    fn hold(&mut self, lsn: Lsn, t: usize) -> &mut Hold {
        self.holds.entry(lsn).or_insert(Hold {
            trigger: t,
            singleton: None,
            concurrency: None,
        })
    }

    /// Takes `p` through the gates from `from` on.
    fn run(&mut self, t: usize, mut p: Pending, from: Stage, now: u64, out: &mut FlowOut) {
        let cfg = Arc::clone(&self.config);
        let f = &cfg.triggers[t].flow;
        for stage in STAGES.into_iter().filter(|s| *s >= from) {
            let next = match stage {
                Stage::Batch => match &f.batch {
                    None => Some(p),
                    Some(g) => {
                        self.batch(t, g, p, now, out);
                        None
                    }
                },
                Stage::Debounce => match &f.debounce {
                    None => Some(p),
                    Some(g) => {
                        self.debounce(t, g, p, now, out);
                        None
                    }
                },
                Stage::RateLimit => match &f.rate_limit {
                    None => Some(p),
                    Some(g) => self.rate_limit(t, g, p, now, out),
                },
                Stage::Throttle => match &f.throttle {
                    None => Some(p),
                    Some(g) => self.throttle(t, g, p, now),
                },
                Stage::Singleton => match &f.singleton {
                    None => Some(p),
                    Some(_) => self.singleton(t, p, out),
                },
                Stage::Concurrency => match &f.concurrency {
                    None => Some(p),
                    Some(g) => self.concurrency(t, g, p),
                },
            };
            match next {
                Some(n) => p = n,
                None => return,
            }
        }
        out.ready.push(p.job);
    }

    // ----- batch ------------------------------------------------------------------------------

    fn batch(&mut self, t: usize, g: &BatchGate, p: Pending, now: u64, out: &mut FlowOut) {
        let key = &p.keys.by_stage[Stage::Batch as usize];
        let full = match self.gates[t].batch.get_mut(key) {
            Some(b) => {
                b.members.push(p.job);
                b.members.len() >= g.size
            }
            None => {
                let deadline = now.saturating_add(nanos(g.timeout));
                self.timers
                    .push(Reverse((deadline, t, Stage::Batch, key.clone())));
                self.gates[t].batch.insert(
                    key.clone(),
                    BatchKey {
                        members: vec![p.job],
                        deadline,
                    },
                );
                g.size <= 1
            }
        };
        self.note_waiting(t, 1);
        if full {
            self.count(t, Stage::Batch, Decision::Pass);
            self.flush_batch(t, key, out);
        } else {
            self.count(t, Stage::Batch, Decision::Wait);
        }
    }

    /// A batch timer: flush if the key's current batch is due (a batch flushed by size leaves
    /// a stale timer; a newer batch of the key has its own, later deadline).
    fn fire_batch(&mut self, t: usize, key: &str, now: u64, out: &mut FlowOut) {
        if self.gates[t]
            .batch
            .get(key)
            .is_some_and(|b| b.deadline <= now)
        {
            self.flush_batch(t, key, out);
        }
    }

    fn flush_batch(&mut self, t: usize, key: &str, out: &mut FlowOut) {
        if let Some(b) = self.gates[t].batch.remove(key) {
            self.note_waiting(t, -(b.members.len() as i64));
            out.ready.push(batch::carrier(b.members));
        }
    }

    // ----- debounce ---------------------------------------------------------------------------

    fn debounce(&mut self, t: usize, g: &DebounceGate, p: Pending, now: u64, out: &mut FlowOut) {
        self.count(t, Stage::Debounce, Decision::Wait);
        let deadline = now.saturating_add(nanos(g.period));
        let key = p.keys.by_stage[Stage::Debounce as usize].clone();
        match self.gates[t].debounce.get_mut(&key) {
            Some(d) => {
                let old = std::mem::replace(&mut d.latest, p);
                d.deadline = deadline;
                out.skipped.push((old.job, SkipReason::Debounced));
                self.count(t, Stage::Debounce, Decision::Skip);
            }
            None => {
                self.note_waiting(t, 1);
                self.timers
                    .push(Reverse((deadline, t, Stage::Debounce, key.clone())));
                self.gates[t].debounce.insert(
                    key,
                    DebounceKey {
                        latest: p,
                        deadline,
                    },
                );
            }
        }
    }

    fn fire_debounce(&mut self, t: usize, key: String, now: u64, out: &mut FlowOut) {
        let Some(d) = self.gates[t].debounce.get(&key) else {
            return;
        };
        if d.deadline > now {
            // A newer event moved the quiet time: one timer per key, re-armed.
            self.timers
                .push(Reverse((d.deadline, t, Stage::Debounce, key)));
            return;
        }
        if let Some(d) = self.gates[t].debounce.remove(&key) {
            self.note_waiting(t, -1);
            self.run(t, d.latest, Stage::RateLimit, now, out);
        }
    }

    // ----- rate_limit and throttle ------------------------------------------------------------

    fn window_map(&mut self, t: usize, stage: Stage) -> &mut HashMap<String, WindowKey> {
        match stage {
            Stage::RateLimit => &mut self.gates[t].rate_limit,
            _ => &mut self.gates[t].throttle,
        }
    }

    /// The key to use in a window gate: `key` itself, or the overflow key when the per-core
    /// table is full and nothing idle can be evicted. Ensures the entry exists.
    fn window_key(&mut self, t: usize, stage: Stage, key: &str, now: u64) -> String {
        if self.window_map(t, stage).contains_key(key) {
            return key.to_string();
        }
        if self.window_keys >= self.max_window_keys && now >= self.sweep_at {
            self.sweep_at = now + SWEEP_EVERY;
            self.sweep(now);
        }
        if self.window_keys >= self.max_window_keys {
            self.count(t, stage, Decision::Overflow);
            self.window_map(t, stage)
                .entry(OVERFLOW_KEY.to_string())
                .or_default();
            return OVERFLOW_KEY.to_string();
        }
        self.window_keys += 1;
        self.window_map(t, stage)
            .insert(key.to_string(), WindowKey::default());
        key.to_string()
    }

    /// Evicts idle window keys (empty window, no waiters, no timer).
    fn sweep(&mut self, now: u64) {
        let cfg = Arc::clone(&self.config);
        let mut evicted = 0;
        for (t, g) in self.gates.iter_mut().enumerate() {
            let f = &cfg.triggers[t].flow;
            for (map, gate) in [
                (&mut g.rate_limit, &f.rate_limit),
                (&mut g.throttle, &f.throttle),
            ] {
                let Some(gate) = gate else { continue };
                let period = nanos(gate.period);
                map.retain(|k, w| {
                    w.window.trim(now, period);
                    let idle = w.window.is_empty() && w.waiters.is_empty() && !w.armed;
                    if idle && k != OVERFLOW_KEY {
                        evicted += 1;
                    }
                    !idle
                });
            }
        }
        self.window_keys -= evicted;
    }

    fn rate_limit(
        &mut self,
        t: usize,
        g: &WindowGate,
        p: Pending,
        now: u64,
        out: &mut FlowOut,
    ) -> Option<Pending> {
        let key = self.window_key(
            t,
            Stage::RateLimit,
            &p.keys.by_stage[Stage::RateLimit as usize],
            now,
        );
        let w = self.gates[t].rate_limit.entry(key).or_default();
        if w.window.try_hit(now, nanos(g.period), g.max) {
            self.count(t, Stage::RateLimit, Decision::Pass);
            Some(p)
        } else {
            self.count(t, Stage::RateLimit, Decision::Skip);
            out.skipped.push((p.job, SkipReason::RateLimited));
            None
        }
    }

    fn throttle(&mut self, t: usize, g: &WindowGate, p: Pending, now: u64) -> Option<Pending> {
        let key = self.window_key(
            t,
            Stage::Throttle,
            &p.keys.by_stage[Stage::Throttle as usize],
            now,
        );
        let period = nanos(g.period);
        let w = self.gates[t].throttle.entry(key.clone()).or_default();
        if w.waiters.is_empty() && w.window.try_hit(now, period, g.max) {
            self.count(t, Stage::Throttle, Decision::Pass);
            return Some(p);
        }
        w.waiters.push_back(p);
        let arm = (!w.armed).then(|| w.window.room_at(period).max(now));
        w.armed = true;
        if let Some(at) = arm {
            self.timers.push(Reverse((at, t, Stage::Throttle, key)));
        }
        self.note_waiting(t, 1);
        self.count(t, Stage::Throttle, Decision::Wait);
        None
    }

    fn fire_throttle(&mut self, t: usize, key: String, now: u64, out: &mut FlowOut) {
        let cfg = Arc::clone(&self.config);
        let Some(g) = &cfg.triggers[t].flow.throttle else {
            return;
        };
        let period = nanos(g.period);
        let Some(w) = self.gates[t].throttle.get_mut(&key) else {
            return;
        };
        w.armed = false;
        let mut go = Vec::new();
        while !w.waiters.is_empty() && w.window.try_hit(now, period, g.max) {
            go.extend(w.waiters.pop_front());
        }
        if !w.waiters.is_empty() {
            w.armed = true;
            let at = w.window.room_at(period).max(now + 1);
            self.timers.push(Reverse((at, t, Stage::Throttle, key)));
        }
        self.note_waiting(t, -(go.len() as i64));
        for p in go {
            self.run(t, p, Stage::Singleton, now, out);
        }
    }

    // ----- singleton and concurrency ----------------------------------------------------------

    fn singleton(&mut self, t: usize, p: Pending, out: &mut FlowOut) -> Option<Pending> {
        let key = &p.keys.by_stage[Stage::Singleton as usize];
        if self.gates[t].singleton.contains(key) {
            self.count(t, Stage::Singleton, Decision::Skip);
            out.skipped.push((p.job, SkipReason::SingletonActive));
            return None;
        }
        self.gates[t].singleton.insert(key.clone());
        self.hold(p.job.lsn, t).singleton = Some(key.clone());
        self.count(t, Stage::Singleton, Decision::Pass);
        Some(p)
    }

    fn concurrency(&mut self, t: usize, g: &ConcurrencyGate, p: Pending) -> Option<Pending> {
        let key = p.keys.by_stage[Stage::Concurrency as usize].clone();
        let c = self.gates[t].concurrency.entry(key.clone()).or_default();
        if c.waiters.is_empty() && c.active < g.max {
            c.active += 1;
            self.hold(p.job.lsn, t).concurrency = Some(key);
            self.count(t, Stage::Concurrency, Decision::Pass);
            return Some(p);
        }
        self.seq += 1;
        c.waiters.insert((p.keys.rank, self.seq), p);
        self.note_waiting(t, 1);
        self.count(t, Stage::Concurrency, Decision::Wait);
        None
    }
}

/// Resolves every key the trigger's gates use (the body is parsed at most once).
fn resolve(f: &FlowConfig, event: &EventRecord) -> Keys {
    let mut r = Resolver::new(event);
    let mut keys = Keys::default();
    let mut set = |stage: Stage, sel: Option<&crate::config::flow::KeySelector>| {
        if let Some(sel) = sel {
            keys.by_stage[stage as usize] = r.resolve(sel);
        }
    };
    set(Stage::Batch, f.batch.as_ref().map(|g| &g.key));
    set(Stage::Debounce, f.debounce.as_ref().map(|g| &g.key));
    set(Stage::RateLimit, f.rate_limit.as_ref().map(|g| &g.key));
    set(Stage::Throttle, f.throttle.as_ref().map(|g| &g.key));
    set(Stage::Singleton, f.singleton.as_ref().map(|g| &g.key));
    set(Stage::Concurrency, f.concurrency.as_ref().map(|g| &g.key));
    if let Some(p) = f.concurrency.as_ref().and_then(|c| c.priority.as_ref()) {
        keys.rank = p.rank(&r.resolve(&p.key));
    }
    keys
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
