//! Ingest admission: the global token bucket and a source's bucket, all or nothing.
//!
//! Both buckets are [`TokenBucket`]s ([`crate::sync::gcra`]: GCRA in one cache-padded atomic
//! word, a pure decision, an injected clock). [`Admission`] takes a token from the global bucket
//! and one from a source's bucket (the caller passes the bucket of its
//! [`crate::ingest::sources::SourceEntry`]) or neither: acquire global, then source, refund
//! global if the source refuses (the short window this opens is discussed on
//! [`Admission::try_admit`]). A refusal carries the wait of the refusing bucket, which becomes
//! the 503's `Retry-After` ([`Exhausted::retry_after_secs`]).
#![forbid(unsafe_code)]

use crate::sync::gcra::TokenBucket;
/// The parameter and wait types of [`Admission`]'s API (defined with the algorithm).
pub use crate::sync::gcra::{BucketParams, RetryAfter};

/// Which bucket refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BucketKind {
    Global,
    Source,
}

/// No token: which bucket had none and how long until it has one (the pipeline answers
/// `503 ingest_saturated` with `Retry-After: {retry_after_secs()}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted {
    /// Time until the refusing bucket has a token; when both buckets are empty, the longer of
    /// the two, so the client is not invited back into a second refusal.
    pub retry_after: RetryAfter,
    /// The refusing bucket; when both are empty, the one with the longer wait (`Global` on a tie).
    pub bucket: BucketKind,
}

impl Exhausted {
    /// The `Retry-After` header value (`max(1, floor(seconds))`).
    pub const fn retry_after_secs(&self) -> u64 {
        self.retry_after.retry_after_secs()
    }
}

/// The global bucket, admitting all-or-nothing together with a source's bucket.
///
/// The per-source buckets live in [`SourceTable`](super::sources::SourceTable) entries.
#[derive(Debug)]
pub struct Admission {
    global: TokenBucket,
}

impl Admission {
    /// A full global bucket as of `now`.
    pub fn new(global: BucketParams, now: u64) -> Self {
        Admission {
            global: TokenBucket::new(global, now),
        }
    }

    pub fn global(&self) -> &TokenBucket {
        &self.global
    }

