//! A core's commit helper: the one thread that does the core's blocking file I/O, one batch per
//! wake-up (DIRECTION.md, "What an fdatasync costs here": the switches are per batch).
//!
//! Between batches (and at least every 100 ms) the helper also ticks each log (`Wal::tick`):
//! the checkpoint of what must exist, retention the pump asked for, and while a log is unhealthy
//! a probe write, so `/readyz` recovers without a request.
//!
//! The core's loop collects what must reach the disk during a loop turn — ingest events, the
//! pump's `Done`/`Retry` records, dead letters — into the *next* batch ([`Committer::push`]).
//! At the end of the turn, if no batch is with the helper, the next batch is handed over
//! ([`Committer::kick`]: one ring push and one unpark). The helper group-commits each log the
//! batch touches ([`wal::commit_batch`]: one write and one `fdatasync` per log), writes the dead
//! letters, fills in every item's result, hands the batch back and wakes the loop once
//! (`mio::Waker`). The loop takes it back ([`Committer::take_done`]) and answers the 202s.
//!
//! So a request crosses no thread: it is parsed, admitted, staged and answered on its core; the
//! helper only sees whole batches. While a batch is with the helper the next one fills, which is
//! what makes the group commit grow with the load.
//!
//! While a batch carrying ingest records is with the helper, the loop parks on the helper
//! rather than on the network ([`Committer::wait_done`], at most [`COMMIT_WAIT`];
//! `sync::handback` says why and how the helper then unparks it instead of waking the poll):
//! one switch of the core per commit instead of one per arrival.
//!
//! Bounds: at most one batch with the helper and one filling. The filling batch holds at most
//! `max_batch` ingest records or [`wal::MAX_BATCH_BYTES`] of them ([`Committer::has_room`]; a
//! refused offer waits for room, then `503 wal_busy`, as before); the pump's records are bounded
//! by the pump (`MAX_RECORDS_IN_FLIGHT` per log) and dead letters by `max_outstanding`. The two
//! rings between loop and helper hold at most one batch each (capacity 2).
#![forbid(unsafe_code)]

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_utils::sync::{Parker, Unparker};
use mio::Waker;

use crate::dispatch::dlq::{DlqEntry, DlqError, DlqStore};
use crate::ring;
use crate::sync::handback::Handback;
use crate::wal::{self, AppendOutcome, Record, Wal, WalShared};

/// How long the helper sleeps with nothing to do if nobody unparks it (it then ticks its logs —
/// checkpoint, retention, probe — and checks whether the loop has closed the ring).
const IDLE_PARK: Duration = Duration::from_millis(100);

/// The longest the loop parks on the helper ([`Committer::wait_done`]) before it reads the
/// network anyway: what a request that needs no commit (a refusal, `/metrics`, a new
/// connection) may wait beyond its turn while a sync is slow. A sync here takes 0.1–0.6 ms
/// (`sluice_wal_sync_seconds`), so normally the batch is back first.
pub const COMMIT_WAIT: Duration = Duration::from_millis(1);

/// One thing for the disk.
#[derive(Debug)]
pub enum Item {
    /// Append `record` to the core's log slot `log` (0 = its own log).
    Append {
        log: usize,
        ticket: u64,
        record: Record,
    },
    /// Store a dead letter durably (`dispatch::dlq`).
    DeadLetter { ticket: u64, entry: DlqEntry },
}

/// The result of one [`Item`].
#[derive(Debug)]
pub enum Outcome {
    Appended(AppendOutcome),
    DeadLettered(Result<(), DlqError>),
}

/// A batch: the items, and (once back from the helper) one outcome per item, in order.
#[derive(Debug, Default)]
pub struct Batch {
    pub items: Vec<Item>,
    pub outcomes: Vec<Outcome>,
    /// Bytes of the records appended by ingest (for the batch bound).
    ingest_bytes: usize,
    ingest_records: usize,
}

/// A log the helper appends to, with its published state.
#[derive(Debug)]
pub struct HelperLog {
    pub wal: Wal,
    pub shared: Arc<WalShared>,
}

