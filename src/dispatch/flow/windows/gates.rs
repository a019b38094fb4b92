//! The engine's side of the window gates ([`super::Windows`] is their state): what
//! `rate_limit` and `throttle` decide for an event, counted and reported, and the throttle
//! waiters going on to the next gates when their key has room.
#![forbid(unsafe_code)]

use std::sync::Arc;

use super::Room;
use crate::dispatch::flow::pending::{nanos, Decision, FlowOut, Pending, Stage, Waiter};
use crate::dispatch::flow::spec::WindowGate;
use crate::dispatch::flow::FlowEngine;
use crate::dispatch::job::SkipReason;

impl FlowEngine {
    pub(in crate::dispatch::flow) fn rate_limit(
        &mut self,
        t: usize,
        g: &WindowGate,
        p: Pending,
        now: u64,
        out: &mut FlowOut,
    ) -> Option<Pending> {
        let key = p.key(Stage::RateLimit);
        let key = self.windows.key(t, Stage::RateLimit, key, now, &self.books);
        if self
            .windows
            .rate_limit(t, &key, &p.job.event.event_id, now, g)
        {
            self.books.count(t, Stage::RateLimit, Decision::Pass);
            return Some(p);
        }
        let why = SkipReason::RateLimited;
        self.books.skip(t, Stage::RateLimit, p, why, out);
        None
    }

    pub(in crate::dispatch::flow) fn throttle(
        &mut self,
        t: usize,
        g: &WindowGate,
        mut p: Pending,
        now: u64,
        out: &mut FlowOut,
    ) -> Option<Pending> {
        let key = p.key(Stage::Throttle);
        let key = self.windows.key(t, Stage::Throttle, key, now, &self.books);
        // Until the start-up hand-over, every event waits (`flow::handover`).
        let settling = self.handover.settling();
        let id = &p.job.event.event_id;
        let room = (self.windows).throttle_room((t, &key), id, now, g, settling, &mut self.agenda);
        if room == Room::Pass {
            self.books.passed(t, Stage::Throttle, &p);
            return Some(p);
        }
        self.books.held(t, Stage::Throttle, &mut p, out);
        // Acceptance order, not arrival order (module docs).
        let place = (p.job.event.event_id.clone(), p.job.lsn);
        let w = match room {
            Room::Horizon => {
                // Only the order horizon keeps it: held in line, counted `pass` when it leaves;
                // fired when the horizon passes it (`horizon_turn`), not by a timer.
                let id = &p.job.event.event_id;
                self.agenda.wait_for_horizon(t, Stage::Throttle, &key, id);
                p.ordered_wait = true;
                Waiter::Full(Box::new(p))
            }
            _ => {
                let full = self.windows.line(t, &key).waiters.full();
                self.books.waiter(t, Stage::Throttle, p, full)
            }
        };
        let horizon_only = room == Room::Horizon;
        let period = nanos(g.period);
        if let Some(at) = (self.windows).enqueue((t, &key), place, w, horizon_only, now, period) {
            self.agenda.arm(at, t, Stage::Throttle, key);
        }
        None
    }

    /// A throttle timer (or the horizon) fired for trigger `t`'s `key`: the waiters that have
    /// room go on to the next gates, read back first if held by reference (`lost` if they
    /// cannot be).
    pub(in crate::dispatch::flow) fn fire_throttle(
        &mut self,
        t: usize,
        key: String,
        now: u64,
        out: &mut FlowOut,
    ) {
        if self.handover.settling() {
            // Fired again at the hand-over (`flow::handover`).
            return;
        }
        let cfg = Arc::clone(&self.config);
        let Some(g) = &cfg.triggers[t].flow.throttle else {
            return;
        };
        let Some((go, rearm)) = self.windows.release(t, &key, now, g, &mut self.agenda) else {
            return;
        };
        if let Some(at) = rearm {
            self.agenda.arm(at, t, Stage::Throttle, key);
        }
        for w in go {
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
            self.books.count(t, Stage::Throttle, d);
            self.run(t, p, Stage::Singleton, now, out);
        }
    }
}
