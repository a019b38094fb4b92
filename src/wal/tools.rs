//! Offline tools behind `sluice wal verify|inspect`. Read-only: they never modify the log.
//!
//! Both take the *data* directory and read `DATA_DIR/wal`. Meant for a stopped server; against a
//! running one they may report the tail being appended as torn.
#![forbid(unsafe_code)]

use super::checkpoint::{self, Checkpoint, Extent, LostRange};
use super::format::{decode_payload, RecordRef};
use super::{BodyJson, DoneStatus, Lsn, Record, WalError, WalReader};
use crate::storage::{StdFs, Storage};
use crate::tools::progress::{Progress, Silent};
pub use crate::wal::recover::Finding;
use crate::wal::recover::{scan_dir, ScanOpts};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

pub use super::layout::WAL_SUBDIR;

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// The WAL directory checked.
    pub dir: PathBuf,
    /// Segments scanned (up to and including the one with the finding).
    pub segments: usize,
    /// Valid records before the finding (or in all, if none).
    pub records: u64,
    /// LSN of the first segment, if any segment exists.
    pub first_lsn: Option<Lsn>,
    /// LSN of the last valid record, if any.
    pub last_lsn: Option<Lsn>,
    /// The first problem: a torn tail (recovery would truncate it) or corruption (startup would
    /// fail; this includes a damaged record at or below the checkpointed durable LSN). `None`:
    /// the segments are clean.
    pub finding: Option<Finding>,
    /// The log's checkpoint (`None`: none, written by an older version, or damaged).
    pub checkpoint: Option<Checkpoint>,
    /// The checkpoint file exists but is damaged: why.
    pub checkpoint_damaged: Option<String>,
    /// LSN ranges that cannot be read (startup would fail; `--accept-wal-loss` gives them up):
    /// damaged records (also named by `finding`), missing segment files, and ranges the
    /// checkpoint promises that the segments do not hold.
    pub lost: Vec<LostRange>,
    /// Ranges given up at an earlier start (`--accept-wal-loss`), recorded in the log.
    pub accepted: Vec<(Lsn, Lsn)>,
    /// Torn tails an earlier recovery truncated (`quarantine/TORN`), counted and kept.
    pub torn: Vec<crate::wal::recover::torn::TornTail>,
    /// The log's high-water record (`wal::high_water`; `None`: a bare log, one from before
    /// the records, or a damaged record).
    pub high_water: Option<crate::wal::high_water::HighWater>,
    /// The high-water record exists but is damaged: why.
    pub high_water_damaged: Option<String>,
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.finding.is_none()
            && self.lost.is_empty()
            && self.checkpoint_damaged.is_none()
            && self.high_water_damaged.is_none()
            && !self.checkpoint_lost()
    }

    /// The checkpoint is gone (or damaged) while the high-water record shows the log had one:
    /// the segments were checked against the record's copy.
    pub fn checkpoint_lost(&self) -> bool {
        self.checkpoint.is_none() && self.high_water.is_some()
    }
}

impl std::fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} segments, {} valid records",
            self.dir.display(),
            self.segments,
            self.records
        )?;
        if let (Some(a), Some(b)) = (self.first_lsn, self.last_lsn) {
            write!(f, " (lsn {a}..={b})")?;
        }
        match &self.finding {
            None => write!(f, "; clean"),
            Some(Finding::TornTail { segment, offset }) => write!(
                f,
                "; torn tail in segment {} at offset {offset} (recovery truncates it)",
                segment.display()
            ),
            Some(Finding::Corrupt {
                segment,
                offset,
                reason,
            }) => write!(
                f,
                "; CORRUPT: segment {} at offset {offset}: {reason}",
                segment.display()
            ),
        }?;
        for r in &self.lost {
            let word = if r.is_empty() { "DAMAGED" } else { "LOST" };
            write!(f, "; {word}: {r}")?;
        }
        for (a, b) in &self.accepted {
            if b < a {
                write!(
                    f,
                    "; accepted earlier: damaged bytes after LSN {b}, no LSN given up"
                )?;
            } else {
                write!(f, "; accepted earlier: LSNs {a}..={b} given up")?;
            }
        }
        if let Some(why) = &self.checkpoint_damaged {
            write!(f, "; CHECKPOINT DAMAGED: {why}")?;
        }
        match (&self.high_water, &self.high_water_damaged) {
            (Some(hw), _) if self.checkpoint_lost() => write!(
                f,
                "; CHECKPOINT LOST: checked against the copy in the high-water record (written \
                 at unix ms {}); LSNs up to {} reserved",
                hw.written_at_ms, hw.reserved
            )?,
            (Some(hw), _) => write!(f, "; high-water: LSNs up to {} reserved", hw.reserved)?,
            (None, Some(why)) => write!(f, "; HIGH-WATER RECORD DAMAGED: {why}")?,
            (None, None) => {}
        }
        for t in &self.torn {
            write!(f, "; earlier: {t}")?;
        }
        Ok(())
    }
}

