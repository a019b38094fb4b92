//! Lost WAL files and damaged acknowledged records are detected: after acknowledged events,
//! truncating the newest segment to 0 bytes or deleting the oldest makes `sluice wal verify`
//! exit 3 naming the missing LSN range and `serve` exit 1 naming it; `serve --accept-wal-loss`
//! starts anyway, logging and counting the loss. A flipped byte in an acknowledged record —
//! the last one, or one in the middle acknowledged a moment before a SIGKILL — is corruption
//! (segment, offset and LSN range named), not a torn tail; `--accept-wal-loss` gives up exactly
//! that record and delivers every other event. A deleted middle segment is `LOST` with its
//! range; `wal inspect` lists what is readable; `--accept-wal-loss` delivers the rest.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::downstream::{Behavior, Downstream};
use crate::support::*;

/// 1 MiB segments; ~16 KiB bodies fill one in ~62 events.
const SMALL_SEGMENTS: &str = "[server]\nmax_body_bytes = 65536\n[wal]\nsegment_bytes = 1048576\n";

fn big_buckets(o: Opts) -> Opts {
    o.env(ENV_GLOBAL_CAPACITY, "1000000")
        .env(ENV_PER_SOURCE_CAPACITY, "1000000")
        .env(ENV_REFILL_PER_SEC, "1000000")
}

/// A server whose WAL holds at least three segments of acknowledged events, stopped cleanly.
fn three_segments() -> Server {
    let mut server = Server::start(big_buckets(Opts::config(SMALL_SEGMENTS).workers(1)));
    let mut c = server.client();
    let body = "x".repeat(16 << 10);
    let mut n = 0;
    while segments(&server.wal_dir()).len() < 3 {
        n += 1;
        assert!(n < 400, "no third segment after {n} events");
        accepted(&c.post("/webhooks/loss", format!("{n}-{body}").as_bytes(), &[]));
    }
    // A few more, so the newest segment holds acknowledged events too.
    for i in 0..3 {
        accepted(&c.post("/webhooks/loss", format!("tail-{i}").as_bytes(), &[]));
    }
    server.stop();
    assert_wal_clean(&server.data_dir());
    server
}

fn truncate(path: &Path, len: u64) {
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(len).unwrap();
    f.sync_all().unwrap();
}

/// `wal verify` exits 3 and names a missing range; returns its text.
fn verify_names_missing_range(data_dir: &Path) -> String {
    let v = wal_verify(data_dir);
    assert_eq!(v.status.code(), Some(3), "{}", v.all());
    let text = v.all();
    assert!(text.contains("LOST: LSNs "), "{text}");
    assert!(text.contains("missing"), "{text}");
    text
}

/// A restart fails with exit 1 and a message naming the missing range.
fn serve_refuses(server: &mut Server, range: &str) {
    match server.try_restart() {
        Ok(()) => panic!("serve started on a WAL with lost files"),
        Err(f) => {
            assert_eq!(f.status.and_then(|s| s.code()), Some(1), "{}", f.stderr);
            assert!(
                f.stderr.contains(range) && f.stderr.contains("--accept-wal-loss"),
                "{}",
                f.stderr
            );
        }
    }
}

/// The first LSN of a segment, from its name.
fn first_lsn(seg: &Path) -> u64 {
    file_name(seg).trim_end_matches(".seg").parse().unwrap()
}

