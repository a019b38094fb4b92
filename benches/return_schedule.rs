//! Cost of one `Retry-After` from the return schedule (`sluice::ingest::schedule`) on the
//! refusal path: `ReturnSchedule::queue_full` with the real clock read on every call.
//!
//! - `single/room`: room 1e9/s, so every refusal finds room in the first second it looks at.
//! - `single/full`: room 200/s under a steady stream of refusals: the ring fills to the 60 s cap
//!   within the warm-up and every later refusal reads the hint, then spreads (the overload case).
//! - `contended_2t/full`: two threads refuse concurrently on one schedule; `iter_custom` reports
//!   the wall time of `iters` refusals split between the threads (aggregate time per refusal).
//!
//! Run: `cargo bench --bench return_schedule`.

use criterion::{criterion_group, criterion_main, Criterion};
use sluice::ingest::schedule::{ReturnSchedule, SourcePromise};
use sluice::sync::clock::{Clock, MonotonicClock};
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn single(c: &mut Criterion) {
    let clock = MonotonicClock::new();
    let mut g = c.benchmark_group("single");
    for (name, room) in [("room", 1e9), ("full", 200.0)] {
        let sched = ReturnSchedule::new(1000);
        let src = SourcePromise::new();
        g.bench_function(name, |b| {
            b.iter(|| black_box(sched.queue_full(clock.now_nanos(), &src, room)))
        });
    }
    g.finish();
}

fn contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("contended_2t");
    g.bench_function("full", |b| {
        b.iter_custom(|iters| {
            let sched = Arc::new(ReturnSchedule::new(1000));
            let clock = Arc::new(MonotonicClock::new());
            let start = Arc::new(Barrier::new(3));
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let (sched, clock, start) = (sched.clone(), clock.clone(), start.clone());
                    std::thread::spawn(move || {
                        let src = SourcePromise::new();
                        start.wait();
                        for _ in 0..iters / 2 {
                            black_box(sched.queue_full(clock.now_nanos(), &src, 200.0));
                        }
                    })
                })
                .collect();
            start.wait();
            let t0 = Instant::now();
            for h in handles {
                h.join().expect("bench thread");
            }
            t0.elapsed()
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = single, contended
}
criterion_main!(benches);
