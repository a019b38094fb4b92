//! WAL append throughput: 1 KiB records (header included), batches of 1, 16 and 128 with one
//! sync per batch (`Durability::Fsync`), `pwrite`+`fdatasync` vs mmap+`msync` side by side.
//!
//! Run: `cargo bench --bench wal_append`. Segments (64 MiB, fallocate'd) live in a tempdir under
//! `target/tmp` (`CARGO_TARGET_TMPDIR`), so the filesystem is the one holding `target/`; note it
//! with the results (`df -T target`). Throughput is reported in records/s (elements).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sluice::sync::clock::{Clock, MonotonicClock};
use sluice::wal::format::{event_payload_len, RECORD_HEADER_BYTES};
use sluice::wal::{open, Durability, EventRecord, Record, WalConfig, WritePath};
use std::time::Duration;

const RECORD_BYTES: usize = 1024;

/// An event whose record is exactly `RECORD_BYTES` long.
fn one_kib_event() -> EventRecord {
    let mut ev = EventRecord {
        event_id: "01HZX3K9V7Q2W8E5R4T6Y1U0IO".to_owned(),
        trigger_id: "github-push".to_owned(),
        source: "github".to_owned(),
        received_at_ms: 1_700_000_000_000,
        headers: vec![("content-type".to_owned(), b"application/json".to_vec())],
        body: Vec::new(),
        replay_of: None,
    };
    let overhead = RECORD_HEADER_BYTES + event_payload_len(&ev).expect("within bounds");
    ev.body = vec![b'x'; RECORD_BYTES - overhead];
    ev
}

fn append(c: &mut Criterion) {
    let base = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&base).expect("target tmp dir");
    let clock = MonotonicClock::new();
    let ev = one_kib_event();
    let mut g = c.benchmark_group("wal_append_1KiB_fsync_per_batch");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for batch in [1usize, 16, 128] {
        g.throughput(Throughput::Elements(batch as u64));
        let records = vec![Record::Event(ev.clone()); batch];
        for path in [WritePath::Pwrite, WritePath::Mmap] {
            let tmp = tempfile::tempdir_in(&base).expect("tempdir");
            let cfg = WalConfig {
                durability: Durability::Fsync,
                write_path: path,
                ..WalConfig::new(tmp.path().join("wal"))
            };
            let (mut wal, _) = open(&cfg).expect("open wal");
            let id = BenchmarkId::new(format!("{path:?}"), batch);
            g.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    let t0 = clock.now_nanos();
                    for _ in 0..iters {
                        wal.append(&records).expect("append");
                    }
                    Duration::from_nanos(clock.now_nanos() - t0)
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, append);
criterion_main!(benches);