/// The loop's side of the commit helper.
#[derive(Debug)]
pub struct Committer {
    to_helper: ring::Sender<Batch>,
    from_helper: ring::Receiver<Batch>,
    helper: Unparker,
    thread: Option<JoinHandle<()>>,
    next: Batch,
    /// A batch is with the helper.
    in_flight: bool,
    /// Items in that batch, and how many of them are ingest records (requests waiting).
    in_flight_items: usize,
    in_flight_ingest: usize,
    max_batch: usize,
    /// The loop's parker for [`Committer::wait_done`], and the helper's way to tell.
    parker: Parker,
    handback: Arc<Handback>,
}

impl Committer {
    /// Starts core `core`'s helper over `logs` (slot order) and `dlq`; `waker` wakes the loop.
    pub fn start(
        core: usize,
        logs: Vec<HelperLog>,
        dlq: Arc<DlqStore>,
        waker: Arc<Waker>,
        max_batch: usize,
    ) -> io::Result<Committer> {
        let (to_helper, rx) = ring::channel(2);
        let (tx, from_helper) = ring::channel(2);
        let parker = Parker::new();
        let helper = parker.unparker().clone();
        let loop_parker = Parker::new();
        let handback = Arc::new(Handback::new());
        let h = Helper {
            logs,
            dlq,
            rx,
            tx,
            parker,
            waker,
            loop_unparker: loop_parker.unparker().clone(),
            handback: handback.clone(),
            outcomes: Vec::new(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("sluice-sync-{core}"))
            .spawn(move || h.run())?;
        Ok(Committer {
            to_helper,
            from_helper,
            helper,
            thread: Some(thread),
            next: Batch::default(),
            in_flight: false,
            in_flight_items: 0,
            in_flight_ingest: 0,
            max_batch,
            parker: loop_parker,
            handback,
        })
    }

    /// True if an ingest record of `weight` bytes fits the filling batch.
    pub fn has_room(&self, weight: usize) -> bool {
        self.next.ingest_records == 0
            || (self.next.ingest_records < self.max_batch
                && self.next.ingest_bytes + weight <= wal::MAX_BATCH_BYTES)
    }

    /// Adds an ingest record (the caller checked [`Committer::has_room`]).
    pub fn push_ingest(&mut self, log: usize, ticket: u64, record: Record) {
        self.next.ingest_bytes += record.batch_weight();
        self.next.ingest_records += 1;
        self.next.items.push(Item::Append {
            log,
            ticket,
            record,
        });
    }

    /// Adds a record or dead letter of the pump's (bounded by the pump).
    pub fn push(&mut self, item: Item) {
        self.next.items.push(item);
    }

    /// Hands the filling batch to the helper if none is there and it is not empty. Called once
    /// per loop turn.
    pub fn kick(&mut self) {
        if self.in_flight || self.next.items.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.next);
        let (items, ingest) = (batch.items.len(), batch.ingest_records);
        match self.to_helper.try_push(batch) {
            Ok(()) => {
                self.in_flight = true;
                self.in_flight_items = items;
                self.in_flight_ingest = ingest;
                self.helper.unpark();
            }
            // Cannot happen (one batch at a time, capacity 2); keep the batch if it does.
            Err(e) => self.next = e.into_inner(),
        }
    }

    /// The batch the helper finished, if any: every item with its outcome.
    pub fn take_done(&mut self) -> Option<Batch> {
        let done = self.from_helper.try_pop()?;
        self.in_flight = false;
        self.in_flight_items = 0;
        self.in_flight_ingest = 0;
        Some(done)
    }

    /// True while a batch with requests waiting for it is with the helper and not back yet:
    /// the loop's next useful step is [`Committer::wait_done`].
    pub fn awaits_commit(&self) -> bool {
        self.in_flight && self.in_flight_ingest > 0 && self.from_helper.is_empty()
    }

    /// The loop's wait before its poll: while [`Committer::awaits_commit`], parks on the helper
    /// (at most [`COMMIT_WAIT`], never past `timeout`) rather than on the network — arrivals can
    /// only join the next batch (`sync::handback`) — and returns zero, so what arrived meanwhile
    /// is read at once; otherwise returns `timeout`. On io_uring the caller submits the turn's
    /// sends first.
    pub fn wait_for_commit(&self, timeout: Duration) -> Duration {
        if !self.awaits_commit() {
            return timeout;
        }
        self.wait_done(timeout.min(COMMIT_WAIT));
        Duration::ZERO
    }

