//! The window gates, `rate_limit` and `throttle` (semantics in the parent module's docs): the
//! per-key sliding windows ([`super::window`]), the per-core key table and its sweeps, and the
//! throttle's waiters and timers.
//!
//! Throttle waiters are kept in acceptance order (event id, a ULID: time-ordered across
//! cores), whatever order they arrived in (a reload's re-offer, the logs read back after a
//! restart), and leave in that order, in full or by reference ([`super::waiters`]). An event that already holds a hit of the window (saved
//! before a restart: its call was in flight when the process died) passes without taking
//! another one ([`super::window::Window::holds`]).
#![forbid(unsafe_code)]

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;

use super::key::OVERFLOW_KEY;
use super::spec::WindowGate;
use super::window::tag;
use super::{nanos, Decision, FlowEngine, FlowOut, Pending, Stage, Waiter, WindowKey, SWEEP_EVERY};
use crate::dispatch::job::SkipReason;

impl FlowEngine {
    pub(super) fn window_map(&mut self, t: usize, stage: Stage) -> &mut HashMap<String, WindowKey> {
        match stage {
            Stage::RateLimit => &mut self.gates[t].rate_limit,
            _ => &mut self.gates[t].throttle,
        }
    }

    /// The key to use in a window gate: `key` itself, or the overflow key when the per-core
    /// table is full and nothing idle can be evicted. Ensures the entry exists.
    pub(super) fn window_key(&mut self, t: usize, stage: Stage, key: &str, now: u64) -> String {
        if self.window_map(t, stage).contains_key(key) {
            return key.to_string();
        }
        if self.window_keys >= self.max_window_keys && now >= self.sweep_at {
            self.sweep_at = now + SWEEP_EVERY;
            self.sweep(now);
        }
        if self.window_keys >= self.max_window_keys {
            self.metrics.flow.overflowed(self.cell(t), stage as usize);
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
    pub(super) fn sweep(&mut self, now: u64) {
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

    pub(super) fn rate_limit(
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
        let id = tag(&p.job.event.event_id);
        let until = self.restored_until;
        let w = self.gates[t].rate_limit.entry(key).or_default();
        if w.window.holds(id, until) {
            // Its unit was taken before a restart (the call was in flight): not a second one.
            self.count(t, Stage::RateLimit, Decision::Pass);
            Some(p)
        } else if w.window.try_hit(now, nanos(g.period), g.max, id) {
            self.mark_dirty();
            self.count(t, Stage::RateLimit, Decision::Pass);
            Some(p)
        } else {
            self.skip(t, Stage::RateLimit, p, SkipReason::RateLimited, out);
            None
        }
    }

    pub(super) fn throttle(
        &mut self,
        t: usize,
        g: &WindowGate,
        mut p: Pending,
        now: u64,
        out: &mut FlowOut,
    ) -> Option<Pending> {
        let key = self.window_key(
            t,
            Stage::Throttle,
            &p.keys.by_stage[Stage::Throttle as usize],
            now,
        );
        let period = nanos(g.period);
        let id = tag(&p.job.event.event_id);
        let until = self.restored_until;
        let w = self.gates[t].throttle.entry(key.clone()).or_default();
        if w.window.holds(id, until) {
            // Its unit was taken before a restart (the call was in flight): not a second one.
            self.passed(t, Stage::Throttle, &p);
            return Some(p);
        }
        // Until the start-up hand-over, every event waits (`super::handover`).
        let settling = self.settle.is_some();
        let w = self.gates[t].throttle.entry(key.clone()).or_default();
        // Room for it behind the waiters, all of which wait only for the order horizon.
        let line = w.waiters.len();
        let room =
            !settling && w.waiters.all_free() && w.window.room_for(now, period, g.max, line + 1);
        let first = line == 0;
        // Below the order horizon only (`dispatch::horizon`); a unit is taken only then.
        let ordered =
            room && first && self.ordered(t, Stage::Throttle, &key, &p.job.event.event_id);
        let w = self.gates[t].throttle.entry(key.clone()).or_default();
        if ordered && w.window.try_hit(now, period, g.max, id) {
            self.mark_dirty();
            self.passed(t, Stage::Throttle, &p);
            return Some(p);
        }
        if room {
            // Only the order horizon keeps it: held in line, counted `pass` when it leaves;
            // fired when the horizon passes it (`super::horizon_turn`), not by a timer.
            self.wait_for_horizon(t, Stage::Throttle, &key, &p);
            self.held(t, Stage::Throttle, &mut p, out);
            p.ordered_wait = true;
            let place = (p.job.event.event_id.clone(), p.job.lsn);
            let w = self.gates[t].throttle.entry(key).or_default();
            w.waiters.insert(place, Waiter::Full(Box::new(p)));
            return None;
        }
        self.held(t, Stage::Throttle, &mut p, out);
        // Acceptance order, not arrival order (module docs).
        let place = (p.job.event.event_id.clone(), p.job.lsn);
        let full = self.gates[t]
            .throttle
            .get(&key)
            .map_or(0, |w| w.waiters.full());
        let waiter = self.waiter(t, Stage::Throttle, p, full);
        let w = self.gates[t].throttle.entry(key.clone()).or_default();
        w.waiters.insert(place, waiter);
        let arm = (!w.armed).then(|| w.window.room_at(period).max(now));
        if let Some(at) = arm {
            w.armed = true;
            self.timers.push(Reverse((at, t, Stage::Throttle, key)));
        }
        None
    }

    pub(super) fn fire_throttle(&mut self, t: usize, key: String, now: u64, out: &mut FlowOut) {
        if self.settling() {
            // Fired again at the hand-over (`super::handover`).
            return;
        }
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
        let mut unordered = false;
        loop {
            let Some(w) = self.gates[t].throttle.get_mut(&key) else {
                return;
            };
            let Some(first) = w.waiters.first().map(|p| p.id().to_owned()) else {
                break;
            };
            // The first in line goes once the order horizon has passed it (`horizon`).
            if !self.ordered(t, Stage::Throttle, &key, &first) {
                // Fired again when the horizon passes it, not by a timer.
                unordered = true;
                break;
            }
            let Some(w) = self.gates[t].throttle.get_mut(&key) else {
                return;
            };
            if !w.window.try_hit(now, period, g.max, tag(&first)) {
                // No room: a waiter that waited only for the horizon is held now.
                self.demote(t, Stage::Throttle, &key);
                break;
            }
            go.extend(w.waiters.pop_first());
        }
        let Some(w) = self.gates[t].throttle.get_mut(&key) else {
            return;
        };
        if !w.waiters.is_empty() && !unordered {
            w.armed = true;
            let at = w.window.room_at(period).max(now + 1);
            self.timers.push(Reverse((at, t, Stage::Throttle, key)));
        }
        if !go.is_empty() {
            self.mark_dirty();
        }
        for w in go {
            // Read back first if held by reference (`super::waiters`); `lost` if it cannot be.
            let Some(mut p) = self.unwait(t, Stage::Throttle, w, out) else {
                continue;
            };
            // Held only for the horizon: `pass`, unless a reload took it from this gate (it
            // was held here: `wait`, counted once).
            let retaken = p.retaken == Some(Stage::Throttle);
            let d = match std::mem::take(&mut p.ordered_wait) && !retaken {
                true => Decision::Pass,
                false => Decision::Wait,
            };
            self.count(t, Stage::Throttle, d);
            self.run(t, p, Stage::Singleton, now, out);
        }
    }
}
