//! The collecting gates, `batch` and `debounce` (semantics in the parent module's docs): they
//! hold events by key until a deadline (a batch's timeout from its first member, a debounce
//! key's quiet period from its latest event).
//!
//! [`Collect`] is their state: per trigger, the batches being filled and the debounced keys,
//! each with its deadline. The engine's side (what is held, counted, skipped, flushed) is in
//! `gates`.
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
//! **Timers.** One per batch (a batch flushed by size leaves a stale one, which finds no due
//! batch: [`Collect::batch_due`]) and one per debounce key, re-armed when it fires early (a
//! newer event moved the quiet time, [`Collect::fire_debounce`]), or armed again when a
//! reload's kept deadline is sooner than the key's.
//!
//! **Deadlines kept by a reload** ([`super::rekey`]): an event re-offered to the gate it was
//! held in carries its old deadline (`Hint`). It keeps it when the gate's period (`debounce`)
//! or timeout (`batch`) did not change; when it changed, it takes the sooner of the old
//! deadline and the reload time plus the new period ([`deadline`]).
#![forbid(unsafe_code)]

use std::collections::HashMap;

use super::pending::{nanos, Pending, Stage, Waiter};
use super::rekey::plan::Plan;
use super::spec::FlowSpec;
use crate::dispatch::job::Job;
use crate::wal::Lsn;

mod gates;

#[derive(Debug)]
struct DebounceKey {
    latest: Pending,
    deadline: u64,
}

#[derive(Debug)]
struct BatchKey {
    /// Each with whether its body was dropped ([`super::payload`]).
    members: Vec<(Job, bool)>,
    deadline: u64,
}

/// What a debounce key's timer found ([`Collect::fire_debounce`]).
#[derive(Debug)]
pub(super) enum Fired {
    /// The key's quiet time ended: its latest event goes on.
    Due(Box<Pending>),
    /// A newer event moved the quiet time to this deadline (the timer is armed again).
    Later(u64),
    /// The key is gone (went on early, or taken by a reload).
    Gone,
}

/// The state of the collecting gates (module docs).
#[derive(Debug)]
pub(super) struct Collect {
    /// Indexed like the triggers.
    batch: Vec<HashMap<String, BatchKey>>,
    /// Indexed like the triggers.
    debounce: Vec<HashMap<String, DebounceKey>>,
}

/// The deadline of `p` in a gate of `stage` with `period`, held from `now` on.
pub(super) fn deadline(p: &mut Pending, stage: Stage, period: u64, now: u64) -> u64 {
    let fresh = now.saturating_add(period);
    match p.hint.take() {
        Some((s, old, old_period)) if s == stage && old_period == period => old,
        Some((s, old, _)) if s == stage => old.min(fresh),
        _ => fresh,
    }
}

impl Collect {
    /// Nothing held, for `triggers` triggers.
    pub(super) fn new(triggers: usize) -> Collect {
        Collect {
            batch: (0..triggers).map(|_| HashMap::new()).collect(),
            debounce: (0..triggers).map(|_| HashMap::new()).collect(),
        }
    }

    /// Is a batch of trigger `t`'s `key` being filled?
    pub(super) fn has_batch(&self, t: usize, key: &str) -> bool {
        self.batch[t].contains_key(key)
    }

    /// `member` (with whether its body was dropped) joins the batch of trigger `t`'s `key`, in
    /// acceptance order, or opens one due at `deadline`. Whether it opened one (its timer to
    /// arm), and the batch's size now.
    pub(super) fn join(
        &mut self,
        t: usize,
        key: &str,
        member: (Job, bool),
        deadline: u64,
    ) -> (bool, usize) {
        fn order(m: &Job) -> (&str, Lsn) {
            (m.event.event_id.as_str(), m.lsn)
        }
        let Some(b) = self.batch[t].get_mut(key) else {
            let b = BatchKey {
                members: vec![member],
                deadline,
            };
            self.batch[t].insert(key.to_owned(), b);
            return (true, 1);
        };
        let at = (b.members).partition_point(|(m, _)| order(m) <= order(&member.0));
        b.members.insert(at, member);
        (false, b.members.len())
    }

