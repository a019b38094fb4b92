//! The collecting gates, `batch` and `debounce` (semantics in the parent module's docs): they
//! hold events by key until a deadline (a batch's timeout from its first member, a debounce
//! key's quiet period from its latest event).
//!
//! **Order.** A batch's members are kept in acceptance order (event id, a ULID); a debounce key
//! keeps the latest event *by acceptance order*: an event older than the one held (one of the
//! logs read back after a restart reached the gate late) is the superseded one.
//!
//! **The bound** (`[flow] max_held` events per gate): an event that supersedes a held debounce
//! event, or joins a held batch, is always taken, in place. Only an event with a new key can
//! find the gate full; then the held key whose deadline comes soonest goes on early (a batch:
//! flushed as it is), counted once in `sluice_flow_key_overflow_total`, and the new key is held.
//! A batch that a join takes past the bound makes the soonest batch go on early the same way.
//! So the pumps never leave a debounce or batch event in the log for this gate's bound
//! ([`super::metrics::FlowMetrics::full`] does not look at these two gates), and a newer event
//! is never kept out of the gate that supersedes the older one.
//!
//! **Deadlines kept by a reload** ([`super::rekey`]): an event re-offered to the gate it was
//! held in carries its old deadline ([`Hint`]). It keeps it when the gate's period (`debounce`)
//! or timeout (`batch`) did not change; when it changed, it takes the sooner of the old
//! deadline and the reload time plus the new period.
#![forbid(unsafe_code)]

use std::cmp::Reverse;

use super::spec::{BatchGate, DebounceGate};
use super::{nanos, BatchKey, DebounceKey, Decision, FlowEngine, FlowOut, Pending, Stage};
use crate::dispatch::job::SkipReason;

/// The deadline of `p` in a gate of `stage` with `period`, held from `now` on.
fn deadline(p: &mut Pending, stage: Stage, period: u64, now: u64) -> u64 {
    let fresh = now.saturating_add(period);
    match p.hint.take() {
        Some((s, old, old_period)) if s == stage && old_period == period => old,
        Some((s, old, _)) if s == stage => old.min(fresh),
        _ => fresh,
    }
}

impl FlowEngine {
    /// Events `stage` of trigger `t` holds now.
    fn held_in(&self, t: usize, stage: Stage) -> usize {
        self.metrics.flow.held(self.cell(t), stage as usize) as usize
    }

    // ----- batch ------------------------------------------------------------------------------

    pub(super) fn batch(
        &mut self,
        t: usize,
        g: &BatchGate,
        mut p: Pending,
        now: u64,
        out: &mut FlowOut,
    ) {
        let key = p.keys.by_stage[Stage::Batch as usize].clone();
        let joins = self.gates[t].batch.contains_key(&key);
        if !joins && self.held_in(t, Stage::Batch) >= self.config.flow.max_held {
            self.batch_overflow(t, out);
        }
        // Every member is held (the carrier takes one dispatch slot for all of them).
        let deadline = deadline(&mut p, Stage::Batch, nanos(g.timeout), now);
        self.held(t, Stage::Batch, &mut p, out);
        let member = (p.job, p.dropped);
        let full = match self.gates[t].batch.get_mut(&key) {
            Some(b) => {
                fn order(m: &super::Job) -> (&str, super::Lsn) {
                    (m.event.event_id.as_str(), m.lsn)
                }
                let at = b
                    .members
                    .partition_point(|(m, _)| order(m) <= order(&member.0));
                b.members.insert(at, member);
                b.members.len() >= g.size
            }
            None => {
                self.timers
                    .push(Reverse((deadline, t, Stage::Batch, key.clone())));
                self.gates[t].batch.insert(
                    key.clone(),
                    BatchKey {
                        members: vec![member],
                        deadline,
                    },
                );
                g.size <= 1
            }
        };
        if full {
            self.flush_batch(t, &key, true, out);
        } else if self.held_in(t, Stage::Batch) > self.config.flow.max_held {
            self.batch_overflow(t, out);
        }
    }

    /// The gate is at its bound: the batch whose timeout comes soonest goes on early.
    fn batch_overflow(&mut self, t: usize, out: &mut FlowOut) {
        let soonest = self.gates[t]
            .batch
            .iter()
            .min_by_key(|(_, b)| b.deadline)
            .map(|(k, _)| k.clone());
        if let Some(k) = soonest {
            self.metrics
                .flow
                .overflowed(self.cell(t), Stage::Batch as usize);
            self.flush_batch(t, &k, false, out);
        }
    }

