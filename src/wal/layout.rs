//! Where the logs of a data directory live.
//!
//! Each core owns one log, `DATA_DIR/wal/core-K/` (`K` = the core's index), with the format of
//! the `wal` module header and its own `LOCK`, segments and LSNs starting at 1. A data dir may
//! also hold logs no running core owns: `core-K` with `K >= workers` (written when the server ran
//! with more workers) and the *legacy* log, segments directly in `DATA_DIR/wal/` (the layout
//! before per-core logs). Those are *adopted* at start-up (`sched::logs`): their pending events
//! are delivered and their outcomes written into them; new events never go there.
#![forbid(unsafe_code)]

use super::segment::list_segments;
use super::WalError;
use std::path::{Path, PathBuf};

/// Name of a core's log directory.
pub fn core_log_name(core: usize) -> String {
    format!("core-{core}")
}

/// `DATA_DIR/wal/core-K`.
pub fn core_log_dir(wal_dir: &Path, core: usize) -> PathBuf {
    wal_dir.join(core_log_name(core))
}

/// `K` of a log named `core-K` ([`core_log_name`]'s inverse: `core-07` is not a core log);
/// `None` for any other name (the legacy log).
pub fn core_of(name: &str) -> Option<usize> {
    let k = name.strip_prefix("core-")?.parse::<usize>().ok()?;
    (core_log_name(k) == name).then_some(k)
}

/// Name of the WAL directory under the data directory.
pub const WAL_SUBDIR: &str = "wal";

/// Name used for the legacy log (segments directly in `DATA_DIR/wal/`).
pub const LEGACY_LOG_NAME: &str = "legacy";

/// One log found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDir {
    /// `core-K` or [`LEGACY_LOG_NAME`].
    pub name: String,
    pub dir: PathBuf,
    /// `Some(K)` for `core-K`.
    pub core: Option<usize>,
}

/// Every log in `wal_dir`: `core-K` directories in order of `K`, then the legacy log if
/// `wal_dir` itself holds segments. A missing `wal_dir` has no logs.
pub fn log_dirs(wal_dir: &Path) -> Result<Vec<LogDir>, WalError> {
    let mut logs = Vec::new();
    let entries = match std::fs::read_dir(wal_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(logs),
        Err(e) => return Err(WalError::io(wal_dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| WalError::io(wal_dir, e))?;
        let name = entry.file_name();
        let Some(k) = name.to_str().and_then(core_of) else {
            continue;
        };
        if entry.path().is_dir() {
            logs.push(LogDir {
                name: core_log_name(k),
                dir: entry.path(),
                core: Some(k),
            });
        }
    }
    logs.sort_by_key(|l| l.core);
    if !list_segments(wal_dir)?.is_empty() {
        logs.push(LogDir {
            name: LEGACY_LOG_NAME.to_owned(),
            dir: wal_dir.to_owned(),
            core: None,
        });
    }
    Ok(logs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_core_logs_in_order_and_the_legacy_log() {
        let tmp = tempfile::tempdir().unwrap();
        let wal = tmp.path().join("wal");
        assert!(log_dirs(&wal).unwrap().is_empty(), "missing dir: no logs");
        for k in [10, 2, 0] {
            std::fs::create_dir_all(core_log_dir(&wal, k)).unwrap();
        }
        // Not logs: a file named like one, a non-canonical number, an unrelated directory.
        std::fs::write(wal.join("core-3"), b"").unwrap();
        std::fs::create_dir_all(wal.join("core-01")).unwrap();
        std::fs::create_dir_all(wal.join("other")).unwrap();
        let names: Vec<_> = log_dirs(&wal)
            .unwrap()
            .into_iter()
            .map(|l| l.name)
            .collect();
        assert_eq!(names, ["core-0", "core-2", "core-10"]);
        std::fs::write(wal.join(format!("{:020}.seg", 1)), b"").unwrap();
        let logs = log_dirs(&wal).unwrap();
        assert_eq!(logs.last().unwrap().name, LEGACY_LOG_NAME);
        assert_eq!(logs.last().unwrap().dir, wal);
        assert_eq!(logs.last().unwrap().core, None);
    }
}
