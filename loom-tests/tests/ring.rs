//! Loom models of `sluice::ring` (the real code, compiled with `--cfg sluice_loom` so its atomics and
//! `UnsafeCell` come from loom through `sluice::sync`).
//!
//! Run: `loom-tests/run.sh` (= `RUSTFLAGS="--cfg sluice_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release`).
//! Each model runs its producers and its consumer on spawned threads, joins them from the model
//! body, and counts its iterations so that a model that explores nothing fails.
//!
//! Caveat, measured while writing these: loom 0.7's DPOR misses some interleavings in which a
//! thread's first operation is an atomic load (loom issue #392); e.g. with threads `P: W1; W2;
//! R` and `C: R; W4`, it never runs `C` entirely between `P`'s `W2` and `R`. So where an outcome
//! matters (a push refused as `Full`, a push that finds room, a wrap-around), the model counts the
//! iterations that reached it and asserts the count is non-zero, and state that only serves as
//! set-up (a full ring) is built in the model body before the threads start.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc as StdArc;

use loom::thread;
use sluice::ring::{channel, PushError, Sender};

/// Pushes `v`, yielding to the model checker while the ring is full. Returns the value back if
/// the ring is closed.
fn push_retrying<T: Send>(tx: &Sender<T>, mut v: T) -> Result<(), T> {
    loop {
        match tx.try_push(v) {
            Ok(()) => return Ok(()),
            Err(PushError::Full(back)) => {
                v = back;
                thread::yield_now();
            }
            Err(PushError::Closed(back)) => return Err(back),
        }
    }
}

/// (a) 2 producers + 1 consumer on a capacity-2 ring: every value is either refused (`Full`,
/// handed back) or received exactly once, and each producer's accepted values arrive in the order
/// it pushed them. Nobody spins: the consumer makes a fixed number of `try_pop` attempts while
/// the producers run, and the model body drains the rest after joining (spin loops would blow up
/// loom's branch budget without adding interleavings of interest).
#[test]
fn two_producers_one_consumer() {
    const PER_PRODUCER: u32 = 2;
    // Coverage: interleavings where a push was refused, and where all four values went through
    // a capacity-2 ring (so slots were reused: the stamps wrapped a lap).
    let saw_full = StdArc::new(AtomicUsize::new(0));
    let saw_wrap = StdArc::new(AtomicUsize::new(0));
    let (full, wrap) = (saw_full.clone(), saw_wrap.clone());
    explore("two_producers_one_consumer", move || {
        let (tx, mut rx) = channel::<u32>(2);
        let producers: Vec<_> = (0..2u32)
            .map(|p| {
                let tx = tx.clone();
                thread::spawn(move || {
                    let mut refused = Vec::new();
                    for i in 0..PER_PRODUCER {
                        match tx.try_push(p * 10 + i) {
                            Ok(()) => {}
                            Err(PushError::Full(v)) => {
                                assert_eq!(v, p * 10 + i, "Full must hand back the value");
                                refused.push(v);
                            }
                            Err(PushError::Closed(_)) => panic!("nobody closed the ring"),
                        }
                    }
                    refused
                })
            })
            .collect();
        drop(tx);
        let consumer = thread::spawn(move || {
            let popped: Vec<u32> = (0..3).filter_map(|_| rx.try_pop()).collect();
            (popped, rx)
        });
        let mut refused = Vec::new();
        for p in producers {
            refused.extend(p.join().unwrap());
        }
        let (mut popped, mut rx) = consumer.join().unwrap();
        assert!(rx.is_closed(), "the last sender is gone");
        while let Some(v) = rx.try_pop() {
            popped.push(v);
        }
        assert!(rx.is_empty());
        for p in 0..2u32 {
            let mine: Vec<u32> = popped.iter().copied().filter(|v| v / 10 == p).collect();
            let mut accepted: Vec<u32> = (0..PER_PRODUCER).map(|i| p * 10 + i).collect();
            accepted.retain(|v| !refused.contains(v));
            assert_eq!(
                mine, accepted,
                "producer {p}: lost, duplicated or reordered"
            );
        }
        if refused.is_empty() {
            wrap.fetch_add(1, Ordering::Relaxed);
        } else {
            full.fetch_add(1, Ordering::Relaxed);
        }
    });
    assert!(saw_full.load(Ordering::Relaxed) > 0, "never saw Full");
    assert!(saw_wrap.load(Ordering::Relaxed) > 0, "never wrapped around");
}

