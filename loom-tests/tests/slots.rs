//! Loom models of `sluice::sync::slots::Slots`, the operator readers' bound
//! (`sched::readers::MAX_READS`): never more slots taken than the bound, and a slot given back
//! is taken again.
//!
//! Run: `loom-tests/run.sh --test slots`.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::sync::slots::Slots;

#[test]
fn slots_two_takers_never_pass_the_bound() {
    explore("slots_two_takers_never_pass_the_bound", || {
        let s = Arc::new(Slots::new(1));
        let s2 = s.clone();
        let t = thread::spawn(move || s2.try_take());
        let mine = s.try_take();
        let theirs = t.join().unwrap();
        assert!(
            mine ^ theirs,
            "exactly one of two takers gets the only slot"
        );
        assert_eq!(s.taken(), 1);
    });
}

#[test]
fn slots_a_slot_given_back_concurrently_is_counted_exactly() {
    explore(
        "slots_a_slot_given_back_concurrently_is_counted_exactly",
        || {
            let s = Arc::new(Slots::new(2));
            assert!(s.try_take());
            let giver = {
                let s = s.clone();
                thread::spawn(move || s.give_back())
            };
            let taker = {
                let s = s.clone();
                thread::spawn(move || s.try_take())
            };
            giver.join().unwrap();
            assert!(taker.join().unwrap(), "one slot was free all along");
            assert_eq!(s.taken(), 1);
            assert!(s.try_take());
            assert!(!s.try_take(), "the bound still holds");
        },
    );
}
