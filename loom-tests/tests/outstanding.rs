//! Loom models of `sluice::dispatch::outstanding::Outstanding`, the pump window shared by all
//! cores: the bound under concurrent reservations, and no lost wake-up between a core that runs
//! out of slots and a core that releases one.
//!
//! Run: `loom-tests/run.sh --test outstanding`.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::dispatch::outstanding::Outstanding;

#[test]
fn outstanding_two_reservers_never_pass_the_bound() {
    explore("outstanding_two_reservers_never_pass_the_bound", || {
        let o = Arc::new(Outstanding::new(1));
        let o2 = o.clone();
        let t = thread::spawn(move || o2.try_acquire());
        let mine = o.try_acquire();
        let theirs = t.join().unwrap();
        assert!(
            mine ^ theirs,
            "exactly one of two reservations fits a bound of one"
        );
        assert_eq!(o.get(), 1);
    });
}

#[test]
fn outstanding_a_waiting_core_is_woken_or_sees_the_slot() {
    explore(
        "outstanding_a_waiting_core_is_woken_or_sees_the_slot",
        || {
            let o = Arc::new(Outstanding::new(1));
            assert!(o.try_acquire(), "core 0 holds the only slot");
            let releaser = {
                let o = o.clone();
                thread::spawn(move || o.release())
            };
            let waiter = {
                let o = o.clone();
                thread::spawn(move || {
                    if o.try_acquire() {
                        return true;
                    }
                    o.wait(1) && o.try_acquire()
                })
            };
            let woken = releaser.join().unwrap() & (1 << 1) != 0;
            let got_slot = waiter.join().unwrap();
            assert!(
                got_slot || woken,
                "core 1 neither took the freed slot nor was named for a wake-up"
            );
        },
    );
}
