//! Per-trigger flow-control gates (Harn reference §5; manifest syntax in
//! `config::flow`): `batch → debounce → rate_limit → throttle → singleton →
//! concurrency`, applied on the destination's owner core after the pump hands the event over
//! and before the destination's permits.
//!
//! **Where the state lives.** A trigger has one handler, so one destination, so one owner core
//! (`dispatch::placement`). Every gate of a trigger therefore lives in that core's
//! [`FlowEngine`], inside its `Dispatcher`, and is only touched by that core's thread: plain
//! maps, no locks, no atomics (the metrics counters aside), hence no loom model. Decisions take
//! `now` (nanoseconds of the injected clock), so every gate is tested on a manual clock.
//!
//! **Semantics** (per key; the key comes from the gate's selector, see [`key`]):
//! - `batch`: members are collected until `size` or `timeout` after the first, then leave as one
//!   carrier job ([`batch::carrier`]); every member gets the carrier's outcome.
//! - `debounce` (trailing edge): the latest event of a key (by acceptance order) is held until
//!   `period` passes without a newer one; each superseded event is skipped (`debounced`).
//! - `rate_limit`: sliding-window log ([`window`]); past `max` per `period` the event is skipped
//!   (`rate_limited`), never retried.
//! - `throttle`: the same window, but excess events wait until the window has room, then go
//!   on, in acceptance order per key.
//! - `singleton`: while an event of the key is in progress (from passing this gate to its
//!   terminal outcome, retries and concurrency waits included) others are skipped
//!   (`singleton_active`).
//! - `concurrency`: at most `max` in progress per key (same span); waiters leave in order of
//!   (`priority` rank, acceptance order), rank = position of the priority key's value in
//!   `order`, unlisted values last.
//! - `ordering`: `concurrency` with `max` 1 and no priority, where a replay waits at its
//!   original's place and, with `on_exhausted = "hold"`, a dead letter stops its key until it
//!   leaves the DLQ ([`ordering`]).
//!
//! **One order for waiters: acceptance order**, the event id (a ULID: time-ordered across
//! cores), then the event key (`Pending::order`) — not the event key alone, which groups by
//! log (`log << 48 | lsn`). The gates keep it whatever order events reach them in (a reload's
//! re-offer, the logs read back one by one after a restart): throttle waiters, concurrency
//! waiters within a rank, batch members, and which event of a debounce key is the newer.
//!
//! Skips are reported as [`FlowOut::skipped`]; the dispatcher turns them into durable
//! `Skipped` outcomes carrying the gate's reason.
//!
//! **Waiting is not dispatching.** An event arrives holding one of the pump's `max_outstanding`
//! slots. When a gate holds it (throttle queue, debounce window, batch being filled, concurrency
//! waiter) it is reported in [`FlowOut::held`] and the dispatcher gives its slot back (a `Held`
//! outcome to the pump; the event stays pending in its log and in the backlog bound). When it
//! leaves the gates it is reported in [`FlowOut::resumed`] (a batch: one carrier) and the
//! dispatcher takes a slot again, one per call, before dispatching it. So `max_outstanding`
//! bounds calls being dispatched, and a busy gated trigger cannot stall the others. After a
//! restart held events are pending in the WAL and evaluated again.
//!
//! **Bounds.** Per trigger and gate, at most `[flow] max_held` events held (the
//! `sluice_flow_held` gauge, [`metrics::FlowMetrics::full`]), plus the events in flight to the
//! gate when the bound was reached (≤ `max_outstanding`). Past the bound: `batch`, `throttle`,
//! `concurrency` (and the released events waiting for a slot) make the pumps leave the trigger's
//! events in the log until some are released; `debounce` and `batch` keep the bound themselves
//! and always take an event that supersedes or joins a held one (`collect`), so a newer event
//! is never kept out of the gate that would supersede an older one. Held events are
//! held by reference: their bodies stay in memory only within `[flow] max_held_bytes` per core,
//! the others are read back from their log at release ([`payload`]).
//! Keys of `batch`, `debounce`, `singleton` and `concurrency` exist only while an event of the
//! key is held or in progress. `rate_limit`/`throttle` keys outlive their events (the window
//! remembers); there are at most `[flow] max_gate_keys` of them per core, each with at most
//! `max` hits (32 bytes each: the time and the event's tag). A new key past the bound first evicts idle keys (empty
//! window, no waiters; a sweep at most every [`SWEEP_EVERY`]); if none is idle, the event is
//! counted against the gate's shared overflow key (`sluice_flow_key_overflow_total`): it is
//! limited more strictly, never less. Timers ≤ held keys, plus for `batch` one stale entry per
//! batch flushed by size before its timeout. A debounce key that receives a newer event keeps
//! its one timer (re-armed when it fires early).
//!
//! **Restarts.** `rate_limit` and `throttle` windows are saved to `<data_dir>/flow/core-K.json`
//! ([`persist`]; the engine's side in `restore`) at most [`persist::SAVE_EVERY`] after a hit
//! and at the drain, and restored at start-up, so a restart opens no window early; each hit
//! names its event
//! ([`window::tag`]), so a call in flight at a crash, retried after the restart, takes no
//! second unit ([`window::Window::holds`]). Debounce deadlines and batch timers need no
//! state: their events are pending in the WAL and are held again, for a full period or
//! timeout from the restart (later, never earlier, never lost). The logs are read back one per
//! core, so events reach the gates log by log: `throttle` and `concurrency` hold every event
//! until the pumps have handed all recovered events over ([`handover`]), then release them in
//! acceptance order.
//!
//! **Reloads.** A reload that changes a trigger's gates re-keys the engine (`rekey`): only
//! the gates that changed give up their held events, which are offered again from that gate's
//! stage on, in acceptance order, keeping their debounce/batch deadline when the period did not
//! change; unchanged gates (and every other trigger) keep their state, deadlines and timers.
//! None is lost; `wait` is counted once per event.
//!
//! **Time.** The engine works on the injected clock shifted by [`SHIFT`] (a year and a day), so
//! a window hit restored from before this process started is still a positive time.
#![forbid(unsafe_code)]

