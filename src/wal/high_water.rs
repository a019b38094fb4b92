//! A log's high-water record: the highest LSN it may hand out, kept outside the log's
//! directory, so that a log rebuilt after a loss never hands an LSN out twice.
//!
//! A data dir's log `wal/core-K/` has its record in `wal/core-K.hw`, the legacy log (`wal/`
//! itself) in `wal/legacy.hw` ([`path_of`]); a log elsewhere (a bare directory: tests,
//! benches) has none. The file is a two-slot file like the checkpoint (`wal::checkpoint`,
//! "File format"), magic `SLUICEHW`, whose slot adds one field after `written_at`:
//!
//! ```text
//! slot offset  size  field
//!         0..48        as the checkpoint's slot (magic b"SLUICEHW", version 1, seq,
//!                      first_live_lsn, durable_lsn, written_at)
//!            48     8  reserved_lsn  u64 highest LSN the log may hand out
//!            56     4  crc           u32 CRC32C of slot bytes [0, 56)
//! ```
//!
//! Two promises hold on disk, whatever is lost from the log's own directory:
//!
//! * **Reservation.** No record is written with an LSN above `reserved_lsn`: a commit whose
//!   batch would cross it first writes a new reservation, [`STEP`] LSNs above the batch, and
//!   `fdatasync`s it (`Wal::reserve_through`); every checkpoint write moves it to [`STEP`]
//!   above the log's next LSN as well, so under load a commit waits for one rarely.
//! * **A copy of the checkpoint.** Every checkpoint write is followed by the same values here
//!   (`Wal::write_checkpoint`): if `CHECKPOINT`, or the whole log directory, is lost, recovery
//!   checks the segments against this copy instead (at most [`CHECKPOINT_EVERY`] older than the
//!   lost checkpoint) and names the LSNs it promised that are gone.
//!
//! Whenever recovery gives anything up with `--accept-wal-loss` (damaged records, deleted or
//! truncated segments, a lost checkpoint or log, a damaged high-water record) the log
//! continues at `reserved_lsn + 1`: the LSNs between its recovered end and the reservation are
//! covered by one lost-range record (`Wal::skip_to`), so later scans read the gap as given up
//! (and the outcome index marks events still without an outcome `lost`, as for any accepted
//! range), and no LSN that may have been handed out before is handed out again. A torn final
//! batch is not such a loss: under the power-cut model (`recover::damage`) it was never
//! acknowledged, so the log continues at its LSNs, as before.
//!
//! [`CHECKPOINT_EVERY`]: super::CHECKPOINT_EVERY
#![forbid(unsafe_code)]

use super::checkpoint::{read_slots, Checkpoint, Damaged, Slot, SlotFile, SlotKind};
use super::{Lsn, WalError};
use crate::storage::Storage;
use std::path::{Path, PathBuf};

/// How far ahead of the log's next LSN a reservation reaches: 65,536 LSNs. A log that gives
/// something up skips at most this many LSNs more than it wrote since the last checkpoint
/// (each skipped LSN costs the outcome index one 20-byte slot until retention passes it).
pub const STEP: Lsn = 1 << 16;

/// Suffix of a high-water file's name.
pub const SUFFIX: &str = ".hw";

/// A high-water record as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HighWater {
    /// The log's checkpoint as last written.
    pub checkpoint: Checkpoint,
    /// The highest LSN the log may have handed out.
    pub reserved: Lsn,
    /// Unix milliseconds of the update.
    pub written_at_ms: u64,
}

impl From<Slot> for HighWater {
    fn from(s: Slot) -> Self {
        HighWater {
            checkpoint: s.checkpoint,
            reserved: s.reserved,
            written_at_ms: s.written_at_ms,
        }
    }
}

