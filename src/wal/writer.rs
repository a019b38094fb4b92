//! The WAL writer thread: drain the ring, group-commit, publish the durable LSN, complete.
//!
//! Loop: pop up to `max_batch` requests (or until their bodies reach [`MAX_BATCH_BYTES`]); stage
//! each with the next LSN; commit the batch with one write and one sync (more only when the
//! batch crosses into a new segment); publish `durable_lsn` (`Release`); complete every request
//! to its worker's sink in order; `notify` each worker touched once. With nothing to do, park
//! for [`IDLE_PARK`] (producers `unpark` after each push). Exit when the ring is closed and
//! drained, after a final sync.
#![forbid(unsafe_code)]

use super::appender::{Staged, Wal};
use super::{AppendOutcome, AppendRequest, CompletionSink, WalShared, MAX_BATCH_BYTES};
use crate::ring::Receiver;
use crossbeam_utils::sync::Parker;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the writer sleeps when the ring is empty, if nobody unparks it.
pub const IDLE_PARK: Duration = Duration::from_millis(5);

/// Starts the writer thread (named `sluice-wal`).
///
/// Producers hold clones of `parker.unparker()` (take them before calling) and `unpark` after
/// each successful push. `sinks[w]` receives the completions of requests with `worker == w`
/// (requests naming a worker without a sink are dropped). `shared.durable_lsn` is set to the
/// recovered last LSN before the thread starts.
pub fn spawn_writer(
    mut wal: Wal,
    rx: Receiver<AppendRequest>,
    parker: Parker,
    sinks: Vec<Box<dyn CompletionSink>>,
    shared: Arc<WalShared>,
) -> io::Result<JoinHandle<()>> {
    shared.durable_lsn.store(wal.last_lsn(), Ordering::Release);
    wal.attach_shared(shared.clone());
    let writer = Writer {
        batch: Vec::with_capacity(wal.max_batch),
        outcomes: Vec::with_capacity(wal.max_batch),
        touched: vec![false; sinks.len()],
        wal,
        rx,
        parker,
        sinks,
        shared,
    };
    std::thread::Builder::new()
        .name("sluice-wal".to_owned())
        .spawn(move || writer.run())
}

struct Writer {
    wal: Wal,
    rx: Receiver<AppendRequest>,
    parker: Parker,
    sinks: Vec<Box<dyn CompletionSink>>,
    shared: Arc<WalShared>,
    batch: Vec<AppendRequest>,
    /// `outcomes[i]` is the (tentative, until committed) outcome of `batch[i]`.
    outcomes: Vec<AppendOutcome>,
    touched: Vec<bool>,
}

impl Writer {
    fn run(mut self) {
        loop {
            // Checkpoint, retention, probe of a failed disk (appender.rs, `Wal::tick`).
            self.wal.tick(self.wal.now_nanos());
            if !self.fill() {
                // Closed is checked before the last pop: a push that succeeded before the close
                // is seen by this `fill`, and none can succeed after it.
                if !self.rx.is_closed() {
                    self.parker.park_timeout(IDLE_PARK);
                    continue;
                }
                if !self.fill() {
                    break;
                }
            }
            self.process();
            self.complete();
        }
        if self.wal.sync().is_err() {
            self.shared.healthy.store(false, Ordering::Relaxed);
        }
    }

    /// Pops the next batch; false if the ring was empty.
    fn fill(&mut self) -> bool {
        let mut bytes = 0;
        while self.batch.len() < self.wal.max_batch && bytes < MAX_BATCH_BYTES {
            let Some(req) = self.rx.try_pop() else { break };
            bytes += req.record.batch_weight();
            self.batch.push(req);
        }
        !self.batch.is_empty()
    }

    /// Stages and commits the batch, filling `outcomes`.
    fn process(&mut self) {
        self.outcomes.clear();
        let mut chunk_start = 0;
        let mut failed = false;
        let mut i = 0;
        while i < self.batch.len() {
            if failed {
                self.outcomes.push(AppendOutcome::Unavailable);
                i += 1;
                continue;
            }
            match self.wal.stage_record(&self.batch[i].record) {
                Ok(Staged::Lsn(lsn)) => self.outcomes.push(AppendOutcome::Durable { lsn }),
                // Above the WAL's field bounds (or larger than a segment): refuse this one only.
                Err(_) => self.outcomes.push(AppendOutcome::Unavailable),
                Ok(Staged::NoRoom) => {
                    failed = !self.commit_chunk(chunk_start) || !self.roll();
                    chunk_start = i;
                    continue; // stage batch[i] again, in the new segment
                }
            }
            i += 1;
        }
        if !failed {
            self.commit_chunk(chunk_start);
        }
    }

