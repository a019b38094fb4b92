//! Re-keying the gates for a reload's configuration (`ops::reload`): a reload touches only what
//! changed, and loses no held event.
//!
//! [`FlowEngine::rekey`] compares the gates trigger by trigger (by id) and gate by gate:
//! - **An unchanged gate keeps its state as it is**: its held events (same place in line, same
//!   deadline, same timer), its window, its in-progress holds. A trigger none of whose gates
//!   changed is not touched at all, so a reload that changes another trigger (or nothing about
//!   gates) moves no deadline and counts nothing.
//! - **A changed gate** gives up the events it holds; each is offered again to the trigger's
//!   new gates *from that gate's stage on* (the gates before it, which it had passed, are not
//!   applied again), in acceptance order (event id, a ULID). A debounce or batch event keeps its
//!   deadline when the period (timeout) did not change, else takes the sooner of its old
//!   deadline and the reload time plus the new period ([`super::collect`]). A changed
//!   `rate_limit`/`throttle` with the same key selector keeps its windows' hits (trimmed to the
//!   new period and `max`): a reload opens no window early. A changed `singleton` or
//!   `concurrency` counts the events in progress under their old keys, when the trigger still
//!   has that gate, so `max` counts them until they finish.
//! - **A removed gate** (or trigger) lets its held events go on from the next stage (a trigger
//!   without gates: to its destination).
//!
//! Nothing is dropped: a re-offered event either is held by a new gate (counted in
//! `sluice_flow_held` again), goes on to its destination, or is skipped by a new gate's rule
//! (`rate_limit`, `debounce`, `singleton`), which is that gate's ordinary, durable outcome.
//!
//! A re-offered event stays *held* in the dispatch-window sense: it gave its `max_outstanding`
//! slot back when a gate first held it, so it is not reported in [`FlowOut::held`] again and,
//! when it goes on, it leaves through [`FlowOut::resumed`] (it takes a slot then). Its body, if
//! it was dropped ([`super::payload`]), is read back first — the new gates' keys may read it —
//! and held under the `[flow] max_held_bytes` budget again; an unreadable one leaves as
//! [`FlowOut::lost`] (pending in its log, as at any release).
//!
//! Counting (`sluice_flow_control_total`, one decision per event per gate it reaches): an
//! event offered again to its stage's new gate is counted once there, when it leaves it
//! (`wait`: it was held); one whose gate was removed leaves it as `wait`. So `wait` is counted
//! once per event, and for every gate `pass + wait + skip + held` stays the number of events
//! that reached it.

use super::*;

/// What a reload did with one old trigger's state: the new index of the trigger (`None`:
/// removed or without gates) and which stages' state was kept as it is.
struct Carried {
    to: Option<usize>,
    kept: [bool; 6],
}

/// Is gate `stage` configured in `f`?
fn has(f: &FlowSpec, stage: Stage) -> bool {
    match stage {
        Stage::Batch => f.batch.is_some(),
        Stage::Debounce => f.debounce.is_some(),
        Stage::RateLimit => f.rate_limit.is_some(),
        Stage::Throttle => f.throttle.is_some(),
        Stage::Singleton => f.singleton.is_some(),
        Stage::Concurrency => f.concurrency.is_some(),
    }
}

/// Is gate `stage` the same in `a` and `b` (both absent included)?
fn same(a: &FlowSpec, b: &FlowSpec, stage: Stage) -> bool {
    match stage {
        Stage::Batch => a.batch == b.batch,
        Stage::Debounce => a.debounce == b.debounce,
        Stage::RateLimit => a.rate_limit == b.rate_limit,
        Stage::Throttle => a.throttle == b.throttle,
        Stage::Singleton => a.singleton == b.singleton,
        Stage::Concurrency => a.concurrency == b.concurrency,
    }
}

