//! The outcome index fed record by record: late outcomes, retries, attempts' range, a lost
//! range, retirement, a committed batch read from its bytes, and entries passed over.

use super::*;
use crate::wal::format::{AttemptEntry, AttemptOutcome, DoneEntry, DoneRecord, EventRecord};
use crate::wal::format::{AttemptsRecord, RetryRecord};

fn event() -> Record {
    Record::Event(EventRecord {
        event_id: "01J00000000000000000000000".into(),
        trigger_id: "t".into(),
        source: "s".into(),
        received_at_ms: 1,
        headers: Vec::new(),
        body: Vec::new(),
        replay_of: None,
        body_json: Default::default(),
    })
}

fn calls(lsns: &[Lsn], outcome: AttemptOutcome) -> Record {
    let entry = |&event_lsn: &Lsn| AttemptEntry {
        event_lsn,
        attempt: 1,
        at_ms: 2,
        destination: 0,
        outcome,
        latency_us: 1,
        retry_after_ms: None,
        response_prefix: Vec::new(),
    };
    Record::Attempts(AttemptsRecord {
        entries: lsns.iter().map(entry).collect(),
    })
}

fn done(lsns: &[Lsn], status: DoneStatus) -> Record {
    let entry = |&event_lsn: &Lsn| DoneEntry {
        event_lsn,
        status,
        attempts: 1,
    };
    Record::Done(DoneRecord {
        entries: lsns.iter().map(entry).collect(),
    })
}

fn retry(event_lsn: Lsn) -> Record {
    Record::Retry(RetryRecord {
        event_lsn,
        next_attempt: 2,
        due_at_ms: 9,
        last_error: String::new(),
    })
}

/// Feeds `recs` from the index's next LSN on.
fn feed(ix: &mut OutcomeIndex, recs: impl IntoIterator<Item = Record>) {
    for r in recs {
        ix.observe(ix.next_lsn(), &r).unwrap();
    }
}

#[test]
fn slot_is_its_documented_size() {
    assert_eq!(std::mem::size_of::<Slot>(), SLOT_BYTES);
}

#[test]
fn an_outcome_100k_records_later_is_exact() {
    let mut ix = OutcomeIndex::new(1);
    feed(&mut ix, [event()]);
    feed(
        &mut ix,
        [calls(&[1], AttemptOutcome::Status(500)), retry(1)],
    );
    assert_eq!(
        ix.get(1).unwrap().outcome,
        Outcome::Retrying { retry_lsn: 3 }
    );
    feed(&mut ix, (0..100_000).map(|_| event()));
    feed(&mut ix, [calls(&[1], AttemptOutcome::Status(200))]);
    feed(&mut ix, [done(&[1], DoneStatus::Delivered)]);
    let f = ix.get(1).unwrap();
    assert_eq!(f.outcome, Outcome::Done(DoneStatus::Delivered));
    assert_eq!(f.calls, 2);
    assert_eq!(f.attempts, Some((2, 100_004)));
    assert_eq!(ix.get(4).unwrap().outcome, Outcome::Pending);
    assert_eq!(ix.get(2), None, "an attempts record is not an event");
    assert_eq!(ix.get(0), None);
    assert_eq!(ix.get(ix.next_lsn()), None);
}

#[test]
fn skips_and_dead_letters_keep_their_status_and_count_no_call() {
    let mut ix = OutcomeIndex::new(10);
    feed(&mut ix, [event(), event()]);
    let skip = AttemptOutcome::Skipped(DoneStatus::SkippedDebounced);
    feed(
        &mut ix,
        [calls(&[10], skip), calls(&[11, 11], AttemptOutcome::Io)],
    );
    feed(&mut ix, [done(&[10], DoneStatus::SkippedDebounced)]);
    feed(&mut ix, [done(&[11], DoneStatus::DeadLettered)]);
    let (a, b) = (ix.get(10).unwrap(), ix.get(11).unwrap());
    assert_eq!(a.outcome, Outcome::Done(DoneStatus::SkippedDebounced));
    assert_eq!(a.calls, 0);
    assert_eq!(b.outcome, Outcome::Done(DoneStatus::DeadLettered));
    assert_eq!((b.calls, b.attempts), (2, Some((13, 13))));
}

#[test]
fn a_lost_range_marks_the_unfinished_until_an_outcome_lands() {
    let mut ix = OutcomeIndex::new(1);
    feed(
        &mut ix,
        [event(), event(), event(), done(&[1], DoneStatus::Delivered)],
    );
    assert_eq!(ix.accept_loss(5, 50), Ok(2));
    assert_eq!(ix.next_lsn(), 50);
    assert_eq!(
        ix.get(1).unwrap().outcome,
        Outcome::Done(DoneStatus::Delivered)
    );
    assert_eq!(ix.get(2).unwrap().outcome, Outcome::Lost);
    feed(&mut ix, [done(&[3], DoneStatus::Delivered)]);
    assert_eq!(
        ix.get(3).unwrap().outcome,
        Outcome::Done(DoneStatus::Delivered)
    );
    assert_eq!(ix.get(2).unwrap().outcome, Outcome::Lost);
    let wrong = ix.accept_loss(7, 9);
    assert_eq!(
        wrong,
        Err(IndexError::OutOfOrder {
            expected: 51,
            got: 7
        })
    );
}

