//! DLQ write rate: 1 KiB entries stored durably, as the commit helper stores a turn's dead
//! letters (`DlqStore::put_batch`: one batch file, one write + `fdatasync` + rename + directory
//! `fsync` per commit), against the one-file-per-entry protocol it replaced (per entry: write
//! `ID.tmp`, `fsync`, rename, directory `fsync`), side by side in one run.
//!
//! Run: `cargo bench --bench dlq_write`. Files live in a tempdir under `target/tmp`
//! (`CARGO_TARGET_TMPDIR`): the filesystem is the one holding `target/` (`df -T target`).
//! Throughput is in entries/s (elements). The store is emptied (untimed) whenever it holds
//! 64 MiB, so the disk use stays bounded.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sluice::dispatch::dlq::{encode_entry, DlqEntry, DlqReason, DlqStore};
use sluice::sync::clock::{Clock, MonotonicClock};
use sluice::wal::EventRecord;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// A dead letter with a 1 KiB body and the given id number.
fn entry(n: u128) -> DlqEntry {
    let id = sluice::ingest::event_id::encode(0x0190_0000_0000_0000_0000_0000_0000_0000 + n);
    DlqEntry {
        event: EventRecord {
            event_id: id.clone(),
            trigger_id: "github-push".to_owned(),
            source: "github".to_owned(),
            received_at_ms: 1_700_000_000_000,
            headers: vec![("content-type".to_owned(), b"application/json".to_vec())],
            body: vec![b'x'; 1024],
            replay_of: None,
            body_json: Default::default(),
        },
        id,
        event_lsn: 1,
        destination: "http:http://127.0.0.1:9/hook".to_owned(),
        reason: DlqReason::CircuitOpen,
        attempts: 1,
        last_error: "circuit open".to_owned(),
        dead_lettered_at_ms: 1_700_000_000_100,
    }
}

/// The replaced protocol, byte for byte what `DlqStore::put` did before batch files.
fn put_one_file(dir: &Path, e: &DlqEntry) {
    let bytes = encode_entry(e).expect("encode");
    let tmp = dir.join(format!("{}.tmp", e.id));
    let mut f = std::fs::File::create(&tmp).expect("create");
    f.write_all(&bytes).expect("write");
    f.sync_all().expect("fsync");
    std::fs::rename(&tmp, dir.join(&e.id)).expect("rename");
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .expect("dir fsync");
}

fn fresh(dir: &Path) -> DlqStore {
    let _ = std::fs::remove_dir_all(dir);
    DlqStore::open(dir, usize::MAX).expect("open DLQ")
}

fn write(c: &mut Criterion) {
    let base = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&base).expect("target tmp dir");
    let clock = MonotonicClock::new();
    let mut g = c.benchmark_group("dlq_write_1KiB");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let mut next: u128 = 0;
    for batch in [1usize, 16, 128, 1024] {
        g.throughput(Throughput::Elements(batch as u64));
        let tmp = tempfile::tempdir_in(&base).expect("tempdir");
        let dir = tmp.path().join("dlq");
        let mut store = fresh(&dir);
        g.bench_function(BenchmarkId::new("batch_file", batch), |b| {
            b.iter_custom(|iters| {
                let mut spent = 0;
                for _ in 0..iters {
                    let entries: Vec<DlqEntry> =
                        (0..batch as u128).map(|i| entry(next + i)).collect();
                    next += batch as u128;
                    let items: Vec<((), &DlqEntry)> = entries.iter().map(|e| ((), e)).collect();
                    let t0 = clock.now_nanos();
                    let results = store.put_batch(items);
                    spent += clock.now_nanos() - t0;
                    assert!(results.iter().all(|(_, r)| r.is_ok()), "put failed");
                    if store.bytes() > 64 << 20 {
                        store = fresh(&dir);
                    }
                }
                Duration::from_nanos(spent)
            })
        });
    }
    // The replaced protocol: the per-entry cost does not depend on the batch.
    g.throughput(Throughput::Elements(16));
    let tmp = tempfile::tempdir_in(&base).expect("tempdir");
    let dir = tmp.path().join("dlq");
    std::fs::create_dir_all(&dir).expect("dir");
    g.bench_function(BenchmarkId::new("one_file_per_entry", 16), |b| {
        b.iter_custom(|iters| {
            let mut spent = 0;
            for _ in 0..iters {
                let entries: Vec<DlqEntry> = (0..16).map(|i| entry(next + i)).collect();
                next += 16;
                let t0 = clock.now_nanos();
                for e in &entries {
                    put_one_file(&dir, e);
                }
                spent += clock.now_nanos() - t0;
            }
            Duration::from_nanos(spent)
        })
    });
    g.finish();
}

criterion_group!(benches, write);
criterion_main!(benches);
