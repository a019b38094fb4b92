//! Loom model of `sluice::dispatch::dlq::claims::ReplayClaims`, the set of dead letters on
//! their way back to the WAL, shared by every core: two replays of one entry, on two cores, hand
//! it to the WAL exactly once, whatever the interleaving of their claim, read, removal and release.
//!
//! The DLQ entry is modelled by one flag (present / removed); "hand to the WAL" is counted. A
//! replay: claim → read the entry (gone: skip) → hand it over → remove it → drop the claim. With
//! the claim taken after the read, or dropped before the removal, both could hand it over.
//!
//! Run: `loom-tests/run.sh --test replay_claims`.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use sluice::dispatch::dlq::claims::ReplayClaims;

/// One replay attempt of entry "A" (module docs); true if it handed the entry to the WAL.
fn replay(claims: &ReplayClaims, present: &AtomicBool, handed: &AtomicUsize) -> bool {
    let Ok(claim) = claims.claim("A") else {
        return false; // on its way from the other core
    };
    // Relaxed is enough: the claim's lock orders this read after the other replay's removal.
    if !present.load(Ordering::Relaxed) {
        return false; // removed by a replay that released its claim since
    }
    handed.fetch_add(1, Ordering::Relaxed);
    present.store(false, Ordering::Relaxed); // the event is durable: the entry leaves the DLQ
    drop(claim);
    true
}

#[test]
fn two_cores_replay_one_entry_exactly_once() {
    explore("two_cores_replay_one_entry_exactly_once", || {
        let gauge = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let claims = ReplayClaims::new(8, gauge.clone());
        let present = Arc::new(AtomicBool::new(true));
        let handed = Arc::new(AtomicUsize::new(0));
        let spawn = |claims: ReplayClaims| {
            let (present, handed) = (present.clone(), handed.clone());
            thread::spawn(move || replay(&claims, &present, &handed))
        };
        let a = spawn(claims.clone());
        let b = spawn(claims.clone());
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        assert!(a ^ b, "exactly one of the two replays hands the entry over");
        assert_eq!(handed.load(Ordering::Relaxed), 1);
        assert!(claims.is_empty(), "every claim is released");
        assert_eq!(gauge.load(std::sync::atomic::Ordering::Relaxed), 0);
    });
}

/// A failed append gives the entry back (claim dropped, entry kept): a later replay may take
/// it, but never while the first is on its way, and never after it was removed.
#[test]
fn a_failed_replay_leaves_the_entry_for_one_more() {
    explore("a_failed_replay_leaves_the_entry_for_one_more", || {
        let gauge = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let claims = ReplayClaims::new(8, gauge);
        let present = Arc::new(AtomicBool::new(true));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let handed = Arc::new(AtomicUsize::new(0));
        let failing = {
            let (claims, present, in_flight) = (claims.clone(), present.clone(), in_flight.clone());
            thread::spawn(move || {
                if let Ok(claim) = claims.claim("A") {
                    if present.load(Ordering::Relaxed) {
                        assert_eq!(in_flight.fetch_add(1, Ordering::Relaxed), 0);
                        in_flight.fetch_sub(1, Ordering::Relaxed); // the append failed
                    }
                    drop(claim);
                }
            })
        };
        let (p, h) = (present.clone(), handed.clone());
        let ok = thread::spawn(move || {
            let Ok(claim) = claims.claim("A") else { return };
            if p.load(Ordering::Relaxed) {
                assert_eq!(
                    in_flight.fetch_add(1, Ordering::Relaxed),
                    0,
                    "two on their way"
                );
                h.fetch_add(1, Ordering::Relaxed);
                p.store(false, Ordering::Relaxed);
                in_flight.fetch_sub(1, Ordering::Relaxed);
            }
            drop(claim);
        });
        failing.join().unwrap();
        ok.join().unwrap();
        assert!(handed.load(Ordering::Relaxed) <= 1);
    });
}
