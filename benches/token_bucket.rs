//! Token bucket acquire cost: sluice's GCRA word vs `governor::RateLimiter::direct`, same quota.
//!
//! Both read their real clock on every call (sluice: `MonotonicClock`, i.e. `Instant`;
//! governor: its default quanta clock, and `*_std_clock`: governor on `Instant` too).
//! - `single/*_admit`: burst 1e6, refill 1e9/s: nothing is refused.
//! - `single/*_refuse`: burst 1, refill 1/s: everything after the first call is refused.
//! - `single/clock_only`, `single/sluice_admit_no_clock`: the clock read, and the bucket alone.
//! - `contended_2t/*_admit`: two threads hammer one bucket; `iter_custom` reports the wall time of
//!   `iters` acquisitions split between the threads, i.e. the aggregate time per acquisition.
//!
//! Run: `cargo bench --bench token_bucket`.

use criterion::{criterion_group, criterion_main, Criterion};
use governor::clock::MonotonicClock as StdClock;
use governor::{Quota, RateLimiter};
use sluice::sync::clock::{Clock, MonotonicClock};
use sluice::sync::gcra::{BucketParams, TokenBucket};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::{Duration, Instant};

const OPEN: (u64, u64) = (1_000_000, 1_000_000_000);
const SHUT: (u64, u64) = (1, 1);

fn sluice_bucket((burst, refill): (u64, u64)) -> TokenBucket {
    TokenBucket::new(BucketParams::new(burst, refill).expect("valid params"), 0)
}

fn governor_quota((burst, refill): (u64, u64)) -> Quota {
    let nz = |n: u64| NonZeroU32::new(n.try_into().expect("fits u32")).expect("non-zero");
    Quota::per_second(nz(refill)).allow_burst(nz(burst))
}

fn single(c: &mut Criterion) {
    let mut g = c.benchmark_group("single");
    let clock = MonotonicClock::new();
    for (name, quota) in [("admit", OPEN), ("refuse", SHUT)] {
        let bucket = sluice_bucket(quota);
        g.bench_function(format!("sluice_{name}"), |b| {
            b.iter(|| black_box(bucket.try_acquire(clock.now_nanos()).is_ok()))
        });
        let limiter = RateLimiter::direct(governor_quota(quota));
        g.bench_function(format!("governor_{name}"), |b| {
            b.iter(|| black_box(limiter.check().is_ok()))
        });
    }
    // Same clock for both: governor on `std::time::Instant` as well.
    let limiter = RateLimiter::direct_with_clock(governor_quota(OPEN), &StdClock);
    g.bench_function("governor_admit_std_clock", |b| {
        b.iter(|| black_box(limiter.check().is_ok()))
    });
    // The split of `sluice_admit`: the clock read alone, and the bucket on a simulated clock.
    g.bench_function("clock_only", |b| b.iter(|| black_box(clock.now_nanos())));
    let bucket = sluice_bucket(OPEN);
    let mut now = 0u64;
    g.bench_function("sluice_admit_no_clock", |b| {
        b.iter(|| {
            now += 100;
            black_box(bucket.try_acquire(now).is_ok())
        })
    });
    g.finish();
}

/// Wall time for `iters` calls of `op`, split over two threads started together.
fn two_threads(iters: u64, op: &(dyn Fn() -> bool + Sync)) -> Duration {
    let per_thread = iters.div_ceil(2);
    let barrier = Barrier::new(3);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                barrier.wait();
                for _ in 0..per_thread {
                    black_box(op());
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    })
}

fn contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("contended_2t");
    let clock = MonotonicClock::new();
    g.bench_function("sluice_admit", |b| {
        b.iter_custom(|iters| {
            let bucket = sluice_bucket(OPEN);
            two_threads(iters, &|| bucket.try_acquire(clock.now_nanos()).is_ok())
        })
    });
    g.bench_function("governor_admit", |b| {
        b.iter_custom(|iters| {
            let limiter = RateLimiter::direct(governor_quota(OPEN));
            two_threads(iters, &|| limiter.check().is_ok())
        })
    });
    g.bench_function("governor_admit_std_clock", |b| {
        b.iter_custom(|iters| {
            let limiter = RateLimiter::direct_with_clock(governor_quota(OPEN), &StdClock);
            two_threads(iters, &|| limiter.check().is_ok())
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = single, contended
}
criterion_main!(benches);
