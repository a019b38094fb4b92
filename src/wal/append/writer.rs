//! Group commit of one batch of records into one log: [`commit_batch`], or, for a caller that
//! submits the write and `fdatasync` on its own io_uring ring, [`start_batch`] then
//! [`finish_batch`] with the kernel's results (same staging, same outcomes, same failure
//! handling; only the last chunk's write and sync leave this module).
//!
//! The caller (a core's commit helper or loop, `wal::commit`) hands over a whole batch at once. The
//! records are staged with consecutive LSNs into the log's staging buffer, closed by the batch's
//! commit marker (`format::marker`, appended to the same buffer), and committed with one
//! write and one sync (more only when the batch crosses into a new segment); on success the
//! log's [`WalShared::durable_lsn`] is published (`Release`). Each record gets its own
//! [`AppendOutcome`], in batch order. A write or sync failure turns the outcomes of the failed
//! chunk and everything after it into `Unavailable` (none of them is in the log) and marks the
//! log unhealthy; the next successful commit marks it healthy again.
//!
//! Failures are logged without flooding a failing disk's log (a commit per loop turn may fail
//! for minutes): [`FailureLog`](crate::wal::append::failure_log::FailureLog).
#![forbid(unsafe_code)]

use crate::wal::append::failure_log::failure_line;
use crate::wal::append::{Prepared, Staged, Submission, Wal};
use crate::wal::format::Record;
use crate::wal::{AppendOutcome, WalShared};
use std::sync::atomic::Ordering;

/// Commits `records` to `wal` as one group commit, appending one outcome per record to
/// `outcomes` (cleared first). `shared` is the log's published state.
///
/// The batch should respect `Wal::max_batch` and [`crate::wal::MAX_BATCH_BYTES`]; a larger one is still
/// committed correctly (only with a larger write).
pub fn commit_batch<'a>(
    wal: &mut Wal,
    shared: &WalShared,
    records: impl IntoIterator<Item = &'a Record>,
    outcomes: &mut Vec<AppendOutcome>,
) {
    if let Some(from) = stage_batch(wal, shared, records, outcomes) {
        let staged = wal.staged();
        let res = wal.commit();
        settle_chunk(wal, shared, &mut outcomes[from..], staged, res);
    }
}

/// The last chunk of a batch begun by [`start_batch`], whose write and sync the caller submits.
#[derive(Debug)]
#[must_use = "the chunk's outcomes stay tentative until finish_batch"]
pub struct PendingChunk {
    /// The chunk's first outcome, and the records it stages.
    from: usize,
    staged: u64,
}

/// [`commit_batch`] for a caller that submits the write and `fdatasync` of the batch's last
/// chunk itself (a core's io_uring ring): stages `records`, committing and rolling here at a
/// segment boundary (blocking, once per segment), then starts the last chunk's commit
/// (`Wal::start_commit`). Returns what to submit, with the chunk to hand back to
/// [`finish_batch`] with the results; until then the chunk's outcomes are tentative and nothing
/// else may use `wal`. Returns `None` when the batch ended here: every outcome is final.
pub fn start_batch<'a>(
    wal: &mut Wal,
    shared: &WalShared,
    records: impl IntoIterator<Item = &'a Record>,
    outcomes: &mut Vec<AppendOutcome>,
) -> Option<(Submission, PendingChunk)> {
    let from = stage_batch(wal, shared, records, outcomes)?;
    let staged = wal.staged();
    match wal.start_commit() {
        Prepared::Submit(s) => Some((s, PendingChunk { from, staged })),
        Prepared::Done(res) => {
            settle_chunk(wal, shared, &mut outcomes[from..], staged, res);
            None
        }
    }
}

/// Ends a batch begun by [`start_batch`]: `buf` is the submission's buffer back, `written` and
/// `synced` the kernel's results (bytes or `-errno`; `0` or `-errno`). Publishes the durable
/// LSN, or turns the chunk's outcomes into `Unavailable`, as [`commit_batch`] does.
pub fn finish_batch(
    wal: &mut Wal,
    shared: &WalShared,
    outcomes: &mut [AppendOutcome],
    chunk: PendingChunk,
    (buf, written, synced): (Vec<u8>, i32, i32),
) {
    let res = wal.finish_commit(buf, written, synced);
    settle_chunk(wal, shared, &mut outcomes[chunk.from..], chunk.staged, res);
}