/// Checks every log of `DATA_DIR/wal` (`wal::layout`: `core-K`, then the legacy log) with
/// [`verify_log`], one report per log, in that order. `Err` only when a log cannot be read at
/// all (I/O).
pub fn verify_all(data_dir: &Path) -> Result<Vec<VerifyReport>, WalError> {
    verify_all_with(data_dir, &mut Silent)
}

/// [`verify_all`], reporting each log's records to `progress` as they are checked.
pub fn verify_all_with(
    data_dir: &Path,
    progress: &mut dyn Progress,
) -> Result<Vec<VerifyReport>, WalError> {
    let mut reports = Vec::new();
    for l in super::layout::log_dirs(&data_dir.join(WAL_SUBDIR))? {
        progress.begin(&format!("wal verify {}", l.name), None);
        let report = verify_log_in(&StdFs, &l.dir, progress);
        progress.end();
        reports.push(report?);
    }
    Ok(reports)
}

/// [`verify_log`] of the log directly in `DATA_DIR/wal` (the legacy single-log layout; the
/// fuzz target and format tests write one log there).
pub fn verify(data_dir: &Path) -> Result<VerifyReport, WalError> {
    verify_log(&data_dir.join(WAL_SUBDIR))
}

/// Checks every record of the log directory `dir`: lengths, CRC, kind, LSN continuity, and that
/// every payload (event, replayed event, done, retry) decodes; then compares what exists with
/// the directory's checkpoint (missing head or tail ranges; a damaged record at or below the
/// checkpointed durable LSN is corruption, not a torn tail). Reports the first problem with its
/// segment and offset, and every missing LSN range. `Err` only when the log cannot be read at
/// all (I/O).
pub fn verify_log(dir: &Path) -> Result<VerifyReport, WalError> {
    verify_log_in(&StdFs, dir, &mut Silent)
}

/// [`verify_log`] on `storage` (the fuzzer checks logs held in memory), reporting each record
/// to `progress` as it is checked.
pub fn verify_log_in(
    storage: &dyn Storage,
    dir: &Path,
    progress: &mut dyn Progress,
) -> Result<VerifyReport, WalError> {
    let dir = dir.to_owned();
    let mut valid = 0u64;
    let mut check = |_: &Path, _: u64, r: &RecordRef<'_>| {
        decode_payload(r.kind, r.payload).map_err(|e| format!("{:?} payload: {e}", r.kind))?;
        valid += 1;
        progress.advance(1);
        Ok(())
    };
    let (checkpoint, checkpoint_damaged) = match checkpoint::read_in(storage, &dir)? {
        None => (None, None),
        Some(Ok(c)) => (Some(c), None),
        Some(Err(d)) => (None, Some(d.to_string())),
    };
    let hw_file = crate::wal::high_water::path_of(&dir);
    let (high_water, high_water_damaged) = match hw_file {
        Some(p) => match crate::wal::high_water::read_in(storage, &p)? {
            None => (None, None),
            Some(Ok(hw)) => (Some(hw), None),
            Some(Err(d)) => (None, Some(WalError::HighWaterDamaged(d).to_string())),
        },
        None => (None, None),
    };
    // A lost checkpoint: its copy in the high-water record is what recovery would check.
    let promise = checkpoint.or(high_water.map(|hw| hw.checkpoint));
    // The same decision as recovery (`wal::damage`), going on past damage to acknowledged
    // data and past missing segment files, so every range that cannot be read is named.
    let opts = ScanOpts {
        promised: promise.map(|c| c.durable_lsn),
        skip_damage: true,
    };
    let scan = scan_dir(storage, &dir, opts, &mut check)?;
    let records = valid;
    let last_lsn = scan
        .first_lsn
        .filter(|_| records > 0)
        .map(|_| scan.next_lsn - 1);
    let finding = scan.finding.clone();
    let mut lost: Vec<LostRange> = scan.losses.iter().map(|l| l.range.clone()).collect();
    // A scan stopped early (an undecodable payload) names its damage by the finding; what it
    // did not read is not missing.
    if let Some(c) = promise.as_ref().filter(|_| !scan.stopped) {
        let torn = match &finding {
            Some(Finding::TornTail { segment, offset }) => Some((segment.clone(), *offset)),
            _ => None,
        };
        let extent = Extent {
            first_segment_lsn: scan.segments.first().map(|s| s.0),
            next_lsn: scan.next_lsn,
            damaged_tail: torn,
        };
        lost.extend(checkpoint::missing(c, &extent));
    }
    let accepted = scan.accepted.clone();
    let torn = crate::wal::recover::torn::load(storage, &dir).map_err(|e| WalError::io(&dir, e))?;
    Ok(VerifyReport {
        dir,
        segments: scan.segments.len(),
        records,
        first_lsn: scan.first_lsn,
        last_lsn,
        finding,
        checkpoint,
        checkpoint_damaged,
        lost,
        accepted,
        torn,
        high_water,
        high_water_damaged,
    })
}

