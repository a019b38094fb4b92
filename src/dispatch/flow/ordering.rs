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
//! **Where it lives.** The stopped keys, the watch on the DLQ and the publishing schedule are
//! `stop::Stops`'s (with their invariants); the lines they stop are the `concurrency` gate's
//! (`super::progress`). What is here is the engine's side: stopping a key when its event is
//! dead-lettered, admitting a key's waiters when its entry leaves the DLQ, and gathering the
//! figures of the lines.
//!
//! **Bounds.** Stopped keys ≤ the DLQ's entries (`max_dlq_entries`); each is one
//! `ConcurrencyKey` plus one entry in each of the two maps of `Stops` (by key, and by entry
//! id). The DLQ's removal log is read at most every [`STOP_POLL`] while a key is stopped, and
//! the DLQ directory (for discards made beside the server) at most every [`REFRESH_EVERY`];
//! neither waits for the DLQ's lock (`try_lock`: a busy DLQ is looked at again at the next
//! poll). Metrics: one pass over the ordering triggers' keys per [`PUBLISH_EVERY`].

use super::*;
use crate::dispatch::dlq::DlqStore;
pub use metrics::OrderingView;
pub use stop::{NAMES_SHOWN, PUBLISH_EVERY, REFRESH_EVERY, STOP_POLL};

pub(super) mod stop;

impl FlowEngine {
    /// Watches `store` for the keys of `ordering` gates with `on_exhausted = "hold"`, and stops
    /// the keys whose dead letters are in it now (start-up: every entry of such a trigger).
    pub fn with_dlq(mut self, store: Arc<DlqStore>) -> FlowEngine {
        self.stops.watch_dlq(store);
        let all: Vec<usize> = (0..self.config.triggers.len()).collect();
        self.rebuild_stops(&all);
        self
    }

    /// This engine is core `core`'s: it keeps (and publishes) the `ordering` state of only the
    /// triggers whose destination that core owns (`dispatch::placement`).
    pub fn on_core(mut self, core: usize) -> FlowEngine {
        self.stops.on_core(core);
        self
    }

    /// Every DLQ entry of the triggers `of` whose `ordering` holds stops its key (oldest
    /// first: a key with several waits for its latest).
    pub(super) fn rebuild_stops(&mut self, of: &[usize]) {
        for (t, key, entry) in self.stops.in_dlq(of, &self.by_id) {
            self.stop(t, &key, entry);
        }
    }

    /// Stops trigger `t`'s key `key` on DLQ entry `entry`.
    fn stop(&mut self, t: usize, key: &str, entry: String) {
        // A stopped key keeps its line, idle or not: its waiters are admitted through it, and
        // that is where the stop is looked at again (`admit_waiters`).
        self.progress.line_entry(t, key);
        self.stops.stop(t, key, entry);
    }

    /// The event at `lsn` went to the DLQ as entry `entry`: its holds are given back, and a
    /// key of an `ordering` gate with `on_exhausted = "hold"` stops.
    pub fn dead_lettered(&mut self, lsn: Lsn, entry: &str, out: &mut FlowOut) {
        if let Some((t, key)) = self.progress.concurrency_key(lsn) {
            let key = key.to_owned();
            if self.stops.holding(t).is_some() {
                self.stop(t, &key, entry.to_owned());
            }
        }
        self.release(lsn, out);
    }

    /// Keys stopped here.
    pub fn stopped_keys(&self) -> usize {
        self.stops.len()
    }

    /// A key whose entry left the DLQ (`Stops::watch`) waits for the horizon to pass
    /// that moment, then admits its waiters (`Stops::unstopped`). `clock`: unshifted nanos.
    pub(super) fn watch_stops(&mut self, clock: u64, out: &mut FlowOut) {
        let gone = self.stops.watch(clock, self.books.flow());
        if gone.is_empty() {
            return;
        }
        let at = crate::dispatch::horizon::order_time_of_us(crate::sync::clock::unix_micros());
        for entry in gone {
            let Some((t, k)) = self.stops.gone(&entry, at) else {
                continue;
            };
            self.admit_waiters(t, &k, out);
        }
    }

    /// Gathers the ordering metrics (at most every [`PUBLISH_EVERY`]): per `ordering`
    /// trigger, keys with waiters, keys stopped, the oldest waiter's age and key, and the
    /// first [`NAMES_SHOWN`] stopped keys by name.
    pub(super) fn publish_ordering(&mut self, clock: u64) {
        let due = self.stops.publish_due(clock);
        if due.is_empty() {
            return;
        }
        let now_order =
            crate::dispatch::horizon::order_time_of_us(crate::sync::clock::unix_micros());
        for t in due {
            let Some(mut v) = self.stops.view(t) else {
                continue;
            };
            let mut oldest: Option<(u64, &str)> = None;
            for (k, c) in self.progress.lines(t) {
                if let Some(first) = c.waiters.first() {
                    v.keys_waiting += 1;
                    let at = crate::dispatch::horizon::order_time(first.id()).unwrap_or(now_order);
                    if !oldest.is_some_and(|(o, _)| at >= o) {
                        oldest = Some((at, k));
                    }
                }
            }
            if let Some((at, k)) = oldest {
                // Order time: ms × 1024 + µs.
                v.oldest_wait_ms = now_order.saturating_sub(at) / 1024;
                v.oldest_key = Some(k.to_owned());
            }
            self.books.flow().set_ordering(self.books.cell(t), Some(v));
        }
    }
}

#[cfg(test)]
mod tests;
