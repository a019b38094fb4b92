//! [`Wal`]: the open log's append side — staging records, group commit, rollover, scrubbing.
//!
//! Records are encoded into one staging buffer; [`Wal::commit`] appends the batch's commit marker
//! (`format::marker`: room for it is kept when staging) and writes the whole buffer with a
//! single `write_at` and (in `Fsync` mode) a single `sync`: that is the group commit. A staged
//! chunk never spans segments: when a record does not fit, the caller commits what is staged,
//! calls [`Wal::roll`], and stages the record again.
//!
//! The `Wal` also keeps its directory's checkpoint ([`crate::wal::checkpoint`]): written at open, at
//! every roll, at retention ([`Wal::retire_below`]), at [`Wal::sync`], and at most every
//! [`CHECKPOINT_EVERY`] while records are committed ([`Wal::checkpoint_if_due`]). And it probes
//! a failed disk ([`Wal::probe`]) so health returns without a request having to write.
//! [`Wal::tick`] runs all of that; the loop that owns the log calls it every turn. The checkpoint
//! half (writing it, its failures, retention) is in `checkpointing.rs`.
#![forbid(unsafe_code)]

use super::{Durability, Lsn, WalError, WalShared, WritePath};
use crate::storage::{LockGuard, Storage};
use crate::sync::clock::{Clock, MonotonicClock};
use crate::wal::checkpoint::{Checkpoint, CheckpointFile, FailureStreak, LostRange};
use crate::wal::format::marker::{append_marker, MARKER_RECORD_BYTES};
use crate::wal::format::{
    append_record, encode_event_into, encode_payload_into, EncodeError, EventRecord, Record,
    RecordKind,
};
use crate::wal::segment::{segment_path, SegmentFile};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The checkpoint's durable LSN is brought up to date at least this often while records are
/// committed (and not more often: one `pwrite` + `fdatasync` of the checkpoint file each time).
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// While the log is unhealthy, a probe write is tried at most this often.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);
/// Bytes of zeros a probe writes (and syncs) at the end of the active segment.
const PROBE_BYTES: u64 = 4096;
/// `Os` durability: the active segment is synced (before the next batch is written) once this
/// many committed bytes are unsynced, and until then they are kept in memory, so that a failed
/// sync can be followed by a rewrite of them rather than trusting the page cache (after a failed
/// writeback Linux may drop the pages and report success on the next `fdatasync`). Bound of that
/// copy: this plus one batch (`MAX_BATCH_BYTES` of bodies, plus record headers).
pub const OS_SYNC_EVERY_BYTES: usize = 4 * 1024 * 1024;

/// Wraps each segment file the writer opens; the storage-fault seam (tests wrap the real file in
/// one that fails with `ENOSPC`, `EIO` or short writes on demand).
pub type FileWrapper = Box<dyn FnMut(Box<dyn SegmentFile>) -> Box<dyn SegmentFile> + Send>;

/// Zeros for scrubbing, written in pieces of this size.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// `Pwrite` path: before a batch is written past [`Active::zeroed_end`], this many bytes of
/// zeros are written after it, so the next batches *overwrite* written blocks. A segment is
/// `fallocate`d, and a write into its unwritten extents makes the next `fdatasync` convert them
/// and write the inode's metadata too: each sync then waits once more and costs more system CPU
/// (measured on ext4: benches/LOG.md, "Zeros ahead, the loop parked on its commit"; DESIGN.md
/// "Storage"). The zeros ride the batch's own `fdatasync`, once per MiB.
/// Recovery reads them as what they are: the zero tail after the last record.
pub(crate) const ZERO_AHEAD: u64 = 1024 * 1024;

/// The segment being appended to.
pub(crate) struct Active {
    pub(crate) path: PathBuf,
    /// LSN the segment is named by (its first record's).
    pub(crate) first_lsn: Lsn,
    pub(crate) file: Box<dyn SegmentFile>,
    /// Bytes the segment may hold (its preallocated size).
    pub(crate) capacity: u64,
    /// End of the last committed record: the next write goes here.
    pub(crate) end: u64,
    /// Bytes in `[end, dirty_end)` may hold the remains of a failed write (or a torn tail found by
    /// recovery) and must be zeroed before anything is written after `end`.
    pub(crate) dirty_end: u64,
    /// Bytes below this have been written (records or zeros) by this process: writes below it
    /// overwrite written blocks. See [`ZERO_AHEAD`].
    pub(crate) zeroed_end: u64,
}