#[derive(serde::Serialize)]
struct InspectLine<'a> {
    event_id: &'a str,
    /// The log holding the event (`core-K` or `legacy`); LSNs are per log.
    log: &'a str,
    lsn: Lsn,
    trigger_id: &'a str,
    source: &'a str,
    received_at: u64,
    body_len: usize,
    body_sha256: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    replay_of: Option<&'a str>,
    /// Whether the body is one JSON value, as decided at ingest (kinds 9 and 10); absent when
    /// it was not decided (kinds 1 and 5).
    #[serde(skip_serializing_if = "Option::is_none")]
    body_json: Option<bool>,
    /// `delivered`, `skipped`, `dead_lettered`, `no_handler` or `pending` (no `Done` entry).
    outcome: &'static str,
    /// `skipped`: the gate and its reason (absent for a skip written before reasons were
    /// recorded); `dead_lettered`: the DLQ reason, when the DLQ entry is still there.
    #[serde(skip_serializing_if = "Option::is_none")]
    gate: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    /// Attempts made: from the `Done` entry, or for a pending event the last `Retry` record's
    /// next attempt minus one (absent: none recorded).
    #[serde(skip_serializing_if = "Option::is_none")]
    attempts: Option<u32>,
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes
        .iter()
        .flat_map(|b| {
            [
                DIGITS[(b >> 4) as usize] as char,
                DIGITS[(b & 15) as usize] as char,
            ]
        })
        .collect()
}

/// Writes one JSON object per event (kind 1, 5, 9 or 10; done and retry records are not
/// listed) of every log in `DATA_DIR/wal` (log by log, in LSN order within a log):
/// `{"event_id","log","lsn","trigger_id","source","received_at","body_len","body_sha256",
/// "outcome"}`, plus `"replay_of"` for a replayed event, `"body_json"` (`true`/`false`) when
/// ingest decided whether the body is JSON, `"gate"`/`"reason"` for a skip or a
/// dead letter, `"attempts"` when recorded (see `InspectLine`). Each log is read twice: the
/// outcomes first (one map entry per `Done` entry / retried event), then the events.
/// Damaged records and missing segment files are passed over (named on stderr as
/// `UNREADABLE`), so every readable event is listed; a torn tail just ends that log's output;
/// an undecodable payload in a CRC-valid record stops with `Err(Corrupt)`.
pub fn inspect_json(data_dir: &Path, out: &mut dyn Write) -> Result<(), WalError> {
    inspect_json_with(data_dir, out, &|_| None, &mut Silent)
}

