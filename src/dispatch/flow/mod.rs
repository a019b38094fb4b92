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
//! ([`persist`]; the windows' side in `windows::saved`) at most [`persist::SAVE_EVERY`] after a hit
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
//!
//! **The parts.** The engine's state is split by what it is about, each part a type that owns
//! its fields, keeps its own invariants (stated in its module's docs) and is unit-tested on its
//! own:
//! - `books::Books`: the decisions counted, the events held (the `sluice_flow_held` gauge, the
//!   waiters by reference, the engine's `waiting` count) and the held bodies' budget
//!   ([`payload`]), with the triggers' metric cells;
//! - `agenda::Agenda`: the timers, and the keys waiting for the order horizon;
//! - [`handover::Handover`]: the start-up hand-over;
//! - `collect::Collect`: `batch` and `debounce` — the batches being filled, the debounced keys;
//! - `windows::Windows`: `rate_limit` and `throttle` — the windows of every key, the per-core
//!   key table and its sweeps, the throttle lines, the windows' saved state;
//! - `progress::InProgress`: `singleton` and `concurrency` — the events in progress and what
//!   each holds, the concurrency lines;
//! - `ordering::stop::Stops`: the keys `ordering` stops, and the DLQ they wait on;
//! - `pending`: their shared vocabulary ([`Stage`], [`FlowOut`], an event inside the gates), a
//!   leaf they all import.
//!
//! [`FlowEngine`] composes them: it takes an event through the gates in order (`run`), each
//! gate's engine side (`collect::gates`, `windows::gates`, `progress::gates`, [`ordering`])
//! deciding on the part's state and reporting in [`FlowOut`], and a reload (`rekey`) has every
//! part carry its own state by one `rekey::plan::Plan`, so they agree on what a kept gate is.
#![forbid(unsafe_code)]

mod agenda;
pub mod batch;
mod books;
mod collect;
pub mod handover;
pub mod key;
pub mod metrics;
pub mod ordering;
pub mod payload;
mod pending;
pub mod persist;
mod progress;
mod rekey;
pub mod spec;
mod waiters;
pub mod window;
mod windows;

use std::collections::HashMap;
use std::sync::Arc;

use crate::dispatch::job::Job;
use crate::dispatch::metrics::DispatchMetrics;
use crate::dispatch::spec::DispatchSpec;
use crate::wal::{Lsn, WalError};
use agenda::Agenda;
use books::Books;
use collect::Collect;
use handover::Handover;
use ordering::stop::Stops;
use pending::{resolve, Pending, Waiter, STAGES};
use progress::InProgress;
use spec::FlowSpec;
use windows::Windows;

pub use agenda::{HORIZON_POLL, SHIFT};
pub use pending::{Decision, FlowOut, Stage};
pub use waiters::THIN_BYTES;
pub use windows::SWEEP_EVERY;

/// One core's flow-control state for the triggers whose destination it owns: the gates' state
/// in its parts (module docs, "The parts"), and the path of an event through them.
#[derive(Debug)]
pub struct FlowEngine {
    config: Arc<DispatchSpec>,
    /// Trigger id → index in `config.triggers`, for triggers with at least one gate.
    by_id: HashMap<String, usize>,
    /// Decisions, held events and their bodies.
    books: Books,
    /// Timers and the order horizon.
    agenda: Agenda,
    /// The start-up hand-over of recovered events.
    handover: Handover,
    /// `batch` and `debounce`.
    collect: Collect,
    /// `rate_limit` and `throttle`, and their saved state.
    windows: Windows,
    /// `singleton` and `concurrency`: the events in progress and the concurrency lines.
    progress: InProgress,
    /// The keys `ordering` stops, and the DLQ they wait on.
    stops: Stops,
}

/// Trigger id → index, for the triggers of `config` with at least one gate.
fn gated(config: &DispatchSpec) -> HashMap<String, usize> {
    let triggers = config.triggers.iter().enumerate();
    let gated = triggers.filter(|(_, t)| !t.flow.is_empty());
    gated.map(|(i, t)| (t.id.clone(), i)).collect()
}

impl FlowEngine {
    /// `store`: where this core's window state is saved and restored from.
    pub fn new(
        config: Arc<DispatchSpec>,
        metrics: Arc<DispatchMetrics>,
        store: Option<persist::Store>,
    ) -> FlowEngine {
        let triggers = config.triggers.len();
        FlowEngine {
            by_id: gated(&config),
            books: Books::new(&config, metrics),
            agenda: Agenda::default(),
            handover: Handover::default(),
            collect: Collect::new(triggers),
            windows: Windows::new(&config, store),
            progress: InProgress::new(triggers),
            stops: Stops::new(&config),
            config,
        }
    }

    /// The gates hold throttle and concurrency events until the pumps' hand-over is done
    /// ([`handover`]). `waiting`: false when there is nothing to wait for (no pump registered).
    pub fn hold_for_handover(mut self, waiting: bool) -> FlowEngine {
        self.handover = Handover::new(waiting);
        self
    }

    /// The loop's reading of the hand-over countdown, before [`FlowEngine::on_tick`].
    pub fn note_handover(&mut self, done: bool) {
        self.handover.note(done);
    }

    /// Events held in gates (waiting, collecting, debouncing).
    pub fn waiting(&self) -> usize {
        self.books.waiting()
    }

    /// `rate_limit`/`throttle` keys counted against `max_gate_keys`.
    pub fn window_keys(&self) -> usize {
        self.windows.len()
    }