/// Stages `records` (one outcome each, appended to `outcomes`, cleared first), committing and
/// rolling at each segment boundary. Returns the first outcome of the last chunk, still staged
/// and tentative; `None` if a commit or roll failed (every outcome from there on is
/// `Unavailable`, nothing is staged).
fn stage_batch<'a>(
    wal: &mut Wal,
    shared: &WalShared,
    records: impl IntoIterator<Item = &'a Record>,
    outcomes: &mut Vec<AppendOutcome>,
) -> Option<usize> {
    outcomes.clear();
    // An unhealthy log is not written: the probe (`Wal::tick`, at most every `PROBE_EVERY`)
    // is its only retry, so a full or failing disk costs no work per batch.
    let mut failed = !shared.is_healthy();
    let mut chunk_start = 0;
    for record in records {
        loop {
            if failed {
                outcomes.push(AppendOutcome::Unavailable);
                break;
            }
            match wal.stage_record(record) {
                Ok(Staged::Lsn(lsn)) => outcomes.push(AppendOutcome::Durable { lsn }),
                // Above the WAL's field bounds (or larger than a segment): refuse this one only.
                Err(_) => outcomes.push(AppendOutcome::Unavailable),
                Ok(Staged::NoRoom) => {
                    let staged = wal.staged();
                    let res = wal.commit();
                    failed = !settle_chunk(wal, shared, &mut outcomes[chunk_start..], staged, res)
                        || !roll(wal, shared);
                    chunk_start = outcomes.len();
                    continue; // stage this record again, in the new segment
                }
            }
            break;
        }
    }
    (!failed).then_some(chunk_start)
}

/// The end of a chunk's commit (`res`; `staged` records, whose outcomes are `outcomes`): on
/// success publishes the durable LSN; on failure turns the chunk's tentative outcomes into
/// `Unavailable`. Returns success.
fn settle_chunk(
    wal: &mut Wal,
    shared: &WalShared,
    outcomes: &mut [AppendOutcome],
    staged: u64,
    res: std::io::Result<()>,
) -> bool {
    if staged == 0 {
        return true;
    }
    match res {
        Ok(()) => {
            // Release: pairs with `WalShared::durable_lsn`'s Acquire (module docs there).
            shared.durable_lsn.store(wal.last_lsn(), Ordering::Release);
            shared.appends_total.fetch_add(staged, Ordering::Relaxed);
            shared.healthy.store(true, Ordering::Relaxed);
            if let Some(n) = wal.failure_log.succeeded() {
                let dir = wal.dir().display();
                eprintln!("sluice: wal: commits to {dir} succeed again after {n} failures");
            }
            true
        }
        Err(e) => {
            shared.count_commit_failure(&e);
            log_failure(wal, |wal| {
                let segment = wal.active_segment().display();
                let errno = e.raw_os_error().unwrap_or(0);
                format!("committing to {segment} failed: {e} (errno {errno})")
            });
            fail(shared, outcomes);
            false
        }
    }
}

/// Counts a failure; prints it (`what` formatted only then) if a line is due.
fn log_failure(wal: &mut Wal, what: impl FnOnce(&Wal) -> String) {
    let now = wal.now_nanos();
    if let Some((skipped, streak)) = wal.failure_log.failed(now) {
        eprintln!("{}", failure_line(&what(wal), skipped, streak));
    }
}

fn roll(wal: &mut Wal, shared: &WalShared) -> bool {
    match wal.roll() {
        Ok(()) => true,
        Err(e) => {
            shared.count_commit_failure(&e);
            log_failure(wal, |wal| {
                let dir = wal.dir().display();
                let errno = e.raw_os_error().unwrap_or(0);
                format!("starting a new segment in {dir} failed: {e} (errno {errno})")
            });
            fail(shared, &mut []);
            false
        }
    }
}

