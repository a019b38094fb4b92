//! Deadlines keyed by a small id (a connection's slot): a binary min-heap with lazy deletion,
//! the outbound pool's timers (`net::outbound`: attempt deadlines, idle expiry).
//!
//! Why a heap and not a timer wheel: the deadlines are nanoseconds of the injected clock with
//! no common granularity (each destination has its own attempt timeout; idle expiry has
//! another), the timers live are few (at most one per open outbound connection), and the pool
//! needs the exact earliest one for the loop's poll timeout. A heap gives that exactly, with
//! `O(log n)` arm and pop and no resolution or horizon to choose; a wheel would round the
//! deadlines to its slots or scan its slots for the earliest.
//!
//! - **Lazy deletion.** Re-arming or disarming an id leaves its old entry in the heap. Every
//!   arm takes a new epoch from the structure's counter and records it as the id's current
//!   one; an entry whose epoch is not its id's current one is stale and is skipped. An id
//!   closed and reused by a new connection never matches an entry of the old one (a new arm,
//!   a new epoch; a `u64` counter does not wrap).
//! - **The top is live.** Whatever makes an entry stale (a re-arm, a disarm, a pop) also pops
//!   the stale entries off the top, so [`Deadlines::peek`] is exact and takes `&self`.
//! - **Bound.** At rest the heap holds at most 2 × [`Deadlines::live`] + [`COMPACT_SLACK`]
//!   entries: past that it is rebuilt from its live entries (`O(n)`, paid for by the
//!   ≥ live + [`COMPACT_SLACK`] re-arms or disarms that made the stale ones). The epochs by id
//!   are one `u64` per id up to the highest id armed (the pool's slot table is as long).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Stale entries tolerated beyond the live ones before the heap is rebuilt (module docs).
pub const COMPACT_SLACK: usize = 64;

/// Deadlines by id (module docs).
#[derive(Debug, Default)]
pub struct Deadlines {
    /// `(due, epoch, id)`, earliest first (ties by arming order).
    heap: BinaryHeap<Reverse<(u64, u64, usize)>>,
    /// The epoch of each id's armed deadline; 0: none armed.
    armed: Vec<u64>,
    /// Ids with a deadline armed.
    live: usize,
    /// The last epoch given out (the first is 1).
    epoch: u64,
}

impl Deadlines {
    /// Sets `id`'s deadline to `due`, replacing the one it had.
    pub fn arm(&mut self, id: usize, due: u64) {
        if self.armed.len() <= id {
            self.armed.resize(id + 1, 0);
        }
        if self.armed[id] == 0 {
            self.live += 1;
        }
        self.epoch += 1;
        self.armed[id] = self.epoch;
        self.heap.push(Reverse((due, self.epoch, id)));
        self.settle();
    }

    /// Removes `id`'s deadline, if it has one.
    pub fn disarm(&mut self, id: usize) {
        if let Some(e) = self.armed.get_mut(id).filter(|e| **e != 0) {
            *e = 0;
            self.live -= 1;
            self.settle();
        }
    }

