//! The pump's window, shared by every core: jobs out across all cores against
//! `max_outstanding`, and which cores wait for a slot.
//!
//! A pump reserves a slot before admitting an event (CAS, never past the bound) and releases it
//! when the event's terminal outcome reaches it. A pump that finds no slot marks its core in
//! `waiters` and looks once more ([`Outstanding::wait`]); a release that finds marks takes them
//! all and returns them, and the caller wakes those cores.
//!
//! No wake-up is lost. Both sides use read-modify-writes on both words (`AcqRel`): the waiter
//! `fetch_or`s its mark, then reads the counter with an RMW; the releaser decrements, then
//! `swap`s the marks out. The two RMWs on `waiters` are ordered: if the waiter's mark comes
//! first, the releaser's swap returns it; if the swap comes first, the mark reads from it, so the
//! decrement happens-before the waiter's second look, which sees the slot. Plain loads would be
//! the store-buffering pattern, where both sides can miss each other (the loom model
//! `outstanding_a_waiting_core_is_woken_or_sees_the_slot` failed with them).
//!
//! Layout: two cache-padded words, one per role: `n` is written by every admission and
//! release; `waiters` only when a core runs out of slots. `handover` (once per pump, at
//! start-up) is the hand-over of the events recovered from the logs (`PumpCore::handed_over`).

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::CachePadded;

/// Cores `0..MAX_WAITERS` can be marked; higher cores find a slot at their next poll timeout.
pub const MAX_WAITERS: usize = 64;

#[derive(Debug)]
pub struct Outstanding {
    /// Slots taken. Reserved by CAS (`Relaxed` is enough for the bound itself: the job travels
    /// through a ring whose orderings publish it); `AcqRel` RMWs where the wake-up protocol
    /// needs them (module docs).
    n: CachePadded<AtomicU64>,
    max: u64,
    /// Bit `k`: core `k` waits for a slot.
    waiters: CachePadded<AtomicU64>,
    /// Pumps that have not yet handed over every event recovered from their logs (each
    /// registers at creation, before the cores' threads start).
    pub handover: crate::sync::countdown::Countdown,
    /// Every core's order horizon (`dispatch::horizon`); none with [`Outstanding::new`].
    pub order: crate::dispatch::horizon::Horizon,
}

impl Outstanding {
    pub fn new(max: usize) -> Outstanding {
        Outstanding {
            n: CachePadded::new(AtomicU64::new(0)),
            max: max as u64,
            waiters: CachePadded::new(AtomicU64::new(0)),
            handover: crate::sync::countdown::Countdown::new(),
            order: crate::dispatch::horizon::Horizon::new(0),
        }
    }

    /// The window of a run of `cores` cores, with their order horizon.
    pub fn with_cores(max: usize, cores: usize) -> Outstanding {
        Outstanding {
            order: crate::dispatch::horizon::Horizon::new(cores),
            ..Outstanding::new(max)
        }
    }

    /// Takes one slot if fewer than `max` are taken.
    pub fn try_acquire(&self) -> bool {
        let mut n = self.n.load(Ordering::Relaxed);
        while n < self.max {
            match self
                .n
                .compare_exchange_weak(n, n + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => n = now,
            }
            crate::sync::spin_hint();
        }
        false
    }

    /// Takes one slot, or marks core `core` for a wake-up at the next release and looks once
    /// more: the one way every taker (the pumps, a dispatcher's gate-released jobs) acquires.
    pub fn acquire(&self, core: usize) -> bool {
        self.try_acquire() || (self.wait(core) && self.try_acquire())
    }

    /// Core `core` found no slot: marks it for a wake-up at the next release. Returns true if a
    /// slot is free now (the caller tries again at once).
    pub fn wait(&self, core: usize) -> bool {
        if core < MAX_WAITERS {
            self.waiters.fetch_or(1 << core, Ordering::AcqRel);
        }
        // An RMW read (module docs): ordered after the mark.
        self.n.fetch_add(0, Ordering::AcqRel) < self.max
    }

    /// Gives a slot back. Returns the cores to wake (bit `k` = core `k`), usually none.
    #[must_use = "the cores returned wait for a wake-up"]
    pub fn release(&self) -> u64 {
        self.n.fetch_sub(1, Ordering::AcqRel);
        // Always an RMW, never a load-first fast path (module docs).
        self.waiters.swap(0, Ordering::AcqRel)
    }

    /// The bound, `max_outstanding`.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Slots taken.
    pub fn get(&self) -> u64 {
        self.n.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;

    #[test]
    fn never_past_the_bound_and_a_release_names_the_waiters() {
        let o = Outstanding::new(2);
        assert!(o.try_acquire());
        assert!(o.try_acquire());
        assert!(!o.try_acquire());
        assert!(!o.wait(3), "no slot free yet");
        assert!(!o.wait(5));
        assert_eq!(o.get(), 2);
        assert_eq!(o.release(), (1 << 3) | (1 << 5));
        assert_eq!(o.release(), 0, "marks are taken once");
        assert!(o.try_acquire());
        assert!(
            o.wait(200),
            "a free slot is seen; high cores are not marked"
        );
        assert_eq!(o.release(), 0);
    }
}
