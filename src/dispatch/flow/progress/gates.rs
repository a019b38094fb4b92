//! The engine's side of the in-progress gates ([`super::InProgress`] is their state): which
//! event passes `singleton` or is skipped, which passes `concurrency` or waits in its key's
//! line, and the order waiters are admitted in — by place (priority rank, then acceptance
//! order), once the order horizon has passed the first in line (`flow::agenda`), and for a key
//! stopped by `ordering` only a replay of its dead letter (`flow::ordering`).
#![forbid(unsafe_code)]

use std::sync::Arc;

use crate::dispatch::flow::pending::{place, place_id, Decision, FlowOut, Pending, Stage, Waiter};
use crate::dispatch::flow::spec::ConcurrencyGate;
use crate::dispatch::flow::FlowEngine;
use crate::dispatch::job::SkipReason;

impl FlowEngine {
    pub(in crate::dispatch::flow) fn singleton(
        &mut self,
        t: usize,
        p: Pending,
        out: &mut FlowOut,
    ) -> Option<Pending> {
        let key = p.key(Stage::Singleton);
        if !self.progress.enter_singleton(t, key, p.job.lsn) {
            let why = SkipReason::SingletonActive;
            self.books.skip(t, Stage::Singleton, p, why, out);
            return None;
        }
        self.books.count(t, Stage::Singleton, Decision::Pass);
        Some(p)
    }

    pub(in crate::dispatch::flow) fn concurrency(
        &mut self,
        t: usize,
        g: &ConcurrencyGate,
        mut p: Pending,
        out: &mut FlowOut,
    ) -> Option<Pending> {
        let key = p.key(Stage::Concurrency).to_owned();
        // A reload's re-offered waiters all queue first, then leave by place (`rekey`); so do
        // all events until the start-up hand-over (`handover`).
        let requeued = p.retaken == Some(Stage::Concurrency) || self.handover.settling();
        let c = self.progress.line_entry(t, &key);
        // Room for it behind the waiters, all of which wait only for the order horizon.
        let room = !requeued && c.waiters.all_free() && c.active + c.waiters.len() < g.max;
        let first = c.waiters.is_empty();
        // A stopped key (`ordering`) has room only for a replay of its dead letter.
        let room = room
            && (!self.stops.is_stopped(t, &key)
                || (first
                    && (self.stops).unstopped(t, &key, Some(place_id(g, &p)), &mut self.agenda)));
        let id = &p.job.event.event_id;
        if room && first && self.agenda.ordered(t, Stage::Concurrency, &key, id) {
            self.progress.enter_concurrency(t, &key, p.job.lsn);
            self.books.passed(t, Stage::Concurrency, &p);
            return Some(p);
        }
        self.books.held(t, Stage::Concurrency, &mut p, out);
        let place = place(g, &p);
        if room {
            // Only the order horizon keeps it: held in line, counted `pass` when it leaves.
            let id = &p.job.event.event_id;
            self.agenda
                .wait_for_horizon(t, Stage::Concurrency, &key, id);
            p.ordered_wait = true;
            let c = self.progress.line_entry(t, &key);
            c.waiters.insert(place, Waiter::Full(Box::new(p)));
            return None;
        }
        let full = self.progress.line_entry(t, &key).waiters.full();
        let w = self.books.waiter(t, Stage::Concurrency, p, full);
        let c = self.progress.line_entry(t, &key);
        c.waiters.insert(place, w);
        // A stopped key with room (`ordering`): a replay of its dead letter goes now.
        if c.active < g.max && !requeued && self.stops.is_stopped(t, &key) {
            self.admit_waiters(t, &key, out);
        }
        None
    }

    /// Admits concurrency waiters of trigger `t`'s key `k` while it has room, in place order
    /// (rank, then acceptance order), each read back first if it was held by reference (one
    /// that cannot be is `lost`, pending); forgets the key when idle.
    pub(in crate::dispatch::flow) fn admit_waiters(
        &mut self,
        t: usize,
        k: &str,
        out: &mut FlowOut,
    ) {
        let cfg = Arc::clone(&self.config);
        let Some(g) = &cfg.triggers[t].flow.concurrency else {
            return;
        };
        loop {
            let Some(ck) = self.progress.line(t, k) else {
                return;
            };
            let first = ck.waiters.first().map(|w| w.id().to_owned());
            // A stopped key (`ordering`) lets only a replay of its dead letter go.
            let stopped = self.stops.is_stopped(t, k);
            let place = (ck.waiters.first_place())
                .filter(|_| stopped)
                .map(|(_, id, _)| id.clone());
            let room = ck.active < g.max
                && (!stopped || (self.stops).unstopped(t, k, place.as_deref(), &mut self.agenda));
            // The first in line goes once the order horizon has passed it (`horizon`).
            let go =
                room && first.is_some_and(|id| self.agenda.ordered(t, Stage::Concurrency, k, &id));
            let next = match go {
                true => (self.progress.line_mut(t, k)).and_then(|c| c.waiters.pop_first()),
                false => None,
            };
            let Some(w) = next else {
                let stopped = self.stops.is_stopped(t, k);
                if !self.progress.forget(t, k, stopped) && !room {
                    // A waiter that waited only for the horizon now waits for room: held.
                    if let Some(c) = self.progress.line_mut(t, k) {
                        c.waiters.hold_free(|p| p.ordered_wait = false);
                    }
                }
                return;
            };
            let Some(mut p) = self.unwait(t, Stage::Concurrency, w, out) else {
                continue;
            };
            self.progress.enter_concurrency(t, k, p.job.lsn);
            // Held only for the horizon: `pass`, unless a reload took it from this gate (it
            // was held here: `wait`, counted once).
            let retaken = p.retaken == Some(Stage::Concurrency);
            let d = match std::mem::take(&mut p.ordered_wait) && !retaken {
                true => Decision::Pass,
                false => Decision::Wait,
            };
            self.books.count(t, Stage::Concurrency, d);
            self.leave(p, out);
        }
    }
}
