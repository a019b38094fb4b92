//! Unit tests of recovery (`recovery.rs`); `test_cfg` and `read_events` are shared with other
//! WAL tests.
use crate::wal::segment::list_segments;
use crate::wal::Durability;

use super::*;
use crate::wal::format::tests::sample_event;
use crate::wal::format::{EventRecord, RecordKind};
use crate::wal::{WalReader, WritePath, MAX_BODY_BYTES};
use std::os::unix::fs::FileExt;

/// Smallest legal segments, `Os` durability (no sync per batch) to keep tests quick.
pub(crate) fn test_cfg(dir: &Path, write_path: WritePath) -> WalConfig {
    WalConfig {
        segment_bytes: crate::wal::min_segment_bytes_for(crate::wal::MAX_BODY_BYTES),
        durability: Durability::Os,
        write_path,
        ..WalConfig::new(dir.join("wal"))
    }
}

/// The `(first, last)` of each range, for comparing lost ranges in tests.
pub(crate) fn spans(ranges: &[LostRange]) -> Vec<(Lsn, Lsn)> {
    ranges.iter().map(|r| (r.first, r.last)).collect()
}

pub(crate) fn read_events(dir: &Path) -> Vec<(Lsn, EventRecord)> {
    WalReader::open(dir)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            assert_eq!(r.kind, RecordKind::Event);
            (r.lsn, crate::wal::decode_event(&r.payload).unwrap())
        })
        .collect()
}

fn offsets(dir: &Path) -> Vec<u64> {
    WalReader::open(dir)
        .unwrap()
        .map(|r| r.unwrap().offset)
        .collect()
}

fn events(range: std::ops::Range<u64>) -> Vec<EventRecord> {
    range
        .map(|i| sample_event(i, 200 + (i as usize * 37) % 900))
        .collect()
}

fn corrupt_at(cfg: &WalConfig) -> (PathBuf, u64) {
    match open(cfg) {
        Err(WalError::Corrupt {
            segment, offset, ..
        }) => (segment, offset),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn append_reopen_gives_same_events_and_lsns_continue() {
    for path in [WritePath::Pwrite, WritePath::Mmap] {
        let tmp = tempfile::tempdir().unwrap();
        let mut cfg = test_cfg(tmp.path(), path);
        cfg.durability = Durability::Fsync;
        let (mut wal, report) = open(&cfg).unwrap();
        assert_eq!(
            (report.records, report.last_lsn, report.truncated_tail),
            (0, 0, None)
        );
        let first = events(0..10);
        assert_eq!(wal.append_events(&first).unwrap(), 10);
        drop(wal);
        let (mut wal, report) = open(&cfg).unwrap();
        assert_eq!(
            (report.segments, report.records, report.last_lsn),
            (1, 10, 10)
        );
        let more = events(10..15);
        assert_eq!(wal.append_events(&more).unwrap(), 15);
        drop(wal);
        let got = read_events(&cfg.dir);
        let want: Vec<_> = (1..).zip(first.into_iter().chain(more)).collect();
        assert_eq!(got, want, "{path:?}");
        assert_eq!(open(&cfg).unwrap().1.last_lsn, 15);
    }
}

#[test]
fn empty_dir_starts_at_lsn_one_and_rejects_small_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = test_cfg(tmp.path(), WritePath::Pwrite);
    let (wal, _) = open(&cfg).unwrap();
    assert_eq!(wal.next_lsn(), 1);
    assert_eq!(wal.active_segment(), segment_path(&cfg.dir, 1));
    cfg.segment_bytes = crate::wal::min_segment_bytes_for(MAX_BODY_BYTES) - 1;
    assert!(matches!(open(&cfg), Err(WalError::InvalidConfig { .. })));
}

#[test]
fn torn_tail_truncated_mid_record() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
    open(&cfg).unwrap().0.append_events(&events(0..5)).unwrap();
    let seg = segment_path(&cfg.dir, 1);
    let offs = offsets(&cfg.dir);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(offs[4] + 10)
        .unwrap();
    let (mut wal, report) = open(&cfg).unwrap();
    assert_eq!(report.truncated_tail, Some((seg.clone(), offs[4])));
    assert_eq!((report.records, report.last_lsn), (4, 4));
    assert_eq!(wal.append_events(&events(100..101)).unwrap(), 5);
    drop(wal);
    let got = read_events(&cfg.dir);
    assert_eq!(got[..4], (1..).zip(events(0..4)).collect::<Vec<_>>()[..]);
    assert_eq!(got[4], (5, events(100..101).remove(0)));
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), cfg.segment_bytes);
}

