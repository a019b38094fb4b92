//! Unit tests of the backlog's shares, pool, readiness and absorb budget.

use super::*;
use crate::metrics::prom::PromWriter;

/// The default route on and given a default-sized share (`ingest.default_route_max_pending =
/// {}`): three slots divide the reserve.
const DEFAULT_WITH_SHARE: DefaultRoute = DefaultRoute {
    on: true,
    share: Some((None, None)),
};

fn two_triggers(max_events: u64, max_bytes: u64) -> Backlog {
    let t = |id| TriggerShare {
        id,
        events: None,
        bytes: None,
    };
    Backlog::new(max_events, max_bytes, 0.9, 0.5)
        .with_triggers(&[t("a"), t("b")], DEFAULT_WITH_SHARE, 0.5)
        .unwrap()
}

/// `n` triggers with default shares; the default route on without a share (its default when
/// `ingest.default_route = true` is set beside triggers).
fn triggers_and_default_route(n: usize, max_events: u64) -> Backlog {
    const IDS: [&str; 3] = ["a", "b", "c"];
    let shares: Vec<TriggerShare<'_>> = IDS[..n]
        .iter()
        .map(|&id| TriggerShare {
            id,
            events: None,
            bytes: None,
        })
        .collect();
    Backlog::new(max_events, 1 << 30, 0.9, 0.5)
        .with_triggers(&shares, true, 0.5)
        .unwrap()
}

#[test]
fn one_trigger_holds_the_whole_bound_beside_a_default_route_without_a_share() {
    let b = triggers_and_default_route(1, 100);
    assert_eq!((b.share_of("a").0, b.share_of("default").0), (50, 0));
    assert_eq!(b.pool_size().0, 50);
    assert_eq!(fill(&b, "a", 300), 100, "its share and the whole pool");
    assert_eq!(fill(&b, "unknown", 10), 0, "the default route only borrows");
    // Stalled with the pool full: the node cannot accept, whatever the default route.
    assert!(b.is_saturated());
    b.release_done(b.slot("a"), 60, 600);
    assert!(!b.is_saturated());
    assert_eq!(fill(&b, "other-source", 5), 5, "it borrows from the pool");
}

#[test]
fn the_default_route_without_a_share_does_not_count_for_readiness() {
    let b = triggers_and_default_route(2, 1000);
    assert_eq!((b.share_of("a").0, b.pool_size().0), (250, 500));
    assert_eq!(fill(&b, "a", 3000), 750);
    // The pool is full but only one of the two triggers is at its share: ready.
    assert!(!b.is_saturated(), "{}", b.node_fill());
    // Both triggers' shares full: more than half of the triggers, with the pool full.
    assert_eq!(fill(&b, "b", 3000), 250);
    assert!(b.is_saturated());
}

/// Reserves `n` events of 10 bytes for `id`; how many fit.
fn fill(b: &Backlog, id: &str, n: u64) -> u64 {
    (0..n).filter(|_| b.reserve_for(id, 10).is_ok()).count() as u64
}

#[test]
fn a_stalled_trigger_takes_its_share_and_the_pool_never_the_others_shares() {
    let b = two_triggers(1000, 1 << 30);
    // Two triggers and the default route: 166 guaranteed each, a pool of 502.
    assert_eq!((b.share_of("a").0, b.pool_size().0), (166, 502));
    assert_eq!(fill(&b, "a", 3000), 166 + 502);
    assert_eq!(b.pool_used().0, 502);
    assert!(b.trigger_at_share("a"));
    // B (and the default route) still get their guaranteed shares.
    assert_eq!(fill(&b, "b", 200), 166);
    assert_eq!(
        fill(&b, "unknown-trigger", 200),
        166,
        "the default route's slot"
    );
    assert_eq!(b.pending_events(), 1000);
    assert_eq!(b.trigger_pending("a").0, 668);
    // A release of A frees the pool first: B may borrow it.
    b.release_done(b.slot("a"), 2, 20);
    assert_eq!(b.pool_used().0, 500);
    assert_eq!(fill(&b, "b", 5), 2);
    assert_eq!(b.trigger_pending("b"), (168, 1680));
}

