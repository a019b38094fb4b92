//! WAL append throughput: 1 KiB records (header included), batches of 1, 16 and 128 with one
//! sync per batch (`Durability::Fsync`), `pwrite`+`fdatasync` vs mmap+`msync` side by side.
//!
//! Run: `cargo bench --bench wal_append`. Segments (64 MiB, fallocate'd) live in a tempdir under
//! `target/tmp` (`CARGO_TARGET_TMPDIR`), so the filesystem is the one holding `target/`; note it
//! with the results (`df -T target`). Throughput is reported in records/s (elements).
//!
//! `outcome_index_fold`: what the writer adds per commit since the outcome index
//! (`wal::outcomes`): folding a batch of 64 1 KiB events, then the batch of their outcomes (one
//! kind-8 record of 64 calls, one `Done` record of 64 entries), from the bytes as written;
//! throughput in events/s.
//!
//! `body_json_decide`: the batch rule for bodies (`wal::format::json`, decided once per event at
//! ingest) against what it replaced, `serde_json` into `IgnoredAny` (which checked no UTF-8),
//! on the 1 KiB body of the end-to-end runs (`benches/e2e/post1k.lua`) and a webhook-shaped
//! one (nested objects, many short strings, numbers); throughput in bytes/s.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sluice::sync::clock::{Clock, MonotonicClock};
use sluice::wal::format::marker::append_marker;
use sluice::wal::format::{
    append_record, encode_payload_into, event_payload_len, AttemptEntry, AttemptOutcome,
    AttemptsRecord, DoneEntry, DoneRecord, DoneStatus, RECORD_HEADER_BYTES,
};
use sluice::wal::outcomes::OutcomeIndex;
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
        body_json: Default::default(),
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

/// The bytes of a committed batch of `records` from LSN `first`, with its marker.
fn batch_bytes(first: u64, records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let lsn = first + i as u64;
        append_record(&mut out, lsn, r.kind(), |o| encode_payload_into(r, o)).expect("encode");
    }
    append_marker(&mut out, 0, 1, first, first + records.len() as u64, true);
    out
}

fn outcome_index_fold(c: &mut Criterion) {
    const N: u64 = 64;
    let events = vec![Record::Event(one_kib_event()); N as usize];
    let call = |event_lsn| AttemptEntry {
        event_lsn,
        attempt: 1,
        at_ms: 1_700_000_000_000,
        destination: 0,
        outcome: AttemptOutcome::Status(200),
        latency_us: 900,
        retry_after_ms: None,
        response_prefix: b"{\"ok\":true}".to_vec(),
    };
    let done = |event_lsn| DoneEntry {
        event_lsn,
        status: DoneStatus::Delivered,
        attempts: 1,
    };
    let outcomes = [
        Record::Attempts(AttemptsRecord {
            entries: (1..=N).map(call).collect(),
        }),
        Record::Done(DoneRecord {
            entries: (1..=N).map(done).collect(),
        }),
    ];
    let (events, outcomes) = (batch_bytes(1, &events), batch_bytes(N + 1, &outcomes));
    let mut g = c.benchmark_group("outcome_index_fold");
    g.throughput(Throughput::Elements(N));
    g.bench_function("64_events_then_their_outcomes", |b| {
        b.iter_batched(
            || OutcomeIndex::new(1),
            |mut ix| {
                ix.observe_batch(1, &events).expect("in order");
                ix.observe_batch(N + 1, &outcomes).expect("in order");
                ix
            },
            criterion::BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn body_json_decide(c: &mut Criterion) {
    let post1k = format!("{{\"pad\":\"{}\"}}    ", "x".repeat(1024 - 14));
    let item = r#"{"id":1234567,"sha":"6dcb09b5b57875f334f61aebed695e2e4193db5e","message":"Fix \"all\" the things","author":{"name":"Monalisa Octocat","email":"support@github.com","date":"2011-04-14T16:00:49Z"},"added":[],"removed":[],"modified":["README.md","src/main.rs"],"distinct":true,"score":-12.5e-3}"#;
    let shaped = format!(
        "{{\"ref\":\"refs/heads/main\",\"commits\":[{}]}}",
        [item; 4].join(",")
    );
    let mut g = c.benchmark_group("body_json_decide");
    for (name, body) in [
        ("post1k", post1k.as_bytes()),
        ("webhook_shaped", shaped.as_bytes()),
    ] {
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_with_input(
            BenchmarkId::new("wal_format_json", name),
            body,
            |b, body| {
                b.iter(|| sluice::wal::format::json::is_one_json_text(std::hint::black_box(body)))
            },
        );
        g.bench_with_input(
            BenchmarkId::new("serde_json_ignored_any", name),
            body,
            |b, body| {
                b.iter(|| {
                    serde_json::from_slice::<serde::de::IgnoredAny>(std::hint::black_box(body))
                        .is_ok()
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, append, outcome_index_fold, body_json_decide);
criterion_main!(benches);