pub mod batch;
mod collect;
pub mod handover;
pub mod key;
pub mod metrics;
pub mod ordering;
pub mod payload;
pub mod persist;
mod rekey;
mod restore;
pub mod spec;
mod waiters;
pub mod window;
mod windows;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;

use crate::dispatch::job::{Job, SkipReason};
use crate::dispatch::metrics::DispatchMetrics;
use crate::dispatch::spec::DispatchSpec;
use crate::wal::{EventRecord, Lsn};
use key::Resolver;
use spec::{ConcurrencyGate, FlowSpec, KeySelector};
pub use waiters::THIN_BYTES;
use window::Window;

/// Shortest interval between two sweeps for idle window keys when the key table is full.
pub const SWEEP_EVERY: u64 = 100_000_000;
/// Idle window keys are also swept this often, to give memory back.
const IDLE_SWEEP_EVERY: u64 = 10_000_000_000;
/// How often the gates look at the order horizon again while an event waits for it (1 ms).
pub const HORIZON_POLL: u64 = 1_000_000;
/// Added to the clock's nanoseconds inside the engine (longer than any period, 365 days).
pub const SHIFT: u64 = 366 * 86_400 * 1_000_000_000;

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

impl Stage {
    /// The gate's name (`gate` label, `[flow]` key).
    pub fn name(self) -> &'static str {
        metrics::GATES[self as usize]
    }
}

const STAGES: [Stage; 6] = [
    Stage::Batch,
    Stage::Debounce,
    Stage::RateLimit,
    Stage::Throttle,
    Stage::Singleton,
    Stage::Concurrency,
];

/// A gate's decision (the metrics `decision` label's index; one per event per gate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Went on at once.
    Pass = 0,
    /// Was held, then went on.
    Wait = 1,
    /// Ended here.
    Skip = 2,
}

/// What an engine call produced.
#[derive(Debug, Default)]
pub struct FlowOut {
    /// Through every gate without being held: still holding the slot it arrived with.
    pub ready: Vec<Job>,
    /// Through every gate after being held (a batch: its carrier): needs a dispatch slot.
    pub resumed: Vec<Job>,
    /// Keys of events a gate started holding, with that gate (an event reported again when
    /// another gate holds it): their dispatch slot may be given back.
    pub held: Vec<(Lsn, Stage)>,
    pub skipped: Vec<(Job, SkipReason)>,
    /// Keys of held events whose body could not be read back ([`payload`]): they leave the
    /// gates without an outcome and stay pending.
    pub lost: Vec<Lsn>,
}