/// The high-water file of the log in `dir`: `wal/core-K.hw` for `wal/core-K`, `wal/legacy.hw`
/// for a legacy log (`dir` named `wal`); `None` for a log in any other directory.
pub fn path_of(dir: &Path) -> Option<PathBuf> {
    let name = dir.file_name()?.to_str()?;
    if super::layout::core_of(name).is_some() {
        Some(dir.with_file_name(format!("{name}{SUFFIX}")))
    } else if name == super::layout::WAL_SUBDIR {
        Some(dir.join(format!("{}{SUFFIX}", super::layout::LEGACY_LOG_NAME)))
    } else {
        None
    }
}

/// Reads the high-water file `p`: `Ok(None)` when there is none, `Ok(Err(_))` when no slot of
/// it is valid.
pub fn read_in(
    storage: &dyn Storage,
    p: &Path,
) -> Result<Option<Result<HighWater, Damaged>>, WalError> {
    let read = read_slots(storage, SlotKind::HighWater, p)?;
    Ok(read.map(|r| r.map(HighWater::from)))
}

/// The high-water file of one log, open for updates. Owned by the log's `Wal`.
#[derive(Debug)]
pub(crate) struct HighWaterFile(SlotFile);

impl HighWaterFile {
    /// Opens (or creates) `p` and writes `hw` to it.
    pub(crate) fn open_or_create(
        storage: &dyn Storage,
        p: &Path,
        hw: HighWater,
    ) -> Result<Self, WalError> {
        SlotFile::open_or_create(storage, SlotKind::HighWater, p, slot(hw)).map(Self)
    }

    pub(crate) fn current(&self) -> HighWater {
        self.0.current().into()
    }

    /// Writes `hw` and `fdatasync`s it (see `SlotFile::write`); an error names the file.
    pub(crate) fn write(&mut self, hw: HighWater) -> std::io::Result<()> {
        self.0.write(slot(hw)).map_err(|e| {
            let path = self.0.path().display();
            std::io::Error::new(e.kind(), format!("{path}: {e}"))
        })
    }
}

fn slot(hw: HighWater) -> Slot {
    Slot {
        checkpoint: hw.checkpoint,
        reserved: hw.reserved,
        written_at_ms: hw.written_at_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StdFs;

    #[test]
    fn core_and_legacy_logs_have_a_sibling_record_and_bare_logs_none() {
        let p = |s: &str| path_of(Path::new(s));
        assert_eq!(p("/d/wal/core-3"), Some(PathBuf::from("/d/wal/core-3.hw")));
        assert_eq!(p("/d/wal"), Some(PathBuf::from("/d/wal/legacy.hw")));
        assert_eq!(p("/d/wal/core-03"), None, "not a name the layout makes");
        assert_eq!(p("/tmp/.tmpAbc"), None);
    }

    #[test]
    fn written_read_back_and_a_torn_update_falls_back() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("core-0.hw");
        assert_eq!(read_in(&StdFs, &p).unwrap(), None);
        let hw = |durable, reserved| HighWater {
            checkpoint: Checkpoint {
                first_live_lsn: 1,
                durable_lsn: durable,
            },
            reserved,
            written_at_ms: 7,
        };
        let mut f = HighWaterFile::open_or_create(&StdFs, &p, hw(0, STEP)).unwrap();
        f.write(hw(10, STEP + 10)).unwrap();
        f.write(hw(20, STEP + 20)).unwrap();
        assert_eq!(f.current(), hw(20, STEP + 20));
        assert_eq!(read_in(&StdFs, &p).unwrap(), Some(Ok(hw(20, STEP + 20))));
        // Tear the newest slot (update 3 went to slot 1): the one before is read.
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[4096 + 50] ^= 0xFF;
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(read_in(&StdFs, &p).unwrap(), Some(Ok(hw(10, STEP + 10))));
        std::fs::write(&p, b"short").unwrap();
        assert!(matches!(read_in(&StdFs, &p).unwrap(), Some(Err(_))));
        // Reopening a damaged file rebuilds it.
        let f = HighWaterFile::open_or_create(&StdFs, &p, hw(5, 9)).unwrap();
        assert_eq!(f.current(), hw(5, 9));
        assert!(!tmp.path().join("core-0.hw.tmp").exists());
    }
}