#[test]
fn torn_tail_garbage_or_bad_crc_after_last_record() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = test_cfg(tmp.path(), WritePath::Mmap);
    open(&cfg).unwrap().0.append_events(&events(0..3)).unwrap();
    let seg = segment_path(&cfg.dir, 1);
    let offs = offsets(&cfg.dir);
    let end = open(&cfg).unwrap().0.active.end;
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.write_all_at(&[0xA5; 100], end + 4000).unwrap();
    let (_, report) = open(&cfg).unwrap();
    assert_eq!(report.truncated_tail, Some((seg.clone(), end)));
    assert_eq!(report.records, 3);
    let bytes = std::fs::read(&seg).unwrap();
    assert!(
        bytes[end as usize..].iter().all(|&b| b == 0),
        "tail not zeroed"
    );
    // Now a CRC failure in the last record. The opens above synced records 1..=3 and the
    // checkpoint promises them: corruption at its offset, not a torn tail.
    f.write_all_at(&[0xFF], offs[2] + 20).unwrap();
    assert_eq!(corrupt_at(&cfg), (seg.clone(), offs[2]));
    // Accepting the loss gives up LSN 3 exactly: a lost-range record is written over it (no
    // truncation), and the next start does not ask again.
    let accept = WalConfig {
        accept_loss: true,
        ..cfg.clone()
    };
    let (mut wal, report) = open(&accept).unwrap();
    assert_eq!(report.truncated_tail, None);
    assert_eq!(spans(&report.lost), [(3, 3)]);
    assert_eq!(
        read_events(&cfg.dir),
        (1..).zip(events(0..2)).collect::<Vec<_>>()
    );
    // The log continues above its high-water reservation (`wal::high_water`: the second open
    // above reserved STEP past LSN 3), the LSNs between skipped.
    let reserved = 3 + crate::wal::high_water::STEP;
    let skipped = report.skipped.as_ref().map(|r| (r.first, r.last));
    assert_eq!(skipped, Some((4, reserved)));
    assert_eq!(report.last_lsn, reserved);
    // Records appended after the last checkpoint (`Os` mode: committed, never synced) are
    // not promised: damage in the last of them is a torn tail, and its LSN continues.
    assert_eq!(wal.append_events(&events(10..12)).unwrap(), reserved + 2);
    drop(wal);
    let offs = offsets(&cfg.dir);
    assert_eq!(offs.len(), 4, "LSNs 1, 2 and the two after the skip");
    // Those two start a segment of their own, named by the first.
    let seg = segment_path(&cfg.dir, reserved + 1);
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.write_all_at(&[0xFF], offs[3] + 20).unwrap();
    let (_, report) = open(&cfg).unwrap();
    assert_eq!(report.truncated_tail, Some((seg, offs[3])));
    assert!(report.lost.is_empty() && report.skipped.is_none());
    assert_eq!(report.last_lsn, reserved + 1);
    let lsns: Vec<Lsn> = read_events(&cfg.dir).iter().map(|e| e.0).collect();
    assert_eq!(lsns, [1, 2, reserved + 1]);
    assert!(crate::wal::tools::verify_log(&cfg.dir).unwrap().is_clean());
}

#[test]
fn flipped_byte_mid_segment_is_corrupt_at_exact_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
    let (mut wal, _) = open(&cfg).unwrap();
    wal.append_events(&events(0..6)).unwrap();
    // Synced: the checkpoint promises LSNs 1..=6, so damage among them is corruption.
    wal.sync().unwrap();
    drop(wal);
    let seg = segment_path(&cfg.dir, 1);
    let offs = offsets(&cfg.dir);
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    let pristine = std::fs::read(&seg).unwrap();
    // A payload byte of record 3 (LSN 3): CRC mismatch, valid records follow.
    f.write_all_at(&[pristine[offs[2] as usize + 40] ^ 0x01], offs[2] + 40)
        .unwrap();
    assert_eq!(corrupt_at(&cfg), (seg.clone(), offs[2]));
    // The same for its length field: the boundary is lost, yet LSN 4 is found further on.
    f.write_all_at(&pristine[..], 0).unwrap();
    f.write_all_at(&[pristine[offs[2] as usize + 1] ^ 0x10], offs[2] + 1)
        .unwrap();
    assert_eq!(corrupt_at(&cfg), (seg.clone(), offs[2]));
    // Nothing was modified by the failed opens.
    let mut expect = pristine.clone();
    expect[offs[2] as usize + 1] ^= 0x10;
    assert_eq!(std::fs::read(&seg).unwrap(), expect);
    // Above the checkpoint's durable LSN nothing was ever synced: the same damage there is
    // what a power loss leaves (unsynced pages written back in any order), a torn tail.
    crate::wal::checkpoint::CheckpointFile::open_or_create(
        &StdFs,
        &cfg.dir,
        Checkpoint {
            first_live_lsn: 1,
            durable_lsn: 2,
        },
        0,
    )
    .unwrap();
    let (_, report) = open(&cfg).unwrap();
    assert_eq!(report.truncated_tail, Some((seg.clone(), offs[2])));
    assert_eq!(report.last_lsn, 2);
}

