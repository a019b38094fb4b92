//! A read-only view of each backlog slot for the dashboard (`ops::dashboard`): what it holds,
//! of its share and borrowed from the pool, whether it has room for one more event and its
//! durable-queue refusals (its jobs in the dispatch window are dispatch's:
//! `dispatch::trigger_caps`). Every cell is read `Relaxed`, one by one
//! (as `/metrics` reads them): a view may be one event off between two cells, never blocks and
//! writes nothing.

use super::Backlog;
use crate::ingest::respond::Refusal;

/// The refusals a slot counts (the durable queue's), in rendering order.
pub const SLOT_REFUSALS: [Refusal; 4] = [
    Refusal::QueueFull,
    Refusal::WalFull,
    Refusal::WalBusy,
    Refusal::WalUnavailable,
];

/// What one slot (a start-up trigger, the default route, or the recovered events) holds now.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotView {
    /// The trigger id the slot was made for (the default route's id, `_recovered`).
    pub name: String,
    /// Held in all (own share + borrowed), events and bytes.
    pub events: u64,
    pub bytes: u64,
    /// The guaranteed share.
    pub share_events: u64,
    pub share_bytes: u64,
    /// Of what it holds, borrowed from the common pool.
    pub borrowed_events: u64,
    pub borrowed_bytes: u64,
    /// Its share is full and the pool has no room left, in events or in bytes: its next event
    /// is refused `queue_full` (or absorbed, for an absorbing trigger).
    pub at_limit: bool,
    /// Its events drawn on the absorb budget when at its limit (`when_backlog_full = "absorb"`
    /// at start).
    pub absorbs: bool,
    /// Refusals since start by [`SLOT_REFUSALS`] (same order).
    pub refused: [u64; SLOT_REFUSALS.len()],
}

impl Backlog {
    /// Every slot, in slot order: the start-up triggers, the default route, the recovered events.
    pub fn slot_views(&self) -> Vec<SlotView> {
        (0..self.names.len()).map(|s| self.slot_view(s)).collect()
    }

    /// The slot of trigger `id` when it has one of its own (a trigger configured at start);
    /// `None` for the default route's id and for a trigger a reload added (whose events are
    /// counted in the default route's slot).
    pub fn own_slot(&self, id: &str) -> Option<usize> {
        self.slot_of.get(id).copied()
    }

    /// The default route's slot (also where a trigger added by a reload is counted).
    pub fn default_slot(&self) -> usize {
        self.names.len() - 2
    }

    /// One slot's view (`s` < the number of slots).
    pub fn slot_view(&self, s: usize) -> SlotView {
        let (e, b) = (&self.share_events, &self.share_bytes);
        let full =
            |d: &crate::ingest::shares::ShareDim| d.share_fill(s) >= 1.0 && d.pool_fill() >= 1.0;
        let stats = &self.stats[s];
        let (events, bytes) = (e.used(s), b.used(s));
        SlotView {
            name: self.names[s].clone(),
            events,
            bytes,
            share_events: e.share(s),
            share_bytes: b.share(s),
            borrowed_events: events.saturating_sub(e.own(s)),
            borrowed_bytes: bytes.saturating_sub(b.own(s)),
            at_limit: full(e) || full(b),
            absorbs: self.absorbing[s],
            refused: SLOT_REFUSALS
                .map(|r| stats.refusals[r as usize].load(std::sync::atomic::Ordering::Relaxed)),
        }
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;
    use crate::ingest::backlog::TriggerShare;

    fn two_triggers() -> Backlog {
        let t = |id, events| TriggerShare {
            id,
            events: Some(events),
            bytes: None,
        };
        Backlog::new(100, 1 << 20, 0.9, 0.7)
            .with_triggers(&[t("a", 10), t("b", 40)], false, 0.5)
            .unwrap()
    }

    #[test]
    fn a_trigger_past_its_share_borrows_then_is_at_its_limit() {
        let b = two_triggers();
        assert_eq!(b.own_slot("a"), Some(0));
        assert_eq!(b.own_slot("added-by-a-reload"), None);
        let a = b.slot_view(0);
        assert_eq!((a.name.as_str(), a.share_events, a.events), ("a", 10, 0));
        for _ in 0..10 {
            b.reserve_for("a", 100).unwrap();
        }
        let a = b.slot_view(0);
        assert_eq!((a.events, a.borrowed_events, a.at_limit), (10, 0, false));
        // The pool: 100 − 10 − 40 = 50.
        for _ in 0..50 {
            b.reserve_for("a", 100).unwrap();
        }
        let a = b.slot_view(0);
        assert_eq!((a.events, a.borrowed_events, a.at_limit), (60, 50, true));
        // Its byte share (half the byte bound over "a" and "b") holds all its bytes.
        assert_eq!((a.bytes, a.borrowed_bytes), (6000, 0));
        assert!(b.reserve_for("a", 100).is_err());
        b.count_refusal("a", Refusal::QueueFull);
        assert_eq!(b.slot_view(0).refused, [1, 0, 0, 0]);
        // "b" has its whole share and no room to borrow: not at its limit until the share is full.
        let v = b.slot_view(1);
        assert_eq!((v.events, v.share_events, v.at_limit), (0, 40, false));
        // One back: the pool has room again.
        b.release_done(0, 1, 100);
        assert!(!b.slot_view(0).at_limit);
    }

    #[test]
    fn the_slot_order() {
        let b = two_triggers();
        let names: Vec<_> = b.slot_views().into_iter().map(|v| v.name).collect();
        assert_eq!(names, ["a", "b", "default", "_recovered"]);
        assert_eq!(b.default_slot(), 2);
    }
}