/// [`inspect_json`], with `dead_letter_reason(event_id)` naming a dead letter's DLQ reason,
/// reporting each log's events to `progress` as they are printed.
pub fn inspect_json_with(
    data_dir: &Path,
    out: &mut dyn Write,
    dead_letter_reason: &dyn Fn(&str) -> Option<&'static str>,
    progress: &mut dyn Progress,
) -> Result<(), WalError> {
    for log in super::layout::log_dirs(&data_dir.join(WAL_SUBDIR))? {
        progress.begin(&format!("wal inspect {}", log.name), None);
        let r = inspect_log(&log.dir, &log.name, out, dead_letter_reason, progress);
        progress.end();
        r?;
    }
    let out_err = |e: std::io::Error| WalError::io(Path::new("<output>"), e);
    out.flush().map_err(out_err)
}

/// The outcome of every event of the log in `dir` that has one: `Done` status and attempts,
/// or (pending, retried) the attempts made.
fn outcomes(dir: &Path) -> Result<HashMap<Lsn, (Option<DoneStatus>, u32)>, WalError> {
    let mut map = HashMap::new();
    let mut reader = WalReader::open(dir)?.skipping();
    while let Some(next) = reader.next_record() {
        match next? {
            (_, Record::Done(d)) => {
                for e in d.entries {
                    map.insert(e.event_lsn, (Some(e.status), e.attempts));
                }
            }
            (_, Record::Retry(r)) => {
                let made = r.next_attempt.saturating_sub(1);
                map.entry(r.event_lsn)
                    .and_modify(|o: &mut (Option<DoneStatus>, u32)| {
                        if o.0.is_none() {
                            o.1 = made;
                        }
                    })
                    .or_insert((None, made));
            }
            _ => {}
        }
    }
    Ok(map)
}