    /// Take one token from the global bucket and one from `source` (a source's bucket), or
    /// neither.
    ///
    /// Order: acquire global; if the source bucket then refuses, refund the global token. A
    /// global refusal leaves the source bucket untouched (it is only read, for the max wait).
    /// The caller does the counting (`count_refusal(IngestSaturated)`, backpressure metrics).
    ///
    /// The refund window: between the global acquire and its refund (a few nanoseconds, nothing
    /// blocks in between) the global bucket holds one token less than it should. A request on
    /// another core that meets the global bucket at exactly its last token in that window is
    /// refused with a wait of about one emission interval (1/refill; 1 ms at the default rate,
    /// so `Retry-After: 1`). This errs only toward refusing, never toward admitting more than
    /// the budget; the token itself is returned exactly (a refund is never lost and cannot
    /// overfill); and making the two buckets one atomic step would need a lock or a multi-word
    /// CAS shared by all cores on every request, which costs far more than a rare spurious 503.
    pub fn try_admit(&self, source: &TokenBucket, now: u64) -> Result<(), Exhausted> {
        if let Err(global_wait) = self.global.try_acquire(now) {
            return Err(match source.check(now) {
                Err(source_wait) if source_wait > global_wait => Exhausted {
                    retry_after: source_wait,
                    bucket: BucketKind::Source,
                },
                _ => Exhausted {
                    retry_after: global_wait,
                    bucket: BucketKind::Global,
                },
            });
        }
        if let Err(source_wait) = source.try_acquire(now) {
            self.global.refund(now);
            return Err(Exhausted {
                retry_after: source_wait,
                bucket: BucketKind::Source,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! Admission over plain buckets; how sources map to buckets (and the shared overflow
    //! bucket) is tested in `ingest::sources`.
    use super::*;
    use crate::sync::clock::{Clock, ManualClock};
    use std::time::Duration;

    const SEC: u64 = 1_000_000_000;

    fn params(capacity: u64, refill: u64) -> BucketParams {
        BucketParams::new(capacity, refill).unwrap()
    }

    /// Admission with a full global bucket of `global` and a source bucket factory of `source`
    /// (capacity, refill), both full at 0.
    fn admission(global: (u64, u64), source: (u64, u64)) -> (Admission, impl Fn() -> TokenBucket) {
        (Admission::new(params(global.0, global.1), 0), move || {
            TokenBucket::new(params(source.0, source.1), 0)
        })
    }

    #[test]
    fn source_capacity_two_refill_one_third_refused_with_retry_after_one() {
        let clock = ManualClock::new(0);
        let (adm, source) = admission((100, 100), (2, 1));
        let src = source();
        adm.try_admit(&src, clock.now_nanos()).unwrap();
        adm.try_admit(&src, clock.now_nanos()).unwrap();
        let r = adm.try_admit(&src, clock.now_nanos()).unwrap_err();
        assert_eq!(r.bucket, BucketKind::Source);
        assert_eq!(r.retry_after_secs(), 1);
        clock.advance(Duration::from_secs(1));
        adm.try_admit(&src, clock.now_nanos()).unwrap();
    }

    #[test]
    fn empty_source_refunds_the_global_token() {
        let (adm, source) = admission((3, 1), (1, 1));
        let (a, b) = (source(), source());
        adm.try_admit(&a, 0).unwrap();
        assert_eq!(adm.global().available(0), 2.0);
        for _ in 0..5 {
            assert_eq!(adm.try_admit(&a, 0).unwrap_err().bucket, BucketKind::Source);
        }
        assert_eq!(
            adm.global().available(0),
            2.0,
            "refused requests must not leak tokens"
        );
        adm.try_admit(&b, 0).unwrap();
        assert_eq!(adm.global().available(0), 1.0);
    }

    #[test]
    fn empty_global_leaves_the_source_untouched() {
        let (adm, source) = admission((1, 1), (5, 1));
        let (a, b) = (source(), source());
        adm.try_admit(&a, 0).unwrap();
        let r = adm.try_admit(&b, 0).unwrap_err();
        assert_eq!(
            (r.bucket, r.retry_after),
            (BucketKind::Global, RetryAfter::from_nanos(SEC))
        );
        assert_eq!(b.available(0), 5.0);
        assert_eq!(a.available(0), 4.0);
    }

    #[test]
    fn retry_after_comes_from_the_refusing_bucket_and_is_at_least_one() {
        // Source refuses (capacity 1, 1/s): half a second after its token went, half to wait.
        let (adm, source) = admission((1000, 1000), (1, 1));
        let s = source();
        adm.try_admit(&s, 0).unwrap();
        let r = adm.try_admit(&s, SEC / 2).unwrap_err();
        assert_eq!(
            (r.bucket, r.retry_after),
            (BucketKind::Source, RetryAfter::from_nanos(SEC / 2))
        );
        assert_eq!(r.retry_after_secs(), 1);

        // Global refuses with a short wait (1 ms): the header is still 1.
        let (adm, source) = admission((1, 1000), (10, 1));
        let s = source();
        adm.try_admit(&s, 0).unwrap();
        let r = adm.try_admit(&s, 0).unwrap_err();
        assert_eq!(
            (r.bucket, r.retry_after),
            (BucketKind::Global, RetryAfter::from_nanos(SEC / 1000))
        );
        assert_eq!(r.retry_after_secs(), 1);

        // Both empty: the longer wait wins, and names its bucket.
        let (adm, source) = admission((1, 1000), (1, 1));
        let s = source();
        adm.try_admit(&s, 0).unwrap();
        let r = adm.try_admit(&s, 0).unwrap_err();
        assert_eq!(
            (r.bucket, r.retry_after),
            (BucketKind::Source, RetryAfter::from_nanos(SEC))
        );

        // A long wait is floored to whole seconds.
        let (adm, source) = admission((100, 1), (1, 1));
        let s = source();
        adm.try_admit(&s, 0).unwrap();
        let r = adm.try_admit(&s, 0).unwrap_err();
        assert_eq!(r.retry_after_secs(), 1);
    }

    #[test]
    fn concurrent_admission_admits_exactly_the_smaller_budget() {
        const THREADS: usize = 4;
        const ATTEMPTS: usize = 5_000;
        let (adm, source) = admission((10_000, 1), (300, 1));
        let hot = source();
        let admitted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    let (adm, hot) = (&adm, &hot);
                    s.spawn(move || {
                        (0..ATTEMPTS)
                            .filter(|_| adm.try_admit(hot, 7).is_ok())
                            .count()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, 300);
        // Every refunded global token came back: exactly 300 spent.
        assert_eq!(adm.global().available(7), 10_000.0 - 300.0);
    }
}
