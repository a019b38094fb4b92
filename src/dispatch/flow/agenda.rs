//! When the gates look at a key again: the timers (a batch's timeout, a debounce key's quiet
//! time, a throttle key's room) and the keys waiting for the order horizon.
//!
//! **Engine time.** The engine works on the injected clock shifted by [`SHIFT`] (a year and a
//! day), so a window hit restored from before this process started is still a positive time;
//! timers are kept in engine time and handed to the loop on its clock
//! ([`Agenda::next_deadline`]).
//!
//! **The order horizon** (`dispatch::horizon`): `throttle` and `concurrency` let an event go at
//! once only when the horizon has passed its order time (no older event can still reach the
//! gate from another core). A key whose first waiter is not below it is noted with that
//! waiter's order time ([`Agenda::ordered`]) and handed back once the horizon passes it
//! ([`Agenda::passed`]); meanwhile the loop looks again every [`HORIZON_POLL`].
//!
//! **Bounds.** At most one horizon entry per event held (one is added when an event is held
//! for it), at most one timer per held key, plus for `batch` one stale timer per batch flushed
//! by size before its timeout (the gate checks the key's deadline when it fires). A reload
//! keeps the entries of the gates it keeps, under the triggers' new indices, and drops the
//! others ([`Agenda::rekey`]): the events of a changed gate are offered again and set their
//! own.
#![forbid(unsafe_code)]

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use super::pending::Stage;

/// How often the gates look at the order horizon again while an event waits for it (1 ms).
pub const HORIZON_POLL: u64 = 1_000_000;
/// Added to the clock's nanoseconds inside the engine (longer than any period, 365 days).
pub const SHIFT: u64 = 366 * 86_400 * 1_000_000_000;

/// A key of a gate: (trigger index, stage, key).
pub(super) type GateKey = (usize, Stage, String);

/// The timers and horizon waits of one engine (module docs).
#[derive(Debug)]
pub(super) struct Agenda {
    /// (engine time, trigger, stage, key), soonest first.
    timers: BinaryHeap<Reverse<(u64, usize, Stage, String)>>,
    /// The order horizon: `u64::MAX` (the default) is none, every event may pass.
    horizon: u64,
    /// Keys whose first waiter waits for the horizon: (its order time, trigger, stage, key).
    waits: BTreeSet<(u64, usize, Stage, String)>,
    /// The clock (nanos, unshifted) at the last tick.
    last_tick: u64,
}

impl Default for Agenda {
    fn default() -> Agenda {
        Agenda {
            timers: BinaryHeap::new(),
            horizon: u64::MAX,
            waits: BTreeSet::new(),
            last_tick: 0,
        }
    }
}

impl Agenda {
    /// Trigger `t`'s `key` at `stage` is looked at again at engine time `at`.
    pub(super) fn arm(&mut self, at: u64, t: usize, stage: Stage, key: String) {
        self.timers.push(Reverse((at, t, stage, key)));
    }

    /// The next timer due at engine time `now`, taken off.
    pub(super) fn due(&mut self, now: u64) -> Option<GateKey> {
        if !self
            .timers
            .peek()
            .is_some_and(|Reverse((at, ..))| *at <= now)
        {
            return None;
        }
        let Reverse((_, t, stage, key)) = self.timers.pop()?;
        Some((t, stage, key))
    }

    /// The loop's turn at clock time `clock`.
    pub(super) fn tick(&mut self, clock: u64) {
        self.last_tick = clock;
    }

    /// The order horizon as of this turn (`dispatch::horizon`).
    pub(super) fn note_horizon(&mut self, horizon: u64) {
        self.horizon = horizon;
    }

    /// Whether order time `at` is below the horizon.
    pub(super) fn below(&self, at: u64) -> bool {
        at < self.horizon
    }

    /// Whether the event `id` first in line at `stage` of trigger `t`'s key `key` is below the
    /// order horizon; if not, the key is looked at again once the horizon passes it.
    pub(super) fn ordered(&mut self, t: usize, stage: Stage, key: &str, id: &str) -> bool {
        let at = order_time(id);
        if self.below(at) {
            return true;
        }
        self.wait_until(at, t, stage, key);
        false
    }

    /// Trigger `t`'s `key` at `stage` is looked at again once the horizon passes the event `id`.
    pub(super) fn wait_for_horizon(&mut self, t: usize, stage: Stage, key: &str, id: &str) {
        self.wait_until(order_time(id), t, stage, key);
    }

    /// Trigger `t`'s `key` at `stage` is looked at again once the horizon passes order time `at`.
    pub(super) fn wait_until(&mut self, at: u64, t: usize, stage: Stage, key: &str) {
        self.waits.insert((at, t, stage, key.to_owned()));
    }

    /// The next key the horizon has passed, taken off (oldest order time first).
    pub(super) fn passed(&mut self) -> Option<GateKey> {
        let first = self.waits.first()?;
        if first.0 >= self.horizon {
            return None;
        }
        let (_, t, stage, key) = self.waits.pop_first()?;
        Some((t, stage, key))
    }

