//! Per-trigger shares of the durable backlog: a guaranteed share per trigger plus a common
//! pool any trigger may borrow from while it is free (DESIGN.md "Backlog shares").
//!
//! # Slots
//!
//! One slot per `[[triggers]]` entry (config order), then one for the default route
//! (`POST /webhooks/{source}`, and any event whose trigger id the config no longer knows; it
//! takes no share, only borrows from the pool, unless `ingest.default_route_max_pending` gives
//! it one: [`split_slots`]), then
//! the *recovered* slot: events pending at start-up (read back from the WAL) were reserved
//! before this run's shares existed, so they are counted there, all of it borrowed from the
//! pool (which they may overfill: a smaller bound than before a restart), until they drain.
//!
//! # The split ([`split`]), per dimension (events, bytes)
//!
//! A trigger with `max_pending = { events = N, bytes = B }` is guaranteed `N` / `B`. The
//! slots without an explicit value share the *default reserve* equally: `reserved_fraction`
//! ([`DEFAULT_RESERVED`], a half, unless `dispatch.reserved_fraction` says otherwise) of the bound, minus what explicit shares took (never below 0), `floor`ed per slot.
//! The pool is what is left: `max − Σ shares`. Explicit shares summing past the bound are a
//! config error.
//!
//! # Counting ([`ShareDim`])
//!
//! Each slot counts what it holds of its own share (`own`, ≤ share except for absorbed
//! reservations) and what it borrowed (`borrowed`); the pool counts the sum of the borrowed
//! (`pool`, ≥ Σ borrowed at every instant: it is raised before and lowered after the slot's
//! `borrowed`). A reservation takes from the own share if it fits, else from the pool if it fits,
//! else fails. A release gives back borrowed first (so the pool frees up for everyone), then
//! own. All counters are `Relaxed` atomics; each bound is enforced by the CAS on its own counter.
//!
//! # Layout
//!
//! Every core's ingest reserves and every core's pump releases, so each slot's pair of counters
//! (`own`, `borrowed`: written together by the reservations and releases of that slot's trigger)
//! and the pool (written by every borrower) sit on cache lines of their own
//! ([`CachePadded`]): one trigger's traffic does not invalidate the line another trigger's
//! reservations CAS on. The shares and the pool's size are written at construction and by
//! reloads only ([`ShareDim::resize`]: a trigger's `max_pending` changed live).

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::CachePadded;

/// Fraction of each bound reserved, by default, for the slots without an explicit share.
pub const DEFAULT_RESERVED: f64 = 0.5;

/// The guaranteed shares of one dimension and the pool left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub shares: Vec<u64>,
    pub pool: u64,
}

/// Splits `max` into one share per entry of `explicit` (`None`: a default share) and a pool.
/// `Err(sum)` when the explicit shares sum past `max`.
/// `reserved`: the fraction of `max` the default shares divide ([`DEFAULT_RESERVED`] unless
/// `dispatch.reserved_fraction` says otherwise).
pub fn split(max: u64, explicit: &[Option<u64>], reserved: f64) -> Result<Split, u64> {
    let taken: u64 = explicit
        .iter()
        .flatten()
        .fold(0u64, |a, &n| a.saturating_add(n));
    if taken > max {
        return Err(taken);
    }
    let implicit = explicit.iter().filter(|e| e.is_none()).count() as u64;
    let reserve = ((max as f64 * reserved).floor() as u64).saturating_sub(taken);
    let each = reserve.checked_div(implicit).unwrap_or(0);
    let shares: Vec<u64> = explicit.iter().map(|e| e.unwrap_or(each)).collect();
    let pool = max - taken - each * implicit;
    Ok(Split { shares, pool })
}

