//! The checkpoint side of [`Wal`]: what it may promise, writing it (counted, retried, a failing
//! run logged once and reported to `/readyz` after `checkpoint::STALE_AFTER`), and retention,
//! which advances it before deleting segments.
#![forbid(unsafe_code)]

use super::super::{Lsn, WalError};
use super::{Wal, CHECKPOINT_EVERY};
use crate::sync::clock::unix_millis;
use crate::wal::checkpoint::{Checkpoint, StreakChange, STALE_AFTER};
use crate::wal::retire::count::{Counting, Retiring};
use crate::wal::retire::retired;
use crate::wal::segment::list_segments_in;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

impl Wal {
    /// The checkpoint this log may write now: the current first live LSN, `synced_lsn`.
    pub(super) fn wanted_checkpoint(&self) -> Checkpoint {
        Checkpoint {
            first_live_lsn: self.checkpoint().map_or(1, |c| c.first_live_lsn),
            durable_lsn: self.synced_lsn,
        }
    }

    /// Writes `c` to the checkpoint file; counts a failure, logs the first of a run and the
    /// recovery after it (a failed write is retried a second later: [`Wal::checkpoint_if_due`]).
    pub(super) fn write_checkpoint(&mut self, c: Checkpoint) -> io::Result<()> {
        let Some(file) = self.checkpoint.as_mut() else {
            return Ok(());
        };
        let now = self.clock.now_nanos();
        self.checkpoint_at_ns = now;
        let mut res = file.write(c, unix_millis());
        if res.is_ok() {
            res = self.mirror_checkpoint(c);
        }
        let Some(file) = self.checkpoint.as_ref() else {
            return res;
        };
        let change = self.checkpoint_streak.record(res.is_ok(), now);
        match (&res, change) {
            (Err(e), StreakChange::Started) => eprintln!(
                "sluice: wal: writing checkpoint {}: {e} (retried every second; /readyz reports \
                 wal_checkpoint_failing after {} s of failures)",
                file.path().display(),
                STALE_AFTER.as_secs()
            ),
            (Ok(()), StreakChange::Ended) => eprintln!(
                "sluice: wal: checkpoint {} written again",
                file.path().display()
            ),
            _ => {}
        }
        self.publish_checkpoint_health(res.is_err(), change);
        res
    }

    /// Counts a failed checkpoint write and publishes the streak's stale flag (`/readyz`).
    fn publish_checkpoint_health(&self, failed: bool, change: StreakChange) {
        let Some(s) = &self.shared else { return };
        if failed {
            s.checkpoint_failures_total.fetch_add(1, Ordering::Relaxed);
        }
        if change == StreakChange::Stale {
            eprintln!(
                "sluice: wal: checkpoint of {} has failed for {} s: not ready \
                 (wal_checkpoint_failing) until a write succeeds",
                self.dir.display(),
                STALE_AFTER.as_secs()
            );
        }
        s.checkpoint_stale
            .store(self.checkpoint_streak.stale(), Ordering::Relaxed);
    }

    /// Brings the checkpoint's durable LSN up to `synced_lsn` if it lags and the last write
    /// was [`CHECKPOINT_EVERY`] or longer ago (`now_ns` on this log's clock). Returns whether
    /// it wrote.
    pub fn checkpoint_if_due(&mut self, now_ns: u64) -> io::Result<bool> {
        let change = self.checkpoint_streak.check(now_ns);
        if change == StreakChange::Stale {
            self.publish_checkpoint_health(false, change);
        }
        // A failed write is retried even when nothing lags, until one succeeds.
        let lags = self
            .checkpoint()
            .is_some_and(|c| c.durable_lsn != self.synced_lsn)
            || self.checkpoint_streak.failing();
        if !lags
            || now_ns.saturating_sub(self.checkpoint_at_ns) < CHECKPOINT_EVERY.as_nanos() as u64
        {
            return Ok(false);
        }
        self.write_checkpoint(self.wanted_checkpoint())?;
        Ok(true)
    }

