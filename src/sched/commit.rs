//! A core's commit, wired: `wal::commit`'s committer and helper thread, given dispatch's DLQ for
//! the batch's dead letters, replication's mirror and hold (`sched::replicated`, with
//! `[replication]`), the loop's poll waker, the helper's scheduling policy
//! (`sched::thread_policy`), and the core's io_uring ring for the own log's commit
//! ([`FileRing`] for `net::io::uring::Uring`). The commit itself (the thread, the rings, the
//! wake, the hand-back, the ring commit of the own log) is the WAL's: `wal::commit`'s docs.
#![forbid(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use mio::Waker;

use crate::dispatch::dlq::{DlqEntry, DlqError, DlqStore};
pub use crate::dispatch::pump::shell::{Batch, Item, Outcome, Owner, Port, Staging};
use crate::net::io::uring::Uring;
use crate::replication::state::Refuse;
pub use crate::sched::replicated::AdoptedLink;
use crate::sched::replicated::{Awaiting, Mirrored, Replicate};
use crate::wal::commit::{FileRing, Hold, Parts, Wiring};

/// A log the helper (or the loop's ring) commits, with its published state.
pub type HelperLog = crate::wal::group::Log;

/// The parts a core's commit is wired with (module docs).
#[derive(Debug)]
pub struct Wired;

impl Parts for Wired {
    type Entry = DlqEntry;
    type Error = DlqError;
    type Dead = DlqStore;
    type Mirror = Mirrored;
    type Hold = Awaiting;
    fn helper_started() {
        // Its wake-ups must not preempt the loop mid-turn (`sched::thread_policy`).
        if let Err(e) = super::thread_policy::set_current_batch() {
            eprintln!("sluice: commit helper: SCHED_BATCH not set ({e}); default policy kept");
        }
    }
}

/// The loop's side of the core's commit.
pub type Committer = crate::wal::commit::Committer<Wired>;

impl FileRing for Uring {
    fn file_busy(&self) -> bool {
        Uring::file_busy(self)
    }
    fn write_file(
        &mut self,
        fd: RawFd,
        offset: u64,
        buf: Vec<u8>,
        sync: bool,
    ) -> Result<(), (io::Error, Vec<u8>)> {
        Uring::write_file(self, fd, offset, buf, sync)
    }
}

/// Starts core `core`'s commit over `logs` (slot order) and `dlq`; `waker` wakes the loop.
/// With `on_ring` (the io_uring backend) the core's own log (slot 0) stays with the loop, which
/// commits it on its ring, if its durability and write path allow (`Wal::ring_committable`)
/// and the commit is not replicated (the helper frames every batch); the helper keeps the rest.
pub fn start(
    core: usize,
    logs: Vec<HelperLog>,
    dlq: Arc<DlqStore>,
    waker: Arc<Waker>,
    max_batch: usize,
    on_ring: bool,
    replicate: Option<Replicate>,
) -> io::Result<Committer> {
    let (mirror, hold) = match replicate {
        Some(r) => {
            let wake = waker.clone();
            r.link.set_wake(Box::new(move || {
                let _ = wake.wake();
            }));
            let hold = r.awaiting();
            (Mirrored::new(Some((r.link, r.logs))), Some(hold))
        }
        None => (Mirrored::new(None), None),
    };
    let wiring = Wiring {
        dead: dlq,
        wake: Arc::new(move || {
            let _ = waker.wake();
        }),
        mirror,
        hold,
    };
    Committer::start(core, logs, wiring, max_batch, on_ring)
}

/// With `[replication]`: the ingest tickets to answer `503` now, and why (their batches
/// wait for JetStream past `ack_timeout`, or the node is fenced; `sched::replicated`).
/// The clock is read only while batches wait (never without replication).
pub fn take_overdue(c: &mut Committer) -> Option<(Vec<u64>, Refuse)> {
    let awaiting = c.hold_mut().filter(|a| !a.is_empty())?;
    awaiting.overdue(std::time::Instant::now())
}

/// `timeout`, shortened to the moment a waiting batch's requests become overdue (the clock
/// read only then).
pub fn poll_timeout(c: &Committer, timeout: Duration) -> Duration {
    match c.hold().and_then(Awaiting::next_deadline) {
        Some(at) => timeout.min(at.saturating_duration_since(std::time::Instant::now())),
        None => timeout,
    }
}

#[cfg(test)]
mod tests {
    //! The own log's commit on the core's real io_uring ring, through the wiring; the
    //! committer and helper alone are tested in `wal::commit`.
    use super::*;
    use crate::wal::format::tests::sample_event;
    use crate::wal::recover::tests::{read_events, test_cfg};
    use crate::wal::{AppendOutcome, Record, WalShared, WritePath};
    use mio::{Poll, Token};

