//! `ordering = { key, on_exhausted }`: FIFO per key, as one setting.
//!
//! **What it is.** An `ordering` gate is the `concurrency` stage with `max = 1` and no
//! `priority` ([`spec::ConcurrencyGate::ordering`]), so it has everything that stage has: one
//! call in progress per key, from leaving the gate to its terminal outcome (its retries
//! included, so later events of the key wait behind a failing one, and the retries keep their
//! order); waiters in acceptance order across cores, through parking and restarts
//! (`dispatch::horizon`, `handover`); waiters past `[flow] max_held_per_key` held by reference;
//! a reload that keeps the gate keeps its lines. Its decisions are counted under
//! `gate="concurrency"`. What `ordering` adds:
//!
//! - **A replay takes its original's place.** A replayed event (`replay_of`, a new event id)
//!   waits in its key's line at the place of the event it replays (the DLQ entry id is that
//!   event's id), not at the back: it goes before the key's events accepted after the
//!   original.
//! - **`on_exhausted = "hold"`.** An event of the key that goes to the DLQ (retries exhausted,
//!   a permanent answer, an open circuit) stops its key (`Stop`): the key's later events wait
//!   (the other keys go on) while the dead letter is in the DLQ. A replay of it (`POST
//!   /admin/dlq/{id}/replay`, or `sluice dlq replay` with the server stopped) goes first, and
//!   the key moves on behind it (a replay that is dead-lettered again stops the key again, on
//!   its own id). A discard (`POST /admin/dlq/{id}/discard`, or `sluice dlq discard ID` beside
//!   the running server) lets the key
//!   move on: once the DLQ shows the entry gone, the key waits for the order horizon to pass
//!   that moment (so a replay appended before the removal is in line first, in its place),
//!   then goes on with its next event. At start-up the stopped keys are rebuilt from the DLQ:
//!   every entry of a trigger with `on_exhausted = "hold"` stops its key.
//! - **Metrics and the dashboard** (`FlowEngine::publish_ordering`, every second): per
//!   trigger, the keys with events waiting, the keys stopped, and the oldest wait, with the
//!   name of that key and of the first stopped keys.
//!
//! **Bounds.** Stopped keys ≤ the DLQ's entries (`max_dlq_entries`); each is one
//! `ConcurrencyKey` plus one entry of `FlowEngine::stops` (the entry id and the key). The
//! DLQ's removal log is read at most every [`STOP_POLL`] while a key is stopped, and the DLQ
//! directory (for discards made beside the server) at most every [`REFRESH_EVERY`]; neither
//! waits for the DLQ's lock (`try_lock`: a busy DLQ is looked at again at the next poll).
//! Metrics: one pass over the ordering triggers' keys per [`PUBLISH_EVERY`].

use super::*;
use crate::dispatch::dlq::store::removals::Removed;
use crate::dispatch::dlq::DlqStore;
pub use metrics::OrderingView;
use spec::OnExhausted;
use stop::{DlqWatch, Stop};
pub use stop::{NAMES_SHOWN, PUBLISH_EVERY, REFRESH_EVERY, STOP_POLL};

pub(super) mod stop;

impl FlowEngine {
    /// Watches `store` for the keys of `ordering` gates with `on_exhausted = "hold"`, and stops
    /// the keys whose dead letters are in it now (start-up: every entry of such a trigger).
    pub fn with_dlq(mut self, store: Arc<DlqStore>) -> FlowEngine {
        let next = store.removed_since(u64::MAX).next;
        self.dlq = Some(DlqWatch {
            store,
            next,
            poll_at: 0,
            refresh_at: 0,
        });
        let all: Vec<usize> = (0..self.config.triggers.len()).collect();
        self.rebuild_stops(&all);
        self
    }

    /// This engine is core `core`'s: it keeps (and publishes) the `ordering` state of only the
    /// triggers whose destination that core owns (`dispatch::placement`).
    pub fn on_core(mut self, core: usize) -> FlowEngine {
        self.core = Some(core);
        self
    }

