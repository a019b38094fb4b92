//! Unit tests of the return schedule on the manual clock.

use super::*;
use crate::ingest::bucket::{BucketKind, Exhausted, RetryAfter};
use crate::sync::clock::{Clock, ManualClock};
use std::time::Duration;

const SEC: u64 = NANOS_PER_SEC;

fn at(secs: f64) -> ManualClock {
    ManualClock::new((secs * SEC as f64) as u64)
}

#[test]
fn refusals_take_the_earliest_second_with_room() {
    let sched = ReturnSchedule::new(1000);
    let clock = at(100.25);
    let src = SourcePromise::new();
    let got: Vec<u64> = (0..7)
        .map(|_| sched.queue_full(clock.now_nanos(), &src, 3.0))
        .collect();
    assert_eq!(got, [1, 1, 1, 2, 2, 2, 3]);
    assert_eq!(sched.ring(Constraint::Backlog).promised(101), 3);
    assert_eq!(sched.ring(Constraint::Backlog).promised(103), 1);
    // The same source kept asking before its promise: counted, and never a better slot.
    assert_eq!(src.early_returns(), 6);
}

#[test]
fn more_room_reopens_earlier_seconds_despite_the_hint() {
    let ring = SlotRing::new();
    assert_eq!(
        (0..4).map(|_| ring.take(10, 11, 2)).collect::<Vec<_>>(),
        [Some(11), Some(11), Some(12), Some(12)]
    );
    // The hint says 11 and 12 are full for a room of 2; with a room of 3 they are not.
    assert_eq!(ring.take(10, 11, 3), Some(11));
    assert_eq!(ring.take(10, 11, 2), Some(13));
    // A later minimum is respected and does not move the hint past free seconds.
    assert_eq!(ring.take(10, 20, 2), Some(20));
    assert_eq!(ring.take(10, 11, 2), Some(13));
    assert_eq!(ring.take(10, 11, 2), Some(14));
}

#[test]
fn past_the_cap_refusals_spread_over_the_last_window() {
    let sched = ReturnSchedule::new(1000);
    let now = 7 * SEC;
    let mut got = Vec::new();
    for i in 0..(MAX_RETURN_SECS + 2 * SPREAD_SECS) {
        // Distinct sources, so no source floor is involved.
        let src = SourcePromise::new();
        got.push(sched.queue_full(now + i, &src, 1.0));
    }
    let filled: Vec<u64> = (1..=MAX_RETURN_SECS).collect();
    assert_eq!(got[..MAX_RETURN_SECS as usize], filled[..]);
    let spread = &got[MAX_RETURN_SECS as usize..];
    let low = MAX_RETURN_SECS - SPREAD_SECS + 1;
    assert!(
        spread.iter().all(|s| (low..=MAX_RETURN_SECS).contains(s)),
        "{spread:?}"
    );
    // Round-robin: every second of the window twice, none more.
    for s in low..=MAX_RETURN_SECS {
        assert_eq!(spread.iter().filter(|&&x| x == s).count(), 2, "{spread:?}");
        assert_eq!(sched.ring(Constraint::Backlog).promised(7 + s), 3);
    }
}

#[test]
fn nothing_draining_means_the_last_window() {
    let sched = ReturnSchedule::new(1000);
    for rate in [0.0, 0.5, f64::NAN] {
        let secs = sched.queue_full(3 * SEC, &SourcePromise::new(), rate);
        assert!(
            secs > MAX_RETURN_SECS - SPREAD_SECS && secs <= MAX_RETURN_SECS,
            "{secs}"
        );
    }
}

#[test]
fn slots_are_recycled_as_time_passes() {
    let ring = SlotRing::new();
    assert_eq!(ring.take(0, 1, 1), Some(1));
    assert_eq!(ring.take(0, 1, 1), Some(2));
    // 64 s later, second 65 uses the slot of second 1: the old promise does not count.
    assert_eq!(ring.take(64, 65, 1), Some(65));
    assert_eq!(ring.promised(1), 0);
    assert_eq!(ring.promised(65), 1);
    // A caller with an old clock reading (a stalled thread at second 0) asking for second 1
    // finds the slot serving a later second: treated as full, never overwritten.
    let fresh = SlotRing::new();
    assert_eq!(fresh.take(64, 65, 1), Some(65));
    assert_eq!(fresh.take(0, 1, 1), Some(2));
    assert_eq!(fresh.promised(65), 1);
}

#[test]
fn gauge_windows_count_promises_by_distance() {
    let ring = SlotRing::new();
    for (first, n) in [(1, 2), (3, 1), (10, 4), (40, 5)] {
        for _ in 0..n {
            assert_eq!(ring.take(50, 50 + first, 10), Some(50 + first));
        }
    }
    assert_eq!(ring.windows(50), [2, 1, 4, 5]);
    // Two seconds later the promise for +1 is past, +3 is now +1.
    assert_eq!(ring.windows(52), [1, 0, 4, 5]);
    let sched = ReturnSchedule::new(5);
    sched.queue_full(0, &SourcePromise::new(), 10.0);
    let mut w = PromWriter::new();
    sched.render_prometheus(&mut w, 0);
    let text = w.as_str();
    assert!(
        text.contains("sluice_ingest_promised_returns{reason=\"queue_full\",window=\"0-1s\"} 1\n"),
        "{text}"
    );
    assert_eq!(
        text.matches("sluice_ingest_promised_returns{").count(),
        8,
        "{text}"
    );
}

