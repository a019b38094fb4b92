//! A bounded count of slots taken, shared by threads: [`Slots::try_take`] never passes the
//! bound, [`Slots::give_back`] returns one. Nobody waits on it: a taker that finds none refuses
//! its work (the operator readers' `503 readers_busy`, `sched::readers`).
//!
//! The count is one atomic word. Taking is a CAS loop that checks the bound on the value it
//! replaces, so two takers racing for the last slot cannot both win (loom model
//! `slots_two_takers_never_pass_the_bound`); giving back is a `fetch_sub`. `Relaxed` throughout:
//! the count guards no data of its own (what a slot stands for travels through a channel that
//! synchronises it).

use super::atomic::{AtomicU64, Ordering};

/// At most `max` slots taken at once (module docs).
#[derive(Debug)]
pub struct Slots {
    taken: AtomicU64,
    max: u64,
}

impl Slots {
    pub fn new(max: u64) -> Slots {
        Slots {
            taken: AtomicU64::new(0),
            max,
        }
    }

    /// Takes one slot if fewer than the bound are taken.
    pub fn try_take(&self) -> bool {
        let mut n = self.taken.load(Ordering::Relaxed);
        while n < self.max {
            match self
                .taken
                .compare_exchange_weak(n, n + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => n = now,
            }
        }
        false
    }

    /// Gives one taken slot back.
    pub fn give_back(&self) {
        let before = self.taken.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "a slot given back that was not taken");
    }

    /// Slots taken now.
    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }

    pub fn max(&self) -> u64 {
        self.max
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;

    #[test]
    fn takes_up_to_the_bound_and_again_after_a_give_back() {
        let s = Slots::new(2);
        assert!(s.try_take() && s.try_take());
        assert!(!s.try_take(), "the third is refused");
        assert_eq!(s.taken(), 2);
        s.give_back();
        assert!(s.try_take());
        assert!(!s.try_take());
        assert_eq!((s.taken(), s.max()), (2, 2));
    }

    #[test]
    fn a_bound_of_zero_refuses_everything() {
        assert!(!Slots::new(0).try_take());
    }
}