impl FlowOut {
    /// The jobs through the gates, released (`resumed`: true) and passed (`ready`) in one
    /// acceptance order: a key's events may leave its line both ways in one call (`horizon`),
    /// and a released one queues for a slot while a passed one may go at once. Leaves both
    /// lists empty.
    pub fn leaving(&mut self) -> Vec<(Job, bool)> {
        let both = !self.resumed.is_empty() && !self.ready.is_empty();
        let mut gone = Vec::with_capacity(self.resumed.len() + self.ready.len());
        gone.extend(self.resumed.drain(..).map(|j| (j, true)));
        gone.extend(self.ready.drain(..).map(|j| (j, false)));
        if both {
            gone.sort_by(|(a, _), (b, _)| {
                (a.event.event_id.as_str(), a.lsn).cmp(&(b.event.event_id.as_str(), b.lsn))
            });
        }
        gone
    }
}

/// A held event's deadline in the gate a reload took it from: `(stage, deadline, period)`.
type Hint = (Stage, u64, u64);

/// The start-up hand-over as this engine sees it ([`handover`]).
#[derive(Debug, Default)]
struct Settle {
    /// Engine time at which the gates stop waiting (set at the first turn; 0: not yet).
    until: u64,
    /// Every pump finished (seen in an earlier turn: act in this one).
    seen: bool,
    /// The loop's latest reading of the countdown.
    done: bool,
}

/// An event inside the gates, with its keys resolved once.
#[derive(Debug)]
struct Pending {
    job: Job,
    keys: Box<Keys>,
    /// A gate held it (it gave its dispatch slot back).
    held: bool,
    /// The gate that holds it, as last reported in [`FlowOut::held`].
    held_at: Option<Stage>,
    /// Its body was dropped while held ([`payload`]): read back before it is delivered.
    dropped: bool,
    /// A reload took it from the gate of this stage and offers it to that stage's new gate
    /// (it leaves it as `wait`, not `pass`: it was held there).
    retaken: Option<Stage>,
    /// Its deadline in the gate a reload took it from ([`Hint`], `collect`).
    hint: Option<Hint>,
    /// It waits in a `throttle`/`concurrency` line only for the order horizon
    /// (`dispatch::horizon`): its gate had room for it. Held like any waiter (its dispatch slot
    /// goes back: a slot held while waiting for the horizon could keep the other cores' pumps
    /// from admitting the very events the horizon waits for), it leaves as `pass`.
    ordered_wait: bool,
}

impl Pending {
    fn new(job: Job, keys: Box<Keys>, held: bool, dropped: bool) -> Pending {
        Pending {
            job,
            keys,
            held,
            held_at: None,
            dropped,
            retaken: None,
            hint: None,
            ordered_wait: false,
        }
    }

    /// Acceptance order: the event id (a ULID, time-ordered across cores), then the event key.
    fn order(&self) -> (&str, Lsn) {
        (self.job.event.event_id.as_str(), self.job.lsn)
    }
}

#[derive(Debug, Default)]
struct Keys {
    /// Indexed by `Stage`; empty for a gate the trigger does not have.
    by_stage: [String; 6],
    /// Concurrency waiter rank (0 without `priority`).
    rank: usize,
}

/// A throttle waiter's place: acceptance order (`Pending::order`).
type ThrottlePlace = (String, Lsn);
/// A `throttle` or `concurrency` waiter, in full or by reference (tagged with
/// [`Pending::retaken`]; [`waiters`]).
type Waiter = waiters::Waiter<Pending, Option<Stage>>;
/// One key's waiters in line ([`waiters`]).
type Waiters<K> = waiters::Waiters<K, Pending, Option<Stage>>;

impl waiters::Held for Pending {
    fn job(&self) -> &Job {
        &self.job
    }
    fn horizon_only(&self) -> bool {
        self.ordered_wait
    }
}

#[derive(Debug, Default)]
struct WindowKey {
    window: Window,
    /// `throttle` only: events waiting for room, in acceptance order, in full or by reference
    /// ([`waiters`]).
    waiters: Waiters<ThrottlePlace>,
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
    /// Each with whether its body was dropped ([`payload`]).
    members: Vec<(Job, bool)>,
    deadline: u64,
}

/// A concurrency waiter's place: (priority rank, event id, event key): rank first, then
/// acceptance order (`Pending::order`).
type WaiterPlace = (usize, String, Lsn);

