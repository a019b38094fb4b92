//! Unit tests of lost-file detection (the checkpoint against the segments), retention through
//! the writer, the once-a-second checkpoint and the probe of a failed disk.

use super::checkpoint::{self, Checkpoint, CHECKPOINT_FILE};
use super::format::tests::sample_event;
use super::high_water::STEP;
use super::manifest;
use super::segment::{list_segments, segment_path, SegmentFile};
use super::tools::verify_log;
use super::{open, Lsn, WalConfig, WalError, WalShared, WritePath, MAX_BODY_BYTES};
use crate::sync::clock::ManualClock;
use crate::wal::recover::tests::{spans, test_cfg};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Ten quarter-max events in the smallest segments: segments named 1, 5 and 9; synced, so the
/// checkpoint promises LSNs 1..=10.
fn three_segments(dir: &Path, path: WritePath) -> WalConfig {
    let cfg = test_cfg(dir, path);
    let big: Vec<_> = (0..10)
        .map(|i| sample_event(i, MAX_BODY_BYTES / 4))
        .collect();
    let (mut wal, _) = open(&cfg).unwrap();
    assert_eq!(wal.append_events(&big).unwrap(), 10);
    wal.sync().unwrap();
    assert_eq!(
        wal.checkpoint(),
        Some(Checkpoint {
            first_live_lsn: 1,
            durable_lsn: 10
        })
    );
    cfg
}

fn firsts(dir: &Path) -> Vec<Lsn> {
    list_segments(dir)
        .unwrap()
        .into_iter()
        .map(|s| s.0)
        .collect()
}

fn lost_of(cfg: &WalConfig) -> Vec<(Lsn, Lsn)> {
    match open(cfg) {
        Err(WalError::Lost { ranges, .. }) => spans(&ranges),
        other => panic!("expected Lost, got {other:?}"),
    }
}

fn accepting(cfg: &WalConfig) -> WalConfig {
    WalConfig {
        accept_loss: true,
        ..cfg.clone()
    }
}

fn truncate(path: &PathBuf, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

#[test]
fn truncated_newest_segment_is_a_lost_range_until_accepted() {
    for path in [WritePath::Pwrite, WritePath::Mmap] {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = three_segments(tmp.path(), path);
        truncate(&segment_path(&cfg.dir, 9), 0);
        assert_eq!(lost_of(&cfg), [(9, 10)], "{path:?}");
        let report = verify_log(&cfg.dir).unwrap();
        assert!(!report.is_clean());
        assert_eq!(spans(&report.lost), [(9, 10)]);
        assert!(
            report.to_string().contains("LSNs 9..=10 missing"),
            "{report}"
        );
        // The refused open changed nothing: still lost.
        assert_eq!(lost_of(&cfg), [(9, 10)]);
        let (mut wal, report) = open(&accepting(&cfg)).unwrap();
        assert_eq!((report.lost.len(), report.lost[0].len()), (1, 2));
        // The sync above moved the high-water reservation to STEP past LSN 10: the LSNs above
        // the lost range up to it are skipped, and appends continue above them.
        let reserved = 10 + STEP;
        let skipped = report.skipped.as_ref().map(|r| (r.first, r.last));
        assert_eq!(skipped, Some((11, reserved)));
        assert_eq!(report.last_lsn, reserved);
        assert_eq!(wal.lost_accepted().len(), 1);
        let shared = Arc::new(WalShared::new());
        wal.attach_shared(shared.clone());
        // One loss accepted, its LSNs counted; the skipped ones are not (never handed out,
        // perhaps).
        assert_eq!(shared.loss_accepted_total.load(Ordering::Relaxed), 1);
        assert_eq!(shared.lost_lsns_accepted.load(Ordering::Relaxed), 2);
        // (`sched::exposition::render_metrics` sums these over the logs.)
        assert_eq!(
            wal.append_events(&[sample_event(99, 10)]).unwrap(),
            reserved + 1
        );
        drop(wal);
        let (_, report) = open(&cfg).unwrap();
        assert!(report.lost.is_empty() && report.skipped.is_none());
        assert!(verify_log(&cfg.dir).unwrap().is_clean());
    }
}

#[test]
fn deleted_oldest_or_every_segment_is_a_lost_range() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = three_segments(tmp.path(), WritePath::Pwrite);
    std::fs::remove_file(segment_path(&cfg.dir, 1)).unwrap();
    assert_eq!(lost_of(&cfg), [(1, 4)]);
    let msg = open(&cfg).unwrap_err().to_string();
    assert!(
        msg.contains("LSNs 1..=4 missing") && msg.contains("--accept-wal-loss"),
        "{msg}"
    );
    // Oldest deleted and newest truncated: both ranges.
    truncate(&segment_path(&cfg.dir, 9), 0);
    assert_eq!(lost_of(&cfg), [(1, 4), (9, 10)]);
    // Every segment gone: the whole promise; accepted, LSNs continue after it.
    for (_, p) in list_segments(&cfg.dir).unwrap() {
        std::fs::remove_file(p).unwrap();
    }
    assert_eq!(lost_of(&cfg), [(1, 10)]);
    let (mut wal, report) = open(&accepting(&cfg)).unwrap();
    assert_eq!(report.lost[0].len(), 10);
    // Continued above the reservation: a new segment named after the promise holds the skip,
    // and the records after it start a segment of their own.
    assert_eq!(wal.next_lsn(), 11 + STEP);
    assert_eq!(
        wal.append_events(&[sample_event(1, 10)]).unwrap(),
        11 + STEP
    );
    drop(wal);
    assert_eq!(firsts(&cfg.dir), [11, 11 + STEP]);
    assert!(open(&cfg).is_ok());
}

