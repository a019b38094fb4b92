//! The sliding-window log shared by `rate_limit` and `throttle` (Harn reference §5.2 items 3
//! and 4): the times of the events let through, oldest first; a hit leaves the window when
//! `now - hit >= period`. At most `max` hits are ever kept (a full window admits nothing), so a
//! key costs at most `max × 8` bytes.
#![forbid(unsafe_code)]

use std::collections::VecDeque;

#[derive(Debug, Default)]
pub struct Window {
    hits: VecDeque<u64>,
}

impl Window {
    /// Drops the hits that left the window at `now`.
    pub fn trim(&mut self, now: u64, period: u64) {
        while self
            .hits
            .front()
            .is_some_and(|&h| now.saturating_sub(h) >= period)
        {
            self.hits.pop_front();
        }
    }

    /// Records a hit at `now` if the window has room; says whether it did.
    pub fn try_hit(&mut self, now: u64, period: u64, max: usize) -> bool {
        self.trim(now, period);
        if self.hits.len() >= max {
            return false;
        }
        self.hits.push_back(now);
        true
    }

    /// When the window next has room (the oldest hit leaves): `oldest + period`.
    pub fn room_at(&self, period: u64) -> u64 {
        self.hits.front().map_or(0, |&h| h.saturating_add(period))
    }

    /// The hits, oldest first.
    pub fn hits(&self) -> impl Iterator<Item = u64> + '_ {
        self.hits.iter().copied()
    }

    /// Puts back a hit saved before a restart (`hit <= now`): kept in time order, dropped if it
    /// already left the window, and only the newest `max` are kept.
    pub fn restore(&mut self, hit: u64, now: u64, period: u64, max: usize) {
        if now.saturating_sub(hit) >= period {
            return;
        }
        let at = self.hits.partition_point(|&h| h <= hit);
        self.hits.insert(at, hit);
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
        assert!(w.try_hit(0, p, 2));
        assert!(w.try_hit(10, p, 2));
        assert!(!w.try_hit(99, p, 2));
        assert_eq!(w.room_at(p), 100);
        assert!(w.try_hit(100, p, 2), "the hit at 0 left at 0 + period");
        assert!(!w.try_hit(109, p, 2));
        assert!(w.try_hit(110, p, 2));
        assert_eq!(w.len(), 2);
        w.trim(1000, p);
        assert!(w.is_empty());
    }

    #[test]
    fn restored_hits_are_ordered_trimmed_and_capped() {
        let mut w = Window::default();
        let p = 100;
        w.restore(50, 120, p, 2);
        w.restore(10, 120, p, 2); // left the window at 110
        w.restore(30, 120, p, 2);
        assert_eq!(w.hits().collect::<Vec<_>>(), vec![30, 50]);
        w.restore(40, 120, p, 2);
        assert_eq!(
            w.hits().collect::<Vec<_>>(),
            vec![40, 50],
            "the newest max kept"
        );
        assert!(!w.try_hit(120, p, 2));
        assert_eq!(w.room_at(p), 140);
    }
}
