//! Loom models of the admission token buckets: the GCRA word's CAS loop (`sluice::sync::gcra`)
//! and the all-or-nothing refund (`sluice::ingest::bucket`), on the real code compiled with
//! `--cfg sluice_loom`.
//!
//! Every model runs its contenders on spawned threads, joins them from the model body, and
//! asserts that more than one interleaving was explored.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::ingest::bucket::Admission;
use sluice::ingest::sources::SourceTable;
use sluice::sync::gcra::{BucketParams, TokenBucket};

/// Two threads race for the only token of a capacity-1 bucket: exactly one wins, and the bucket
/// is empty afterwards (no token is created or lost by the CAS loop).
#[test]
fn one_token_two_contenders() {
    explore("one_token_two_contenders", || {
        let bucket = Arc::new(TokenBucket::new(BucketParams::new(1, 1).unwrap(), 0));
        let wins = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (b, w) = (bucket.clone(), wins.clone());
                thread::spawn(move || {
                    if b.try_acquire(5).is_ok() {
                        w.fetch_add(1, loom::sync::atomic::Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(wins.load(loom::sync::atomic::Ordering::Relaxed), 1);
        assert!(bucket.try_acquire(5).is_err());
    });
}

/// A refund racing with an acquire: capacity 2, A takes and gives back, B takes. One token is
/// left whatever the interleaving.
#[test]
fn refund_races_acquire() {
    explore("refund_races_acquire", || {
        let bucket = Arc::new(TokenBucket::new(BucketParams::new(2, 1).unwrap(), 0));
        let a = {
            let b = bucket.clone();
            thread::spawn(move || {
                b.try_acquire(0).unwrap();
                b.refund(0);
            })
        };
        let b = {
            let b = bucket.clone();
            thread::spawn(move || {
                b.try_acquire(0).unwrap();
            })
        };
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(bucket.available(0), 1.0);
    });
}

/// All-or-nothing across buckets: global capacity 2, source capacity 1, two requests of that
/// source. Exactly one is admitted, and the loser's global token always comes back.
#[test]
fn all_or_nothing_refunds_global() {
    explore("all_or_nothing_refunds_global", || {
        let admission = Arc::new(Admission::new(BucketParams::new(2, 1).unwrap(), 0));
        let table = SourceTable::new(10, BucketParams::new(1, 1).unwrap());
        let source = table.lookup("a");
        let admitted = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (adm, src, n) = (admission.clone(), source.clone(), admitted.clone());
                thread::spawn(move || {
                    if adm.try_admit(src.bucket(), 0).is_ok() {
                        n.fetch_add(1, loom::sync::atomic::Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(admitted.load(loom::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(admission.global().available(0), 1.0);
    });
}