/// A group commit for the caller to submit (`Wal::start_commit`): write `buf` at `offset` of
/// the segment file `fd`, then `fdatasync` it.
#[derive(Debug)]
pub struct Submission {
    pub fd: std::os::fd::RawFd,
    pub offset: u64,
    pub buf: Vec<u8>,
}

/// What [`Wal::start_commit`] did.
#[derive(Debug)]
pub(crate) enum Prepared {
    /// The commit is the caller's to submit.
    Submit(Submission),
    /// The commit ended already, with this result.
    Done(io::Result<()>),
}

/// Result of staging one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Staged {
    /// Staged; it will get this LSN if the commit succeeds.
    Lsn(Lsn),
    /// Does not fit in the active segment after what is already staged (a record that does not
    /// fit an empty segment is refused as `EncodeError::TooLong` instead).
    NoRoom,
}

/// An open, recovered log, ready to append. Owned by one thread at a time: its core's commit
/// helper (or the core's loop with `commit = "ring"`).
pub struct Wal {
    pub(crate) dir: PathBuf,
    pub(crate) segment_bytes: u64,
    pub(crate) max_body_bytes: usize,
    pub(crate) durability: Durability,
    pub(crate) write_path: WritePath,
    pub(crate) active: Active,
    /// LSN of the next record to commit.
    pub(crate) next_lsn: Lsn,
    /// Records in `buf` not yet committed.
    staged: u64,
    /// The staged records, then (from [`Wal::seal`] until the commit settles) their commit
    /// marker.
    buf: Vec<u8>,
    /// Sequence number of the next commit's marker (`format::marker`; 1 + the last found by
    /// recovery).
    pub(crate) batch_seq: u64,
    /// `buf` ends with its commit marker.
    sealed: bool,
    wrapper: Option<FileWrapper>,
    /// `std`'s `Arc`: the writer is an I/O thread that loom never models, and loom's `Arc` cannot
    /// hold a `dyn` value on stable.
    clock: std::sync::Arc<dyn Clock>,
    /// The log's published state (durable LSN, health, sync latencies), once attached
    /// ([`Wal::attach_shared`]).
    pub(crate) shared: Option<Arc<WalShared>>,
    /// The WAL directory's `LOCK` file, `flock`ed exclusively while this `Wal` lives.
    pub(crate) lock: Option<Box<dyn LockGuard>>,
    /// Where the log's files live (the real file system, or the power-loss simulation).
    pub(crate) storage: Arc<dyn Storage>,
    /// The directory's checkpoint; `None` only inside [`crate::wal::open`], before it is written.
    pub(crate) checkpoint: Option<CheckpointFile>,
    /// The log's high-water record (`wal::high_water`); `None` for a bare log, and inside
    /// [`crate::wal::open`] until recovery has written it.
    pub(crate) high_water: Option<crate::wal::high_water::HighWaterFile>,
    /// Highest LSN synced to disk (what the checkpoint may promise).
    pub(crate) synced_lsn: Lsn,
    /// Clock reading of the last checkpoint write attempt, retention and probe.
    checkpoint_at_ns: u64,
    retire_at_ns: u64,
    probe_at_ns: u64,
    /// The run of failed checkpoint writes (logged and published at its transitions only).
    checkpoint_streak: FailureStreak,
    /// True after a roll failed, until one succeeds: the probe then retries the roll.
    roll_failed: bool,
    /// Failing commits and rolls, logged without flooding (`failure_log::FailureLog`).
    pub(crate) failure_log: crate::wal::append::failure_log::FailureLog,
    /// Missing ranges accepted at open (`--accept-wal-loss`), published when a writer attaches.
    pub(crate) lost_accepted: Vec<LostRange>,
    /// With a loss accepted at open: the LSNs above the recovered end up to the reservation,
    /// skipped (`wal::high_water`); its LSNs are not counted (they may never have been handed
    /// out), and it counts as an accepted loss only when it is the only range.
    pub(crate) lost_beyond: Option<LostRange>,
    /// Losses accepted at open that no range could be given for (a listed log or checkpoint
    /// gone from a data dir without a high-water record: `sched::logs`).
    pub(crate) unranged_losses: u64,
    /// Every torn tail recovery truncated in this log's life (`recover::torn`, its `TORN`
    /// record), loaded at open.
    pub(crate) torn: Vec<crate::wal::recover::torn::TornTail>,
    /// `Os` durability only: the committed bytes `[os_synced_end, active.end)` of the active
    /// segment not yet synced (bounded: [`OS_SYNC_EVERY_BYTES`] plus one batch).
    os_unsynced: Vec<u8>,
    os_synced_end: u64,
    /// A sync failed while `os_unsynced` was not empty: rewrite it before the next sync.
    os_rewrite: bool,
    /// When the commit in the caller's hands was submitted ([`Wal::start_commit`]).
    submitted_at_ns: u64,
    /// What retention deleted, per trigger (the `RETIRED` file; `crate::wal::retire::retired`).
    pub(crate) retired: crate::wal::retire::retired::Retired,
    /// How far past the retired segments retention reads for outcomes
    /// (`retired_count::FORWARD_BYTES`; tests set less).
    pub(crate) retired_forward: u64,
    /// A retirement whose count [`Wal::tick`] reads on, a slice per turn.
    pub(crate) retiring: Option<crate::wal::retire::count::Retiring>,
    /// Bytes of a count read per turn (`retired_count::SLICE_BYTES`; tests set less).
    pub(crate) retire_slice: u64,
}

