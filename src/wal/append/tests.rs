//! Tests of the append side (`append/mod.rs`): sync timing, the `os` unsynced gauge, zeros ahead,
//! `os` durability.

use super::*;
use crate::sync::clock::ManualClock;
use crate::wal::format::tests::sample_event;
use crate::wal::open;
use crate::wal::recover::tests::test_cfg;
use std::time::Duration;

/// A file whose every sync "takes" 3 ms of the manual clock.
struct SlowSync {
    inner: Box<dyn SegmentFile>,
    clock: std::sync::Arc<ManualClock>,
}

impl SegmentFile for SlowSync {
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.inner.write_at(offset, buf)
    }
    fn sync(&mut self, offset: u64, len: u64) -> io::Result<()> {
        self.clock.advance(Duration::from_millis(3));
        self.inner.sync(offset, len)
    }
    fn allocate(&mut self, len: u64) -> io::Result<()> {
        self.inner.allocate(len)
    }
}

#[test]
fn sync_latency_is_timed_with_the_injected_clock_once_per_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = test_cfg(tmp.path(), WritePath::Pwrite);
    cfg.durability = Durability::Fsync;
    let clock = std::sync::Arc::new(ManualClock::new(0));
    let (wal, _) = open(&cfg).unwrap();
    let mut wal = wal.with_clock(clock.clone());
    let c = clock.clone();
    wal.set_file_wrapper(Box::new(move |inner| {
        Box::new(SlowSync {
            inner,
            clock: c.clone(),
        })
    }));
    let shared = Arc::new(WalShared::new());
    wal.shared = Some(shared.clone());
    let evs: Vec<_> = (0..50).map(|i| sample_event(i, 100)).collect();
    assert_eq!(wal.append_events(&evs).unwrap(), 50);
    assert_eq!(wal.append_events(&evs[..7]).unwrap(), 57);
    assert_eq!(shared.sync_seconds.count(), 2, "one sync per group commit");
    assert_eq!(shared.sync_seconds.sum_nanos(), 6_000_000);
    let mut text = String::new();
    shared.render_prometheus(&mut text);
    assert!(
        text.contains("sluice_wal_sync_seconds_bucket{le=\"0.0025\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("sluice_wal_sync_seconds_bucket{le=\"0.005\"} 2\n"),
        "{text}"
    );
}

#[test]
fn the_os_unsynced_gauge_follows_commits_syncs_and_rolls() {
    let tmp = tempfile::tempdir().unwrap();
    for durability in [Durability::Os, Durability::Fsync] {
        let mut cfg = test_cfg(
            &tmp.path().join(format!("{durability:?}")),
            WritePath::Pwrite,
        );
        cfg.durability = durability;
        let (mut wal, _) = open(&cfg).unwrap();
        let shared = Arc::new(WalShared::new());
        shared.os_unsynced_bytes.store(99, Ordering::Relaxed);
        wal.attach_shared(shared.clone());
        let gauge = || shared.os_unsynced_bytes.load(Ordering::Relaxed);
        assert_eq!(gauge(), 0, "{durability:?}: published on attach");
        wal.append_events(&[sample_event(1, 100)]).unwrap();
        let one = gauge();
        wal.append_events(&[sample_event(2, 100), sample_event(3, 100)])
            .unwrap();
        assert_eq!(gauge(), wal.os_unsynced_bytes() as u64, "{durability:?}");
        if durability == Durability::Fsync {
            assert_eq!(gauge(), 0, "nothing is kept in fsync mode");
            continue;
        }
        assert!(one > 100, "one committed record's bytes, got {one}");
        assert!(gauge() > 2 * one, "three records' bytes, got {}", gauge());
        wal.sync().unwrap();
        assert_eq!(gauge(), 0, "a sync covering them forgets them");
        wal.append_events(&[sample_event(4, 100)]).unwrap();
        assert_eq!(gauge(), one);
        wal.roll().unwrap();
        assert_eq!(gauge(), 0, "a roll syncs the old segment");
    }
}

