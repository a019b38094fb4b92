//! The loop's side of a core's commit ([`Committer`]): the filling batch, the hand-over to the
//! helper thread (`helper.rs`) and the hand-back, the loop's park on it, the own log's commit on
//! the loop's io_uring ring, and the batches held back (`wal::commit`'s docs).
#![forbid(unsafe_code)]

use std::io;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_utils::sync::{Parker, Unparker};

use super::helper::Helper;
use super::parts::{AdoptedOf, BatchOf, FileRing, Hold, Parts, StagingOf, Wiring};
use crate::ring;
use crate::sync::handback::Handback;
use crate::wal::append::group::{Log, Staging};
use crate::wal::append::writer::{commit_batch, finish_batch, start_batch, PendingChunk};
use crate::wal::AppendOutcome;

/// The longest the loop parks on the helper ([`Committer::wait_done`], mio only) before it
/// reads the network anyway: what a request that needs no commit (a refusal, `/metrics`, a new
/// connection) may wait beyond its turn while a sync is slow. A sync here takes 0.1–0.6 ms
/// (`sluice_wal_sync_seconds`), so normally the batch is back first.
pub const COMMIT_WAIT: Duration = Duration::from_millis(1);

/// The loop's side of the commit helper.
pub struct Committer<P: Parts> {
    to_helper: ring::Sender<BatchOf<P>>,
    from_helper: ring::Receiver<BatchOf<P>>,
    helper: Unparker,
    thread: Option<JoinHandle<()>>,
    /// The batch filling during the loop's turn (`wal::group::Staging`: its bound).
    next: StagingOf<P>,
    /// A batch is with the helper.
    in_flight: bool,
    /// Items in that batch, and how many of them are ingest records (requests waiting).
    in_flight_items: usize,
    in_flight_ingest: usize,
    /// The loop's parker for [`Committer::wait_done`], and the helper's way to tell.
    parker: Parker,
    handback: Arc<Handback>,
    /// On io_uring: the core's own log, committed by the loop on its ring (module docs).
    local: Option<LocalLog<P>>,
    /// The batches back from the helper waiting before they settle ([`Hold`]).
    hold: Option<P::Hold>,
    /// Logs adopted from another node, to the helper ([`Committer::adopt`]).
    adopt: mpsc::Sender<(Log, Option<AdoptedOf<P>>)>,
}

impl<P: Parts> std::fmt::Debug for Committer<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Committer")
            .field("filling", &self.next.len())
            .field("in_flight_items", &self.in_flight_items)
            .field("on_ring", &self.local.is_some())
            .field("held", &self.hold.as_ref().map(Hold::items))
            .finish_non_exhaustive()
    }
}

/// The core's own log (slot 0) when the loop commits it on its io_uring ring.
struct LocalLog<P: Parts> {
    log: Log,
    /// The batch whose last chunk's write and sync are on the ring (at most one).
    on_ring: Option<(BatchOf<P>, PendingChunk)>,
    /// A batch that is back (from the ring, or committed on the loop), until
    /// [`Committer::take_done`].
    done: Option<BatchOf<P>>,
    outcomes: Vec<AppendOutcome>,
}