    /// Trigger `t`'s batch whose timeout comes soonest.
    pub(super) fn soonest_batch(&self, t: usize) -> Option<String> {
        let soonest = self.batch[t].iter().min_by_key(|(_, b)| b.deadline);
        soonest.map(|(k, _)| k.clone())
    }

    /// Is the batch of trigger `t`'s `key` due at `now`? (A batch flushed by size leaves a stale
    /// timer; a newer batch of the key has its own, later deadline.)
    pub(super) fn batch_due(&self, t: usize, key: &str, now: u64) -> bool {
        self.batch[t].get(key).is_some_and(|b| b.deadline <= now)
    }

    /// Takes the members of trigger `t`'s batch of `key`, each with whether its body was dropped.
    pub(super) fn take_batch(&mut self, t: usize, key: &str) -> Option<Vec<(Job, bool)>> {
        Some(self.batch[t].remove(key)?.members)
    }

    /// Whether `p` supersedes the event trigger `t`'s debounce key `key` holds (`None`: the key
    /// holds none): an older event does not, it is the superseded one.
    pub(super) fn supersedes(&self, t: usize, key: &str, p: &Pending) -> Option<bool> {
        let d = self.debounce[t].get(key)?;
        Some(p.order() >= d.latest.order())
    }

    /// `p` takes the place of the event trigger `t`'s debounce key `key` holds (which must
    /// exist), due at `deadline`. The superseded event, and whether the deadline is sooner
    /// than the key's (its timer to arm again).
    pub(super) fn supersede(
        &mut self,
        t: usize,
        key: &str,
        p: Pending,
        deadline: u64,
    ) -> Option<(Pending, bool)> {
        let d = self.debounce[t].get_mut(key)?;
        let old = std::mem::replace(&mut d.latest, p);
        let sooner = deadline < d.deadline;
        d.deadline = deadline;
        Some((old, sooner))
    }

    /// Trigger `t`'s debounce key `key` holds `p`, due at `deadline`.
    pub(super) fn open(&mut self, t: usize, key: String, p: Pending, deadline: u64) {
        let d = DebounceKey {
            latest: p,
            deadline,
        };
        self.debounce[t].insert(key, d);
    }

    /// Takes the event of trigger `t`'s debounce key whose quiet period ends soonest.
    pub(super) fn take_soonest_debounce(&mut self, t: usize) -> Option<Pending> {
        let soonest = self.debounce[t].iter().min_by_key(|(_, d)| d.deadline);
        let key = soonest.map(|(k, _)| k.clone())?;
        Some(self.debounce[t].remove(&key)?.latest)
    }

    /// A timer of trigger `t`'s debounce key `key` fired at `now` (module docs).
    pub(super) fn fire_debounce(&mut self, t: usize, key: &str, now: u64) -> Fired {
        match self.debounce[t].get(key) {
            None => Fired::Gone,
            Some(d) if d.deadline > now => Fired::Later(d.deadline),
            Some(_) => match self.debounce[t].remove(key) {
                Some(d) => Fired::Due(Box::new(d.latest)),
                None => Fired::Gone,
            },
        }
    }

    /// Takes the events held by old trigger `o`'s collecting gates that a reload does not keep
    /// (`plan`; `old`: their gates), each with its deadline there (`Pending::hint`).
    pub(super) fn take_held(
        &mut self,
        o: usize,
        old: &FlowSpec,
        plan: &Plan,
    ) -> Vec<(Stage, Waiter)> {
        let mut got = Vec::new();
        if plan.kept(o, Stage::Batch).is_none() {
            let timeout = old.batch.as_ref().map_or(0, |b| nanos(b.timeout));
            for (_, b) in self.batch[o].drain() {
                for (job, dropped) in b.members {
                    let mut p = Pending::new(job, Box::default(), true, dropped);
                    p.hint = Some((Stage::Batch, b.deadline, timeout));
                    got.push((Stage::Batch, Waiter::Full(Box::new(p))));
                }
            }
        }
        if plan.kept(o, Stage::Debounce).is_none() {
            let period = old.debounce.as_ref().map_or(0, |d| nanos(d.period));
            for (_, d) in self.debounce[o].drain() {
                let mut p = d.latest;
                p.hint = Some((Stage::Debounce, d.deadline, period));
                got.push((Stage::Debounce, Waiter::Full(Box::new(p))));
            }
        }
        got
    }

