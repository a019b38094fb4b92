//! Writing a restore to disk: each log through the WAL's own append path, the dead letters
//! through a [`DeadLetters`] store the caller supplies, all in a staging directory that is moved
//! into the data dir only once every log verified (module docs of `replication::restore`).
//!
//! [`restore_data_dir`] in order:
//! 1. refuses a data dir whose `wal/` holds anything ([`RestoreError::NotEmpty`]): nothing local
//!    is overwritten;
//! 2. connects and lists the node's subjects; none: `Ok(None)`, nothing written;
//! 3. refuses a non-empty `dlq/` as well (the dead letters restored would mix with others);
//! 4. writes into `<data_dir>/.restoring/` (removed first if a failed restore left it): log `K`
//!    into `wal/core-K/` with `wal::open` on the empty directory and one [`Wal::append`] per log
//!    and message (the LSN it returns must be the record's), then [`Wal::sync`]; the dead
//!    letters into `dlq/`, put and released in stream order;
//! 5. verifies each log as local recovery does: reopened with `wal::open`, its recovered last
//!    LSN must be the last restored one, and `wal::tools::verify_log` must find it clean with the
//!    same last LSN; then writes `wal/MANIFEST` listing the restored logs;
//! 6. moves `dlq/` and then `wal/` into the data dir (an empty directory of either is replaced)
//!    and syncs the data dir. `wal/` last: a data dir with a `wal/` holds a whole restore. A
//!    crash between the two renames leaves `dlq/` without `wal/`; the next restore then refuses
//!    naming `dlq/` (delete it and restore again).
//!
//! The WAL settings (segment size, durability, write path, batch) are the node's: the caller
//! passes its `WalConfig` (`dir` is replaced per log).
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::fetch::{Source, SubjectInfo};
use super::{Rebuild, RestoreError, Summary, Writer};
use crate::replication::spec::ReplicationSpec;
use crate::storage::{self, StdFs, Storage};
use crate::wal::{self, layout, manifest, Lsn, Record, RecordKind, Wal, WalConfig};

/// The staging directory under the data dir.
pub const STAGING_DIR: &str = ".restoring";

/// The dead-letter side of a restore: the store's entries arrive in its own encoding.
pub trait DeadLetters {
    /// Stores the entry `entry` (its store's encoding) durably.
    fn put(&mut self, entry: &[u8]) -> Result<(), String>;
    /// Removes the entry `id` durably; `Ok(false)` when no such entry is stored (one stored
    /// before the node replicated).
    fn release(&mut self, id: &str) -> Result<bool, String>;
}

/// The WAL side of a restore: one open log per log index, the records of the current message
/// gathered per log and appended at its end.
#[derive(Debug)]
pub struct LogWriter {
    base: WalConfig,
    wal_dir: PathBuf,
    open: BTreeMap<u16, Wal>,
    pending: BTreeMap<u16, Vec<(Lsn, Record)>>,
    /// Logs that begin above LSN 1 (`wal::begin_at`).
    starts: BTreeMap<u16, Lsn>,
}

impl LogWriter {
    /// Writes logs under `wal_dir` (`core-K/` each) with `base`'s settings.
    pub fn new(wal_dir: &Path, base: &WalConfig) -> LogWriter {
        LogWriter {
            base: base.clone(),
            wal_dir: wal_dir.to_owned(),
            open: BTreeMap::new(),
            pending: BTreeMap::new(),
            starts: BTreeMap::new(),
        }
    }

    /// Log `log` begins at `lsn` (its records below are retired).
    pub fn start_at(&mut self, log: u16, lsn: Lsn) {
        self.starts.insert(log, lsn);
    }