    /// The earliest deadline armed.
    pub fn peek(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((due, _, _))| *due)
    }

    /// The id of a deadline due at `now` (at or before it), earliest first, now disarmed.
    pub fn pop_due(&mut self, now: u64) -> Option<usize> {
        let &Reverse((due, _, id)) = self.heap.peek()?;
        if due > now {
            return None;
        }
        // The top is live (module docs): this is `id`'s current deadline.
        self.heap.pop();
        self.armed[id] = 0;
        self.live -= 1;
        self.settle();
        Some(id)
    }

    /// Ids with a deadline armed.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Entries in the heap, live and stale: at most 2 × [`Self::live`] + [`COMPACT_SLACK`].
    pub fn entries(&self) -> usize {
        self.heap.len()
    }

    /// Pops stale entries off the top, and rebuilds the heap when stale entries pass the bound.
    fn settle(&mut self) {
        let armed = &self.armed;
        let current = |&Reverse((_, epoch, id)): &Reverse<(u64, u64, usize)>| armed[id] == epoch;
        while self.heap.peek().is_some_and(|top| !current(top)) {
            self.heap.pop();
        }
        if self.heap.len() > 2 * self.live + COMPACT_SLACK {
            self.heap.retain(current);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(d: &mut Deadlines, now: u64) -> Vec<usize> {
        std::iter::from_fn(|| d.pop_due(now)).collect()
    }

    #[test]
    fn stale_entries_are_skipped() {
        let mut d = Deadlines::default();
        d.arm(0, 10);
        d.arm(1, 20);
        d.arm(0, 30); // re-armed: its entry at 10 is stale
        assert_eq!(d.peek(), Some(20), "the stale top was popped");
        assert_eq!(due(&mut d, 25), vec![1]);
        assert_eq!(d.peek(), Some(30));
        d.arm(2, 40);
        d.disarm(0);
        assert_eq!(d.peek(), Some(40), "a disarmed top is popped");
        assert_eq!(due(&mut d, 100), vec![2]);
        assert_eq!((d.peek(), d.live(), d.entries()), (None, 0, 0));
        d.disarm(7); // never armed: nothing
        assert_eq!(d.live(), 0);
    }

    #[test]
    fn a_reused_id_does_not_fire_its_old_deadline() {
        let mut d = Deadlines::default();
        d.arm(5, 100);
        d.arm(3, 10);
        d.disarm(3); // the connection in slot 3 closed...
        d.arm(3, 50); // ...and a new one took the slot
        assert_eq!(due(&mut d, 20), Vec::<usize>::new(), "the old 10 is stale");
        assert_eq!(d.peek(), Some(50));
        assert_eq!(due(&mut d, 60), vec![3]);
        assert_eq!(due(&mut d, 60), Vec::<usize>::new(), "popped once");
        assert_eq!(d.live(), 1);
    }

    #[test]
    fn equal_deadlines_pop_in_arming_order() {
        let mut d = Deadlines::default();
        for id in [4, 1, 3] {
            d.arm(id, 7);
        }
        assert_eq!(due(&mut d, 7), vec![4, 1, 3]);
    }

    #[test]
    fn stale_entries_are_compacted_past_the_bound() {
        let mut d = Deadlines::default();
        // Slot 0's deadline stays earliest, so stale entries behind it are never at the top:
        // only the compaction removes them.
        d.arm(0, 0);
        let mut most = 0;
        for round in 0..1_000u64 {
            for id in 1..10 {
                d.arm(id, 1_000 + round);
                most = most.max(d.entries());
                assert!(
                    d.entries() <= 2 * d.live() + COMPACT_SLACK,
                    "{}",
                    d.entries()
                );
            }
        }
        assert_eq!(d.live(), 10);
        assert!(most > 2 * 10, "stale entries did build up ({most})");
        // What is left fires in order, each id once, at its last deadline.
        assert_eq!(due(&mut d, 0), vec![0]);
        assert_eq!(due(&mut d, 1_998), Vec::<usize>::new());
        assert_eq!(due(&mut d, 1_999), (1..10).collect::<Vec<_>>());
        assert_eq!((d.live(), d.entries()), (0, 0));
    }

    /// Against a plain map, over a pseudo-random run of arms, disarms and pops.
    #[test]
    fn agrees_with_a_plain_map() {
        let mut d = Deadlines::default();
        let mut model: Vec<Option<u64>> = vec![None; 32];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut now = 0;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = (x % 32) as usize;
            match (x >> 8) % 4 {
                0 | 1 => {
                    let at = now + (x >> 16) % 100;
                    d.arm(id, at);
                    model[id] = Some(at);
                }
                2 => {
                    d.disarm(id);
                    model[id] = None;
                }
                _ => {
                    now += (x >> 16) % 20;
                    let mut fired = due(&mut d, now);
                    let mut want: Vec<usize> = (0..32)
                        .filter(|&i| model[i].is_some_and(|at| at <= now))
                        .collect();
                    for &i in &want {
                        model[i] = None;
                    }
                    fired.sort_unstable();
                    want.sort_unstable();
                    assert_eq!(fired, want);
                }
            }
            assert_eq!(d.peek(), model.iter().flatten().min().copied());
            assert_eq!(d.live(), model.iter().flatten().count());
            assert!(d.entries() <= 2 * d.live() + COMPACT_SLACK);
        }
    }
}