    /// Commits what is staged (`outcomes[from..]`). On success publishes the durable LSN; on
    /// failure turns the chunk's tentative outcomes into `Unavailable`. Returns success.
    fn commit_chunk(&mut self, from: usize) -> bool {
        let staged = self.wal.staged();
        if staged == 0 {
            return true;
        }
        match self.wal.commit() {
            Ok(()) => {
                // Release: pairs with `WalShared::durable_lsn`'s Acquire (module docs there).
                self.shared
                    .durable_lsn
                    .store(self.wal.last_lsn(), Ordering::Release);
                self.shared
                    .appends_total
                    .fetch_add(staged, std::sync::atomic::Ordering::Relaxed);
                self.shared.healthy.store(true, Ordering::Relaxed);
                true
            }
            Err(_) => {
                self.fail(from);
                false
            }
        }
    }

    fn roll(&mut self) -> bool {
        match self.wal.roll() {
            Ok(()) => true,
            Err(_) => {
                self.fail(self.outcomes.len());
                false
            }
        }
    }

    fn fail(&mut self, from: usize) {
        self.shared.healthy.store(false, Ordering::Relaxed);
        for o in &mut self.outcomes[from..] {
            *o = AppendOutcome::Unavailable;
        }
    }

    /// Sends every outcome to its worker's sink, then one `notify` per worker touched.
    fn complete(&mut self) {
        for (req, outcome) in self.batch.drain(..).zip(self.outcomes.drain(..)) {
            if let Some(sink) = self.sinks.get_mut(req.worker) {
                sink.complete(req.ticket, outcome);
                self.touched[req.worker] = true;
            }
        }
        for (sink, touched) in self.sinks.iter_mut().zip(&mut self.touched) {
            if std::mem::take(touched) {
                sink.notify();
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ring::{self, PushError, Sender};
    use crate::wal::format::tests::sample_event;
    use crate::wal::recovery::tests::{read_events, test_cfg};
    use crate::wal::segment::SegmentFile;
    use crate::wal::{open, Durability, Lsn, Record, WritePath, MAX_BODY_BYTES};
    use crossbeam_utils::sync::Unparker;
    use parking_lot::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    use std::time::Instant;

    type Log = Arc<Mutex<Vec<(usize, u64, AppendOutcome)>>>;

    struct TestSink {
        worker: usize,
        log: Log,
        notifies: Arc<AtomicUsize>,
    }

    impl CompletionSink for TestSink {
        fn complete(&mut self, ticket: u64, outcome: AppendOutcome) {
            self.log.lock().push((self.worker, ticket, outcome));
        }
        fn notify(&mut self) {
            self.notifies
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// A real writer thread on a real ring, with sinks that log completions.
    pub(crate) struct Harness {
        tx: Sender<AppendRequest>,
        unparker: Unparker,
        log: Log,
        notifies: Arc<AtomicUsize>,
        pub(crate) shared: Arc<WalShared>,
        handle: JoinHandle<()>,
    }

    impl Harness {
        pub(crate) fn start(wal: Wal, workers: usize) -> Harness {
            let (tx, rx) = ring::channel(256);
            let parker = Parker::new();
            let unparker = parker.unparker().clone();
            let log = Log::default();
            let notifies = Arc::new(AtomicUsize::new(0));
            let sinks = (0..workers)
                .map(|worker| {
                    Box::new(TestSink {
                        worker,
                        log: log.clone(),
                        notifies: notifies.clone(),
                    }) as Box<dyn CompletionSink>
                })
                .collect();
            let shared = Arc::new(WalShared::new());
            let handle = spawn_writer(wal, rx, parker, sinks, shared.clone()).unwrap();
            Harness {
                tx,
                unparker,
                log,
                notifies,
                shared,
                handle,
            }
        }

        fn push(&self, worker: usize, ticket: u64, body: usize) {
            self.push_record(worker, ticket, Record::Event(sample_event(ticket, body)));
        }

        pub(crate) fn push_record(&self, worker: usize, ticket: u64, record: Record) {
            let mut req = AppendRequest {
                worker,
                ticket,
                record,
            };
            loop {
                match self.tx.try_push(req) {
                    Ok(()) => break,
                    Err(PushError::Full(r)) => {
                        req = r;
                        self.unparker.unpark();
                        std::thread::yield_now();
                    }
                    Err(PushError::Closed(_)) => panic!("ring closed"),
                }
            }
            self.unparker.unpark();
        }

        /// Waits (bounded) until `n` completions arrived; returns them.
        pub(crate) fn wait_for(&self, n: usize) -> Vec<(usize, u64, AppendOutcome)> {
            let deadline = Instant::now() + Duration::from_secs(20);
            while self.log.lock().len() < n {
                assert!(
                    Instant::now() < deadline,
                    "timed out waiting for {n} completions"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            std::mem::take(&mut *self.log.lock())
        }

        pub(crate) fn finish(self) -> Arc<WalShared> {
            self.tx.close();
            self.unparker.unpark();
            self.handle.join().unwrap();
            self.shared
        }
    }

    #[test]
    fn writer_end_to_end_group_commits_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let mut cfg = test_cfg(tmp.path(), WritePath::Pwrite);
        cfg.durability = Durability::Fsync;
        let (wal, _) = open(&cfg).unwrap();
        let h = Harness::start(wal, 3);
        for ticket in 0..600u64 {
            h.push(ticket as usize % 3, ticket, 1024);
        }
        let done = h.wait_for(600);
        assert!(h.notifies.load(std::sync::atomic::Ordering::Relaxed) >= 3);
        let shared = h.finish();
        // Each worker sees its tickets in push order; one producer, so LSN = ticket + 1.
        for w in 0..3 {
            let tickets: Vec<u64> = done.iter().filter(|c| c.0 == w).map(|c| c.1).collect();
            assert_eq!(
                tickets,
                (0..600).filter(|t| t % 3 == w as u64).collect::<Vec<_>>()
            );
        }
        for (w, ticket, outcome) in &done {
            assert_eq!(*w as u64, ticket % 3);
            assert_eq!(*outcome, AppendOutcome::Durable { lsn: ticket + 1 });
        }
        assert_eq!(shared.durable_lsn(), 600);
        assert_eq!(
            shared
                .appends_total
                .load(std::sync::atomic::Ordering::Relaxed),
            600
        );
        assert!(shared.is_healthy());
        let syncs = shared.sync_seconds.count();
        assert!((1..=601).contains(&syncs), "{syncs} syncs");
        let got = read_events(&cfg.dir);
        assert_eq!(got.len(), 600);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, (lsn, ev))| *lsn == i as Lsn + 1 && *ev == sample_event(i as u64, 1024)));
        // The writer resumes after the recovered LSN.
        let (wal, report) = open(&cfg).unwrap();
        assert_eq!(report.last_lsn, 600);
        let h = Harness::start(wal, 1);
        assert_eq!(h.shared.durable_lsn(), 600);
        h.push(0, 7, 10);
        assert_eq!(h.wait_for(1), [(0, 7, AppendOutcome::Durable { lsn: 601 })]);
        h.finish();
    }

    #[test]
    fn writer_appends_every_record_kind() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
        let (wal, _) = open(&cfg).unwrap();
        let h = Harness::start(wal, 1);
        let recs = crate::wal::format::tests::sample_records(3);
        for (t, r) in recs.iter().enumerate() {
            h.push_record(0, t as u64, r.clone());
        }
        let done = h.wait_for(recs.len());
        for (t, c) in done.iter().enumerate() {
            assert_eq!(c.2, AppendOutcome::Durable { lsn: t as Lsn + 1 });
        }
        h.finish();
        let mut reader = crate::wal::WalReader::open(&cfg.dir).unwrap();
        for (i, want) in recs.iter().enumerate() {
            let (lsn, got) = reader.next_record().unwrap().unwrap();
            assert_eq!((lsn, &got), (i as Lsn + 1, want));
        }
        assert!(reader.next_record().is_none());
    }

    /// Storage that can be told to fail: partial writes then `EIO`, or `EIO` on sync.
    struct Faulty {
        inner: Box<dyn SegmentFile>,
        fail_write: Arc<AtomicBool>,
        fail_sync: Arc<AtomicBool>,
        fail_allocate: Arc<AtomicBool>,
    }

    impl SegmentFile for Faulty {
        fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
            if self.fail_write.load(std::sync::atomic::Ordering::Relaxed) {
                self.inner.write_at(offset, &buf[..buf.len() / 2])?;
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            self.inner.write_at(offset, buf)
        }
        fn sync(&mut self, offset: u64, len: u64) -> io::Result<()> {
            if self.fail_sync.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            self.inner.sync(offset, len)
        }
        fn allocate(&mut self, len: u64) -> io::Result<()> {
            if self
                .fail_allocate
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            self.inner.allocate(len)
        }
    }

    fn faulty(wal: &mut Wal) -> [Arc<AtomicBool>; 3] {
        let flags: [Arc<AtomicBool>; 3] = Default::default();
        let f = flags.clone();
        wal.set_file_wrapper(Box::new(move |inner| {
            let [fail_write, fail_sync, fail_allocate] = f.clone();
            Box::new(Faulty {
                inner,
                fail_write,
                fail_sync,
                fail_allocate,
            })
        }));
        flags
    }

    #[test]
    fn disk_full_at_rollover_is_unavailable_then_recovers() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = test_cfg(tmp.path(), WritePath::Mmap);
        let (mut wal, _) = open(&cfg).unwrap();
        let [_, _, fail_allocate] = faulty(&mut wal);
        let h = Harness::start(wal, 1);
        for t in 0..4 {
            h.push(0, t, MAX_BODY_BYTES / 4); // four quarter-max events fill the smallest segment
        }
        assert_eq!(
            h.wait_for(4).last().unwrap().2,
            AppendOutcome::Durable { lsn: 4 }
        );
        fail_allocate.store(true, std::sync::atomic::Ordering::Relaxed);
        h.push(0, 10, MAX_BODY_BYTES / 4);
        assert_eq!(h.wait_for(1), [(0, 10, AppendOutcome::Unavailable)]);
        assert!(!h.shared.is_healthy());
        fail_allocate.store(false, std::sync::atomic::Ordering::Relaxed);
        h.push(0, 11, MAX_BODY_BYTES / 4);
        assert_eq!(h.wait_for(1), [(0, 11, AppendOutcome::Durable { lsn: 5 })]);
        assert!(h.shared.is_healthy());
        h.finish();
        let (_, report) = open(&cfg).unwrap();
        assert_eq!(
            (report.segments, report.records, report.truncated_tail),
            (2, 5, None)
        );
    }

    #[test]
    fn write_and_sync_failures_report_unavailable_and_leave_no_stale_records() {
        for path in [WritePath::Pwrite, WritePath::Mmap] {
            let tmp = tempfile::tempdir().unwrap();
            let mut cfg = test_cfg(tmp.path(), path);
            cfg.durability = Durability::Fsync;
            let (mut wal, _) = open(&cfg).unwrap();
            let [fail_write, fail_sync, _] = faulty(&mut wal);
            let h = Harness::start(wal, 1);
            for t in 0..5 {
                h.push(0, t, 100);
            }
            assert!(h
                .wait_for(5)
                .iter()
                .all(|c| matches!(c.2, AppendOutcome::Durable { .. })));
            for (flag, first_ticket) in [(&fail_write, 100), (&fail_sync, 200)] {
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
                for t in first_ticket..first_ticket + 3 {
                    h.push(0, t, 3000);
                }
                let done = h.wait_for(3);
                assert!(
                    done.iter().all(|c| c.2 == AppendOutcome::Unavailable),
                    "{done:?}"
                );
                assert!(!h.shared.is_healthy());
                assert_eq!(h.shared.durable_lsn(), 5);
                flag.store(false, std::sync::atomic::Ordering::Relaxed);
            }
            // The fault cleared: the next (shorter) batch reuses LSN 6 and health returns.
            h.push(0, 300, 10);
            assert_eq!(h.wait_for(1), [(0, 300, AppendOutcome::Durable { lsn: 6 })]);
            assert!(h.shared.is_healthy());
            h.finish();
            // Recovery finds exactly the six durable events and no leftovers of failed batches.
            let (_, report) = open(&cfg).unwrap();
            assert_eq!(
                (report.records, report.truncated_tail),
                (6, None),
                "{path:?}"
            );
            let got = read_events(&cfg.dir);
            assert_eq!(got[5], (6, sample_event(300, 10)));
        }
    }
}
