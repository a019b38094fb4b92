//! A destination's outbound rate budget: GCRA without atomics.
//!
//! The same algorithm as the ingest buckets ([`crate::sync::gcra`], whose pure [`decide`] this
//! uses): one theoretical arrival time (TAT), emission interval `T = 1 s / per_sec`, burst
//! `burst`. The budget is owned by the destination's core, so the TAT is a plain `u64`. A new
//! budget is full (`TAT = 0`).
#![forbid(unsafe_code)]

use crate::sync::gcra::{decide, BucketParams, Conformance, ParamError};

/// A destination's outbound rate budget as configured (`rate = { per_sec, burst }`): validated
/// by `config` (`per_sec` 1..=1e9, `burst` ≥ 1), turned into a [`RateBudget`] per owner core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateSpec {
    pub per_sec: u64,
    pub burst: u64,
}

/// GCRA over a plain `u64`.
#[derive(Debug, Clone)]
pub struct RateBudget {
    tat: u64,
    params: BucketParams,
}

impl RateBudget {
    /// `per_sec` sustained calls per second (1..=1e9), `burst` back to back (≥ 1).
    pub fn new(per_sec: u64, burst: u64) -> Result<Self, ParamError> {
        Ok(RateBudget {
            tat: 0,
            params: BucketParams::new(burst, per_sec)?,
        })
    }

    /// Whether a token could be taken at `now`: `Err(nanos until one can)` otherwise.
    pub fn peek(&self, now: u64) -> Result<(), u64> {
        match decide(self.tat, now, &self.params) {
            Conformance::Admit { .. } => Ok(()),
            Conformance::Refuse { retry_after } => Err(retry_after.as_nanos()),
        }
    }

    /// Takes one token at `now`, or says how many nanoseconds until one is available (> 0).
    pub fn try_take(&mut self, now: u64) -> Result<(), u64> {
        match decide(self.tat, now, &self.params) {
            Conformance::Admit { new_tat } => {
                self.tat = new_tat;
                Ok(())
            }
            Conformance::Refuse { retry_after } => Err(retry_after.as_nanos()),
        }
    }

    pub fn params(&self) -> &BucketParams {
        &self.params
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn burst_then_spacing() {
        // 10/s, burst 3: three back to back, then one every 100 ms.
        let mut r = RateBudget::new(10, 3).unwrap();
        let t0 = 5_000 * MS;
        for _ in 0..3 {
            assert_eq!(r.try_take(t0), Ok(()));
        }
        assert_eq!(r.try_take(t0), Err(100 * MS));
        assert_eq!(r.peek(t0 + 99 * MS), Err(MS));
        assert_eq!(r.try_take(t0 + 100 * MS), Ok(()));
        assert_eq!(r.try_take(t0 + 100 * MS), Err(100 * MS));
        // Steady state: exactly one per interval.
        let mut taken = 0;
        let mut t = t0 + 100 * MS;
        while t <= t0 + 1100 * MS {
            if r.try_take(t).is_ok() {
                taken += 1;
            }
            t += MS;
        }
        assert_eq!(taken, 10);
    }

    #[test]
    fn idle_refills_only_to_burst() {
        let mut r = RateBudget::new(1, 2).unwrap();
        assert!(r.try_take(0).is_ok());
        assert!(r.try_take(0).is_ok());
        assert!(r.try_take(0).is_err());
        let later = 3_600_000 * MS;
        assert!(r.try_take(later).is_ok());
        assert!(r.try_take(later).is_ok());
        assert!(r.try_take(later).is_err());
    }

    #[test]
    fn peek_consumes_nothing() {
        let mut r = RateBudget::new(1, 1).unwrap();
        for _ in 0..5 {
            assert!(r.peek(0).is_ok());
        }
        assert!(r.try_take(0).is_ok());
        assert!(r.peek(0).is_err());
    }

    #[test]
    fn rejects_bad_params() {
        assert!(RateBudget::new(0, 1).is_err());
        assert!(RateBudget::new(1, 0).is_err());
        assert!(RateBudget::new(2_000_000_000, 1).is_err());
    }
}
