//! The window gates, `rate_limit` and `throttle` (semantics in the parent module's docs): the
//! per-key sliding windows ([`super::window`]) of every trigger, the per-core key table and its
//! sweeps, the throttle's lines, and the windows' saved state (`saved`).
//!
//! [`Windows`] is that state. The engine's side of the two gates (which event passes, waits or
//! is skipped, and what is counted) is in `gates`.
//!
//! **The key table.** Window keys outlive their events (the window remembers), so there are at
//! most `[flow] max_gate_keys` of them per core. A new key past the bound first evicts idle
//! keys (empty window, no waiters, no timer; a sweep at most every [`SWEEP_EVERY`], and every
//! [`IDLE_SWEEP_EVERY`] anyway to give memory back); if none is idle, the event is counted
//! against the gate's shared overflow key (`key::OVERFLOW_KEY`, `sluice_flow_key_overflow_total`):
//! it is limited more strictly, never less. Invariant: [`Windows::len`] is the number of keys in
//! the maps, the overflow keys aside.
//!
//! **Throttle lines.** Throttle waiters are kept in acceptance order (event id, a ULID:
//! time-ordered across cores), whatever order they arrived in (a reload's re-offer, the logs
//! read back after a restart), and leave in that order, in full or by reference
//! ([`super::waiters`]), the first in line once the order horizon has passed it
//! (`super::agenda`). A key with waiters has one timer armed for when its window has room,
//! unless its first waiter waits for the horizon (the horizon fires it then).
//!
//! **The event, not the call.** An event that already holds a hit of the window (saved before
//! a restart: its call was in flight when the process died) passes without taking another one
//! ([`super::window::Window::holds`]); hits restored from the state file count so up to the
//! engine time they were restored at.
//!
//! **Reloads** ([`Windows::rekey`]): an unchanged gate keeps its windows as they are; a changed
//! one with the same key selector keeps its hits, trimmed to the new period and `max` (a reload
//! opens no window early, timers disarmed); else its keys go. The waiters of a changed gate are
//! taken first ([`Windows::take_waiters`]) and offered again.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::Arc;

use super::agenda::Agenda;
use super::books::Books;
use super::key::OVERFLOW_KEY;
use super::pending::{nanos, Stage, ThrottlePlace, Waiter, Waiters};
use super::persist;
use super::rekey::plan::Plan;
use super::spec::WindowGate;
use super::window::{tag, Window};
use crate::dispatch::spec::DispatchSpec;

mod gates;
mod saved;

/// Shortest interval between two sweeps for idle window keys when the key table is full.
pub const SWEEP_EVERY: u64 = 100_000_000;
/// Idle window keys are also swept this often, to give memory back.
pub const IDLE_SWEEP_EVERY: u64 = 10_000_000_000;

#[derive(Debug, Default)]
pub(super) struct WindowKey {
    pub(super) window: Window,
    /// `throttle` only: events waiting for room, in acceptance order, in full or by reference
    /// ([`super::waiters`]).
    pub(super) waiters: Waiters<ThrottlePlace>,
    /// A timer is set for this key.
    pub(super) armed: bool,
}

/// One trigger's window keys.
#[derive(Debug, Default)]
struct TriggerWindows {
    rate_limit: HashMap<String, WindowKey>,
    throttle: HashMap<String, WindowKey>,
}

/// What `throttle` does with an event ([`Windows::throttle_room`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Room {
    /// It goes on: it holds a hit already, or it took one.
    Pass,
    /// Its window has room, but the order horizon has not passed it yet: it waits in line for
    /// the horizon only.
    Horizon,
    /// It waits in line for room.
    Wait,
}

/// One core's window gates (module docs).
#[derive(Debug)]
pub(super) struct Windows {
    config: Arc<DispatchSpec>,
    /// Indexed like `config.triggers`.
    gates: Vec<TriggerWindows>,
    /// Keys counted against `max_keys`.
    keys: usize,
    max_keys: usize,
    sweep_at: u64,
    idle_sweep_at: u64,
    /// Engine time up to which window hits were restored from the state file: an event
    /// holding one of those passes its window again without a new hit ([`Window::holds`]).
    restored_until: u64,
    /// Window state saved across restarts (`None`: not persisted, unit tests).
    store: Option<persist::Store>,
}

impl Windows {
    /// No key yet; `store`: where the windows are saved and restored from.
    pub(super) fn new(config: &Arc<DispatchSpec>, store: Option<persist::Store>) -> Windows {
        Windows {
            gates: (config.triggers.iter())
                .map(|_| TriggerWindows::default())
                .collect(),
            max_keys: config.flow.max_gate_keys,
            config: Arc::clone(config),
            keys: 0,
            sweep_at: 0,
            idle_sweep_at: 0,
            restored_until: 0,
            store,
        }
    }

