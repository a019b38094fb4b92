//! A failed `fdatasync` (issue 15, `--features failpoints`): the failpoint `eio-sync-once` fails
//! one sync with `EIO` *and drops the range it was asked to sync* (zeros in the page cache, as
//! Linux may do after a failed writeback — "fsyncgate"), then lets every later sync succeed. The
//! server must never answer 202 for data that depended on the failed sync, and must put the
//! data back (rewrite it from memory, or zero it and write the next batch over it) before it
//! acknowledges anything after it. Checked through the real binary, in both durability modes:
//!
//! * `fsync`: the batch whose sync failed is refused `503 wal_unavailable`; the next events are
//!   accepted; after a restart the log holds exactly the acknowledged events and verifies clean.
//! * `os`: the sync happens at segment rollover (or every 4 MiB unsynced); the batch that needed
//!   it is refused 503; the events acknowledged before it (whose pages the failure dropped) are
//!   rewritten from memory, so after a crash (SIGKILL: the page cache survives, with what the
//!   failure left in it) and a restart every acknowledged event is there.

use std::collections::HashSet;
use std::fs;
use std::time::Duration;

use crate::support::*;

const BIG: usize = 16 << 10;

fn start(control: &std::path::Path, durability: &str) -> Server {
    fs::write(control, "").unwrap();
    let manifest = "[server]\nmax_body_bytes = 65536\n[wal]\nsegment_bytes = 1048576\n";
    let opts = Opts::config(manifest)
        .workers(1)
        .durability(durability)
        .env("SLUICE_FAILPOINTS", path_str(control))
        .env(ENV_GLOBAL_CAPACITY, "1000000")
        .env(ENV_PER_SOURCE_CAPACITY, "1000000")
        .env(ENV_REFILL_PER_SEC, "1000000");
    let root = temp_root();
    Server::start_in(root, opts).unwrap_or_else(|f| panic!("{}", f.stderr))
}

fn body(tag: &str, i: usize, len: usize) -> String {
    format!("{tag}-{i}-{}", "b".repeat(len))
}

/// Posts until one is refused; returns the acknowledged ids and the refused body's hash.
fn post_until_refused(
    server: &Server,
    tag: &str,
    len: usize,
    limit: usize,
    acked: &mut Vec<(String, String)>,
) -> String {
    for i in 0..limit {
        let b = body(tag, i, len);
        let r = server.post("/webhooks/fsync", b.as_bytes());
        if r.status == 503 {
            assert_eq!(r.json()["reason"], "wal_unavailable", "{}", r.text());
            return sha256_hex(b.as_bytes());
        }
        let (id, _) = accepted(&r);
        acked.push((id, sha256_hex(b.as_bytes())));
    }
    panic!(
        "{tag}: no request was refused in {limit} posts while a sync was failing; stderr:\n{}",
        server.stderr()
    );
}

fn check_log(server: &Server, acked: &[(String, String)], refused: &HashSet<String>) {
    assert_wal_clean(&server.data_dir());
    let events = wal_inspect(&server.data_dir());
    let in_wal: Vec<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
    let want: Vec<&str> = acked.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        in_wal, want,
        "the log must hold exactly the acknowledged events"
    );
    for (e, (_, sha)) in events.iter().zip(acked) {
        assert_eq!(&e.body_sha256, sha, "{}: stored body differs", e.event_id);
        assert!(
            !refused.contains(&e.body_sha256),
            "a refused event is in the log"
        );
    }
}

#[test]
fn fsync_mode_a_failed_fdatasync_is_503_and_the_next_batch_rewrites_the_range() {
    let root = tempfile::tempdir().unwrap();
    let control = root.path().join("failpoints");
    let mut server = start(&control, "fsync");
    let mut acked = Vec::new();
    let mut refused = HashSet::new();
    for i in 0..5 {
        let b = body("before", i, 100);
        let (id, _) = accepted(&server.post("/webhooks/fsync", b.as_bytes()));
        acked.push((id, sha256_hex(b.as_bytes())));
    }
    // The pump writes outcome records for those events (no destination): let it finish, so the
    // next sync is the next ingest batch's.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    fs::write(&control, "eio-sync-once").unwrap();
    // Every batch syncs in this mode: the very next one fails.
    refused.insert(post_until_refused(&server, "failed", 3000, 1, &mut acked));
    // The log's probe (the only retry while it is unhealthy, at most a second later) heals it.
    assert!(wait_until(Duration::from_secs(5), || server
        .get("/readyz")
        .status
        == 200));
    for i in 0..5 {
        let b = body("after", i, 100);
        let (id, _) = accepted(&server.post("/webhooks/fsync", b.as_bytes()));
        acked.push((id, sha256_hex(b.as_bytes())));
    }
    assert_eq!(
        server.stderr().matches("failpoint eio-sync-once").count(),
        1
    );
    fs::write(&control, "off").unwrap();
    server.sigkill();
    server.restart();
    server.stop();
    check_log(&server, &acked, &refused);
}

#[test]
fn os_mode_a_failed_fdatasync_at_rollover_rewrites_the_acknowledged_bytes_from_memory() {
    let root = tempfile::tempdir().unwrap();
    let control = root.path().join("failpoints");
    let mut server = start(&control, "os");
    let mut acked = Vec::new();
    let mut refused = HashSet::new();
    for i in 0..20 {
        let b = body("before", i, BIG);
        let (id, _) = accepted(&server.post("/webhooks/fsync", b.as_bytes()));
        acked.push((id, sha256_hex(b.as_bytes())));
    }
    // Armed while ~320 KiB of acknowledged events sit unsynced in the active segment: the
    // rollover's sync fails and drops them from the page cache.
    fs::write(&control, "eio-sync-once").unwrap();
    refused.insert(post_until_refused(&server, "roll", BIG, 200, &mut acked));
    // The log's probe (the only retry while it is unhealthy, at most a second later) heals it.
    assert!(wait_until(Duration::from_secs(5), || server
        .get("/readyz")
        .status
        == 200));
    for i in 0..10 {
        let b = body("after", i, BIG);
        let (id, _) = accepted(&server.post("/webhooks/fsync", b.as_bytes()));
        acked.push((id, sha256_hex(b.as_bytes())));
    }
    assert_eq!(
        server.stderr().matches("failpoint eio-sync-once").count(),
        1
    );
    // A crash keeps the page cache as the failure left it; recovery must find every
    // acknowledged event.
    fs::write(&control, "off").unwrap();
    server.sigkill();
    server.restart();
    server.stop();
    check_log(&server, &acked, &refused);
}