/// The split of one dimension over the backlog's slots: one per trigger (`triggers`, config
/// order), then the default route's (`default`: `Some(explicit)` when it takes a share — its
/// `None` a default one like a trigger's — `None` when it takes none, i.e. a share of 0: it
/// only borrows from the pool), then the recovered slot (0: borrowed only). `Err(sum)` as
/// [`split`].
pub fn split_slots(
    max: u64,
    triggers: &[Option<u64>],
    default: Option<Option<u64>>,
    reserved: f64,
) -> Result<Split, u64> {
    let mut explicit = triggers.to_vec();
    explicit.push(default.unwrap_or(Some(0)));
    let mut s = split(max, &explicit, reserved)?;
    s.shares.push(0); // the recovered slot
    Ok(s)
}

/// `counter -= n`, stopping at 0; returns what was actually taken.
fn take_up_to(counter: &AtomicU64, n: u64) -> u64 {
    match counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
        Some(c.saturating_sub(n))
    }) {
        Ok(before) | Err(before) => before.min(n),
    }
}

/// `counter += n` if the result stays within `bound`.
fn add_within(counter: &AtomicU64, n: u64, bound: u64) -> bool {
    counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
            c.checked_add(n).filter(|&s| s <= bound)
        })
        .is_ok()
}

/// Where a reservation of one dimension came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Took {
    Own,
    Pool,
}

/// One slot's counters of one dimension: written by the reservations and releases of that
/// slot's events (any core's ingest, any core's pump), read by readiness and `/metrics`.
#[derive(Debug)]
struct SlotCount {
    /// Held of the slot's own share (≤ the share, except absorbed reservations).
    own: AtomicU64,
    /// Held of the pool (the pool's counter is raised before and lowered after this one).
    borrowed: AtomicU64,
}

/// The counters of one dimension (events or bytes) over all slots.
#[derive(Debug)]
pub struct ShareDim {
    /// Each slot's guaranteed share and the pool's size: set at construction, changed only by
    /// a reload ([`ShareDim::resize`]); read by every reservation. `Relaxed`: each is a bound
    /// checked on its own (a reservation racing a resize is judged by the old bound or the new
    /// one, never by one past their sum, see `resize`).
    shares: Vec<AtomicU64>,
    pool_size: AtomicU64,
    /// One padded line per slot (module docs, "Layout").
    slots: Vec<CachePadded<SlotCount>>,
    /// Σ borrowed, bounded by `pool_size`: every borrower's CAS target, on its own line.
    pool: CachePadded<AtomicU64>,
}