    /// Keys waiting for the order horizon.
    pub(super) fn horizon_waiting(&self) -> usize {
        self.waits.len()
    }

    /// The earliest time the gates need a turn, on the clock: the soonest timer, or a
    /// [`HORIZON_POLL`] after the last tick while a key waits for the horizon.
    pub(super) fn next_deadline(&self) -> Option<u64> {
        let t = (self.timers.peek()).map(|Reverse((t, ..))| t.saturating_sub(SHIFT));
        if self.waits.is_empty() {
            return t;
        }
        let h = self.last_tick.saturating_add(HORIZON_POLL);
        Some(t.map_or(h, |t| t.min(h)))
    }

    /// A reload: the entries of old trigger `o`'s gate `stage` stay, under trigger
    /// `kept(o, stage)`, when that gate is kept; the others go (the horizon and the last tick
    /// stay).
    pub(super) fn rekey(&mut self, kept: impl Fn(usize, Stage) -> Option<usize>) {
        for Reverse((at, o, stage, key)) in std::mem::take(&mut self.timers).into_vec() {
            if let Some(t) = kept(o, stage) {
                self.timers.push(Reverse((at, t, stage, key)));
            }
        }
        for (at, o, stage, key) in std::mem::take(&mut self.waits) {
            if let Some(t) = kept(o, stage) {
                self.waits.insert((at, t, stage, key));
            }
        }
    }
}

/// The order time of event `id` (0 for an id that is not a ULID: below any horizon).
fn order_time(id: &str) -> u64 {
    crate::dispatch::horizon::order_time(id).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two ULIDs a millisecond apart and their order times.
    fn ids() -> (String, String, u64, u64) {
        let a = "01JAAAAAAAAAAAAAAAAAAAAAAA".to_string();
        let b = "01JAAAAAABAAAAAAAAAAAAAAAA".to_string();
        let (ta, tb) = (order_time(&a), order_time(&b));
        assert!(0 < ta && ta < tb);
        (a, b, ta, tb)
    }

    #[test]
    fn timers_come_due_soonest_first_and_on_the_clock() {
        let mut a = Agenda::default();
        assert_eq!(a.next_deadline(), None);
        a.arm(SHIFT + 20, 0, Stage::Batch, "b".into());
        a.arm(SHIFT + 10, 1, Stage::Debounce, "d".into());
        assert_eq!(a.next_deadline(), Some(10));
        assert_eq!(a.due(SHIFT + 9), None);
        assert_eq!(a.due(SHIFT + 20), Some((1, Stage::Debounce, "d".into())));
        assert_eq!(a.due(SHIFT + 20), Some((0, Stage::Batch, "b".into())));
        assert_eq!(a.due(u64::MAX), None);
    }

    /// Without a horizon everything is ordered; with one, a key whose first waiter is not below
    /// it is handed back once the horizon passes it, oldest first, and polled meanwhile.
    #[test]
    fn keys_wait_for_the_horizon_then_come_back_in_order() {
        let (ea, eb, ta, tb) = ids();
        let mut a = Agenda::default();
        assert!(a.ordered(0, Stage::Throttle, "k", &eb));
        a.note_horizon(ta);
        a.tick(5);
        assert!(!a.ordered(0, Stage::Throttle, "k", &eb));
        assert!(!a.ordered(0, Stage::Concurrency, "j", &ea));
        assert_eq!(a.horizon_waiting(), 2);
        assert_eq!(a.next_deadline(), Some(5 + HORIZON_POLL));
        assert_eq!(a.passed(), None);
        a.note_horizon(tb + 1);
        assert_eq!(a.passed(), Some((0, Stage::Concurrency, "j".into())));
        assert_eq!(a.passed(), Some((0, Stage::Throttle, "k".into())));
        assert_eq!(a.passed(), None);
        assert_eq!(a.next_deadline(), None);
    }

    #[test]
    fn a_reload_keeps_the_entries_of_kept_gates_under_their_new_index() {
        let (ea, _, ta, _) = ids();
        let mut a = Agenda::default();
        a.note_horizon(ta);
        a.arm(SHIFT + 1, 0, Stage::Throttle, "kept".into());
        a.arm(SHIFT + 2, 1, Stage::Batch, "gone".into());
        a.wait_for_horizon(0, Stage::Concurrency, "kept", &ea);
        a.wait_for_horizon(1, Stage::Throttle, "gone", &ea);
        a.rekey(|o, _| (o == 0).then_some(3));
        assert_eq!(a.horizon_waiting(), 1);
        assert_eq!(a.due(u64::MAX), Some((3, Stage::Throttle, "kept".into())));
        assert_eq!(a.due(u64::MAX), None);
        a.note_horizon(u64::MAX);
        assert_eq!(a.passed(), Some((3, Stage::Concurrency, "kept".into())));
    }
}