impl fmt::Debug for Wal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.dir)
            .field("segment", &self.active.path)
            .field("end", &self.active.end)
            .field("next_lsn", &self.next_lsn)
            .field("durability", &self.durability)
            .field("write_path", &self.write_path)
            .finish_non_exhaustive()
    }
}

/// Placeholder while a wrapper takes the real file; every operation fails.
struct Detached;

impl SegmentFile for Detached {
    fn write_at(&mut self, _: u64, _: &[u8]) -> io::Result<()> {
        Err(io::Error::other("segment file detached"))
    }
    fn sync(&mut self, _: u64, _: u64) -> io::Result<()> {
        Err(io::Error::other("segment file detached"))
    }
    fn allocate(&mut self, _: u64) -> io::Result<()> {
        Err(io::Error::other("segment file detached"))
    }
}

impl Wal {
    pub(crate) fn new(
        cfg: &crate::wal::WalConfig,
        storage: Arc<dyn Storage>,
        active: Active,
        next_lsn: Lsn,
    ) -> Wal {
        let end = active.end;
        Wal {
            dir: cfg.dir.clone(),
            segment_bytes: cfg.segment_bytes,
            max_body_bytes: cfg.max_body_bytes,
            durability: cfg.durability,
            write_path: cfg.write_path,
            active,
            next_lsn,
            staged: 0,
            buf: Vec::with_capacity(1 << 20),
            batch_seq: 1,
            sealed: false,
            wrapper: None,
            clock: std::sync::Arc::new(MonotonicClock::new()),
            shared: None,
            lock: None,
            storage,
            checkpoint: None,
            high_water: None,
            synced_lsn: next_lsn - 1,
            checkpoint_at_ns: 0,
            retire_at_ns: 0,
            retired: crate::wal::retire::retired::Retired::default(),
            retired_forward: crate::wal::retire::count::FORWARD_BYTES,
            retiring: None,
            retire_slice: crate::wal::retire::count::SLICE_BYTES,
            probe_at_ns: 0,
            checkpoint_streak: FailureStreak::default(),
            roll_failed: false,
            failure_log: Default::default(),
            lost_accepted: Vec::new(),
            lost_beyond: None,
            unranged_losses: 0,
            torn: Vec::new(),
            os_unsynced: Vec::new(),
            os_synced_end: end,
            os_rewrite: false,
            submitted_at_ns: 0,
        }
    }

    /// Hands the log to a writer: sync latencies, health and the accepted-loss counters go to
    /// `shared` from now on.
    pub fn attach_shared(&mut self, shared: Arc<WalShared>) {
        let lsns = self.lost_accepted.iter().map(LostRange::len).sum();
        // A loss whose only range is the skip above the log's end counts once too.
        let beyond_only = self.lost_accepted.is_empty() && self.lost_beyond.is_some();
        let losses = self.lost_accepted.len() + usize::from(beyond_only);
        shared
            .loss_accepted_total
            .store(losses as u64 + self.unranged_losses, Ordering::Relaxed);
        shared.lost_lsns_accepted.store(lsns, Ordering::Relaxed);
        let (tails, torn_lsns) = crate::wal::recover::torn::totals(&self.torn);
        shared.torn_tails_total.store(tails, Ordering::Relaxed);
        shared
            .torn_tail_lsns_total
            .store(torn_lsns, Ordering::Relaxed);
        shared.retired.publish(self.retired.counts());
        self.shared = Some(shared);
        self.publish_os_unsynced();
    }

    /// Missing ranges accepted at open (`WalConfig::accept_loss`); empty normally.
    pub fn lost_accepted(&self) -> &[LostRange] {
        &self.lost_accepted
    }