impl FlowEngine {
    /// Replaces the gates with those of `config` (see the module docs); decisions go to `out`.
    /// `now`: the injected clock, as for [`FlowEngine::offer`].
    pub fn rekey(&mut self, config: Arc<DispatchSpec>, now: u64, out: &mut FlowOut) {
        // Windows saved before the restart belong to the old gates: restore them first.
        let now = self.restore_once(now);
        let mut next = FlowEngine::new(config, Arc::clone(&self.metrics), self.store.take());
        next.payloads = std::mem::replace(&mut self.payloads, payload::Payloads::new(0));
        next.sweep_at = self.sweep_at;
        next.idle_sweep_at = self.idle_sweep_at;
        next.restored_until = self.restored_until;
        next.dlq = self.dlq.take();
        next.core = self.core;
        next.ordering_at = self.ordering_at;
        // Still waiting for the start-up hand-over: so are the new gates.
        next.settle = self.settle.take();
        let mut taken: Vec<Waiter> = Vec::new();
        let old_gates = std::mem::take(&mut self.gates);
        let mut carried = Vec::with_capacity(old_gates.len());
        for (o, g) in old_gates.into_iter().enumerate() {
            let c = self.carry(o, g, &mut next, now, &mut taken);
            carried.push(c);
        }
        for Reverse((at, o, stage, key)) in std::mem::take(&mut self.timers) {
            if let Some(c) = carried.get(o).filter(|c| c.kept[stage as usize]) {
                if let Some(t) = c.to {
                    next.timers.push(Reverse((at, t, stage, key)));
                }
            }
        }
        // Keys of kept gates waiting for the order horizon (`horizon`) stay looked at.
        for (at, o, stage, key) in std::mem::take(&mut self.horizon_wait) {
            if let Some(c) = carried.get(o).filter(|c| c.kept[stage as usize]) {
                if let Some(t) = c.to {
                    next.horizon_wait.insert((at, t, stage, key));
                }
            }
        }
        next.horizon = self.horizon;
        next.last_tick = self.last_tick;
        self.carry_holds(&carried, &mut next);
        next.index_stops();
        // Triggers whose `ordering` holds from now on: their keys with dead letters stop.
        let newly: Vec<usize> = (0..next.config.triggers.len())
            .filter(|&t| next.holding(t).is_some())
            .filter(|&t| {
                let id = &next.config.triggers[t].id;
                let was = self.by_id.get(id).and_then(|&o| self.holding(o));
                was.is_none()
            })
            .collect();
        // The events still held are those of the kept gates.
        next.waiting = self.waiting;
        // A trigger whose `ordering` gate is gone publishes no ordering figures any more.
        for (o, t) in self.config.triggers.iter().enumerate() {
            let still = (next.by_id.get(&t.id))
                .is_some_and(|&n| next.config.triggers[n].flow.ordering().is_some());
            if t.flow.ordering().is_some() && !still {
                self.metrics.flow.set_ordering(self.cell(o), None);
            }
        }
        *self = next;
        self.rebuild_stops(&newly);
        taken.sort_by(|a, b| a.order().cmp(&b.order()));
        for w in taken {
            self.reoffer(w, now, out);
        }
        // Re-offered concurrency waiters queued by place: admit them by place now (or at the
        // start-up hand-over).
        if self.settling() {
            return;
        }
        let mut keys: Vec<(usize, String)> = Vec::new();
        for (t, g) in self.gates.iter().enumerate() {
            keys.extend(g.concurrency.keys().map(|k| (t, k.clone())));
        }
        for (t, k) in keys {
            self.admit_waiters(t, &k, out);
        }
    }

