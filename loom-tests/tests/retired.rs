//! Loom model of `sluice::wal::RetiredCounts`: a log's commit helper publishes its cumulative
//! retired counts (at attach, then after each retirement) while the pump owning the log polls
//! them with its last generation. The pump sees whole publications only, never an older one
//! after a newer, and after the helper is done it sees the last one exactly once.
//!
//! Run: `loom-tests/run.sh --test retired`.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::wal::RetiredCounts;

fn counts(a: u64, b: u64) -> Vec<(String, u64)> {
    vec![("a".to_owned(), a), ("b".to_owned(), b)]
}

#[test]
fn retired_the_pump_sees_whole_publications_in_order() {
    explore("retired_the_pump_sees_whole_publications_in_order", || {
        let shared = Arc::new(RetiredCounts::default());
        let helper = {
            let shared = shared.clone();
            thread::spawn(move || {
                shared.publish(counts(1, 0));
                shared.publish(counts(3, 2));
            })
        };
        let mut seen = 0;
        let mut last = (0, 0);
        for _ in 0..2 {
            if let Some(list) = shared.newer(&mut seen) {
                let (a, b) = (list[0].1, list[1].1);
                // A whole publication: (1, 0) or (3, 2), never a mix, never going back.
                assert!([(1, 0), (3, 2)].contains(&(a, b)), "{a} {b}");
                assert!(a >= last.0 && b >= last.1, "went back: {last:?} -> {a} {b}");
                last = (a, b);
            }
        }
        helper.join().unwrap();
        let end = shared.newer(&mut seen);
        match end {
            Some(list) => assert_eq!((list[0].1, list[1].1), (3, 2)),
            None => assert_eq!(last, (3, 2), "the last publication was seen"),
        }
        assert!(shared.newer(&mut seen).is_none(), "each publication once");
    });
}
