//! The sliding-window log shared by `rate_limit` and `throttle` (Harn reference §5.2 items 3
//! and 4): the times of the events let through, oldest first, each with the [`tag`] of the
//! event that took it; a hit leaves the window when `now - hit >= period`. At most `max` hits
//! are ever kept (a full window admits nothing), so a key costs at most `max × 32` bytes.
//!
//! **The window records the event, not the call.** The tag lets an event that already holds a
//! unit of the window pass again without taking a second one ([`Window::holds`]): after a
//! crash, a call that was in flight is retried from the log, and its hit, restored from the
//! state file, still stands for it.
#![forbid(unsafe_code)]

use std::collections::VecDeque;

/// A window hit: when (engine nanos) and which event ([`tag`]; 0 = unknown, a hit saved by a
/// build that did not record tags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hit {
    at: u64,
    tag: u128,
}

#[derive(Debug, Default)]
pub struct Window {
    hits: VecDeque<Hit>,
}

/// An event's identity in a window: the 128-bit FNV-1a hash of its id. Stable across builds
/// and restarts (it is saved, `super::persist`); never 0 for a real id (0 means unknown).
pub fn tag(event_id: &str) -> u128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    let h = event_id
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u128::from(b)).wrapping_mul(PRIME));
    h.max(1)
}

impl Window {
    /// Drops the hits that left the window at `now`.
    pub fn trim(&mut self, now: u64, period: u64) {
        while self
            .hits
            .front()
            .is_some_and(|h| now.saturating_sub(h.at) >= period)
        {
            self.hits.pop_front();
        }
    }

    /// Records a hit at `now` for event `tag` if the window has room; says whether it did.
    pub fn try_hit(&mut self, now: u64, period: u64, max: usize, tag: u128) -> bool {
        self.trim(now, period);
        if self.hits.len() >= max {
            return false;
        }
        self.hits.push_back(Hit { at: now, tag });
        true
    }

    /// Whether `n` more hits fit in the window at `now` (none is recorded).
    pub fn room_for(&mut self, now: u64, period: u64, max: usize, n: usize) -> bool {
        self.trim(now, period);
        self.hits.len() + n <= max
    }

    /// Does event `tag` hold a hit among those at or before `until` (the restored ones)? Scans
    /// at most those hits (≤ `max`), oldest first.
    pub fn holds(&self, tag: u128, until: u64) -> bool {
        tag != 0
            && self
                .hits
                .iter()
                .take_while(|h| h.at <= until)
                .any(|h| h.tag == tag)
    }

    /// When the window next has room (the oldest hit leaves): `oldest + period`.
    pub fn room_at(&self, period: u64) -> u64 {
        self.hits.front().map_or(0, |h| h.at.saturating_add(period))
    }

    /// The hits `(at, tag)`, oldest first.
    pub fn hits(&self) -> impl Iterator<Item = (u64, u128)> + '_ {
        self.hits.iter().map(|h| (h.at, h.tag))
    }

    /// Puts back a hit saved before a restart or kept by a reload (`hit <= now`): kept in time
    /// order, dropped if it already left the window, and only the newest `max` are kept.
    pub fn restore(&mut self, hit: u64, tag: u128, now: u64, period: u64, max: usize) {
        if now.saturating_sub(hit) >= period {
            return;
        }
        let at = self.hits.partition_point(|h| h.at <= hit);
        self.hits.insert(at, Hit { at: hit, tag });
        while self.hits.len() > max {
            self.hits.pop_front();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.hits.is_empty()
    }

    pub fn len(&self) -> usize {
        self.hits.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slides() {
        let mut w = Window::default();
        let p = 100;
        assert!(w.try_hit(0, p, 2, 1));
        assert!(w.try_hit(10, p, 2, 2));
        assert!(!w.try_hit(99, p, 2, 3));
        assert_eq!(w.room_at(p), 100);
        assert!(w.try_hit(100, p, 2, 3), "the hit at 0 left at 0 + period");
        assert!(!w.try_hit(109, p, 2, 4));
        assert!(w.try_hit(110, p, 2, 4));
        assert_eq!(w.len(), 2);
        w.trim(1000, p);
        assert!(w.is_empty());
    }

    #[test]
    fn restored_hits_are_ordered_trimmed_and_capped() {
        let mut w = Window::default();
        let p = 100;
        w.restore(50, 5, 120, p, 2);
        w.restore(10, 1, 120, p, 2); // left the window at 110
        w.restore(30, 3, 120, p, 2);
        assert_eq!(w.hits().collect::<Vec<_>>(), vec![(30, 3), (50, 5)]);
        w.restore(40, 4, 120, p, 2);
        assert_eq!(
            w.hits().collect::<Vec<_>>(),
            vec![(40, 4), (50, 5)],
            "the newest max kept"
        );
        assert!(!w.try_hit(120, p, 2, 6));
        assert_eq!(w.room_at(p), 140);
    }

    #[test]
    fn a_hit_is_found_by_its_event_among_the_restored_ones_only() {
        let mut w = Window::default();
        let (a, b) = (tag("01A"), tag("01B"));
        assert!(a != b && a != 0 && tag("") != 0);
        w.restore(10, a, 20, 100, 3);
        assert!(w.try_hit(30, 100, 3, b));
        assert!(w.holds(a, 20), "restored hit of a");
        assert!(!w.holds(b, 20), "b's hit is after the restore point");
        assert!(w.holds(b, 30));
        assert!(!w.holds(0, 30), "an unknown tag matches nothing");
    }
}