#[test]
fn explicit_shares_and_the_byte_dimension() {
    let b = Backlog::new(100, 1000, 0.9, 0.5)
        .with_triggers(
            &[
                TriggerShare {
                    id: "a",
                    events: Some(10),
                    bytes: Some(100),
                },
                TriggerShare {
                    id: "b",
                    events: None,
                    bytes: None,
                },
            ],
            false,
            0.5,
        )
        .unwrap();
    // Default route off: its share is 0; b gets half the bound minus a's share.
    assert_eq!(b.share_of("a"), (10, 100));
    assert_eq!(b.share_of("b"), (40, 400));
    assert_eq!(b.share_of("default"), (0, 0));
    assert_eq!(b.pool_size(), (50, 500));
    // a's bytes run out first: 10 own (100 bytes) + 50 pool bytes... in events of 30 bytes.
    let ok = (0..100).filter(|_| b.reserve_for("a", 30).is_ok()).count();
    assert_eq!(
        ok,
        3 + 16,
        "3 × 30 in its 100 bytes, 16 × 30 in the pool's 500"
    );
    assert_eq!(b.pending_bytes(), 19 * 30);
    assert!(b.reserve_for("b", 30).is_ok());
    let too_much = Backlog::new(10, 1000, 0.9, 0.5).with_triggers(
        &[TriggerShare {
            id: "a",
            events: Some(11),
            bytes: None,
        }],
        true,
        0.5,
    );
    assert!(too_much.unwrap_err().contains("max_pending_events = 10"));
}

#[test]
fn release_for_and_failed_reservations_leave_nothing_behind() {
    let b = two_triggers(10, 100);
    // Bytes bound: 100, a's share 16, pool 52. Two events of 40: own fails, pool takes 40;
    // the second fits neither and is undone (its event too).
    assert!(b.reserve_for("a", 40).is_ok());
    assert!(b.reserve_for("a", 40).is_err());
    assert_eq!((b.pending_events(), b.pending_bytes()), (1, 40));
    b.release_for("a", 40);
    assert_eq!(
        (b.pending_events(), b.pending_bytes(), b.pool_used()),
        (0, 0, (0, 0))
    );
    // A single event larger than its share + the whole pool (16 + 52) is admitted while the
    // pool is empty, one at a time.
    assert!(
        b.reserve_for("a", 10).is_ok(),
        "a's own share: the pool stays empty"
    );
    assert!(b.reserve_for("b", 70).is_ok());
    assert!(b.reserve_for("b", 500).is_err(), "the pool is in use");
    assert!(
        b.reserve_for("a", 60).is_err(),
        "60 fits a's share + pool, so it must wait"
    );
    b.release_for("a", 10);
    b.release_for("b", 70);
    assert_eq!((b.pending_bytes(), b.pool_used().1), (0, 0));
}

#[test]
fn readiness_means_the_node() {
    let b = two_triggers(1000, 1 << 30);
    fill(&b, "a", 3000);
    // The pool is exhausted but only one of three slots is at its share: ready.
    assert!(b.node_fill() < 0.1, "{}", b.node_fill());
    assert!(!b.is_saturated());
    // A second slot at its share: more than half of them, and the pool full: saturated.
    fill(&b, "b", 166);
    assert!(b.node_fill() >= 1.0);
    assert!(b.is_saturated());
    // Hysteresis: below high but above low stays saturated; below low clears.
    b.release_done(b.slot("b"), 30, 300); // b at 136/166 = 0.82
    assert!(b.is_saturated());
    b.release_done(b.slot("b"), 60, 600); // 76/166 = 0.46 < 0.5
    assert!(!b.is_saturated());
}

#[test]
fn recovered_events_borrow_the_pool_and_leave_the_shares() {
    let b = two_triggers(100, 1 << 30);
    // More recovered than the whole bound (a smaller bound than before the restart).
    b.preload(150, 1500);
    assert_eq!(b.pool_used().0, 150);
    assert_eq!(fill(&b, "a", 100), 16, "its share only: the pool is taken");
    let r = b.recovered_slot();
    b.release_done(r, 150, 1500);
    assert_eq!(b.pool_used(), (0, 0));
    assert_eq!(fill(&b, "a", 100), 52);
}