    /// The state for a reload to `triggers` triggers by `plan`: the kept gates' as it is (the
    /// others' events were taken first, [`Collect::take_held`]).
    pub(super) fn rekey(&mut self, triggers: usize, plan: &Plan) {
        let mut next = Collect::new(triggers);
        let batch = std::mem::take(&mut self.batch).into_iter();
        let debounce = std::mem::take(&mut self.debounce).into_iter();
        for (o, (b, d)) in batch.zip(debounce).enumerate() {
            if let Some(t) = plan.kept(o, Stage::Batch) {
                next.batch[t] = b;
            }
            if let Some(t) = plan.kept(o, Stage::Debounce) {
                next.debounce[t] = d;
            }
        }
        *self = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::flow::pending::resolve;

    fn job(id: &str, lsn: u64) -> Job {
        crate::dispatch::job::test_job(id, lsn)
    }

    fn pending(id: &str, lsn: u64) -> Pending {
        let j = job(id, lsn);
        let keys = Box::new(resolve(&FlowSpec::default(), &j.event));
        Pending::new(j, keys, false, false)
    }

    #[test]
    fn a_batch_keeps_its_members_in_acceptance_order() {
        let mut c = Collect::new(1);
        assert_eq!(c.join(0, "k", (job("e2", 2), false), 10), (true, 1));
        assert_eq!(c.join(0, "k", (job("e1", 9), false), 99), (false, 2));
        assert_eq!(c.join(0, "j", (job("e3", 3), false), 5), (true, 1));
        assert_eq!(c.soonest_batch(0).as_deref(), Some("j"));
        assert!(
            c.batch_due(0, "k", 10) && !c.batch_due(0, "k", 9),
            "its first member's deadline"
        );
        let ids: Vec<_> = (c.take_batch(0, "k").unwrap().iter())
            .map(|(j, _)| j.event.event_id.clone())
            .collect();
        assert_eq!(ids, ["e1", "e2"]);
        assert!(!c.has_batch(0, "k") && c.has_batch(0, "j"));
    }

    #[test]
    fn a_debounce_key_keeps_its_latest_event_by_acceptance_order() {
        let mut c = Collect::new(1);
        assert_eq!(c.supersedes(0, "k", &pending("e2", 2)), None);
        c.open(0, "k".into(), pending("e2", 2), 10);
        assert_eq!(
            c.supersedes(0, "k", &pending("e1", 1)),
            Some(false),
            "older"
        );
        let (old, sooner) = c.supersede(0, "k", pending("e3", 3), 8).unwrap();
        assert_eq!((old.job.lsn, sooner), (2, true));
        assert!(matches!(c.fire_debounce(0, "k", 7), Fired::Later(8)));
        assert!(matches!(c.fire_debounce(0, "k", 8), Fired::Due(p) if p.job.lsn == 3));
        assert!(matches!(c.fire_debounce(0, "k", 8), Fired::Gone));
        c.open(0, "a".into(), pending("e4", 4), 30);
        c.open(0, "b".into(), pending("e5", 5), 20);
        assert_eq!(c.take_soonest_debounce(0).map(|p| p.job.lsn), Some(5));
    }

    /// A re-offered event keeps its deadline when the period is the same, else takes the
    /// sooner of it and a new period from now; a hint of another stage is ignored.
    #[test]
    fn a_reload_keeps_or_shortens_the_deadline() {
        let mut p = pending("e1", 1);
        assert_eq!(deadline(&mut p, Stage::Batch, 5, 100), 105);
        p.hint = Some((Stage::Batch, 50, 5));
        assert_eq!(deadline(&mut p, Stage::Batch, 5, 100), 50);
        p.hint = Some((Stage::Batch, 500, 5));
        assert_eq!(deadline(&mut p, Stage::Batch, 7, 100), 107);
        p.hint = Some((Stage::Debounce, 50, 5));
        assert_eq!(deadline(&mut p, Stage::Batch, 5, 100), 105);
        assert!(p.hint.is_none(), "used once");
    }
}