#[test]
fn a_second_writer_is_refused_until_the_first_closes() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
    let (first, _) = open(&cfg).unwrap();
    match open(&cfg) {
        Err(WalError::Locked { path }) => assert_eq!(path, cfg.dir.join(LOCK_FILE)),
        other => panic!("expected Locked, got {other:?}"),
    }
    drop(first);
    assert!(open(&cfg).is_ok());
}

#[test]
fn rollover_and_corruption_in_non_last_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = test_cfg(tmp.path(), WritePath::Mmap);
    let big: Vec<_> = (0..10)
        .map(|i| sample_event(i, MAX_BODY_BYTES / 4))
        .collect();
    let (mut wal, _) = open(&cfg).unwrap();
    assert_eq!(wal.append_events(&big).unwrap(), 10);
    drop(wal);
    let segs: Vec<Lsn> = list_segments(&cfg.dir)
        .unwrap()
        .into_iter()
        .map(|s| s.0)
        .collect();
    assert_eq!(segs, [1, 5, 9]);
    let (_, report) = open(&cfg).unwrap();
    assert_eq!(
        (report.segments, report.records, report.last_lsn),
        (3, 10, 10)
    );
    assert_eq!(read_events(&cfg.dir), (1..).zip(big).collect::<Vec<_>>());
    assert_eq!(
        WalReader::open_from(&cfg.dir, 6)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .lsn,
        6
    );
    // Damage the last record of the middle segment: nothing valid follows it there, but it
    // is not the last segment, so it is corruption.
    let seg5 = segment_path(&cfg.dir, 5);
    let last = WalReader::open_from(&cfg.dir, 8)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .offset;
    let f = std::fs::OpenOptions::new().write(true).open(&seg5).unwrap();
    f.write_all_at(&[0xEE; 3], last + 500).unwrap();
    assert_eq!(corrupt_at(&cfg), (seg5.clone(), last));
    // A deleted middle segment: its LSNs are lost (named), not an anonymous LSN gap.
    std::fs::remove_file(&seg5).unwrap();
    match open(&cfg) {
        Err(WalError::Lost { ranges, .. }) => {
            assert_eq!((ranges.len(), ranges[0].first, ranges[0].last), (1, 5, 8));
            assert!(ranges[0].why.contains("was deleted"), "{}", ranges[0]);
        }
        other => panic!("expected Lost, got {other:?}"),
    }
}

#[test]
fn scanning_mutated_segments_never_panics() {
    use crate::wal::format::tests::Rng;
    let tmp = tempfile::tempdir().unwrap();
    let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
    open(&cfg).unwrap().0.append_events(&events(0..8)).unwrap();
    let seg = std::fs::read(segment_path(&cfg.dir, 1)).unwrap();
    let end = offsets(&cfg.dir).last().unwrap() + 2000;
    let pristine = &seg[..end as usize];
    let mut rng = Rng(0xC0FF_EE00_1234_5678);
    for round in 0..500 {
        let mut bytes = pristine.to_vec();
        for _ in 0..1 + rng.next() % 3 {
            let i = (rng.next() as usize) % bytes.len();
            bytes[i] = rng.next() as u8;
        }
        let cut = if round % 2 == 0 {
            bytes.len()
        } else {
            (rng.next() as usize) % bytes.len()
        };
        let mut sc = Scanner::new(1);
        let mut n = 0;
        while let Step::Record(..) = sc.step(&bytes[..cut]) {
            n += 1;
            assert!(n <= 8);
        }
    }
}