    /// Counts a loss accepted at open for which recovery could name no range (published with
    /// the others when a writer attaches).
    pub fn count_unranged_loss(&mut self) {
        self.unranged_losses += 1;
    }

    /// A reading of this log's clock (the one [`Wal::tick`] expects).
    pub fn now_nanos(&self) -> u64 {
        self.clock.now_nanos()
    }

    /// The last checkpoint written.
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        self.checkpoint.as_ref().map(CheckpointFile::current)
    }

    /// Replaces the clock used to time syncs (tests use a `ManualClock`).
    pub fn with_clock(mut self, clock: std::sync::Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Installs the storage-fault seam: `wrap` is applied to the active segment's file now and to
    /// every segment file created later.
    pub fn set_file_wrapper(&mut self, mut wrap: FileWrapper) {
        let file = std::mem::replace(&mut self.active.file, Box::new(Detached));
        self.active.file = wrap(file);
        self.wrapper = Some(wrap);
    }

    /// The LSN the next appended record will get.
    pub fn next_lsn(&self) -> Lsn {
        self.next_lsn
    }

    /// The LSN of the last committed record (0 if none ever).
    pub fn last_lsn(&self) -> Lsn {
        self.next_lsn - 1
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the segment being appended to.
    pub fn active_segment(&self) -> &Path {
        &self.active.path
    }

    /// Appends `events` as group commits (one write + one sync per segment touched), returning
    /// the LSN of the last one. On error the records of the failed chunk are not in the log;
    /// those of earlier chunks (an earlier segment) are: [`Wal::next_lsn`] tells how far it got.
    pub fn append_events(&mut self, events: &[EventRecord]) -> Result<Lsn, WalError> {
        self.append_with(events.len(), |wal, i| wal.stage_event(&events[i]))
    }

    /// [`Wal::append_events`] for records of any kind (the offline `dlq replay`, tests, benches).
    pub fn append(&mut self, records: &[Record]) -> Result<Lsn, WalError> {
        self.append_with(records.len(), |wal, i| wal.stage_record(&records[i]))
    }

    fn append_with(
        &mut self,
        count: usize,
        mut stage: impl FnMut(&mut Wal, usize) -> Result<Staged, EncodeError>,
    ) -> Result<Lsn, WalError> {
        for i in 0..count {
            loop {
                match stage(self, i) {
                    Ok(Staged::Lsn(_)) => break,
                    Ok(Staged::NoRoom) => {
                        self.commit()
                            .map_err(|e| WalError::io(&self.active.path, e))?;
                        self.roll().map_err(|e| WalError::io(&self.dir, e))?;
                    }
                    Err(e) => {
                        self.discard();
                        return Err(WalError::Encode(e));
                    }
                }
            }
        }
        self.commit()
            .map_err(|e| WalError::io(&self.active.path, e))?;
        Ok(self.last_lsn())
    }

    /// Syncs the active segment (for `Os` durability at shutdown; harmless otherwise) and
    /// brings the checkpoint up to date.
    pub fn sync(&mut self) -> Result<(), WalError> {
        let (from, end) = (self.unsynced_from(), self.active.end);
        self.timed_sync(from, end - from)
            .map_err(|e| WalError::io(&self.active.path, e))?;
        self.synced_lsn = self.last_lsn();
        self.write_checkpoint(self.wanted_checkpoint())
            .map_err(|e| WalError::io(&self.dir, e))
    }

    /// Encodes `rec` as the next staged record.
    pub(crate) fn stage_record(&mut self, rec: &Record) -> Result<Staged, EncodeError> {
        match rec {
            Record::Event(ev) => self.stage_event(ev),
            _ => self.stage(rec.kind(), |out| encode_payload_into(rec, out)),
        }
    }

    /// Encodes `ev` as the next staged record (kind 1, or 5 for a replay; 9 or 10 when its
    /// body's JSON is decided).
    pub(crate) fn stage_event(&mut self, ev: &EventRecord) -> Result<Staged, EncodeError> {
        if ev.body.len() > self.max_body_bytes {
            return Err(EncodeError::TooLong {
                field: "body",
                len: ev.body.len(),
                max: self.max_body_bytes,
            });
        }
        self.stage(ev.kind(), |out| encode_event_into(ev, out))
    }

    fn stage(
        &mut self,
        kind: RecordKind,
        payload: impl FnOnce(&mut Vec<u8>) -> Result<(), EncodeError>,
    ) -> Result<Staged, EncodeError> {
        let start = self.buf.len();
        let lsn = self.next_lsn + self.staged;
        let len = append_record(&mut self.buf, lsn, kind, payload)?;
        // Room for the batch's commit marker is kept too (`Wal::seal`).
        let need = self.buf.len() + MARKER_RECORD_BYTES;
        if self.active.end + need as u64 > self.active.capacity {
            self.buf.truncate(start);
            if self.active_is_empty() {
                // Cannot happen with a validated config (every record fits an empty segment);
                // refusing keeps a bad one from rolling empty segments forever.
                return Err(EncodeError::TooLong {
                    field: "record",
                    len,
                    max: self.active.capacity as usize,
                });
            }
            return Ok(Staged::NoRoom);
        }
        self.staged += 1;
        Ok(Staged::Lsn(lsn))
    }

    /// Recovery: closes the records `[from, end)` of the active segment (first LSN `first`),
    /// which no commit marker closes, with one (not synced here: the caller syncs), so the
    /// next batch's marker lines up with the batch before it. Skipped when the segment has no
    /// room (records of a version before markers may fill it; the next batch rolls).
    pub(crate) fn seal_recovered(&mut self, from: u64, first: Lsn) -> io::Result<()> {
        let end = self.active.end;
        if end + MARKER_RECORD_BYTES as u64 > self.active.capacity || first >= self.next_lsn {
            return Ok(());
        }
        let map = self.storage.map(&self.active.path)?;
        let Some(records) = map.get(from as usize..end as usize) else {
            return Ok(());
        };
        let mut buf = records.to_vec();
        let ordered = self.durability == Durability::Fsync;
        append_marker(&mut buf, 0, self.batch_seq, first, self.next_lsn, ordered);
        self.active.file.write_at(end, &buf[records.len()..])?;
        self.active.end += MARKER_RECORD_BYTES as u64;
        self.active.zeroed_end = self.active.zeroed_end.max(self.active.end);
        self.os_synced_end = self.active.end;
        self.batch_seq += 1;
        Ok(())
    }

    /// Records staged and not yet committed.
    pub(crate) fn staged(&self) -> u64 {
        self.staged
    }

    /// True if the active segment holds nothing committed and nothing is staged: a record that
    /// does not fit now can never fit (cannot happen with a validated config).
    fn active_is_empty(&self) -> bool {
        self.staged == 0 && self.active.end == 0
    }

    /// Drops the staged records (their LSNs will be reused).
    pub(crate) fn discard(&mut self) {
        self.buf.clear();
        self.staged = 0;
        self.sealed = false;
    }

    /// Appends the staged batch's commit marker to `buf` (once per commit): it rides the
    /// batch's own write. ORDERED in `Fsync` mode: nothing is written after it before the
    /// batch's sync returned (`wal::damage` relies on that).
    fn seal(&mut self) {
        if self.sealed || self.staged == 0 {
            return;
        }
        let (first, next) = (self.next_lsn, self.next_lsn + self.staged);
        let ordered = self.durability == Durability::Fsync;
        append_marker(&mut self.buf, 0, self.batch_seq, first, next, ordered);
        self.sealed = true;
    }

    /// Group commit: writes the staged records with one `write_at` and, in `Fsync` mode, one
    /// `sync`. On success they are committed and `next_lsn` moves past them; on error none is,
    /// and the bytes the attempt may have written are marked for scrubbing.
    pub(crate) fn commit(&mut self) -> io::Result<()> {
        if self.staged == 0 {
            return Ok(());
        }
        let res = self.write_staged();
        self.settle_commit(&res);
        res
    }

    /// The end of a commit attempt of the staged records: on success they are committed and
    /// `next_lsn` moves past them; on error none is, and the bytes the attempt may have written
    /// are marked for scrubbing. The staging buffer is empty afterwards.
    fn settle_commit(&mut self, res: &io::Result<()>) {
        let len = self.buf.len() as u64;
        match res {
            Ok(()) => {
                if let Some(shared) = &self.shared {
                    shared.outcomes.observe_batch(self.next_lsn, &self.buf);
                }
                self.active.end += len;
                self.next_lsn += self.staged;
                self.batch_seq += 1;
                if self.durability == Durability::Fsync {
                    self.synced_lsn = self.next_lsn - 1;
                } else {
                    self.os_unsynced.extend_from_slice(&self.buf);
                    self.publish_os_unsynced();
                }
            }
            Err(_) => {
                self.active.dirty_end = self.active.dirty_end.max(self.active.end + len);
            }
        }
        self.discard();
    }

    /// Starts the group commit of the staged records for a caller that submits the write and
    /// its `fdatasync` itself (a core's io_uring ring, `wal::commit`). What must happen before
    /// the write (scrubbing a failed attempt's bytes, writing zeros ahead) is done here, and
    /// blocks. Returns [`Prepared::Submit`]: the caller writes the buffer at the offset, syncs,
    /// and hands the results to [`Wal::finish_commit`]; nothing else may touch this `Wal`
    /// meanwhile. Returns [`Prepared::Done`] when the commit already ended here: nothing was
    /// staged, a step before the write failed, the file injects a fault (`failpoints`), or the
    /// log is not one a ring can commit (`Os` durability, the mmap path, a file without a
    /// descriptor): then it was committed here with [`Wal::commit`].
    pub(crate) fn start_commit(&mut self) -> Prepared {
        if self.staged == 0 {
            return Prepared::Done(Ok(()));
        }
        let fd = self.active.file.raw_fd();
        let Some(fd) = fd.filter(|_| self.ring_committable()) else {
            return Prepared::Done(self.commit());
        };
        self.seal();
        let end = self.active.end;
        let mut res = self.reserve_through(self.next_lsn + self.staged - 1);
        if res.is_ok() && self.active.dirty_end > end {
            res = self.scrub();
        }
        if res.is_ok() {
            res = self.zero_ahead(end + self.buf.len() as u64);
        }
        if res.is_ok() {
            if let Some(fault) = self.active.file.injected_write(end, &self.buf) {
                res = fault;
            }
        }
        if res.is_err() {
            self.settle_commit(&res);
            return Prepared::Done(res);
        }
        self.submitted_at_ns = self.clock.now_nanos();
        Prepared::Submit(Submission {
            fd,
            offset: end,
            buf: std::mem::take(&mut self.buf),
        })
    }

    /// True if this log's commits can be submitted to a ring: `Fsync` durability on the
    /// `pwrite` path (an `Os` commit writes without a sync; the mmap path copies into memory).
    pub(crate) fn ring_committable(&self) -> bool {
        self.durability == Durability::Fsync && self.write_path == WritePath::Pwrite
    }

    /// Ends a commit begun by [`Wal::start_commit`]: `buf` is the submission's buffer back,
    /// `written` the write's result (bytes or `-errno`), `synced` the sync's (`0` or
    /// `-errno`). A short write is a failed one. Settles the commit as [`Wal::commit`] does.
    pub(crate) fn finish_commit(
        &mut self,
        buf: Vec<u8>,
        written: i32,
        synced: i32,
    ) -> io::Result<()> {
        self.buf = buf;
        let offset = self.active.end;
        let len = self.buf.len() as u64;
        let res = if written < 0 {
            Err(io::Error::from_raw_os_error(-written))
        } else if written as u64 != len {
            Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write: {written} of {len} bytes"),
            ))
        } else {
            if let Some(shared) = &self.shared {
                let took = self.clock.now_nanos().saturating_sub(self.submitted_at_ns);
                shared.sync_seconds.observe_nanos(took);
            }
            match synced {
                0.. => self.active.file.injected_sync(offset, len),
                e => Err(io::Error::from_raw_os_error(-e)),
            }
        };
        self.settle_commit(&res);
        res
    }

    fn write_staged(&mut self) -> io::Result<()> {
        self.seal();
        self.reserve_through(self.next_lsn + self.staged - 1)?;
        if self.active.dirty_end > self.active.end {
            self.scrub()?;
        }
        if self.os_unsynced.len() >= OS_SYNC_EVERY_BYTES || self.os_rewrite {
            let (from, end) = (self.os_synced_end, self.active.end);
            self.timed_sync(from, end - from)?;
        }
        let end = self.active.end;
        self.zero_ahead(end + self.buf.len() as u64)?;
        self.active.file.write_at(end, &self.buf)?;
        if self.durability == Durability::Fsync {
            self.timed_sync(end, self.buf.len() as u64)?;
        }
        Ok(())
    }

    /// `Pwrite` path: makes sure `[.., upto)` has been written before, else writes zeros from
    /// `upto` to [`ZERO_AHEAD`] past it (clamped to the segment) — not synced here; the caller's
    /// next sync covers them (`fdatasync` is for the whole file). The records themselves go to
    /// `[zeroed_end, upto)`.
    fn zero_ahead(&mut self, upto: u64) -> io::Result<()> {
        let a = &mut self.active;
        if self.write_path != WritePath::Pwrite || upto <= a.zeroed_end {
            return Ok(());
        }
        let stop = (upto + ZERO_AHEAD).min(a.capacity);
        let mut off = upto.max(a.zeroed_end);
        while off < stop {
            let n = (stop - off).min(ZEROS.len() as u64);
            a.file.write_at(off, &ZEROS[..n as usize])?;
            off += n;
        }
        a.zeroed_end = stop.max(upto);
        Ok(())
    }

    /// Zeroes `[end, dirty_end)` of the active segment and syncs it, so no stale record from a
    /// failed write (or a torn tail) can ever be read back as valid.
    pub(crate) fn scrub(&mut self) -> io::Result<()> {
        let (start, stop) = (
            self.active.end,
            self.active.dirty_end.min(self.active.capacity),
        );
        let mut off = start;
        while off < stop {
            let n = (stop - off).min(ZEROS.len() as u64);
            self.active.file.write_at(off, &ZEROS[..n as usize])?;
            off += n;
        }
        if stop > start {
            self.timed_sync(start, stop - start)?;
        }
        self.active.dirty_end = self.active.end;
        Ok(())
    }

    /// Syncs `[offset, offset + len)` of the active segment. In `Os` mode it first rewrites the
    /// unsynced committed bytes from memory if an earlier sync failed, and forgets them once a
    /// sync covering them succeeds.
    fn timed_sync(&mut self, offset: u64, len: u64) -> io::Result<()> {
        if self.os_rewrite {
            self.active
                .file
                .write_at(self.os_synced_end, &self.os_unsynced)?;
            self.os_rewrite = false;
        }
        let t0 = self.clock.now_nanos();
        let res = self.active.file.sync(offset, len);
        if let Some(shared) = &self.shared {
            shared
                .sync_seconds
                .observe_nanos(self.clock.now_nanos().saturating_sub(t0));
        }
        if self.durability == Durability::Os {
            // `fdatasync` covers the whole file; `msync` only its range.
            let covers = self.write_path == WritePath::Pwrite
                || (offset <= self.os_synced_end && offset + len >= self.active.end);
            match &res {
                Err(_) => self.os_rewrite = !self.os_unsynced.is_empty(),
                Ok(()) if covers => {
                    self.os_unsynced.clear();
                    self.os_synced_end = self.active.end;
                    self.synced_lsn = self.last_lsn();
                    self.publish_os_unsynced();
                }
                Ok(()) => {}
            }
        }
        res
    }

    /// Start of the active segment's bytes a sync must cover: `os_synced_end` in `Os` mode (what
    /// was synced before stays synced), 0 otherwise.
    fn unsynced_from(&self) -> u64 {
        match self.durability {
            Durability::Os => self.os_synced_end.min(self.active.end),
            Durability::Fsync => 0,
        }
    }

    /// `Os` mode: committed bytes of the active segment kept in memory until synced.
    pub fn os_unsynced_bytes(&self) -> usize {
        self.os_unsynced.len()
    }

    /// Stores [`Wal::os_unsynced_bytes`] in [`WalShared::os_unsynced_bytes`] (the gauge).
    fn publish_os_unsynced(&self) {
        if let Some(s) = &self.shared {
            s.os_unsynced_bytes
                .store(self.os_unsynced.len() as u64, Ordering::Relaxed);
        }
    }

    /// Makes the active segment durable and switches to a new, preallocated segment named
    /// `next_lsn`. Must be called with nothing staged. On error the active segment is unchanged
    /// (a half-created next segment is empty and is reused by the next attempt).
    pub(crate) fn roll(&mut self) -> io::Result<()> {
        let res = self.try_roll();
        self.roll_failed = res.is_err();
        if res.is_ok() {
            // A failure is logged and retried by `tick`; an older checkpoint only promises less.
            let _ = self.write_checkpoint(self.wanted_checkpoint());
        }
        res
    }

    fn try_roll(&mut self) -> io::Result<()> {
        debug_assert_eq!(self.staged, 0, "roll with staged records");
        self.discard();
        if self.active.dirty_end > self.active.end {
            self.scrub()?;
        }
        // Already synced batch by batch in Fsync mode; in Os mode this bounds a power loss to
        // the active segment.
        if self.durability == Durability::Os {
            let (from, end) = (self.unsynced_from(), self.active.end);
            self.timed_sync(from, end - from)?;
        }
        let path = segment_path(&self.dir, self.next_lsn);
        let file = match self.create_segment(&path) {
            Ok(file) => file,
            Err(e) => {
                // Remove the half-created file: more records may be committed to the active
                // segment before the next roll, which then names its segment by a later LSN, and
                // an empty segment named by an LSN inside the active one would read as an LSN
                // gap (found by the fault-injection suite: ENOSPC at allocation, then small
                // events that still fit). It holds nothing: no record with this LSN is committed.
                let _ = self.storage.remove(&path);
                return Err(e);
            }
        };
        if self.durability == Durability::Os {
            // The old segment was created without a directory sync in this mode; the
            // checkpoint written next promises its records, so its entry must be durable too.
            self.storage.sync_dir(&self.dir)?;
        }
        self.synced_lsn = self.last_lsn();
        self.os_unsynced.clear();
        self.publish_os_unsynced();
        self.os_synced_end = 0;
        self.os_rewrite = false;
        self.active = Active {
            path,
            first_lsn: self.next_lsn,
            file,
            capacity: self.segment_bytes,
            end: 0,
            dirty_end: 0,
            zeroed_end: 0,
        };
        Ok(())
    }

    /// A probe of a failed disk, committing no record: retries the failed roll if the last
    /// roll failed; otherwise zeroes what a failed write may have left (or `PROBE_BYTES`, 4 KiB, of
    /// already-zero space at the end of the log) and syncs it; then writes the checkpoint. `Ok`
    /// means the disk accepts writes and syncs again.
    pub fn probe(&mut self) -> io::Result<()> {
        self.discard();
        if self.roll_failed || self.active.end >= self.active.capacity {
            self.roll()?;
        } else if self.active.dirty_end > self.active.end {
            self.scrub()?;
        } else {
            let end = self.active.end;
            let n = PROBE_BYTES.min(self.active.capacity - end);
            self.active.file.write_at(end, &ZEROS[..n as usize])?;
            self.timed_sync(end, n)?;
        }
        self.write_checkpoint(self.wanted_checkpoint())
    }

    /// Housekeeping for the loop that owns the log, once per turn (`now_ns` from
    /// [`Wal::now_nanos`]): retention requested through [`WalShared::request_retire`] (at most
    /// once a second; a count in progress reads on `retired_count::SLICE_BYTES` per turn), a
    /// [`Wal::probe`] while [`WalShared::healthy`] is false (at most every [`PROBE_EVERY`];
    /// success turns health back on), and [`Wal::checkpoint_if_due`].
    pub fn tick(&mut self, now_ns: u64) {
        let second = Duration::from_secs(1).as_nanos() as u64;
        let (retire, healthy) = match &self.shared {
            Some(s) => (s.retire_request.load(Ordering::Relaxed), s.is_healthy()),
            None => (0, true),
        };
        let first_live = self.checkpoint().map_or(0, |c| c.first_live_lsn);
        let retiring = if self.retiring.is_some() {
            Some(self.retire_step(self.retire_slice))
        } else if retire > first_live && now_ns.saturating_sub(self.retire_at_ns) >= second {
            self.retire_at_ns = now_ns;
            // Begun, and its first slice read: a small retirement is done in one turn.
            Some(match self.retire_start(retire) {
                Ok(None) => self.retire_step(self.retire_slice),
                done => done,
            })
        } else {
            None
        };
        if let Some(Err(e)) = retiring {
            self.retire_at_ns = now_ns;
            eprintln!("sluice: retention: {e} (retried in a second)");
        }
        if !healthy && now_ns.saturating_sub(self.probe_at_ns) >= PROBE_EVERY.as_nanos() as u64 {
            self.probe_at_ns = now_ns;
            match self.probe() {
                Ok(()) => {
                    if let Some(s) = &self.shared {
                        s.healthy.store(true, Ordering::Relaxed);
                    }
                    eprintln!("sluice: wal: probe write succeeded; accepting writes again");
                }
                Err(e) => {
                    if let Some(s) = &self.shared {
                        s.count_commit_failure(&e);
                    }
                }
            }
        }
        // A failure is logged by `write_checkpoint` and retried a second later.
        let _ = self.checkpoint_if_due(now_ns);
    }

    /// Creates, wraps and preallocates the segment file at `path` (synced with its directory
    /// entry in `Fsync` mode).
    fn create_segment(&mut self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
        let mut file = self.storage.open_segment(path, self.write_path)?;
        if let Some(wrap) = &mut self.wrapper {
            file = wrap(file);
        }
        file.allocate(self.segment_bytes)?;
        if self.durability == Durability::Fsync {
            file.sync(0, 0)?;
            self.storage.sync_dir(&self.dir)?;
        }
        Ok(file)
    }
}

mod checkpointing;
mod high_water;

pub(super) mod failure_log;
pub mod group;
pub(super) mod shared;
#[cfg(test)]
mod tests;
pub(super) mod writer;