    /// Parks the loop until the batch with the helper is back, at most `max`. Returns at once
    /// if none is with the helper or it is back. The loop must then look for it
    /// ([`Committer::take_done`]) before it waits on its poll again (`sync::handback`).
    pub fn wait_done(&self, max: Duration) {
        if !self.in_flight {
            return;
        }
        self.handback.begin_wait();
        if self.from_helper.is_empty() {
            self.parker.park_timeout(max);
        }
        self.handback.end_wait();
    }

    /// Records (and dead letters) filling plus those with the helper, for the gauge.
    pub fn queued(&self) -> usize {
        self.next.items.len() + self.in_flight_items
    }

    /// Nothing filling and nothing with the helper.
    pub fn is_idle(&self) -> bool {
        !self.in_flight && self.next.items.is_empty()
    }

    /// Stops the helper after the batch it has (a final sync of every log), and joins it.
    pub fn close(&mut self) {
        self.to_helper.close();
        self.helper.unpark();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                eprintln!("sluice: a commit helper thread panicked");
            }
        }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.close();
    }
}

/// The helper thread's state.
struct Helper {
    logs: Vec<HelperLog>,
    dlq: Arc<DlqStore>,
    rx: ring::Receiver<Batch>,
    tx: ring::Sender<Batch>,
    parker: Parker,
    waker: Arc<Waker>,
    /// The loop's parker, for a hand-back while it waits in [`Committer::wait_done`].
    loop_unparker: Unparker,
    handback: Arc<Handback>,
    outcomes: Vec<AppendOutcome>,
}

impl Helper {
    fn run(mut self) {
        // Its wake-ups must not preempt the loop mid-turn (`sched::thread_policy`).
        if let Err(e) = super::thread_policy::set_current_batch() {
            eprintln!("sluice: commit helper: SCHED_BATCH not set ({e}); default policy kept");
        }
        loop {
            for log in &mut self.logs {
                // Checkpoint (at least once a second while written), retention requests, and a
                // probe of a failed disk so health returns without a request (`Wal::tick`).
                let now = log.wal.now_nanos();
                log.wal.tick(now);
            }
            if let Some(batch) = self.rx.try_pop() {
                self.serve(batch);
                continue;
            }
            // Closed is checked before the last pop: a batch pushed before the close is seen.
            if self.rx.is_closed() {
                if let Some(batch) = self.rx.try_pop() {
                    self.serve(batch);
                }
                break;
            }
            self.parker.park_timeout(IDLE_PARK);
        }
        for log in &mut self.logs {
            // `Os` durability: the last writes reach the disk at a clean stop.
            if let Err(e) = log.wal.sync() {
                eprintln!("sluice: final sync of {}: {e}", log.wal.dir().display());
            }
        }
    }

    fn serve(&mut self, mut batch: Batch) {
        self.process(&mut batch);
        if self.tx.try_push(batch).is_err() {
            eprintln!("sluice: commit helper: the loop's ring is closed; batch dropped");
        }
        if self.handback.loop_parked() {
            self.loop_unparker.unpark();
        } else {
            let _ = self.waker.wake();
        }
    }

