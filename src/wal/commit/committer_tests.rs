//! The committer and its helper thread over real logs, with test parts: a dead-letter store in
//! memory, a mirror that numbers each batch, a hold released by hand, and a counted wake. The
//! ring commit is tested with the core's real ring where the parts are wired (`sched::commit`).
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;
use crate::wal::append::group::{Batch, DeadLetters, Outcome, Owner};
use crate::wal::commit::Mirror;
use crate::wal::format::tests::sample_event;
use crate::wal::recover::tests::{read_events, test_cfg};
use crate::wal::{Record, WalShared, WritePath};

/// Dead letters kept in memory.
#[derive(Default)]
struct Letters(Mutex<Vec<String>>);

impl DeadLetters for Letters {
    type Entry = String;
    type Error = &'static str;
    fn put_dead_letters(
        &self,
        entries: Vec<(usize, &String)>,
    ) -> Vec<(usize, Result<(), Self::Error>)> {
        let mut kept = self.0.lock().unwrap();
        entries
            .into_iter()
            .map(|(pos, e)| {
                kept.push(e.clone());
                (pos, Ok(()))
            })
            .collect()
    }
    fn release(&self, ids: Vec<(usize, &str)>) -> Vec<(usize, Result<(), Self::Error>)> {
        let mut kept = self.0.lock().unwrap();
        ids.into_iter()
            .map(|(pos, id)| {
                kept.retain(|e| e != id);
                (pos, Ok(()))
            })
            .collect()
    }
}

/// Numbers every batch it sees in `hold` (from 1) and notes adoptions and idle calls.
#[derive(Default)]
struct Numbering {
    next: u64,
    adopted: Arc<Mutex<Vec<(usize, u16)>>>,
}

impl Mirror<String, &'static str> for Numbering {
    type Adopted = u16;
    fn committed(&mut self, _: &[Log], _: usize, batch: &mut Batch<String, &'static str>) {
        self.next += 1;
        batch.hold = self.next;
    }
    fn between(&mut self, _: &[Log]) {}
    fn adopt(&mut self, slot: usize, link: u16) {
        self.adopted.lock().unwrap().push((slot, link));
    }
}

/// Keeps batches until `released` reaches their number; holds at most `max`.
struct ByHand {
    queue: std::collections::VecDeque<Batch<String, &'static str>>,
    released: Arc<AtomicU64>,
    max: usize,
}

impl Hold<String, &'static str> for ByHand {
    fn push(&mut self, batch: Batch<String, &'static str>) {
        self.queue.push_back(batch);
    }
    fn pop(&mut self) -> Option<Batch<String, &'static str>> {
        let front = self.queue.front()?;
        (front.hold <= self.released.load(SeqCst)).then(|| self.queue.pop_front())?
    }
    fn is_full(&self) -> bool {
        self.queue.len() >= self.max
    }
    fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
    fn items(&self) -> usize {
        self.queue.iter().map(Batch::len).sum()
    }
}

struct TestParts;

impl Parts for TestParts {
    type Entry = String;
    type Error = &'static str;
    type Dead = Letters;
    type Mirror = Numbering;
    type Hold = ByHand;
    fn helper_started() {}
}

fn logs(dir: &std::path::Path, names: &[&str]) -> (Vec<Log>, Vec<Arc<WalShared>>) {
    let logs: Vec<Log> = names
        .iter()
        .map(|name| {
            let (wal, _) = crate::wal::open(&test_cfg(&dir.join(name), WritePath::Pwrite)).unwrap();
            Log {
                wal,
                shared: Arc::new(WalShared::new()),
            }
        })
        .collect();
    let shared = logs.iter().map(|l| l.shared.clone()).collect();
    (logs, shared)
}

