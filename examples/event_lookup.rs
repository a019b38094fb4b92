//! Cost of `sluice events show` (`wal::events::show`) over a retained log of a given size.
//!
//! Writes one log (`DATA/wal/core-0`, 64 MiB segments, `durability = os`) of `EVENTS` events of
//! `BODY` bytes, each made done by a `Done` entry written 1,000 events later (so an outcome
//! lies in a later record, sometimes a later segment, as on a live node), with an `Attempts`
//! record before each `Done` record; then looks up `LOOKUPS` ids spread over the log and prints
//! the p50, p99 and max of the lookups' wall time: offline (`show`, a forward scan to the
//! outcome), then as a running node answers them (`show_indexed`, through the outcome index that
//! recovery builds: its build time and bytes per event are printed; segment maps kept for reuse
//! as on the node's reader thread), and the same for lists of the newest 5 and 100 events
//! (`list`, `list_indexed`) and a page 1,000 events back.
//!
//! Run: `cargo run --release --example event_lookup -- DIR [EVENTS] [BODY] [LOOKUPS]`
//! (DIR is left behind for `sluice events` to be tried on). If DIR already holds a log this
//! example wrote, nothing is written: its event ids are read back from the log (one pass, not
//! timed, kept in `DIR/ids` for the next run) and only the lookups run, so one large log can be measured again on a later binary
//! or a quieter machine.

use std::path::PathBuf;
use std::time::Instant;

use sluice::wal::event_id::EventIdGen;
use sluice::wal::{
    open, AttemptEntry, AttemptOutcome, AttemptsRecord, DoneEntry, DoneRecord, DoneStatus,
    Durability, EventRecord, Record, WalConfig,
};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(
        args.get(1)
            .expect("usage: event_lookup DIR [EVENTS] [BODY] [LOOKUPS]"),
    );
    let arg = |i: usize, d: u64| args.get(i).map_or(d, |a| a.parse().expect("a number"));
    let (events, body, lookups) = (arg(2, 1_000_000), arg(3, 1024) as usize, arg(4, 200));
    let ids = if dir.exists() {
        read_ids(&dir)
    } else {
        write_log(&dir, events, body)
    };
    look_up(&dir, &ids, lookups);
    indexed(&dir, &ids, lookups);
}

/// p50, p99 and max of `times`.
fn report(what: &str, mut times: Vec<std::time::Duration>) {
    times.sort();
    let pct = |p: f64| times[((times.len() - 1) as f64 * p) as usize];
    println!(
        "{what} ({}): p50 {:?} p99 {:?} max {:?}",
        times.len(),
        pct(0.5),
        pct(0.99),
        times.last().unwrap()
    );
}

/// The online paths: the outcome index built by recovery, then lookups and lists through it,
/// beside the offline lists.
fn indexed(dir: &std::path::Path, ids: &[String], lookups: u64) {
    use sluice::wal::read::events::{list, list_indexed, show_indexed, ListFilter};
    // As the node's reader thread does (`sched::readers`): segment maps kept for reuse.
    sluice::storage::map_cache::keep_maps_on_this_thread();
    let log = dir.join("wal").join("core-0");
    let t0 = Instant::now();
    let recovered = sluice::wal::recover_dispatch(&log).expect("recover");
    let built = t0.elapsed();
    let index = sluice::wal::outcomes::SharedIndex::default();
    index.seed(recovered.outcomes);
    let (records, bytes) = index.size().expect("seeded");
    println!(
        "outcome index: {records} records, {bytes} bytes ({:.1} per event), built by recovery \
         in {built:?} (the whole recovery pass)",
        bytes as f64 / ids.len() as f64
    );
    let index_of = |_: &sluice::wal::layout::LogDir| Some(&index);
    let events = ids.len() as u64;
    let times = (0..lookups).map(|k| {
        let id = &ids[((k * 7919 * 104_729) % events) as usize];
        let t = Instant::now();
        let r = show_indexed(dir, id, 20_000, &index_of).expect("found");
        let took = t.elapsed();
        // The same answer as the offline scan (the last 1,000 events are still pending).
        let offline = sluice::wal::read::events::show(dir, id).expect("found");
        assert_eq!(
            (r.fate, &r.attempts),
            (offline.fate, &offline.attempts),
            "{id}"
        );
        took
    });
    report("indexed lookups", times.collect());
    let runs = lookups.clamp(5, 50);
    for (what, limit, back) in [
        ("newest 5", 5, 0),
        ("newest 100", 100, 0),
        ("5, 1,000 back", 5, 1_000),
    ] {
        let filter = ListFilter {
            limit,
            before: (back > 0).then(|| ids[ids.len().saturating_sub(back)].clone()),
            ..ListFilter::default()
        };
        let time = |indexed: bool| {
            let t = Instant::now();
            let got = match indexed {
                true => list_indexed(dir, &filter, &index_of),
                false => list(dir, &filter),
            };
            assert_eq!(got.expect("list").len(), limit);
            t.elapsed()
        };
        report(
            &format!("indexed list {what}"),
            (0..runs).map(|_| time(true)).collect(),
        );
        report(
            &format!("offline list {what}"),
            (0..runs.min(5)).map(|_| time(false)).collect(),
        );
    }
}

