//! The gates that hold an event while it is in progress, `singleton` and `concurrency`
//! (semantics in the parent module's docs): from passing the gate to the event's terminal
//! outcome, retries and concurrency waits included.
//!
//! [`InProgress`] is their state: per trigger, the singleton keys in progress and the
//! concurrency keys (each with its count in progress and its line of waiters, `ConcurrencyKey`),
//! and per event in progress what it holds (`Hold`), given back at its terminal outcome
//! ([`InProgress::release`]). The engine's side of the two gates — which events pass, wait or
//! are skipped, and the order in which waiters are admitted — is in `gates`.
//!
//! **Invariants.** A trigger's singleton keys are exactly those its events in progress hold;
//! a concurrency key's `active` counts the events in progress that hold it. A concurrency key
//! exists while it has events in progress or waiting, or is stopped by `ordering` (the engine
//! forgets it when idle, [`InProgress::forget`]). A reload keeps both: the state of an
//! unchanged gate moves as it is, and a changed gate counts the events in progress under their
//! old keys when the trigger still has that gate ([`InProgress::rekey`]), so `max` counts them
//! until they finish.
#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};

use super::pending::{Stage, Waiter, WaiterPlace, Waiters};
use super::rekey::plan::{has, Plan};
use crate::dispatch::id_map::NumMap;
use crate::dispatch::spec::DispatchSpec;
use crate::wal::Lsn;

mod gates;

/// A concurrency key's state.
#[derive(Debug, Default)]
pub(super) struct ConcurrencyKey {
    /// Events in progress that hold the key.
    pub(super) active: usize,
    /// In full or by reference ([`super::waiters`]).
    pub(super) waiters: Waiters<WaiterPlace>,
}

/// What an event in progress holds, released at its terminal outcome.
#[derive(Debug)]
struct Hold {
    trigger: usize,
    singleton: Option<String>,
    concurrency: Option<String>,
}

/// The state of the in-progress gates (module docs).
#[derive(Debug)]
pub(super) struct InProgress {
    holds: NumMap<Lsn, Hold>,
    /// Indexed like the triggers: the singleton keys in progress.
    singleton: Vec<HashSet<String>>,
    /// Indexed like the triggers.
    concurrency: Vec<HashMap<String, ConcurrencyKey>>,
}

impl InProgress {
    /// No event in progress, for `triggers` triggers.
    pub(super) fn new(triggers: usize) -> InProgress {
        InProgress {
            holds: NumMap::default(),
            singleton: (0..triggers).map(|_| HashSet::new()).collect(),
            concurrency: (0..triggers).map(|_| HashMap::new()).collect(),
        }
    }

    fn hold(&mut self, lsn: Lsn, t: usize) -> &mut Hold {
        self.holds.entry(lsn).or_insert(Hold {
            trigger: t,
            singleton: None,
            concurrency: None,
        })
    }

    /// The event at `lsn` takes trigger `t`'s singleton key `key`, unless an event in progress
    /// holds it (false).
    pub(super) fn enter_singleton(&mut self, t: usize, key: &str, lsn: Lsn) -> bool {
        if !self.singleton[t].insert(key.to_owned()) {
            return false;
        }
        self.hold(lsn, t).singleton = Some(key.to_owned());
        true
    }

    /// The event at `lsn` takes a place of trigger `t`'s concurrency key `key`.
    pub(super) fn enter_concurrency(&mut self, t: usize, key: &str, lsn: Lsn) {
        self.line_entry(t, key).active += 1;
        self.hold(lsn, t).concurrency = Some(key.to_owned());
    }

    /// The event at `lsn` reached its terminal outcome: its singleton key is free, its
    /// concurrency place given back. The concurrency key it held, whose waiters may go now.
    pub(super) fn release(&mut self, lsn: Lsn) -> Option<(usize, String)> {
        let h = self.holds.remove(&lsn)?;
        let t = h.trigger;
        if let Some(k) = h.singleton {
            self.singleton[t].remove(&k);
        }
        let k = h.concurrency?;
        if let Some(c) = self.concurrency[t].get_mut(&k) {
            c.active = c.active.saturating_sub(1);
        }
        Some((t, k))
    }

    /// The concurrency key event `lsn` holds, with its trigger's index.
    pub(super) fn concurrency_key(&self, lsn: Lsn) -> Option<(usize, &str)> {
        let h = self.holds.get(&lsn)?;
        Some((h.trigger, h.concurrency.as_deref()?))
    }

    /// Trigger `t`'s concurrency key `key`, if it exists.
    pub(super) fn line(&self, t: usize, key: &str) -> Option<&ConcurrencyKey> {
        self.concurrency[t].get(key)
    }

    /// Trigger `t`'s concurrency key `key`, if it exists, to change its line.
    pub(super) fn line_mut(&mut self, t: usize, key: &str) -> Option<&mut ConcurrencyKey> {
        self.concurrency[t].get_mut(key)
    }

    /// Trigger `t`'s concurrency key `key`, made if new.
    pub(super) fn line_entry(&mut self, t: usize, key: &str) -> &mut ConcurrencyKey {
        self.concurrency[t].entry(key.to_owned()).or_default()
    }

    /// Trigger `t`'s concurrency keys.
    pub(super) fn lines(&self, t: usize) -> impl Iterator<Item = (&String, &ConcurrencyKey)> {
        self.concurrency[t].iter()
    }