    /// Commits every log the batch touches (one group commit each), then the dead letters.
    fn process(&mut self, batch: &mut Batch) {
        let Batch {
            items, outcomes, ..
        } = batch;
        outcomes.clear();
        outcomes.extend(
            items
                .iter()
                .map(|_| Outcome::Appended(AppendOutcome::Unavailable)),
        );
        for (slot, log) in self.logs.iter_mut().enumerate() {
            let mine = |item: &Item| matches!(item, Item::Append { log, .. } if *log == slot);
            if !items.iter().any(mine) {
                continue;
            }
            let records = items.iter().filter_map(|item| match item {
                Item::Append { log, record, .. } if *log == slot => Some(record),
                _ => None,
            });
            wal::commit_batch(&mut log.wal, &log.shared, records, &mut self.outcomes);
            let positions = items.iter().enumerate().filter(|(_, i)| mine(i));
            for ((pos, _), o) in positions.zip(self.outcomes.drain(..)) {
                outcomes[pos] = Outcome::Appended(o);
            }
        }
        // The turn's dead letters as one DLQ commit (`dispatch::dlq_store`).
        let dead = items
            .iter()
            .enumerate()
            .filter_map(|(pos, item)| match item {
                Item::DeadLetter { entry, .. } => Some((pos, entry)),
                _ => None,
            });
        for (pos, r) in self.dlq.put_batch(dead.collect()) {
            outcomes[pos] = Outcome::DeadLettered(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::format::tests::sample_event;
    use crate::wal::recovery::tests::{read_events, test_cfg};
    use crate::wal::WritePath;
    use mio::{Events, Poll, Token};

    #[test]
    fn a_loop_parked_on_the_helper_is_unparked_by_the_hand_back_not_its_poll() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = test_cfg(&tmp.path().join("a"), WritePath::Pwrite);
        let (wal, _) = crate::wal::open(&cfg).unwrap();
        let logs = vec![HelperLog {
            wal,
            shared: Arc::new(WalShared::new()),
        }];
        let dlq = Arc::new(DlqStore::open(&tmp.path().join("dlq"), 10).unwrap());
        let poll = Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), Token(7)).unwrap());
        let mut c = Committer::start(0, logs, dlq, waker, 4).unwrap();
        assert!(!c.awaits_commit(), "nothing with the helper");
        c.wait_done(Duration::from_secs(60)); // returns at once: nothing to wait for
        let long = Duration::from_secs(60);
        assert_eq!(
            c.wait_for_commit(long),
            long,
            "nothing out: the poll waits as asked"
        );
        c.push_ingest(0, 100, Record::Event(sample_event(100, 100)));
        c.kick();
        let t0 = std::time::Instant::now();
        assert_eq!(
            c.wait_for_commit(long),
            Duration::ZERO,
            "after a park the poll does not wait"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "parked past COMMIT_WAIT"
        );
        while c.take_done().is_none() {
            c.wait_done(long);
        }
        for round in 0..20u64 {
            c.push_ingest(0, round, Record::Event(sample_event(round, 100)));
            c.kick();
            let t0 = std::time::Instant::now();
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
        let mut logs = Vec::new();
        for name in ["a", "b"] {
            let cfg = test_cfg(&tmp.path().join(name), WritePath::Pwrite);
            let (wal, _) = crate::wal::open(&cfg).unwrap();
            logs.push(HelperLog {
                wal,
                shared: Arc::new(WalShared::new()),
            });
        }
        let shared: Vec<_> = logs.iter().map(|l| l.shared.clone()).collect();
        let dlq = Arc::new(DlqStore::open(&tmp.path().join("dlq"), 10).unwrap());
        let mut poll = Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), Token(7)).unwrap());
        let mut c = Committer::start(0, logs, dlq, waker, 4).unwrap();
        for t in 0..4u64 {
            assert!(c.has_room(1000));
            c.push_ingest((t % 2) as usize, t, Record::Event(sample_event(t, 100)));
        }
        assert!(!c.has_room(10), "max_batch ingest records");
        c.kick();
        assert!(!c.is_idle());
        c.push_ingest(0, 9, Record::Event(sample_event(9, 100)));
        c.kick(); // one batch at a time: stays filling
        let mut events = Events::with_capacity(4);
        let mut done = None;
        for _ in 0..100 {
            poll.poll(&mut events, Some(Duration::from_millis(100)))
                .unwrap();
            if let Some(b) = c.take_done() {
                done = Some(b);
                break;
            }
        }
        let done = done.expect("the helper answered");
        let lsns: Vec<_> = done
            .outcomes
            .iter()
            .map(|o| match o {
                Outcome::Appended(AppendOutcome::Durable { lsn }) => *lsn,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(lsns, [1, 1, 2, 2], "each log numbers its own records");
        assert_eq!(shared[0].durable_lsn(), 2);
        assert_eq!(shared[1].durable_lsn(), 2);
        c.kick();
        let mut second = None;
        for _ in 0..100 {
            poll.poll(&mut events, Some(Duration::from_millis(100)))
                .unwrap();
            if let Some(b) = c.take_done() {
                second = Some(b);
                break;
            }
        }
        assert!(matches!(
            second.unwrap().outcomes[..],
            [Outcome::Appended(AppendOutcome::Durable { lsn: 3 })]
        ));
        assert!(c.is_idle());
        c.close();
        let got = read_events(&tmp.path().join("a").join("wal"));
        assert_eq!(got.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [1, 2, 3]);
    }
}
