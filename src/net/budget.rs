//! The process-wide in-flight body budget (`[server] max_inflight_body_bytes`).
//!
//! Every request body being received holds a share of one budget, shared by all worker cores:
//! a declared `Content-Length` is reserved in full when the head arrives (before any body byte
//! is read); a chunked body reserves what its buffer grows to, as bytes arrive. A body the
//! budget cannot cover is refused at once (`503 body_budget`, by the connection layer) and is
//! never read. The share is given back when the request is complete (the body then belongs to
//! the ingest path and its own bounds) or when the connection goes away, on every path: a
//! [`Reservation`] releases what it holds when dropped, and a connection owns its reservation.
//!
//! # The word
//!
//! One `AtomicU64` on its own cache line ([`CachePadded`]): the bytes reserved right now.
//! Every core writes it (reserve: compare-and-swap loop; release: `fetch_sub`), so it is padded
//! away from anything else a core touches. The invariant is `used <= limit` at every point of
//! the modification order: a reserve only stores `used + n` after reading `used` and checking
//! `used + n <= limit` in the same CAS, and a release only lowers it.
//!
//! Ordering: `Relaxed` everywhere. The word is a counter that publishes no other memory (a
//! reservation hands over no data; the body it covers stays owned by one thread), and each
//! read-modify-write sees the latest value in the word's single modification order, which is
//! all the bound needs. The loom model `loom-tests/tests/budget.rs` checks the bound and the
//! return to zero under every interleaving of two reserving/releasing threads.
#![forbid(unsafe_code)]

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Arc, CachePadded};

/// Default `max_inflight_body_bytes`: 256 MiB.
pub const DEFAULT_MAX_INFLIGHT_BODY_BYTES: u64 = 256 << 20;

/// Seconds a `body_budget` refusal asks the client to wait: reservations are given back as
/// bodies complete, which takes well under a second for a sender that is not stalling.
pub const BODY_BUDGET_RETRY_AFTER_SECS: u64 = 1;

/// The shared budget. Create once, share through an `Arc`.
#[derive(Debug)]
pub struct BodyBudget {
    /// Bytes reserved now. Written by every core (CAS in [`try_reserve`](Self::try_reserve),
    /// `fetch_sub` in [`release`](Self::release)), read by scrapes.
    used: CachePadded<AtomicU64>,
    /// Immutable after construction.
    limit: u64,
}

impl BodyBudget {
    pub fn new(limit: u64) -> Self {
        BodyBudget {
            used: CachePadded::new(AtomicU64::new(0)),
            limit,
        }
    }

    /// Reserves `n` bytes if the budget covers them; `false` (and nothing reserved) if not.
    #[inline]
    pub fn try_reserve(&self, n: u64) -> bool {
        // Relaxed load: only a first guess for the CAS, which re-checks (module docs).
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let Some(next) = used.checked_add(n).filter(|&next| next <= self.limit) else {
                return false;
            };
            // Relaxed on both sides: the word guards no other memory (module docs).
            match self
                .used
                .compare_exchange_weak(used, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(actual) => {
                    used = actual;
                    crate::sync::spin_hint();
                }
            }
        }
    }

    /// Gives back `n` bytes reserved earlier by [`try_reserve`](Self::try_reserve).
    #[inline]
    pub fn release(&self, n: u64) {
        if n != 0 {
            // Relaxed: see the module docs. Never below zero: callers release only what they
            // reserved ([`Reservation`] tracks it).
            let before = self.used.fetch_sub(n, Ordering::Relaxed);
            debug_assert!(before >= n, "released {n} of {before} reserved bytes");
        }
    }

    /// Bytes reserved now (a snapshot).
    pub fn in_use(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// `sluice_body_budget_bytes` (reserved now) and `sluice_body_budget_limit_bytes`.
    pub fn render_prometheus(&self, w: &mut crate::metrics::PromWriter) {
        w.gauge(
            "sluice_body_budget_bytes",
            "Bytes of request bodies being received, reserved against max_inflight_body_bytes.",
            self.in_use() as f64,
        );
        w.gauge(
            "sluice_body_budget_limit_bytes",
            "The in-flight body budget (server.max_inflight_body_bytes).",
            self.limit as f64,
        );
    }
}

/// One connection's share of the budget. Releases everything it holds when dropped, so a
/// connection that dies (error, timeout, reset, shutdown) cannot leak budget.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<BodyBudget>,
    held: u64,
}

impl Reservation {
    pub fn new(budget: Arc<BodyBudget>) -> Self {
        Reservation { budget, held: 0 }
    }

    /// Grows the share to `total` bytes (no-op if it already holds that many). `false` if the
    /// budget cannot cover the growth; the share is then unchanged.
    #[inline]
    pub fn grow_to(&mut self, total: u64) -> bool {
        if total <= self.held {
            return true;
        }
        if !self.budget.try_reserve(total - self.held) {
            return false;
        }
        self.held = total;
        true
    }

    /// Gives the whole share back.
    #[inline]
    pub fn release(&mut self) {
        self.budget.release(std::mem::take(&mut self.held));
    }

    /// Bytes held.
    pub fn held(&self) -> u64 {
        self.held
    }

    pub fn budget(&self) -> &Arc<BodyBudget> {
        &self.budget
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;

    #[test]
    fn reserve_up_to_the_limit_and_no_further() {
        let b = BodyBudget::new(100);
        assert!(b.try_reserve(60));
        assert!(b.try_reserve(40));
        assert!(!b.try_reserve(1));
        assert_eq!(b.in_use(), 100);
        b.release(40);
        assert!(!b.try_reserve(41));
        assert!(b.try_reserve(40));
        b.release(100);
        assert_eq!(b.in_use(), 0);
        assert!(!b.try_reserve(u64::MAX), "overflow is a refusal");
        assert!(b.try_reserve(0));
    }

    #[test]
    fn reservation_grows_and_releases_on_drop() {
        let b = Arc::new(BodyBudget::new(10));
        let mut r = Reservation::new(b.clone());
        assert!(r.grow_to(4));
        assert!(r.grow_to(3), "shrinking is a no-op");
        assert_eq!((r.held(), b.in_use()), (4, 4));
        let mut other = Reservation::new(b.clone());
        assert!(!other.grow_to(7));
        assert_eq!(
            (other.held(), b.in_use()),
            (0, 4),
            "a refusal reserves nothing"
        );
        assert!(other.grow_to(6));
        assert!(!r.grow_to(5));
        assert_eq!(r.held(), 4);
        r.release();
        assert_eq!(b.in_use(), 6);
        assert!(r.grow_to(4));
        drop(r);
        drop(other);
        assert_eq!(b.in_use(), 0);
    }

    #[test]
    fn the_word_has_a_cache_line_to_itself() {
        assert!(std::mem::align_of::<BodyBudget>() >= 64);
        assert!(std::mem::size_of::<CachePadded<AtomicU64>>() >= 64);
    }
}