#[test]
fn a_listed_log_without_its_checkpoint_is_refused_an_unlisted_one_gets_one() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = three_segments(tmp.path(), WritePath::Pwrite);
    let ckpt = cfg.dir.join(CHECKPOINT_FILE);
    // The data dir's manifest lists this log (the legacy one, segments directly in `wal/`):
    // its checkpoint deleted and its newest segment truncated is a missing checkpoint, named.
    let listed = manifest::Manifest {
        logs: vec![super::layout::LEGACY_LOG_NAME.to_owned()],
        accepted: Vec::new(),
    };
    manifest::write_in(&crate::storage::StdFs, &cfg.dir, &listed).unwrap();
    std::fs::remove_file(&ckpt).unwrap();
    truncate(&segment_path(&cfg.dir, 9), 0);
    let e = manifest::check(&cfg.dir).unwrap_err();
    let manifest::ManifestError::Missing { missing, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(missing[0].kind, manifest::MissingKind::Checkpoint);
    assert_eq!(missing[0].path, ckpt);
    // Unlisted too (the manifest deleted), the log's high-water record shows it had a
    // checkpoint: refused, naming both files, until the loss is accepted.
    std::fs::remove_file(manifest::path(&cfg.dir)).unwrap();
    let hw = crate::wal::high_water::path_of(&cfg.dir).unwrap();
    let e = open(&cfg).unwrap_err();
    assert!(matches!(e, WalError::CheckpointLost { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains(&ckpt.display().to_string()), "{msg}");
    assert!(msg.contains(&hw.display().to_string()), "{msg}");
    // `wal verify` checks against the copy too, and says the checkpoint is lost.
    let v = verify_log(&cfg.dir).unwrap();
    assert!(!v.is_clean() && v.checkpoint_lost(), "{v}");
    assert_eq!(spans(&v.lost), [(9, 10)]);
    assert!(v.to_string().contains("CHECKPOINT LOST"), "{v}");
    // The segments are checked against the record's copy of the checkpoint: the truncated
    // segment's LSNs are named and counted, and the log continues above the reservation.
    let (wal, report) = open(&accepting(&cfg)).unwrap();
    assert_eq!(spans(&report.lost), [(9, 10)]);
    assert_eq!(report.skipped.as_ref().map(|r| r.first), Some(11));
    assert_eq!(report.last_lsn, 10 + STEP);
    drop(wal);
    assert!(open(&cfg).is_ok(), "the next start does not ask again");
    // A log never listed and without a high-water record (a data dir from before both, and
    // before checkpoints): nothing to compare with, it opens as found and gets a checkpoint.
    std::fs::remove_file(&ckpt).unwrap();
    std::fs::remove_file(&hw).unwrap();
    let (wal, report) = open(&cfg).unwrap();
    assert!(report.lost.is_empty() && report.skipped.is_none());
    assert_eq!(report.last_lsn, 10 + STEP);
    drop(wal);
    assert_eq!(
        checkpoint::read(&cfg.dir).unwrap(),
        Some(Ok(Checkpoint {
            first_live_lsn: 1,
            durable_lsn: 10 + STEP
        }))
    );
    // A checkpoint with no valid slot is damage, reported, never guessed around.
    std::fs::write(&ckpt, [0xAB; 8192]).unwrap();
    assert!(matches!(open(&cfg), Err(WalError::CheckpointDamaged(_))));
    assert!(verify_log(&cfg.dir).unwrap().checkpoint_damaged.is_some());
    // Accepted: checked against the high-water record's copy (nothing missing), and a loss
    // accepted all the same: the log continues above the reservation.
    let (_, report) = open(&accepting(&cfg)).unwrap();
    assert!(report.lost.is_empty());
    assert_eq!(report.skipped.as_ref().map(|r| r.first), Some(11 + STEP));
    assert_eq!(report.last_lsn, 10 + 2 * STEP);
    assert!(open(&cfg).is_ok(), "rebuilt from the segments");
}

#[test]
fn retention_checkpoints_the_first_live_lsn_before_deleting() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = three_segments(tmp.path(), WritePath::Pwrite);
    let (mut wal, _) = open(&cfg).unwrap();
    // Asked through the shared state, as the pump does; done by `tick`.
    let shared = Arc::new(WalShared::new());
    wal.attach_shared(shared.clone());
    shared.request_retire(5);
    let clock = Arc::new(ManualClock::new(0));
    let mut wal = wal.with_clock(clock.clone());
    clock.advance(Duration::from_secs(2));
    // The count reads a slice per turn (these events are 4 MiB each): a few turns.
    wal.tick(wal.now_nanos());
    for _ in 0..64 {
        if wal.retiring.is_none() {
            break;
        }
        wal.tick(wal.now_nanos());
    }
    assert!(wal.retiring.is_none(), "the count ends");
    assert_eq!(firsts(&cfg.dir), [5, 9]);
    assert_eq!(wal.checkpoint().unwrap().first_live_lsn, 5);
    // Never the active segment, whatever is asked.
    assert_eq!(wal.retire_below(1000).unwrap(), 1);
    assert_eq!(firsts(&cfg.dir), [9]);
    assert_eq!(wal.checkpoint().unwrap().first_live_lsn, 9);
    drop(wal);
    let (_, report) = open(&cfg).unwrap();
    assert!(report.lost.is_empty());
    assert!(verify_log(&cfg.dir).unwrap().is_clean());
}

#[test]
fn the_durable_lsn_is_checkpointed_at_most_once_a_second_and_at_every_roll() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = test_cfg(tmp.path(), WritePath::Pwrite);
    cfg.durability = super::Durability::Fsync;
    let clock = Arc::new(ManualClock::new(0));
    let (wal, _) = open(&cfg).unwrap();
    let mut wal = wal.with_clock(clock.clone());
    let durable = |wal: &super::Wal| wal.checkpoint().unwrap().durable_lsn;
    clock.advance(Duration::from_secs(5));
    wal.append_events(&[sample_event(1, 100)]).unwrap();
    assert_eq!(durable(&wal), 0);
    assert!(wal.checkpoint_if_due(wal.now_nanos()).unwrap());
    assert_eq!(durable(&wal), 1);
    wal.append_events(&[sample_event(2, 100)]).unwrap();
    clock.advance(Duration::from_millis(999));
    assert!(!wal.checkpoint_if_due(wal.now_nanos()).unwrap());
    clock.advance(Duration::from_millis(1));
    assert!(wal.checkpoint_if_due(wal.now_nanos()).unwrap());
    assert_eq!(durable(&wal), 2);
    assert!(
        !wal.checkpoint_if_due(wal.now_nanos() + 10_000_000_000)
            .unwrap(),
        "nothing new: no write"
    );
    // A roll checkpoints at once (no clock movement).
    let big: Vec<_> = (0..5)
        .map(|i| sample_event(i, MAX_BODY_BYTES / 4))
        .collect();
    wal.append_events(&big).unwrap();
    assert_eq!(firsts(&cfg.dir).len(), 2);
    assert!(durable(&wal) >= 5, "{}", durable(&wal));
    assert_eq!(
        checkpoint::read(&cfg.dir).unwrap().unwrap().unwrap(),
        wal.checkpoint().unwrap()
    );
}

