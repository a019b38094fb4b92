//! The state of `ordering` (`flow::ordering`): the keys stopped by a dead letter ([`Stops`])
//! and the engine's watch on the DLQ (a leaf: the engine's files import it).
//!
//! **Invariants.** A stopped key waits for one DLQ entry, its latest dead letter (an earlier
//! stop of the key gives way), and each entry stops at most one key: the index by entry is the
//! inverse of the keys' stops. Only the `ordering` gates with `on_exhausted = "hold"` of the
//! triggers this core owns stop keys ([`Stops::holding`]). A stop is cleared only by
//! [`Stops::unstopped`]: by a replay of its entry going first, or once the entry has left the
//! DLQ (seen by [`Stops::watch`]) and the order horizon has passed that moment.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::Arc;

use crate::dispatch::dlq::store::removals::Removed;
use crate::dispatch::dlq::DlqStore;
use crate::dispatch::flow::agenda::Agenda;
use crate::dispatch::flow::metrics::{FlowMetrics, OrderingView};
use crate::dispatch::flow::pending::{resolve, Stage};
use crate::dispatch::flow::rekey::plan::Plan;
use crate::dispatch::flow::spec::{ConcurrencyGate, OnExhausted};
use crate::dispatch::spec::DispatchSpec;

/// How often the DLQ's removal log is read while a key is stopped (100 ms).
pub const STOP_POLL: u64 = 100_000_000;
/// How often the DLQ directory is read for discards made beside the server (1 s).
pub const REFRESH_EVERY: u64 = 1_000_000_000;
/// How often the ordering metrics are gathered (1 s).
pub const PUBLISH_EVERY: u64 = 1_000_000_000;
/// Names of stopped keys published per trigger.
pub const NAMES_SHOWN: usize = 8;

/// A key of an `ordering` gate with `on_exhausted = "hold"` stopped by a dead letter.
#[derive(Debug, Clone)]
struct Stop {
    /// The DLQ entry id (the dead-lettered event's id): a replay of it goes first.
    entry: String,
    /// The entry left the DLQ without a replay of it in line: the order time (of the moment it
    /// was seen gone) the horizon must pass before the key moves on.
    gone: Option<u64>,
}

/// The engine's view of the DLQ, for stopped keys.
#[derive(Debug)]
struct DlqWatch {
    store: Arc<DlqStore>,
    /// The next removal number to read ([`DlqStore::removed_since`]).
    next: u64,
    poll_at: u64,
    refresh_at: u64,
}

/// One engine's stopped keys, its watch on the DLQ, and when it publishes the ordering
/// metrics (module docs).
#[derive(Debug)]
pub struct Stops {
    config: Arc<DispatchSpec>,
    /// `None`: unit tests without a DLQ (no key is stopped).
    dlq: Option<DlqWatch>,
    /// Indexed like the triggers: stopped key → its stop.
    keys: Vec<HashMap<String, Stop>>,
    /// DLQ entry id → (trigger, key) it stops.
    entries: HashMap<String, (usize, String)>,
    /// Some trigger has an `ordering` gate (its metrics are gathered).
    has_ordering: bool,
    /// The core this engine runs on (`None`: every trigger is its own; unit tests).
    core: Option<usize>,
    /// When the ordering metrics are gathered next (clock nanos).
    publish_at: u64,
}

impl Stops {
    /// Nothing stopped, no DLQ watched, every trigger of `config` owned.
    pub fn new(config: &Arc<DispatchSpec>) -> Stops {
        Stops {
            keys: (config.triggers.iter()).map(|_| HashMap::new()).collect(),
            has_ordering: (config.triggers.iter()).any(|t| t.flow.ordering().is_some()),
            config: Arc::clone(config),
            dlq: None,
            entries: HashMap::new(),
            core: None,
            publish_at: 0,
        }
    }