    /// Moves old trigger `o`'s gate state `g` into `next`: the unchanged gates' as it is, the
    /// windows of changed window gates with the same key; the events held by changed or
    /// removed gates go to `taken`.
    fn carry(
        &mut self,
        o: usize,
        mut g: TriggerGates,
        next: &mut FlowEngine,
        now: u64,
        taken: &mut Vec<Waiter>,
    ) -> Carried {
        let old_cfg = Arc::clone(&self.config);
        let new_cfg = Arc::clone(&next.config);
        let old = &old_cfg.triggers[o].flow;
        let to = next.by_id.get(&old_cfg.triggers[o].id).copied();
        let empty = FlowSpec::default();
        let new = to.map_or(&empty, |t| &new_cfg.triggers[t].flow);
        let mut kept = [false; 6];
        for stage in STAGES {
            kept[stage as usize] = to.is_some() && has(old, stage) && same(old, new, stage);
        }
        self.take_held(o, &mut g, new, &kept, taken);
        if let Some(t) = to {
            let n = &mut next.gates[t];
            if kept[Stage::Batch as usize] {
                n.batch = std::mem::take(&mut g.batch);
            }
            if kept[Stage::Debounce as usize] {
                n.debounce = std::mem::take(&mut g.debounce);
            }
            if kept[Stage::Throttle as usize] {
                n.throttle = std::mem::take(&mut g.throttle);
            }
            if kept[Stage::Singleton as usize] {
                n.singleton = std::mem::take(&mut g.singleton);
            }
            if kept[Stage::Concurrency as usize] {
                n.concurrency = std::mem::take(&mut g.concurrency);
            }
            n.rate_limit = carry_windows(
                std::mem::take(&mut g.rate_limit),
                old.rate_limit.as_ref(),
                new.rate_limit.as_ref(),
                now,
            );
            let throttle = carry_windows(
                std::mem::take(&mut g.throttle),
                old.throttle.as_ref(),
                new.throttle.as_ref(),
                now,
            );
            if !kept[Stage::Throttle as usize] {
                n.throttle = throttle;
            }
            next.window_keys += counted(&n.rate_limit) + counted(&n.throttle);
        }
        Carried { to, kept }
    }

    /// Takes the events held by old trigger `o`'s gates that are not `kept`, with where they
    /// were held and their deadlines; the held counts follow.
    fn take_held(
        &mut self,
        o: usize,
        g: &mut TriggerGates,
        new: &FlowSpec,
        kept: &[bool; 6],
        taken: &mut Vec<Waiter>,
    ) {
        let old_cfg = Arc::clone(&self.config);
        let old = &old_cfg.triggers[o].flow;
        let mut got: Vec<(Stage, Waiter)> = Vec::new();
        let kept = |s: Stage| kept[s as usize];
        if !kept(Stage::Batch) {
            let timeout = old.batch.as_ref().map_or(0, |b| nanos(b.timeout));
            for (_, b) in g.batch.drain() {
                for (job, dropped) in b.members {
                    let mut p = Pending::new(job, Box::default(), true, dropped);
                    p.hint = Some((Stage::Batch, b.deadline, timeout));
                    got.push((Stage::Batch, Waiter::Full(Box::new(p))));
                }
            }
        }
        if !kept(Stage::Debounce) {
            let period = old.debounce.as_ref().map_or(0, |d| nanos(d.period));
            for (_, d) in g.debounce.drain() {
                let mut p = d.latest;
                p.hint = Some((Stage::Debounce, d.deadline, period));
                got.push((Stage::Debounce, Waiter::Full(Box::new(p))));
            }
        }
        if !kept(Stage::Throttle) {
            for w in g.throttle.values_mut() {
                got.extend(w.waiters.take_all().map(|w| (Stage::Throttle, w)));
            }
        }
        if !kept(Stage::Concurrency) {
            for c in g.concurrency.values_mut() {
                got.extend(c.waiters.take_all().map(|w| (Stage::Concurrency, w)));
            }
        }
        for stage in STAGES {
            let n = got.iter().filter(|(s, _)| *s == stage).count();
            if n == 0 {
                continue;
            }
            self.unheld(o, stage, n);
            let refs = got.iter().filter(|(s, w)| *s == stage && !w.is_full());
            let refs = refs.count() as i64;
            self.metrics
                .flow
                .in_log_add(self.cell(o), stage as usize, -refs);
            if !has(new, stage) {
                // The gate is gone: they leave it having waited (once each).
                let m = self.cell(o);
                let d = Decision::Wait as usize;
                self.metrics.flow.incr_n(m, stage as usize, d, n);
            }
        }
        taken.extend(got.into_iter().map(|(stage, mut w)| {
            match &mut w {
                Waiter::Full(p) => p.retaken = Some(stage),
                Waiter::Ref(thin) => thin.set_tag(Some(stage)),
            }
            w
        }));
    }