/// A segment file whose syncs fail while `fail` is set.
struct FailingSync {
    inner: Box<dyn SegmentFile>,
    fail: Arc<AtomicBool>,
}

impl SegmentFile for FailingSync {
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.inner.write_at(offset, buf)
    }
    fn sync(&mut self, offset: u64, len: u64) -> io::Result<()> {
        if self.fail.load(Ordering::Relaxed) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.sync(offset, len)
    }
    fn allocate(&mut self, len: u64) -> io::Result<()> {
        self.inner.allocate(len)
    }
}

#[test]
fn the_probe_restores_health_once_the_disk_syncs_again_at_most_once_a_second() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = test_cfg(tmp.path(), WritePath::Pwrite);
    cfg.durability = super::Durability::Fsync;
    let clock = Arc::new(ManualClock::new(0));
    let (wal, _) = open(&cfg).unwrap();
    let mut wal = wal.with_clock(clock.clone());
    let fail = Arc::new(AtomicBool::new(false));
    let f = fail.clone();
    wal.set_file_wrapper(Box::new(move |inner| {
        Box::new(FailingSync {
            inner,
            fail: f.clone(),
        })
    }));
    let shared = Arc::new(WalShared::new());
    wal.attach_shared(shared.clone());
    wal.append_events(&[sample_event(1, 100)]).unwrap();
    fail.store(true, Ordering::Relaxed);
    assert!(wal.append_events(&[sample_event(2, 100)]).is_err());
    shared.healthy.store(false, Ordering::Relaxed); // what the writer does on the error
    let syncs = shared.sync_seconds.count();
    clock.advance(Duration::from_secs(1));
    wal.tick(wal.now_nanos()); // probes: fails
    assert!(!shared.is_healthy());
    assert_eq!(shared.sync_seconds.count(), syncs + 1, "one probe");
    fail.store(false, Ordering::Relaxed);
    wal.tick(wal.now_nanos() + 999_999_999); // not due yet
    assert!(!shared.is_healthy());
    assert_eq!(
        shared.sync_seconds.count(),
        syncs + 1,
        "at most one probe a second"
    );
    clock.advance(Duration::from_secs(1));
    wal.tick(wal.now_nanos());
    assert!(shared.is_healthy(), "health returns without any append");
    assert_eq!(wal.next_lsn(), 2, "the probe committed no record");
    assert_eq!(wal.append_events(&[sample_event(3, 100)]).unwrap(), 2);
    drop(wal);
    let (_, report) = open(&cfg).unwrap();
    assert_eq!((report.last_lsn, report.truncated_tail), (2, None));
}