#[test]
fn absorbing_triggers_fill_past_their_share_and_the_pool_up_to_the_budget() {
    let t = |id| TriggerShare {
        id,
        events: None,
        bytes: None,
    };
    let b = Backlog::new(4, 1000, 0.9, 0.5)
        .with_triggers(&[t("gh"), t("generic")], false, 0.5)
        .unwrap()
        .with_absorb(100, &["gh"]);
    // Shares 1 + 1, pool 2: gh takes 1 own + 2 pool, then absorbs.
    for _ in 0..3 {
        assert_eq!(b.reserve_for("gh", 10), Ok(Reserved::Within));
    }
    assert_eq!(b.reserve_for("gh", 10), Ok(Reserved::Absorbed));
    // generic keeps its own share, but nothing past it.
    assert_eq!(b.reserve_for("generic", 10), Ok(Reserved::Within));
    assert!(b.reserve_for("generic", 10).is_err());
    for _ in 0..9 {
        assert_eq!(b.reserve_for("gh", 10), Ok(Reserved::Absorbed));
    }
    assert_eq!(b.absorb_bytes(), 100);
    assert!(b.reserve_for("gh", 1).is_err(), "past the absorb budget");
    assert_eq!((b.absorbed("gh"), b.absorbed("generic")), (10, 0));
    assert_eq!((b.pending_events(), b.pending_bytes()), (14, 140));
    // Releases drain the budget first.
    b.release_done(b.slot("gh"), 2, 20);
    assert_eq!(b.absorb_bytes(), 80);
    b.release_done(b.slot("gh"), 11, 110);
    assert_eq!((b.absorb_bytes(), b.trigger_pending("gh")), (0, (0, 0)));
    assert_eq!(b.reserve_for("gh", 10), Ok(Reserved::Within));
}

#[test]
fn retry_after_follows_each_triggers_own_drain_rate() {
    let b = two_triggers(1000, 1 << 30);
    assert_eq!(b.reserve_for("a", 10).map(|_| ()), Ok(()));
    fill(&b, "a", 3000);
    // Nothing drains yet: the maximum.
    assert_eq!(b.reserve_for("a", 10), Err(MAX_RETRY_AFTER_SECS));
    // b drains 100/s, a nothing: a's refusal still says the maximum.
    b.release_done(b.slot("b"), 0, 0);
    b.stats[b.slot("b")]
        .drained
        .store(100, std::sync::atomic::Ordering::Relaxed);
    b.update_drain_rate(1.0);
    assert_eq!(b.drain_rate_of("b"), 100.0);
    assert_eq!(b.drain_rate_of("a"), 0.0);
    assert_eq!(b.reserve_for("a", 10), Err(MAX_RETRY_AFTER_SECS));
    // a drains 10/s, all of it given back to the pool (borrowed first): room comes back to a
    // at 10 (its own) + 10 (the pool's) per second: (668 − 83) / 20 → 30 s.
    b.release_done(b.slot("a"), 10, 100);
    b.update_drain_rate(1.0);
    assert_eq!(b.drain_rate_of("a"), 20.0);
    fill(&b, "a", 10);
    assert_eq!(b.reserve_for("a", 10), Err(30));
}

#[test]
fn node_retry_after_and_wal_bound() {
    let b = Backlog::with_wal_limit(100, 1 << 30, 0.9, 0.5, 100);
    assert_eq!(b.retry_after_secs(), MAX_RETRY_AFTER_SECS);
    b.preload(100, 100);
    b.record_drained(10, 1.0);
    assert_eq!(b.retry_after_secs(), 5); // 50 over the low mark at 10/s
    b.set_wal_bytes(60);
    assert!(!b.wal_full(40));
    assert!(b.wal_full(41));
}

#[test]
fn metrics_per_trigger_and_pool() {
    let b = two_triggers(1000, 1 << 20);
    fill(&b, "a", 200);
    b.count_refusal("a", Refusal::QueueFull);
    let mut w = PromWriter::new();
    b.render_prometheus(&mut w);
    for line in [
        "sluice_backlog_events{trigger=\"a\"} 200\n",
        "sluice_backlog_bytes{trigger=\"a\"} 2000\n",
        "sluice_backlog_events{trigger=\"b\"} 0\n",
        "sluice_backlog_share_events{trigger=\"a\"} 166\n",
        "sluice_backlog_pool_events{state=\"used\"} 34\n",
        "sluice_backlog_pool_events{state=\"size\"} 502\n",
        "sluice_ingest_trigger_refusals_total{reason=\"queue_full\",trigger=\"a\"} 1\n",
        "sluice_ingest_trigger_refusals_total{reason=\"queue_full\",trigger=\"default\"} 0\n",
    ] {
        assert!(w.as_str().contains(line), "{line}: {}", w.as_str());
    }
}

