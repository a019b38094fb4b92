//! A core's commit: the helper thread that does the core's blocking file I/O, one batch per
//! wake-up (BENCHMARKS.md row C1: an fdatasync's cost and its context switches are per batch),
//! or, with `wal.commit = "ring"` on io_uring, the core's own ring for its own log.
//!
//! Between batches (and at least every 100 ms) the helper also ticks each log (`Wal::tick`):
//! the checkpoint of what must exist, retention the pump asked for, and while a log is unhealthy
//! a probe write, so `/readyz` recovers without a request.
//!
//! This file is the shell only: the thread, the rings, the wake and the hand-back. What a
//! batch holds, its bound, its split between the ring and the helper and the per-batch commit
//! are the WAL's (`wal::group`); the batch's dead letters are dispatch's, written through
//! `wal::group::DeadLetters`.
//!
//! The core's loop collects what must reach the disk during a loop turn — ingest events, the
//! pump's `Done`/`Retry` records, dead letters — into the *next* batch ([`Committer::staging`]).
//! At the end of the turn, if no batch is with the helper, the next batch is handed over
//! ([`Committer::kick`]: one ring push and one unpark). The helper commits it
//! (`wal::group::process`: one write and one `fdatasync` per log the batch touches, then the
//! dead letters, every item's result filled in), hands the batch back and wakes the loop once
//! (`mio::Waker`). The loop takes it back ([`Committer::take_done`]) and gives it to ingest
//! (the 202s) and the pump.
//!
//! With `[replication]` the helper also frames each committed batch for the mirror thread, and
//! the loop holds a batch back from the helper until JetStream acknowledges it before
//! [`Committer::take_done`] gives it out (`sched::replicated`: the bound, the early `503`s).
//!
//! So a request crosses no thread: it is parsed, admitted, staged and answered on its core; the
//! helper only sees whole batches. While a batch is with the helper the next one fills, which is
//! what makes the group commit grow with the load. How the loop waits meanwhile depends on the
//! backend (measured side by side: benches/LOG.md, "Overlapping the commit"):
//! - **io_uring**: it goes on reading, parsing and admitting, so disk and CPU overlap (parking
//!   held the batch smaller);
//! - **mio**: while a batch carrying ingest records is with the helper, it parks on the helper
//!   rather than on the network ([`Committer::wait_done`], at most [`COMMIT_WAIT`];
//!   `sync::handback` says why and how the helper then unparks it instead of waking the poll):
//!   the same throughput as reading on, with fewer switches beyond four per commit.
//!
//! **On the ring** (`wal.commit = "ring"`, io_uring, `fsync`, `pwrite`): the core's own log
//! (slot 0, which takes every ingest record) stays with the loop. [`Committer::kick`] stages its
//! records (`wal::start_batch`; a segment roll, a checkpoint, a scrub or the zeros written ahead
//! run here, blocking) and submits the write linked to an `fdatasync` on the core's ring with
//! the turn's sends; the completion ([`Committer::on_ring_done`], `wal::finish_batch`) settles
//! the batch, and its 202s go out at the end of that turn. The helper keeps the adopted logs and
//! the dead letters. Not the default: measured here, the io-wq worker that runs the sync costs
//! more switches and more latency than the helper (BENCHMARKS.md row E9).
//!
//! Bounds: at most one batch with the helper, one on the ring and one filling. The filling
//! batch holds at most `max_batch` ingest records or [`wal::MAX_BATCH_BYTES`] of them
//! (`wal::group::Staging::has_room`; a refused offer waits for room, then `503 wal_busy`);
//! the pump's records are bounded by the pump (`MAX_RECORDS_IN_FLIGHT` per log) and dead letters
//! by `max_outstanding`. The two rings between loop and helper hold at most one batch each
//! (capacity 2).
#![forbid(unsafe_code)]

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_utils::sync::{Parker, Unparker};
use mio::Waker;