    /// Are trigger `t`'s gates this engine's? (Without [`FlowEngine::on_core`]: every trigger.)
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
    pub(super) fn holding(&self, t: usize) -> Option<&ConcurrencyGate> {
        let g = self.config.triggers.get(t)?.flow.concurrency.as_ref()?;
        (g.holds() && self.owns(t)).then_some(g)
    }

    /// Every DLQ entry of the triggers `of` whose `ordering` holds stops its key (oldest
    /// first: a key with several waits for its latest).
    pub(super) fn rebuild_stops(&mut self, of: &[usize]) {
        let Some(w) = &self.dlq else { return };
        let of: Vec<usize> = (of.iter().copied())
            .filter(|&t| self.holding(t).is_some())
            .collect();
        if of.is_empty() {
            return;
        }
        let store = Arc::clone(&w.store);
        let listing = match store.list() {
            Ok(l) => l,
            Err(e) => {
                eprintln!("sluice: flow: ordering: cannot list the DLQ to stop held keys: {e}");
                return;
            }
        };
        for s in listing.entries {
            let Some(&t) = self.by_id.get(&s.trigger_id) else {
                continue;
            };
            if !of.contains(&t) {
                continue;
            }
            match store.get(&s.id) {
                Ok(entry) => {
                    let keys = resolve(&self.config.triggers[t].flow, &entry.event);
                    let key = keys.by_stage[Stage::Concurrency as usize].clone();
                    self.stop(t, &key, s.id);
                }
                Err(e) => eprintln!(
                    "sluice: flow: ordering: DLQ entry {} of trigger {:?} cannot be read, its \
                     key is not held: {e}",
                    s.id, s.trigger_id
                ),
            }
        }
    }

    /// Stops trigger `t`'s key `key` on DLQ entry `entry` (an earlier stop of the key, if
    /// any, gives way: the key waits for its latest dead letter).
    fn stop(&mut self, t: usize, key: &str, entry: String) {
        let c = self.gates[t].concurrency.entry(key.to_owned()).or_default();
        if let Some(old) = c.stop.take() {
            self.stops.remove(&old.entry);
        }
        c.stop = Some(Stop {
            entry: entry.clone(),
            gone: None,
        });
        self.stops.insert(entry, (t, key.to_owned()));
    }

    /// The event at `lsn` went to the DLQ as entry `entry`: its holds are given back, and a
    /// key of an `ordering` gate with `on_exhausted = "hold"` stops.
    pub fn dead_lettered(&mut self, lsn: Lsn, entry: &str, out: &mut FlowOut) {
        if let Some((t, key)) = self.concurrency_key(lsn) {
            let key = key.to_owned();
            if self.holding(t).is_some() {
                self.stop(t, &key, entry.to_owned());
            }
        }
        self.release(lsn, out);
    }

    /// May trigger `t`'s key `k`, stopped or not, let its first waiter (place id `first`) go?
    /// A replay of the stopped entry may, and clears the stop; so does an entry gone from the
    /// DLQ once the horizon passed that moment (else the key is looked at again then).
    pub(super) fn unstopped(&mut self, t: usize, k: &str, first: Option<&str>) -> bool {
        let Some(c) = self.gates[t].concurrency.get(k) else {
            return true;
        };
        let Some(s) = &c.stop else { return true };
        let go = match s.gone {
            _ if first == Some(s.entry.as_str()) => true,
            Some(at) if at < self.horizon => true,
            Some(at) => {
                self.horizon_wait
                    .insert((at, t, Stage::Concurrency, k.to_owned()));
                false
            }
            None => false,
        };
        if go {
            if let Some(c) = self.gates[t].concurrency.get_mut(k) {
                if let Some(s) = c.stop.take() {
                    self.stops.remove(&s.entry);
                }
            }
        }
        go
    }