/// Issue 40 item 5: a middle segment cut short reads as truncation naming the real file (not a
/// deleted file that never existed), at a record boundary and inside a record.
#[test]
fn a_truncated_middle_segment_is_named_as_truncated() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = test_cfg(tmp.path(), WritePath::Mmap);
    let big: Vec<_> = (0..10)
        .map(|i| sample_event(i, MAX_BODY_BYTES / 4))
        .collect();
    open(&cfg).unwrap().0.append_events(&big).unwrap();
    let seg5 = segment_path(&cfg.dir, 5);
    let at7 = WalReader::open_from(&cfg.dir, 7)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .offset;
    // At a record boundary: LSNs 7..=8 are lost, and the message names segment 5.
    let f = std::fs::OpenOptions::new().write(true).open(&seg5).unwrap();
    f.set_len(at7).unwrap();
    drop(f);
    match open(&cfg) {
        Err(WalError::Lost { ranges, .. }) => {
            assert_eq!((ranges.len(), ranges[0].first, ranges[0].last), (1, 7, 8));
            let why = &ranges[0].why;
            assert!(
                why.contains(&format!("{} was truncated", seg5.display())),
                "{why}"
            );
            assert!(
                why.contains(&format!("ends at byte {at7} after LSN 6")),
                "{why}"
            );
            assert!(!why.contains("deleted"), "{why}");
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    // Inside a record: the damage says where the file ends.
    let f = std::fs::OpenOptions::new().write(true).open(&seg5).unwrap();
    f.set_len(at7 - 100).unwrap();
    drop(f);
    let text = match open(&cfg) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a truncated middle segment opened"),
    };
    assert!(
        text.contains(&format!(
            "the file ends inside this record: truncated at byte {}",
            at7 - 100
        )),
        "{text}"
    );
    assert!(!text.contains("end-of-data marker"), "{text}");
}

/// Issue 40 item 2: a zeroed sector inside the final, synced batch reads as a power cut's tear
/// and is truncated — but what it dropped is named (exact, from the surviving marker), kept in
/// the quarantine before the zeroing, recorded for `wal verify`, and counted.
#[test]
fn a_torn_final_batch_is_named_kept_recorded_and_counted() {
    use crate::wal::recover::torn::{self, QUARANTINE_DIR};
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = test_cfg(tmp.path(), WritePath::Pwrite);
    cfg.durability = Durability::Fsync;
    let (mut wal, _) = open(&cfg).unwrap();
    wal.append_events(&events(0..4)).unwrap();
    // The final batch: LSNs 5..=7, one write with its marker.
    wal.append_events(&events(4..7)).unwrap();
    drop(wal);
    let seg = segment_path(&cfg.dir, 1);
    let offs = offsets(&cfg.dir);
    let pristine = std::fs::read(&seg).unwrap();
    let end = pristine.iter().rposition(|&b| b != 0).unwrap() + 1;
    // One aligned 512-byte sector inside LSN 6's record, zeroed.
    let sector = (offs[5] as usize).div_ceil(512) * 512;
    assert!(sector + 512 < end, "the sector lies inside the batch");
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.write_all_at(&[0u8; 512], sector as u64).unwrap();
    let damaged = std::fs::read(&seg).unwrap();
    let (wal, report) = open(&cfg).unwrap();
    // Truncated at the damaged record: LSN 5, before it, is whole and kept.
    assert_eq!(report.truncated_tail, Some((seg.clone(), offs[5])));
    assert_eq!(report.last_lsn, 5);
    let t = report.torn.clone().expect("counted");
    assert_eq!((t.first_lsn, t.last_lsn, t.exact), (6, 7, true), "{t}");
    assert_eq!(t.offset, offs[5]);
    // The zeroed sector spans LSN 6's end and LSN 7's start: neither is readable.
    assert!(t.records <= 1 && t.events <= t.records, "{t}");
    // The dropped bytes are in the quarantine as they were on disk, zeroed in the segment.
    let kept = std::fs::read(cfg.dir.join(QUARANTINE_DIR).join(&t.kept)).unwrap();
    assert_eq!(kept, damaged[offs[5] as usize..end]);
    let now = std::fs::read(&seg).unwrap();
    assert_eq!(now[..offs[5] as usize], pristine[..offs[5] as usize]);
    // Counted from the record when the writer attaches.
    let shared = Arc::new(crate::wal::WalShared::new());
    let mut wal = wal;
    wal.attach_shared(shared.clone());
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(shared.torn_tails_total.load(Relaxed), 1);
    assert_eq!(shared.torn_tail_lsns_total.load(Relaxed), 2);
    drop(wal);
    // `wal verify` afterwards: clean segments, the earlier truncation named.
    let v = crate::wal::tools::verify_log(&cfg.dir).unwrap();
    assert!(v.is_clean(), "{v}");
    assert!(
        v.to_string().contains("earlier: torn tail truncated"),
        "{v}"
    );
    assert!(v.to_string().contains("LSNs 6..=7"), "{v}");
    // A later start has nothing to truncate and keeps the count.
    let (_, report) = open(&cfg).unwrap();
    assert_eq!((report.truncated_tail, report.torn), (None, None));
    assert_eq!(torn::load(&StdFs, &cfg.dir).unwrap().len(), 1);
}
