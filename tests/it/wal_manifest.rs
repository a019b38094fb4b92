//! The set of logs is durable: on a 2-worker data dir holding undelivered events, a deleted
//! `wal/core-1`, or deleted `CHECKPOINT` files with the newest segment truncated, make
//! `sluice wal verify` exit 3 and `serve` exit 1, both naming what is missing; `serve
//! --accept-wal-loss` starts, and the next plain start does not ask again (the loss is recorded
//! in `wal/MANIFEST`).

use std::fs;
use std::path::Path;
use std::time::Duration;

use crate::downstream::{Behavior, Downstream};
use crate::support::*;

/// A 2-worker server whose logs both hold events the destination has not answered (it never
/// does within the test), killed without a shutdown. Returns it with the downstream.
fn two_logs_undelivered() -> (Server, Downstream, Opts) {
    let ds = Downstream::start(Behavior {
        delay: Duration::from_secs(60),
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let config = format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n\n\
         [[destinations]]\nuri = \"{uri}\"\ntimeout = \"120s\"\n"
    );
    let opts = Opts::config(&config).workers(2);
    let mut server = Server::start(opts.clone());
    // One connection per event: connections are spread over both cores.
    for i in 0..60 {
        server.ingest("/hooks/t", format!("{{\"n\":{i}}}").as_bytes());
    }
    server.sigkill();
    let events = wal_inspect(&server.data_dir());
    for log in ["core-0", "core-1"] {
        let n = events
            .iter()
            .filter(|e| e.log == log && e.outcome == "pending")
            .count();
        assert!(n > 0, "no undelivered event in {log}: {events:?}");
    }
    (server, ds, opts)
}

/// `wal verify` exits 3 and `serve` exits 1, both naming every one of `names`.
fn verify_and_serve_refuse(server: &mut Server, names: &[&str]) {
    let v = wal_verify(&server.data_dir());
    assert_eq!(v.status.code(), Some(3), "{}", v.all());
    for n in names {
        assert!(v.all().contains(n), "verify does not name {n}: {}", v.all());
    }
    match server.try_restart() {
        Ok(()) => panic!("serve started with {names:?} missing"),
        Err(f) => {
            assert_eq!(f.status.and_then(|s| s.code()), Some(1), "{}", f.stderr);
            for n in names {
                assert!(
                    f.stderr.contains(n),
                    "serve does not name {n}: {}",
                    f.stderr
                );
            }
            assert!(f.stderr.contains("--accept-wal-loss"), "{}", f.stderr);
        }
    }
}

/// `serve --accept-wal-loss` starts and logs the loss; then a plain start works and `wal
/// verify` is clean (the loss is recorded).
fn accept_then_start_plain(server: &mut Server, opts: Opts) {
    let accepting = Server::start_in(server.root(), opts.arg("--accept-wal-loss"))
        .map(|mut s| {
            let stderr = s.stderr();
            s.sigkill();
            stderr
        })
        .unwrap_or_else(|f| panic!("--accept-wal-loss did not start: {}", f.stderr));
    assert!(accepting.contains("ACCEPTING LOSS"), "{accepting}");
    assert_wal_clean(&server.data_dir());
    let manifest = fs::read_to_string(server.data_dir().join("wal/MANIFEST")).unwrap();
    assert!(manifest.contains("\nlost "), "{manifest}");
    server.restart();
    server.sigkill();
}

#[test]
fn a_deleted_core_log_fails_verify_and_serve_by_name() {
    let (mut server, _ds, opts) = two_logs_undelivered();
    fs::remove_dir_all(server.data_dir().join("wal/core-1")).unwrap();
    verify_and_serve_refuse(&mut server, &["log core-1 is missing"]);
    assert!(
        !server.data_dir().join("wal/core-1").exists(),
        "a refused start must not recreate the log"
    );
    accept_then_start_plain(&mut server, opts);
}

#[test]
fn deleted_checkpoints_and_a_truncated_newest_segment_fail_verify_and_serve() {
    let (mut server, _ds, opts) = two_logs_undelivered();
    let wal = server.data_dir().join("wal");
    for core in ["core-0", "core-1"] {
        fs::remove_file(wal.join(core).join("CHECKPOINT")).unwrap();
    }
    let newest = segments(&wal.join("core-1")).last().unwrap().clone();
    truncate(&newest, 0);
    verify_and_serve_refuse(
        &mut server,
        &["core-0/CHECKPOINT does not exist", "core-1/CHECKPOINT"],
    );
    accept_then_start_plain(&mut server, opts);
}

fn truncate(path: &Path, len: u64) {
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(len).unwrap();
    f.sync_all().unwrap();
}