#[test]
fn truncated_newest_segment_fails_verify_and_serve_until_loss_is_accepted() {
    let mut server = three_segments();
    let segs = segments(&server.wal_dir());
    let newest = segs.last().unwrap().clone();
    let first = first_lsn(&newest);
    let last = wal_inspect(&server.data_dir()).last().unwrap().lsn;
    truncate(&newest, 0);
    let text = verify_names_missing_range(&server.data_dir());
    // The checkpoint was written at shutdown: it promises everything up to the last record
    // (the server's outcome records follow the last event, so the range reaches past it).
    assert!(text.contains(&format!("LSNs {first}..=")), "{text}");
    serve_refuses(&mut server, &format!("LSNs {first}..="));
    assert!(last >= first, "the newest segment held acknowledged events");

    // --accept-wal-loss: starts, logs the loss, counts it, accepts new events.
    let opts = big_buckets(Opts::config(SMALL_SEGMENTS).workers(1)).arg("--accept-wal-loss");
    let mut accepted_server = Server::start_in(server.root(), opts)
        .unwrap_or_else(|f| panic!("--accept-wal-loss did not start: {}", f.stderr));
    let stderr = accepted_server.stderr();
    assert!(
        stderr.contains("ACCEPTING LOSS") && stderr.contains(&format!("LSNs {first}..=")),
        "{stderr}"
    );
    let (_, samples) = scrape(&accepted_server);
    let value = |name: &str| {
        samples
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .value
    };
    assert_eq!(value("sluice_wal_loss_accepted_total"), 1.0);
    assert!(value("sluice_wal_lost_lsns_accepted") >= 1.0);
    accepted_server.ingest("/webhooks/loss", b"after the loss");
    accepted_server.stop();
    // The checkpoint now matches the log: a plain start works and verify is clean.
    assert_wal_clean(&server.data_dir());
    server.restart();
    let (_, samples) = scrape(&server);
    assert_eq!(
        samples
            .iter()
            .find(|s| s.name == "sluice_wal_loss_accepted_total")
            .unwrap()
            .value,
        0.0
    );
    server.stop();
}

#[test]
fn deleted_oldest_segment_fails_verify_and_serve() {
    let mut server = three_segments();
    let segs = segments(&server.wal_dir());
    let second = first_lsn(&segs[1]);
    fs::remove_file(&segs[0]).unwrap();
    let text = verify_names_missing_range(&server.data_dir());
    let range = format!("LSNs 1..={}", second - 1);
    assert!(text.contains(&range), "{text}");
    serve_refuses(&mut server, &range);
}

/// `(offset, len, lsn)` of the event records (kind 1 or 5) of a segment file, walking the
/// length fields (commit markers and other kinds are passed over).
fn event_records(seg: &Path) -> Vec<(u64, usize, u64)> {
    let bytes = fs::read(seg).unwrap();
    let mut out = Vec::new();
    let mut off = 0usize;
    while off + 17 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap()) as usize;
        if len == 0 {
            break;
        }
        let lsn = u64::from_le_bytes(bytes[off + 8..off + 16].try_into().unwrap());
        if matches!(bytes[off + 16], 1 | 5) {
            out.push((off as u64, len, lsn));
        }
        off += len;
    }
    out
}

fn record_offsets(seg: &Path) -> Vec<u64> {
    event_records(seg).into_iter().map(|r| r.0).collect()
}

/// Flips one bit of the byte at `at` of `path`, durably.
fn flip(path: &Path, at: u64) {
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x01], at).unwrap();
    f.sync_all().unwrap();
}

