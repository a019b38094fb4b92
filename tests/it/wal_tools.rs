//! Damaged WALs: a torn tail is truncated on restart; corruption followed by valid records is
//! reported by `sluice wal verify` (segment + offset) and stops the server from starting.

use sluice::wal::format::marker::MARKER_RECORD_BYTES;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::support::*;

/// Writes `n` events with distinct non-zero bodies, stops the server, returns their ids.
fn write_events(server: &mut Server, n: usize) -> Vec<(String, Vec<u8>)> {
    let mut c = server.client();
    let out = (0..n)
        .map(|i| {
            let body = format!("wal event number {i}; ").repeat(6).into_bytes();
            let (id, _) = accepted(&c.post("/webhooks/waltest", &body, &[]));
            (id, body)
        })
        .collect();
    server.stop();
    out
}

/// Appends `n` events straight to the WAL with the library while the server is stopped, so the
/// last record of the log is an event (a running server also writes outcome records after its
/// events). Returns their ids and bodies.
fn write_events_offline(server: &mut Server, n: usize) -> Vec<(String, Vec<u8>)> {
    server.stop();
    let cfg = sluice::wal::WalConfig::new(server.wal_dir());
    let (mut wal, _) = sluice::wal::open(&cfg).expect("open WAL");
    let mut ids = sluice::ingest::event_id::EventIdGen::new(7);
    let written: Vec<(String, Vec<u8>)> = (0..n)
        .map(|i| {
            let body = format!("wal event number {i}; ").repeat(6).into_bytes();
            (ids.next(1_700_000_000_000 + i as u64), body)
        })
        .collect();
    let events: Vec<sluice::wal::EventRecord> = written
        .iter()
        .map(|(id, body)| sluice::wal::EventRecord {
            event_id: id.clone(),
            trigger_id: "default".into(),
            source: "waltest".into(),
            received_at_ms: 1_700_000_000_000,
            headers: Vec::new(),
            body: body.clone(),
            replay_of: None,
            body_json: Default::default(),
        })
        .collect();
    wal.append_events(&events).expect("append");
    written
}

/// The highest-named segment and the offset of its last non-zero byte.
fn last_segment_end(wal_dir: &Path) -> (PathBuf, usize) {
    let segs = segments(wal_dir);
    let seg = segs
        .last()
        .unwrap_or_else(|| panic!("no segment in {}", wal_dir.display()))
        .clone();
    let bytes = fs::read(&seg).expect("read segment");
    let end = bytes
        .iter()
        .rposition(|&b| b != 0)
        .unwrap_or_else(|| panic!("{} is all zeros", seg.display()));
    (seg, end)
}

fn write_at(path: &Path, offset: u64, bytes: &[u8]) {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open segment for writing");
    f.write_all_at(bytes, offset).expect("write segment");
    f.sync_all().expect("sync segment");
}

/// Every file of the WAL dir with its sha256.
fn snapshot(wal_dir: &Path) -> Vec<(String, String)> {
    segments(wal_dir)
        .iter()
        .map(|p| {
            (
                file_name(p),
                sha256_hex(&fs::read(p).expect("read segment")),
            )
        })
        .collect()
}

/// After a torn tail: the server starts, keeps the events before the damaged one, drops the
/// damaged one, accepts new events, and the WAL verifies clean.
fn assert_recovers_torn_tail(server: &mut Server, written: &[(String, Vec<u8>)]) {
    server.restart();
    let new_id = server.ingest("/webhooks/waltest", b"after the torn tail");
    server.stop();
    assert_wal_clean(&server.data_dir());
    let events = wal_inspect(&server.data_dir());
    let (kept, torn) = written.split_at(written.len() - 1);
    for (id, body) in kept {
        assert_eq!(find_event(&events, id).body_sha256, sha256_hex(body));
    }
    assert!(
        !events.iter().any(|e| e.event_id == torn[0].0),
        "the damaged last record is still listed: {events:#?}"
    );
    let last_kept = find_event(&events, &kept[kept.len() - 1].0).lsn;
    let new = find_event(&events, &new_id);
    assert!(new.lsn > last_kept, "new LSN {} <= {last_kept}", new.lsn);
    assert_eq!(events.len(), written.len(), "{events:#?}");
}

#[test]
fn torn_tail_zeroed_is_truncated_on_restart() {
    let mut server = Server::start(Opts::default().workers(1));
    let written = write_events_offline(&mut server, 5);
    let (seg, end) = last_segment_end(&server.wal_dir());
    // The batch's write ends with its commit marker (42 bytes, `wal::format::marker`): the
    // last 8 bytes of the last record and the marker after it never reached the disk.
    let record_end = end + 1 - MARKER_RECORD_BYTES;
    write_at(
        &seg,
        (record_end - 8) as u64,
        &[0u8; 8 + MARKER_RECORD_BYTES],
    );
    assert_recovers_torn_tail(&mut server, &written);
}

#[test]
fn torn_tail_truncated_file_is_recovered() {
    let mut server = Server::start(Opts::default().workers(1));
    let written = write_events_offline(&mut server, 5);
    let (seg, end) = last_segment_end(&server.wal_dir());
    let end = end + 1 - MARKER_RECORD_BYTES; // the last record's end, before its batch's marker
                                             // The file ends in the middle of the last record.
    let f = OpenOptions::new()
        .write(true)
        .open(&seg)
        .expect("open segment");
    f.set_len((end - 30) as u64).expect("truncate");
    f.sync_all().expect("sync");
    drop(f);
    assert_recovers_torn_tail(&mut server, &written);
}