#[derive(Debug, Default)]
struct ConcurrencyKey {
    active: usize,
    /// In full or by reference ([`waiters`]).
    waiters: Waiters<WaiterPlace>,
    /// `ordering` with `on_exhausted = "hold"`: the dead letter the key waits for ([`ordering`]).
    stop: Option<ordering::stop::Stop>,
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
    config: Arc<DispatchSpec>,
    metrics: Arc<DispatchMetrics>,
    /// Trigger id → index in `config.triggers`, for triggers with at least one gate.
    by_id: HashMap<String, usize>,
    /// Indexed like `config.triggers`.
    gates: Vec<TriggerGates>,
    /// Indexed like `config.triggers`: the trigger's cells in `metrics.flow`, which are those of
    /// the start-up triggers (a reload may reorder them); `usize::MAX` (counted nowhere) for a
    /// trigger a reload added.
    cells: Vec<usize>,
    holds: HashMap<Lsn, Hold>,
    timers: BinaryHeap<Reverse<(u64, usize, Stage, String)>>,
    window_keys: usize,
    max_window_keys: usize,
    sweep_at: u64,
    idle_sweep_at: u64,
    /// Engine time up to which window hits were restored from the state file: an event
    /// holding one of those passes its window again without a new hit ([`window::Window::holds`]).
    restored_until: u64,
    /// Waiting for the start-up hand-over of recovered events ([`handover`]).
    settle: Option<Settle>,
    /// The order horizon (`dispatch::horizon`): `throttle` and `concurrency` pass an event at
    /// once only below it. `u64::MAX` (the default): no horizon, every event may pass.
    horizon: u64,
    /// Keys whose first waiter waits for the horizon: (its order time, trigger, stage, key).
    /// At most one entry per event held (each is added when an event is held for it).
    horizon_wait: std::collections::BTreeSet<(u64, usize, Stage, String)>,
    /// The clock (nanos, unshifted) at the last tick.
    last_tick: u64,
    waiting: usize,
    /// Window state saved across restarts (`None`: not persisted, unit tests).
    store: Option<persist::Store>,
    payloads: payload::Payloads,
    /// The DLQ, watched for the entries stopped keys wait for ([`ordering`]; `None`: unit
    /// tests without one).
    dlq: Option<ordering::stop::DlqWatch>,
    /// Stopped keys ([`ordering`]): DLQ entry id → (trigger, key).
    stops: HashMap<String, (usize, String)>,
    /// Some trigger has an `ordering` gate (its metrics are gathered).
    has_ordering: bool,
    /// The core this engine runs on (`None`: every trigger is its own; unit tests).
    core: Option<usize>,
    /// When the ordering metrics are gathered next (clock nanos).
    ordering_at: u64,
}