/// A segment that holds no LSN of its own (only lost-range records with an empty range), then
/// a gap to the next segment: the gap's lost-range record goes after them, where the scan of
/// that segment ended, not over its start (which left the old records after the new one, out
/// of LSN order, so the accepting open refused its own repair). Found by the `wal_recovery`
/// fuzz target.
#[test]
fn a_gap_after_a_segment_holding_no_lsn_is_accepted_past_its_records() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = three_segments(tmp.path(), WritePath::Pwrite);
    let next = firsts(&cfg.dir)[1];
    let seg = segment_path(&cfg.dir, 1);
    let len = std::fs::metadata(&seg).unwrap().len();
    let mut bytes = Vec::new();
    super::format::marker::lost_span(&mut bytes, 1, 0, 25);
    super::format::marker::lost_span(&mut bytes, 1, 0, 25);
    assert_eq!(bytes.len(), 50);
    bytes.resize(len as usize, 0);
    std::fs::write(&seg, &bytes).unwrap();
    assert_eq!(lost_of(&cfg), [(1, next - 1)]);
    let (_, report) = open(&accepting(&cfg)).unwrap();
    let lost = spans(&report.lost);
    assert_eq!(lost, [(1, next - 1)]);
    assert_eq!(
        report.last_lsn,
        10 + STEP,
        "continued above the reservation"
    );
    let kept = std::fs::read(&seg).unwrap();
    assert_eq!(
        kept[..50],
        bytes[..50],
        "the segment's own records are kept"
    );
    assert!(verify_log(&cfg.dir).unwrap().is_clean());
    let (_, again) = open(&cfg).unwrap();
    assert!(again.lost.is_empty());
    assert_eq!(again.records, 10 - (next - 1));
    assert_eq!(again.last_lsn, 10 + STEP);
}