/// A downstream that holds every delivery for 30 s (so no outcome is recorded while a test
/// runs), and a config (`extra` first) with trigger `/hooks/t` delivering to it.
fn held_destination(extra: &str) -> (Downstream, String) {
    let ds = Downstream::start(Behavior {
        delay: Duration::from_secs(30),
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let config = format!(
        "{extra}[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n\n\
         [[destinations]]\nuri = \"{uri}\"\ntimeout = \"60s\"\n"
    );
    (ds, config)
}

/// Lets `ds` answer 200 at once (callers do so before starting the server whose deliveries
/// they wait for), and waits (60 s at most) until every id of `want` was delivered after
/// `since`; returns the ids delivered after `since`.
fn delivered_after(ds: &Downstream, since: Instant, want: &BTreeSet<String>) -> BTreeSet<String> {
    ds.set(Behavior::default());
    let ids = |seen: &[crate::downstream::Seen]| -> BTreeSet<String> {
        seen.iter()
            .filter(|s| s.at >= since)
            .map(|s| s.webhook_id.clone())
            .collect()
    };
    ds.wait(Duration::from_secs(60), |seen| ids(seen).is_superset(want));
    // A moment more, so a delivery that should not happen has the chance to show.
    std::thread::sleep(Duration::from_millis(300));
    ids(&ds.seen())
}

/// `serve` refuses with exit 1 and a message holding every one of `needles`.
fn serve_refuses_naming(server: &mut Server, needles: &[&str]) {
    match server.try_restart() {
        Ok(()) => panic!("serve started on a damaged WAL"),
        Err(f) => {
            assert_eq!(f.status.and_then(|s| s.code()), Some(1), "{}", f.stderr);
            for n in needles {
                assert!(f.stderr.contains(n), "{n:?} not in: {}", f.stderr);
            }
        }
    }
}

#[test]
fn a_flipped_byte_acknowledged_just_before_sigkill_is_refused_then_exactly_skipped() {
    let (ds, config) = held_destination("");
    let mut server = Server::start(Opts::config(&config).workers(1));
    let ids: Vec<String> = (0..50)
        .map(|i| server.ingest("/hooks/t", format!("{{\"n\":{i}}}").as_bytes()))
        .collect();
    // Within a millisecond of the last 202: the checkpoint has not caught up.
    server.sigkill();
    let seg = segments(&server.wal_dir()).last().unwrap().clone();
    let events = event_records(&seg);
    assert_eq!(events.len(), 50, "the fifty events, no outcome yet");
    let (off, len, lsn) = events[24];
    flip(&seg, off + len as u64 - 3); // inside event 25's body

    let v = wal_verify(&server.data_dir());
    assert_eq!(v.status.code(), Some(3), "{}", v.all());
    let text = v.all();
    let range = format!("LSNs {lsn}..={lsn}");
    for needle in [
        "CORRUPT",
        &file_name(&seg),
        &format!("offset {off}"),
        &range,
    ] {
        assert!(text.contains(needle), "{needle:?} not in: {text}");
    }
    serve_refuses_naming(
        &mut server,
        &[&file_name(&seg), &format!("offset {off}"), &range],
    );

    // The downstream answers at once from here: a call the new server sent while it still
    // held requests for 30 s would be seen (counted) but keep the drain of `stop` waiting.
    ds.set(Behavior::default());
    let since = Instant::now();
    let opts = Opts::config(&config).workers(1).arg("--accept-wal-loss");
    let mut accepted_server = Server::start_in(server.root(), opts)
        .unwrap_or_else(|f| panic!("--accept-wal-loss did not start: {}", f.stderr));
    let stderr = accepted_server.stderr();
    assert!(
        stderr.contains("ACCEPTING LOSS") && stderr.contains(&range),
        "{stderr}"
    );
    let want: BTreeSet<String> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 24)
        .map(|(_, id)| id.clone())
        .collect();
    let got = delivered_after(&ds, since, &want);
    assert!(
        got.is_superset(&want),
        "missing {:?}",
        want.difference(&got)
    );
    assert!(
        !got.contains(&ids[24]),
        "the damaged event cannot be delivered"
    );
    let (_, samples) = scrape(&accepted_server);
    let accepted_total = samples
        .iter()
        .find(|s| s.name == "sluice_wal_loss_accepted_total")
        .map(|s| s.value);
    assert_eq!(accepted_total, Some(1.0));
    accepted_server.stop();
    // Recorded in the log: verify is clean and a plain start does not ask again.
    let v = wal_verify(&server.data_dir());
    assert_eq!(v.status.code(), Some(0), "{}", v.all());
    assert!(v.all().contains("accepted earlier"), "{}", v.all());
    server.restart();
    server.stop();
}

#[test]
fn a_deleted_middle_segment_is_lost_listed_around_and_delivered_around() {
    let (ds, config) = held_destination(SMALL_SEGMENTS);
    let mut server = Server::start(big_buckets(Opts::config(&config).workers(1)));
    let mut c = server.client();
    let body = "x".repeat(16 << 10);
    let mut n = 0;
    while segments(&server.wal_dir()).len() < 4 {
        n += 1;
        assert!(n < 500, "no fourth segment after {n} events");
        accepted(&c.post("/hooks/t", format!("{n}-{body}").as_bytes(), &[]));
    }
    server.sigkill();
    let before = wal_inspect(&server.data_dir());
    let segs = segments(&server.wal_dir());
    let (a, b) = (first_lsn(&segs[1]), first_lsn(&segs[2]) - 1);
    fs::remove_file(&segs[1]).unwrap();
    let range = format!("LSNs {a}..={b}");

    let v = wal_verify(&server.data_dir());
    assert_eq!(v.status.code(), Some(3), "{}", v.all());
    assert!(v.all().contains(&format!("LOST: {range}")), "{}", v.all());
    let readable: BTreeSet<String> = before
        .iter()
        .filter(|e| e.lsn < a || e.lsn > b)
        .map(|e| e.event_id.clone())
        .collect();
    assert!(readable.len() < before.len() && !readable.is_empty());
    let listed: BTreeSet<String> = wal_inspect(&server.data_dir())
        .into_iter()
        .map(|e| e.event_id)
        .collect();
    assert_eq!(listed, readable, "wal inspect lists every readable event");
    serve_refuses_naming(&mut server, &[&range, "--accept-wal-loss"]);

    ds.set(Behavior::default()); // before the start: see the flipped-byte test
    let since = Instant::now();
    let opts = big_buckets(Opts::config(&config).workers(1)).arg("--accept-wal-loss");
    let mut accepted_server = Server::start_in(server.root(), opts)
        .unwrap_or_else(|f| panic!("--accept-wal-loss did not start: {}", f.stderr));
    let stderr = accepted_server.stderr();
    assert!(
        stderr.contains("ACCEPTING LOSS") && stderr.contains(&range),
        "{stderr}"
    );
    let got = delivered_after(&ds, since, &readable);
    assert!(
        got.is_superset(&readable),
        "missing {:?}",
        readable.difference(&got)
    );
    let lost: BTreeSet<String> = before
        .iter()
        .filter(|e| (a..=b).contains(&e.lsn))
        .map(|e| e.event_id.clone())
        .collect();
    assert!(got.is_disjoint(&lost), "a lost event cannot be delivered");
    accepted_server.stop();
    assert_wal_clean(&server.data_dir());
}

#[test]
fn flipped_byte_in_the_last_acknowledged_record_is_corruption_not_a_torn_tail() {
    // The handler never answers within the test: no outcome record follows the events, so the
    // last record of the log is the last acknowledged event.
    let ds = Downstream::start(Behavior {
        delay: Duration::from_secs(8),
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let manifest = format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n\n\
         [[destinations]]\nuri = \"{uri}\"\ntimeout = \"30s\"\n"
    );
    let mut server = Server::start(Opts::config(&manifest).workers(1));
    for i in 0..3 {
        server.ingest("/hooks/t", format!("{{\"n\":{i}}}").as_bytes());
    }
    // Killed at once: whether the checkpoint caught up or not, the commit markers prove the
    // record was acknowledged.
    server.sigkill();
    let seg: PathBuf = segments(&server.wal_dir()).last().unwrap().clone();
    let offsets = record_offsets(&seg);
    assert_eq!(offsets.len(), 3, "only the three events are in the log");
    let last = *offsets.last().unwrap();
    flip(&seg, last + 30);

    let v = wal_verify(&server.data_dir());
    assert_eq!(v.status.code(), Some(3), "{}", v.all());
    let text = v.all();
    assert!(
        text.contains("CORRUPT")
            && text.contains(&file_name(&seg))
            && text.contains(&format!("offset {last}")),
        "{text}"
    );
    assert!(text.contains("not a power cut"), "{text}");
    match server.try_restart() {
        Ok(()) => panic!("serve started on a corrupt acknowledged record"),
        Err(f) => {
            assert_eq!(f.status.and_then(|s| s.code()), Some(1), "{}", f.stderr);
            assert!(
                f.stderr.contains(&file_name(&seg)) && f.stderr.contains(&format!("offset {last}")),
                "{}",
                f.stderr
            );
        }
    }
    // Accepting the loss gives up that record and starts.
    let opts = Opts::config(&manifest).workers(1).arg("--accept-wal-loss");
    let mut accepted_server = Server::start_in(server.root(), opts)
        .unwrap_or_else(|f| panic!("--accept-wal-loss did not start: {}", f.stderr));
    assert!(accepted_server.stderr().contains("ACCEPTING LOSS"));
    accepted_server.sigkill();
    drop(ds);
}

#[test]
fn a_data_dir_from_before_checkpoints_starts_and_gets_one() {
    let mut server = Server::start(Opts::default().workers(1));
    let id = server.ingest("/webhooks/old", b"written by an older version");
    server.stop();
    let ckpt = server.wal_dir().join("CHECKPOINT");
    assert!(ckpt.exists(), "a stopped server leaves a checkpoint");
    fs::remove_file(&ckpt).unwrap();
    // Older than the manifest too (`wal/MANIFEST`): with it, a missing checkpoint is refused.
    fs::remove_file(server.data_dir().join("wal/MANIFEST")).unwrap();
    // And than the log's high-water record (`wal/core-0.hw`), which shows it had a checkpoint.
    fs::remove_file(server.data_dir().join("wal/core-0.hw")).unwrap();
    assert_wal_clean(&server.data_dir());
    server.restart();
    assert!(ckpt.exists(), "created at start-up");
    server.stop();
    assert_wal_clean(&server.data_dir());
    find_event(&wal_inspect(&server.data_dir()), &id);
}

/// Issue 40 item 2: a zeroed 512-byte sector inside the final, acknowledged batch reads as a
/// power cut's tear, so recovery truncates it without `--accept-wal-loss` — but it names the
/// LSNs dropped at error level, keeps the bytes in the log's `quarantine/`, counts them in
/// `sluice_wal_torn_tail_*`, and `wal verify` reports it afterwards (exit 0: accounted for).
#[test]
fn a_zeroed_sector_in_the_final_batch_is_named_counted_kept_and_verified() {
    // The checkpoint (written at most once a second) must not cover the final batch, or the
    // same damage is corruption: a SIGKILL right after the last 202 leaves it uncovered but
    // for a rare tick in between, which a retry steps past.
    // A handler that never answers: no outcome record is written after the events, so the
    // last event's batch is the log's final write.
    let ds = Downstream::start(Behavior::default());
    ds.hold(true);
    let uri = ds.uri("/sink");
    let config = format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n"
    );
    for _ in 0..5 {
        let mut server = Server::start(big_buckets(Opts::config(&config).workers(1)));
        let mut c = server.client();
        for i in 0..20 {
            accepted(&c.post("/hooks/t", format!("{i}").as_bytes(), &[]));
        }
        let last = format!("last-{}", "x".repeat(3000));
        accepted(&c.post("/hooks/t", last.as_bytes(), &[]));
        server.sigkill();
        let seg = segments(&server.wal_dir()).pop().expect("a segment");
        let bytes = fs::read(&seg).unwrap();
        let end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
        // Inside the last record's 3,000-byte body (its marker is the last ~45 bytes).
        let sector = (end - 1600) / 512 * 512;
        let f = fs::OpenOptions::new().write(true).open(&seg).unwrap();
        f.write_all_at(&[0u8; 512], sector as u64).unwrap();
        f.sync_all().unwrap();
        if let Err(fail) = server.try_restart() {
            assert!(fail.stderr.contains("corruption"), "{}", fail.stderr);
            continue;
        }
        let stderr = server.stderr();
        assert!(stderr.contains("ERROR: torn tail truncated"), "{stderr}");
        assert!(stderr.contains("dropped from"), "{stderr}");
        let (_, s) = scrape(&server);
        assert_eq!(
            sample_value(&s, "sluice_wal_torn_tail_truncations_total", &[]),
            1.0
        );
        assert!(sample_value(&s, "sluice_wal_torn_tail_lsns_total", &[]) >= 1.0);
        let quarantine = server.wal_dir().join("quarantine");
        let kept: Vec<_> = fs::read_dir(&quarantine)
            .unwrap()
            .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
            .filter(|n| n.ends_with(".torn"))
            .collect();
        assert_eq!(kept.len(), 1, "{kept:?}");
        let held = fs::read(quarantine.join(&kept[0])).unwrap();
        assert!(
            held.windows(512).any(|w| w.iter().all(|&b| b == 0)),
            "the zeroed sector"
        );
        server.stop();
        let v = wal_verify(&server.data_dir());
        assert_eq!(v.status.code(), Some(0), "{}", v.all());
        assert!(
            v.all().contains("earlier: torn tail truncated"),
            "{}",
            v.all()
        );
        // The count survives restarts.
        server.restart();
        let (_, s) = scrape(&server);
        assert_eq!(
            sample_value(&s, "sluice_wal_torn_tail_truncations_total", &[]),
            1.0
        );
        return;
    }
    panic!("the checkpoint covered the final batch in 5 tries");
}
