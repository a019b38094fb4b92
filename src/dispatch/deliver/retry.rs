//! Retry schedule: exponential backoff with full jitter.
//!
//! The ceiling before attempt `n ≥ 2` is Harn's `Exponential{base, cap}` schedule (reference
//! §6.3): `min(cap, base · 2^(n-2))`, i.e. base, 2·base, 4·base, … up to `cap`. The delay actually
//! used is uniform in `[0, ceiling]` ("full jitter", Brooker, "Exponential Backoff And Jitter",
//! AWS Architecture Blog, 2015), which spreads the retries of many events that failed together
//! instead of sending them back in synchronized waves.
//!
//! `max_attempts` counts every attempt, the first included (Harn `retry.max`): with 7 there are
//! at most 6 retries, and `delay_before(8, …)` is `None` (exhausted → DLQ `retry_exhausted`).
//!
//! Overflow-safe: the doubling is computed in `u128` nanoseconds with the exponent bounded, and
//! delays are at most `u64::MAX` nanoseconds (584 years).
#![forbid(unsafe_code)]

use std::time::Duration;

use crate::dispatch::deliver::rng::SmallRng;
use crate::dispatch::spec::RetrySpec;

/// When to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts, the first included. 0 behaves as 1.
    pub max_attempts: u32,
    /// Ceiling before attempt 2.
    pub base: Duration,
    /// Largest ceiling.
    pub cap: Duration,
}

impl From<&RetrySpec> for RetryPolicy {
    fn from(c: &RetrySpec) -> Self {
        RetryPolicy {
            max_attempts: c.max_attempts,
            base: c.base,
            cap: c.cap,
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl RetryPolicy {
    /// The jitter ceiling before `attempt`: 0 for the first attempt, `min(cap, base·2^(attempt-2))`
    /// afterwards, `None` once `attempt > max_attempts`.
    pub fn ceiling(&self, attempt: u32) -> Option<Duration> {
        if attempt > self.max_attempts.max(1) {
            return None;
        }
        if attempt <= 1 {
            return Some(Duration::ZERO);
        }
        let cap = nanos(self.cap) as u128;
        let shift = (attempt - 2).min(64); // base < 2^64, so 2^64·base ≥ any cap
        let grown = (nanos(self.base) as u128) << shift;
        Some(Duration::from_nanos(grown.min(cap) as u64))
    }

    /// The delay to wait before making `attempt` (2 for the first retry): uniform in
    /// `[0, ceiling(attempt)]`; `Some(ZERO)` for attempt 0 or 1; `None` when `attempt` is past
    /// `max_attempts` (the event is exhausted).
    pub fn delay_before(&self, attempt: u32, rng: &mut SmallRng) -> Option<Duration> {
        let ceiling = self.ceiling(attempt)?;
        if ceiling.is_zero() {
            return Some(Duration::ZERO);
        }
        Some(Duration::from_nanos(rng.up_to(nanos(ceiling))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max: u32, base_ms: u64, cap_ms: u64) -> RetryPolicy {
        RetryPolicy {
            max_attempts: max,
            base: Duration::from_millis(base_ms),
            cap: Duration::from_millis(cap_ms),
        }
    }

    #[test]
    fn ceilings_follow_harn_exponential() {
        let p = policy(7, 1000, 5000);
        let c: Vec<_> = (1..=7).map(|a| p.ceiling(a).unwrap().as_millis()).collect();
        assert_eq!(c, vec![0, 1000, 2000, 4000, 5000, 5000, 5000]);
        assert_eq!(p.ceiling(8), None);
    }

    #[test]
    fn delays_are_within_zero_and_the_ceiling() {
        let p = policy(12, 100, 60_000);
        let mut rng = SmallRng::seed_from_u64(1);
        for attempt in 2..=12u32 {
            let bound = Duration::from_millis(100 * (1u64 << (attempt - 2))).min(p.cap);
            let mut max_seen = Duration::ZERO;
            for _ in 0..200 {
                let d = p.delay_before(attempt, &mut rng).unwrap();
                assert!(d <= bound, "attempt {attempt}: {d:?} > {bound:?}");
                assert!(d <= p.cap);
                max_seen = max_seen.max(d);
            }
            // Jitter really spreads: some delay lands in the upper half.
            assert!(max_seen > bound / 2, "attempt {attempt}");
        }
    }

    #[test]
    fn exhausted_attempts_give_none() {
        let mut rng = SmallRng::seed_from_u64(3);
        let p = policy(3, 10, 100);
        assert_eq!(p.delay_before(1, &mut rng), Some(Duration::ZERO));
        assert!(p.delay_before(3, &mut rng).is_some());
        assert_eq!(p.delay_before(4, &mut rng), None);
        assert_eq!(p.delay_before(u32::MAX, &mut rng), None);
        let single = policy(1, 10, 100);
        assert_eq!(single.delay_before(2, &mut rng), None);
    }

    #[test]
    fn overflow_safe() {
        let mut rng = SmallRng::seed_from_u64(9);
        let p = RetryPolicy {
            max_attempts: u32::MAX,
            base: Duration::MAX,
            cap: Duration::MAX,
        };
        assert_eq!(p.ceiling(2), Some(Duration::from_nanos(u64::MAX)));
        assert_eq!(p.ceiling(u32::MAX), Some(Duration::from_nanos(u64::MAX)));
        assert!(p.delay_before(u32::MAX, &mut rng).is_some());
        let q = policy(200, 1, 1000);
        assert_eq!(q.ceiling(100), Some(Duration::from_millis(1000)));
        assert_eq!(q.ceiling(66), Some(Duration::from_millis(1000)));
    }

    #[test]
    fn from_config() {
        let c = RetrySpec {
            max_attempts: 7,
            base: Duration::from_secs(1),
            cap: Duration::from_secs(600),
        };
        let p = RetryPolicy::from(&c);
        assert_eq!(p.ceiling(3), Some(Duration::from_secs(2)));
    }
}
