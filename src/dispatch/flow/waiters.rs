//! The waiters of `throttle` and `concurrency`, each held in full or by reference: a stalled
//! key holds only itself.
//!
//! A key's waiters are kept in their place in line ([`Waiters`]: acceptance order, the
//! concurrency rank first), whatever their form. The first `[flow] max_held_per_key` of a key,
//! within `[flow] max_held` per trigger and gate, are held in full ([`Waiter::Full`]: the event
//! with its keys, its body within `max_held_bytes`, `super::payload`). Past either bound a
//! waiter is held by reference only ([`Waiter::Ref`], a [`Thin`]): its event id, event key, log,
//! destination and retry schedule, [`THIN_BYTES`] bytes plus its id; its record stays in its
//! log, which keeps it (the event is pending, `super::payload`). When its turn comes it is read
//! back from the log ([`Thin::read`]: forward from the last read-back of that log) and goes on as if
//! it had been held in full; one that cannot be read back stays pending (`FlowOut::lost`).
//!
//! So the gates never make the pumps stop at their bound: every event of the trigger reaches
//! its gates, in whatever order the logs deliver it, and leaves in acceptance order. A key
//! that never gets room (its calls never finish) holds at most `max_held_per_key` events in
//! full; the others of its trigger go on, and so does every other trigger on the core. What
//! bounds the events held by reference is the trigger's share of the durable backlog: past it
//! its senders are refused (`503 queue_full`), that trigger only.
//!
//! An event without a log (`Job::log_dir` `None`: unit tests' jobs) is always held in full.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::payload::Payloads;
use crate::dispatch::job::Job;
use crate::wal::{Lsn, WalError};

/// The inline size of a `Thin` (a waiter by reference) as the gates keep it (its id's bytes are on the heap
/// besides).
pub const THIN_BYTES: usize = std::mem::size_of::<Thin<Option<u8>>>();

/// What a gate holds in full: the event's job, with what the gate knows about it.
pub(super) trait Held {
    fn job(&self) -> &Job;
    /// It waits only for the order horizon (its gate had room for it).
    fn horizon_only(&self) -> bool {
        false
    }
}

impl<P: Held, S> Held for Waiter<P, S> {
    fn job(&self) -> &Job {
        match self {
            Waiter::Full(p) => p.job(),
            Waiter::Ref(_) => unreachable!("a reference has no job; ask `lsn`/`id`"),
        }
    }
    fn horizon_only(&self) -> bool {
        match self {
            Waiter::Full(p) => p.horizon_only(),
            Waiter::Ref(_) => false,
        }
    }
}

/// A waiter held by reference only: what it takes to read it back and deliver it, and the
/// gate's tag `S` (a reload's `retaken` stage).
#[derive(Debug)]
pub(super) struct Thin<S> {
    /// Its event key (log and LSN).
    lsn: Lsn,
    /// Its event id (acceptance order; checked at read-back).
    id: Box<str>,
    /// Its log's directory.
    dir: Arc<Path>,
    dest: usize,
    attempt: u32,
    due_at_ms: u64,
    tag: S,
}

impl<S> Thin<S> {
    /// `job` by reference, from the log in `dir` (its `log_dir`).
    pub(super) fn of(job: Job, dir: Arc<Path>, tag: S) -> Thin<S> {
        Thin {
            lsn: job.lsn,
            id: job.event.event_id.into_boxed_str(),
            dir,
            dest: job.dest,
            attempt: job.attempt,
            due_at_ms: job.due_at_ms,
            tag,
        }
    }

    pub(super) fn set_tag(&mut self, tag: S) {
        self.tag = tag;
    }

    /// Its job again, the whole event read back from its log (`payloads`, which counts its
    /// body until it leaves the gates), with its tag; its key and the error when it cannot be
    /// read back.
    pub(super) fn read(self, payloads: &mut Payloads) -> Result<(Job, S), (Lsn, WalError)> {
        let event = (payloads.read(&self.dir, self.lsn, &self.id)).map_err(|e| (self.lsn, e))?;
        let job = Job::new(self.lsn, event, self.dest, self.attempt, self.due_at_ms);
        let job = job.from_log(self.dir);
        payloads.adopt(&job);
        Ok((job, self.tag))
    }
}

/// A `throttle` or `concurrency` waiter (module docs): `P` in full, or by reference.
#[derive(Debug)]
pub(super) enum Waiter<P, S> {
    Full(Box<P>),
    Ref(Thin<S>),
}

/// Why a waiter is held by reference (the index of `metrics::BOUNDS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bound {
    /// Its key held `max_held_per_key` in full.
    Key = 0,
    /// Its gate held `max_held` in full.
    Gate = 1,
}