#[test]
fn corrupt_record_before_valid_ones_is_reported_and_blocks_startup() {
    let mut server = Server::start(Opts::default().workers(1));
    write_events(&mut server, 5);
    let segs = segments(&server.wal_dir());
    let seg = segs.first().expect("a segment").clone();
    let name = file_name(&seg);
    let bytes = fs::read(&seg).expect("read segment");
    // The middle of the first record (its length is the first u32, little-endian; fall back to
    // byte 40, well inside a record of ≥ 100 bytes).
    let len = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
    let mid = if (24..4096).contains(&len) {
        len / 2
    } else {
        40
    };
    write_at(&seg, mid as u64, &[bytes[mid] ^ 0xFF]);
    let before = snapshot(&server.wal_dir());

    let verify = wal_verify(&server.data_dir());
    assert!(
        !verify.status.success(),
        "wal verify accepted a corrupt record:\n{}",
        verify.all()
    );
    let text = verify.all();
    assert!(
        text.contains(&name),
        "wal verify does not name the segment {name}:\n{text}"
    );
    assert!(
        mentions_offset(&text, &name),
        "wal verify does not give a byte offset:\n{text}"
    );

    let failure = match server.try_restart() {
        Ok(()) => panic!(
            "the server started on a corrupt WAL; stderr:\n{}",
            server.stderr()
        ),
        Err(f) => f,
    };
    let status = failure
        .status
        .unwrap_or_else(|| panic!("server neither started nor exited:\n{}", failure.stderr));
    assert!(!status.success(), "exit {status:?}");
    assert!(
        failure.stderr.contains(&name),
        "startup error does not name {name}:\n{}",
        failure.stderr
    );
    assert!(
        mentions_offset(&failure.stderr, &name),
        "startup error has no offset:\n{}",
        failure.stderr
    );
    // Nothing was dropped or rewritten.
    let after = snapshot(&server.wal_dir());
    for file in &before {
        assert!(
            after.contains(file),
            "the failed start modified or removed {}",
            file.0
        );
    }
    assert!(!wal_verify(&server.data_dir()).status.success());
}

/// `text` gives a byte offset: the word "offset", or `<segment>:<digits>`, or "byte <digits>".
fn mentions_offset(text: &str, segment: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    if lower.contains("offset") {
        return true;
    }
    let after_digit = |pat: &str| {
        lower
            .match_indices(pat)
            .any(|(i, _)| lower[i + pat.len()..].starts_with(|c: char| c.is_ascii_digit()))
    };
    after_digit(&format!("{}:", segment.to_ascii_lowercase()))
        || after_digit("byte ")
        || after_digit("at ")
}

#[test]
fn verify_and_inspect_on_a_clean_wal() {
    let mut server = Server::start(Opts::default().workers(1));
    let written = write_events(&mut server, 3);
    assert_wal_clean(&server.data_dir());
    let events = wal_inspect(&server.data_dir());
    assert_eq!(events.len(), 3);
    for (e, (id, body)) in events.iter().zip(&written) {
        assert_eq!(&e.event_id, id, "inspect lists events in LSN order");
        assert_eq!(e.body_len, body.len() as u64);
        assert_eq!(e.source, "waltest");
    }
}

#[test]
fn damage_at_the_end_of_a_non_last_segment_is_corruption_not_a_torn_tail() {
    // Two segments (the smallest segment size the server accepts, 40 bodies of 1 MB).
    let config = "[server]\nmax_body_bytes = 1048576\n[wal]\nsegment_bytes = 33825701\n";
    let mut server = Server::start(Opts::config(config).workers(1));
    let mut c = server.client();
    for i in 0..40u32 {
        let body: Vec<u8> = (0..1_000_000u32)
            .map(|j| ((i + j) % 251 + 1) as u8)
            .collect();
        accepted(&c.post("/webhooks/seg", &body, &[]));
    }
    drop(c);
    server.stop();
    let segs = segments(&server.wal_dir());
    assert!(segs.len() >= 2, "only {} segment(s)", segs.len());
    let first = segs[0].clone();
    let name = file_name(&first);
    let bytes = fs::read(&first).expect("read segment");
    let end = bytes.iter().rposition(|&b| b != 0).expect("data");
    drop(bytes);
    // The same damage as a torn tail, but later segments hold valid records.
    write_at(&first, (end - 7) as u64, &[0u8; 8]);
    let verify = wal_verify(&server.data_dir());
    assert!(
        !verify.status.success(),
        "wal verify accepted a damaged non-last segment:\n{}",
        verify.all()
    );
    assert!(
        verify.all().contains(&name),
        "wal verify does not name {name}:\n{}",
        verify.all()
    );
    match server.try_restart() {
        Ok(()) => panic!(
            "the server started, dropping the damaged record of {name}; stderr:\n{}",
            server.stderr()
        ),
        Err(f) => {
            assert!(f.status.is_some_and(|s| !s.success()), "{:?}", f.status);
            assert!(
                f.stderr.contains(&name),
                "startup error does not name {name}:\n{}",
                f.stderr
            );
        }
    }
}

#[test]
fn inspect_and_verify_work_beside_a_running_server() {
    let mut server = Server::start(Opts::default().workers(1));
    let id = server.ingest("/webhooks/live", b"live");
    // An operator looks at the WAL of a running server.
    let events = wal_inspect(&server.data_dir());
    find_event(&events, &id);
    assert_wal_clean(&server.data_dir());
    // And the server is undisturbed.
    accepted(&server.post("/webhooks/live", b"again"));
    server.stop();
}