#[test]
fn zeros_are_written_ahead_of_the_records_once_per_zero_ahead_on_the_pwrite_path_only() {
    for path in [WritePath::Pwrite, WritePath::Mmap] {
        let tmp = tempfile::tempdir().unwrap();
        let mut cfg = test_cfg(tmp.path(), path);
        cfg.durability = Durability::Fsync;
        let (mut wal, _) = open(&cfg).unwrap();
        assert_eq!(wal.active.zeroed_end, 0);
        wal.append_events(&[sample_event(1, 100)]).unwrap();
        let end = wal.active.end;
        let want = match path {
            WritePath::Pwrite => (end + ZERO_AHEAD).min(wal.active.capacity),
            WritePath::Mmap => 0,
        };
        assert_eq!(wal.active.zeroed_end, want, "{path:?}");
        // The next batches land below it: no more zeros until they pass it.
        wal.append_events(&[sample_event(2, 100)]).unwrap();
        assert_eq!(wal.active.zeroed_end, want, "{path:?}");
        let bytes = std::fs::read(wal.active_segment()).unwrap();
        let tail = &bytes[wal.active.end as usize..want.max(wal.active.end) as usize];
        assert!(
            tail.iter().all(|&b| b == 0),
            "the zero tail recovery expects"
        );
    }
}

#[test]
fn os_durability_does_not_sync_per_batch_and_oversize_events_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = test_cfg(tmp.path(), WritePath::Mmap);
    let (mut wal, _) = open(&cfg).unwrap();
    let shared = Arc::new(WalShared::new());
    wal.shared = Some(shared.clone());
    wal.append_events(&[sample_event(1, 10)]).unwrap();
    assert_eq!(shared.sync_seconds.count(), 0);
    let mut big = sample_event(2, 10);
    big.source = "s".repeat(1000);
    assert!(matches!(
        wal.append_events(&[sample_event(3, 1), big]),
        Err(WalError::Encode(_))
    ));
    assert_eq!(wal.next_lsn(), 2, "a refused batch leaves nothing behind");
    wal.sync().unwrap();
    assert_eq!(shared.sync_seconds.count(), 1);
}

/// A checkpoint file whose writes fail while `fail` is set (a full disk, an I/O error).
#[derive(Debug)]
struct Failing {
    inner: Box<dyn crate::storage::StorageFile>,
    fail: Arc<std::sync::atomic::AtomicBool>,
}

impl crate::storage::StorageFile for Failing {
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        if self.fail.load(Ordering::Relaxed) {
            return Err(io::Error::from_raw_os_error(28)); // ENOSPC
        }
        self.inner.write_at(offset, buf)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read_at(offset, buf)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn allocate(&mut self, len: u64) -> io::Result<()> {
        self.inner.allocate(len)
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
}

/// A checkpoint that cannot be written is counted and retried once a second, reported stale
/// (`/readyz`) after `STALE_AFTER`, and cleared by the first write that succeeds.
#[test]
fn failing_checkpoint_writes_are_counted_retried_and_turn_stale_after_the_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = test_cfg(tmp.path(), WritePath::Pwrite);
    cfg.durability = Durability::Fsync;
    let clock = std::sync::Arc::new(ManualClock::new(0));
    let (wal, _) = open(&cfg).unwrap();
    let mut wal = wal.with_clock(clock.clone());
    let shared = Arc::new(WalShared::new());
    wal.attach_shared(shared.clone());
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let f = fail.clone();
    wal.checkpoint
        .as_mut()
        .unwrap()
        .wrap_file(move |inner| Box::new(Failing { inner, fail: f }));
    wal.append_events(&[sample_event(1, 10)]).unwrap();
    let failures = || shared.checkpoint_failures_total.load(Ordering::Relaxed);
    let stale = || shared.checkpoint_stale.load(Ordering::Relaxed);
    let second = |w: &mut Wal| {
        clock.advance(Duration::from_secs(1));
        w.tick(w.now_nanos());
    };
    for n in 1..=10u64 {
        second(&mut wal);
        assert_eq!(failures(), n, "one attempt a second");
        assert!(!stale(), "not stale after the run's {n}th second");
    }
    assert_eq!(wal.checkpoint().unwrap().durable_lsn, 0, "nothing written");
    second(&mut wal);
    assert!(stale(), "failing for 10 s");
    fail.store(false, Ordering::Relaxed);
    second(&mut wal);
    assert!(!stale());
    assert_eq!(failures(), 11);
    assert_eq!(
        wal.checkpoint().unwrap().durable_lsn,
        1,
        "retried and written"
    );
    second(&mut wal);
    assert_eq!(failures(), 11, "nothing lags: no more writes");
}