    /// Retention, at once: deletes the segments wholly below `lsn` (clamped to the active
    /// segment's first LSN, so the active segment is never deleted). Their events are counted
    /// per trigger into the `RETIRED` file first (`super::retired`: written durably, covering up
    /// to the first kept segment), then the checkpoint's first live LSN is advanced and synced,
    /// then the files go: a crash in between leaves extra segments, never a checkpoint that
    /// promises deleted ones nor an event counted twice. Returns the number of segments
    /// deleted. The commit helper does the same a slice at a time ([`Wal::tick`]).
    pub fn retire_below(&mut self, lsn: Lsn) -> io::Result<usize> {
        self.retiring = None;
        if let Some(deleted) = self.retire_start(lsn)? {
            return Ok(deleted);
        }
        loop {
            if let Some(deleted) = self.retire_step(u64::MAX)? {
                return Ok(deleted);
            }
        }
    }

    /// Begins retiring the segments wholly below `lsn`: a count for [`Wal::retire_step`] to
    /// read when events of theirs are not counted yet (`None`), else they go now
    /// (`Some(deleted)`).
    pub(super) fn retire_start(&mut self, lsn: Lsn) -> io::Result<Option<usize>> {
        let keep = lsn.min(self.active.first_lsn);
        let segments = list_segments_in(&*self.storage, &self.dir).map_err(|e| match e {
            WalError::Io { source, .. } => source,
            other => io::Error::other(other.to_string()),
        })?;
        let deleting = segments
            .windows(2)
            .take_while(|pair| pair[1].0 <= keep)
            .count();
        if deleting > 0 && segments[deleting].0 > self.retired.covered {
            let counting = Counting::start(segments, deleting, self.retired_forward, &self.retired);
            self.retiring = Some(Retiring {
                keep,
                counting,
                slices: 0,
            });
            return Ok(None);
        }
        self.retire_apply(keep, &segments[..deleting]).map(Some)
    }

    /// Reads on in the count in progress for about `slice` bytes; once it is complete, writes
    /// the `RETIRED` file, publishes the counts to the log's pump and deletes the segments
    /// (`Some(deleted)`). An error drops the retirement (retention asks again).
    pub(super) fn retire_step(&mut self, slice: u64) -> io::Result<Option<usize>> {
        let Some(mut r) = self.retiring.take() else {
            return Ok(None);
        };
        let active = (self.active.path.as_path(), self.active.end);
        r.slices += 1;
        if !r.counting.advance(&*self.storage, active, slice)? {
            self.retiring = Some(r);
            return Ok(None);
        }
        let (segments, deleting) = r.counting.plan();
        let gone = segments[..deleting].to_vec();
        let counted = r.counting.finish()?;
        retired::write(&*self.storage, &self.dir, &counted.retired)?;
        self.retired = counted.retired;
        if let Some(s) = &self.shared {
            s.retired.publish(self.retired.counts());
        }
        eprintln!(
            "sluice: retention: {}: counted {} events of {} segment(s) in {} slice(s) \
             ({} owed an outcome)",
            self.dir.display(),
            counted.events,
            gone.len(),
            r.slices,
            self.retired.owed.len()
        );
        self.retire_apply(r.keep, &gone).map(Some)
    }

    /// Advances the checkpoint's first live LSN to `keep` (synced), then deletes `gone`.
    fn retire_apply(&mut self, keep: Lsn, gone: &[(Lsn, PathBuf)]) -> io::Result<usize> {
        if self.checkpoint().is_some_and(|c| c.first_live_lsn < keep) {
            let c = Checkpoint {
                first_live_lsn: keep,
                durable_lsn: self.synced_lsn,
            };
            self.write_checkpoint(c)?;
        }
        for (_, path) in gone {
            self.storage.remove(path)?;
            eprintln!("sluice: retention: deleted {}", path.display());
        }
        if let Some(shared) = &self.shared {
            shared.outcomes.retire_below(keep);
        }
        Ok(gone.len())
    }
}