/// (b) A full ring refuses with `Full` and hands back the very value that was offered, while
/// the consumer popping concurrently may make room (then the push succeeds). Either way nothing
/// is lost or duplicated. The ring is filled before the threads start (see the caveat at the
/// top), and the test asserts that loom reached both outcomes.
#[test]
fn full_ring_hands_the_value_back() {
    let saw_full = StdArc::new(AtomicUsize::new(0));
    let saw_room = StdArc::new(AtomicUsize::new(0));
    let (full, room) = (saw_full.clone(), saw_room.clone());
    explore("full_ring_hands_the_value_back", move || {
        let (tx, mut rx) = channel::<u32>(2);
        tx.try_push(1).unwrap();
        tx.try_push(2).unwrap();
        let (full, room) = (full.clone(), room.clone());
        let producer = thread::spawn(move || match tx.try_push(3) {
            Ok(()) => {
                room.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(PushError::Full(v)) => {
                full.fetch_add(1, Ordering::Relaxed);
                assert_eq!(v, 3, "Full must hand back the offered value");
                Some(v)
            }
            Err(PushError::Closed(_)) => panic!("nobody closed the ring"),
        });
        let consumer = thread::spawn(move || {
            let first = rx.try_pop();
            (first, rx)
        });
        let refused = producer.join().unwrap();
        let (first, mut rx) = consumer.join().unwrap();
        assert_eq!(
            first,
            Some(1),
            "the ring was full: the oldest value is ready"
        );
        let mut got = vec![1];
        while let Some(v) = rx.try_pop() {
            got.push(v);
        }
        assert_eq!(
            got,
            if refused.is_some() {
                vec![1, 2]
            } else {
                vec![1, 2, 3]
            }
        );
    });
    assert!(saw_full.load(Ordering::Relaxed) > 0, "never saw Full");
    assert!(
        saw_room.load(Ordering::Relaxed) > 0,
        "never saw the push succeed"
    );
}

/// (c) Close while pushing: the consumer pops, closes, then drains; the producer keeps pushing.
/// Every value is either popped (once, in order) or handed back as `Closed`, and once a push
/// is refused as `Closed` every later one is too.
#[test]
fn close_while_pushing() {
    const N: u32 = 3;
    explore("close_while_pushing", || {
        let (tx, mut rx) = channel::<u32>(2);
        let producer = thread::spawn(move || {
            let mut returned = Vec::new();
            for v in 0..N {
                match push_retrying(&tx, v) {
                    Ok(()) => assert!(returned.is_empty(), "a push succeeded after Closed"),
                    Err(back) => {
                        assert_eq!(back, v, "Closed must hand back the offered value");
                        returned.push(back);
                    }
                }
            }
            returned
        });
        let consumer = thread::spawn(move || {
            let mut popped: Vec<u32> = rx.try_pop().into_iter().collect();
            rx.close();
            assert!(rx.is_closed());
            // Exact drain: after close the tail is frozen, so `is_empty()` means every value
            // that was ever accepted has been popped.
            loop {
                match rx.try_pop() {
                    Some(v) => popped.push(v),
                    None if rx.is_closed() && rx.is_empty() => break,
                    None => thread::yield_now(),
                }
            }
            popped
        });
        let returned = producer.join().unwrap();
        let popped = consumer.join().unwrap();
        let expected_popped: Vec<u32> = (0..popped.len() as u32).collect();
        assert_eq!(
            popped, expected_popped,
            "popped values lost, duplicated or reordered"
        );
        let mut all = popped;
        all.extend(returned);
        assert_eq!(
            all,
            (0..N).collect::<Vec<_>>(),
            "a value was lost or duplicated"
        );
    });
}

/// (d) Values left in the ring are dropped exactly once when the last handle goes, whichever
/// side drops last, including values pushed concurrently with the receiver's drop.
#[test]
fn leftovers_are_dropped_with_the_last_handle() {
    struct Counted(StdArc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    explore("leftovers_are_dropped_with_the_last_handle", || {
        let drops = StdArc::new(AtomicUsize::new(0));
        let (tx, mut rx) = channel::<Counted>(2);
        let d = drops.clone();
        let producer = thread::spawn(move || {
            for _ in 0..2 {
                // A refused value is dropped here by its owner.
                let _ = tx.try_push(Counted(d.clone()));
            }
        });
        let consumer = thread::spawn(move || {
            drop(rx.try_pop());
            drop(rx);
        });
        producer.join().unwrap();
        consumer.join().unwrap();
        assert_eq!(drops.load(Ordering::Relaxed), 2, "leaked or double-dropped");
    });
}