/// The groups written at run time own whole cache lines, apart from each other and from the
/// fields a reservation only reads (the `Backlog` docs, "Layout").
#[test]
fn written_groups_sit_on_separate_cache_lines() {
    use std::mem::align_of;
    let b = two_triggers(100, 1000);
    let line = align_of::<CachePadded<AtomicU64>>();
    assert!(line >= 64);
    let at = |p: *const u8| p as usize / line;
    let groups = [
        ("totals", at(&*b.totals as *const Totals as *const u8)),
        (
            "saturated",
            at(&*b.saturated as *const AtomicBool as *const u8),
        ),
        ("pumps", at(&*b.pumps as *const PumpShared as *const u8)),
        (
            "pump_stats",
            at(&*b.pump_stats as *const PumpStats as *const u8),
        ),
        (
            "absorb",
            at(&*b.absorb_bytes as *const AtomicU64 as *const u8),
        ),
    ];
    // The read-only fields (the struct's own, unpadded lines).
    let reads = [
        at(&b.max_events as *const u64 as *const u8),
        at(&b.absorb_max_bytes as *const u64 as *const u8),
        at(&b.slot_of as *const HashMap<String, usize> as *const u8),
        at(&b.absorbing as *const Vec<bool> as *const u8),
    ];
    for (i, (name, l)) in groups.iter().enumerate() {
        for (other, m) in &groups[i + 1..] {
            assert_ne!(l, m, "{name} and {other} share a cache line");
        }
        assert!(
            !reads.contains(l),
            "{name} shares a line with read-only fields"
        );
    }
    let stats: Vec<usize> = (b.stats.iter())
        .map(|s| at(&**s as *const SlotStats as *const u8))
        .collect();
    for (i, l) in stats.iter().enumerate() {
        assert!(!stats[i + 1..].contains(l), "two slots' stats share a line");
    }
}

#[test]
fn a_reload_resizes_shares_live_and_refuses_what_has_no_slot() {
    let b = two_triggers(1000, 1 << 30);
    let share = |id, events| TriggerShare {
        id,
        events,
        bytes: None,
    };
    assert_eq!(fill(&b, "a", 100), 100);
    // Unchanged: nothing to do.
    assert_eq!(
        b.resize_shares(&[share("a", None), share("b", None)]),
        Ok(false)
    );
    // a is given 20 explicitly: shares 20 / 240 / 240 (the reserve of 500 minus 20, halved),
    // the pool 500. Its 100 held stay, 80 of them now in the pool.
    assert_eq!(
        b.resize_shares(&[share("a", Some(20)), share("b", None)]),
        Ok(true)
    );
    assert_eq!((b.share_of("a").0, b.share_of("b").0), (20, 240));
    assert_eq!(b.pool_size().0, 500);
    assert_eq!((b.trigger_pending("a").0, b.pool_used().0), (100, 80));
    assert_eq!(fill(&b, "a", 1000), 420, "the rest of the pool, no more");
    assert_eq!(fill(&b, "b", 1000), 240, "b's grown share is its own");
    assert_eq!(b.pending_events(), 760);
    // A trigger without a slot of its own cannot get a share; past the bound is refused too.
    let e = b.resize_shares(&[share("new", Some(5))]).unwrap_err();
    assert!(e.contains("\"new\"") && e.contains("restart"), "{e}");
    let e = b
        .resize_shares(&[share("a", Some(900)), share("b", Some(200))])
        .unwrap_err();
    assert!(e.contains("max_pending.events"), "{e}");
    assert_eq!(b.share_of("a").0, 20, "a refused resize changes nothing");
    // A trigger the reload removed keeps its share (its events may be pending).
    assert_eq!(b.resize_shares(&[share("b", None)]), Ok(false));
}