    /// Keys counted against `max_gate_keys`.
    pub(super) fn len(&self) -> usize {
        self.keys
    }

    fn map(&mut self, t: usize, stage: Stage) -> &mut HashMap<String, WindowKey> {
        match stage {
            Stage::RateLimit => &mut self.gates[t].rate_limit,
            _ => &mut self.gates[t].throttle,
        }
    }

    /// Is `key` one of trigger `t`'s keys at `stage` (`RateLimit` or `Throttle`)?
    #[cfg(test)]
    pub(super) fn has(&self, t: usize, stage: Stage, key: &str) -> bool {
        match stage {
            Stage::RateLimit => self.gates[t].rate_limit.contains_key(key),
            _ => self.gates[t].throttle.contains_key(key),
        }
    }

    /// The key to use in a window gate: `key` itself, or the overflow key when the per-core
    /// table is full and nothing idle can be evicted (counted in `books`). Ensures the entry
    /// exists.
    pub(super) fn key(
        &mut self,
        t: usize,
        stage: Stage,
        key: &str,
        now: u64,
        books: &Books,
    ) -> String {
        if self.map(t, stage).contains_key(key) {
            return key.to_string();
        }
        if self.keys >= self.max_keys && now >= self.sweep_at {
            self.sweep_at = now + SWEEP_EVERY;
            self.sweep(now);
        }
        if self.keys >= self.max_keys {
            books.overflowed(t, stage);
            (self.map(t, stage))
                .entry(OVERFLOW_KEY.to_string())
                .or_default();
            return OVERFLOW_KEY.to_string();
        }
        self.keys += 1;
        self.map(t, stage)
            .insert(key.to_string(), WindowKey::default());
        key.to_string()
    }

