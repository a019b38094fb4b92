//! Loom models of `sluice::sync::inbox` and `sluice::dispatch::placement::LogOwners`: the hand-off
//! of a log adopted while the node runs (`sched::logs`). Nothing put is lost whatever the
//! interleaving with the consumer's takes, and the owner set before the hand-off is the one the
//! consumer (and any core that routes an outcome after it) reads.
//!
//! Run: `loom-tests/run.sh --test inbox`.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::dispatch::placement::LogOwners;
use sluice::sync::inbox::Inbox;

#[test]
fn inbox_nothing_put_is_lost_while_the_consumer_takes() {
    explore("inbox_nothing_put_is_lost_while_the_consumer_takes", || {
        let inbox = Arc::new(Inbox::new(1));
        let producer = {
            let inbox = inbox.clone();
            thread::spawn(move || {
                inbox.put(0, 1u32).unwrap();
                inbox.put(0, 2u32).unwrap();
            })
        };
        let mut got = inbox.take(0).unwrap_or_default();
        producer.join().unwrap();
        got.extend(inbox.take(0).unwrap_or_default());
        assert_eq!(got, [1, 2], "each item once, in order");
        assert_eq!(inbox.take(0), None);
    });
}

#[test]
fn inbox_the_owner_set_before_a_hand_off_is_seen_by_its_taker() {
    explore(
        "inbox_the_owner_set_before_a_hand_off_is_seen_by_its_taker",
        || {
            let owners = LogOwners::new(&[0, 0]);
            let inbox = Arc::new(Inbox::new(2));
            let adopter = {
                let (owners, inbox) = (owners.clone(), inbox.clone());
                thread::spawn(move || {
                    owners.set(2, 1);
                    inbox.put(1, 2usize).unwrap();
                })
            };
            if let Some(logs) = inbox.take(1) {
                assert_eq!(owners.of_log(logs[0]), 1);
            }
            adopter.join().unwrap();
            assert_eq!(owners.of_log(2), 1);
        },
    );
}