use crate::dispatch::dlq::DlqStore;
pub use crate::dispatch::pump::shell::{Batch, Item, Outcome, Owner, Port, Staging};
use crate::net::io::uring::{FileDone, Uring};
use crate::replication::message::FrameBuf;
use crate::replication::mirror::MirrorLink;
use crate::replication::state::Refuse;
use crate::ring;
use crate::sched::replicated::{frame_of, Awaiting, Replicate, Scope};
use crate::sync::handback::Handback;
use crate::wal::{self, AppendOutcome, PendingChunk};

/// A log the helper (or the loop's ring) commits, with its published state.
pub type HelperLog = wal::group::Log;

/// How long the helper sleeps with nothing to do if nobody unparks it (it then ticks its logs —
/// checkpoint, retention, probe — and checks whether the loop has closed the ring).
const IDLE_PARK: Duration = Duration::from_millis(100);

/// The longest the loop parks on the helper ([`Committer::wait_done`], mio only) before it
/// reads the network anyway: what a request that needs no commit (a refusal, `/metrics`, a new
/// connection) may wait beyond its turn while a sync is slow. A sync here takes 0.1–0.6 ms
/// (`sluice_wal_sync_seconds`), so normally the batch is back first.
pub const COMMIT_WAIT: Duration = Duration::from_millis(1);

/// The loop's side of the commit helper.
#[derive(Debug)]
pub struct Committer {
    to_helper: ring::Sender<Batch>,
    from_helper: ring::Receiver<Batch>,
    helper: Unparker,
    thread: Option<JoinHandle<()>>,
    /// The batch filling during the loop's turn (`wal::group::Staging`: its bound).
    next: Staging,
    /// A batch is with the helper.
    in_flight: bool,
    /// Items in that batch, and how many of them are ingest records (requests waiting).
    in_flight_items: usize,
    in_flight_ingest: usize,
    /// The loop's parker for [`Committer::wait_done`], and the helper's way to tell.
    parker: Parker,
    handback: Arc<Handback>,
    /// On io_uring: the core's own log, committed by the loop on its ring (module docs).
    local: Option<LocalLog>,
    /// With `[replication]`: the batches back from the helper waiting for JetStream
    /// (`sched::replicated`).
    awaiting: Option<Awaiting>,
    /// Logs adopted from another node, to the helper ([`Committer::adopt`]).
    adopt: std::sync::mpsc::Sender<(HelperLog, Option<AdoptedLink>)>,
}

/// The core's own log (slot 0) when the loop commits it on its io_uring ring.
#[derive(Debug)]
struct LocalLog {
    log: HelperLog,
    /// The batch whose last chunk's write and sync are on the ring (at most one).
    on_ring: Option<(Batch, PendingChunk)>,
    /// A batch that is back (from the ring, or committed on the loop), until
    /// [`Committer::take_done`].
    done: Option<Batch>,
    outcomes: Vec<AppendOutcome>,
}

