//! Lost WAL files are detected (issue 11, item 7): after acknowledged events, truncating the
//! newest segment to 0 bytes or deleting the oldest makes `sluice wal verify` exit 3 naming the
//! missing LSN range and `serve` exit 1 naming it; `serve --accept-wal-loss` starts anyway,
//! logging and counting the loss. A flipped byte in the last acknowledged record is corruption
//! (segment and offset named), not a torn tail.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// Offsets of the records of a segment file, walking the length fields.
fn record_offsets(seg: &Path) -> Vec<u64> {
    let bytes = fs::read(seg).unwrap();
    let mut out = Vec::new();
    let mut off = 0usize;
    while off + 17 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap()) as usize;
        if len == 0 {
            break;
        }
        out.push(off as u64);
        off += len;
    }
    out
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
    // The checkpoint catches up within a second; then the process dies without a shutdown.
    std::thread::sleep(Duration::from_millis(1500));
    server.sigkill();
    let seg: PathBuf = segments(&server.wal_dir()).last().unwrap().clone();
    let offsets = record_offsets(&seg);
    assert_eq!(offsets.len(), 3, "only the three events are in the log");
    let last = *offsets.last().unwrap();
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&seg)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_at(&mut b, last + 30).unwrap();
    f.write_all_at(&[b[0] ^ 0x01], last + 30).unwrap();
    f.sync_all().unwrap();

    let v = wal_verify(&server.data_dir());
    assert_eq!(v.status.code(), Some(3), "{}", v.all());
    let text = v.all();
    assert!(
        text.contains("CORRUPT")
            && text.contains(&file_name(&seg))
            && text.contains(&format!("offset {last}")),
        "{text}"
    );
    assert!(text.contains("not a torn tail"), "{text}");
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
    // Accepting the loss truncates the damaged record and starts.
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
    assert_wal_clean(&server.data_dir());
    server.restart();
    assert!(ckpt.exists(), "created at start-up");
    server.stop();
    assert_wal_clean(&server.data_dir());
    find_event(&wal_inspect(&server.data_dir()), &id);
}
