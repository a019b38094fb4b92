//! Loom models of the durable-LSN publication and the completion hand-off between a core's
//! loop and its commit helper (`src/sched/commit.rs`), over the real code: the batch travels in
//! the real `ring::channel` pair (capacity 2, as `Committer::start` builds it), the helper side
//! commits it with the real `wal::commit_batch` on a log held by the simulated disk
//! (`storage::sim::SimFs`, no file system), which publishes `WalShared::durable_lsn` (`Release`);
//! readers use `WalShared::durable_lsn()` (`Acquire`), as the pump and `/metrics` do.
//!
//! The `handback_*` models check the wake-up choice of the hand-back (`src/sync/handback.rs`):
//! with the real `Handback` and ring, a batch handed back is never left unseen by a loop that
//! sleeps — it is found by one of the loop's two looks, or the helper unparks the loop it saw
//! parked, or it wakes the loop's poll.
//!
//! Run: `loom-tests/run.sh --test durable`.
#![cfg(sluice_loom)]

mod common;
use common::{explore, explore_with_stack};

use loom::sync::Arc;
use loom::thread;
use sluice::ring;
use sluice::storage::sim::SimFs;
use sluice::wal::group::{self, DeadLetters, Item, Outcome, Owner};
use sluice::wal::{self, AppendOutcome, EventRecord, Record, WalConfig, WalShared};

/// The models carry no dead letters (the DLQ is dispatch's; its writes are not modelled here).
type Batch = group::Batch<(), ()>;

struct NoDeadLetters;

impl DeadLetters for NoDeadLetters {
    type Entry = ();
    type Error = ();
    fn put_dead_letters(&self, entries: Vec<(usize, &())>) -> Vec<(usize, Result<(), ()>)> {
        assert!(entries.is_empty(), "no dead letters in these models");
        Vec::new()
    }
    fn release(&self, ids: Vec<(usize, &str)>) -> Vec<(usize, Result<(), ()>)> {
        assert!(ids.is_empty(), "no replays in these models");
        Vec::new()
    }
}
use std::path::Path;

fn event(i: u64) -> Record {
    Record::Event(EventRecord {
        event_id: format!("e{i}"),
        trigger_id: "t".to_owned(),
        source: "s".to_owned(),
        received_at_ms: i,
        headers: Vec::new(),
        body: vec![i as u8; 8],
        replay_of: None,
        body_json: Default::default(),
    })
}

/// A fresh log on the simulated disk, attached to `shared` as the helper's log is.
fn log(shared: &std::sync::Arc<WalShared>) -> group::Log {
    let fs = SimFs::new(Path::new("/m"), 1);
    let cfg = WalConfig {
        segment_bytes: wal::MIN_SEGMENT_BYTES,
        max_body_bytes: 1024,
        ..WalConfig::new("/m/wal")
    };
    let (mut w, _) = wal::open_in(std::sync::Arc::new(fs), &cfg).expect("open");
    w.attach_shared(shared.clone());
    group::Log {
        wal: w,
        shared: shared.clone(),
    }
}

/// The helper's side of one batch: `Helper::serve`'s commit (`wal::group::process`).
fn commit(log: &mut group::Log, batch: &mut Batch) {
    let logs = std::slice::from_mut(log);
    group::process(logs, 0, batch, &NoDeadLetters, &mut Vec::new());
}