    /// Evicts idle window keys (empty window, no waiters, no timer).
    pub(super) fn sweep(&mut self, now: u64) {
        let mut evicted = 0;
        for (t, g) in self.gates.iter_mut().enumerate() {
            let f = &self.config.triggers[t].flow;
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
        self.keys -= evicted;
    }

    /// The sweep that gives memory back, when due at engine time `now`.
    pub(super) fn idle_sweep(&mut self, now: u64) {
        if now >= self.idle_sweep_at {
            self.idle_sweep_at = now + IDLE_SWEEP_EVERY;
            self.sweep(now);
        }
    }

    /// `rate_limit`: whether event `event_id` goes on through trigger `t`'s key `key` (from
    /// [`Windows::key`]) at engine time `now` — it holds a hit already, or takes one.
    pub(super) fn rate_limit(
        &mut self,
        t: usize,
        key: &str,
        event_id: &str,
        now: u64,
        g: &WindowGate,
    ) -> bool {
        let id = tag(event_id);
        let until = self.restored_until;
        let w = (self.gates[t].rate_limit)
            .entry(key.to_owned())
            .or_default();
        if w.window.holds(id, until) {
            // Its unit was taken before a restart (the call was in flight): not a second one.
            return true;
        }
        if !w.window.try_hit(now, nanos(g.period), g.max, id) {
            return false;
        }
        self.mark_dirty();
        true
    }

    /// Trigger `t`'s throttle key `key` (from [`Windows::key`]).
    pub(super) fn line(&mut self, t: usize, key: &str) -> &mut WindowKey {
        self.gates[t].throttle.entry(key.to_owned()).or_default()
    }

    /// `throttle`: what event `event_id` does at trigger `t`'s key `key` at engine time `now`:
    /// it passes when it holds a hit already, or when the key's line is empty, its window has
    /// room and the order horizon has passed it (`agenda`; it takes a hit then). Until the
    /// start-up hand-over (`settling`) every event waits.
    pub(super) fn throttle_room(
        &mut self,
        (t, key): (usize, &str),
        event_id: &str,
        now: u64,
        g: &WindowGate,
        settling: bool,
        agenda: &mut Agenda,
    ) -> Room {
        let (id, period) = (tag(event_id), nanos(g.period));
        let until = self.restored_until;
        let w = self.gates[t].throttle.entry(key.to_owned()).or_default();
        if w.window.holds(id, until) {
            // Its unit was taken before a restart (the call was in flight): not a second one.
            return Room::Pass;
        }
        // Room for it behind the waiters, all of which wait only for the order horizon.
        let line = w.waiters.len();
        let room =
            !settling && w.waiters.all_free() && w.window.room_for(now, period, g.max, line + 1);
        // Below the order horizon only (`dispatch::horizon`); a unit is taken only then.
        let ordered = room && line == 0 && agenda.ordered(t, Stage::Throttle, key, event_id);
        if ordered && w.window.try_hit(now, period, g.max, id) {
            self.mark_dirty();
            return Room::Pass;
        }
        match room {
            true => Room::Horizon,
            false => Room::Wait,
        }
    }

    /// Puts `w` in trigger `t`'s throttle line `key` at `place`; arms the key's timer (for when
    /// its window has room, not before engine time `now`) unless `horizon_only` or it is armed.
    /// The timer to set.
    pub(super) fn enqueue(
        &mut self,
        (t, key): (usize, &str),
        place: ThrottlePlace,
        w: Waiter,
        horizon_only: bool,
        now: u64,
        period: u64,
    ) -> Option<u64> {
        let line = self.line(t, key);
        line.waiters.insert(place, w);
        if horizon_only || line.armed {
            return None;
        }
        line.armed = true;
        Some(line.window.room_at(period).max(now))
    }

    /// A throttle timer or the horizon fired for trigger `t`'s `key` at engine time `now`: the
    /// waiters that go (each taking a hit, first in line first, once the horizon has passed
    /// it), and the timer to set again for the rest. `None`: no such key.
    pub(super) fn release(
        &mut self,
        t: usize,
        key: &str,
        now: u64,
        g: &WindowGate,
        agenda: &mut Agenda,
    ) -> Option<(Vec<Waiter>, Option<u64>)> {
        let period = nanos(g.period);
        let w = self.gates[t].throttle.get_mut(key)?;
        w.armed = false;
        let mut go = Vec::new();
        let mut unordered = false;
        while let Some(first) = w.waiters.first().map(|p| p.id().to_owned()) {
            // The first in line goes once the order horizon has passed it (`horizon`).
            if !agenda.ordered(t, Stage::Throttle, key, &first) {
                // Fired again when the horizon passes it, not by a timer.
                unordered = true;
                break;
            }
            if !w.window.try_hit(now, period, g.max, tag(&first)) {
                // No room: a waiter that waited only for the horizon is held now.
                w.waiters.hold_free(|p| p.ordered_wait = false);
                break;
            }
            go.extend(w.waiters.pop_first());
        }
        let rearm = !w.waiters.is_empty() && !unordered;
        let rearm = rearm.then(|| {
            w.armed = true;
            w.window.room_at(period).max(now + 1)
        });
        if !go.is_empty() {
            self.mark_dirty();
        }
        Some((go, rearm))
    }

    /// The throttle keys with waiters, trigger by trigger.
    pub(super) fn busy_lines(&self) -> Vec<(usize, String)> {
        let mut busy = Vec::new();
        for (t, g) in self.gates.iter().enumerate() {
            let keys = g.throttle.iter().filter(|(_, w)| !w.waiters.is_empty());
            busy.extend(keys.map(|(k, _)| (t, k.clone())));
        }
        busy
    }

    /// Every waiter of trigger `t`'s throttle keys, in line key by key (a reload's).
    pub(super) fn take_waiters(&mut self, t: usize) -> Vec<Waiter> {
        let lines = self.gates[t].throttle.values_mut();
        lines.flat_map(|w| w.waiters.take_all()).collect()
    }

    /// The windows for a reload's `config` by `plan`, at engine time `now` (module docs); the
    /// waiters of the changed gates were taken first.
    pub(super) fn rekey(&mut self, config: &Arc<DispatchSpec>, plan: &Plan, now: u64) {
        let mut gates: Vec<TriggerWindows> = (config.triggers.iter())
            .map(|_| TriggerWindows::default())
            .collect();
        let mut keys = 0;
        for (o, g) in std::mem::take(&mut self.gates).into_iter().enumerate() {
            let Some(t) = plan.to(o) else { continue };
            let (old, new) = (&self.config.triggers[o].flow, &config.triggers[t].flow);
            let n = &mut gates[t];
            n.rate_limit = carry(
                g.rate_limit,
                old.rate_limit.as_ref(),
                new.rate_limit.as_ref(),
                now,
            );
            n.throttle = carry(
                g.throttle,
                old.throttle.as_ref(),
                new.throttle.as_ref(),
                now,
            );
            keys += counted(&n.rate_limit) + counted(&n.throttle);
        }
        self.gates = gates;
        self.keys = keys;
        self.max_keys = config.flow.max_gate_keys;
        self.config = Arc::clone(config);
    }
}

/// The windows of a `rate_limit`/`throttle` gate after a reload: all of them when the gate is
/// unchanged; when it changed but keeps its key selector, their hits trimmed to the new
/// period and `max` (waiters are taken separately, timers disarmed); else none.
fn carry(
    mut map: HashMap<String, WindowKey>,
    old: Option<&WindowGate>,
    new: Option<&WindowGate>,
    now: u64,
) -> HashMap<String, WindowKey> {
    let (Some(old), Some(new)) = (old, new) else {
        return HashMap::new();
    };
    if old == new {
        return map;
    }
    if old.key != new.key {
        return HashMap::new();
    }
    let (period, max) = (nanos(new.period), new.max);
    for w in map.values_mut() {
        let mut window = Window::default();
        for (at, tag) in w.window.hits() {
            window.restore(at, tag, now, period, max);
        }
        w.window = window;
        w.armed = false;
    }
    map
}

/// Keys of a window map counted against `max_gate_keys` (the shared overflow key is not).
fn counted(map: &HashMap<String, WindowKey>) -> usize {
    map.len() - usize::from(map.contains_key(OVERFLOW_KEY))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::flow::spec::KeySelector;
    use crate::dispatch::flow::tests::rig_config;
    use crate::dispatch::metrics::DispatchMetrics;
    use std::time::Duration;

    fn gate(key: KeySelector, period_s: u64, max: usize) -> WindowGate {
        WindowGate {
            key,
            period: Duration::from_secs(period_s),
            max,
        }
    }

    /// Windows carried by a reload: all of an unchanged gate; the hits of a changed gate with
    /// the same key, trimmed to its new period and `max`; none when the key changed.
    #[test]
    fn windows_follow_the_key_selector() {
        let s = 1_000_000_000;
        let mut w = WindowKey::default();
        for at in [1, 5, 8] {
            assert!(w.window.try_hit(at * s, 10 * s, 3, at as u128));
        }
        w.armed = true;
        let map = || HashMap::from([("k".to_string(), w.clone_hits())]);
        let old = gate(KeySelector::Global, 10, 3);
        let same = carry(map(), Some(&old), Some(&old), 9 * s);
        assert_eq!(same["k"].window.len(), 3);
        assert!(same["k"].armed, "unchanged: as it is");
        let shorter = gate(KeySelector::Global, 5, 1);
        let c = carry(map(), Some(&old), Some(&shorter), 9 * s);
        let hits: Vec<_> = c["k"].window.hits().collect();
        assert_eq!(hits, vec![(8 * s, 8)], "within 5 s of 9 s, newest 1");
        assert!(!c["k"].armed);
        let other_key = gate(KeySelector::Source, 10, 3);
        assert!(carry(map(), Some(&old), Some(&other_key), 9 * s).is_empty());
        assert!(carry(map(), Some(&old), None, 9 * s).is_empty());
        assert_eq!(counted(&map()), 1);
    }

    impl WindowKey {
        fn clone_hits(&self) -> WindowKey {
            let mut window = Window::default();
            for (at, tag) in self.window.hits() {
                window.restore(at, tag, at, u64::MAX, usize::MAX);
            }
            WindowKey {
                window,
                waiters: Waiters::default(),
                armed: self.armed,
            }
        }
    }

    /// The key table: new keys until the bound, then the shared overflow key (counted) until a
    /// sweep finds idle keys; the overflow key itself is not counted.
    #[test]
    fn the_key_table_is_bounded_and_idle_keys_are_swept() {
        let cfg = rig_config("rate_limit = { key = \"event.body.k\", period = \"1s\", max = 1 }");
        let mut cfg = cfg.as_ref().clone();
        cfg.flow.max_gate_keys = 1;
        let cfg = Arc::new(cfg);
        let metrics = Arc::new(DispatchMetrics::new(&[]).with_flow(&cfg.triggers, 10));
        let books = Books::new(&cfg, metrics.clone());
        let mut w = Windows::new(&cfg, None);
        let g = cfg.triggers[0].flow.rate_limit.clone().unwrap();
        let s = 1_000_000_000;
        assert_eq!(w.key(0, Stage::RateLimit, "a", s, &books), "a");
        assert!(w.rate_limit(0, "a", "e1", s, &g));
        assert!(!w.rate_limit(0, "a", "e2", s, &g), "max 1 per second");
        assert_eq!(w.key(0, Stage::RateLimit, "b", s, &books), OVERFLOW_KEY);
        assert_eq!(
            (
                w.len(),
                metrics.flow.overflows(0, Stage::RateLimit as usize)
            ),
            (1, 1)
        );
        assert_eq!(
            w.key(0, Stage::RateLimit, "b", 2 * s, &books),
            "b",
            "`a` idle: swept"
        );
        assert!(w.has(0, Stage::RateLimit, "b") && !w.has(0, Stage::RateLimit, "a"));
        assert_eq!(w.len(), 1);
    }
}
