//! The engine's side of the collecting gates ([`super::Collect`] is their state): what
//! `batch` and `debounce` hold, count, skip and release, and the bound (`[flow] max_held`) they
//! keep themselves (module docs of `super`).
#![forbid(unsafe_code)]

use super::{deadline, Fired};
use crate::dispatch::flow::pending::{nanos, Decision, FlowOut, Pending, Stage};
use crate::dispatch::flow::spec::{BatchGate, DebounceGate};
use crate::dispatch::flow::FlowEngine;
use crate::dispatch::job::SkipReason;

impl FlowEngine {
    // ----- batch ------------------------------------------------------------------------------

    pub(in crate::dispatch::flow) fn batch(
        &mut self,
        t: usize,
        g: &BatchGate,
        mut p: Pending,
        now: u64,
        out: &mut FlowOut,
    ) {
        let key = p.key(Stage::Batch).to_owned();
        let joins = self.collect.has_batch(t, &key);
        let max_held = self.config.flow.max_held;
        if !joins && self.books.held_in(t, Stage::Batch) >= max_held {
            self.batch_overflow(t, out);
        }
        // Every member is held (the carrier takes one dispatch slot for all of them).
        let deadline = deadline(&mut p, Stage::Batch, nanos(g.timeout), now);
        self.books.held(t, Stage::Batch, &mut p, out);
        let (opened, size) = self.collect.join(t, &key, (p.job, p.dropped), deadline);
        if opened {
            self.agenda.arm(deadline, t, Stage::Batch, key.clone());
        }
        if size >= g.size {
            self.flush_batch(t, &key, true, out);
        } else if self.books.held_in(t, Stage::Batch) > max_held {
            self.batch_overflow(t, out);
        }
    }

    /// The gate is at its bound: the batch whose timeout comes soonest goes on early.
    fn batch_overflow(&mut self, t: usize, out: &mut FlowOut) {
        if let Some(k) = self.collect.soonest_batch(t) {
            self.books.overflowed(t, Stage::Batch);
            self.flush_batch(t, &k, false, out);
        }
    }

    /// A batch timer: flush if the key's current batch is due.
    pub(in crate::dispatch::flow) fn fire_batch(
        &mut self,
        t: usize,
        key: &str,
        now: u64,
        out: &mut FlowOut,
    ) {
        if self.collect.batch_due(t, key, now) {
            self.flush_batch(t, key, false, out);
        }
    }

    /// Sends the batch of `key` as one carrier. `by_size`: the last member filled it (it went
    /// on at once: `pass`; the others waited).
    fn flush_batch(&mut self, t: usize, key: &str, by_size: bool, out: &mut FlowOut) {
        let Some(held) = self.collect.take_batch(t, key) else {
            return;
        };
        let n = held.len();
        self.books.unheld(t, Stage::Batch, n);
        let waited = n - usize::from(by_size);
        self.books.count_n(t, Stage::Batch, Decision::Wait, waited);
        if by_size {
            self.books.count(t, Stage::Batch, Decision::Pass);
        }
        let mut members = Vec::with_capacity(n);
        for (mut job, dropped) in held {
            match self.books.payloads.restore(&mut job, dropped) {
                Ok(()) => members.push(job),
                Err(e) => self.lost(job.lsn, &e, out),
            }
        }
        if !members.is_empty() {
            out.resumed
                .push(crate::dispatch::flow::batch::carrier(members));
        }
    }

    // ----- debounce ---------------------------------------------------------------------------

    pub(in crate::dispatch::flow) fn debounce(
        &mut self,
        t: usize,
        g: &DebounceGate,
        mut p: Pending,
        now: u64,
        out: &mut FlowOut,
    ) {
        let key = p.key(Stage::Debounce).to_owned();
        let deadline = deadline(&mut p, Stage::Debounce, nanos(g.period), now);
        match self.collect.supersedes(t, &key, &p) {
            Some(false) => {
                // Older than the event it would supersede: it is the superseded one.
                self.books
                    .skip(t, Stage::Debounce, p, SkipReason::Debounced, out);
                return;
            }
            Some(true) => {
                // The newcomer takes the superseded event's place, whatever the bound (one
                // timer per key, re-armed when it fires early).
                self.books.held(t, Stage::Debounce, &mut p, out);
                let Some((old, sooner)) = self.collect.supersede(t, &key, p, deadline) else {
                    return;
                };
                if sooner {
                    // A reload's kept deadline can be sooner than the key's timer.
                    self.agenda.arm(deadline, t, Stage::Debounce, key);
                }
                self.books.unheld(t, Stage::Debounce, 1);
                self.books
                    .skip(t, Stage::Debounce, old, SkipReason::Debounced, out);
                return;
            }
            None => {}
        }
        if self.books.held_in(t, Stage::Debounce) >= self.config.flow.max_held {
            self.debounce_overflow(t, now, out);
        }
        self.books.held(t, Stage::Debounce, &mut p, out);
        self.agenda.arm(deadline, t, Stage::Debounce, key.clone());
        self.collect.open(t, key, p, deadline);
    }

    /// Past `max_held` keys: the held key whose quiet period ends soonest goes on early.
    fn debounce_overflow(&mut self, t: usize, now: u64, out: &mut FlowOut) {
        if let Some(p) = self.collect.take_soonest_debounce(t) {
            self.books.overflowed(t, Stage::Debounce);
            self.debounced(t, p, now, out);
        }
    }

    /// A debounce timer: the key's latest event goes on if its quiet time ended.
    pub(in crate::dispatch::flow) fn fire_debounce(
        &mut self,
        t: usize,
        key: String,
        now: u64,
        out: &mut FlowOut,
    ) {
        match self.collect.fire_debounce(t, &key, now) {
            Fired::Due(p) => self.debounced(t, *p, now, out),
            // A newer event moved the quiet time: one timer per key, re-armed.
            Fired::Later(at) => self.agenda.arm(at, t, Stage::Debounce, key),
            Fired::Gone => {}
        }
    }

    /// `p` leaves the debounce gate having waited, on to the next gates.
    fn debounced(&mut self, t: usize, p: Pending, now: u64, out: &mut FlowOut) {
        self.books.unheld(t, Stage::Debounce, 1);
        self.books.count(t, Stage::Debounce, Decision::Wait);
        self.run(t, p, Stage::RateLimit, now, out);
    }
}