impl FlowEngine {
    /// `store`: where this core's window state is saved and restored from.
    pub fn new(
        config: Arc<DispatchSpec>,
        metrics: Arc<DispatchMetrics>,
        store: Option<persist::Store>,
    ) -> FlowEngine {
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
        let config_max_held_bytes = config.flow.max_held_bytes;
        let has_ordering = (config.triggers.iter()).any(|t| t.flow.ordering().is_some());
        let cells = config
            .triggers
            .iter()
            .map(|t| match metrics.flow.index_of(&t.id) {
                Some(m) => {
                    metrics.flow.mark_configured(m, &t.flow);
                    m
                }
                None => usize::MAX,
            })
            .collect();
        FlowEngine {
            cells,
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
            restored_until: 0,
            settle: None,
            horizon: u64::MAX,
            horizon_wait: std::collections::BTreeSet::new(),
            last_tick: 0,
            waiting: 0,
            store,
            payloads: payload::Payloads::new(config_max_held_bytes),
            dlq: None,
            stops: HashMap::new(),
            has_ordering,
            ordering_at: 0,
            core: None,
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

    /// The earliest timer (batch timeout, debounce quiet time, throttle room), on the clock.
    pub fn next_deadline(&self) -> Option<u64> {
        let t = self
            .timers
            .peek()
            .map(|Reverse((t, ..))| t.saturating_sub(SHIFT));
        let t = match self.settle_due() {
            Some(s) => Some(t.map_or(s, |t| t.min(s))),
            None => t,
        };
        // An event waits for the order horizon: look again in a millisecond.
        let t = match self.horizon_wait.is_empty() {
            false => {
                let h = self.last_tick.saturating_add(HORIZON_POLL);
                Some(t.map_or(h, |t| t.min(h)))
            }
            true => t,
        };
        let t = match self.ordering_due() {
            Some(s) => Some(t.map_or(s, |t| t.min(s))),
            None => t,
        };
        match self.store.as_ref().and_then(|s| s.due()) {
            Some(s) => Some(t.map_or(s, |t| t.min(s))),
            None => t,
        }
    }

    /// Does trigger `id` have any gate? (Without, [`FlowEngine::offer`] just passes the job.)
    pub fn gates(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    /// An event from the pump enters the gates of its trigger.
    pub fn offer(&mut self, job: Job, now: u64, out: &mut FlowOut) {
        let now = self.restore_once(now);
        let Some(&t) = self.by_id.get(job.event.trigger_id.as_str()) else {
            out.ready.push(job);
            return;
        };
        let keys = Box::new(resolve(&self.config.triggers[t].flow, &job.event));
        self.run(
            t,
            Pending::new(job, keys, false, false),
            Stage::Batch,
            now,
            out,
        );
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
        if let Some(ck) = self.gates[t].concurrency.get_mut(&k) {
            ck.active = ck.active.saturating_sub(1);
        }
        self.admit_waiters(t, &k, out);
    }

    /// Admits concurrency waiters of trigger `t`'s key `k` while it has room, in place order
    /// (rank, then acceptance order), each read back first if it was held by reference (one
    /// that cannot be is `lost`, pending); forgets the key when idle.
    fn admit_waiters(&mut self, t: usize, k: &str, out: &mut FlowOut) {
        let cfg = Arc::clone(&self.config);
        let Some(g) = &cfg.triggers[t].flow.concurrency else {
            return;
        };
        loop {
            let Some(ck) = self.gates[t].concurrency.get_mut(k) else {
                return;
            };
            let first = ck.waiters.first().map(|w| w.id().to_owned());
            // A stopped key (`ordering`) lets only a replay of its dead letter go.
            let stopped = ck.stop.is_some();
            let place = (ck.waiters.first_place())
                .filter(|_| stopped)
                .map(|(_, id, _)| id.clone());
            let room = ck.active < g.max && (!stopped || self.unstopped(t, k, place.as_deref()));
            // The first in line goes once the order horizon has passed it (`horizon`).
            let go = room && first.is_some_and(|id| self.ordered(t, Stage::Concurrency, k, &id));
            let Some(ck) = self.gates[t].concurrency.get_mut(k) else {
                return;
            };
            let next = match go {
                true => ck.waiters.pop_first(),
                false => None,
            };
            let Some(w) = next else {
                if ck.active == 0 && ck.waiters.is_empty() && ck.stop.is_none() {
                    self.gates[t].concurrency.remove(k);
                } else if !room {
                    // A waiter that waited only for the horizon now waits for room: held.
                    self.demote(t, Stage::Concurrency, k);
                }
                return;
            };
            let Some(p) = self.unwait(t, Stage::Concurrency, w, out) else {
                continue;
            };
            if let Some(ck) = self.gates[t].concurrency.get_mut(k) {
                ck.active += 1;
            }
            let mut p = p;
            // Held only for the horizon: `pass`, unless a reload took it from this gate (it
            // was held here: `wait`, counted once).
            let retaken = p.retaken == Some(Stage::Concurrency);
            let d = match std::mem::take(&mut p.ordered_wait) && !retaken {
                true => Decision::Pass,
                false => Decision::Wait,
            };
            self.count(t, Stage::Concurrency, d);
            self.hold(p.job.lsn, t).concurrency = Some(k.to_string());
            self.leave(p, out);
        }
    }

    /// `p`, just held by `stage` of trigger `t` whose key holds `key_full` waiters in full, as
    /// a waiter: by reference past `[flow] max_held_per_key` or `max_held` ([`waiters`]).
    fn waiter(&mut self, t: usize, stage: Stage, p: Pending, key_full: usize) -> Waiter {
        let (m, g) = (self.cell(t), stage as usize);
        let flow = &self.metrics.flow;
        // Held in full in the gate, `p` aside (it is counted held already).
        let gate_full = (flow.held(m, g).saturating_sub(flow.in_log(m, g) + 1)) as usize;
        let b = &self.config.flow;
        let why = waiters::bound(key_full, gate_full, b.max_held_per_key, b.max_held);
        let dir = p.job.log_dir.clone().filter(|_| p.job.batch.is_empty());
        let (Some(why), Some(dir)) = (why, dir) else {
            return Waiter::Full(Box::new(p));
        };
        self.payloads.forget(&p.job, p.dropped);
        flow.in_log_add(m, g, 1);
        flow.left_in_log(m, g, why as usize);
        Waiter::Ref(waiters::Thin::of(p.job, dir, p.retaken))
    }

    /// Waiter `w` leaves `stage` of trigger `t`: no longer held there, in full again (read back
    /// if it was held by reference). `None` when it cannot be read back: reported `lost`.
    fn unwait(&mut self, t: usize, stage: Stage, w: Waiter, out: &mut FlowOut) -> Option<Pending> {
        self.unheld(t, stage, 1);
        if !w.is_full() {
            (self.metrics.flow).in_log_add(self.cell(t), stage as usize, -1);
        }
        let cfg = Arc::clone(&self.config);
        match in_full(w, stage, &cfg.triggers[t].flow, &mut self.payloads) {
            Ok(p) => Some(p),
            Err((lsn, e)) => {
                self.lost(lsn, &e, out);
                None
            }
        }
    }

    /// Runs the timers due at `now`; saves the window state when due (`draining`: at once).
    /// While `draining` no timer runs (held events stay pending in the WAL).
    pub fn on_tick(&mut self, now: u64, draining: bool, out: &mut FlowOut) {
        let clock = now;
        if draining {
            self.save(clock, true);
            return;
        }
        self.payloads.tick(clock);
        self.last_tick = clock;
        let now = self.restore_once(now);
        self.settle_turn(now, out);
        self.horizon_turn(now, out);
        if self.settle.is_none() {
            self.watch_stops(clock, out);
        }
        self.publish_ordering(clock);
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
        self.save(clock, draining);
    }

    /// The order horizon as of this turn (`dispatch::horizon`): what the gates release below;
    /// run [`FlowEngine::on_tick`] after it to release the waiters it passed.
    pub fn note_horizon(&mut self, horizon: u64) {
        self.horizon = horizon;
    }

    /// Whether the event `id` held at `stage` of trigger `t`'s key `key` is below the order
    /// horizon; if not, the key is looked at again once the horizon passes it.
    fn ordered(&mut self, t: usize, stage: Stage, key: &str, id: &str) -> bool {
        let at = crate::dispatch::horizon::order_time(id).unwrap_or(0);
        if at < self.horizon {
            return true;
        }
        self.horizon_wait.insert((at, t, stage, key.to_owned()));
        false
    }

    /// The waiters of trigger `t`'s key `key` at `stage` that waited only for the order
    /// horizon (`Pending::ordered_wait`) wait for room from now on (they leave as `wait`).
    fn demote(&mut self, t: usize, stage: Stage, key: &str) {
        let hold = |p: &mut Pending| p.ordered_wait = false;
        let g = &mut self.gates[t];
        match stage {
            Stage::Concurrency => {
                if let Some(c) = g.concurrency.get_mut(key) {
                    c.waiters.hold_free(hold);
                }
            }
            Stage::Throttle => {
                if let Some(w) = g.throttle.get_mut(key) {
                    w.waiters.hold_free(hold);
                }
            }
            _ => {}
        }
    }

    /// Trigger `t`'s `key` at `stage` is looked at again once the horizon passes `p`.
    fn wait_for_horizon(&mut self, t: usize, stage: Stage, key: &str, p: &Pending) {
        let at = crate::dispatch::horizon::order_time(&p.job.event.event_id).unwrap_or(0);
        self.horizon_wait.insert((at, t, stage, key.to_owned()));
    }

    /// Releases the waiters of the keys the order horizon has passed (engine time `now`).
    fn horizon_turn(&mut self, now: u64, out: &mut FlowOut) {
        if self.settle.is_some() {
            return;
        }
        while let Some(first) = self.horizon_wait.first() {
            if first.0 >= self.horizon {
                break;
            }
            let Some((_, t, stage, key)) = self.horizon_wait.pop_first() else {
                break;
            };
            match stage {
                Stage::Concurrency => self.admit_waiters(t, &key, out),
                Stage::Throttle => self.fire_throttle(t, key, now, out),
                _ => {}
            }
        }
    }

    /// Releases the waiters the order horizon noted last has passed ([`FlowEngine::note_horizon`]),
    /// between ticks (clock nanos `now`).
    pub fn release_ordered(&mut self, now: u64, out: &mut FlowOut) {
        if self.horizon_wait.is_empty() {
            return;
        }
        let now = self.restore_once(now);
        self.horizon_turn(now, out);
    }

    /// Events waiting for the order horizon (keys to look at again).
    pub fn horizon_waiting(&self) -> usize {
        self.horizon_wait.len()
    }

    /// Trigger `t`'s cells in `metrics.flow` (see [`FlowEngine::cells`]).
    #[inline]
    fn cell(&self, t: usize) -> usize {
        self.cells.get(t).copied().unwrap_or(usize::MAX)
    }

    fn count(&self, t: usize, stage: Stage, d: Decision) {
        self.metrics
            .flow
            .incr(self.cell(t), stage as usize, d as usize);
    }

    /// `p` goes on from `stage` at once: `pass`, or `wait` when a reload took it from this
    /// stage's old gate (it was held here).
    fn passed(&self, t: usize, stage: Stage, p: &Pending) {
        let d = match p.retaken == Some(stage) {
            true => Decision::Wait,
            false => Decision::Pass,
        };
        self.count(t, stage, d);
    }

    /// `p` is held by `stage`: reported once, so its dispatch slot is given back; its body
    /// may be dropped ([`payload`]).
    fn held(&mut self, t: usize, stage: Stage, p: &mut Pending, out: &mut FlowOut) {
        self.waiting += 1;
        self.metrics.flow.held_add(self.cell(t), stage as usize, 1);
        if !std::mem::replace(&mut p.held, true) {
            p.dropped = self.payloads.hold(&mut p.job);
        }
        // Reported once per gate, so the pump can say which gate holds it.
        if p.held_at.replace(stage) != Some(stage) {
            out.held.push((p.job.lsn, stage));
        }
    }

    /// `p` ends at `stage` without delivery.
    fn skip(&mut self, t: usize, stage: Stage, p: Pending, why: SkipReason, out: &mut FlowOut) {
        if p.held {
            self.payloads.forget(&p.job, p.dropped);
        }
        self.count(t, stage, Decision::Skip);
        out.skipped.push((p.job, why));
    }

    /// `p` went through every gate: `ready` if never held, else `resumed` with its body back
    /// in memory (or `lost`, its holds given back, when that fails).
    fn leave(&mut self, mut p: Pending, out: &mut FlowOut) {
        if !p.held {
            out.ready.push(p.job);
            return;
        }
        match self.payloads.restore(&mut p.job, p.dropped) {
            Ok(()) => out.resumed.push(p.job),
            Err(e) => self.lost(p.job.lsn, &e, out),
        }
    }

    fn lost(&mut self, lsn: Lsn, e: &crate::wal::WalError, out: &mut FlowOut) {
        eprintln!("sluice: flow: a held event stays pending: {e}");
        self.metrics.flow.read_back_failed();
        out.lost.push(lsn);
        self.release(lsn, out);
    }

    /// `n` events left `stage`'s hold.
    fn unheld(&mut self, t: usize, stage: Stage, n: usize) {
        self.waiting -= n;
        self.metrics
            .flow
            .held_add(self.cell(t), stage as usize, -(n as i64));
    }

    /// The concurrency key event `lsn` holds, with its trigger's index, while the gate holds
    /// its slot (from admission to its terminal outcome, retries included).
    pub fn concurrency_key(&self, lsn: Lsn) -> Option<(usize, &str)> {
        let h = self.holds.get(&lsn)?;
        Some((h.trigger, h.concurrency.as_deref()?))
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
                    Some(g) => self.throttle(t, g, p, now, out),
                },
                Stage::Singleton => match &f.singleton {
                    None => Some(p),
                    Some(_) => self.singleton(t, p, out),
                },
                Stage::Concurrency => match &f.concurrency {
                    None => Some(p),
                    Some(g) => self.concurrency(t, g, p, out),
                },
            };
            match next {
                Some(n) => p = n,
                None => return,
            }
        }
        self.leave(p, out);
    }

