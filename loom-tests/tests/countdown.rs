//! Loom model of `sluice::sync::countdown::Countdown`, the start-up hand-over of recovered
//! events: a reader that sees every party finished sees what each did before its finish.
//!
//! Run: `loom-tests/run.sh --test countdown`.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use sluice::sync::countdown::Countdown;

#[test]
fn countdown_done_publishes_every_finishers_work() {
    explore("countdown_done_publishes_every_finishers_work", || {
        let c = Arc::new(Countdown::new());
        c.register();
        c.register();
        // What each party hands over before finishing (a job pushed into a ring).
        let work = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let parties: Vec<_> = (0..2)
            .map(|i| {
                let (c, work) = (c.clone(), work.clone());
                thread::spawn(move || {
                    work[i].store(1, Ordering::Relaxed);
                    c.finish()
                })
            })
            .collect();
        if c.done() {
            assert_eq!(
                work[0].load(Ordering::Relaxed),
                1,
                "party 0's work is visible"
            );
            assert_eq!(
                work[1].load(Ordering::Relaxed),
                1,
                "party 1's work is visible"
            );
        }
        let last: usize = parties
            .into_iter()
            .map(|t| usize::from(t.join().unwrap()))
            .sum();
        assert_eq!(last, 1, "exactly one party is the last");
        assert!(c.done());
    });
}