/// The outcome index across an accepted loss: recovery marks the events that were still
/// without an outcome `Lost` (the range given up may have held it), the range itself holds no
/// event, and an outcome committed afterwards through the writer replaces the mark.
#[test]
fn an_accepted_loss_marks_the_unfinished_events_in_the_outcome_index_until_they_finish() {
    use crate::wal::format::{DoneEntry, DoneRecord, DoneStatus, Record};
    use crate::wal::outcomes::Outcome;
    let tmp = tempfile::tempdir().unwrap();
    let cfg = three_segments(tmp.path(), WritePath::Pwrite);
    // The middle segment (LSNs 5..=8) gone, accepted.
    std::fs::remove_file(segment_path(&cfg.dir, 5)).unwrap();
    let (mut wal, report) = open(&accepting(&cfg)).unwrap();
    assert_eq!(spans(&report.lost), [(5, 8)]);
    let mut recovered = crate::wal::recover_dispatch(&cfg.dir).unwrap();
    let index = std::mem::take(&mut recovered.outcomes);
    assert_eq!(index.next_lsn(), recovered.next_lsn);
    assert_eq!(index.get(1).unwrap().outcome, Outcome::Lost);
    assert_eq!(index.get(4).unwrap().outcome, Outcome::Lost);
    assert_eq!(index.get(5), None, "given up: no event");
    // After the range too: the LSNs skipped above the log's end (up to its high-water
    // reservation) may have held their outcomes.
    assert_eq!(index.get(9).unwrap().outcome, Outcome::Lost);
    let shared = Arc::new(WalShared::new());
    shared.outcomes.seed(index);
    wal.attach_shared(shared.clone());
    let done = Record::Done(DoneRecord {
        entries: vec![DoneEntry {
            event_lsn: 1,
            status: DoneStatus::Delivered,
            attempts: 1,
        }],
    });
    wal.append(&[done, Record::Event(sample_event(50, 10))])
        .unwrap();
    let delivered = Outcome::Done(DoneStatus::Delivered);
    assert_eq!(shared.outcomes.get(1).unwrap().outcome, delivered);
    assert_eq!(shared.outcomes.get(2).unwrap().outcome, Outcome::Lost);
    let new = recovered.next_lsn + 1;
    assert_eq!(shared.outcomes.get(new).unwrap().outcome, Outcome::Pending);
    // Retention's deletion drops the slots below what it keeps.
    shared.outcomes.retire_below(3);
    assert_eq!(shared.outcomes.get(2), None);
    assert_eq!(shared.outcomes.get(3).unwrap().outcome, Outcome::Lost);
}

/// A flipped byte in the commit marker that ends a rolled segment loses no LSN (the next
/// segment starts where it should): accepting it writes an empty lost range over the marker
/// and keeps every record. Found by the 1,000-cut `powerloss_synced_damage` run (the accepting
/// open gave up one LSN too many and then refused the next segment as overlapping).
#[test]
fn a_damaged_marker_ending_a_rolled_segment_gives_up_no_lsn() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = three_segments(tmp.path(), WritePath::Pwrite);
    let seg = segment_path(&cfg.dir, 1);
    let mut bytes = std::fs::read(&seg).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap();
    bytes[end - 2] ^= 0x10; // inside the segment's last record: its commit marker
    std::fs::write(&seg, &bytes).unwrap();
    assert!(matches!(open(&cfg), Err(WalError::Corrupt { .. })));
    let (_, report) = open(&accepting(&cfg)).unwrap();
    assert_eq!(
        spans(&report.lost),
        [(5, 4)],
        "an empty range: framing only"
    );
    drop(report);
    let (_, again) = open(&cfg).unwrap();
    assert!(again.lost.is_empty());
    assert_eq!(again.records, 10, "every record kept");
}

/// A damaged high-water record refuses the start naming it; accepted, it is rebuilt, the loss
/// counted (its reservation is unknown), and the next start is plain.
#[test]
fn a_damaged_high_water_record_is_refused_then_rebuilt_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = three_segments(tmp.path(), WritePath::Pwrite);
    let hw = super::high_water::path_of(&cfg.dir).unwrap();
    std::fs::write(&hw, [0xAB; 8192]).unwrap();
    let e = open(&cfg).unwrap_err();
    assert!(matches!(e, WalError::HighWaterDamaged(_)), "{e}");
    assert!(e.to_string().contains(&hw.display().to_string()), "{e}");
    assert!(e.to_string().contains("--accept-wal-loss"), "{e}");
    assert!(!verify_log(&cfg.dir).unwrap().is_clean());
    let (mut wal, report) = open(&accepting(&cfg)).unwrap();
    assert!(report.lost.is_empty() && report.skipped.is_none());
    assert_eq!(report.last_lsn, 10, "nothing to continue above");
    let shared = Arc::new(WalShared::new());
    wal.attach_shared(shared.clone());
    assert_eq!(shared.loss_accepted_total.load(Ordering::Relaxed), 1);
    assert_eq!(shared.lost_lsns_accepted.load(Ordering::Relaxed), 0);
    drop(wal);
    let (_, again) = open(&cfg).unwrap();
    assert_eq!(again.last_lsn, 10);
    assert!(verify_log(&cfg.dir).unwrap().is_clean());
}
