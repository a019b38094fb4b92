//! The log checkpoint: a small durable record of what must exist in one log directory, so that
//! lost segment files are detected instead of silently accepted.
//!
//! A log directory (`DATA_DIR/wal/`, or one per-core log `DATA_DIR/wal/core-K/`) holds one
//! `CHECKPOINT` file beside its segments. It records
//!
//! * `first_live_lsn`: the first LSN of the oldest segment that must exist (advanced by
//!   retention *before* it deletes a segment), and
//! * `durable_lsn`: the highest LSN known to be on disk (synced) — every record in
//!   `first_live_lsn..=durable_lsn` must be readable.
//!
//! The [`Wal`](super::Wal) appender that owns the directory is its only writer: at
//! [`open`](super::open) (after recovery), at every segment roll, at retention, at shutdown, and
//! at least once a second while the log is written (`Wal::checkpoint_if_due`). Recovery and
//! `sluice wal verify` compare the segments found with it ([`missing`]): LSNs the checkpoint
//! promises but the segments do not hold are a [`LostRange`]; a damaged record at or below
//! `durable_lsn` is corruption, never a torn tail.
//!
//! # File format (all integers little-endian)
//!
//! The file is [`FILE_BYTES`] (8 KiB) long and holds two *slots* at offsets 0 and 4096, each in
//! its own 4 KiB page, so a write to one never rewrites the page holding the other. Updates
//! alternate between them: update number `seq` goes to slot `seq % 2`, with one `pwrite` and one
//! `fdatasync` — no rename, no directory sync. The valid slot with the higher `seq` is current;
//! a torn update damages only the slot being written (its CRC fails) and the other slot, one
//! update older, is read instead.
//!
//! ```text
//! slot offset  size  field
//!           0     8  magic           b"SLUICECK"
//!           8     4  version         u32 = 1 (other values: the slot is invalid)
//!          12     4  reserved        u32 = 0
//!          16     8  seq             u64 update number, 1 for the first; the higher valid wins
//!          24     8  first_live_lsn  u64 first LSN of the oldest segment that must exist
//!          32     8  durable_lsn     u64 highest LSN synced to disk; 0 = none
//!          40     8  written_at      u64 Unix milliseconds of the update (diagnostics only)
//!          48     4  crc             u32 CRC32C (Castagnoli) of slot bytes [0, 48)
//!          52  4044  zero
//! ```
//!
//! A log's high-water record (`super::high_water`) is a file of the same two-slot shape, magic
//! `SLUICEHW`, with one more field before its CRC (`SlotFile` writes both kinds). Every
//! checkpoint write is followed by a copy of it there, outside the log's directory.
//!
//! The file is created whole (both slots written, zeros included, so both have real blocks
//! and no later update needs free space) as `CHECKPOINT.tmp`, synced,
//! renamed into place, and the directory synced; so a `CHECKPOINT` file always has a valid
//! slot unless the disk damaged it. A file with no valid slot is reported as damaged. A log
//! directory without the file (written by a version before checkpoints) opens as before and the
//! file is created then — unless the data dir's manifest lists the log (`super::manifest`): a
//! listed log always had one, so its absence refuses the start before the log is opened.
#![forbid(unsafe_code)]

pub use super::error::{Damaged, LostRange};
use super::{Lsn, WalError};
use crate::storage::{OpenMode, StdFs, Storage, StorageFile};
use std::io;
use std::path::{Path, PathBuf};

/// Name of the checkpoint file in a log directory.
pub const CHECKPOINT_FILE: &str = "CHECKPOINT";
/// Size of the checkpoint file (and of a high-water file): two 4 KiB slots.
pub const FILE_BYTES: u64 = 2 * SLOT_STRIDE;
const SLOT_STRIDE: u64 = 4096;
const VERSION: u32 = 1;

/// What a log directory must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// First LSN of the oldest segment that must exist.
    pub first_live_lsn: Lsn,
    /// Highest LSN synced to disk (0: none); `first_live_lsn..=durable_lsn` must be readable.
    pub durable_lsn: Lsn,
}

/// The path of the checkpoint file of log directory `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(CHECKPOINT_FILE)
}

/// Which record a two-slot file holds: a log's `CHECKPOINT`, or its high-water record
/// (`wal::high_water`), the same slot with the reserved LSN after `written_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotKind {
    Checkpoint,
    HighWater,
}