    /// Watches `store`, from its removals to come on.
    pub fn watch_dlq(&mut self, store: Arc<DlqStore>) {
        let next = store.removed_since(u64::MAX).next;
        self.dlq = Some(DlqWatch {
            store,
            next,
            poll_at: 0,
            refresh_at: 0,
        });
    }

    /// Keeps the state of only the triggers whose destination core `core` owns.
    pub fn on_core(&mut self, core: usize) {
        self.core = Some(core);
    }

    /// Are trigger `t`'s gates this engine's? (Without a core: every trigger.)
    fn owns(&self, t: usize) -> bool {
        let Some(core) = self.core else { return true };
        let Some(d) = self.config.triggers.get(t).and_then(|r| r.dest) else {
            return false;
        };
        let Some(dest) = self.config.destinations.get(d) else {
            return false;
        };
        crate::dispatch::placement::owner_core(&dest.handler.uri, self.config.workers) == core
    }

    /// Trigger `t`'s `ordering` gate with `on_exhausted = "hold"`, if it has one and is this
    /// engine's.
    pub fn holding(&self, t: usize) -> Option<&ConcurrencyGate> {
        let g = self.config.triggers.get(t)?.flow.concurrency.as_ref()?;
        (g.holds() && self.owns(t)).then_some(g)
    }

    /// Keys stopped.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Is trigger `t`'s key `key` stopped?
    pub fn is_stopped(&self, t: usize, key: &str) -> bool {
        self.keys[t].contains_key(key)
    }

    /// Stops trigger `t`'s key `key` on DLQ entry `entry` (an earlier stop of the key, if
    /// any, gives way: the key waits for its latest dead letter).
    pub fn stop(&mut self, t: usize, key: &str, entry: String) {
        let stop = Stop {
            entry: entry.clone(),
            gone: None,
        };
        if let Some(old) = self.keys[t].insert(key.to_owned(), stop) {
            self.entries.remove(&old.entry);
        }
        self.entries.insert(entry, (t, key.to_owned()));
    }

    /// The DLQ entries of the triggers `of` whose `ordering` holds, with their trigger and key,
    /// oldest first (`by_id`: trigger id → index). Read errors are reported and skipped.
    pub fn in_dlq(
        &self,
        of: &[usize],
        by_id: &HashMap<String, usize>,
    ) -> Vec<(usize, String, String)> {
        let Some(w) = &self.dlq else {
            return Vec::new();
        };
        let of: Vec<usize> = (of.iter().copied())
            .filter(|&t| self.holding(t).is_some())
            .collect();
        if of.is_empty() {
            return Vec::new();
        }
        let listing = match w.store.list() {
            Ok(l) => l,
            Err(e) => {
                eprintln!("sluice: flow: ordering: cannot list the DLQ to stop held keys: {e}");
                return Vec::new();
            }
        };
        let mut found = Vec::new();
        for s in listing.entries {
            let Some(&t) = by_id.get(&s.trigger_id).filter(|t| of.contains(t)) else {
                continue;
            };
            match w.store.get(&s.id) {
                Ok(entry) => {
                    let keys = resolve(&self.config.triggers[t].flow, &entry.event);
                    let key = keys.by_stage[Stage::Concurrency as usize].clone();
                    found.push((t, key, s.id));
                }
                Err(e) => eprintln!(
                    "sluice: flow: ordering: DLQ entry {} of trigger {:?} cannot be read, its \
                     key is not held: {e}",
                    s.id, s.trigger_id
                ),
            }
        }
        found
    }

