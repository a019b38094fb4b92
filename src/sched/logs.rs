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
//! Jobs and outcomes between cores name an event by one `u64` key: the log's index (in
//! [`RunLogs::logs`]) and the LSN in that log ([`event_key`], [`split_key`], defined in
//! `wal::key`).
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use crate::storage::{self, StdFs};
use crate::sync::clock::unix_millis;
use crate::wal::{
    self, layout, manifest, DispatchRecovery, LogDir, RecoveryReport, Wal, WalConfig, WalError,
};

/// Event keys live with the logs they name (`wal::key`); re-exported for the run's users.
pub use crate::wal::key::{event_key, split_key, KEY_LSN_BITS};

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
///
/// The data dir's manifest (`wal::manifest`) is checked first: a listed log or checkpoint that
/// is gone fails the start naming it (`WalError::Manifest`), unless `base.accept_loss`. Once
/// every log is open, the manifest is rewritten if the set of logs changed.
pub fn open_logs(base: &WalConfig, workers: usize) -> Result<RunLogs, WalError> {
    let wal_dir = base.dir.clone();
    let fs = StdFs;
    // `wal/` and any missing parent: their entries are durable before a log is made in them.
    storage::create_dir_all_durably(&fs, &wal_dir).map_err(|e| WalError::io(&wal_dir, e))?;
    let reconciled = manifest::reconcile_in(&fs, &wal_dir, base.accept_loss, unix_millis())
        .map_err(WalError::Manifest)?;
    let mut logs = Vec::new();
    for core in 0..workers {
        let dir = layout::core_log_dir(&wal_dir, core);
        logs.push(open_one(base, layout::core_log_name(core), dir, core)?);
    }
    // A gone log that had a high-water record is opened again (empty, recreated): recovery
    // names and counts what it lost from the record, and it continues above its LSNs.
    let mut listed = reconciled.listed.clone();
    for m in &reconciled.accepted_now {
        let dir = manifest::log_dir(&wal_dir, &m.log);
        let recorded = wal::high_water::path_of(&dir).is_some_and(|p| p.exists());
        if recorded && !listed.contains(&m.log) {
            listed.push(m.log.clone());
        }
    }
    for found in others(&wal_dir, workers, &listed)? {
        let owner = found.core.map_or(0, |k| k % workers);
        logs.push(open_one(base, found.name, found.dir, owner)?);
    }
    // A listed log or checkpoint accepted as gone is ranged by recovery from the log's
    // high-water record; one from before the records were kept is counted all the same.
    for missing in &reconciled.accepted_now {
        let log = logs.iter_mut().find(|l| l.name == missing.log);
        if let Some(l) = log.filter(|l| l.report.lost.is_empty() && l.report.skipped.is_none()) {
            eprintln!(
                "sluice: wal {}: no high-water record: the LSNs lost with it cannot be named",
                l.dir.display()
            );
            l.wal.count_unranged_loss();
        }
    }
    let names = logs.iter().map(|l| l.name.clone()).collect();
    manifest::finish_in(&fs, &wal_dir, reconciled, names).map_err(WalError::Manifest)?;
    Ok(RunLogs { logs })
}

