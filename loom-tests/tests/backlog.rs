//! Loom models of the durable-backlog bound (`sluice::ingest::backlog`): per-trigger shares, the
//! common pool, the events/bytes totals and the absorb budget are separate atomics, so their
//! bounds must hold under every interleaving of reservations and releases.
//!
//! Every model runs its contenders on spawned threads, joins them from the model body, and
//! asserts that more than one interleaving was explored.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::ingest::backlog::{Backlog, Reserved, TriggerShare};

/// A backlog of `max` events whose triggers `ids` have explicit event shares `share` (the
/// default route off: the pool is `max − Σ shares`).
fn backlog(max: u64, ids: &[(&'static str, u64)]) -> Backlog {
    let shares: Vec<TriggerShare<'_>> = ids
        .iter()
        .map(|&(id, n)| TriggerShare {
            id,
            events: Some(n),
            bytes: None,
        })
        .collect();
    Backlog::new(max, 1000, 0.9, 0.5)
        .with_triggers(&shares, false, 0.5)
        .unwrap()
}

/// Two absorbing reservations and one refusing one race on a backlog bounded at one event, with
/// an absorb budget that holds exactly one more event. Whatever the interleaving: at most two
/// succeed (one within the bound, one absorbed), at most one is absorbed, the budget in use never
/// passes its bound, and the counters hold exactly the successful reservations (a refused one
/// leaves nothing behind).
#[test]
fn absorb_budget_and_bounds_hold_under_races() {
    explore("absorb_budget_and_bounds_hold_under_races", || {
        let backlog = Arc::new(backlog(1, &[("gh", 0), ("plain", 0)]).with_absorb(10, &["gh"]));
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
        let backlog = Arc::new(backlog(1, &[("gh", 0), ("plain", 0)]).with_absorb(10, &["gh"]));
        assert_eq!(backlog.reserve_for("gh", 6), Ok(Reserved::Within));
        let releaser = {
            let b = backlog.clone();
            thread::spawn(move || b.release_for("gh", 6))
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

/// Two triggers, each with a guaranteed share of one event, race two reservations each for a
/// pool of one event. Whatever the interleaving: each gets its own share, exactly one of them
/// the pool's event, the pool in use never passes its size, and the totals hold exactly the
/// successful reservations.
#[test]
fn shares_and_pool_hold_under_two_reservers() {
    explore("shares_and_pool_hold_under_two_reservers", || {
        let b = Arc::new(backlog(3, &[("a", 1), ("b", 1)]));
        let spawn = |trigger: &'static str| {
            let b = b.clone();
            thread::spawn(move || {
                (0..2).filter(|_| b.reserve_for(trigger, 5).is_ok()).count() as u64
            })
        };
        let (ha, hb) = (spawn("a"), spawn("b"));
        let (a, bb) = (ha.join().unwrap(), hb.join().unwrap());
        assert!(a >= 1 && bb >= 1, "each has its own share: a {a}, b {bb}");
        assert_eq!(
            a + bb,
            3,
            "the pool's one event went to exactly one of them"
        );
        assert_eq!(b.pool_used(), (1, 0), "the bytes fit the shares (250 each)");
        assert_eq!(b.pending_events(), 3);
        assert_eq!(b.pending_bytes(), 15);
        assert_eq!(b.trigger_pending("a"), (a, 5 * a));
        assert_eq!(b.trigger_pending("b"), (bb, 5 * bb));
    });
}

/// A release of the trigger holding the pool races the other trigger's borrowing: the release
/// gives the pool back first, the borrow either sees it or not, and nothing wraps or leaks.
#[test]
fn release_races_a_borrow_from_the_pool() {
    explore("release_races_a_borrow_from_the_pool", || {
        let b = Arc::new(backlog(3, &[("a", 1), ("b", 1)]));
        assert!(b.reserve_for("a", 5).is_ok());
        assert!(b.reserve_for("a", 5).is_ok()); // borrowed
        assert!(b.reserve_for("b", 5).is_ok());
        let releaser = {
            let b = b.clone();
            let slot = b.slot("a");
            thread::spawn(move || b.release_done(slot, 1, 5))
        };
        let borrower = {
            let b = b.clone();
            thread::spawn(move || b.reserve_for("b", 5).is_ok())
        };
        releaser.join().unwrap();
        let got = borrower.join().unwrap() as u64;
        assert!(b.pool_used().0 <= 1);
        assert_eq!(
            b.pool_used().0,
            got,
            "the pool holds b's borrow, or nothing"
        );
        assert_eq!(b.trigger_pending("a"), (1, 5));
        assert_eq!(b.trigger_pending("b"), (1 + got, 5 + 5 * got));
        assert_eq!(b.pending_events(), 2 + got);
    });
}

/// Trigger `a` (share 3 of 4 events, the pool 1) holds 3 events when a reload cuts its share
/// to 1 (`Backlog::resize_shares`, `ShareDim::resize`); `contender` runs on a second thread
/// meanwhile. Returns the backlog and `contender`'s result after both joined.
fn shrink_racing<R: Send + 'static>(
    contender: impl FnOnce(&Backlog) -> R + Send + 'static,
) -> (Arc<Backlog>, R) {
    let backlog = Arc::new(backlog(4, &[("a", 3), ("b", 0)]));
    for _ in 0..3 {
        assert_eq!(backlog.reserve_for("a", 1), Ok(Reserved::Within));
    }
    let share = |id, n| TriggerShare {
        id,
        events: Some(n),
        bytes: None,
    };
    let resizer = {
        let b = backlog.clone();
        thread::spawn(move || b.resize_shares(&[share("a", 1), share("b", 0)]))
    };
    let other = {
        let b = backlog.clone();
        thread::spawn(move || contender(&b))
    };
    assert_eq!(resizer.join().unwrap(), Ok(true));
    let r = other.join().unwrap();
    assert_eq!(backlog.share_of("a").0, 1);
    (backlog, r)
}

/// Releases everything `a` (and `b`) hold, then checks that no count is left behind in the pool
/// or a share.
fn drain_and_check(backlog: &Backlog, a: u64, b: u64) {
    assert_eq!(backlog.pending_events(), a + b);
    assert_eq!(backlog.trigger_pending("a").0, a);
    assert!(backlog.pending_events() <= 4, "the bound");
    for _ in 0..a {
        backlog.release_for("a", 1);
    }
    for _ in 0..b {
        backlog.release_for("b", 1);
    }
    assert_eq!(backlog.pool_used(), (0, 0));
    assert_eq!(backlog.trigger_pending("a"), (0, 0));
    assert_eq!(backlog.pending_events(), 0);
}

/// The cut races a release of one of `a`'s events: whatever the interleaving, the 2 left are
/// counted exactly (the excess moved to the pool is taken back when the release raced the
/// move), and once released nothing is left behind.
#[test]
fn shrinking_a_share_races_a_release() {
    explore("shrinking_a_share_races_a_release", || {
        let (backlog, ()) = shrink_racing(|b| b.release_for("a", 1));
        drain_and_check(&backlog, 2, 0);
    });
}

/// The cut races trigger `b` borrowing from the pool: nothing `a` holds is dropped and the bound
/// holds whichever goes first (`b` may be refused while the excess is counted in the pool
/// before the pool grows: refused, never past a bound); with `b` in, `a`'s next event waits.
#[test]
fn shrinking_a_share_races_a_borrower() {
    explore("shrinking_a_share_races_a_borrower", || {
        let (backlog, r) = shrink_racing(|b| b.reserve_for("b", 1));
        let b = u64::from(r.is_ok());
        if b == 1 {
            // Share 1 held, the pool (3) holds a's 2 past it and b's 1: a waits.
            assert!(backlog.reserve_for("a", 1).is_err());
        }
        drain_and_check(&backlog, 3, b);
    });
}