impl Committer {
    /// Starts core `core`'s helper over `logs` (slot order) and `dlq`; `waker` wakes the loop.
    /// With `on_ring` (the io_uring backend) the core's own log (slot 0) stays with the loop,
    /// which commits it on its ring, if its durability and write path allow
    /// (`Wal::ring_committable`); the helper keeps the rest.
    pub fn start(
        core: usize,
        mut logs: Vec<HelperLog>,
        dlq: Arc<DlqStore>,
        waker: Arc<Waker>,
        max_batch: usize,
        on_ring: bool,
        replicate: Option<Replicate>,
    ) -> io::Result<Committer> {
        // The replicated commit frames every batch on the helper (`sched::replicated`).
        let on_ring = on_ring && replicate.is_none();
        let (mirror, awaiting) = match replicate {
            Some(r) => {
                let wake = waker.clone();
                r.link.set_wake(Box::new(move || {
                    let _ = wake.wake();
                }));
                let awaiting = r.awaiting();
                (Some((r.link, r.logs, FrameBuf::default())), Some(awaiting))
            }
            None => (None, None),
        };
        let local =
            (on_ring && logs.first().is_some_and(|l| l.wal.ring_committable())).then(|| LocalLog {
                log: logs.remove(0),
                on_ring: None,
                done: None,
                outcomes: Vec::new(),
            });
        let (to_helper, rx) = ring::channel(2);
        let (tx, from_helper) = ring::channel(2);
        let (adopt, adopted) = std::sync::mpsc::channel();
        let parker = Parker::new();
        let helper = parker.unparker().clone();
        let loop_parker = Parker::new();
        let handback = Arc::new(Handback::new());
        let h = Helper {
            first_slot: usize::from(local.is_some()),
            logs,
            dlq,
            rx,
            tx,
            parker,
            waker,
            loop_unparker: loop_parker.unparker().clone(),
            handback: handback.clone(),
            outcomes: Vec::new(),
            mirror,
            adopted,
            adopted_frames: Vec::new(),
            announced: Vec::new(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("sluice-sync-{core}"))
            .spawn(move || h.run())?;
        Ok(Committer {
            to_helper,
            from_helper,
            helper,
            thread: Some(thread),
            next: Staging::new(max_batch),
            in_flight: false,
            in_flight_items: 0,
            in_flight_ingest: 0,
            parker: loop_parker,
            handback,
            local,
            awaiting,
            adopt,
        })
    }

    /// The batch filling during this turn: each owner stages through its own port
    /// ([`Staging::port`]): ingest its events, the pump its records and dead letters, the DLQ
    /// replays their events and removals.
    pub fn staging(&mut self) -> &mut Staging {
        &mut self.next
    }

    /// The filling batch, to look at (its room: [`Staging::has_room`]).
    pub fn staged(&self) -> &Staging {
        &self.next
    }

    /// Hands the filling batch on, once per loop turn: the core's own log's records to the
    /// ring (`ring`, on io_uring) if its last commit is back, the rest to the helper if none is
    /// there (one ring push and one unpark).
    pub fn kick(&mut self, ring: Option<&mut Uring>) {
        if self.local.is_some() {
            self.kick_local(ring);
        }
        if self.in_flight || self.awaiting.as_ref().is_some_and(Awaiting::is_full) {
            return;
        }
        // Ingest records are all the own log's: on the ring path they stay for it, counted.
        let Some(batch) = self.next.take_batch(self.local.is_some()) else {
            return;
        };
        let (items, ingest) = (batch.len(), batch.ingest_records());
        match self.to_helper.try_push(batch) {
            Ok(()) => {
                self.in_flight = true;
                self.in_flight_items = items;
                self.in_flight_ingest = ingest;
                self.helper.unpark();
            }
            // Cannot happen (one batch at a time, capacity 2); keep the batch if it does.
            Err(e) => self.next.put_back(e.into_inner()),
        }
    }

    /// Log `log`, adopted while the node runs, takes the helper's next slot: the same position
    /// the core's pump gives it (`CorePump::adopt`, in the same turn). It is sent before any
    /// batch that could carry one of its records, and the helper takes what was sent before each
    /// batch it commits, so a record never reaches the helper before its log. With `link` (with
    /// `[replication]`), its records go to its own node's subject: each batch's in one more
    /// frame, which the batch does not wait for (`sched::replicated::Scope::Adopted`).
    pub fn adopt(&mut self, log: HelperLog, link: Option<AdoptedLink>) {
        if self.adopt.send((log, link)).is_err() {
            eprintln!("sluice: commit helper: gone; an adopted log is not committed");
        }
        self.helper.unpark();
    }

    /// Commits the own log's records of the filling batch: staged on the loop and submitted
    /// to `ring` (write linked to `fdatasync`), answered by [`Committer::on_ring_done`]; without
    /// a ring (the core fell back to mio) committed here, blocking.
    fn kick_local(&mut self, ring: Option<&mut Uring>) {
        let Some(local) = self.local.as_mut() else {
            return;
        };
        if local.on_ring.is_some() || local.done.is_some() {
            return;
        }
        let HelperLog { wal, shared } = &mut local.log;
        // Between commits, as the helper does for its logs: checkpoint, retention, probe.
        let now = wal.now_nanos();
        wal.tick(now);
        let Some(mut batch) = self.next.take_own() else {
            return;
        };
        let outcomes = &mut local.outcomes;
        match ring.filter(|r| !r.file_busy()) {
            Some(ring) => {
                if let Some((sub, chunk)) = wal::start_batch(wal, shared, batch.records(), outcomes)
                {
                    match ring.write_file(sub.fd, sub.offset, sub.buf, true) {
                        Ok(()) => {
                            local.on_ring = Some((batch, chunk));
                            return;
                        }
                        Err((e, buf)) => {
                            let errno = e.raw_os_error().unwrap_or(libc::EIO);
                            wal::finish_batch(wal, shared, outcomes, chunk, (buf, -errno, 0));
                        }
                    }
                }
            }
            None => wal::commit_batch(wal, shared, batch.records(), outcomes),
        }
        batch.set_appended(outcomes);
        local.done = Some(batch);
    }

    /// The ring's answer for the own log's commit (`net::io::uring::Op::File`).
    pub fn on_ring_done(&mut self, done: FileDone) {
        let Some(local) = self.local.as_mut() else {
            return;
        };
        let Some((mut batch, chunk)) = local.on_ring.take() else {
            eprintln!("sluice: commit: a file write completed with no commit on the ring");
            return;
        };
        let HelperLog { wal, shared } = &mut local.log;
        let results = (done.buf, done.written, done.synced);
        wal::finish_batch(wal, shared, &mut local.outcomes, chunk, results);
        batch.set_appended(&mut local.outcomes);
        local.done = Some(batch);
    }

    /// A batch that is back (from the ring first, then from the helper), if any: every item
    /// with its outcome.
    pub fn take_done(&mut self) -> Option<Batch> {
        if let Some(done) = self.local.as_mut().and_then(|l| l.done.take()) {
            return Some(done);
        }
        if let Some(awaiting) = self.awaiting.as_mut() {
            if let Some(done) = self.from_helper.try_pop() {
                self.in_flight = false;
                self.in_flight_items = 0;
                self.in_flight_ingest = 0;
                awaiting.push(done, std::time::Instant::now());
            }
            return awaiting.pop_replicated();
        }
        let done = self.from_helper.try_pop()?;
        self.in_flight = false;
        self.in_flight_items = 0;
        self.in_flight_ingest = 0;
        Some(done)
    }

    /// With `[replication]`: the ingest tickets to answer `503` now, and why (their batches
    /// wait for JetStream past `ack_timeout`, or the node is fenced; `sched::replicated`).
    /// The clock is read only while batches wait (never without replication).
    pub fn take_overdue(&mut self) -> Option<(Vec<u64>, Refuse)> {
        let awaiting = self.awaiting.as_mut().filter(|a| !a.is_empty())?;
        awaiting.overdue(std::time::Instant::now())
    }

    /// `timeout`, shortened to the moment a waiting batch's requests become overdue (the clock
    /// read only then).
    pub fn poll_timeout(&self, timeout: Duration) -> Duration {
        match self.awaiting.as_ref().and_then(Awaiting::next_deadline) {
            Some(at) => timeout.min(at.saturating_duration_since(std::time::Instant::now())),
            None => timeout,
        }
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
        let on_ring = self.local.as_ref().map_or(0, |l| {
            let batch = l.on_ring.as_ref().map(|(b, _)| b).or(l.done.as_ref());
            batch.map_or(0, |b| b.items.len())
        });
        let awaiting = self.awaiting.as_ref().map_or(0, Awaiting::items);
        self.next.len() + self.in_flight_items + on_ring + awaiting
    }

    /// Nothing filling, nothing with the helper or on the ring.
    pub fn is_idle(&self) -> bool {
        let local_idle = self
            .local
            .as_ref()
            .map_or(true, |l| l.on_ring.is_none() && l.done.is_none());
        let replicated = self.awaiting.as_ref().map_or(true, Awaiting::is_empty);
        !self.in_flight && self.next.is_empty() && local_idle && replicated
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
        if let Some(mut local) = self.local.take() {
            if local.on_ring.is_some() {
                // Hard stop: its records were never answered; recovery finds what is durable.
                eprintln!("sluice: a commit was still on the ring at the stop; no final sync");
            } else if let Err(e) = local.log.wal.sync() {
                eprintln!(
                    "sluice: final sync of {}: {e}",
                    local.log.wal.dir().display()
                );
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
    /// The slot of `logs[0]` (1 when the loop commits slot 0 on its ring).
    first_slot: usize,
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
    /// With `[replication]`: the way to the mirror thread and the frame being built.
    /// and the index of each log by slot.
    mirror: Option<(MirrorLink, Vec<u16>, FrameBuf)>,
    /// Logs adopted from another node ([`Committer::adopt`]): at most `ADOPTED_LOGS_MAX`
    /// (`dispatch::placement`) over the run.
    adopted: std::sync::mpsc::Receiver<(HelperLog, Option<AdoptedLink>)>,
    /// Their frames, each for its own node's subject.
    adopted_frames: Vec<AdoptedFrames>,
    /// With `[replication]`: each replicated log's retired point as the last frame said it.
    announced: Vec<wal::Lsn>,
}

/// Log `log`'s retired point for the stream: below it every segment is done (the pump's
/// retention says so) or deleted (1: nothing yet).
fn first_live(log: &HelperLog) -> wal::Lsn {
    let deleted = log.wal.checkpoint().map_or(1, |c| c.first_live_lsn);
    deleted.max(log.shared.done_below()).max(1)
}

/// Ends a frame of the own subject: each replicated log's durable LSN (`through`) and, once it
/// retired segments, its retired point (`first`), which `announced` keeps.
fn close_frame(
    frame: &mut FrameBuf,
    logs: &[HelperLog],
    indexes: &[u16],
    announced: &mut Vec<wal::Lsn>,
) {
    announced.resize(indexes.len(), 1);
    for (i, (log, &index)) in logs.iter().zip(indexes.iter()).enumerate() {
        frame.through(index, log.shared.durable_lsn());
        let first = first_live(log);
        if first > 1 {
            frame.first(index, first);
        }
        announced[i] = first;
    }
}

/// An adopted log's way to its node's subject: its index there (the `K` of its `core-K`) and
/// the link (`replication::mirror::SubjectOpener`).
pub type AdoptedLink = (u16, MirrorLink);

/// An adopted log's frames ([`Scope::Adopted`]).
#[derive(Debug)]
struct AdoptedFrames {
    slot: usize,
    index: u16,
    link: MirrorLink,
    frame: FrameBuf,
}

impl Helper {
    /// The logs the loop adopted, each at the next slot ([`Committer::adopt`]).
    fn take_adopted(&mut self) {
        while let Ok((log, link)) = self.adopted.try_recv() {
            self.logs.push(log);
            if let Some((index, link)) = link {
                self.adopted_frames.push(AdoptedFrames {
                    slot: self.first_slot + self.logs.len() - 1,
                    index,
                    link,
                    frame: FrameBuf::default(),
                });
            }
        }
    }

    /// With `[replication]`: a log retired segments (`Wal::tick`) since the last frame said so.
    /// A frame of its own says it (each log's `through` and `first`), so the stream may drop
    /// what lies below even when no batch follows (`replication::retention`). It holds no batch.
    fn announce_retired(&mut self) {
        let Some((link, indexes, frame)) = self.mirror.as_mut() else {
            return;
        };
        let moved = (self.logs.iter().zip(indexes.iter()).enumerate())
            .any(|(i, (log, _))| self.announced.get(i).copied().unwrap_or(1) != first_live(log));
        if moved && frame.is_empty() {
            close_frame(frame, &self.logs, indexes, &mut self.announced);
            link.submit(frame.take());
        }
    }

    /// The batch's records of each adopted log, on its own node's subject. They hold nothing:
    /// the batch settles with its own frame (`Committer::adopt`).
    fn frame_adopted(&mut self, batch: &Batch) {
        let first = self.first_slot;
        for a in &mut self.adopted_frames {
            let (scope, mut full) = (
                Scope::Adopted {
                    slot: a.slot,
                    index: a.index,
                },
                Vec::new(),
            );
            frame_of(batch, scope, &mut a.frame, a.link.frame_limit(), &mut full);
            if a.frame.is_empty() && full.is_empty() {
                continue;
            }
            for f in full {
                a.link.submit(f);
            }
            let log = &self.logs[a.slot - first];
            a.frame.through(a.index, log.shared.durable_lsn());
            // Where the log begins (a log rebuilt from a purged stream begins above 1): the
            // subject's last message must say it for a later restore (`replication::restore`).
            let begins = first_live(log);
            if begins > 1 {
                a.frame.first(a.index, begins);
            }
            a.link.submit(a.frame.take());
        }
    }

    fn run(mut self) {
        // Its wake-ups must not preempt the loop mid-turn (`sched::thread_policy`).
        if let Err(e) = super::thread_policy::set_current_batch() {
            eprintln!("sluice: commit helper: SCHED_BATCH not set ({e}); default policy kept");
        }
        loop {
            self.take_adopted();
            for log in &mut self.logs {
                // Checkpoint (at least once a second while written), retention requests, and a
                // probe of a failed disk so health returns without a request (`Wal::tick`).
                let now = log.wal.now_nanos();
                log.wal.tick(now);
            }
            self.announce_retired();
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

    /// One batch: its commit (`wal::group::process`: one group commit per log it touches, then
    /// its dead letters), then back to the loop with one wake (or one unpark of a parked loop).
    fn serve(&mut self, mut batch: Batch) {
        self.take_adopted();
        let (logs, first) = (&mut self.logs[..], self.first_slot);
        wal::group::process(logs, first, &mut batch, &*self.dlq, &mut self.outcomes);
        if let Some((link, indexes, frame)) = self.mirror.as_mut() {
            let mut full = Vec::new();
            frame_of(
                &batch,
                Scope::Own(indexes),
                frame,
                link.frame_limit(),
                &mut full,
            );
            if !frame.is_empty() || !full.is_empty() {
                for f in full {
                    link.submit(f);
                }
                close_frame(frame, &self.logs, indexes, &mut self.announced);
                // The batch settles once its last frame is acknowledged (in order: all are).
                batch.hold = link.submit(frame.take());
            }
        }
        self.frame_adopted(&batch);
        if self.tx.try_push(batch).is_err() {
            eprintln!("sluice: commit helper: the loop's ring is closed; batch dropped");
        }
        if self.handback.loop_parked() {
            self.loop_unparker.unpark();
        } else {
            let _ = self.waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::format::tests::sample_event;
    use crate::wal::recover::tests::{read_events, test_cfg};
    use crate::wal::{Record, WalShared, WritePath};
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
        let mut c = Committer::start(0, logs, dlq, waker, 4, false, None).unwrap();
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
        let t0 = std::time::Instant::now();
        let waited = c.wait_for_commit(long);
        // The helper may be back before the loop looks (a busy machine): then there is nothing
        // to park for, and the poll may wait as asked; the batch is there to take.
        assert!(
            waited == Duration::ZERO || !c.from_helper.is_empty(),
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
            c.staging().port(Owner::Ingest).event(
                0,
                round,
                Record::Event(sample_event(round, 100)),
            );
            c.kick(None);
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
        let mut c = Committer::start(0, logs, dlq, waker, 4, false, None).unwrap();
        for t in 0..4u64 {
            assert!(c.staging().has_room(1000));
            c.staging().port(Owner::Ingest).event(
                (t % 2) as usize,
                t,
                Record::Event(sample_event(t, 100)),
            );
        }
        assert!(!c.staging().has_room(10), "max_batch ingest records");
        c.kick(None);
        assert!(!c.is_idle());
        c.staging()
            .port(Owner::Ingest)
            .event(0, 9, Record::Event(sample_event(9, 100)));
        c.kick(None); // one batch at a time: stays filling
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
        c.kick(None);
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
                c.on_ring_done(ring.take_file_done().expect("a file op ended"));
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
        let mut c = Committer::start(0, vec![own, adopted], dlq, waker, 8, true, None).unwrap();
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
        let mut c = Committer::start(0, vec![own], dlq, waker, 8, true, None).unwrap();
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
        let mut c = Committer::start(0, vec![own], dlq, waker, 8, true, None).unwrap();
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