    /// A core's poll (kept alive: the waker and the ring watch it), ring, DLQ and waker.
    fn ring_parts(dir: &std::path::Path) -> (Poll, Uring, Arc<DlqStore>, Arc<Waker>) {
        let dlq = Arc::new(DlqStore::open(&dir.join("dlq"), 10).unwrap());
        let poll = Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), Token(7)).unwrap());
        let ring = Uring::new(std::os::fd::AsRawFd::as_raw_fd(&poll)).unwrap();
        (poll, ring, dlq, waker)
    }

    /// Turns of a core's ring until `c` has a batch back (5 s at most): file completions go to
    /// the committer, as the io_uring loop does.
    fn ring_done(c: &mut Committer, ring: &mut Uring) -> Batch {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut cs = Vec::new();
        loop {
            if let Some(b) = c.take_done() {
                return b;
            }
            assert!(std::time::Instant::now() < deadline, "no commit came back");
            ring.wait(Duration::from_millis(20)).unwrap();
            ring.completions(&mut cs);
            if cs.iter().any(|x| x.op == crate::net::io::uring::Op::File) {
                let done = ring.take_file_done().expect("a file op ended");
                c.on_ring_done((done.buf, done.written, done.synced));
            }
        }
    }

    fn lsns(batch: &Batch) -> Vec<Option<u64>> {
        batch
            .outcomes
            .iter()
            .map(|o| match o {
                Outcome::Appended(AppendOutcome::Durable { lsn }) => Some(*lsn),
                Outcome::Appended(AppendOutcome::Unavailable) => None,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// Storage that fails on demand, also for a commit submitted to a ring (its hooks).
    struct RingFaults {
        inner: Box<dyn crate::wal::segment::SegmentFile>,
        fail_write: Arc<std::sync::atomic::AtomicBool>,
        fail_sync: Arc<std::sync::atomic::AtomicBool>,
    }

    impl crate::wal::segment::SegmentFile for RingFaults {
        fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
            self.inner.write_at(offset, buf)
        }
        fn sync(&mut self, offset: u64, len: u64) -> io::Result<()> {
            self.inner.sync(offset, len)
        }
        fn allocate(&mut self, len: u64) -> io::Result<()> {
            self.inner.allocate(len)
        }
        fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
            self.inner.raw_fd()
        }
        fn injected_write(&mut self, offset: u64, buf: &[u8]) -> Option<io::Result<()>> {
            let fail = self.fail_write.load(std::sync::atomic::Ordering::Relaxed);
            fail.then(|| {
                // Half of it reaches the file, as a failing write may leave.
                self.inner.write_at(offset, &buf[..buf.len() / 2])?;
                Err(io::Error::from_raw_os_error(libc::EIO))
            })
        }
        fn injected_sync(&mut self, _: u64, _: u64) -> io::Result<()> {
            match self.fail_sync.load(std::sync::atomic::Ordering::Relaxed) {
                true => Err(io::Error::from_raw_os_error(libc::EIO)),
                false => Ok(()),
            }
        }
    }

    fn ring_log(dir: &std::path::Path) -> (HelperLog, crate::wal::WalConfig) {
        let mut cfg = test_cfg(dir, WritePath::Pwrite);
        cfg.durability = crate::wal::Durability::Fsync;
        let (mut wal, _) = crate::wal::open(&cfg).unwrap();
        let shared = Arc::new(WalShared::new());
        wal.attach_shared(shared.clone());
        (HelperLog { wal, shared }, cfg)
    }

    #[test]
    fn the_own_log_commits_on_the_ring_and_the_others_on_the_helper() {
        if crate::net::io::uring::probe().is_err() {
            eprintln!("io_uring unavailable here; ring commit test not run");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let (own, own_cfg) = ring_log(&tmp.path().join("own"));
        let (adopted, adopted_cfg) = ring_log(&tmp.path().join("adopted"));
        let (own_shared, adopted_shared) = (own.shared.clone(), adopted.shared.clone());
        let (_poll, mut ring, dlq, waker) = ring_parts(tmp.path());
        let mut c = start(0, vec![own, adopted], dlq, waker, 8, true, None).unwrap();
        for t in 0..3u64 {
            c.staging()
                .port(Owner::Ingest)
                .event(0, t, Record::Event(sample_event(t, 100)));
        }
        c.staging()
            .port(Owner::Pump)
            .record(1, 50, Record::Event(sample_event(50, 10)));
        c.kick(Some(&mut ring));
        assert!(ring.file_busy(), "the own log's write is on the ring");
        assert_eq!(c.queued(), 4);
        c.staging()
            .port(Owner::Ingest)
            .event(0, 9, Record::Event(sample_event(9, 100)));
        c.kick(Some(&mut ring)); // one commit on the ring at a time: stays filling
        let mut back = [ring_done(&mut c, &mut ring), ring_done(&mut c, &mut ring)];
        back.sort_by_key(|b| b.items.len());
        assert_eq!(lsns(&back[0]), [Some(1)], "the adopted log, by the helper");
        assert_eq!(lsns(&back[1]), [Some(1), Some(2), Some(3)], "the own log");
        assert_eq!(own_shared.durable_lsn(), 3);
        assert_eq!(own_shared.sync_seconds.count(), 1, "one sync for the batch");
        assert_eq!(adopted_shared.durable_lsn(), 1);
        c.kick(Some(&mut ring));
        assert_eq!(lsns(&ring_done(&mut c, &mut ring)), [Some(4)]);
        assert!(c.is_idle());
        c.close();
        let got = read_events(&own_cfg.dir);
        assert_eq!(
            got.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        assert_eq!(got[3].1, sample_event(9, 100));
        assert_eq!(read_events(&adopted_cfg.dir).len(), 1);
    }

    #[test]
    fn a_ring_batch_rolls_the_segment_on_the_loop_and_commits_its_last_chunk_on_the_ring() {
        if crate::net::io::uring::probe().is_err() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let (own, cfg) = ring_log(tmp.path());
        let (_poll, mut ring, dlq, waker) = ring_parts(tmp.path());
        let mut c = start(0, vec![own], dlq, waker, 8, true, None).unwrap();
        // Four quarter-max events fill the smallest segment: the fifth starts a new one.
        let body = crate::wal::MAX_BODY_BYTES / 4;
        for t in 0..6u64 {
            c.staging()
                .port(Owner::Ingest)
                .event(0, t, Record::Event(sample_event(t, body)));
        }
        c.kick(Some(&mut ring));
        assert!(ring.file_busy(), "the chunk after the roll is on the ring");
        let done = ring_done(&mut c, &mut ring);
        assert_eq!(lsns(&done), (1..=6).map(Some).collect::<Vec<_>>());
        c.close();
        let (_, report) = crate::wal::open(&cfg).unwrap();
        assert_eq!(
            (report.segments, report.records, report.truncated_tail),
            (2, 6, None)
        );
    }

    #[test]
    fn a_failed_ring_commit_answers_unavailable_and_leaves_nothing_to_recover() {
        if crate::net::io::uring::probe().is_err() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let (mut own, cfg) = ring_log(tmp.path());
        let flags: [Arc<std::sync::atomic::AtomicBool>; 2] = Default::default();
        let f = flags.clone();
        own.wal.set_file_wrapper(Box::new(move |inner| {
            let [fail_write, fail_sync] = f.clone();
            Box::new(RingFaults {
                inner,
                fail_write,
                fail_sync,
            })
        }));
        let shared = own.shared.clone();
        let (_poll, mut ring, dlq, waker) = ring_parts(tmp.path());
        let mut c = start(0, vec![own], dlq, waker, 8, true, None).unwrap();
        let mut ticket = 0;
        let mut commit = |c: &mut Committer, ring: &mut Uring, n: usize| {
            for _ in 0..n {
                ticket += 1;
                c.staging().port(Owner::Ingest).event(
                    0,
                    ticket,
                    Record::Event(sample_event(ticket, 3000)),
                );
            }
            c.kick(Some(ring));
            lsns(&ring_done(c, ring))
        };
        assert_eq!(commit(&mut c, &mut ring, 2), [Some(1), Some(2)]);
        use std::sync::atomic::Ordering::Relaxed;
        for flag in &flags {
            flag.store(true, Relaxed);
            assert_eq!(commit(&mut c, &mut ring, 3), [None, None, None]);
            assert!(!shared.is_healthy());
            assert_eq!(shared.durable_lsn(), 2);
            flag.store(false, Relaxed);
            // Unhealthy: nothing is written until the probe (the next kick's tick, at most
            // every PROBE_EVERY) heals the log.
            std::thread::sleep(crate::wal::PROBE_EVERY);
        }
        // The fault cleared: the failed bytes are scrubbed, LSN 3 is reused.
        assert_eq!(commit(&mut c, &mut ring, 1), [Some(3)]);
        assert!(shared.is_healthy());
        c.close();
        let (_, report) = crate::wal::open(&cfg).unwrap();
        assert_eq!((report.records, report.truncated_tail), (3, None));
        assert_eq!(read_events(&cfg.dir)[2], (3, sample_event(9, 3000)));
    }
}