    /// A batch timer: flush if the key's current batch is due (a batch flushed by size leaves
    /// a stale timer; a newer batch of the key has its own, later deadline).
    pub(super) fn fire_batch(&mut self, t: usize, key: &str, now: u64, out: &mut FlowOut) {
        if self.gates[t]
            .batch
            .get(key)
            .is_some_and(|b| b.deadline <= now)
        {
            self.flush_batch(t, key, false, out);
        }
    }

    /// Sends the batch of `key` as one carrier. `by_size`: the last member filled it (it went
    /// on at once: `pass`; the others waited).
    pub(super) fn flush_batch(&mut self, t: usize, key: &str, by_size: bool, out: &mut FlowOut) {
        let Some(b) = self.gates[t].batch.remove(key) else {
            return;
        };
        let n = b.members.len();
        self.unheld(t, Stage::Batch, n);
        let waited = n - usize::from(by_size);
        self.metrics.flow.incr_n(
            self.cell(t),
            Stage::Batch as usize,
            Decision::Wait as usize,
            waited,
        );
        if by_size {
            self.count(t, Stage::Batch, Decision::Pass);
        }
        let mut members = Vec::with_capacity(n);
        for (mut job, dropped) in b.members {
            match self.payloads.restore(&mut job, dropped) {
                Ok(()) => members.push(job),
                Err(e) => self.lost(job.lsn, &e, out),
            }
        }
        if !members.is_empty() {
            out.resumed.push(super::batch::carrier(members));
        }
    }

    // ----- debounce ---------------------------------------------------------------------------

    pub(super) fn debounce(
        &mut self,
        t: usize,
        g: &DebounceGate,
        mut p: Pending,
        now: u64,
        out: &mut FlowOut,
    ) {
        let key = p.keys.by_stage[Stage::Debounce as usize].clone();
        let deadline = deadline(&mut p, Stage::Debounce, nanos(g.period), now);
        if let Some(d) = self.gates[t].debounce.get_mut(&key) {
            if p.order() < d.latest.order() {
                // Older than the event it would supersede: it is the superseded one.
                self.skip(t, Stage::Debounce, p, SkipReason::Debounced, out);
                return;
            }
            // The newcomer takes the superseded event's place, whatever the bound (one timer
            // per key, re-armed when it fires early).
            let mut p = p;
            self.held(t, Stage::Debounce, &mut p, out);
            let Some(d) = self.gates[t].debounce.get_mut(&key) else {
                return;
            };
            let old = std::mem::replace(&mut d.latest, p);
            let sooner = deadline < d.deadline;
            d.deadline = deadline;
            if sooner {
                // A reload's kept deadline can be sooner than the key's timer.
                self.timers
                    .push(Reverse((deadline, t, Stage::Debounce, key.clone())));
            }
            self.unheld(t, Stage::Debounce, 1);
            self.skip(t, Stage::Debounce, old, SkipReason::Debounced, out);
            return;
        }
        if self.held_in(t, Stage::Debounce) >= self.config.flow.max_held {
            self.debounce_overflow(t, now, out);
        }
        self.held(t, Stage::Debounce, &mut p, out);
        self.timers
            .push(Reverse((deadline, t, Stage::Debounce, key.clone())));
        self.gates[t].debounce.insert(
            key,
            DebounceKey {
                latest: p,
                deadline,
            },
        );
    }

    /// Past `max_held` keys: the held key whose quiet period ends soonest goes on early.
    fn debounce_overflow(&mut self, t: usize, now: u64, out: &mut FlowOut) {
        let soonest = self.gates[t]
            .debounce
            .iter()
            .min_by_key(|(_, d)| d.deadline)
            .map(|(k, _)| k.clone());
        if let Some(d) = soonest.and_then(|k| self.gates[t].debounce.remove(&k)) {
            self.metrics
                .flow
                .overflowed(self.cell(t), Stage::Debounce as usize);
            self.unheld(t, Stage::Debounce, 1);
            self.count(t, Stage::Debounce, Decision::Wait);
            self.run(t, d.latest, Stage::RateLimit, now, out);
        }
    }

    pub(super) fn fire_debounce(&mut self, t: usize, key: String, now: u64, out: &mut FlowOut) {
        let Some(d) = self.gates[t].debounce.get(&key) else {
            return;
        };
        if d.deadline > now {
            // A newer event moved the quiet time: one timer per key, re-armed.
            self.timers
                .push(Reverse((d.deadline, t, Stage::Debounce, key)));
            return;
        }
        if let Some(d) = self.gates[t].debounce.remove(&key) {
            self.unheld(t, Stage::Debounce, 1);
            self.count(t, Stage::Debounce, Decision::Wait);
            self.run(t, d.latest, Stage::RateLimit, now, out);
        }
    }
}
