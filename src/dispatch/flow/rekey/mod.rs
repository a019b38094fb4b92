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
use pending::{Waiter, STAGES};
use plan::{has, Plan};

pub(super) mod plan;

impl FlowEngine {
    /// Replaces the gates with those of `config` (see the module docs); decisions go to `out`.
    /// `now`: the injected clock, as for [`FlowEngine::offer`].
    pub fn rekey(&mut self, config: Arc<DispatchSpec>, now: u64, out: &mut FlowOut) {
        // Windows saved before the restart belong to the old gates: restore them first.
        let now = self.engine_time(now);
        let by_id = gated(&config);
        let plan = Plan::new(&self.config, &config, &by_id);
        let mut taken = self.take_held(&config, &plan);
        // A trigger whose `ordering` gate is gone publishes no ordering figures any more.
        for (o, t) in self.config.triggers.iter().enumerate() {
            let still =
                (by_id.get(&t.id)).is_some_and(|&n| config.triggers[n].flow.ordering().is_some());
            if t.flow.ordering().is_some() && !still {
                self.books.flow().set_ordering(self.books.cell(o), None);
            }
        }
        // Every part carries its own state by the plan (a kept gate's as it is); the events
        // still held are those of the kept gates, and the start-up hand-over, the order
        // horizon, the DLQ watch and the held bodies stay as they are.
        self.books.rekey(&config);
        self.agenda.rekey(|o, stage| plan.kept(o, stage));
        self.collect.rekey(config.triggers.len(), &plan);
        self.windows.rekey(&config, &plan, now);
        self.progress.rekey(&config, &plan);
        let newly = self.stops.rekey(&config, &plan);
        self.config = config;
        self.by_id = by_id;
        // Triggers whose `ordering` holds from now on: their keys with dead letters stop.
        self.rebuild_stops(&newly);
        taken.sort_by(|a, b| a.order().cmp(&b.order()));
        for w in taken {
            self.reoffer(w, now, out);
        }
        // Re-offered concurrency waiters queued by place: admit them by place now (or at the
        // start-up hand-over).
        if self.handover.settling() {
            return;
        }
        for (t, k) in self.progress.all_keys() {
            self.admit_waiters(t, &k, out);
        }
    }

    /// Takes the events held by the gates `plan` does not keep (changed or removed, for the
    /// new `config`), each tagged with the stage it was held at (and its deadline there); they
    /// leave the old gates' books.
    fn take_held(&mut self, config: &DispatchSpec, plan: &Plan) -> Vec<Waiter> {
        let old_cfg = Arc::clone(&self.config);
        let mut taken = Vec::new();
        for (o, trigger) in old_cfg.triggers.iter().enumerate() {
            let mut got = self.collect.take_held(o, &trigger.flow, plan);
            if plan.kept(o, Stage::Throttle).is_none() {
                let waiters = self.windows.take_waiters(o).into_iter();
                got.extend(waiters.map(|w| (Stage::Throttle, w)));
            }
            if plan.kept(o, Stage::Concurrency).is_none() {
                let waiters = self.progress.take_waiters(o).into_iter();
                got.extend(waiters.map(|w| (Stage::Concurrency, w)));
            }
            let new = plan.to(o).map(|t| &config.triggers[t].flow);
            for stage in STAGES {
                let of: Vec<&Waiter> = (got.iter())
                    .filter(|(s, _)| *s == stage)
                    .map(|(_, w)| w)
                    .collect();
                // The gate is gone: they leave it having waited (once each).
                let gone = !new.is_some_and(|f| has(f, stage));
                self.books.retaken(o, stage, &of, gone);
            }
            taken.extend(got.into_iter().map(|(stage, mut w)| {
                match &mut w {
                    Waiter::Full(p) => p.retaken = Some(stage),
                    Waiter::Ref(thin) => thin.set_tag(Some(stage)),
                }
                w
            }));
        }
        taken
    }

    /// Offers a taken event to the new gates from the stage it was held in (the next one when
    /// that gate is gone): its keys resolved again (its body read back first if it was
    /// dropped, the whole event if it was held by reference), its body held under the budget
    /// again.
    fn reoffer(&mut self, w: Waiter, now: u64, out: &mut FlowOut) {
        let empty = FlowSpec::default();
        let payloads = &mut self.books.payloads;
        let mut p = match Pending::from_waiter(w, Stage::Batch, &empty, payloads) {
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
        if let Err((lsn, e)) = self.books.rehold(&mut p, f) {
            self.lost(lsn, &e, out);
            return;
        }
        self.run(t, p, start, now, out);
    }
}
