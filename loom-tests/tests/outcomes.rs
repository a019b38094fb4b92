//! Loom model of `sluice::wal::outcomes::SharedIndex`, a log's outcome index as its writer (the
//! commit helper, folding each committed batch) and the operator reader (a lookup) share it: a
//! lookup during a fold sees the event before the batch or after it, never part of a batch, and
//! a retirement racing both leaves a consistent index.
//!
//! Run: `loom-tests/run.sh --test outcomes`.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::wal::format::marker::append_marker;
use sluice::wal::format::{
    append_record, encode_payload_into, DoneEntry, DoneRecord, DoneStatus, EventRecord, Record,
    RecordKind,
};
use sluice::wal::outcomes::{Outcome, OutcomeIndex, SharedIndex};

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

/// The bytes of a committed batch of `records` from LSN `first`, with its marker.
fn batch(first: u64, records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let kind = match r {
            Record::Event(_) => RecordKind::Event,
            Record::Done(_) => RecordKind::Done,
            _ => unreachable!("the model writes events and outcomes"),
        };
        append_record(&mut out, first + i as u64, kind, |o| {
            encode_payload_into(r, o)
        })
        .unwrap();
    }
    let next = first + records.len() as u64;
    append_marker(&mut out, 0, 1, first, next, true);
    out
}

#[test]
fn outcomes_a_lookup_sees_a_batch_whole_or_not_at_all() {
    explore("outcomes_a_lookup_sees_a_batch_whole_or_not_at_all", || {
        let ix = Arc::new(SharedIndex::default());
        let mut seed = OutcomeIndex::new(1);
        seed.observe(1, &event()).unwrap();
        seed.observe(2, &event()).unwrap();
        ix.seed(seed);
        // LSN 3: both events delivered, in one record.
        let done = Record::Done(DoneRecord {
            entries: [1, 2]
                .map(|event_lsn| DoneEntry {
                    event_lsn,
                    status: DoneStatus::Delivered,
                    attempts: 1,
                })
                .to_vec(),
        });
        let bytes = batch(3, &[done]);
        let writer = {
            let ix = ix.clone();
            thread::spawn(move || ix.observe_batch(3, &bytes))
        };
        let one = ix.get(1).unwrap().outcome;
        let two = ix.get(2).unwrap().outcome;
        writer.join().unwrap();
        let delivered = Outcome::Done(DoneStatus::Delivered);
        // Each lookup takes the lock on its own: the second may see the batch the first did
        // not, never the reverse.
        assert!(
            matches!(
                (one, two),
                (Outcome::Pending, Outcome::Pending)
                    | (Outcome::Pending, Outcome::Done(_))
                    | (Outcome::Done(_), Outcome::Done(_))
            ),
            "{one:?} then {two:?}"
        );
        assert_eq!(ix.get(1).unwrap().outcome, delivered);
        assert_eq!(ix.size().map(|s| s.0), Some(3));
    });
}

#[test]
fn outcomes_retirement_beside_a_fold_keeps_the_index_whole() {
    explore(
        "outcomes_retirement_beside_a_fold_keeps_the_index_whole",
        || {
            let ix = Arc::new(SharedIndex::default());
            let mut seed = OutcomeIndex::new(1);
            for lsn in 1..=3 {
                seed.observe(lsn, &event()).unwrap();
            }
            ix.seed(seed);
            let bytes = batch(4, &[event()]);
            let writer = {
                let ix = ix.clone();
                thread::spawn(move || ix.observe_batch(4, &bytes))
            };
            ix.retire_below(3);
            writer.join().unwrap();
            assert_eq!(ix.get(2), None, "retired");
            assert_eq!(ix.get(4).unwrap().outcome, Outcome::Pending);
            assert_eq!(ix.size().map(|s| s.0), Some(2), "LSNs 3 and 4");
        },
    );
}
