//! GCRA (the Generic Cell Rate Algorithm) in one atomic word: the rate-limit primitive shared
//! by ingest admission ([`crate::ingest::bucket`]) and a destination's outbound rate budget
//! ([`crate::dispatch::deliver::rate`]).
//!
//! GCRA (ATM Forum TM 4.0; the same scheme as governor's `gcra.rs`) is a token bucket with
//! continuous refill expressed as a single timestamp: the *theoretical arrival time* (TAT). With
//! emission interval `T = 1 s / refill` and burst `capacity`, a request at time `now` conforms
//! iff
//!
//! ```text
//! max(TAT, now) + T - now <= capacity * T
//! ```
//!
//! and a conforming request sets `TAT = max(TAT, now) + T`. `TAT - now` is the debt of the
//! bucket: `capacity - (TAT - now) / T` tokens are available. `TAT <= now` is a full bucket, so a
//! new bucket (`TAT = now`) is full and an idle bucket never accumulates more than `capacity`.
//!
//! The decision is the pure function [`decide`] (no clock, no atomics): single-owner users
//! keep the TAT in a plain `u64` and call it directly; [`TokenBucket`] shares one bucket
//! between cores as one cache-padded `AtomicU64` updated with a compare-and-swap loop around
//! it. Time is nanoseconds on the injected clock's scale ([`crate::sync::clock::Clock`]);
//! nothing here reads a clock. The loom model of the CAS loop is `loom-tests/tests/bucket.rs`.
//!
//! Compatibility (Harn reference §1.9, §2): refill is continuous, buckets start full, and the
//! `Retry-After` header is `max(1, floor(seconds until one token))`
//! ([`RetryAfter::retry_after_secs`]).
//!
//! Precision: `T` is `1e9 / refill` nanoseconds rounded down, so the effective rate is at most
//! `1e9 / floor(1e9 / refill)` per second (1024/s → 1024.0005/s).
#![forbid(unsafe_code)]

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::CachePadded;
use std::fmt;
use std::time::Duration;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Validated bucket parameters (burst and refill), with the derived GCRA intervals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketParams {
    capacity: u64,
    refill_per_sec: u64,
    /// Emission interval `T`: nanoseconds per token. Range 1..=1e9.
    emission_nanos: u64,
    /// `capacity * T`: the largest allowed debt `TAT - now` after an admission.
    window_nanos: u64,
}

/// Why [`BucketParams::new`] refused its input. Nothing is clamped silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamError {
    /// Capacity (burst) must be at least 1.
    ZeroCapacity,
    /// Refill must be at least 1 token per second.
    ZeroRefill,
    /// Refill above 1e9 per second cannot be expressed in nanoseconds per token.
    RefillTooHigh(u64),
    /// `capacity / refill` must fit in u64 nanoseconds (584 years).
    CapacityTooLarge(u64),
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::ZeroCapacity => f.write_str("bucket capacity must be at least 1"),
            ParamError::ZeroRefill => f.write_str("bucket refill must be at least 1 per second"),
            ParamError::RefillTooHigh(r) => {
                write!(
                    f,
                    "bucket refill {r}/s is above the maximum of 1000000000/s"
                )
            }
            ParamError::CapacityTooLarge(c) => {
                write!(f, "bucket capacity {c} takes longer than 2^64 ns to refill")
            }
        }
    }
}

impl std::error::Error for ParamError {}

impl BucketParams {
    /// Capacity (burst, ≥ 1) and refill (tokens per second, 1..=1e9); `capacity / refill` must
    /// be below 584 years.
    pub const fn new(capacity: u64, refill_per_sec: u64) -> Result<Self, ParamError> {
        if capacity == 0 {
            return Err(ParamError::ZeroCapacity);
        }
        if refill_per_sec == 0 {
            return Err(ParamError::ZeroRefill);
        }
        if refill_per_sec > NANOS_PER_SEC {
            return Err(ParamError::RefillTooHigh(refill_per_sec));
        }
        let emission_nanos = NANOS_PER_SEC / refill_per_sec;
        let Some(window_nanos) = capacity.checked_mul(emission_nanos) else {
            return Err(ParamError::CapacityTooLarge(capacity));
        };
        Ok(BucketParams {
            capacity,
            refill_per_sec,
            emission_nanos,
            window_nanos,
        })
    }

    pub const fn capacity(&self) -> u64 {
        self.capacity
    }

    pub const fn refill_per_sec(&self) -> u64 {
        self.refill_per_sec
    }

