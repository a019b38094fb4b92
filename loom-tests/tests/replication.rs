//! Loom models of `sluice::replication::state`: what the mirror thread publishes for the cores.
//! A fence is sticky (a concurrent "up" from another publish or the lease never undoes it), and
//! the acknowledged frame a core reads never goes back while acknowledgements race.
//!
//! Run: `loom-tests/run.sh --test replication`.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::replication::state::{Refuse, ReplicationState};

#[test]
fn replication_a_fence_is_never_undone_by_a_concurrent_up() {
    explore(
        "replication_a_fence_is_never_undone_by_a_concurrent_up",
        || {
            let s = Arc::new(ReplicationState::new(1));
            let up = {
                let s = s.clone();
                thread::spawn(move || s.refresh())
            };
            s.fence();
            up.join().unwrap();
            assert_eq!(s.refusal(), Some(Refuse::Fenced));
        },
    );
}

#[test]
fn replication_the_acknowledged_frame_only_moves_forward() {
    explore(
        "replication_the_acknowledged_frame_only_moves_forward",
        || {
            let s = Arc::new(ReplicationState::new(1));
            let core = s.core(0).unwrap().clone();
            let (one, two) = (core.next_frame(), core.next_frame());
            let acker = {
                let core = core.clone();
                thread::spawn(move || {
                    core.set_acked(two);
                    core.set_acked(one);
                })
            };
            let first = core.acked();
            let second = core.acked();
            assert!(second >= first, "acked went back: {first} then {second}");
            acker.join().unwrap();
            assert_eq!(core.acked(), two);
            assert_eq!(core.in_flight(), 0);
        },
    );
}