/// Whether a waiter goes by reference, its key holding `key_full` in full and its gate
/// `gate_full`, under the bounds `per_key` and `per_gate` (a pure decision).
pub(super) fn bound(
    key_full: usize,
    gate_full: usize,
    per_key: usize,
    per_gate: usize,
) -> Option<Bound> {
    if key_full >= per_key {
        Some(Bound::Key)
    } else if gate_full >= per_gate {
        Some(Bound::Gate)
    } else {
        None
    }
}

impl<P: Held, S> Waiter<P, S> {
    pub(super) fn is_full(&self) -> bool {
        matches!(self, Waiter::Full(_))
    }

    pub(super) fn id(&self) -> &str {
        match self {
            Waiter::Full(p) => &p.job().event.event_id,
            Waiter::Ref(t) => &t.id,
        }
    }

    pub(super) fn lsn(&self) -> Lsn {
        match self {
            Waiter::Full(p) => p.job().lsn,
            Waiter::Ref(t) => t.lsn,
        }
    }

    /// Acceptance order: the event id, then the event key (`Pending::order`).
    pub(super) fn order(&self) -> (&str, Lsn) {
        (self.id(), self.lsn())
    }
}

/// One key's waiters in their place in line (`K`: acceptance order, for `concurrency` with
/// its priority rank first), and how many of them are held in full.
#[derive(Debug)]
pub(super) struct Waiters<K, P, S> {
    line: BTreeMap<K, Waiter<P, S>>,
    full: usize,
    /// Of them, those that wait only for the order horizon ([`Held::horizon_only`]).
    free: usize,
}

impl<K: Ord, P: Held, S> Default for Waiters<K, P, S> {
    fn default() -> Self {
        Waiters {
            line: BTreeMap::new(),
            full: 0,
            free: 0,
        }
    }
}

impl<K: Ord, P: Held, S> Waiters<K, P, S> {
    pub(super) fn is_empty(&self) -> bool {
        self.line.is_empty()
    }

    /// Waiters held in full.
    pub(super) fn full(&self) -> usize {
        self.full
    }

    pub(super) fn len(&self) -> usize {
        self.line.len()
    }

    /// Whether every waiter waits only for the order horizon (true when there is none).
    pub(super) fn all_free(&self) -> bool {
        self.free == self.line.len()
    }

    /// The first in line's place.
    pub(super) fn first_place(&self) -> Option<&K> {
        self.line.first_key_value().map(|(k, _)| k)
    }

    /// The first in line.
    pub(super) fn first(&self) -> Option<&Waiter<P, S>> {
        self.line.first_key_value().map(|(_, w)| w)
    }

    pub(super) fn insert(&mut self, place: K, w: Waiter<P, S>) {
        self.full += usize::from(w.is_full());
        self.free += usize::from(w.horizon_only());
        if let Some(old) = self.line.insert(place, w) {
            // One event has one place: never reached (an event is offered once at a time).
            self.full -= usize::from(old.is_full());
            self.free -= usize::from(old.horizon_only());
        }
    }

    pub(super) fn pop_first(&mut self) -> Option<Waiter<P, S>> {
        let (_, w) = self.line.pop_first()?;
        self.full -= usize::from(w.is_full());
        self.free -= usize::from(w.horizon_only());
        Some(w)
    }

    /// Applies `hold` to every waiter that waits only for the order horizon, after which it
    /// waits for room too (`hold` must clear [`Held::horizon_only`]).
    pub(super) fn hold_free(&mut self, mut hold: impl FnMut(&mut P)) {
        if self.free == 0 {
            return;
        }
        for w in self.line.values_mut() {
            if let Waiter::Full(p) = w {
                if p.horizon_only() {
                    hold(p);
                    debug_assert!(!p.horizon_only());
                }
            }
        }
        self.free = 0;
    }

    /// Every waiter, in line; leaves none.
    pub(super) fn take_all(&mut self) -> impl Iterator<Item = Waiter<P, S>> {
        self.full = 0;
        self.free = 0;
        std::mem::take(&mut self.line).into_values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_reference_past_the_key_bound_then_past_the_gate_bound() {
        assert_eq!(bound(0, 0, 1, 1), None);
        assert_eq!(bound(2, 0, 3, 10), None);
        assert_eq!(bound(3, 0, 3, 10), Some(Bound::Key), "the key first");
        assert_eq!(bound(3, 10, 3, 10), Some(Bound::Key));
        assert_eq!(bound(1, 10, 3, 10), Some(Bound::Gate));
        const { assert!(THIN_BYTES <= 72) };
    }
}