#[test]
fn an_early_source_gets_no_better_slot_and_honest_returns_are_not_early() {
    let sched = ReturnSchedule::new(1000);
    let clock = at(10.9);
    let (rude, polite) = (SourcePromise::new(), SourcePromise::new());
    // Fill seconds 11..=14 (room 2) so that the rude source is promised 15.
    for _ in 0..8 {
        sched.queue_full(clock.now_nanos(), &SourcePromise::new(), 2.0);
    }
    assert_eq!(sched.queue_full(clock.now_nanos(), &rude, 2.0), 5);
    assert_eq!(rude.until(), 15 * SEC);
    // Time passes; second 13 has room again at a higher drain rate.
    clock.advance(Duration::from_secs(2));
    assert_eq!(sched.queue_full(clock.now_nanos(), &polite, 3.0), 1);
    // The rude source comes back at 12.9 instead of 15: counted, and still 15 or later.
    let back = sched.queue_full(clock.now_nanos(), &rude, 3.0);
    assert_eq!(rude.early_returns(), 1);
    assert!(12 + back >= 15, "early return got {back} s at 12.9");
    // The polite source returns when told (13.9 ≥ its 13): not early.
    clock.advance(Duration::from_secs(1));
    sched.queue_full(clock.now_nanos(), &polite, 3.0);
    assert_eq!(polite.early_returns(), 0);
}

#[test]
fn a_source_far_over_its_promise_cap_is_spread_not_piled() {
    let sched = ReturnSchedule::new(1000);
    let src = SourcePromise::new();
    // Every refusal of one source with one drained event per second: 1..=60, then the window.
    let got: Vec<u64> = (0..90).map(|_| sched.queue_full(SEC, &src, 1.0)).collect();
    let tail = &got[60..];
    let distinct: std::collections::BTreeSet<_> = tail.iter().collect();
    assert_eq!(distinct.len(), SPREAD_SECS as usize, "{tail:?}");
}

fn source_refusal(wait_nanos: u64) -> Exhausted {
    Exhausted {
        retry_after: RetryAfter::from_nanos(wait_nanos),
        bucket: BucketKind::Source,
    }
}

#[test]
fn source_bucket_refusals_are_spaced_at_the_source_refill() {
    let sched = ReturnSchedule::new(1_000_000);
    let src = SourcePromise::new();
    let now = 5 * SEC + SEC / 2;
    // Refill 4/s (250 ms apart), first token in 100 ms.
    let emission = SEC / 4;
    let got: Vec<u64> = (0..9)
        .map(|_| sched.bucket(now, &src, &source_refusal(SEC / 10), emission))
        .collect();
    // 0.1, 0.35, 0.6, 0.85 → 1; 1.1 … 1.85 → 2; 2.1 → 3.
    assert_eq!(got, [1, 1, 1, 1, 2, 2, 2, 2, 3]);
    assert_eq!(src.until(), now + SEC / 10 + 8 * emission);
    assert_eq!(src.early_returns(), 8);
    // Recorded on the bucket ring for the gauges.
    let ring = sched.ring(Constraint::Buckets);
    assert_eq!(
        (ring.promised(6), ring.promised(7), ring.promised(8)),
        (4, 4, 1)
    );
    // Honouring the ceiling always finds the token time passed: not early.
    let back = now + 3 * SEC;
    sched.bucket(back, &src, &source_refusal(SEC / 10), emission);
    assert_eq!(src.early_returns(), 8);
}

#[test]
fn source_bucket_spacing_stops_at_the_cap() {
    let sched = ReturnSchedule::new(1_000_000);
    let src = SourcePromise::new();
    let got: Vec<u64> = (0..70)
        .map(|_| sched.bucket(0, &src, &source_refusal(SEC / 2), SEC))
        .collect();
    assert_eq!(got[..60], (1..=60).collect::<Vec<_>>()[..]);
    assert!(got[60..].iter().all(|s| (46..=60).contains(s)), "{got:?}");
    assert!(src.until() <= 60 * SEC);
}

#[test]
fn global_bucket_refusals_use_the_refill_as_room() {
    let sched = ReturnSchedule::new(2);
    let refusal = Exhausted {
        retry_after: RetryAfter::from_nanos(SEC / 3),
        bucket: BucketKind::Global,
    };
    let got: Vec<u64> = (0..5)
        .map(|_| sched.bucket(0, &SourcePromise::new(), &refusal, 1))
        .collect();
    assert_eq!(got, [1, 1, 2, 2, 3]);
}

#[test]
fn concurrent_refusals_never_over_promise_a_second() {
    let ring = std::sync::Arc::new(SlotRing::new());
    let room = 7;
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let ring = ring.clone();
            std::thread::spawn(move || {
                (0..100)
                    .map(|_| ring.take(1000, 1001, room).unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort_unstable();
    // 400 promises at 7 per second fill exactly seconds 1001..=1058 (the last one partly).
    for s in 1001..=1057 {
        assert_eq!(
            all.iter().filter(|&&x| x == s).count(),
            room as usize,
            "second {s}"
        );
        assert_eq!(ring.promised(s), room);
    }
    assert_eq!(all.iter().filter(|&&x| x == 1058).count(), 1);
}

#[test]
fn every_word_has_a_cache_line_pair_to_itself() {
    use std::mem::{align_of, size_of};
    let padded = size_of::<CachePadded<AtomicU64>>();
    assert!(padded >= 64 && align_of::<SlotRing>() == align_of::<CachePadded<AtomicU64>>());
    assert_eq!(size_of::<SlotRing>(), (SLOTS + 2) * padded);
    let ring = SlotRing::new();
    let base = &ring as *const SlotRing as usize;
    let offsets = [
        &ring.slots[0] as *const _ as usize,
        &ring.slots[1] as *const _ as usize,
        &ring.hint as *const _ as usize,
        &ring.spread as *const _ as usize,
    ];
    for o in offsets {
        assert_eq!((o - base) % padded, 0, "a word not on its own padded line");
    }
}
