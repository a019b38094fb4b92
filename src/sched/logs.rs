//! The logs of a run: one per core, plus the ones a core adopts, and the keys that name events
//! across them.
//!
//! At start-up [`open_logs`] opens (recovering each) core `k`'s own log `wal/core-k/` for every
//! worker, then every other log on disk (`wal::layout`): `core-K` with `K >= workers`, written
//! by a run with more workers, and the legacy single log of older versions (segments directly in
//! `wal/`). Each of those is *adopted* by core `K % workers` (the legacy log by core 0): the
//! adopting core delivers its pending events and writes their outcomes into it; new events only
//! go to own logs. An upgrade from the single-log layout therefore moves nothing on disk and
//! redelivers nothing beyond the usual at-least-once.
//!
//! Own logs are opened first, core 0's first of all: its `LOCK` is taken before anything else,
//! so a second server on the same data dir fails at once, whatever its worker count.
//!
//! # Event keys
//!
//! An event is named by its log and its LSN in that log. Jobs and outcomes between cores carry
//! one `u64` key: the log's index (in [`RunLogs::logs`]) in the top 16 bits and the LSN in the
//! low 48 ([`event_key`], [`split_key`]). 2^48 records per log is beyond any retention.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use crate::wal::{self, layout, DispatchRecovery, Lsn, RecoveryReport, Wal, WalConfig, WalError};

/// Bits of an event key that hold the LSN.
pub const KEY_LSN_BITS: u32 = 48;
const LSN_MASK: u64 = (1 << KEY_LSN_BITS) - 1;

/// The key of the event at `lsn` in log `log`.
pub fn event_key(log: usize, lsn: Lsn) -> u64 {
    debug_assert!(lsn <= LSN_MASK && log < 1 << (64 - KEY_LSN_BITS));
    ((log as u64) << KEY_LSN_BITS) | (lsn & LSN_MASK)
}

/// `(log, lsn)` of an event key.
pub fn split_key(key: u64) -> (usize, Lsn) {
    ((key >> KEY_LSN_BITS) as usize, key & LSN_MASK)
}

/// One open, recovered log and who owns it.
#[derive(Debug)]
pub struct OpenLog {
    /// `core-K` or `legacy`.
    pub name: String,
    pub dir: PathBuf,
    /// The core that appends its outcomes (and, for an own log, its events).
    pub owner: usize,
    pub wal: Wal,
    pub report: RecoveryReport,
    pub recovered: DispatchRecovery,
}

/// Every log of this run, in key order: own logs first (index = core), then adopted ones.
#[derive(Debug)]
pub struct RunLogs {
    pub logs: Vec<OpenLog>,
}

impl RunLogs {
    /// Owner core of each log, by log index.
    pub fn owners(&self) -> Vec<usize> {
        self.logs.iter().map(|l| l.owner).collect()
    }
}

/// Opens and recovers every log under `base.dir` (the `wal/` directory) for `workers` cores.
/// `base` carries everything but the directory. `Locked` if another process holds a log.
pub fn open_logs(base: &WalConfig, workers: usize) -> Result<RunLogs, WalError> {
    let wal_dir = base.dir.clone();
    std::fs::create_dir_all(&wal_dir).map_err(|e| WalError::io(&wal_dir, e))?;
    let mut logs = Vec::new();
    for core in 0..workers {
        let dir = layout::core_log_dir(&wal_dir, core);
        logs.push(open_one(base, layout::core_log_name(core), dir, core)?);
    }
    for found in layout::log_dirs(&wal_dir)? {
        if found.core.is_some_and(|k| k < workers) {
            continue;
        }
        let owner = found.core.map_or(0, |k| k % workers);
        logs.push(open_one(base, found.name, found.dir, owner)?);
    }
    Ok(RunLogs { logs })
}

fn open_one(
    base: &WalConfig,
    name: String,
    dir: PathBuf,
    owner: usize,
) -> Result<OpenLog, WalError> {
    let cfg = WalConfig {
        dir: dir.clone(),
        ..base.clone()
    };
    let (wal, report) = wal::open(&cfg)?;
    let recovered = wal::recover_dispatch(&dir)?;
    Ok(OpenLog {
        name,
        dir,
        owner,
        wal,
        report,
        recovered,
    })
}

/// The directory of core `core`'s own log under the data dir's `wal/`.
pub fn own_log_dir(wal_dir: &Path, core: usize) -> PathBuf {
    layout::core_log_dir(wal_dir, core)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::format::tests::sample_event;

    #[test]
    fn keys_round_trip() {
        for (log, lsn) in [(0, 1), (3, 12345), (65535, LSN_MASK)] {
            assert_eq!(split_key(event_key(log, lsn)), (log, lsn));
        }
        assert_ne!(event_key(1, 5), event_key(0, 5));
    }

    fn small(dir: &Path) -> WalConfig {
        WalConfig {
            segment_bytes: 1 << 20,
            max_body_bytes: 4096,
            ..WalConfig::new(dir)
        }
    }

    #[test]
    fn orphaned_and_legacy_logs_are_adopted_after_the_own_logs() {
        let tmp = tempfile::tempdir().unwrap();
        let wal_dir = tmp.path().join("wal");
        // The old single-log layout, and a run with three workers.
        let (mut legacy, _) = wal::open(&small(&wal_dir)).unwrap();
        legacy.append_events(&[sample_event(1, 10)]).unwrap();
        drop(legacy);
        {
            let run = open_logs(&small(&wal_dir), 3).unwrap();
            let names: Vec<_> = run.logs.iter().map(|l| l.name.as_str()).collect();
            assert_eq!(names, ["core-0", "core-1", "core-2", "legacy"]);
            assert_eq!(run.owners(), [0, 1, 2, 0]);
            assert_eq!(run.logs[3].recovered.pending.len(), 1);
        }
        // Fewer workers later: core-2 is adopted by core 0 (2 % 2), the legacy log too.
        let run = open_logs(&small(&wal_dir), 2).unwrap();
        let names: Vec<_> = run.logs.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["core-0", "core-1", "core-2", "legacy"]);
        assert_eq!(run.owners(), [0, 1, 0, 0]);
        // A second run on the same data dir is refused.
        assert!(matches!(
            open_logs(&small(&wal_dir), 1),
            Err(WalError::Locked { .. })
        ));
    }
}
