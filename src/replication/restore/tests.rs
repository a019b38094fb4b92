//! The rebuild without NATS: messages built as the commit helper builds them (`FrameBuf`,
//! `pack`), fed in stream order to a fake writer.

use super::*;
use crate::replication::message::{pack, FrameBuf};
use crate::wal::format::tests::sample_event;
use crate::wal::{DoneEntry, DoneRecord, DoneStatus};

/// What the fake writer saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Record(u16, Lsn, RecordKind),
    Dead(Vec<u8>),
    Released(String),
    End,
}

#[derive(Default)]
struct Fake {
    seen: Vec<Seen>,
    records: Vec<(u16, Lsn, Record)>,
}

impl Writer for Fake {
    fn record(&mut self, log: u16, lsn: Lsn, kind: RecordKind, r: Record) -> Result<(), String> {
        self.seen.push(Seen::Record(log, lsn, kind));
        self.records.push((log, lsn, r));
        Ok(())
    }
    fn dead_letter(&mut self, entry: &[u8]) -> Result<(), String> {
        self.seen.push(Seen::Dead(entry.to_vec()));
        Ok(())
    }
    fn released(&mut self, id: &str) -> Result<(), String> {
        self.seen.push(Seen::Released(id.to_owned()));
        Ok(())
    }
    fn end_message(&mut self) -> Result<(), String> {
        self.seen.push(Seen::End);
        Ok(())
    }
}

/// One frame: events at `lsns` of each `(log, lsns)`, then `dead` and `released`, and each
/// log's last LSN as its `through`.
pub(super) fn frame(parts: &[(u16, &[u64])], dead: &[&str], released: &[&str]) -> Vec<u8> {
    let mut f = FrameBuf::default();
    for (log, lsns) in parts {
        for &lsn in *lsns {
            f.record(*log, lsn, &Record::Event(sample_event(lsn, 16)))
                .unwrap();
        }
    }
    for d in dead {
        f.dead_letter(d, d.as_bytes().to_vec());
    }
    for r in released {
        f.released(r);
    }
    for (log, lsns) in parts {
        f.through(*log, lsns.last().copied().unwrap_or(0));
    }
    f.finish()
}

pub(super) fn message(frames: &[Vec<u8>]) -> Vec<u8> {
    pack(0, frames.iter().map(|f| f.as_slice()))
}

pub(super) fn at(sequence: u64) -> At<'static> {
    At {
        subject: "sluice.node-a.core-0",
        sequence,
    }
}

#[test]
fn records_of_every_log_reach_the_writer_in_order_and_the_summary_counts_them() {
    let (mut rb, mut w) = (Rebuild::new(), Fake::default());
    let one = message(&[frame(&[(0, &[1, 2]), (3, &[1])], &[], &[])]);
    let two = message(&[
        frame(&[(0, &[3])], &[], &[]),
        frame(&[(3, &[2, 3]), (0, &[4])], &[], &[]),
    ]);
    rb.feed_bytes(at(1), &one, &mut w).unwrap();
    rb.feed_bytes(at(7), &two, &mut w).unwrap();
    use Seen::*;
    let ev = RecordKind::Event;
    assert_eq!(
        w.seen,
        [
            Record(0, 1, ev),
            Record(0, 2, ev),
            Record(3, 1, ev),
            End,
            Record(0, 3, ev),
            Record(3, 2, ev),
            Record(3, 3, ev),
            Record(0, 4, ev),
            End,
        ]
    );
    assert_eq!(
        w.records[0].2,
        wal::Record::Event(sample_event(1, 16)),
        "decoded"
    );
    assert_eq!(rb.last_lsns(), [(0, 4), (3, 3)]);
    let s = rb.finish().unwrap();
    assert_eq!(s.messages, 2);
    let logs: Vec<_> = s.logs.iter().map(|l| (l.log, l.first, l.last)).collect();
    assert_eq!(logs, [(0, 1, 4), (3, 1, 3)]);
    assert_eq!(s.logs[0].records, 4);
}

#[test]
fn a_repeated_message_is_skipped_with_its_dead_letters_and_releases() {
    let (mut rb, mut w) = (Rebuild::new(), Fake::default());
    let one = message(&[frame(&[(0, &[1, 2])], &["dead-a"], &[])]);
    let two = message(&[frame(&[(0, &[3])], &[], &["dead-a"])]);
    rb.feed_bytes(at(1), &one, &mut w).unwrap();
    rb.feed_bytes(at(2), &two, &mut w).unwrap();
    // The first message again (a re-published copy): nothing of it is applied again, so the
    // released dead letter does not come back.
    rb.feed_bytes(at(3), &one, &mut w).unwrap();
    // A message overlapping the end of the log: the repeat skipped, the new record kept.
    let three = message(&[frame(&[(0, &[3, 4])], &[], &[])]);
    rb.feed_bytes(at(4), &three, &mut w).unwrap();
    let dead = w.seen.iter().filter(|s| matches!(s, Seen::Dead(_))).count();
    assert_eq!(dead, 1, "{:?}", w.seen);
    let lsns: Vec<Lsn> = w.records.iter().map(|r| r.1).collect();
    assert_eq!(lsns, [1, 2, 3, 4]);
    let s = rb.finish().unwrap();
    assert_eq!((s.logs[0].records, s.logs[0].repeats), (4, 3));
    assert_eq!((s.dead_letters, s.released), (1, 1));
}