    // ----- singleton and concurrency ----------------------------------------------------------

    fn singleton(&mut self, t: usize, p: Pending, out: &mut FlowOut) -> Option<Pending> {
        let key = &p.keys.by_stage[Stage::Singleton as usize];
        if self.gates[t].singleton.contains(key) {
            self.skip(t, Stage::Singleton, p, SkipReason::SingletonActive, out);
            return None;
        }
        self.gates[t].singleton.insert(key.clone());
        self.hold(p.job.lsn, t).singleton = Some(key.clone());
        self.count(t, Stage::Singleton, Decision::Pass);
        Some(p)
    }

    fn concurrency(
        &mut self,
        t: usize,
        g: &ConcurrencyGate,
        mut p: Pending,
        out: &mut FlowOut,
    ) -> Option<Pending> {
        let key = p.keys.by_stage[Stage::Concurrency as usize].clone();
        // A reload's re-offered waiters all queue first, then leave by place (`rekey`); so do
        // all events until the start-up hand-over (`handover`).
        let requeued = p.retaken == Some(Stage::Concurrency) || self.settle.is_some();
        let c = self.gates[t].concurrency.entry(key.clone()).or_default();
        // Room for it behind the waiters, all of which wait only for the order horizon.
        let room = !requeued && c.waiters.all_free() && c.active + c.waiters.len() < g.max;
        let first = c.waiters.is_empty();
        // A stopped key (`ordering`) has room only for a replay of its dead letter.
        let room =
            room && (c.stop.is_none() || (first && self.unstopped(t, &key, Some(place_id(g, &p)))));
        if room && first && self.ordered(t, Stage::Concurrency, &key, &p.job.event.event_id) {
            let c = self.gates[t].concurrency.entry(key.clone()).or_default();
            c.active += 1;
            self.hold(p.job.lsn, t).concurrency = Some(key);
            self.passed(t, Stage::Concurrency, &p);
            return Some(p);
        }
        if room {
            // Only the order horizon keeps it: held in line, counted `pass` when it leaves.
            self.wait_for_horizon(t, Stage::Concurrency, &key, &p);
            self.held(t, Stage::Concurrency, &mut p, out);
            p.ordered_wait = true;
            let place = (p.keys.rank, place_id(g, &p).to_owned(), p.job.lsn);
            let c = self.gates[t].concurrency.entry(key).or_default();
            c.waiters.insert(place, Waiter::Full(Box::new(p)));
            return None;
        }
        self.held(t, Stage::Concurrency, &mut p, out);
        let place = (p.keys.rank, place_id(g, &p).to_owned(), p.job.lsn);
        let full = self.gates[t]
            .concurrency
            .get(&key)
            .map_or(0, |c| c.waiters.full());
        let w = self.waiter(t, Stage::Concurrency, p, full);
        let c = self.gates[t].concurrency.entry(key.clone()).or_default();
        c.waiters.insert(place, w);
        // A stopped key with room (`ordering`): a replay of its dead letter goes now.
        if c.stop.is_some() && c.active < g.max && !requeued {
            self.admit_waiters(t, &key, out);
        }
        None
    }
}