    /// Nanoseconds per token (`T`).
    pub const fn emission_nanos(&self) -> u64 {
        self.emission_nanos
    }
}

/// How long until the refusing bucket has one token. Always > 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RetryAfter {
    nanos: u64,
}

impl RetryAfter {
    pub const fn from_nanos(nanos: u64) -> Self {
        RetryAfter { nanos }
    }

    pub const fn as_nanos(&self) -> u64 {
        self.nanos
    }

    pub const fn as_duration(&self) -> Duration {
        Duration::from_nanos(self.nanos)
    }

    /// The `Retry-After` header value: `max(1, floor(seconds))`, as the Harn reference (§1.9)
    /// computes it. Never below 1, so a client never retries immediately into the same refusal.
    pub const fn retry_after_secs(&self) -> u64 {
        let secs = self.nanos / NANOS_PER_SEC;
        if secs == 0 {
            1
        } else {
            secs
        }
    }
}

/// Whether one token conforms at `now` (the outcome of [`decide`]): admit, or refuse until a
/// token is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conformance {
    /// Conforming: store `new_tat` (if the word still holds the `tat` that was decided on).
    Admit { new_tat: u64 },
    /// Not conforming: one token becomes available after `retry_after`.
    Refuse { retry_after: RetryAfter },
}

/// The GCRA decision for one token: pure, no clock, no atomics.
///
/// `tat` is the stored theoretical arrival time, `now` the caller's clock reading. A `now`
/// that is older than another thread's (clock readings race) only makes the decision slightly
/// more conservative; it can never admit more than `capacity` at once. Saturating arithmetic
/// keeps huge idle gaps and clock values near `u64::MAX` from wrapping.
#[inline]
pub fn decide(tat: u64, now: u64, params: &BucketParams) -> Conformance {
    let new_tat = tat.max(now).saturating_add(params.emission_nanos);
    let debt = new_tat - now; // new_tat >= now
    if debt <= params.window_nanos {
        Conformance::Admit { new_tat }
    } else {
        Conformance::Refuse {
            retry_after: RetryAfter::from_nanos(debt - params.window_nanos),
        }
    }
}

/// A token bucket shared by all cores: GCRA over one cache-padded atomic word.
pub struct TokenBucket {
    /// Theoretical arrival time in nanoseconds on the injected clock's scale. Written only by
    /// compare-and-swap (`try_acquire`, `refund`), read by every core. All accesses are
    /// `Relaxed`: the word is the bucket's entire state and publishes no other memory, and
    /// read-modify-writes on one location always act on the latest value in its modification
    /// order, so no token is ever admitted twice. Padded so two buckets never share a line.
    tat: CachePadded<AtomicU64>,
    params: BucketParams,
}

impl fmt::Debug for TokenBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucket")
            .field("tat", &self.tat.load(Ordering::Relaxed))
            .field("params", &self.params)
            .finish()
    }
}

impl TokenBucket {
    /// A bucket that is full at `now` (and at any later time): `TAT = now`.
    pub fn new(params: BucketParams, now: u64) -> Self {
        TokenBucket {
            tat: CachePadded::new(AtomicU64::new(now)),
            params,
        }
    }

    pub fn params(&self) -> &BucketParams {
        &self.params
    }