impl<P: Parts> Committer<P> {
    /// Starts core `core`'s helper over `logs` (slot order) with `wiring`. With `on_ring` (the
    /// io_uring backend) the core's own log (slot 0) stays with the loop, which commits it on
    /// its ring, if its durability and write path allow (`Wal::ring_committable`) and no batch
    /// is held ([`Wiring::hold`]); the helper keeps the rest.
    pub fn start(
        core: usize,
        mut logs: Vec<Log>,
        wiring: Wiring<P>,
        max_batch: usize,
        on_ring: bool,
    ) -> io::Result<Committer<P>> {
        let Wiring {
            dead,
            wake,
            mirror,
            hold,
        } = wiring;
        let on_ring = on_ring && hold.is_none();
        let local =
            (on_ring && logs.first().is_some_and(|l| l.wal.ring_committable())).then(|| LocalLog {
                log: logs.remove(0),
                on_ring: None,
                done: None,
                outcomes: Vec::new(),
            });
        let (to_helper, rx) = ring::channel(2);
        let (tx, from_helper) = ring::channel(2);
        let (adopt, adopted) = mpsc::channel();
        let parker = Parker::new();
        let helper = parker.unparker().clone();
        let loop_parker = Parker::new();
        let handback = Arc::new(Handback::new());
        let h = Helper::<P> {
            first_slot: usize::from(local.is_some()),
            logs,
            dead,
            rx,
            tx,
            parker,
            wake,
            loop_unparker: loop_parker.unparker().clone(),
            handback: handback.clone(),
            outcomes: Vec::new(),
            mirror,
            adopted,
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
            hold,
            adopt,
        })
    }

    /// The batch filling during this turn: each owner stages through its own port
    /// ([`Staging::port`]): ingest its events, the pump its records and dead letters, the DLQ
    /// replays their events and removals.
    pub fn staging(&mut self) -> &mut StagingOf<P> {
        &mut self.next
    }

    /// The filling batch, to look at (its room: [`Staging::has_room`]).
    pub fn staged(&self) -> &StagingOf<P> {
        &self.next
    }

    /// The batches held back ([`Hold`]), if the commit holds any.
    pub fn hold(&self) -> Option<&P::Hold> {
        self.hold.as_ref()
    }

    /// The same, to change (the replicated commit's early answers).
    pub fn hold_mut(&mut self) -> Option<&mut P::Hold> {
        self.hold.as_mut()
    }

    /// Hands the filling batch on, once per loop turn: the core's own log's records to the
    /// ring (`ring`, on io_uring) if its last commit is back, the rest to the helper if none is
    /// there and the hold has room (one ring push and one unpark).
    pub fn kick(&mut self, ring: Option<&mut dyn FileRing>) {
        if self.local.is_some() {
            self.kick_local(ring);
        }
        if self.in_flight || self.hold.as_ref().is_some_and(Hold::is_full) {
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
    /// `[replication]`), the helper's mirror is given its slot and way
    /// ([`Mirror::adopt`](super::Mirror::adopt)).
    pub fn adopt(&mut self, log: Log, link: Option<AdoptedOf<P>>) {
        if self.adopt.send((log, link)).is_err() {
            eprintln!("sluice: commit helper: gone; an adopted log is not committed");
        }
        self.helper.unpark();
    }

    /// Commits the own log's records of the filling batch: staged on the loop and submitted
    /// to `ring` (write linked to `fdatasync`), answered by [`Committer::on_ring_done`]; without
    /// a ring (the core fell back to mio) committed here, blocking.
    fn kick_local(&mut self, ring: Option<&mut dyn FileRing>) {
        let Some(local) = self.local.as_mut() else {
            return;
        };
        if local.on_ring.is_some() || local.done.is_some() {
            return;
        }
        let Log { wal, shared } = &mut local.log;
        // Between commits, as the helper does for its logs: checkpoint, retention, probe.
        let now = wal.now_nanos();
        wal.tick(now);
        let Some(mut batch) = self.next.take_own() else {
            return;
        };
        let outcomes = &mut local.outcomes;
        match ring.filter(|r| !r.file_busy()) {
            Some(ring) => {
                if let Some((sub, chunk)) = start_batch(wal, shared, batch.records(), outcomes) {
                    match ring.write_file(sub.fd, sub.offset, sub.buf, true) {
                        Ok(()) => {
                            local.on_ring = Some((batch, chunk));
                            return;
                        }
                        Err((e, buf)) => {
                            let errno = e.raw_os_error().unwrap_or(libc::EIO);
                            finish_batch(wal, shared, outcomes, chunk, (buf, -errno, 0));
                        }
                    }
                }
            }
            None => commit_batch(wal, shared, batch.records(), outcomes),
        }
        batch.set_appended(outcomes);
        local.done = Some(batch);
    }

    /// The ring's answer for the own log's commit: the buffer, the bytes written (or
    /// `-errno`) and the sync's result (`0` or `-errno`; `net::io::uring::FileDone`).
    pub fn on_ring_done(&mut self, results: (Vec<u8>, i32, i32)) {
        let Some(local) = self.local.as_mut() else {
            return;
        };
        let Some((mut batch, chunk)) = local.on_ring.take() else {
            eprintln!("sluice: commit: a file write completed with no commit on the ring");
            return;
        };
        let Log { wal, shared } = &mut local.log;
        finish_batch(wal, shared, &mut local.outcomes, chunk, results);
        batch.set_appended(&mut local.outcomes);
        local.done = Some(batch);
    }

    /// A batch that is back (from the ring first, then from the helper through the hold), if
    /// any: every item with its outcome.
    pub fn take_done(&mut self) -> Option<BatchOf<P>> {
        if let Some(done) = self.local.as_mut().and_then(|l| l.done.take()) {
            return Some(done);
        }
        let back = self.from_helper.try_pop();
        if back.is_some() {
            self.in_flight = false;
            self.in_flight_items = 0;
            self.in_flight_ingest = 0;
        }
        match self.hold.as_mut() {
            Some(hold) => {
                if let Some(done) = back {
                    hold.push(done);
                }
                hold.pop()
            }
            None => back,
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

    /// Records (and dead letters) filling plus those with the helper, on the ring or held,
    /// for the gauge.
    pub fn queued(&self) -> usize {
        let on_ring = self.local.as_ref().map_or(0, |l| {
            let batch = l.on_ring.as_ref().map(|(b, _)| b).or(l.done.as_ref());
            batch.map_or(0, |b| b.items.len())
        });
        let held = self.hold.as_ref().map_or(0, Hold::items);
        self.next.len() + self.in_flight_items + on_ring + held
    }

    /// Nothing filling, nothing with the helper, on the ring or held.
    pub fn is_idle(&self) -> bool {
        let local_idle = self
            .local
            .as_ref()
            .map_or(true, |l| l.on_ring.is_none() && l.done.is_none());
        let held = self.hold.as_ref().map_or(true, Hold::is_empty);
        !self.in_flight && self.next.is_empty() && local_idle && held
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

impl<P: Parts> Drop for Committer<P> {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
#[path = "committer_tests.rs"]
mod tests;