impl SlotKind {
    fn magic(self) -> &'static [u8; 8] {
        match self {
            SlotKind::Checkpoint => b"SLUICECK",
            SlotKind::HighWater => b"SLUICEHW",
        }
    }

    /// Offset of the slot's CRC (it covers every byte before it).
    fn crc_at(self) -> usize {
        match self {
            SlotKind::Checkpoint => 48,
            SlotKind::HighWater => 56,
        }
    }

    fn slot_bytes(self) -> usize {
        self.crc_at() + 4
    }
}

/// One slot's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) checkpoint: Checkpoint,
    /// High-water records only (0 in a checkpoint): the highest LSN the log may hand out.
    pub(crate) reserved: Lsn,
    /// Unix milliseconds of the update.
    pub(crate) written_at_ms: u64,
}

fn encode_slot(kind: SlotKind, seq: u64, s: &Slot) -> Vec<u8> {
    let mut b = vec![0u8; kind.slot_bytes()];
    b[0..8].copy_from_slice(kind.magic());
    b[8..12].copy_from_slice(&VERSION.to_le_bytes());
    b[16..24].copy_from_slice(&seq.to_le_bytes());
    b[24..32].copy_from_slice(&s.checkpoint.first_live_lsn.to_le_bytes());
    b[32..40].copy_from_slice(&s.checkpoint.durable_lsn.to_le_bytes());
    b[40..48].copy_from_slice(&s.written_at_ms.to_le_bytes());
    if kind == SlotKind::HighWater {
        b[48..56].copy_from_slice(&s.reserved.to_le_bytes());
    }
    let at = kind.crc_at();
    let crc = crc32c::crc32c(&b[..at]);
    b[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    b
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// The slot's `(seq, contents)` if it is valid.
fn decode_slot(kind: SlotKind, b: &[u8]) -> Option<(u64, Slot)> {
    let b = b.get(..kind.slot_bytes())?;
    let at = kind.crc_at();
    let crc = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let version = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
    if &b[0..8] != kind.magic() || version != VERSION || crc32c::crc32c(&b[..at]) != crc {
        return None;
    }
    let slot = Slot {
        checkpoint: Checkpoint {
            first_live_lsn: u64_at(b, 24),
            durable_lsn: u64_at(b, 32),
        },
        reserved: if kind == SlotKind::HighWater {
            u64_at(b, 48)
        } else {
            0
        },
        written_at_ms: u64_at(b, 40),
    };
    Some((u64_at(b, 16), slot))
}

/// The current `(seq, contents)` of file bytes `bytes`, or why there is none.
fn decode_file(kind: SlotKind, bytes: &[u8]) -> Result<(u64, Slot), String> {
    let slot = |i: u64| {
        bytes
            .get((i * SLOT_STRIDE) as usize..)
            .and_then(|b| decode_slot(kind, b))
    };
    match (slot(0), slot(1)) {
        (Some(a), Some(b)) => Ok(if a.0 >= b.0 { a } else { b }),
        (Some(a), None) | (None, Some(a)) => Ok(a),
        (None, None) => Err(format!(
            "no valid slot (file of {} bytes; expected {FILE_BYTES} with a CRC-valid slot)",
            bytes.len()
        )),
    }
}

/// Reads the two-slot file `p` of `kind`: `Ok(None)` when it does not exist, `Ok(Err(_))`
/// when no slot is valid.
pub(crate) fn read_slots(
    storage: &dyn Storage,
    kind: SlotKind,
    p: &Path,
) -> Result<Option<Result<Slot, Damaged>>, WalError> {
    let bytes = match storage.read(p) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(WalError::io(p, e)),
    };
    Ok(Some(decode_file(kind, &bytes).map(|(_, s)| s).map_err(
        |reason| Damaged {
            path: p.to_owned(),
            reason,
        },
    )))
}

/// Reads the checkpoint of log directory `dir` without modifying anything: `Ok(None)` when
/// there is no checkpoint file (a log written before checkpoints existed), `Ok(Err(_))` when the
/// file exists but no slot is valid, `Err` on an I/O error.
pub fn read(dir: &Path) -> Result<Option<Result<Checkpoint, Damaged>>, WalError> {
    read_in(&StdFs, dir)
}

/// [`read`] on `storage`.
pub fn read_in(
    storage: &dyn Storage,
    dir: &Path,
) -> Result<Option<Result<Checkpoint, Damaged>>, WalError> {
    let read = read_slots(storage, SlotKind::Checkpoint, &path(dir))?;
    Ok(read.map(|r| r.map(|s| s.checkpoint)))
}

/// What the segments of a log directory hold, for [`missing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    /// First LSN of the oldest segment; `None` when there is no segment.
    pub first_segment_lsn: Option<Lsn>,
    /// The LSN after the last valid record.
    pub next_lsn: Lsn,
    /// A damaged or incomplete record at the end of the log (the record with LSN `next_lsn`):
    /// its segment and offset.
    pub damaged_tail: Option<(PathBuf, u64)>,
}