    /// When the stopped keys or the ordering metrics need a turn (clock nanos).
    pub(super) fn ordering_due(&self) -> Option<u64> {
        let poll = self
            .dlq
            .as_ref()
            .filter(|_| !self.stops.is_empty())
            .map(|w| w.poll_at);
        let publish = self.has_ordering.then_some(self.ordering_at);
        match (poll, publish) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Rebuilds [`FlowEngine::stops`] from the keys' stops (after a reload moved them).
    pub(super) fn index_stops(&mut self) {
        self.stops.clear();
        for (t, g) in self.gates.iter().enumerate() {
            for (k, c) in &g.concurrency {
                if let Some(s) = &c.stop {
                    self.stops.insert(s.entry.clone(), (t, k.clone()));
                }
            }
        }
    }

    /// Keys stopped here.
    pub fn stopped_keys(&self) -> usize {
        self.stops.len()
    }

    /// Reads what left the DLQ (at most every [`STOP_POLL`]) for the stopped keys, and the
    /// DLQ directory for discards beside the server (at most every [`REFRESH_EVERY`]); a key
    /// whose entry left waits for the horizon to pass that moment (`unstopped`). `clock`:
    /// unshifted nanos.
    pub(super) fn watch_stops(&mut self, clock: u64, out: &mut FlowOut) {
        let Some(w) = &mut self.dlq else { return };
        if self.stops.is_empty() || clock < w.poll_at {
            return;
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
        let store = Arc::clone(&w.store);
        let mut gone: Vec<String> = ids
            .into_iter()
            .filter(|id| self.stops.contains_key(id))
            .collect();
        if !complete {
            // Fell behind the kept removals: look each stopped entry up.
            self.metrics.flow.removal_log_overrun();
            let absent = (self.stops.keys()).filter(|e| store.contains(e) == Some(false));
            gone.extend(absent.cloned());
        }
        if gone.is_empty() {
            return;
        }
        let at = crate::dispatch::horizon::order_time_of_us(crate::sync::clock::unix_micros());
        for entry in gone {
            let Some((t, k)) = self.stops.get(&entry).cloned() else {
                continue;
            };
            if let Some(s) = (self.gates[t].concurrency.get_mut(&k)).and_then(|c| c.stop.as_mut()) {
                s.gone.get_or_insert(at);
            }
            self.admit_waiters(t, &k, out);
        }
    }

    /// Gathers the ordering metrics (at most every [`PUBLISH_EVERY`]): per `ordering`
    /// trigger, keys with waiters, keys stopped, the oldest waiter's age and key, and the
    /// first [`NAMES_SHOWN`] stopped keys by name.
    pub(super) fn publish_ordering(&mut self, clock: u64) {
        if !self.has_ordering || clock < self.ordering_at {
            return;
        }
        self.ordering_at = clock + PUBLISH_EVERY;
        let now_order =
            crate::dispatch::horizon::order_time_of_us(crate::sync::clock::unix_micros());
        for (t, trigger) in self.config.triggers.iter().enumerate() {
            let Some(g) = trigger.flow.ordering() else {
                continue;
            };
            if !self.owns(t) {
                continue;
            }
            let mut v = OrderingView {
                hold: g.ordering == Some(OnExhausted::Hold),
                ..OrderingView::default()
            };
            let mut oldest: Option<(u64, &str)> = None;
            for (k, c) in &self.gates[t].concurrency {
                if let Some(first) = c.waiters.first() {
                    v.keys_waiting += 1;
                    let at = crate::dispatch::horizon::order_time(first.id()).unwrap_or(now_order);
                    if !oldest.is_some_and(|(o, _)| at >= o) {
                        oldest = Some((at, k));
                    }
                }
                if let Some(s) = &c.stop {
                    v.keys_stopped += 1;
                    if v.stopped.len() < NAMES_SHOWN {
                        v.stopped.push((k.clone(), s.entry.clone()));
                    }
                }
            }
            if let Some((at, k)) = oldest {
                // Order time: ms × 1024 + µs.
                v.oldest_wait_ms = now_order.saturating_sub(at) / 1024;
                v.oldest_key = Some(k.to_owned());
            }
            v.stopped.sort();
            self.metrics.flow.set_ordering(self.cell(t), Some(v));
        }
    }
}

#[cfg(test)]
mod tests;
