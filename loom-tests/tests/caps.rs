//! Loom models of `sluice::dispatch::trigger_caps::TriggerCaps`, each trigger's cap of the
//! dispatch window, taken and given by every core: the cap holds under concurrent takes, and a
//! give racing a take never loses or duplicates a job.
//!
//! Run: `loom-tests/run.sh --test caps`.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::dispatch::trigger_caps::TriggerCaps;

/// Two triggers with a handler and a window of 1: each may hold 1.
fn caps() -> Arc<TriggerCaps> {
    Arc::new(TriggerCaps::new(&["a", "b"], "default", 1, 2))
}

#[test]
fn caps_two_takers_never_pass_the_cap() {
    explore("caps_two_takers_never_pass_the_cap", || {
        let c = caps();
        let c2 = c.clone();
        let t = thread::spawn(move || c2.take(0));
        let mine = c.take(0);
        let theirs = t.join().unwrap();
        assert!(mine ^ theirs, "exactly one of two takes fits a cap of one");
        assert_eq!(c.held_by("a"), 1);
        assert!(c.take(1), "the other trigger's cap is its own");
    });
}

#[test]
fn caps_a_give_racing_a_take_keeps_the_count() {
    explore("caps_a_give_racing_a_take_keeps_the_count", || {
        let c = caps();
        assert!(c.take(0));
        let giver = {
            let c = c.clone();
            thread::spawn(move || c.give(0))
        };
        let taker = {
            let c = c.clone();
            thread::spawn(move || c.take(0))
        };
        giver.join().unwrap();
        let took = taker.join().unwrap();
        assert_eq!(
            c.held_by("a"),
            u64::from(took),
            "one job per successful take"
        );
    });
}
