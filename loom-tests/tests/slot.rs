//! Loom model of `sluice::cluster::slot::Slot`, the hand-off between a shared destination's
//! owner core and the node's Redis client thread: the owner never reads a grant older than the
//! one a `fresh` mark announced, and a mark is never lost (it is seen exactly once).
//!
//! Run: `loom-tests/run.sh --test slot`.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::cluster::slot::{Desire, Grant, Slot};

#[test]
fn slot_a_fresh_mark_is_seen_once_and_announces_its_grant() {
    explore(
        "slot_a_fresh_mark_is_seen_once_and_announces_its_grant",
        || {
            let s = Arc::new(Slot::new(0));
            let client = {
                let s = s.clone();
                thread::spawn(move || {
                    let asked = s.desire();
                    s.store_grant(Grant {
                        seq: 1,
                        target: 2,
                        valid_until: 10,
                        cluster_in_use: 2,
                    });
                    s.mark_fresh();
                    asked
                })
            };
            s.publish(Desire {
                want: 3,
                ceiling: 1,
                ..Desire::default()
            });
            let early = s.take_fresh();
            if early {
                assert_eq!(s.read().0.seq, 1, "a fresh mark before its grant");
            }
            let asked = client.join().unwrap();
            assert!(
                asked.want == 0 || (asked.want, asked.ceiling) == (3, 1),
                "a torn desire"
            );
            let late = s.take_fresh();
            assert!(
                early ^ late,
                "the mark was seen {} times",
                early as u8 + late as u8
            );
            assert_eq!(s.read().0.seq, 1);
        },
    );
}
