//! Loom model of the in-flight body budget (`sluice::net::budget`): the reserve CAS loop and
//! the release `fetch_sub`, on the real code compiled with `--cfg sluice_loom`.
//!
//! Two threads reserve and release against one small budget; whatever the interleaving the
//! reserved total never exceeds the limit, and every byte comes back. Both contenders run on
//! spawned threads; the model asserts that more than one interleaving was explored.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::net::budget::{BodyBudget, Reservation};

/// Budget 10; each thread tries to reserve 6 (two 6s never fit together, so at least one wins
/// and never both at once), checks the bound while holding, releases, then grows a
/// `Reservation` to 4 and drops it. After both: 0 in use.
#[test]
fn two_reservers_never_exceed_the_budget_and_return_to_zero() {
    explore("two_reservers", || {
        let budget = Arc::new(BodyBudget::new(10));
        let wins = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (b, w) = (budget.clone(), wins.clone());
                thread::spawn(move || {
                    if b.try_reserve(6) {
                        assert!(b.in_use() <= b.limit());
                        w.fetch_add(1, loom::sync::atomic::Ordering::Relaxed);
                        b.release(6);
                    }
                    let mut r = Reservation::new(b.clone());
                    // 4 fits next to the other thread's 6 or 4: never refused.
                    assert!(r.grow_to(4));
                    assert!(b.in_use() <= b.limit());
                    drop(r);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert!(wins.load(loom::sync::atomic::Ordering::Relaxed) >= 1);
        assert_eq!(budget.in_use(), 0);
    });
}