    /// May trigger `t`'s key `k`, stopped or not, let its first waiter (place id `first`) go?
    /// A replay of the stopped entry may, and clears the stop; so does an entry gone from the
    /// DLQ once the horizon passed that moment (else the key is looked at again then, through
    /// `agenda`).
    pub fn unstopped(
        &mut self,
        t: usize,
        k: &str,
        first: Option<&str>,
        agenda: &mut Agenda,
    ) -> bool {
        let Some(s) = self.keys[t].get(k) else {
            return true;
        };
        let go = match s.gone {
            _ if first == Some(s.entry.as_str()) => true,
            Some(at) if agenda.below(at) => true,
            Some(at) => {
                agenda.wait_until(at, t, Stage::Concurrency, k);
                false
            }
            None => false,
        };
        if go {
            if let Some(s) = self.keys[t].remove(k) {
                self.entries.remove(&s.entry);
            }
        }
        go
    }

    /// When the stopped keys or the ordering metrics need a turn (clock nanos).
    pub fn due(&self) -> Option<u64> {
        let poll = (self.dlq.as_ref())
            .filter(|_| !self.entries.is_empty())
            .map(|w| w.poll_at);
        let publish = self.has_ordering.then_some(self.publish_at);
        match (poll, publish) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Reads what left the DLQ (at most every [`STOP_POLL`]) for the stopped keys, and the
    /// DLQ directory for discards beside the server (at most every [`REFRESH_EVERY`]). The
    /// entries seen gone, for [`Stops::gone`]. `clock`: unshifted nanos.
    pub fn watch(&mut self, clock: u64, flow: &FlowMetrics) -> Vec<String> {
        let Some(w) = &mut self.dlq else {
            return Vec::new();
        };
        if self.entries.is_empty() || clock < w.poll_at {
            return Vec::new();
        }
        w.poll_at = clock + STOP_POLL;
        if clock >= w.refresh_at && w.store.refresh_removals() {
            w.refresh_at = clock + REFRESH_EVERY;
        }
        let Removed {
            next,
            ids,
            complete,
        } = w.store.removed_since(w.next);
        w.next = next;
        let mut gone: Vec<String> = ids
            .into_iter()
            .filter(|id| self.entries.contains_key(id))
            .collect();
        if !complete {
            // Fell behind the kept removals: look each stopped entry up.
            flow.removal_log_overrun();
            let absent = (self.entries.keys()).filter(|e| w.store.contains(e) == Some(false));
            gone.extend(absent.cloned());
        }
        gone
    }

    /// DLQ entry `entry` was seen gone at order time `at`: the key it stops (if it still does)
    /// moves on once the horizon passes `at` ([`Stops::unstopped`]).
    pub fn gone(&mut self, entry: &str, at: u64) -> Option<(usize, String)> {
        let (t, k) = self.entries.get(entry)?.clone();
        if let Some(s) = self.keys[t].get_mut(&k) {
            s.gone.get_or_insert(at);
        }
        Some((t, k))
    }

    /// The `ordering` triggers this engine owns, when their metrics are due at `clock` (at
    /// most every [`PUBLISH_EVERY`]; else none).
    pub fn publish_due(&mut self, clock: u64) -> Vec<usize> {
        if !self.has_ordering || clock < self.publish_at {
            return Vec::new();
        }
        self.publish_at = clock + PUBLISH_EVERY;
        let triggers = self.config.triggers.iter().enumerate();
        let ordering = triggers.filter(|(_, r)| r.flow.ordering().is_some());
        ordering.map(|(t, _)| t).filter(|&t| self.owns(t)).collect()
    }

    /// Trigger `t`'s figures as far as its stops go, if it has an `ordering` gate: whether it
    /// holds, the keys stopped, and the first [`NAMES_SHOWN`] of them by name, sorted.
    pub fn view(&self, t: usize) -> Option<OrderingView> {
        let g = self.config.triggers.get(t)?.flow.ordering()?;
        let mut v = OrderingView {
            hold: g.ordering == Some(OnExhausted::Hold),
            ..OrderingView::default()
        };
        for (k, s) in &self.keys[t] {
            v.keys_stopped += 1;
            if v.stopped.len() < NAMES_SHOWN {
                v.stopped.push((k.clone(), s.entry.clone()));
            }
        }
        v.stopped.sort();
        Some(v)
    }

    /// The stops for a reload's `config` by `plan`: those of the kept gates, under their
    /// trigger's new index (the DLQ watch, the core and the publishing schedule stay). The
    /// triggers that hold from now on (and did not before), whose keys with dead letters stop.
    pub fn rekey(&mut self, config: &Arc<DispatchSpec>, plan: &Plan) -> Vec<usize> {
        let was: Vec<&str> = (0..self.config.triggers.len())
            .filter(|&o| self.holding(o).is_some())
            .map(|o| self.config.triggers[o].id.as_str())
            .collect();
        let mut next = Stops::new(config);
        next.core = self.core;
        let newly = (0..config.triggers.len())
            .filter(|&t| next.holding(t).is_some())
            .filter(|&t| !was.contains(&config.triggers[t].id.as_str()))
            .collect();
        for (o, keys) in std::mem::take(&mut self.keys).into_iter().enumerate() {
            let Some(t) = plan.kept(o, Stage::Concurrency) else {
                continue;
            };
            for (k, s) in keys {
                next.entries.insert(s.entry.clone(), (t, k.clone()));
                next.keys[t].insert(k, s);
            }
        }
        next.dlq = self.dlq.take();
        next.publish_at = self.publish_at;
        *self = next;
        newly
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::flow::gated;
    use crate::dispatch::flow::tests::rig_config;

    const HOLD: &str = "ordering = { key = \"event.headers.x-key\", on_exhausted = \"hold\" }";

    /// A key waits for its latest dead letter; a replay of it clears the stop, and so does the
    /// entry's removal once the horizon has passed it.
    #[test]
    fn a_stop_clears_by_its_replay_or_by_its_removal_past_the_horizon() {
        let cfg = rig_config(HOLD);
        let mut s = Stops::new(&cfg);
        let mut agenda = Agenda::default();
        assert!(s.holding(0).is_some() && s.holding(1).is_none());
        s.stop(0, "k", "E1".into());
        s.stop(0, "k", "E2".into());
        assert_eq!(s.len(), 1, "the earlier stop gave way");
        assert!(!s.unstopped(0, "k", Some("E1"), &mut agenda));
        assert!(
            s.unstopped(0, "k", Some("E2"), &mut agenda),
            "its replay goes first"
        );
        assert!(!s.is_stopped(0, "k") && s.len() == 0);
        s.stop(0, "j", "E3".into());
        assert_eq!(s.gone("E3", 50), Some((0, "j".to_string())));
        agenda.note_horizon(50);
        assert!(
            !s.unstopped(0, "j", None, &mut agenda),
            "the horizon is not past it"
        );
        assert_eq!(agenda.horizon_waiting(), 1, "looked at again then");
        agenda.note_horizon(51);
        assert!(s.unstopped(0, "j", None, &mut agenda));
        assert_eq!(s.gone("E3", 60), None);
    }

    #[test]
    fn a_reload_keeps_the_stops_of_a_kept_gate_only() {
        let cfg = rig_config(HOLD);
        let mut s = Stops::new(&cfg);
        s.stop(0, "k", "E1".into());
        let same = rig_config(HOLD);
        let newly = s.rekey(&same, &Plan::new(&cfg, &same, &gated(&same)));
        assert!(newly.is_empty(), "it held before");
        assert!(s.is_stopped(0, "k") && s.len() == 1);
        let skip = rig_config("ordering = { key = \"event.headers.x-key\" }");
        s.rekey(&skip, &Plan::new(&same, &skip, &gated(&skip)));
        assert_eq!(s.len(), 0, "a changed gate drops its stops");
        let newly = s.rekey(&same, &Plan::new(&skip, &same, &gated(&same)));
        assert_eq!(newly, vec![0], "holds from now on");
        let v = s.view(0).expect("an ordering gate");
        assert!(v.hold && v.keys_stopped == 0);
        assert_eq!(s.view(1), None);
    }
}
