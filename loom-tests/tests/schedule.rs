//! Loom models of the return schedule (`sluice::ingest::schedule`): concurrent refusals taking
//! one-second slots by CAS on the packed `second | count` words, on the real code compiled with
//! `--cfg sluice_loom`.
//!
//! Every model runs its contenders on spawned threads, joins them from the model body, and
//! asserts that more than one interleaving was explored.
#![cfg(sluice_loom)]

mod common;
use common::explore_with_stack;

/// A schedule is two rings of 64 padded words built on the stack before it moves into its `Arc`:
/// more than loom's default coroutine stack, so every model body runs on a 4 MiB thread.
fn explore(name: &str, f: impl Fn() + Send + Sync + 'static) -> usize {
    explore_with_stack(name, 4 << 20, f)
}

use loom::sync::Arc;
use loom::thread;
use sluice::ingest::schedule::{Constraint, ReturnSchedule, SlotRing, SourcePromise};

const SEC: u64 = 1_000_000_000;

/// Two refusals race for a second with room for one: they get two different seconds, and each
/// second holds exactly one promise (the CAS never over-promises, the hint never skips).
#[test]
fn two_refusals_never_over_promise_a_slot() {
    explore("two_refusals_never_over_promise_a_slot", || {
        let ring = Arc::new(SlotRing::new());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let r = ring.clone();
                thread::spawn(move || r.take(0, 1, 1).expect("room within the cap"))
            })
            .collect();
        let mut got: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, [1, 2]);
        assert_eq!((ring.promised(1), ring.promised(2)), (1, 1));
    });
}

/// Two refusals of one source race after the first second filled up (so the hint is in play):
/// room 2 per second, three promises in total across seconds 1 and 2, never three in one; the
/// source's promise ends at the later of the two seconds whatever the order of the `fetch_max`.
#[test]
fn one_source_two_refusals_keep_the_bound_and_the_latest_promise() {
    explore("one_source_two_refusals", || {
        let sched = Arc::new(ReturnSchedule::new(1000));
        let source = Arc::new(SourcePromise::new());
        // Fills second 1 to its room of 2 (another source).
        let other = SourcePromise::new();
        sched.queue_full(0, &other, 2.0);
        sched.queue_full(0, &other, 2.0);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (s, src) = (sched.clone(), source.clone());
                thread::spawn(move || s.queue_full(0, &src, 2.0))
            })
            .collect();
        let got: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(got, [2, 2]);
        let ring = sched.ring(Constraint::Backlog);
        assert_eq!(
            (ring.promised(1), ring.promised(2), ring.promised(3)),
            (2, 2, 0)
        );
        assert_eq!(source.until(), 2 * SEC);
    });
}
