//! The injected clock.
//!
//! Every time-dependent decision (token buckets, timeouts, retry timers) reads time through
//! [`Clock`], as nanoseconds on a monotonic scale whose origin is the clock's creation.
//! `Instant::now()` appears in this file only; tests and loom models use [`ManualClock`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A monotonic time source measured in nanoseconds since an arbitrary, fixed origin.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Nanoseconds since this clock's origin. Never decreases.
    fn now_nanos(&self) -> u64;

    /// Wall-clock milliseconds since the Unix epoch, for what is stamped or persisted across a
    /// restart (retry due times, attempt times, signature timestamps), never for intervals.
    /// The real clocks read the system's ([`unix_millis`]).
    fn unix_millis(&self) -> u64 {
        unix_millis()
    }
}

/// The real clock: `Instant` elapsed since construction.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    pub fn new() -> Self {
        MonotonicClock {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // u64 nanoseconds cover 584 years of uptime.
        self.origin.elapsed().as_nanos() as u64
    }
}

/// A clock that only moves when told to; for tests and models.
#[derive(Debug, Default)]
pub struct ManualClock {
    // Written by the test driver, read by the code under test. `Relaxed` is enough: the value is
    // the whole message (no other memory is published through it).
    nanos: AtomicU64,
}

impl ManualClock {
    pub fn new(start_nanos: u64) -> Self {
        ManualClock {
            nanos: AtomicU64::new(start_nanos),
        }
    }
    pub fn advance(&self, by: std::time::Duration) {
        self.nanos
            .fetch_add(by.as_nanos() as u64, Ordering::Relaxed);
    }
    pub fn set(&self, nanos: u64) {
        self.nanos.store(nanos, Ordering::Relaxed);
    }
}

/// The wall time of a [`ManualClock`] at its origin (2025-12-01T00:00:00Z, Unix ms).
pub const MANUAL_EPOCH_MS: u64 = 1_764_547_200_000;

impl Clock for ManualClock {
    fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::Relaxed)
    }

    /// [`MANUAL_EPOCH_MS`] plus the clock's reading: wall time moves only when told, too.
    fn unix_millis(&self) -> u64 {
        MANUAL_EPOCH_MS + self.now_nanos() / 1_000_000
    }
}

/// Wall-clock milliseconds since the Unix epoch, for `received_at` stamps (not for intervals).
pub fn unix_millis() -> u64 {
    unix_micros() / 1000
}

/// Unix microseconds from the wall clock (0 before 1970). Event ids carry the microsecond within
/// the millisecond, so events accepted one after the other on different cores keep that order.
pub fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(5);
        assert_eq!(c.now_nanos(), 5);
        c.advance(Duration::from_micros(2));
        assert_eq!(c.now_nanos(), 2_005);
    }

    #[test]
    fn manual_wall_time_moves_with_the_clock() {
        let c = ManualClock::new(0);
        assert_eq!(c.unix_millis(), MANUAL_EPOCH_MS);
        c.advance(Duration::from_millis(1_500));
        assert_eq!(c.unix_millis(), MANUAL_EPOCH_MS + 1_500);
    }

    #[test]
    fn monotonic_clock_never_goes_back() {
        let c = MonotonicClock::new();
        let a = c.now_nanos();
        let b = c.now_nanos();
        assert!(b >= a);
    }
}