    /// Opens log `log` (beginning it at its start, if it has one); it must be empty.
    fn open_log(&mut self, log: u16) -> Result<(), String> {
        if self.open.contains_key(&log) {
            return Ok(());
        }
        let cfg = self.config(log);
        if let Some(&first) = self.starts.get(&log) {
            wal::begin_at(&cfg.dir, first).map_err(|e| e.to_string())?;
        }
        let (w, report) = wal::open(&cfg).map_err(|e| e.to_string())?;
        let begins = self.starts.get(&log).copied().unwrap_or(1).max(1);
        if report.last_lsn + 1 != begins {
            let dir = cfg.dir.display();
            return Err(format!(
                "{dir} was not empty (last LSN {})",
                report.last_lsn
            ));
        }
        self.open.insert(log, w);
        Ok(())
    }

    /// Creates the logs that begin above LSN 1 and got no record (every record retired).
    pub fn open_started(&mut self) -> Result<(), String> {
        let logs: Vec<u16> = self.starts.keys().copied().collect();
        for log in logs {
            self.open_log(log)?;
        }
        Ok(())
    }

    /// Log `log`'s settings.
    fn config(&self, log: u16) -> WalConfig {
        WalConfig {
            dir: layout::core_log_dir(&self.wal_dir, log as usize),
            accept_loss: false,
            ..self.base.clone()
        }
    }

    /// Gathers record `lsn` of log `log` for the message's end.
    pub fn record(&mut self, log: u16, lsn: Lsn, record: Record) {
        self.pending.entry(log).or_default().push((lsn, record));
    }

    /// Appends each log's gathered records (one append, checked LSNs) and syncs it.
    pub fn flush(&mut self) -> Result<(), String> {
        for (log, records) in std::mem::take(&mut self.pending) {
            let (Some(&(first, _)), Some(&(last, _))) = (records.first(), records.last()) else {
                continue;
            };
            self.open_log(log)?;
            let w = self.open.get_mut(&log).expect("opened");
            if w.next_lsn() != first {
                return Err(format!(
                    "log core-{log}: the WAL's next LSN is {}, the record's {first}",
                    w.next_lsn()
                ));
            }
            let records: Vec<Record> = records.into_iter().map(|(_, r)| r).collect();
            let got = w
                .append(&records)
                .map_err(|e| format!("log core-{log}: {e}"))?;
            if got != last {
                return Err(format!(
                    "log core-{log}: the WAL appended through LSN {got}, the records end at {last}"
                ));
            }
            w.sync().map_err(|e| format!("log core-{log}: {e}"))?;
        }
        Ok(())
    }

    /// Closes every log (releasing their locks).
    pub fn close(&mut self) {
        self.open.clear();
    }
}

/// The writer of a restore: logs through [`LogWriter`], dead letters through `D`.
#[derive(Debug)]
pub struct NodeWriter<D> {
    pub logs: LogWriter,
    pub dead: D,
    /// Releases of ids the store did not hold.
    pub released_missing: u64,
}

impl<D: DeadLetters> Writer for NodeWriter<D> {
    fn record(
        &mut self,
        log: u16,
        lsn: Lsn,
        _kind: RecordKind,
        record: Record,
    ) -> Result<(), String> {
        self.logs.record(log, lsn, record);
        Ok(())
    }

    fn dead_letter(&mut self, entry: &[u8]) -> Result<(), String> {
        self.dead.put(entry)
    }

    fn released(&mut self, id: &str) -> Result<(), String> {
        if !self.dead.release(id)? {
            self.released_missing += 1;
        }
        Ok(())
    }

    fn end_message(&mut self) -> Result<(), String> {
        self.logs.flush()
    }
}

/// What [`restore_data_dir`] restored.
#[derive(Debug, Clone)]
pub struct Restored {
    /// The node's subjects as the stream listed them.
    pub subjects: Vec<SubjectInfo>,
    pub summary: Summary,
    /// Releases of dead letters the restore did not hold (stored before the node replicated).
    pub released_missing: u64,
}