    /// The holds of events in progress, under the new trigger indices; a changed `singleton`
    /// or `concurrency` counts them (a kept one already does).
    fn carry_holds(&mut self, carried: &[Carried], next: &mut FlowEngine) {
        let new_cfg = Arc::clone(&next.config);
        for (lsn, h) in std::mem::take(&mut self.holds) {
            let Some(c) = carried.get(h.trigger) else {
                continue;
            };
            let Some(t) = c.to else { continue };
            let f = &new_cfg.triggers[t].flow;
            let mut hold = Hold {
                trigger: t,
                singleton: None,
                concurrency: None,
            };
            if let (Some(k), Some(_)) = (h.singleton, &f.singleton) {
                if !c.kept[Stage::Singleton as usize] {
                    next.gates[t].singleton.insert(k.clone());
                }
                hold.singleton = Some(k);
            }
            if let (Some(k), Some(_)) = (h.concurrency, &f.concurrency) {
                if !c.kept[Stage::Concurrency as usize] {
                    let ck = next.gates[t].concurrency.entry(k.clone()).or_default();
                    ck.active += 1;
                }
                hold.concurrency = Some(k);
            }
            if hold.singleton.is_some() || hold.concurrency.is_some() {
                next.holds.insert(lsn, hold);
            }
        }
    }

    /// Offers a taken event to the new gates from the stage it was held in (the next one when
    /// that gate is gone): its keys resolved again (its body read back first if it was
    /// dropped, the whole event if it was held by reference), its body held under the budget
    /// again.
    fn reoffer(&mut self, w: Waiter, now: u64, out: &mut FlowOut) {
        let empty = FlowSpec::default();
        let mut p = match in_full(w, Stage::Batch, &empty, &mut self.payloads) {
            Ok(p) => p,
            Err((lsn, e)) => return self.lost(lsn, &e, out),
        };
        let Some(&t) = self.by_id.get(p.job.event.trigger_id.as_str()) else {
            // No gates any more: it goes on (its body read back if it was dropped).
            self.leave(p, out);
            return;
        };
        let cfg = Arc::clone(&self.config);
        let f = &cfg.triggers[t].flow;
        let from = p.retaken.unwrap_or(Stage::Batch);
        let Some(start) = STAGES
            .into_iter()
            .find(|s| *s > from || (*s == from && has(f, from)))
        else {
            self.leave(p, out);
            return;
        };
        if p.dropped {
            if let Err(e) = self.payloads.restore(&mut p.job, true) {
                self.lost(p.job.lsn, &e, out);
                return;
            }
        } else {
            // Released from the budget here, held under it again below.
            self.payloads.forget(&p.job, false);
        }
        p.keys = Box::new(resolve(f, &p.job.event));
        p.dropped = self.payloads.hold(&mut p.job);
        self.run(t, p, start, now, out);
    }
}

/// The windows of a `rate_limit`/`throttle` gate after a reload: all of them when the gate is
/// unchanged; when it changed but keeps its key selector, their hits trimmed to the new
/// period and `max` (waiters are taken separately, timers disarmed); else none.
fn carry_windows(
    mut map: HashMap<String, WindowKey>,
    old: Option<&super::spec::WindowGate>,
    new: Option<&super::spec::WindowGate>,
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
    map.len() - usize::from(map.contains_key(key::OVERFLOW_KEY))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::flow::spec::{KeySelector, WindowGate};
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
        let same = carry_windows(map(), Some(&old), Some(&old), 9 * s);
        assert_eq!(same["k"].window.len(), 3);
        assert!(same["k"].armed, "unchanged: as it is");
        let shorter = gate(KeySelector::Global, 5, 1);
        let c = carry_windows(map(), Some(&old), Some(&shorter), 9 * s);
        let hits: Vec<_> = c["k"].window.hits().collect();
        assert_eq!(hits, vec![(8 * s, 8)], "within 5 s of 9 s, newest 1");
        assert!(!c["k"].armed);
        let other_key = gate(KeySelector::Source, 10, 3);
        assert!(carry_windows(map(), Some(&old), Some(&other_key), 9 * s).is_empty());
        assert!(carry_windows(map(), Some(&old), None, 9 * s).is_empty());
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
}