/// The ids of the events in `dir`'s log, in log order: from `DIR/ids` (one per line) if an
/// earlier run left it, else read from the log and kept there, so that a run on a cold page
/// cache (the segments evicted, e.g. with `POSIX_FADV_DONTNEED`) does not warm it first.
fn read_ids(dir: &std::path::Path) -> Vec<String> {
    let kept = dir.join("ids");
    if let Ok(text) = std::fs::read_to_string(&kept) {
        return text.lines().map(str::to_owned).collect();
    }
    let t0 = Instant::now();
    let mut reader = sluice::wal::WalReader::open(&dir.join("wal").join("core-0")).expect("open");
    let mut ids = Vec::new();
    while let Some(next) = reader.next_event() {
        ids.push(next.expect("a readable log").1.event_id);
    }
    eprintln!(
        "read {} event ids back in {:.1} s",
        ids.len(),
        t0.elapsed().as_secs_f64()
    );
    std::fs::write(&kept, ids.join("\n")).expect("write DIR/ids");
    ids
}

/// Writes the log described in the module header; returns its event ids in order.
fn write_log(dir: &std::path::Path, events: u64, body: usize) -> Vec<String> {
    let cfg = WalConfig {
        durability: Durability::Os,
        ..WalConfig::new(dir.join("wal").join("core-0"))
    };
    let (mut wal, _) = open(&cfg).expect("open");
    let mut gen = EventIdGen::new(0);
    let mut ids = Vec::with_capacity(events as usize);
    let t0 = Instant::now();
    // `next` is the LSN the next record gets; `open_events` the event LSNs without an outcome.
    let (mut next, mut batch) = (1u64, Vec::new());
    let mut open_events = std::collections::VecDeque::new();
    for i in 0..events {
        let id = gen.next(1_800_000_000_000 + i / 10);
        ids.push(id.clone());
        batch.push(Record::Event(EventRecord {
            event_id: id,
            trigger_id: "t".into(),
            source: "s".into(),
            received_at_ms: 1_800_000_000_000 + i / 10,
            headers: Vec::new(),
            body: vec![b'x'; body],
            replay_of: None,
            body_json: Default::default(),
        }));
        open_events.push_back(next);
        next += 1;
        if batch.len() < 100 {
            continue;
        }
        // The outcomes of the events 1,000 back: an `Attempts` record, then a `Done` record.
        let n = open_events.len().saturating_sub(1000);
        let lsns: Vec<u64> = open_events.drain(..n).collect();
        if !lsns.is_empty() {
            let attempts = lsns.iter().map(|&l| AttemptEntry {
                event_lsn: l,
                attempt: 1,
                at_ms: 1_800_000_000_000,
                destination: 0,
                outcome: AttemptOutcome::Status(200),
                latency_us: 900,
                retry_after_ms: None,
                response_prefix: Vec::new(),
            });
            batch.push(Record::Attempts(AttemptsRecord {
                entries: attempts.collect(),
            }));
            let done = lsns.iter().map(|&l| DoneEntry {
                event_lsn: l,
                status: DoneStatus::Delivered,
                attempts: 1,
            });
            batch.push(Record::Done(DoneRecord {
                entries: done.collect(),
            }));
            next += 2;
        }
        wal.append(&batch).expect("append");
        batch.clear();
    }
    if !batch.is_empty() {
        wal.append(&batch).expect("append");
    }
    wal.sync().expect("sync");
    drop(wal);
    let bytes: u64 = std::fs::read_dir(&cfg.dir)
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    eprintln!(
        "wrote {events} events, {:.2} GiB of segments, in {:.1} s",
        bytes as f64 / (1u64 << 30) as f64,
        t0.elapsed().as_secs_f64()
    );
    ids
}

/// Times `lookups` lookups of ids spread over `ids`; prints p50, p99 and max.
fn look_up(dir: &std::path::Path, ids: &[String], lookups: u64) {
    let events = ids.len() as u64;
    let mut times = Vec::with_capacity(lookups as usize);
    let mut states = std::collections::BTreeMap::<&str, u64>::new();
    for k in 0..lookups {
        let i = (k * 7919 * 104_729) % events;
        let t = Instant::now();
        let r = sluice::wal::read::events::show(dir, &ids[i as usize]).expect("found");
        times.push(t.elapsed());
        *states.entry(r.fate.as_str()).or_default() += 1;
    }
    times.sort();
    let pct = |p: f64| times[((times.len() - 1) as f64 * p) as usize];
    println!(
        "lookups {lookups}: p50 {:?} p99 {:?} max {:?}; fates {states:?}",
        pct(0.5),
        pct(0.99),
        times.last().unwrap()
    );
}
