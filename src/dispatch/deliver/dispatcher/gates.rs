//! The dispatcher's side of the flow-control gates (`crate::dispatch::flow`): it carries out
//! what the gates decide — held events give their dispatch slot back (`Held`), skipped ones get
//! their outcome, released ones wait for a slot in `slot_wait` and take one (`Resumed`), events
//! that went through at once are queued — and it feeds the gates the order horizon
//! (`dispatch::horizon`) and the terminal outcomes that free their holds. A child of
//! [`super`]: it shares the dispatcher's private state.

use super::*;

impl Dispatcher {
    /// Carries out the gates' decisions: held events give their slot back, skipped events
    /// get their (terminal) outcome, ready jobs are queued, released jobs wait for a slot.
    /// Returns the destinations to pump (deduplicated).
    pub(super) fn apply_flow(&mut self, mut out: FlowOut, now: u64) -> Vec<usize> {
        for (lsn, stage) in std::mem::take(&mut out.held) {
            let gate = stage.name();
            self.send(JobOutcome::Held { lsn, gate });
        }
        // Unreadable bodies: no outcome, the events stay pending (`flow::payload`).
        self.held -= out.lost.len();
        let gone = out.leaving();
        for (job, reason) in out.skipped {
            self.held -= 1;
            self.send(JobOutcome::Skipped {
                lsn: job.lsn,
                reason,
                attempts: job.attempt.saturating_sub(1),
            });
        }
        let mut touched = Vec::new();
        for (job, resumed) in gone {
            if resumed {
                self.held_dispatch(&job, 1);
                self.slot_wait.push(job);
                continue;
            }
            // Behind its trigger's released jobs waiting for a slot, or without its cap: it
            // waits for a slot with the cap, in order (`wait_for_cap`).
            match job.capless || self.slot_wait.has(&job.event.trigger_id) {
                true => self.wait_for_cap(job),
                false => touched.extend(self.enqueue(job, now)),
            }
        }
        touched.extend(self.take_slots(now));
        touched.sort_unstable();
        touched.dedup();
        touched
    }

    /// Reads every core's order horizon for the gates (`dispatch::horizon::Reading`), *before*
    /// the loop takes the jobs from its rings.
    pub fn note_horizon(&mut self) {
        let wall = self.clock.unix_millis();
        let h = (self.horizon).before_drain(&self.slots.window.order, self.core, wall);
        self.flow.note_horizon(h);
    }

    /// The end of a turn, after this core published its own horizon: the gates' waiters that
    /// horizon and the other cores' (as read before the rings were drained) have passed are
    /// released.
    pub fn on_horizon(&mut self, now: u64, draining: bool) {
        if draining || self.flow.horizon_waiting() == 0 {
            return;
        }
        let wall = self.clock.unix_millis();
        let h = (self.horizon).after_turn(&self.slots.window.order, self.core, wall);
        if self.horizon.floored() {
            // Events wait and a core is more than 1 s behind: they go on best effort.
            self.metrics.shared.flow.horizon_floored();
        }
        self.flow.note_horizon(h);
        let mut out = FlowOut::default();
        self.flow.release_ordered(now, &mut out);
        for d in self.apply_flow(out, now) {
            self.pump_dest(d, now);
        }
    }

    /// Gives the released jobs a `max_outstanding` slot each (within their trigger's cap), in
    /// order per trigger, while there are free ones ([`SlotWait::take`]); marks this core for a
    /// wake-up at the next release when one is left at a cap. Returns the destinations queued.
    pub(super) fn take_slots(&mut self, now: u64) -> Vec<usize> {
        let (slots, core) = (&self.slots, self.core);
        let (taken, capped) = self
            .slot_wait
            .take(|t| slots.caps.slot(t), |w| slots.take(core, w));
        let mut touched = Vec::new();
        for (mut job, w) in taken {
            self.held_dispatch(&job, -1);
            job.capless = false;
            // The pump gives this slot (and the cap) back at the terminal outcome of `job.lsn`
            // (a carrier's first member): same outcome ring, so this arrives first.
            self.send(JobOutcome::Resumed {
                lsn: job.lsn,
                window: w,
            });
            touched.extend(self.enqueue(job, now));
        }
        if capped {
            // Jobs left at their cap: woken by the release that frees it.
            let _ = self.slots.window.wait(self.core);
        }
        touched
    }

    /// A job through its gates that was admitted without its trigger's cap (`Job::capless`),
    /// or whose trigger has released jobs waiting for a slot: it gives what it holds back
    /// (`Held` at `dispatch`: the pump frees its slot and cap) and waits for a slot with the
    /// cap behind the trigger's other waiting jobs, as a released one does.
    pub(super) fn wait_for_cap(&mut self, job: Job) {
        self.send(JobOutcome::Held {
            lsn: job.lsn,
            gate: "dispatch",
        });
        self.held_dispatch(&job, 1);
        self.slot_wait.push(job);
    }

    /// Moves `sluice_flow_held{gate="dispatch"}` of `job`'s trigger by `delta` events.
    pub(super) fn held_dispatch(&self, job: &Job, delta: i64) {
        // By the trigger's cells, not its gates: a reload between `+1` and `-1` may remove them.
        let m = &self.metrics.shared.flow;
        if let Some(t) = m.index_of(&job.event.trigger_id) {
            let n = delta * job.events() as i64;
            m.held_add(t, crate::dispatch::flow::metrics::DISPATCH, n);
        }
    }

    /// The event at `lsn` is done: release its gate holds; admitted waiters are queued (the
    /// caller pumps their destination, which is the released event's).
    pub(super) fn release_flow(&mut self, lsn: u64, now: u64) {
        let mut out = FlowOut::default();
        self.flow.release(lsn, &mut out);
        self.apply_flow(out, now);
    }
}