/// The logs to adopt: those on disk that no core owns, and the listed ones whose directory is
/// there even if no segment is (their checkpoint says what they must hold), in key order.
fn others(wal_dir: &Path, workers: usize, listed: &[String]) -> Result<Vec<LogDir>, WalError> {
    let mut found = layout::log_dirs(wal_dir)?;
    for name in listed {
        if found.iter().any(|f| &f.name == name) {
            continue;
        }
        let core = layout::core_of(name);
        found.push(LogDir {
            name: name.clone(),
            dir: manifest::log_dir(wal_dir, name),
            core,
        });
    }
    // Core logs in order of K, then the legacy log (`layout::log_dirs`' order).
    found.sort_by_key(|l| (l.core.is_none(), l.core));
    found.retain(|l| !l.core.is_some_and(|k| k < workers));
    Ok(found)
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

    fn undelivered_in_core_1(wal_dir: &Path) {
        let run = open_logs(&small(wal_dir), 2).unwrap();
        drop(run);
        let (mut w, _) = wal::open(&small(&own_log_dir(wal_dir, 1))).unwrap();
        w.append_events(&[sample_event(1, 10), sample_event(2, 10)])
            .unwrap();
        w.sync().unwrap();
    }

    #[test]
    fn a_deleted_log_is_refused_by_name_until_its_loss_is_accepted() {
        let tmp = tempfile::tempdir().unwrap();
        let wal_dir = tmp.path().join("wal");
        undelivered_in_core_1(&wal_dir);
        std::fs::remove_dir_all(wal_dir.join("core-1")).unwrap();
        let e = open_logs(&small(&wal_dir), 2).unwrap_err();
        assert!(matches!(e, WalError::Manifest(_)), "{e}");
        assert!(e.to_string().contains("log core-1 is missing"), "{e}");
        assert!(!wal_dir.join("core-1").exists(), "nothing was recreated");
        let accept = WalConfig {
            accept_loss: true,
            ..small(&wal_dir)
        };
        let run = open_logs(&accept, 2).unwrap();
        assert!(run.logs[1].recovered.pending.is_empty());
        drop(run);
        // Recorded: the next start does not ask again.
        let run = open_logs(&small(&wal_dir), 2).unwrap();
        assert_eq!(run.logs.len(), 2);
        let m = manifest::read_in(&StdFs, &wal_dir).unwrap().unwrap();
        assert_eq!(m.accepted.len(), 1, "{m:?}");
    }

    /// Issue 40 item 3: a gone log is ranged and counted from its high-water record (an
    /// adopted one is opened again for it), or counted without a range when it has none.
    #[test]
    fn an_accepted_lost_log_is_ranged_from_its_high_water_record_or_counted_without() {
        use std::sync::atomic::Ordering::Relaxed;
        let tmp = tempfile::tempdir().unwrap();
        let wal_dir = tmp.path().join("wal");
        drop(open_logs(&small(&wal_dir), 3).unwrap());
        let (mut w, _) = wal::open(&small(&own_log_dir(&wal_dir, 2))).unwrap();
        w.append_events(&[sample_event(1, 10), sample_event(2, 10)])
            .unwrap();
        w.sync().unwrap();
        drop(w);
        let accept = WalConfig {
            accept_loss: true,
            ..small(&wal_dir)
        };
        // Adopted (2 workers now) and gone: opened again, the two LSNs named and counted.
        std::fs::remove_dir_all(wal_dir.join("core-2")).unwrap();
        let mut run = open_logs(&accept, 2).unwrap();
        let names: Vec<_> = run.logs.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["core-0", "core-1", "core-2"]);
        let lost = &run.logs[2].report.lost;
        assert_eq!(
            (lost.len(), lost[0].first, lost[0].last),
            (1, 1, 2),
            "{lost:?}"
        );
        assert!(run.logs[2].report.skipped.is_some());
        let shared = std::sync::Arc::new(wal::WalShared::new());
        run.logs[2].wal.attach_shared(shared.clone());
        assert_eq!(shared.loss_accepted_total.load(Relaxed), 1);
        assert_eq!(shared.lost_lsns_accepted.load(Relaxed), 2);
        drop(run);
        // Gone with its high-water record: nothing to range it by, counted all the same.
        std::fs::remove_dir_all(wal_dir.join("core-1")).unwrap();
        std::fs::remove_file(wal_dir.join("core-1.hw")).unwrap();
        let mut run = open_logs(&accept, 2).unwrap();
        assert!(run.logs[1].report.lost.is_empty());
        let shared = std::sync::Arc::new(wal::WalShared::new());
        run.logs[1].wal.attach_shared(shared.clone());
        assert_eq!(shared.loss_accepted_total.load(Relaxed), 1);
        assert_eq!(shared.lost_lsns_accepted.load(Relaxed), 0);
    }

    #[test]
    fn deleted_checkpoints_with_a_truncated_segment_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let wal_dir = tmp.path().join("wal");
        undelivered_in_core_1(&wal_dir);
        let core1 = own_log_dir(&wal_dir, 1);
        for core in 0..2 {
            std::fs::remove_file(own_log_dir(&wal_dir, core).join("CHECKPOINT")).unwrap();
        }
        let seg = wal::segment::list_segments(&core1).unwrap()[0].1.clone();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&seg)
            .unwrap()
            .set_len(0)
            .unwrap();
        let e = open_logs(&small(&wal_dir), 2).unwrap_err().to_string();
        assert!(e.contains("log core-0 has lost its checkpoint"), "{e}");
        assert!(e.contains("core-1/CHECKPOINT does not exist"), "{e}");
        assert!(manifest::check(&wal_dir).is_err());
    }

    #[test]
    fn an_unlisted_adopted_log_is_listed_and_a_listed_one_without_segments_is_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let wal_dir = tmp.path().join("wal");
        drop(open_logs(&small(&wal_dir), 3).unwrap());
        let m = manifest::read_in(&StdFs, &wal_dir).unwrap().unwrap();
        assert_eq!(m.logs, ["core-0", "core-1", "core-2"]);
        // core-2 holds no segment with an event, but it is listed: it is still opened (its
        // checkpoint is checked) by a run with fewer workers.
        let run = open_logs(&small(&wal_dir), 2).unwrap();
        let names: Vec<_> = run.logs.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["core-0", "core-1", "core-2"]);
    }
}