/// A committer whose wakes are counted, with `hold` (and its release counter) if given.
fn start(
    logs: Vec<Log>,
    max_batch: usize,
    hold: Option<(usize, Arc<AtomicU64>)>,
) -> (Committer<TestParts>, Arc<AtomicUsize>, Arc<Letters>) {
    let wakes = Arc::new(AtomicUsize::new(0));
    let w = wakes.clone();
    let dead = Arc::new(Letters::default());
    let wiring = Wiring::<TestParts> {
        dead: dead.clone(),
        wake: Arc::new(move || {
            w.fetch_add(1, SeqCst);
        }),
        mirror: Numbering::default(),
        hold: hold.map(|(max, released)| ByHand {
            queue: Default::default(),
            released,
            max,
        }),
    };
    let c = Committer::start(0, logs, wiring, max_batch, false).unwrap();
    (c, wakes, dead)
}

/// Waits (5 s at most) for a batch back, polling as a loop would between its polls (never
/// parked on the helper, so every hand-back is a wake).
fn done(c: &mut Committer<TestParts>) -> BatchOf<TestParts> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(b) = c.take_done() {
            return b;
        }
        assert!(Instant::now() < deadline, "no batch came back");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn lsns(outcomes: &[Outcome<&'static str>]) -> Vec<u64> {
    (outcomes.iter())
        .map(|o| match o {
            Outcome::Appended(AppendOutcome::Durable { lsn }) => *lsn,
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn a_loop_parked_on_the_helper_is_unparked_by_the_hand_back_not_its_poll() {
    let tmp = tempfile::tempdir().unwrap();
    let (logs, _) = logs(tmp.path(), &["a"]);
    let (mut c, _, _) = start(logs, 4, None);
    assert!(!c.awaits_commit(), "nothing with the helper");
    c.wait_done(Duration::from_secs(60)); // returns at once: nothing to wait for
    let long = Duration::from_secs(60);
    assert_eq!(
        c.wait_for_commit(long),
        long,
        "nothing out: the poll waits as asked"
    );
    c.staging()
        .port(Owner::Ingest)
        .event(0, 100, Record::Event(sample_event(100, 100)));
    c.kick(None);
    let t0 = Instant::now();
    let waited = c.wait_for_commit(long);
    // The helper may be back before the loop looks (a busy machine): then there is nothing
    // to park for, and the poll may wait as asked; the batch is there to take.
    assert!(
        waited == Duration::ZERO || !c.awaits_commit(),
        "after a park the poll does not wait ({waited:?}, batch not back)"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "parked past COMMIT_WAIT"
    );
    while c.take_done().is_none() {
        c.wait_done(long);
    }
    for round in 0..20u64 {
        c.staging()
            .port(Owner::Ingest)
            .event(0, round, Record::Event(sample_event(round, 100)));
        c.kick(None);
        let t0 = Instant::now();
        while c.awaits_commit() {
            // A missed hand-back would park the full 60 s.
            c.wait_done(Duration::from_secs(60));
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "round {round}: the park timed out"
        );
        let done = c.take_done().expect("back after the wait");
        assert!(matches!(
            done.outcomes[..],
            [Outcome::Appended(AppendOutcome::Durable { .. })]
        ));
    }
    c.close();
}

#[test]
fn a_batch_is_committed_per_log_and_comes_back_with_one_wake() {
    let tmp = tempfile::tempdir().unwrap();
    let (logs, shared) = logs(tmp.path(), &["a", "b"]);
    let (mut c, wakes, dead) = start(logs, 4, None);
    for t in 0..4u64 {
        assert!(c.staging().has_room(1000));
        let record = Record::Event(sample_event(t, 100));
        c.staging()
            .port(Owner::Ingest)
            .event((t % 2) as usize, t, record);
    }
    c.staging().port(Owner::Pump).dead_letter(7, "dl-7".into());
    assert!(!c.staging().has_room(10), "max_batch ingest records");
    c.kick(None);
    assert!(!c.is_idle());
    assert_eq!(c.queued(), 5);
    c.staging()
        .port(Owner::Ingest)
        .event(0, 9, Record::Event(sample_event(9, 100)));
    c.kick(None); // one batch at a time: stays filling
    let first = done(&mut c);
    assert_eq!(first.outcomes.len(), 5);
    assert_eq!(
        lsns(&first.outcomes[..4]),
        [1, 1, 2, 2],
        "each log numbers its own records"
    );
    assert!(matches!(first.outcomes[4], Outcome::DeadLettered(Ok(()))));
    assert_eq!(*dead.0.lock().unwrap(), ["dl-7"]);
    assert_eq!(wakes.load(SeqCst), 1, "one wake for the batch");
    assert_eq!((shared[0].durable_lsn(), shared[1].durable_lsn()), (2, 2));
    c.kick(None);
    assert_eq!(lsns(&done(&mut c).outcomes), [3]);
    assert_eq!(wakes.load(SeqCst), 2);
    assert!(c.is_idle());
    c.close();
    let got = read_events(&tmp.path().join("a").join("wal"));
    assert_eq!(got.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [1, 2, 3]);
}

#[test]
fn a_held_batch_settles_only_when_released_and_a_full_hold_keeps_the_next_filling() {
    let tmp = tempfile::tempdir().unwrap();
    let (logs, shared) = logs(tmp.path(), &["a"]);
    let released = Arc::new(AtomicU64::new(0));
    let (mut c, _, _) = start(logs, 8, Some((1, released.clone())));
    c.staging()
        .port(Owner::Ingest)
        .event(0, 1, Record::Event(sample_event(1, 100)));
    c.kick(None);
    // Back from the helper and durable, but held: not given out.
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.hold().is_some_and(Hold::is_empty) {
        assert!(c.take_done().is_none(), "a held batch was given out");
        assert!(Instant::now() < deadline, "the batch never came back");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(shared[0].durable_lsn(), 1);
    assert_eq!(c.queued(), 1, "the held batch counts in the gauge");
    assert!(!c.is_idle());
    // The hold is full: the next batch stays filling.
    c.staging()
        .port(Owner::Ingest)
        .event(0, 2, Record::Event(sample_event(2, 100)));
    c.kick(None);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        shared[0].durable_lsn(),
        1,
        "nothing went to the helper past the hold"
    );
    assert_eq!(c.staged().len(), 1);
    released.store(1, SeqCst);
    let first = c.take_done().expect("released");
    assert_eq!((first.hold, lsns(&first.outcomes)), (1, vec![1]));
    c.kick(None);
    released.store(2, SeqCst);
    let second = done(&mut c);
    assert_eq!((second.hold, lsns(&second.outcomes)), (2, vec![2]));
    assert!(c.is_idle());
}

#[test]
fn an_adopted_log_takes_the_next_slot_and_its_link_reaches_the_mirror() {
    let tmp = tempfile::tempdir().unwrap();
    let (own, _) = logs(tmp.path(), &["own"]);
    let (mut adopted, adopted_shared) = logs(tmp.path(), &["adopted"]);
    let wakes = Arc::new(AtomicUsize::new(0));
    let mirror = Numbering::default();
    let seen = mirror.adopted.clone();
    let wiring = Wiring::<TestParts> {
        dead: Arc::new(Letters::default()),
        wake: Arc::new(move || {
            wakes.fetch_add(1, SeqCst);
        }),
        mirror,
        hold: None,
    };
    let mut c = Committer::start(0, own, wiring, 8, false).unwrap();
    c.adopt(adopted.remove(0), Some(4));
    c.staging()
        .port(Owner::Pump)
        .record(1, 1, Record::Event(sample_event(1, 10)));
    c.kick(None);
    assert_eq!(lsns(&done(&mut c).outcomes), [1]);
    assert_eq!(adopted_shared[0].durable_lsn(), 1);
    assert_eq!(*seen.lock().unwrap(), [(1, 4)]);
}