    /// Every trigger's concurrency keys.
    pub(super) fn all_keys(&self) -> Vec<(usize, String)> {
        let each = self.concurrency.iter().enumerate();
        each.flat_map(|(t, c)| c.keys().map(move |k| (t, k.clone())))
            .collect()
    }

    /// Forgets trigger `t`'s concurrency key `key` if it is idle (nothing in progress, no
    /// waiter) and not `stopped`; whether it did.
    pub(super) fn forget(&mut self, t: usize, key: &str, stopped: bool) -> bool {
        let idle = self.concurrency[t]
            .get(key)
            .is_some_and(|c| c.active == 0 && c.waiters.is_empty());
        if idle && !stopped {
            self.concurrency[t].remove(key);
        }
        idle && !stopped
    }

    /// Every waiter of trigger `t`'s concurrency keys, in line key by key (a reload's).
    pub(super) fn take_waiters(&mut self, t: usize) -> Vec<Waiter> {
        let lines = self.concurrency[t].values_mut();
        lines.flat_map(|c| c.waiters.take_all()).collect()
    }

    /// The state for a reload's `config` by `plan`: the kept gates' as it is; the events in
    /// progress under their trigger's new index, counted by a changed gate the trigger still
    /// has (module docs). The waiters of the changed gates were taken first.
    pub(super) fn rekey(&mut self, config: &DispatchSpec, plan: &Plan) {
        let mut next = InProgress::new(config.triggers.len());
        let singleton = std::mem::take(&mut self.singleton).into_iter();
        let concurrency = std::mem::take(&mut self.concurrency).into_iter();
        for (o, (s, c)) in singleton.zip(concurrency).enumerate() {
            if let Some(t) = plan.kept(o, Stage::Singleton) {
                next.singleton[t] = s;
            }
            if let Some(t) = plan.kept(o, Stage::Concurrency) {
                next.concurrency[t] = c;
            }
        }
        for (lsn, h) in std::mem::take(&mut self.holds) {
            let Some(t) = plan.to(h.trigger) else {
                continue;
            };
            let f = &config.triggers[t].flow;
            let mut hold = Hold {
                trigger: t,
                singleton: None,
                concurrency: None,
            };
            if let Some(k) = h.singleton.filter(|_| has(f, Stage::Singleton)) {
                if plan.kept(h.trigger, Stage::Singleton).is_none() {
                    next.singleton[t].insert(k.clone());
                }
                hold.singleton = Some(k);
            }
            if let Some(k) = h.concurrency.filter(|_| has(f, Stage::Concurrency)) {
                if plan.kept(h.trigger, Stage::Concurrency).is_none() {
                    next.line_entry(t, &k).active += 1;
                }
                hold.concurrency = Some(k);
            }
            if hold.singleton.is_some() || hold.concurrency.is_some() {
                next.holds.insert(lsn, hold);
            }
        }
        *self = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::flow::gated;
    use crate::dispatch::flow::tests::rig_config;

    #[test]
    fn a_singleton_key_is_held_until_its_event_is_released() {
        let mut p = InProgress::new(2);
        assert!(p.enter_singleton(0, "k", 1));
        assert!(!p.enter_singleton(0, "k", 2), "in progress");
        assert!(p.enter_singleton(1, "k", 3), "another trigger's");
        assert_eq!(p.release(1), None, "no concurrency key to admit for");
        assert!(p.enter_singleton(0, "k", 2));
        assert_eq!(p.release(9), None);
    }

    #[test]
    fn a_concurrency_key_counts_its_events_and_is_forgotten_when_idle() {
        let mut p = InProgress::new(1);
        p.enter_concurrency(0, "k", 1);
        p.enter_concurrency(0, "k", 2);
        assert_eq!(p.concurrency_key(2), Some((0, "k")));
        assert_eq!(p.line(0, "k").map(|c| c.active), Some(2));
        assert_eq!(p.release(1), Some((0, "k".to_string())));
        assert!(!p.forget(0, "k", false), "one in progress");
        p.release(2);
        assert!(!p.forget(0, "k", true), "stopped: kept");
        assert!(p.forget(0, "k", false));
        assert!(p.line(0, "k").is_none() && p.all_keys().is_empty());
    }

    /// A reload: an unchanged gate's state moves as it is; a changed one counts the events in
    /// progress under their old keys; a removed one forgets them.
    #[test]
    fn a_reload_carries_the_events_in_progress() {
        let old = rig_config("singleton = {}\nconcurrency = { max = 2 }");
        let mut p = InProgress::new(2);
        assert!(p.enter_singleton(0, "", 1));
        p.enter_concurrency(0, "", 1);
        let new = rig_config("singleton = {}\nconcurrency = { max = 3 }");
        p.rekey(&new, &Plan::new(&old, &new, &gated(&new)));
        assert!(!p.enter_singleton(0, "", 2), "kept: still in progress");
        assert_eq!(
            p.line(0, "").map(|c| c.active),
            Some(1),
            "counted by the new gate"
        );
        let none = rig_config("concurrency = { max = 3 }");
        p.rekey(&none, &Plan::new(&new, &none, &gated(&none)));
        assert!(p.enter_singleton(0, "", 2), "the gate is gone");
        assert_eq!(p.concurrency_key(1), Some((0, "")));
        assert_eq!(p.release(1), Some((0, String::new())));
    }
}