impl ShareDim {
    pub fn new(split: Split) -> ShareDim {
        let n = split.shares.len();
        ShareDim {
            shares: split.shares.into_iter().map(AtomicU64::new).collect(),
            pool_size: AtomicU64::new(split.pool),
            slots: (0..n)
                .map(|_| {
                    CachePadded::new(SlotCount {
                        own: AtomicU64::new(0),
                        borrowed: AtomicU64::new(0),
                    })
                })
                .collect(),
            pool: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Takes `n` for `slot`: from its share if it fits, else from the pool if it fits.
    pub fn take(&self, slot: usize, n: u64) -> Option<Took> {
        if add_within(&self.slots[slot].own, n, self.share(slot)) {
            return Some(Took::Own);
        }
        if add_within(&self.pool, n, self.pool_size()) {
            self.slots[slot].borrowed.fetch_add(n, Ordering::Relaxed);
            return Some(Took::Pool);
        }
        None
    }

    /// Counts `n` for `slot` past every bound: into its own share (an absorbed reservation).
    pub fn force_own(&self, slot: usize, n: u64) {
        self.slots[slot].own.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts `n` for `slot` as borrowed, past the pool's size if need be (recovered events, a
    /// single event larger than the byte bound on an empty backlog).
    pub fn force_pool(&self, slot: usize, n: u64) {
        self.pool.fetch_add(n, Ordering::Relaxed);
        self.slots[slot].borrowed.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts `n` for `slot` as borrowed past the pool's size, only if the pool is empty (CAS
    /// from 0: one such reservation at a time). For a single reservation that could never fit
    /// the slot's share plus the pool.
    pub fn force_if_pool_empty(&self, slot: usize, n: u64) -> bool {
        if self
            .pool
            .compare_exchange(0, n, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.slots[slot].borrowed.fetch_add(n, Ordering::Relaxed);
        true
    }

    /// Gives `n` of `slot` back: borrowed first, then own (each stopping at 0). Returns what
    /// went back to the pool.
    pub fn give(&self, slot: usize, n: u64) -> u64 {
        let b = take_up_to(&self.slots[slot].borrowed, n);
        take_up_to(&self.pool, b);
        take_up_to(&self.slots[slot].own, n - b);
        b
    }

    /// A reload's new split (as many slots; the same total, the bound): shares and the pool's
    /// size change, what the slots hold does not — nothing is dropped. In three steps, so that
    /// the bounds never sum past the total while reservations run: (1) the bounds that shrink
    /// are lowered; (2) a slot whose share shrank below what it holds of it has the excess
    /// moved to the pool, as if borrowed (it then waits for room like any slot past its share,
    /// and the pool's room shrinks by what it holds); (3) the bounds that grow are raised.
    /// Callers serialize resizes (reloads are serialized).
    pub fn resize(&self, split: &Split) {
        debug_assert_eq!(split.shares.len(), self.shares.len());
        let old: Vec<u64> = (0..self.shares.len()).map(|s| self.share(s)).collect();
        let new = split.shares.iter().copied().zip(&self.shares);
        if split.pool < self.pool_size() {
            self.pool_size.store(split.pool, Ordering::Relaxed);
        }
        for (n, cell) in new.clone().filter(|(n, c)| *n < c.load(Ordering::Relaxed)) {
            cell.store(n, Ordering::Relaxed);
        }
        for (slot, (&was, &now)) in old.iter().zip(&split.shares).enumerate() {
            let excess = self.own(slot).min(was).saturating_sub(now);
            if excess > 0 {
                self.own_to_pool(slot, excess);
            }
        }
        for (n, cell) in new.filter(|(n, c)| *n > c.load(Ordering::Relaxed)) {
            cell.store(n, Ordering::Relaxed);
        }
        if split.pool > self.pool_size() {
            self.pool_size.store(split.pool, Ordering::Relaxed);
        }
    }

    /// Recounts `n` that `slot` holds of its own share as borrowed from the pool (past the
    /// pool's size if need be). The pool and `borrowed` are raised first (an over-count for a
    /// moment: reservations are refused, never admitted past a bound), then `own` lowered; if
    /// releases took `own` below `n` meanwhile, the difference is taken back off `borrowed`
    /// and then the pool (the pool never below Σ borrowed).
    fn own_to_pool(&self, slot: usize, n: u64) {
        self.pool.fetch_add(n, Ordering::Relaxed);
        self.slots[slot].borrowed.fetch_add(n, Ordering::Relaxed);
        let moved = take_up_to(&self.slots[slot].own, n);
        if moved < n {
            let back = take_up_to(&self.slots[slot].borrowed, n - moved);
            take_up_to(&self.pool, back);
        }
    }

    /// What `slot` holds (own + borrowed).
    pub fn used(&self, slot: usize) -> u64 {
        self.slots[slot].own.load(Ordering::Relaxed)
            + self.slots[slot].borrowed.load(Ordering::Relaxed)
    }

    /// What `slot` holds of its own share.
    pub fn own(&self, slot: usize) -> u64 {
        self.slots[slot].own.load(Ordering::Relaxed)
    }

    pub fn share(&self, slot: usize) -> u64 {
        self.shares[slot].load(Ordering::Relaxed)
    }

    /// The pool in use (≥ the sum of the slots' borrowed).
    pub fn pool_used(&self) -> u64 {
        self.pool.load(Ordering::Relaxed)
    }

    pub fn pool_size(&self) -> u64 {
        self.pool_size.load(Ordering::Relaxed)
    }

    /// Fill of `slot`'s own share, 0..=1 (a share of 0 is always full).
    pub fn share_fill(&self, slot: usize) -> f64 {
        match self.share(slot) {
            0 => 1.0,
            s => (self.own(slot) as f64 / s as f64).min(1.0),
        }
    }

    /// Fill of the pool, 0.. (a pool of 0 is always full).
    pub fn pool_fill(&self) -> f64 {
        match self.pool_size() {
            0 => 1.0,
            s => self.pool_used() as f64 / s as f64,
        }
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;

    #[test]
    fn default_split_reserves_half_equally_and_pools_the_rest() {
        // Two triggers and the default route share 500 of 1000: 166 each, pool 502.
        let s = split(1000, &[None, None, None], DEFAULT_RESERVED).unwrap();
        assert_eq!(s.shares, vec![166, 166, 166]);
        assert_eq!(s.pool, 502);
        // Explicit shares come out of the default reserve first.
        let s = split(1000, &[Some(300), None, None], DEFAULT_RESERVED).unwrap();
        assert_eq!(s.shares, vec![300, 100, 100]);
        assert_eq!(s.pool, 500);
        // Past the reserve: the others get 0, the pool what is left.
        let s = split(1000, &[Some(800), None], DEFAULT_RESERVED).unwrap();
        assert_eq!(s.shares, vec![800, 0]);
        assert_eq!(s.pool, 200);
        // Exactly the bound: no pool.
        let s = split(10, &[Some(4), Some(6)], DEFAULT_RESERVED).unwrap();
        assert_eq!((s.shares, s.pool), (vec![4, 6], 0));
        assert_eq!(split(10, &[Some(4), Some(7)], DEFAULT_RESERVED), Err(11));
        // A tiny bound: shares of 0, everything in the pool.
        let s = split(3, &[None, None, None, None], DEFAULT_RESERVED).unwrap();
        assert_eq!((s.shares, s.pool), (vec![0, 0, 0, 0], 3));
    }

    #[test]
    fn the_default_route_takes_no_share_unless_given_one() {
        // One trigger, the default route without a share: the trigger has the whole reserve.
        let s = split_slots(100, &[None], None, DEFAULT_RESERVED).unwrap();
        assert_eq!((s.shares, s.pool), (vec![50, 0, 0], 50));
        // Given one (default-sized): it divides the reserve like a trigger.
        let s = split_slots(100, &[None], Some(None), DEFAULT_RESERVED).unwrap();
        assert_eq!((s.shares, s.pool), (vec![25, 25, 0], 50));
        let s = split_slots(100, &[None], Some(Some(10)), DEFAULT_RESERVED).unwrap();
        assert_eq!((s.shares, s.pool), (vec![40, 10, 0], 50));
        // No trigger, no share: the whole bound is the pool.
        let s = split_slots(100, &[], None, DEFAULT_RESERVED).unwrap();
        assert_eq!((s.shares, s.pool), (vec![0, 0], 100));
        assert_eq!(
            split_slots(10, &[Some(6)], Some(Some(5)), DEFAULT_RESERVED),
            Err(11)
        );
    }

    #[test]
    fn resize_keeps_what_is_held_and_the_total_bound() {
        let d = ShareDim::new(Split {
            shares: vec![6, 2],
            pool: 2,
        });
        for _ in 0..5 {
            assert_eq!(d.take(0, 1), Some(Took::Own));
        }
        // Slot 0 shrinks to 2, slot 1 grows to 4, the pool to 4: the total stays 10.
        d.resize(&Split {
            shares: vec![2, 4],
            pool: 4,
        });
        assert_eq!((d.share(0), d.share(1), d.pool_size()), (2, 4, 4));
        // Nothing dropped: slot 0 still holds 5, the 3 past its new share counted in the pool.
        assert_eq!((d.used(0), d.own(0), d.pool_used()), (5, 2, 3));
        // It waits past its share: one more from the pool, then none.
        assert_eq!(d.take(0, 1), Some(Took::Pool));
        assert_eq!(d.take(0, 1), None);
        // Slot 1 has its grown share, and the total never passes 10.
        for _ in 0..4 {
            assert_eq!(d.take(1, 1), Some(Took::Own));
        }
        assert_eq!(d.take(1, 1), None);
        assert_eq!(d.used(0) + d.used(1), 10);
        // Releases give the pool back first; then slot 0 takes from its own share again.
        assert_eq!(d.give(0, 6), 4);
        assert_eq!((d.used(0), d.pool_used()), (0, 0));
        assert_eq!(d.take(0, 1), Some(Took::Own));
        // Growing a share a slot holds more than (absorbed past it) moves nothing.
        d.force_own(1, 3);
        d.resize(&Split {
            shares: vec![2, 5],
            pool: 3,
        });
        assert_eq!((d.own(1), d.pool_used()), (7, 0));
    }

    #[test]
    fn take_own_then_pool_release_borrowed_first() {
        let d = ShareDim::new(Split {
            shares: vec![2, 2],
            pool: 3,
        });
        assert_eq!(d.take(0, 1), Some(Took::Own));
        assert_eq!(d.take(0, 1), Some(Took::Own));
        for _ in 0..3 {
            assert_eq!(d.take(0, 1), Some(Took::Pool));
        }
        assert_eq!(d.take(0, 1), None, "own share full and the pool in use");
        assert_eq!((d.used(0), d.pool_used()), (5, 3));
        // The other slot still has its guaranteed share, but nothing more.
        assert_eq!(d.take(1, 1), Some(Took::Own));
        assert_eq!(d.take(1, 1), Some(Took::Own));
        assert_eq!(d.take(1, 1), None);
        // A release of slot 0 frees the pool first: slot 1 may borrow it.
        d.give(0, 1);
        assert_eq!((d.own(0), d.pool_used()), (2, 2));
        assert_eq!(d.take(1, 1), Some(Took::Pool));
        d.give(0, 4);
        assert_eq!((d.used(0), d.pool_used()), (0, 1));
        assert_eq!((d.share_fill(0), d.share_fill(1)), (0.0, 1.0));
        assert!((d.pool_fill() - 1.0 / 3.0).abs() < 1e-9);
        // Releases never wrap.
        d.give(0, 10);
        assert_eq!(d.used(0), 0);
    }

    /// Each slot's counters and the pool own whole cache lines (module docs, "Layout").
    #[test]
    fn slots_and_pool_sit_on_separate_cache_lines() {
        use std::mem::{align_of, size_of};
        let line = align_of::<CachePadded<AtomicU64>>();
        assert!(line >= 64, "CachePadded aligns to a cache line at least");
        assert!(size_of::<CachePadded<SlotCount>>() >= line);
        let d = ShareDim::new(Split {
            shares: vec![1, 1, 1],
            pool: 1,
        });
        let addr = |p: &AtomicU64| p as *const AtomicU64 as usize;
        let lines: Vec<usize> = d
            .slots
            .iter()
            .map(|s| addr(&s.own) / line)
            .chain([addr(&d.pool) / line])
            .collect();
        for (i, a) in lines.iter().enumerate() {
            for b in &lines[i + 1..] {
                assert_ne!(a, b, "two groups share a cache line: {lines:?}");
            }
        }
        // A slot's own pair is written together: one line.
        assert_eq!(
            addr(&d.slots[0].own) / line,
            addr(&d.slots[0].borrowed) / line
        );
    }

    #[test]
    fn forced_counts_are_given_back() {
        let d = ShareDim::new(Split {
            shares: vec![1],
            pool: 1,
        });
        d.force_pool(0, 5);
        assert_eq!((d.pool_used(), d.take(0, 1)), (5, Some(Took::Own)));
        assert_eq!(d.take(0, 1), None);
        d.force_own(0, 2);
        assert_eq!(d.used(0), 8);
        d.give(0, 8);
        assert_eq!((d.used(0), d.pool_used()), (0, 0));
    }
}