#[test]
fn a_gap_is_an_error_naming_the_log_subject_sequence_and_both_lsns() {
    let (mut rb, mut w) = (Rebuild::new(), Fake::default());
    rb.feed_bytes(at(1), &message(&[frame(&[(2, &[1, 2])], &[], &[])]), &mut w)
        .unwrap();
    let e = rb
        .feed_bytes(at(9), &message(&[frame(&[(2, &[4])], &[], &[])]), &mut w)
        .unwrap_err();
    assert!(
        matches!(
            &e,
            RestoreError::Gap { log: 2, subject, sequence: 9, expected: 3, found: 4 }
                if subject == "sluice.node-a.core-0"
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains("core-2") && text.contains("sequence 9"),
        "{text}"
    );
    assert!(text.contains("LSN 4") && text.contains("LSN 3"), "{text}");
    assert_eq!(e.exit_code(), 3);
    // A log whose first record in the stream is not LSN 1.
    let mut rb = Rebuild::new();
    let e = rb
        .feed_bytes(at(1), &message(&[frame(&[(0, &[5])], &[], &[])]), &mut w)
        .unwrap_err();
    assert!(
        matches!(
            e,
            RestoreError::Gap {
                expected: 1,
                found: 5,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn a_repeated_lsn_with_other_bytes_is_a_conflict() {
    let (mut rb, mut w) = (Rebuild::new(), Fake::default());
    rb.feed_bytes(at(1), &message(&[frame(&[(0, &[1, 2])], &[], &[])]), &mut w)
        .unwrap();
    let mut f = FrameBuf::default();
    let done = DoneRecord {
        entries: vec![DoneEntry {
            event_lsn: 1,
            status: DoneStatus::Delivered,
            attempts: 1,
        }],
    };
    f.record(0, 2, &Record::Done(done)).unwrap();
    let e = rb
        .feed_bytes(at(5), &message(&[f.finish()]), &mut w)
        .unwrap_err();
    assert!(
        matches!(
            e,
            RestoreError::Conflict {
                log: 0,
                sequence: 5,
                lsn: 2,
                last: 2,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("forked"), "{e}");
}

#[test]
fn dead_letters_and_releases_reach_the_writer_in_stream_order() {
    let (mut rb, mut w) = (Rebuild::new(), Fake::default());
    let one = message(&[
        frame(&[(0, &[1])], &["a", "b"], &[]),
        frame(&[(0, &[2])], &[], &["a"]),
    ]);
    let two = message(&[frame(&[(0, &[3])], &["c"], &["b"])]);
    rb.feed_bytes(at(1), &one, &mut w).unwrap();
    rb.feed_bytes(at(2), &two, &mut w).unwrap();
    let dlq: Vec<String> = (w.seen.iter())
        .filter_map(|s| match s {
            Seen::Dead(d) => Some(format!("put {}", String::from_utf8_lossy(d))),
            Seen::Released(id) => Some(format!("release {id}")),
            _ => None,
        })
        .collect();
    assert_eq!(dlq, ["put a", "put b", "release a", "put c", "release b"]);
    let s = rb.finish().unwrap();
    assert_eq!((s.dead_letters, s.released), (3, 2));
}

#[test]
fn a_log_short_of_its_through_and_an_undecodable_message_are_errors() {
    let (mut rb, mut w) = (Rebuild::new(), Fake::default());
    let mut f = FrameBuf::default();
    f.record(1, 1, &Record::Event(sample_event(1, 8))).unwrap();
    f.through(1, 3);
    rb.feed_bytes(at(1), &message(&[f.finish()]), &mut w)
        .unwrap();
    let e = rb.finish().unwrap_err();
    assert!(
        matches!(
            e,
            RestoreError::Incomplete {
                log: 1,
                last: 1,
                through: 3
            }
        ),
        "{e:?}"
    );
    let mut rb = Rebuild::new();
    let mut bad = message(&[frame(&[(0, &[1])], &[], &[])]);
    bad[12] ^= 1;
    let e = rb.feed_bytes(at(4), &bad, &mut w).unwrap_err();
    assert!(
        matches!(&e, RestoreError::Decode { sequence: 4, .. }),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("sluice.node-a.core-0 sequence 4"),
        "{e}"
    );
}

#[test]
fn a_start_lsn_skips_what_is_below_it_and_must_be_the_first_record_kept() {
    let (mut rb, mut w) = (Rebuild::new(), Fake::default());
    rb.start_at(0, 3);
    let one = message(&[frame(&[(0, &[1, 2, 3, 4])], &[], &[])]);
    rb.feed_bytes(at(1), &one, &mut w).unwrap();
    let lsns: Vec<Lsn> = w.records.iter().map(|r| r.1).collect();
    assert_eq!(lsns, [3, 4]);
    let s = rb.finish().unwrap();
    assert_eq!((s.logs[0].first, s.logs[0].last), (3, 4));
    let mut rb = Rebuild::new();
    rb.start_at(0, 3);
    let late = message(&[frame(&[(0, &[4])], &[], &[])]);
    let e = rb.feed_bytes(at(1), &late, &mut w).unwrap_err();
    assert!(
        matches!(
            e,
            RestoreError::Gap {
                expected: 3,
                found: 4,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn node_names_are_single_subject_tokens() {
    assert!(valid_node("node-a_1"));
    for bad in ["", "a.b", "a*", ">", "a b", &"n".repeat(65)] {
        assert!(!valid_node(bad), "{bad:?}");
    }
}