/// `p`'s place id in gate `g`'s line ([`ordering::stop::place_id`]).
fn place_id<'a>(g: &ConcurrencyGate, p: &'a Pending) -> &'a str {
    ordering::stop::place_id(g, &p.job)
}

/// `w` in full: a reference is read back from its log (`payloads`), its keys resolved for `f`
/// and marked held at `stage` ([`waiters`]). Its key and the error when it cannot be read.
fn in_full(
    w: Waiter,
    stage: Stage,
    f: &FlowSpec,
    payloads: &mut payload::Payloads,
) -> Result<Pending, (Lsn, crate::wal::WalError)> {
    let thin = match w {
        Waiter::Full(p) => return Ok(*p),
        Waiter::Ref(thin) => thin,
    };
    let (job, retaken) = thin.read(payloads)?;
    let keys = Box::new(resolve(f, &job.event));
    let mut p = Pending::new(job, keys, true, false);
    p.held_at = Some(stage);
    p.retaken = retaken;
    Ok(p)
}

/// Resolves every key the trigger's gates use (the body is parsed at most once).
fn resolve(f: &FlowSpec, event: &EventRecord) -> Keys {
    let mut r = Resolver::new(event);
    let mut keys = Keys::default();
    let mut set = |stage: Stage, sel: Option<&KeySelector>| {
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
