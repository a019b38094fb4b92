//! The high-water side of [`Wal`] (`wal::high_water`): no LSN is written above the
//! reservation, every checkpoint is copied beside the log, and a log that gave something up
//! skips to above the reservation.
#![forbid(unsafe_code)]

use super::super::{Lsn, WalError};
use super::Wal;
use crate::sync::clock::unix_millis;
use crate::wal::checkpoint::Checkpoint;
use crate::wal::format::marker::{lost_span, LOST_RECORD_BYTES, MARKER_RECORD_BYTES};
use crate::wal::high_water::{HighWater, STEP};
use std::io;

impl Wal {
    /// Makes sure the high-water record reserves `last`: when it does not, writes a reservation
    /// [`STEP`] above it and syncs it before any record up to `last` is written. A failure fails
    /// the commit (nothing is written).
    pub(super) fn reserve_through(&mut self, last: Lsn) -> io::Result<()> {
        let Some(hw) = self.high_water.as_mut() else {
            return Ok(());
        };
        let cur = hw.current();
        if last <= cur.reserved {
            return Ok(());
        }
        let next = HighWater {
            reserved: last + STEP,
            written_at_ms: unix_millis(),
            ..cur
        };
        hw.write(next)
    }

    /// Copies the checkpoint `c` just written to the high-water record, moving the
    /// reservation to [`STEP`] above the next LSN if it is lower.
    pub(super) fn mirror_checkpoint(&mut self, c: Checkpoint) -> io::Result<()> {
        let floor = self.next_lsn - 1 + STEP;
        let Some(hw) = self.high_water.as_mut() else {
            return Ok(());
        };
        let next = HighWater {
            checkpoint: c,
            reserved: hw.current().reserved.max(floor),
            written_at_ms: unix_millis(),
        };
        hw.write(next)
    }

    /// Recovery: continues the log at `next` (above its reservation after a loss) by committing
    /// one lost-range record for `next_lsn..next` — in the active segment, or a new one named
    /// by the first skipped LSN when it is full — then starting a new segment named `next`,
    /// synced with the checkpoint. Later scans read the gap as given up. The records after the
    /// skip never share its segment: were the lost-range record damaged, a scan could not find
    /// them past it (a record's LSN is only searched for within what the segment's bytes can
    /// hold, `recover::damage`), while the next segment's name still says where they start.
    pub(crate) fn skip_to(&mut self, next: Lsn) -> Result<(), WalError> {
        if next <= self.next_lsn {
            return Ok(());
        }
        debug_assert_eq!(self.staged, 0, "skip with staged records");
        let need = (LOST_RECORD_BYTES + MARKER_RECORD_BYTES) as u64;
        if self.active.end + need > self.active.capacity {
            self.roll().map_err(|e| WalError::io(&self.dir, e))?;
        }
        lost_span(&mut self.buf, self.next_lsn, next - 1, LOST_RECORD_BYTES);
        self.staged = next - self.next_lsn;
        self.commit()
            .map_err(|e| WalError::io(&self.active.path, e))?;
        self.roll().map_err(|e| WalError::io(&self.dir, e))?;
        self.sync()
    }
}

#[cfg(test)]
mod tests {
    use crate::wal::format::tests::sample_event;
    use crate::wal::high_water::{self, HighWater, STEP};
    use crate::wal::{open, WalConfig};

    fn on_disk(p: &std::path::Path) -> HighWater {
        high_water::read_in(&crate::storage::StdFs, p)
            .unwrap()
            .unwrap()
            .unwrap()
    }

    /// A commit above the reservation moves it first; every checkpoint is copied, and moves
    /// it to STEP above the next LSN.
    #[test]
    fn commits_never_pass_the_reservation_and_checkpoints_are_copied() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("wal").join("core-0");
        let hw_path = high_water::path_of(&dir).unwrap();
        let (mut wal, _) = open(&WalConfig::new(&dir)).unwrap();
        assert_eq!(on_disk(&hw_path).reserved, STEP, "reserved at open");
        let events: Vec<_> = (0..10).map(|i| sample_event(i, 10)).collect();
        wal.append_events(&events).unwrap();
        wal.sync().unwrap();
        let hw = on_disk(&hw_path);
        assert_eq!(
            Some(hw.checkpoint),
            wal.checkpoint(),
            "the checkpoint copied"
        );
        assert_eq!(hw.reserved, 10 + STEP);
        // A reservation just above the log: the next batch crosses it, so it moves first.
        let low = HighWater { reserved: 12, ..hw };
        wal.high_water.as_mut().unwrap().write(low).unwrap();
        assert_eq!(wal.append_events(&events[..5]).unwrap(), 15);
        assert_eq!(on_disk(&hw_path).reserved, 15 + STEP);
        // Not crossing: no write.
        wal.append_events(&events[..5]).unwrap();
        assert_eq!(on_disk(&hw_path).reserved, 15 + STEP);
    }
}