/// What `dir` holds, if anything: `None` when it does not exist or is empty.
pub fn holds(dir: &Path) -> Result<Option<String>, RestoreError> {
    let err = |e: std::io::Error| RestoreError::Write {
        what: format!("reading {}", dir.display()),
        error: e.to_string(),
    };
    let mut entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(e)),
    };
    match entries.next() {
        None => Ok(None),
        Some(e) => Ok(Some(
            e.map_err(err)?.file_name().to_string_lossy().into_owned(),
        )),
    }
}

fn refuse_if_used(dir: &Path) -> Result<(), RestoreError> {
    match holds(dir)? {
        None => Ok(()),
        Some(name) => Err(RestoreError::NotEmpty {
            path: dir.to_owned(),
            found: format!("{name:?}"),
        }),
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RestoreError {
    let what = what.into();
    move |e| RestoreError::Write {
        what,
        error: e.to_string(),
    }
}

/// Restores node `node`'s logs from the stream into `data_dir` (module docs); `Ok(None)` when
/// the stream holds no message of the node (nothing is written then). `wal` carries the node's
/// WAL settings; `open_dlq` opens the dead-letter store in the directory it is given.
pub fn restore_data_dir<D: DeadLetters>(
    spec: &ReplicationSpec,
    node: &str,
    data_dir: &Path,
    wal: &WalConfig,
    open_dlq: impl FnOnce(&Path) -> Result<D, String>,
) -> Result<Option<Restored>, RestoreError> {
    refuse_if_used(&data_dir.join(layout::WAL_SUBDIR))?;
    let source = Source::connect(spec, node)?;
    let subjects = source.subjects()?;
    if subjects.is_empty() {
        return Ok(None);
    }
    refuse_if_used(&data_dir.join(DLQ_SUBDIR))?;
    let staging = data_dir.join(STAGING_DIR);
    if staging.exists() {
        let what = format!("removing the earlier staging {}", staging.display());
        std::fs::remove_dir_all(&staging).map_err(io(what))?;
    }
    let wal_dir = staging.join(layout::WAL_SUBDIR);
    storage::create_dir_all_durably(&StdFs, &wal_dir).map_err(io(wal_dir.display().to_string()))?;
    let dead = open_dlq(&staging.join(DLQ_SUBDIR)).map_err(|error| RestoreError::Write {
        what: "the dead-letter queue".into(),
        error,
    })?;
    let mut writer = NodeWriter {
        logs: LogWriter::new(&wal_dir, wal),
        dead,
        released_missing: 0,
    };
    let mut rebuild = Rebuild::new();
    for (log, first) in source.firsts(&subjects)? {
        rebuild.start_at(log, first);
        writer.logs.start_at(log, first);
    }
    source.read(&subjects, &mut |at, bytes| {
        rebuild.feed_bytes(at, bytes, &mut writer)
    })?;
    let summary = rebuild.finish()?;
    (writer.logs.open_started()).map_err(|error| RestoreError::Write {
        what: "a log whose records are all retired".into(),
        error,
    })?;
    writer.logs.close();
    let released_missing = writer.released_missing;
    drop(writer);
    for l in &summary.logs {
        verify(&LogWriter::new(&wal_dir, wal).config(l.log), l.log, l.last)?;
    }
    let names = summary
        .logs
        .iter()
        .map(|l| layout::core_log_name(l.log as usize));
    let m = manifest::Manifest {
        logs: names.collect(),
        accepted: Vec::new(),
    };
    manifest::write_in(&StdFs, &wal_dir, &m).map_err(|e| RestoreError::Write {
        what: "the manifest".into(),
        error: e.to_string(),
    })?;
    move_into_place(&staging, data_dir)?;
    Ok(Some(Restored {
        subjects,
        summary,
        released_missing,
    }))
}

/// The DLQ's directory under a data dir (dispatch's `DLQ_SUBDIR`).
pub const DLQ_SUBDIR: &str = "dlq";

/// Log `log` at `cfg.dir` recovers, and verifies, through `last` exactly.
fn verify(cfg: &WalConfig, log: u16, last: Lsn) -> Result<(), RestoreError> {
    let fail = |error: String| RestoreError::Verify { log, error };
    let (w, report) = wal::open(cfg).map_err(|e| fail(e.to_string()))?;
    drop(w);
    if report.last_lsn != last {
        return Err(fail(format!(
            "recovery found last LSN {}, {last} were restored",
            report.last_lsn
        )));
    }
    let v = wal::tools::verify_log(&cfg.dir).map_err(|e| fail(e.to_string()))?;
    // A log restored empty (every record retired) holds no record for `verify` to name; its
    // recovery's last LSN was checked above.
    if !v.is_clean() || v.last_lsn.unwrap_or(last) != last {
        return Err(fail(format!("{v}")));
    }
    Ok(())
}

/// Moves the staged `dlq/` and then `wal/` into `data_dir` and removes the staging directory.
fn move_into_place(staging: &Path, data_dir: &Path) -> Result<(), RestoreError> {
    let fs = StdFs;
    for sub in [DLQ_SUBDIR, layout::WAL_SUBDIR] {
        let (from, to) = (staging.join(sub), data_dir.join(sub));
        if !from.exists() {
            continue;
        }
        if to.exists() {
            // Checked empty before the restore began.
            std::fs::remove_dir(&to).map_err(io(format!("replacing {}", to.display())))?;
        }
        std::fs::rename(&from, &to).map_err(io(format!("moving {}", from.display())))?;
        fs.sync_dir(data_dir)
            .map_err(io(format!("syncing {}", data_dir.display())))?;
    }
    std::fs::remove_dir(staging).map_err(io(format!("removing {}", staging.display())))?;
    fs.sync_dir(data_dir)
        .map_err(io(format!("syncing {}", data_dir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::restore::tests::{at, frame, message};

    /// Dead letters kept in memory.
    #[derive(Default)]
    struct Letters(Vec<Vec<u8>>);

    impl DeadLetters for Letters {
        fn put(&mut self, entry: &[u8]) -> Result<(), String> {
            self.0.push(entry.to_vec());
            Ok(())
        }
        fn release(&mut self, id: &str) -> Result<bool, String> {
            let before = self.0.len();
            self.0.retain(|e| e != id.as_bytes());
            Ok(self.0.len() < before)
        }
    }

    /// Small logs under `wal_dir` and a writer over them with `dead` as its dead letters.
    fn writer(wal_dir: &Path, dead: Letters) -> (WalConfig, NodeWriter<Letters>) {
        let base = WalConfig {
            segment_bytes: 1 << 20,
            max_body_bytes: 4096,
            ..WalConfig::new(wal_dir)
        };
        let w = NodeWriter {
            logs: LogWriter::new(wal_dir, &base),
            dead,
            released_missing: 0,
        };
        (base, w)
    }

    #[test]
    fn the_log_writer_appends_through_the_wal_and_the_log_recovers_to_the_same_records() {
        let tmp = tempfile::tempdir().unwrap();
        let wal_dir = tmp.path().join("wal");
        let (base, mut w) = writer(&wal_dir, Letters::default());
        let mut rb = Rebuild::new();
        let one = message(&[frame(&[(0, &[1, 2]), (1, &[1])], &["x"], &["y"])]);
        let two = message(&[frame(&[(0, &[3])], &[], &["x"])]);
        rb.feed_bytes(at(1), &one, &mut w).unwrap();
        rb.feed_bytes(at(2), &two, &mut w).unwrap();
        let s = rb.finish().unwrap();
        w.logs.close();
        assert_eq!((w.released_missing, w.dead.0.len()), (1, 0));
        for l in &s.logs {
            let dir = wal::core_log_dir(&wal_dir, l.log as usize);
            let (_, report) = wal::open(&WalConfig {
                dir: dir.clone(),
                ..base.clone()
            })
            .unwrap();
            assert_eq!(report.last_lsn, l.last);
            let v = wal::tools::verify_log(&dir).unwrap();
            assert!(v.is_clean(), "{v}");
        }
        let events: Vec<_> = wal::WalReader::open(&wal::core_log_dir(&wal_dir, 0))
            .unwrap()
            .map(|r| r.unwrap().lsn)
            .collect();
        assert_eq!(events, [1, 2, 3]);
    }

    /// A stream that dropped retired records: log 0 begins at 3 (its records 1 and 2 and their
    /// frame's release are still read, the release applied); log 1 is wholly retired (begins
    /// at 5, no record) and is created empty there. Both recover and verify where they begin.
    #[test]
    fn logs_begin_where_the_stream_says_their_records_are_retired() {
        let tmp = tempfile::tempdir().unwrap();
        let wal_dir = tmp.path().join("wal");
        let (base, mut w) = writer(&wal_dir, Letters(vec![b"y".to_vec()]));
        let mut rb = Rebuild::new();
        for (log, first) in [(0, 3), (1, 5)] {
            rb.start_at(log, first);
            w.logs.start_at(log, first);
        }
        let one = message(&[frame(&[(0, &[1, 2])], &["x"], &["y"])]);
        let two = message(&[frame(&[(0, &[3, 4])], &[], &[])]);
        rb.feed_bytes(at(1), &one, &mut w).unwrap();
        rb.feed_bytes(at(2), &two, &mut w).unwrap();
        let s = rb.finish().unwrap();
        w.logs.open_started().unwrap();
        w.logs.close();
        assert_eq!(
            w.dead.0,
            [b"x".to_vec()],
            "the retired frame's letters still apply"
        );
        let got: Vec<_> = s.logs.iter().map(|l| (l.log, l.first, l.last)).collect();
        assert_eq!(got, [(0, 3, 4), (1, 5, 4)]);
        for l in &s.logs {
            let cfg = WalConfig {
                dir: wal::core_log_dir(&wal_dir, l.log as usize),
                ..base.clone()
            };
            verify(&cfg, l.log, l.last).unwrap();
            let (mut wal, _) = wal::open(&cfg).unwrap();
            assert_eq!(wal.next_lsn(), l.last + 1, "it continues where it was");
            wal.append_events(&[crate::wal::format::tests::sample_event(9, 8)])
                .unwrap();
        }
        let lsns: Vec<_> = wal::WalReader::open(&wal::core_log_dir(&wal_dir, 0))
            .unwrap()
            .map(|r| r.unwrap().lsn)
            .collect();
        assert_eq!(lsns, [3, 4, 5]);
    }

    #[test]
    fn a_used_directory_is_refused_by_name_and_a_staged_restore_replaces_empty_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        assert_eq!(holds(&data.join("wal")).unwrap(), None, "absent");
        std::fs::create_dir_all(data.join("wal")).unwrap();
        assert_eq!(holds(&data.join("wal")).unwrap(), None, "empty");
        std::fs::create_dir_all(data.join("wal/core-0")).unwrap();
        let e = refuse_if_used(&data.join("wal")).unwrap_err();
        assert!(matches!(e, RestoreError::NotEmpty { .. }), "{e:?}");
        assert!(e.to_string().contains("core-0"), "{e}");
        assert_eq!(e.exit_code(), 7);
        std::fs::remove_dir(data.join("wal/core-0")).unwrap();
        // Staged wal/ (and no dlq/) moves in over the empty wal/.
        let staging = data.join(STAGING_DIR);
        std::fs::create_dir_all(staging.join("wal/core-1")).unwrap();
        move_into_place(&staging, &data).unwrap();
        assert!(data.join("wal/core-1").is_dir());
        assert!(!staging.exists() && !data.join("dlq").exists());
    }
}