#[test]
fn durable_lsn_is_published_before_the_batch_comes_back() {
    explore_with_stack(
        "durable_lsn_is_published_before_the_batch_comes_back",
        4 << 20,
        || {
            // std Arc: WalShared is shared with the log, which keeps a std Arc of it.
            let shared = std::sync::Arc::new(WalShared::new());
            let mut w = log(&shared);
            let (to_helper, mut helper_rx) = ring::channel::<Batch>(2);
            let (helper_tx, from_helper) = ring::channel::<Batch>(2);
            let helper = thread::spawn(move || {
                let mut batch = loop {
                    if let Some(b) = helper_rx.try_pop() {
                        break b;
                    }
                    thread::yield_now();
                };
                commit(&mut w, &mut batch);
                helper_tx.try_push(batch).expect("room for the batch");
            });
            let to_helper = to_helper;
            let mut batch = Batch::default();
            for t in 0..2 {
                batch.items.push(Item::Append {
                    owner: Owner::Ingest,
                    log: 0,
                    ticket: t,
                    record: event(t),
                });
            }
            to_helper.try_push(batch).expect("room");
            let mut from_helper = from_helper;
            let back = loop {
                if let Some(b) = from_helper.try_pop() {
                    break b;
                }
                thread::yield_now();
            };
            helper.join().unwrap();
            // The loop answers 202 for each Durable outcome: the published LSN covers them.
            for o in &back.outcomes {
                match o {
                    Outcome::Appended(AppendOutcome::Durable { lsn }) => {
                        assert!(
                            shared.durable_lsn() >= *lsn,
                            "202 before the LSN is published"
                        )
                    }
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(back.outcomes.len(), 2);
        },
    );
}

#[test]
fn durable_lsn_a_reader_never_sees_it_go_back_or_past_the_commits() {
    explore_with_stack(
        "durable_lsn_a_reader_never_sees_it_go_back_or_past_the_commits",
        4 << 20,
        || {
            let shared = std::sync::Arc::new(WalShared::new());
            let mut w = log(&shared);
            let helper = thread::spawn(move || {
                for t in 0..2 {
                    let mut batch = Batch::default();
                    batch.items.push(Item::Append {
                        owner: Owner::Ingest,
                        log: 0,
                        ticket: t,
                        record: event(t),
                    });
                    commit(&mut w, &mut batch);
                }
            });
            let r = Arc::new(shared.clone());
            let reader = thread::spawn(move || {
                let a = r.durable_lsn();
                let b = r.durable_lsn();
                (a, b)
            });
            let (a, b) = reader.join().unwrap();
            helper.join().unwrap();
            assert!(a <= b && b <= 2, "durable LSN read {a} then {b}");
            assert_eq!(shared.durable_lsn(), 2);
        },
    );
}

/// The loop's side of one wait (`Committer::wait_done`, then the turn's look before the poll)
/// against a helper handing a batch back. `park`: the loop parks (without a timeout: loom
/// reports a deadlock if nobody unparks it); otherwise its park timed out at once.
fn handback_round(park: bool) {
    use loom::sync::atomic::{AtomicBool, Ordering};
    use sluice::sync::handback::Handback;
    let handback = Arc::new(Handback::new());
    let poll_woken = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = ring::channel::<u64>(2);
    let loop_thread = thread::current();
    let (h, w) = (handback.clone(), poll_woken.clone());
    let helper = thread::spawn(move || {
        tx.try_push(7).expect("room");
        if h.loop_parked() {
            loop_thread.unpark();
        } else {
            w.store(true, Ordering::SeqCst);
        }
    });
    handback.begin_wait();
    let mut found = rx.try_pop().is_some();
    if !found && park {
        thread::park();
    }
    handback.end_wait();
    found = found || rx.try_pop().is_some();
    helper.join().unwrap();
    if park {
        assert!(
            found,
            "a parked loop was unparked before the batch was visible"
        );
    } else if !found {
        // The loop now sleeps in its poll: the helper must have woken that, not the parker.
        assert!(
            poll_woken.load(Ordering::SeqCst),
            "hand-back missed: the loop sleeps in its poll, the helper unparked a parker"
        );
    }
}

#[test]
fn handback_a_parked_loop_is_unparked_or_finds_the_batch() {
    explore(
        "handback_a_parked_loop_is_unparked_or_finds_the_batch",
        || handback_round(true),
    );
}

#[test]
fn handback_a_loop_whose_park_timed_out_finds_the_batch_or_its_poll_is_woken() {
    explore(
        "handback_a_loop_whose_park_timed_out_finds_the_batch_or_its_poll_is_woken",
        || handback_round(false),
    );
}