    /// The earliest time the gates need a turn, on the clock: a timer (batch timeout, debounce
    /// quiet time, throttle room), the order horizon's poll, the hand-over, the stopped keys'
    /// poll or the ordering metrics, a window save.
    pub fn next_deadline(&self) -> Option<u64> {
        let due = [
            self.agenda.next_deadline(),
            self.handover.due(),
            self.stops.due(),
            self.windows.save_due(),
        ];
        due.into_iter().flatten().min()
    }

    /// Does trigger `id` have any gate? (Without, [`FlowEngine::offer`] just passes the job.)
    pub fn gates(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    /// An event from the pump enters the gates of its trigger.
    pub fn offer(&mut self, job: Job, now: u64, out: &mut FlowOut) {
        let now = self.engine_time(now);
        let Some(&t) = self.by_id.get(job.event.trigger_id.as_str()) else {
            out.ready.push(job);
            return;
        };
        let keys = Box::new(resolve(&self.config.triggers[t].flow, &job.event));
        let p = Pending::new(job, keys, false, false);
        self.run(t, p, Stage::Batch, now, out);
    }

    /// The event at `lsn` reached a terminal outcome: give back its singleton and concurrency
    /// holds, admitting concurrency waiters.
    pub fn release(&mut self, lsn: Lsn, out: &mut FlowOut) {
        if let Some((t, k)) = self.progress.release(lsn) {
            self.admit_waiters(t, &k, out);
        }
    }

    /// The concurrency key event `lsn` holds, with its trigger's index, while the gate holds
    /// its slot (from admission to its terminal outcome, retries included).
    pub fn concurrency_key(&self, lsn: Lsn) -> Option<(usize, &str)> {
        self.progress.concurrency_key(lsn)
    }

    /// Runs the timers due at `now`; saves the window state when due (`draining`: at once).
    /// While `draining` no timer runs (held events stay pending in the WAL).
    pub fn on_tick(&mut self, now: u64, draining: bool, out: &mut FlowOut) {
        let clock = now;
        if draining {
            self.windows.save(clock, true);
            return;
        }
        self.books.payloads.tick(clock);
        self.agenda.tick(clock);
        let now = self.engine_time(now);
        if self.handover.turn(now) {
            self.handed_over(now, out);
        }
        self.horizon_turn(now, out);
        if !self.handover.settling() {
            self.watch_stops(clock, out);
        }
        self.publish_ordering(clock);
        while let Some((t, stage, key)) = self.agenda.due(now) {
            match stage {
                Stage::Batch => self.fire_batch(t, &key, now, out),
                Stage::Debounce => self.fire_debounce(t, key, now, out),
                Stage::Throttle => self.fire_throttle(t, key, now, out),
                _ => {}
            }
        }
        self.windows.idle_sweep(now);
        self.windows.save(clock, draining);
    }

    /// The engine's time for clock time `clock` ([`SHIFT`]); the saved windows are restored on
    /// the first call.
    fn engine_time(&mut self, clock: u64) -> u64 {
        (self.windows).restore_once(clock, &self.by_id, &self.books)
    }

    /// The start-up hand-over is over ([`handover`]): every throttle key with waiters fires and
    /// every concurrency key admits its waiters by place (engine time `now`).
    fn handed_over(&mut self, now: u64, out: &mut FlowOut) {
        let throttled = self.windows.busy_lines();
        let concurrent = self.progress.all_keys();
        for (t, k) in throttled {
            self.fire_throttle(t, k, now, out);
        }
        for (t, k) in concurrent {
            self.admit_waiters(t, &k, out);
        }
    }

    /// The order horizon as of this turn (`dispatch::horizon`): what the gates release below;
    /// run [`FlowEngine::on_tick`] after it to release the waiters it passed.
    pub fn note_horizon(&mut self, horizon: u64) {
        self.agenda.note_horizon(horizon);
    }

    /// Releases the waiters of the keys the order horizon has passed (engine time `now`).
    fn horizon_turn(&mut self, now: u64, out: &mut FlowOut) {
        if self.handover.settling() {
            return;
        }
        while let Some((t, stage, key)) = self.agenda.passed() {
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
        if self.agenda.horizon_waiting() == 0 {
            return;
        }
        let now = self.engine_time(now);
        self.horizon_turn(now, out);
    }

    /// Events waiting for the order horizon (keys to look at again).
    pub fn horizon_waiting(&self) -> usize {
        self.agenda.horizon_waiting()
    }

    /// `p` went through every gate: `ready` if never held, else `resumed` with its body back
    /// in memory (or `lost`, its holds given back, when that fails).
    fn leave(&mut self, p: Pending, out: &mut FlowOut) {
        if let Err((lsn, e)) = self.books.leave(p, out) {
            self.lost(lsn, &e, out);
        }
    }

    /// The held event at `lsn` cannot be read back: reported `lost` (it stays pending), its
    /// holds given back.
    fn lost(&mut self, lsn: Lsn, e: &WalError, out: &mut FlowOut) {
        self.books.lost(lsn, e, out);
        self.release(lsn, out);
    }

    /// Waiter `w` leaves `stage` of trigger `t`, in full again (read back if it was held by
    /// reference). `None` when it cannot be read back: reported `lost`.
    fn unwait(&mut self, t: usize, stage: Stage, w: Waiter, out: &mut FlowOut) -> Option<Pending> {
        let cfg = Arc::clone(&self.config);
        match self.books.unwait(t, stage, w, &cfg.triggers[t].flow) {
            Ok(p) => Some(p),
            Err((lsn, e)) => {
                self.lost(lsn, &e, out);
                None
            }
        }
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
}

#[cfg(test)]
mod tests;