fn fail(shared: &WalShared, outcomes: &mut [AppendOutcome]) {
    shared.healthy.store(false, Ordering::Relaxed);
    for o in outcomes {
        *o = AppendOutcome::Unavailable;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use crate::wal::format::tests::sample_event;
    use crate::wal::recover::tests::{read_events, test_cfg};
    use crate::wal::segment::SegmentFile;
    use crate::wal::{open, Durability, Lsn, WritePath, MAX_BODY_BYTES};
    use std::io;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// A log and its published state; records pushed are committed as one batch by `flush`
    /// (or `wait_for`), as a core's commit helper does with a loop turn's records.
    pub(crate) struct Harness {
        wal: Wal,
        pending: Vec<(usize, u64, Record)>,
        done: Vec<(usize, u64, AppendOutcome)>,
        pub(crate) shared: Arc<WalShared>,
        batches: usize,
    }

    impl Harness {
        pub(crate) fn start(mut wal: Wal, _producers: usize) -> Harness {
            let shared = Arc::new(WalShared::new());
            shared.durable_lsn.store(wal.last_lsn(), Ordering::Release);
            wal.shared = Some(shared.clone());
            Harness {
                wal,
                pending: Vec::new(),
                done: Vec::new(),
                shared,
                batches: 0,
            }
        }

        fn push(&mut self, producer: usize, ticket: u64, body: usize) {
            self.push_record(producer, ticket, Record::Event(sample_event(ticket, body)));
        }

        pub(crate) fn push_record(&mut self, producer: usize, ticket: u64, record: Record) {
            self.pending.push((producer, ticket, record));
        }

        /// Commits what was pushed as one batch.
        pub(crate) fn flush(&mut self) {
            if self.pending.is_empty() {
                return;
            }
            let batch = std::mem::take(&mut self.pending);
            let mut outcomes = Vec::new();
            commit_batch(
                &mut self.wal,
                &self.shared,
                batch.iter().map(|(_, _, r)| r),
                &mut outcomes,
            );
            self.batches += 1;
            for ((p, t, _), o) in batch.into_iter().zip(outcomes) {
                self.done.push((p, t, o));
            }
        }

        /// Commits what is pending and returns the `n` outcomes since the last call.
        pub(crate) fn wait_for(&mut self, n: usize) -> Vec<(usize, u64, AppendOutcome)> {
            self.flush();
            assert_eq!(self.done.len(), n, "outcomes");
            std::mem::take(&mut self.done)
        }

        /// The log's probe, as its owner's tick runs it while the log is unhealthy (the only
        /// retry then: a batch on an unhealthy log is refused unwritten).
        pub(crate) fn probe(&mut self) {
            if self.wal.probe().is_ok() {
                self.shared.healthy.store(true, Ordering::Relaxed);
            }
        }

        pub(crate) fn finish(mut self) -> Arc<WalShared> {
            self.flush();
            self.wal.sync().unwrap();
            self.shared
        }
    }

    #[test]
    fn writer_end_to_end_group_commits_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let mut cfg = test_cfg(tmp.path(), WritePath::Pwrite);
        cfg.durability = Durability::Fsync;
        let (wal, _) = open(&cfg).unwrap();
        let mut h = Harness::start(wal, 3);
        for ticket in 0..600u64 {
            h.push(ticket as usize % 3, ticket, 1024);
        }
        let done = h.wait_for(600);
        assert_eq!(h.batches, 1, "one group commit for the whole batch");
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
        assert_eq!(shared.appends_total.load(Ordering::Relaxed), 600);
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
        let mut h = Harness::start(wal, 1);
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
        let mut h = Harness::start(wal, 1);
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
            if self.fail_write.load(Ordering::Relaxed) {
                self.inner.write_at(offset, &buf[..buf.len() / 2])?;
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            self.inner.write_at(offset, buf)
        }
        fn sync(&mut self, offset: u64, len: u64) -> io::Result<()> {
            if self.fail_sync.load(Ordering::Relaxed) {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            self.inner.sync(offset, len)
        }
        fn allocate(&mut self, len: u64) -> io::Result<()> {
            if self.fail_allocate.load(Ordering::Relaxed) {
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
        let mut h = Harness::start(wal, 1);
        for t in 0..4 {
            h.push(0, t, MAX_BODY_BYTES / 4); // four quarter-max events fill the smallest segment
        }
        assert_eq!(
            h.wait_for(4).last().unwrap().2,
            AppendOutcome::Durable { lsn: 4 }
        );
        fail_allocate.store(true, Ordering::Relaxed);
        h.push(0, 10, MAX_BODY_BYTES / 4);
        assert_eq!(h.wait_for(1), [(0, 10, AppendOutcome::Unavailable)]);
        assert!(!h.shared.is_healthy());
        fail_allocate.store(false, Ordering::Relaxed);
        // Unhealthy: refused unwritten, however often asked, until the probe succeeds.
        h.push(0, 11, MAX_BODY_BYTES / 4);
        assert_eq!(h.wait_for(1), [(0, 11, AppendOutcome::Unavailable)]);
        h.probe();
        assert!(h.shared.is_healthy());
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
            let mut h = Harness::start(wal, 1);
            for t in 0..5 {
                h.push(0, t, 100);
            }
            assert!(h
                .wait_for(5)
                .iter()
                .all(|c| matches!(c.2, AppendOutcome::Durable { .. })));
            for (flag, first_ticket) in [(&fail_write, 100), (&fail_sync, 200)] {
                flag.store(true, Ordering::Relaxed);
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
                flag.store(false, Ordering::Relaxed);
                h.probe();
            }
            // The fault cleared and the probe healed the log: the next (shorter) batch reuses
            // LSN 6.
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
