//! The set of logs is durable: on a 2-worker data dir holding undelivered events, a deleted
//! `wal/core-1`, or deleted `CHECKPOINT` files with the newest segment truncated, make
//! `sluice wal verify` exit 3 and `serve` exit 1, both naming what is missing; `serve
//! --accept-wal-loss` starts, and the next plain start does not ask again (the loss is recorded
//! in `wal/MANIFEST`). Accepted, the loss is ranged and counted from the log's high-water
//! record (`wal/core-K.hw`, issue 40 item 3), and the log continues above every LSN it handed
//! out: no LSN and no event id is handed out twice.

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
    // The checkpoints (and their copies in the high-water records) catch up within a second
    // (`wal::CHECKPOINT_EVERY`): after that, what they promise is every event acknowledged.
    std::thread::sleep(Duration::from_millis(1_500));
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

/// `serve --accept-wal-loss` starts and logs the loss, naming in `log` a range that covers
/// every LSN of `dropped` and counting at least as many; events accepted then get LSNs above
/// every earlier one of their log and ids never seen before. Then a plain start works and
/// `wal verify` is clean (the loss is recorded).
fn accept_then_start_plain(server: &mut Server, opts: Opts, log: &str, dropped: &[WalEvent]) {
    let before = wal_inspect(&server.data_dir());
    let mut accepting = Server::start_in(server.root(), opts.arg("--accept-wal-loss"))
        .unwrap_or_else(|f| panic!("--accept-wal-loss did not start: {}", f.stderr));
    let stderr = accepting.stderr();
    assert!(stderr.contains("ACCEPTING LOSS"), "{stderr}");
    let (first, last) = named_range(&stderr, log);
    for e in dropped {
        assert!(
            (first..=last).contains(&e.lsn),
            "LSN {} of {log} not in the range named, {first}..={last}: {stderr}",
            e.lsn
        );
    }
    let (_, samples) = scrape(&accepting);
    let losses = sample_value(&samples, "sluice_wal_loss_accepted_total", &[]);
    let lsns = sample_value(&samples, "sluice_wal_lost_lsns_accepted", &[]);
    println!(
        "{log}: {} acknowledged events dropped; named LSNs {first}..={last}; \
         sluice_wal_loss_accepted_total {losses}, sluice_wal_lost_lsns_accepted {lsns}",
        dropped.len()
    );
    assert!(losses >= 1.0, "{losses}");
    assert!(
        lsns >= (last - first + 1) as f64,
        "{lsns} < {first}..={last}"
    );
    let fresh: Vec<String> = (0..20)
        .map(|i| accepting.ingest("/hooks/t", format!("{{\"after\":{i}}}").as_bytes()))
        .collect();
    accepting.sigkill();
    let after = wal_inspect(&server.data_dir());
    for id in &fresh {
        assert!(before.iter().all(|e| &e.event_id != id), "id {id} reused");
        let new = after
            .iter()
            .find(|e| &e.event_id == id)
            .expect("in the log");
        let top = before
            .iter()
            .chain(dropped)
            .filter(|e| e.log == new.log)
            .map(|e| e.lsn)
            .max()
            .unwrap_or(0);
        assert!(
            new.lsn > top,
            "{id}: LSN {} of {} reused (had {top})",
            new.lsn,
            new.log
        );
    }
    let top_before = before
        .iter()
        .chain(dropped)
        .filter(|e| e.log == log)
        .map(|e| e.lsn)
        .max()
        .unwrap_or(0);
    let new_in_log: Vec<u64> = after
        .iter()
        .filter(|e| e.log == log && fresh.contains(&e.event_id))
        .map(|e| e.lsn)
        .collect();
    println!(
        "{} new events, ids all new; {} of them in {log}, the lowest at LSN {:?}, the highest \
         earlier there {top_before}",
        fresh.len(),
        new_in_log.len(),
        new_in_log.iter().min()
    );
    assert_wal_clean(&server.data_dir());
    let manifest = fs::read_to_string(server.data_dir().join("wal/MANIFEST")).unwrap();
    assert!(manifest.contains("\nlost "), "{manifest}");
    server.restart();
    server.sigkill();
}

/// The range of the `ACCEPTING LOSS ... LSNs a..=b missing` line about `log` in `stderr`.
fn named_range(stderr: &str, log: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .find(|l| {
            l.contains(&format!("wal/{log}:"))
                && l.contains("ACCEPTING LOSS")
                && l.contains("LSNs ")
        })
        .unwrap_or_else(|| panic!("no LSN range named for {log}: {stderr}"));
    let rest = &line[line.find("LSNs ").unwrap() + 5..];
    let (a, rest) = rest.split_once("..=").expect("a range");
    let b: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (a.parse().unwrap(), b.parse().unwrap())
}

fn events_of(server: &Server, log: &str) -> Vec<WalEvent> {
    let all = wal_inspect(&server.data_dir());
    all.into_iter().filter(|e| e.log == log).collect()
}

#[test]
fn a_deleted_core_log_fails_verify_and_serve_by_name() {
    let (mut server, _ds, opts) = two_logs_undelivered();
    let dropped = events_of(&server, "core-1");
    fs::remove_dir_all(server.data_dir().join("wal/core-1")).unwrap();
    verify_and_serve_refuse(&mut server, &["log core-1 is missing"]);
    assert!(
        !server.data_dir().join("wal/core-1").exists(),
        "a refused start must not recreate the log"
    );
    accept_then_start_plain(&mut server, opts, "core-1", &dropped);
}

#[test]
fn deleted_checkpoints_and_a_truncated_newest_segment_fail_verify_and_serve() {
    let (mut server, _ds, opts) = two_logs_undelivered();
    let wal = server.data_dir().join("wal");
    for core in ["core-0", "core-1"] {
        fs::remove_file(wal.join(core).join("CHECKPOINT")).unwrap();
    }
    let newest = segments(&wal.join("core-1")).last().unwrap().clone();
    let from: u64 = newest
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let dropped: Vec<WalEvent> = events_of(&server, "core-1")
        .into_iter()
        .filter(|e| e.lsn >= from)
        .collect();
    assert!(!dropped.is_empty());
    truncate(&newest, 0);
    verify_and_serve_refuse(
        &mut server,
        &["core-0/CHECKPOINT does not exist", "core-1/CHECKPOINT"],
    );
    accept_then_start_plain(&mut server, opts, "core-1", &dropped);
}

fn truncate(path: &Path, len: u64) {
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(len).unwrap();
    f.sync_all().unwrap();
}
