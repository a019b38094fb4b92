//! Loom models of `sluice::dispatch::horizon::Horizon`, the order horizon every core publishes
//! and every owner's gates read (with the real job ring, `sluice::ring`): a job a published
//! horizon covers is in the ring the reader drains after reading it, and an idle core's wake
//! (publishing 0) is seen before anything it hands over next.
//!
//! Run: `loom-tests/run.sh --test horizon`.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::dispatch::horizon::{Horizon, IDLE};
use sluice::ring::channel;

/// A core pushes a job of order time 5 into the owner's ring, then publishes horizon 6 (every
/// event older than 6 handed). The owner reads the least horizon, then drains its ring: if the
/// horizon covers time 5, the job is there.
#[test]
fn horizon_a_covered_job_is_in_the_ring_the_reader_drains() {
    explore(
        "horizon_a_covered_job_is_in_the_ring_the_reader_drains",
        || {
            let h = Arc::new(Horizon::new(1));
            let (tx, mut rx) = channel::<u64>(2);
            let producer = {
                let h = h.clone();
                thread::spawn(move || {
                    tx.try_push(5).expect("room");
                    h.publish(0, 6);
                })
            };
            let seen = h.least();
            let mut got = Vec::new();
            while let Some(j) = rx.try_pop() {
                got.push(j);
            }
            if seen > 5 {
                assert_eq!(got, [5], "the horizon covers a job not yet in the ring");
            }
            producer.join().unwrap();
        },
    );
}

/// An idle core (horizon `IDLE`) wakes: it publishes 0, then hands a job over and publishes
/// its horizon. A reader that sees the job in the ring never reads the core's `IDLE` after it:
/// it reads 0 or the new horizon, so it never lets a newer event pass the job's.
#[test]
fn horizon_a_waking_core_is_never_read_idle_after_its_job() {
    explore(
        "horizon_a_waking_core_is_never_read_idle_after_its_job",
        || {
            let h = Arc::new(Horizon::new(2));
            h.publish(0, IDLE);
            h.publish(1, 100);
            let (tx, mut rx) = channel::<u64>(2);
            let core = {
                let h = h.clone();
                thread::spawn(move || {
                    h.publish(0, 0);
                    tx.try_push(7).expect("room");
                    h.publish(0, 8);
                })
            };
            let mut got = None;
            while got.is_none() {
                got = rx.try_pop();
                if got.is_none() {
                    thread::yield_now();
                }
            }
            let least = h.least();
            assert!(least <= 8, "read IDLE after the waking core's job: {least}");
            core.join().unwrap();
        },
    );
}