#[test]
fn records_out_of_order_are_refused_and_entries_naming_no_event_are_passed_over() {
    let mut ix = OutcomeIndex::new(1);
    feed(&mut ix, [event(), event()]);
    let gap = ix.observe(5, &event());
    assert_eq!(
        gap,
        Err(IndexError::OutOfOrder {
            expected: 3,
            got: 5
        })
    );
    assert_eq!(ix.next_lsn(), 3);
    // One good entry and one naming its own record (no event): the good one applies.
    assert_eq!(ix.observe(3, &done(&[1, 3], DoneStatus::Delivered)), Ok(1));
    assert_eq!(
        ix.get(1).unwrap().outcome,
        Outcome::Done(DoneStatus::Delivered)
    );
    assert_eq!(ix.get(3), None, "an outcome record is no event");
    // An entry ahead of its record, one naming LSN 0 (below the index), one naming an
    // outcome record: passed over, the rest applied.
    let ahead = ix.observe(4, &calls(&[2, 9, 3], AttemptOutcome::Status(200)));
    assert_eq!(ahead, Ok(2));
    assert_eq!(ix.observe(5, &retry(0)), Ok(1));
    assert_eq!(ix.next_lsn(), 6);
    let two = ix.get(2).unwrap();
    assert_eq!(
        (two.outcome, two.calls, two.attempts),
        (Outcome::Pending, 1, Some((4, 4)))
    );
}

#[test]
fn retirement_drops_the_head_and_outcomes_for_retired_events_are_passed_over() {
    let mut ix = OutcomeIndex::new(1);
    feed(&mut ix, (0..10).map(|_| event()));
    ix.retire_below(6);
    assert_eq!(ix.len(), 5);
    assert_eq!(ix.get(5), None);
    assert_eq!(ix.get(6).unwrap().outcome, Outcome::Pending);
    let late = ix.observe(11, &done(&[3, 7], DoneStatus::Delivered));
    assert_eq!(late, Ok(1));
    assert_eq!(
        ix.get(7).unwrap().outcome,
        Outcome::Done(DoneStatus::Delivered)
    );
    ix.retire_below(100);
    assert!(ix.is_empty());
    assert_eq!(ix.next_lsn(), 100);
}

/// A batch as the log writes it (records, their commit marker) is folded in as a scan reads
/// it, lost ranges included.
#[test]
fn a_committed_batch_is_folded_in_from_its_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("core-0");
    let cfg = crate::wal::WalConfig {
        durability: crate::wal::Durability::Os,
        ..crate::wal::WalConfig::new(dir.clone())
    };
    let (mut wal, _) = crate::wal::open(&cfg).unwrap();
    wal.append(&[event(), event(), event()]).unwrap();
    wal.append(&[
        calls(&[1, 2], AttemptOutcome::Status(200)),
        done(&[1, 2], DoneStatus::Delivered),
        retry(3),
    ])
    .unwrap();
    wal.sync().unwrap();
    let segs = crate::wal::segment::list_segments(&dir).unwrap();
    let bytes = std::fs::read(&segs[0].1).unwrap();
    let mut ix = OutcomeIndex::new(1);
    assert_eq!(ix.observe_batch(1, &bytes), Ok(0));
    assert_eq!(ix.next_lsn(), 7);
    let one = ix.get(1).unwrap();
    assert_eq!(
        (one.outcome, one.calls, one.attempts),
        (Outcome::Done(DoneStatus::Delivered), 1, Some((4, 4)))
    );
    assert_eq!(
        ix.get(3).unwrap().outcome,
        Outcome::Retrying { retry_lsn: 6 }
    );
    assert_eq!(
        ix.observe_batch(3, &bytes),
        Err(IndexError::OutOfOrder {
            expected: 7,
            got: 3
        })
    );
}

#[test]
fn memory_is_slot_bytes_per_record_plus_slack() {
    let mut ix = OutcomeIndex::new(1);
    let n = 100_000;
    feed(&mut ix, (0..n).map(|_| event()));
    let per = ix.bytes() as f64 / n as f64;
    assert!(per >= SLOT_BYTES as f64, "{per}");
    assert!(per <= 2.0 * SLOT_BYTES as f64, "{per}");
}

/// An index recovery built short of its log's next LSN continues there, the gap given up; one
/// ahead of it starts afresh.
#[test]
fn continue_at_gives_up_the_gap_or_starts_afresh() {
    let mut ix = OutcomeIndex::new(1);
    feed(&mut ix, [event(), event()]);
    ix.continue_at(10);
    assert_eq!(ix.next_lsn(), 10);
    assert_eq!(ix.get(1).unwrap().outcome, Outcome::Lost);
    assert_eq!(ix.get(5), None);
    ix.continue_at(10);
    assert_eq!((ix.next_lsn(), ix.len()), (10, 9), "unchanged when aligned");
    ix.continue_at(4);
    assert_eq!((ix.next_lsn(), ix.len()), (4, 0));
    assert!(ix.observe(4, &event()).is_ok());
    // An empty index keeps no slots for the gap: a log lost whole, continuing far on.
    let mut empty = OutcomeIndex::new(1);
    empty.continue_at(5_000_001);
    assert_eq!((empty.next_lsn(), empty.len()), (5_000_001, 0));
}