/// The LSN ranges checkpoint `c` promises that `extent` does not hold: the head (oldest
/// segments deleted) and the tail (newest segment truncated or deleted, or its last durable
/// records damaged). Empty when nothing is missing.
pub fn missing(c: &Checkpoint, extent: &Extent) -> Vec<LostRange> {
    let mut out = Vec::new();
    if c.durable_lsn < c.first_live_lsn {
        return out; // nothing was ever promised
    }
    let Some(head) = extent.first_segment_lsn else {
        out.push(LostRange {
            first: c.first_live_lsn,
            last: c.durable_lsn,
            why: "no segment file is left".to_owned(),
        });
        return out;
    };
    if head > c.first_live_lsn {
        out.push(LostRange {
            first: c.first_live_lsn,
            last: (head - 1).min(c.durable_lsn),
            why: format!(
                "the oldest segment starts at LSN {head} but the checkpoint says the log starts \
                 at {} (segment files deleted)",
                c.first_live_lsn
            ),
        });
    }
    let from = extent.next_lsn.max(head);
    if from <= c.durable_lsn {
        let why = match &extent.damaged_tail {
            Some((segment, offset)) => format!(
                "the record with LSN {from} at offset {offset} of {} is damaged or incomplete",
                segment.display()
            ),
            None => format!(
                "the log ends at LSN {} (the newest segment was truncated or deleted)",
                extent.next_lsn - 1
            ),
        };
        out.push(LostRange {
            first: from,
            last: c.durable_lsn,
            why,
        });
    }
    out
}

/// How long checkpoint writes may keep failing before `/readyz` reports it
/// (`wal_checkpoint_failing`): while they fail, the checkpoint's durable LSN falls behind the
/// log, so a record damaged in that span would read as a torn tail. Ten attempts (one a second).
pub const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// A change in a log's run of failed checkpoint writes ([`FailureStreak`]), to log once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreakChange {
    None,
    /// The first failure after a success.
    Started,
    /// Writes have failed for [`STALE_AFTER`].
    Stale,
    /// A write succeeded after failures.
    Ended,
}

/// The run of failed checkpoint writes of one log, on the log's clock (nanos). A pure state
/// machine: the caller writes, logs, and publishes.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FailureStreak {
    /// Clock reading of the first failure of the current run; `None` after a success.
    since_ns: Option<u64>,
    stale: bool,
}

impl FailureStreak {
    /// The outcome of one write at `now_ns`.
    pub(crate) fn record(&mut self, ok: bool, now_ns: u64) -> StreakChange {
        match (ok, self.since_ns) {
            (true, None) => StreakChange::None,
            (true, Some(_)) => {
                *self = FailureStreak::default();
                StreakChange::Ended
            }
            (false, None) => {
                self.since_ns = Some(now_ns);
                StreakChange::Started
            }
            (false, Some(_)) => self.check(now_ns),
        }
    }

    /// `Stale` once, when the run has lasted [`STALE_AFTER`] at `now_ns`.
    pub(crate) fn check(&mut self, now_ns: u64) -> StreakChange {
        let bound = STALE_AFTER.as_nanos() as u64;
        match self.since_ns {
            Some(since) if !self.stale && now_ns.saturating_sub(since) >= bound => {
                self.stale = true;
                StreakChange::Stale
            }
            _ => StreakChange::None,
        }
    }

    pub(crate) fn failing(&self) -> bool {
        self.since_ns.is_some()
    }

    pub(crate) fn stale(&self) -> bool {
        self.stale
    }
}

/// A two-slot file open for updates (module docs): a log's checkpoint, or its high-water
/// record. Updates alternate slots, one `pwrite` and one `fdatasync` each.
#[derive(Debug)]
pub(crate) struct SlotFile {
    kind: SlotKind,
    path: PathBuf,
    file: Box<dyn StorageFile>,
    /// Update number of the current slot.
    seq: u64,
    current: Slot,
}