    /// Take one token at `now`, or say how long until one is available.
    ///
    /// Lock-free: a failed compare-and-swap means another thread changed the word, i.e. made
    /// progress. A refusal does not write.
    #[inline]
    pub fn try_acquire(&self, now: u64) -> Result<(), RetryAfter> {
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            match decide(tat, now, &self.params) {
                Conformance::Refuse { retry_after } => return Err(retry_after),
                Conformance::Admit { new_tat } => {
                    match self.tat.compare_exchange_weak(
                        tat,
                        new_tat,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return Ok(()),
                        Err(current) => tat = current,
                    }
                }
            }
        }
    }

    /// Would [`try_acquire`](Self::try_acquire) succeed at `now`? Reads only; the answer can be
    /// stale by the time the caller acts on it.
    #[inline]
    pub fn check(&self, now: u64) -> Result<(), RetryAfter> {
        match decide(self.tat.load(Ordering::Relaxed), now, &self.params) {
            Conformance::Admit { .. } => Ok(()),
            Conformance::Refuse { retry_after } => Err(retry_after),
        }
    }

    /// Give back one token taken by [`try_acquire`](Self::try_acquire) (all-or-nothing
    /// admission). Moves `TAT` back by `T`; a bucket that has refilled completely in the meantime
    /// (`TAT <= now`) is left alone, so a refund never lifts a bucket above `capacity`.
    pub fn refund(&self, now: u64) {
        let mut tat = self.tat.load(Ordering::Relaxed);
        while tat > now {
            let back = tat.saturating_sub(self.params.emission_nanos);
            match self
                .tat
                .compare_exchange_weak(tat, back, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(current) => tat = current,
            }
        }
    }

    /// Tokens available at `now` (fractional; for metrics and tests, racy by nature).
    pub fn available(&self, now: u64) -> f64 {
        let debt = self.tat.load(Ordering::Relaxed).saturating_sub(now);
        let free = self.params.window_nanos.saturating_sub(debt);
        free as f64 / self.params.emission_nanos as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::clock::{Clock, ManualClock};
    use std::sync::Barrier;

    const SEC: u64 = NANOS_PER_SEC;

    fn params(capacity: u64, refill: u64) -> BucketParams {
        BucketParams::new(capacity, refill).unwrap()
    }

    #[test]
    fn params_are_validated_not_clamped() {
        assert_eq!(BucketParams::new(0, 1), Err(ParamError::ZeroCapacity));
        assert_eq!(BucketParams::new(1, 0), Err(ParamError::ZeroRefill));
        assert_eq!(
            BucketParams::new(1, 1_000_000_001),
            Err(ParamError::RefillTooHigh(1_000_000_001))
        );
        let p = BucketParams::new(u32::MAX as u64, 1).unwrap();
        assert_eq!(p.window_nanos, u32::MAX as u64 * SEC);
        assert_eq!(
            BucketParams::new(u64::MAX, 1),
            Err(ParamError::CapacityTooLarge(u64::MAX))
        );
        assert!(BucketParams::new(u64::MAX, 1_000_000_000).is_ok());
        assert_eq!(params(4096, 1024).emission_nanos(), 976_562);
    }

    #[test]
    fn decide_admits_up_to_capacity_then_refuses_with_time_to_one_token() {
        let p = params(2, 1);
        assert_eq!(decide(0, 0, &p), Conformance::Admit { new_tat: SEC });
        assert_eq!(decide(SEC, 0, &p), Conformance::Admit { new_tat: 2 * SEC });
        assert_eq!(
            decide(2 * SEC, 0, &p),
            Conformance::Refuse {
                retry_after: RetryAfter::from_nanos(SEC)
            }
        );
        // A quarter second later, three quarters to wait.
        assert_eq!(
            decide(2 * SEC, SEC / 4, &p),
            Conformance::Refuse {
                retry_after: RetryAfter::from_nanos(3 * SEC / 4)
            }
        );
        // An old TAT is the same as a full bucket.
        assert_eq!(
            decide(5, 100 * SEC, &p),
            Conformance::Admit { new_tat: 101 * SEC }
        );
    }

    #[test]
    fn decide_does_not_panic_at_the_end_of_time() {
        // 584 years of uptime away; saturation only has to avoid wrapping (which would refill).
        let p = params(1, 1);
        assert_eq!(
            decide(0, u64::MAX - 1, &p),
            Conformance::Admit { new_tat: u64::MAX }
        );
        assert!(matches!(
            decide(u64::MAX, u64::MAX - 2 * SEC, &p),
            Conformance::Refuse { .. }
        ));
    }

    #[test]
    fn retry_after_secs_is_floor_but_at_least_one() {
        assert_eq!(RetryAfter::from_nanos(1).retry_after_secs(), 1);
        assert_eq!(RetryAfter::from_nanos(SEC - 1).retry_after_secs(), 1);
        assert_eq!(RetryAfter::from_nanos(SEC).retry_after_secs(), 1);
        assert_eq!(RetryAfter::from_nanos(2 * SEC - 1).retry_after_secs(), 1);
        assert_eq!(RetryAfter::from_nanos(2 * SEC).retry_after_secs(), 2);
        assert_eq!(
            RetryAfter::from_nanos(1500).as_duration(),
            Duration::from_nanos(1500)
        );
    }

    #[test]
    fn capacity_two_refill_one_third_request_refused_for_one_second() {
        let clock = ManualClock::new(0);
        let b = TokenBucket::new(params(2, 1), 0);
        assert_eq!(b.available(clock.now_nanos()), 2.0);
        assert!(b.try_acquire(clock.now_nanos()).is_ok());
        assert!(b.try_acquire(clock.now_nanos()).is_ok());
        let refused = b.try_acquire(clock.now_nanos()).unwrap_err();
        assert_eq!(refused.as_duration(), Duration::from_secs(1));
        assert_eq!(refused.retry_after_secs(), 1);
        assert_eq!(b.available(clock.now_nanos()), 0.0);
    }

    #[test]
    fn refills_continuously_over_time() {
        let clock = ManualClock::new(7 * SEC);
        let b = TokenBucket::new(params(2, 1), clock.now_nanos());
        b.try_acquire(clock.now_nanos()).unwrap();
        b.try_acquire(clock.now_nanos()).unwrap();
        clock.advance(Duration::from_millis(500));
        assert_eq!(b.available(clock.now_nanos()), 0.5);
        let wait = b.try_acquire(clock.now_nanos()).unwrap_err();
        assert_eq!(wait.as_duration(), Duration::from_millis(500));
        clock.advance(Duration::from_millis(500));
        b.try_acquire(clock.now_nanos()).unwrap();
        assert!(b.try_acquire(clock.now_nanos()).is_err());
        // Long idle: back to exactly full, never more.
        clock.advance(Duration::from_secs(3600));
        assert_eq!(b.available(clock.now_nanos()), 2.0);
        b.try_acquire(clock.now_nanos()).unwrap();
        b.try_acquire(clock.now_nanos()).unwrap();
        assert!(b.try_acquire(clock.now_nanos()).is_err());
    }

    #[test]
    fn huge_idle_gaps_do_not_overflow() {
        let b = TokenBucket::new(params(u32::MAX as u64, 1_000_000_000), 0);
        b.try_acquire(0).unwrap();
        let late = u64::MAX - 10;
        assert_eq!(b.available(late), u32::MAX as f64);
        b.try_acquire(late).unwrap();
        b.try_acquire(u64::MAX).unwrap();
        assert!(b.available(u64::MAX) <= u32::MAX as f64);
        let small = TokenBucket::new(params(1, 1), 0);
        let late = u64::MAX / 2;
        small.try_acquire(late).unwrap();
        assert_eq!(small.try_acquire(late), Err(RetryAfter::from_nanos(SEC)));
    }

    #[test]
    fn refund_returns_exactly_one_token_and_never_overfills() {
        let b = TokenBucket::new(params(2, 1), 0);
        b.try_acquire(0).unwrap();
        b.try_acquire(0).unwrap();
        b.refund(0);
        assert_eq!(b.available(0), 1.0);
        b.try_acquire(0).unwrap();
        assert!(b.try_acquire(0).is_err());
        // After a full refill, a late refund is a no-op.
        b.refund(10 * SEC);
        assert_eq!(b.available(10 * SEC), 2.0);
        b.try_acquire(10 * SEC).unwrap();
        b.try_acquire(10 * SEC).unwrap();
        assert!(b.try_acquire(10 * SEC).is_err());
    }

    #[test]
    fn the_word_has_its_cache_lines_to_itself() {
        let line = std::mem::align_of::<CachePadded<u8>>();
        assert_eq!(std::mem::align_of::<TokenBucket>(), line);
        let b = TokenBucket::new(params(1, 1), 0);
        let word = &*b.tat as *const AtomicU64 as usize;
        let start = &b as *const TokenBucket as usize;
        assert_eq!(word % line, 0);
        // Nothing else of the bucket lives on the word's padded lines.
        let params_at = &b.params as *const BucketParams as usize;
        assert!(
            params_at >= word + line || params_at + std::mem::size_of::<BucketParams>() <= word
        );
        assert!(start <= word);
    }

    #[test]
    fn check_reads_without_taking() {
        let b = TokenBucket::new(params(1, 1), 0);
        assert!(b.check(0).is_ok());
        assert!(b.check(0).is_ok());
        b.try_acquire(0).unwrap();
        assert_eq!(b.check(0), Err(RetryAfter::from_nanos(SEC)));
    }

    #[test]
    fn concurrent_acquires_at_one_instant_admit_exactly_capacity() {
        const THREADS: usize = 4;
        // Smaller under Miri (`cargo miri test --lib -- sync::` runs this module).
        const ATTEMPTS: usize = if cfg!(miri) { 100 } else { 10_000 };
        const CAPACITY: u64 = if cfg!(miri) { 100 } else { 1_000 };
        let b = TokenBucket::new(params(CAPACITY, 1), 42);
        let barrier = Barrier::new(THREADS);
        let admitted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        (0..ATTEMPTS).filter(|_| b.try_acquire(42).is_ok()).count()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, CAPACITY as usize);
        assert_eq!(b.available(42), 0.0);
    }
}