fn inspect_log(
    dir: &Path,
    name: &str,
    out: &mut dyn Write,
    dead_letter_reason: &dyn Fn(&str) -> Option<&'static str>,
    progress: &mut dyn Progress,
) -> Result<(), WalError> {
    let done = outcomes(dir)?;
    // Lists what is readable: damaged records and missing segment files are passed over and
    // named on stderr (`wal verify` reports them).
    let mut reader = WalReader::open(dir)?.skipping();
    let out_err = |e: std::io::Error| WalError::io(Path::new("<output>"), e);
    while let Some(next) = reader.next_event() {
        let (lsn, ev) = next?;
        let (status, attempts) = match done.get(&lsn) {
            Some(&(s, a)) => (s, Some(a)),
            None => (None, None),
        };
        let (outcome, gate, reason) = match status {
            Some(s) => s.describe(),
            None => ("pending", None, None),
        };
        let reason = match status {
            Some(DoneStatus::DeadLettered) => dead_letter_reason(&ev.event_id),
            _ => reason,
        };
        let line = InspectLine {
            event_id: &ev.event_id,
            log: name,
            lsn,
            trigger_id: &ev.trigger_id,
            source: &ev.source,
            received_at: ev.received_at_ms,
            body_len: ev.body.len(),
            body_sha256: hex(&Sha256::digest(&ev.body)),
            replay_of: ev.replay_of.as_deref(),
            body_json: match ev.body_json {
                BodyJson::Undecided => None,
                decided => Some(decided == BodyJson::Json),
            },
            outcome,
            gate,
            reason,
            attempts,
        };
        serde_json::to_writer(&mut *out, &line).map_err(|e| out_err(e.into()))?;
        out.write_all(b"\n").map_err(out_err)?;
        progress.advance(1);
    }
    for r in reader.skipped() {
        eprintln!("sluice: wal inspect {name}: UNREADABLE, not listed: {r}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::format::tests::sample_event;
    use crate::wal::format::tests::sample_records;
    use crate::wal::recover::tests::test_cfg;
    use crate::wal::{open, Record, RecordKind, WritePath};
    use std::os::unix::fs::FileExt;

    #[test]
    fn verify_and_inspect_with_every_record_kind() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
        let recs = sample_records(2); // event, replay, done, empty done, retry
        open(&cfg).unwrap().0.append(&recs).unwrap();
        let r = verify(tmp.path()).unwrap();
        assert!(r.is_clean(), "{r}");
        assert_eq!(r.records, 5);
        let mut out = Vec::new();
        inspect_json(tmp.path(), &mut out).unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "one object per event only");
        assert_eq!(lines[0]["lsn"], 1);
        assert!(lines[0].get("replay_of").is_none());
        let Record::Event(replay) = &recs[1] else {
            panic!()
        };
        assert_eq!(lines[1]["lsn"], 2);
        assert_eq!(lines[1]["replay_of"], replay.replay_of.as_deref().unwrap());
        assert_eq!(lines[1]["event_id"], replay.event_id.as_str());
        for l in &lines {
            assert!(l["outcome"].is_string(), "{l}");
        }
    }

    #[test]
    fn inspect_shows_each_events_outcome_with_the_skip_reason() {
        use crate::wal::{DoneEntry, DoneRecord, RetryRecord};
        let tmp = tempfile::tempdir().unwrap();
        let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
        let ev = |i| Record::Event(crate::wal::format::tests::sample_event(i, 8));
        let done = |lsn, status, attempts| DoneEntry {
            event_lsn: lsn,
            status,
            attempts,
        };
        let recs = vec![
            ev(0),
            ev(1),
            ev(2),
            ev(3),
            ev(4),
            Record::Done(DoneRecord {
                entries: vec![
                    done(1, DoneStatus::Delivered, 1),
                    done(2, DoneStatus::SkippedDebounced, 0),
                    done(3, DoneStatus::DeadLettered, 4),
                ],
            }),
            Record::Retry(RetryRecord {
                event_lsn: 4,
                next_attempt: 3,
                due_at_ms: 9,
                last_error: "x".into(),
            }),
            Record::Attempts(crate::wal::AttemptsRecord {
                entries: vec![crate::wal::AttemptEntry {
                    event_lsn: 4,
                    attempt: 2,
                    at_ms: 9,
                    destination: 0,
                    outcome: crate::wal::AttemptOutcome::Timeout,
                    latency_us: 1,
                    retry_after_ms: None,
                    response_prefix: Vec::new(),
                }],
            }),
        ];
        open(&cfg).unwrap().0.append(&recs).unwrap();
        // `wal verify` decodes the attempts record (kind 8) and finds the log clean.
        let report = verify_all(tmp.path()).unwrap();
        assert!(report.iter().all(|r| r.finding.is_none()), "{report:?}");
        assert_eq!(report.iter().map(|r| r.records).sum::<u64>(), 8);
        let mut out = Vec::new();
        let dlq = |id: &str| (id == sample_event(2, 8).event_id).then_some("retry_exhausted");
        inspect_json_with(tmp.path(), &mut out, &dlq, &mut Silent).unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let o = |i: usize, k: &str| lines[i].get(k).cloned().unwrap_or_default();
        assert_eq!(
            (o(0, "outcome"), o(0, "attempts")),
            ("delivered".into(), 1.into())
        );
        assert_eq!(
            (o(1, "outcome"), o(1, "gate"), o(1, "reason")),
            ("skipped".into(), "debounce".into(), "debounced".into())
        );
        assert_eq!(
            (o(2, "outcome"), o(2, "reason"), o(2, "attempts")),
            ("dead_lettered".into(), "retry_exhausted".into(), 4.into())
        );
        assert_eq!(
            (o(3, "outcome"), o(3, "attempts")),
            ("pending".into(), 2.into())
        );
        assert_eq!(o(4, "outcome"), "pending");
        assert!(lines[4].get("attempts").is_none());
    }

    #[test]
    fn verify_reports_undecodable_done_payload() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(WAL_SUBDIR);
        std::fs::create_dir_all(&dir).unwrap();
        let mut bytes = Vec::new();
        for (lsn, kind, payload) in [
            (1, RecordKind::Done, &[0u8, 0][..]),
            (
                2,
                RecordKind::Done,
                &[1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..],
            ),
        ] {
            super::super::format::append_record(&mut bytes, lsn, kind, |o| {
                o.extend_from_slice(payload);
                Ok::<(), ()>(())
            })
            .unwrap();
        }
        bytes.resize(4096, 0);
        std::fs::write(dir.join("00000000000000000001.seg"), &bytes).unwrap();
        let r = verify(tmp.path()).unwrap();
        match &r.finding {
            Some(Finding::Corrupt { offset, reason, .. }) => {
                assert_eq!(*offset, 19, "{reason}");
                assert!(reason.contains("done status"), "{reason}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
        assert_eq!(r.records, 1);
    }

    fn setup(n: u64) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
        let evs: Vec<_> = (0..n).map(|i| sample_event(i, 64 * i as usize)).collect();
        open(&cfg).unwrap().0.append_events(&evs).unwrap();
        let seg = cfg.dir.join("00000000000000000001.seg");
        (tmp, seg)
    }

    #[test]
    fn verify_clean_torn_and_corrupt() {
        let (tmp, seg) = setup(4);
        let r = verify(tmp.path()).unwrap();
        assert!(r.is_clean());
        assert_eq!(
            (r.segments, r.records, r.first_lsn, r.last_lsn),
            (1, 4, Some(1), Some(4))
        );
        let offs: Vec<u64> = WalReader::open(&tmp.path().join("wal"))
            .unwrap()
            .map(|r| r.unwrap().offset)
            .collect();
        let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        let before = std::fs::read(&seg).unwrap();
        f.write_all_at(&[0x55], offs[3] + 30).unwrap();
        let r = verify(tmp.path()).unwrap();
        assert_eq!(
            r.finding,
            Some(Finding::TornTail {
                segment: seg.clone(),
                offset: offs[3]
            })
        );
        assert_eq!((r.records, r.last_lsn), (3, Some(3)));
        // The checkpoint promises LSNs 1..=2: damage at LSN 2 followed by a valid record is
        // corruption (above the promise it would be a torn tail, as recovery treats it).
        super::super::checkpoint::CheckpointFile::open_or_create(
            &StdFs,
            &tmp.path().join("wal"),
            Checkpoint {
                first_live_lsn: 1,
                durable_lsn: 2,
            },
            0,
        )
        .unwrap();
        f.write_all_at(&[0x55], offs[1] + 30).unwrap();
        let r = verify(tmp.path()).unwrap();
        assert!(
            matches!(&r.finding, Some(Finding::Corrupt { segment, offset, .. })
            if *segment == seg && *offset == offs[1])
        );
        // The scan goes on past it: LSN 3 is readable, LSN 2 alone is named lost.
        assert_eq!(r.records, 2);
        assert_eq!(
            r.lost.iter().map(|l| (l.first, l.last)).collect::<Vec<_>>(),
            [(2, 2)]
        );
        // Read-only: only our two flipped bytes differ.
        let after = std::fs::read(&seg).unwrap();
        assert_eq!(before.iter().zip(&after).filter(|(a, b)| a != b).count(), 2);
        assert!(verify(&tmp.path().join("missing")).is_err());
    }

    #[test]
    fn verify_reports_undecodable_event_payload() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(WAL_SUBDIR);
        std::fs::create_dir_all(&dir).unwrap();
        // A CRC-valid record whose payload is not an event.
        let mut bytes = Vec::new();
        super::super::format::append_record(&mut bytes, 1, RecordKind::Event, |o| {
            o.extend_from_slice(b"junk");
            Ok::<(), ()>(())
        })
        .unwrap();
        bytes.resize(4096, 0);
        std::fs::write(dir.join("00000000000000000001.seg"), &bytes).unwrap();
        let r = verify(tmp.path()).unwrap();
        assert!(
            matches!(r.finding, Some(Finding::Corrupt { offset: 0, .. })),
            "{r:?}"
        );
        assert_eq!(r.records, 0);
        let mut out = Vec::new();
        assert!(matches!(
            inspect_json(tmp.path(), &mut out),
            Err(WalError::Corrupt { offset: 0, .. })
        ));
    }

    #[test]
    fn inspect_writes_one_json_object_per_event() {
        let (tmp, _) = setup(3);
        let mut out = Vec::new();
        inspect_json(tmp.path(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        for (i, v) in lines.iter().enumerate() {
            let ev = sample_event(i as u64, 64 * i);
            assert_eq!(v["event_id"], ev.event_id.as_str());
            assert_eq!(v["lsn"], i as u64 + 1);
            assert_eq!(v["trigger_id"], "github-push");
            assert_eq!(v["source"], "github");
            assert_eq!(v["received_at"], ev.received_at_ms);
            assert_eq!(v["body_len"], ev.body.len());
            assert_eq!(v["body_sha256"], hex(&Sha256::digest(&ev.body)));
        }
        assert_eq!(
            lines[0]["body_sha256"],
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