impl SlotFile {
    /// Opens the file `p` of `kind` and writes `slot` to it; creates it (atomically: see the
    /// module docs) if it does not exist or has no valid slot.
    pub(crate) fn open_or_create(
        storage: &dyn Storage,
        kind: SlotKind,
        p: &Path,
        slot: Slot,
    ) -> Result<Self, WalError> {
        let io_err = |e| WalError::io(p, e);
        let existing = match storage.read(p) {
            Ok(bytes) => decode_file(kind, &bytes).ok(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(e)),
        };
        let Some((seq, current)) = existing else {
            return Self::create(storage, kind, p, slot);
        };
        let file = storage.open(p, OpenMode::EXISTING).map_err(io_err)?;
        let mut f = SlotFile {
            kind,
            path: p.to_owned(),
            file,
            seq,
            current,
        };
        f.write(slot).map_err(io_err)?;
        Ok(f)
    }

    fn create(
        storage: &dyn Storage,
        kind: SlotKind,
        p: &Path,
        slot: Slot,
    ) -> Result<Self, WalError> {
        let dir = p.parent().unwrap_or(Path::new("."));
        let mut tmp_name = p.file_name().unwrap_or_default().to_owned();
        tmp_name.push(".tmp");
        let tmp = dir.join(tmp_name);
        let tmp_err = |e| WalError::io(&tmp, e);
        let mut file = storage.open(&tmp, OpenMode::REPLACE).map_err(tmp_err)?;
        // Both slots written whole, zeros included, so both have real blocks: a later update
        // overwrites allocated space and needs none (a sparse slot's first write would fail on
        // a full disk, and with it a restart). Update 1 goes to slot 1 (`seq % 2`); slot 0
        // stays zeros (invalid) until update 2.
        let mut whole = vec![0u8; FILE_BYTES as usize];
        let at = SLOT_STRIDE as usize;
        let bytes = encode_slot(kind, 1, &slot);
        whole[at..at + bytes.len()].copy_from_slice(&bytes);
        file.write_at(0, &whole).map_err(tmp_err)?;
        file.sync_data().map_err(tmp_err)?;
        storage.rename(&tmp, p).map_err(|e| WalError::io(p, e))?;
        storage.sync_dir(dir).map_err(|e| WalError::io(dir, e))?;
        Ok(SlotFile {
            kind,
            path: p.to_owned(),
            file,
            seq: 1,
            current: slot,
        })
    }

    /// The last contents written.
    pub(crate) fn current(&self) -> Slot {
        self.current
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `slot` as the next update (the other slot) and `fdatasync`s it. On error the
    /// current contents are unchanged as far as a reader is concerned (the older slot stays
    /// valid).
    pub(crate) fn write(&mut self, slot: Slot) -> io::Result<()> {
        let seq = self.seq + 1;
        let bytes = encode_slot(self.kind, seq, &slot);
        self.file.write_at((seq % 2) * SLOT_STRIDE, &bytes)?;
        self.file.sync_data()?;
        self.seq = seq;
        self.current = slot;
        Ok(())
    }
}

/// The checkpoint file of one log directory, open for updates. Owned by the log's `Wal`.
#[derive(Debug)]
pub struct CheckpointFile(SlotFile);

fn checkpoint_slot(c: Checkpoint, now_ms: u64) -> Slot {
    Slot {
        checkpoint: c,
        reserved: 0,
        written_at_ms: now_ms,
    }
}

impl CheckpointFile {
    /// Opens the checkpoint of `dir` and writes `c` to it; creates the file (atomically: see the
    /// module docs) if it does not exist or has no valid slot.
    pub fn open_or_create(
        storage: &dyn Storage,
        dir: &Path,
        c: Checkpoint,
        now_ms: u64,
    ) -> Result<Self, WalError> {
        let slot = checkpoint_slot(c, now_ms);
        SlotFile::open_or_create(storage, SlotKind::Checkpoint, &path(dir), slot).map(Self)
    }

    /// Replaces the open file with `wrap(file)` (tests inject write failures through it).
    #[cfg(test)]
    pub(crate) fn wrap_file(
        &mut self,
        wrap: impl FnOnce(Box<dyn StorageFile>) -> Box<dyn StorageFile>,
    ) {
        let file = std::mem::replace(&mut self.0.file, Box::new(NoFile));
        self.0.file = wrap(file);
    }

