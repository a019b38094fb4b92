//! Loom models of the durable-backlog bound with an absorbing trigger
//! (`sluice::sched::backlog`): the events/bytes counters and the absorb budget are separate
//! atomics, so their bounds must hold under every interleaving of reservations and releases.
//!
//! Every model runs its contenders on spawned threads, joins them from the model body, and
//! asserts that more than one interleaving was explored.
#![cfg(loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::sched::backlog::{Backlog, Reserved};

/// Two absorbing reservations and one refusing one race on a backlog bounded at one event, with
/// an absorb budget that holds exactly one more event. Whatever the interleaving: at most two
/// succeed (one within the bound, one absorbed), at most one is absorbed, the budget in use never
/// passes its bound, and the counters hold exactly the successful reservations (a refused one
/// leaves nothing behind).
#[test]
fn absorb_budget_and_bounds_hold_under_races() {
    explore("absorb_budget_and_bounds_hold_under_races", || {
        let backlog = Arc::new(Backlog::new(1, 1000, 0.9, 0.5).with_absorb(10, &["gh"]));
        let spawn = |trigger: &'static str| {
            let b = backlog.clone();
            thread::spawn(move || b.reserve_for(trigger, 6))
        };
        let handles = [spawn("gh"), spawn("gh"), spawn("plain")];
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let ok = results.iter().filter(|r| r.is_ok()).count() as u64;
        let absorbed = results
            .iter()
            .filter(|r| **r == Ok(Reserved::Absorbed))
            .count() as u64;
        assert!(ok >= 1 && ok <= 2, "{results:?}");
        assert!(absorbed <= 1, "{results:?}");
        assert!(backlog.absorb_bytes() <= 10);
        assert_eq!(backlog.absorb_bytes(), 6 * absorbed);
        assert_eq!(backlog.pending_events(), ok);
        assert_eq!(backlog.pending_bytes(), 6 * ok);
        assert_eq!(backlog.absorbed("gh"), absorbed);
    });
}

/// A release races an absorbing reservation on a full backlog: the release drains the budget
/// first (saturating at zero) and the counters never wrap.
#[test]
fn release_races_absorbing_reservation() {
    explore("release_races_absorbing_reservation", || {
        let backlog = Arc::new(Backlog::new(1, 1000, 0.9, 0.5).with_absorb(10, &["gh"]));
        assert_eq!(backlog.reserve_for("gh", 6), Ok(Reserved::Within));
        let releaser = {
            let b = backlog.clone();
            thread::spawn(move || b.release(6))
        };
        let reserver = {
            let b = backlog.clone();
            thread::spawn(move || b.reserve_for("gh", 6))
        };
        releaser.join().unwrap();
        let r = reserver.join().unwrap();
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(backlog.pending_events(), 1);
        assert_eq!(backlog.pending_bytes(), 6);
        assert!(backlog.absorb_bytes() <= 6);
    });
}