    /// The last checkpoint written.
    pub fn current(&self) -> Checkpoint {
        self.0.current.checkpoint
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Writes `c` as the next update (the other slot) and `fdatasync`s it. On error the current
    /// checkpoint is unchanged as far as a reader is concerned (the older slot stays valid).
    pub fn write(&mut self, c: Checkpoint, now_ms: u64) -> io::Result<()> {
        self.0.write(checkpoint_slot(c, now_ms))
    }
}

/// A placeholder while [`CheckpointFile::wrap_file`] swaps the file.
#[cfg(test)]
#[derive(Debug)]
struct NoFile;

#[cfg(test)]
impl StorageFile for NoFile {
    fn write_at(&mut self, _: u64, _: &[u8]) -> io::Result<()> {
        Err(io::Error::other("no file"))
    }
    fn read_at(&self, _: u64, _: &mut [u8]) -> io::Result<usize> {
        Err(io::Error::other("no file"))
    }
    fn sync_data(&mut self) -> io::Result<()> {
        Err(io::Error::other("no file"))
    }
    fn allocate(&mut self, _: u64) -> io::Result<()> {
        Err(io::Error::other("no file"))
    }
    fn set_len(&mut self, _: u64) -> io::Result<()> {
        Err(io::Error::other("no file"))
    }
    fn len(&self) -> io::Result<u64> {
        Err(io::Error::other("no file"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::os::unix::fs::FileExt;

    fn ck(first: Lsn, durable: Lsn) -> Checkpoint {
        Checkpoint {
            first_live_lsn: first,
            durable_lsn: durable,
        }
    }

    #[test]
    fn create_update_reopen_alternates_slots_and_reads_the_newest() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(read(tmp.path()).unwrap(), None);
        let mut f = CheckpointFile::open_or_create(&StdFs, tmp.path(), ck(1, 0), 5).unwrap();
        assert_eq!(std::fs::metadata(f.path()).unwrap().len(), FILE_BYTES);
        assert_eq!(read(tmp.path()).unwrap(), Some(Ok(ck(1, 0))));
        for d in 1..=5 {
            f.write(ck(1, d * 10), 6).unwrap();
            assert_eq!(read(tmp.path()).unwrap(), Some(Ok(ck(1, d * 10))));
        }
        drop(f);
        let f = CheckpointFile::open_or_create(&StdFs, tmp.path(), ck(3, 77), 7).unwrap();
        assert_eq!(f.current(), ck(3, 77));
        assert_eq!(read(tmp.path()).unwrap(), Some(Ok(ck(3, 77))));
        assert!(!tmp.path().join("CHECKPOINT.tmp").exists());
    }

    #[test]
    fn a_torn_update_falls_back_to_the_other_slot_and_no_valid_slot_is_damage() {
        let tmp = tempfile::tempdir().unwrap();
        let mut f = CheckpointFile::open_or_create(&StdFs, tmp.path(), ck(1, 5), 0).unwrap();
        f.write(ck(1, 9), 0).unwrap(); // seq 2: slot 0
        f.write(ck(1, 12), 0).unwrap(); // seq 3: slot 1
        let p = path(tmp.path());
        let file = OpenOptions::new().write(true).open(&p).unwrap();
        // Tear the newest update (slot 1): the previous one is current again.
        file.write_all_at(&[0xFF; 4], SLOT_STRIDE + 30).unwrap();
        assert_eq!(read(tmp.path()).unwrap(), Some(Ok(ck(1, 9))));
        // Both slots damaged: reported, never guessed.
        file.write_all_at(&[0xFF; 4], 20).unwrap();
        let got = read(tmp.path()).unwrap().unwrap().unwrap_err();
        assert!(got.reason.contains("no valid slot"), "{got}");
        // Truncated to nothing: damaged too; open_or_create rebuilds it.
        file.set_len(0).unwrap();
        assert!(matches!(read(tmp.path()).unwrap(), Some(Err(_))));
        let f = CheckpointFile::open_or_create(&StdFs, tmp.path(), ck(4, 4), 0).unwrap();
        assert_eq!(f.current(), ck(4, 4));
        assert_eq!(read(tmp.path()).unwrap(), Some(Ok(ck(4, 4))));
    }

    /// Both slots have real blocks from creation on (no hole for a full disk to refuse).
    #[test]
    fn a_new_checkpoint_file_is_fully_allocated() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let f = CheckpointFile::open_or_create(&StdFs, tmp.path(), ck(1, 0), 0).unwrap();
        let meta = std::fs::metadata(f.path()).unwrap();
        assert_eq!(meta.len(), FILE_BYTES);
        assert!(
            meta.blocks() * 512 >= FILE_BYTES,
            "{} blocks",
            meta.blocks()
        );
    }

    #[test]
    fn a_failure_streak_starts_turns_stale_once_and_ends() {
        let s = 1_000_000_000u64;
        let mut f = FailureStreak::default();
        assert_eq!(f.record(true, 0), StreakChange::None);
        assert_eq!(f.record(false, s), StreakChange::Started);
        assert!(f.failing() && !f.stale());
        assert_eq!(f.record(false, 2 * s), StreakChange::None);
        assert_eq!(f.check(10 * s), StreakChange::None, "9 s: not yet");
        assert_eq!(f.check(11 * s), StreakChange::Stale);
        assert_eq!(f.record(false, 12 * s), StreakChange::None, "stale once");
        assert!(f.stale());
        assert_eq!(f.record(true, 13 * s), StreakChange::Ended);
        assert!(!f.failing() && !f.stale());
        assert_eq!(f.record(false, 14 * s), StreakChange::Started);
    }

    #[test]
    fn every_slot_byte_is_covered_by_the_crc() {
        for (kind, reserved) in [(SlotKind::Checkpoint, 0), (SlotKind::HighWater, 99)] {
            let s = Slot {
                checkpoint: ck(17, 1234),
                reserved,
                written_at_ms: 42,
            };
            let good = encode_slot(kind, 9, &s);
            assert_eq!(good.len(), kind.slot_bytes());
            assert_eq!(decode_slot(kind, &good), Some((9, s)));
            for i in 0..good.len() {
                let mut bad = good.clone();
                bad[i] ^= 0x01;
                assert_eq!(decode_slot(kind, &bad), None, "{kind:?} byte {i}");
            }
        }
        // One kind's slot is never read as the other's.
        let s = checkpoint_slot(ck(1, 2), 3);
        let bytes = encode_slot(SlotKind::Checkpoint, 1, &s);
        assert_eq!(decode_slot(SlotKind::HighWater, &bytes), None);
    }

    fn extent(first: Option<Lsn>, next: Lsn) -> Extent {
        Extent {
            first_segment_lsn: first,
            next_lsn: next,
            damaged_tail: None,
        }
    }

    #[test]
    fn missing_ranges_at_head_and_tail() {
        // Nothing missing: the log holds at least what was promised (more is fine).
        assert!(missing(&ck(1, 10), &extent(Some(1), 11)).is_empty());
        assert!(missing(&ck(1, 10), &extent(Some(1), 15)).is_empty());
        // Segments below first_live left over by an interrupted retention are fine.
        assert!(missing(&ck(5, 10), &extent(Some(1), 11)).is_empty());
        // A fresh log promises nothing.
        assert!(missing(&ck(1, 0), &extent(None, 1)).is_empty());
        // The oldest segment deleted.
        let m = missing(&ck(1, 10), &extent(Some(5), 11));
        assert_eq!((m.len(), m[0].first, m[0].last), (1, 1, 4));
        // The newest segment truncated to nothing (it started at 9).
        let m = missing(&ck(1, 10), &extent(Some(1), 9));
        assert_eq!((m.len(), m[0].first, m[0].last), (1, 9, 10));
        assert!(m[0].why.contains("ends at LSN 8"), "{}", m[0]);
        // Both.
        let m = missing(&ck(1, 10), &extent(Some(5), 9));
        assert_eq!(
            m.iter().map(|r| (r.first, r.last)).collect::<Vec<_>>(),
            [(1, 4), (9, 10)]
        );
        assert_eq!(m.iter().map(LostRange::len).sum::<u64>(), 6);
        // No segment at all.
        let m = missing(&ck(3, 10), &extent(None, 1));
        assert_eq!((m.len(), m[0].first, m[0].last), (1, 3, 10));
        // A damaged durable record names its segment and offset.
        let mut e = extent(Some(1), 10);
        e.damaged_tail = Some((PathBuf::from("seg"), 640));
        let m = missing(&ck(1, 10), &e);
        assert_eq!((m[0].first, m[0].last), (10, 10));
        assert!(m[0].why.contains("offset 640 of seg"), "{}", m[0]);
    }
}
