//! Storage faults in a running server (`--features failpoints`): the failpoint wrapper
//! (`src/wal/failpoints.rs`) is switched through a control file while the server runs.
//!
//! For each fault (`ENOSPC` on write, `ENOSPC` on segment allocation, `EIO` on write, `EIO` on
//! sync, short write): every POST is refused `503 wal_unavailable` with `Retry-After`, `/readyz`
//! is `503 wal_unavailable`; once the fault clears the log's probe makes the same process ready
//! and it accepts again (202). Afterwards the WAL holds exactly the acknowledged events (no refused one, no stale
//! bytes of a failed write) and `sluice wal verify` is clean.

use std::collections::HashSet;
use std::fs;
use std::time::Duration;

use crate::support::*;

const REFUSED_PER_FAULT: usize = 6;

fn post_marked(server: &Server, marker: &str) -> Response {
    server.post("/webhooks/faults", marker.as_bytes())
}

fn assert_refused_unavailable(r: &Response, what: &str) {
    assert_eq!(r.status, 503, "{what}: {} {}", r.status, r.text());
    let v = r.json();
    assert_eq!(v["reason"], "wal_unavailable", "{what}: {}", r.text());
    assert!(r.header("retry-after").is_some(), "{what}: no Retry-After");
}

fn readyz(server: &Server) -> Response {
    server.get("/readyz")
}

#[test]
fn storage_faults_refuse_then_recover_without_restart() {
    let root = temp_root();
    let control = root.path().join("failpoints");
    fs::write(&control, "").unwrap();
    // Small segments so that a burst rolls over and `allocate` is exercised too.
    // One worker: the segment counts below are of core 0's log.
    let manifest = "[server]\nmax_body_bytes = 65536\n[wal]\nsegment_bytes = 1048576\n";
    let opts = Opts::config(manifest)
        .workers(1)
        .env("SLUICE_FAILPOINTS", path_str(&control))
        .env(ENV_GLOBAL_CAPACITY, "1000000")
        .env(ENV_PER_SOURCE_CAPACITY, "1000000")
        .env(ENV_REFILL_PER_SEC, "1000000");
    let mut server = Server::start_in(root, opts).unwrap_or_else(|f| panic!("{}", f.stderr));
    let mut acked: Vec<(String, String)> = Vec::new(); // (event id, sha256 of body)
    let mut refused: HashSet<String> = HashSet::new(); // sha256 of refused bodies
    let mut n = 0usize;
    let accept = |server: &Server, acked: &mut Vec<(String, String)>, n: &mut usize| {
        *n += 1;
        let body = format!("ok-{n}");
        let r = post_marked(server, &body);
        let (id, _) = accepted(&r);
        acked.push((id, sha256_hex(body.as_bytes())));
    };
    for _ in 0..5 {
        accept(&server, &mut acked, &mut n);
    }
    assert_eq!(readyz(&server).status, 200);

    for mode in [
        "enospc",
        "eio-write",
        "eio-sync",
        "short-write",
        "enospc-roll",
    ] {
        let body_len = if mode == "enospc-roll" {
            // Fill until a segment rolls over, then to ~61 of its ~62 16-KiB records: the next
            // (60 KiB) event needs a new segment, whose allocation fails.
            let big = "x".repeat(16 << 10);
            let before = segments(&server.wal_dir()).len();
            let fill = |acked: &mut Vec<(String, String)>, i: usize| {
                let body = format!("fill-{i}-{big}");
                let (id, _) = accepted(&server.post("/webhooks/faults", body.as_bytes()));
                acked.push((id, sha256_hex(body.as_bytes())));
            };
            let mut i = 0;
            while segments(&server.wal_dir()).len() == before && i < 200 {
                fill(&mut acked, i);
                i += 1;
            }
            assert!(i < 200, "no rollover after {i} events of 16 KiB");
            for j in 0..60 {
                fill(&mut acked, 1000 + j);
            }
            60 << 10
        } else {
            0
        };
        let segments_before = segments(&server.wal_dir()).len();
        fs::write(&control, mode.trim_end_matches("-roll")).unwrap();
        for i in 0..REFUSED_PER_FAULT {
            let body = format!("refused-{mode}-{i}-{}", "y".repeat(body_len));
            let r = post_marked(&server, &body);
            assert_refused_unavailable(&r, mode);
            refused.insert(sha256_hex(body.as_bytes()));
        }
        let ready = readyz(&server);
        assert_eq!(ready.status, 503, "{mode}: readyz {}", ready.text());
        assert!(
            ready.text().contains("wal_unavailable"),
            "{mode}: readyz {}",
            ready.text()
        );
        // The fault clears: the log's probe (at most a second later, the only retry while the
        // log is unhealthy) makes the same process ready, and it accepts again.
        fs::write(&control, "off").unwrap();
        assert!(
            wait_until(Duration::from_secs(5), || readyz(&server).status == 200),
            "{mode}: not ready after the fault cleared: {}",
            readyz(&server).text()
        );
        accept(&server, &mut acked, &mut n);
        for _ in 0..3 {
            accept(&server, &mut acked, &mut n);
        }
        if mode == "enospc-roll" {
            let body = "z".repeat(60 << 10);
            let (id, _) = accepted(&server.post("/webhooks/faults", body.as_bytes()));
            acked.push((id, sha256_hex(body.as_bytes())));
            assert_eq!(
                segments(&server.wal_dir()).len(),
                segments_before + 1,
                "the 60 KiB event should have needed exactly one new segment (a failed roll \
                 must not leave its file behind)"
            );
        }
    }
    let injected = server.stderr().matches("failpoint ").count();
    server.stop();

    assert_wal_clean(&server.data_dir());
    let events = wal_inspect(&server.data_dir());
    let in_wal: Vec<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
    let want: Vec<&str> = acked.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        in_wal, want,
        "the WAL must hold exactly the acknowledged events, in order"
    );
    for (e, (_, sha)) in events.iter().zip(&acked) {
        assert_eq!(&e.body_sha256, sha, "{}: stored body differs", e.event_id);
        assert!(
            !refused.contains(&e.body_sha256),
            "a refused event is in the WAL"
        );
    }
    // And a restart recovers the same log.
    server.restart();
    accepted(&server.post("/webhooks/faults", b"after restart"));
    server.stop();
    assert_wal_clean(&server.data_dir());
    eprintln!(
        "faults: {} modes, {} refused requests, {injected} faults injected, {} events acked",
        5,
        refused.len(),
        acked.len()
    );
    // Each mode's first refused request meets its fault; the others are refused without a
    // write (an unhealthy log is retried by its probe only, once a second).
    assert!(injected >= 5, "only {injected} faults injected");
    assert!(
        injected < 5 * REFUSED_PER_FAULT,
        "{injected} faults injected: the refused requests still wrote"
    );
}

/// The pump never drops: while its in-memory window is full and the log cannot be opened for
/// read-back (`emfile-readback`: `EMFILE`, as at the descriptor limit), the events stay pending
/// and the open is retried (counted); once it opens, every event is delivered, each once.
/// Before, the event that overflowed the window (and every later one while the open failed)
/// was logged and dropped from memory, and the done cursor moved past it.
#[test]
fn a_read_back_that_cannot_be_opened_keeps_the_events_pending_and_retries() {
    use crate::downstream::{Behavior, Downstream};
    const EVENTS: usize = 4400;
    let root = temp_root();
    let control = root.path().join("failpoints");
    fs::write(&control, "emfile-readback").unwrap();
    let ds = Downstream::start(Behavior::default());
    ds.hold(true);
    let uri = ds.uri("/sink");
    let toml = format!(
        "[orchestrator]\npumps = {{ max_outstanding = 4 }}\n\
         [[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n\n\
         [[destinations]]\nuri = \"{uri}\"\ntimeout = \"120s\"\n"
    );
    let opts = Opts::config(&toml)
        .workers(1)
        .env("SLUICE_FAILPOINTS", path_str(&control))
        .env(ENV_GLOBAL_CAPACITY, "1000000")
        .env(ENV_PER_SOURCE_CAPACITY, "1000000")
        .env(ENV_REFILL_PER_SEC, "1000000");
    let server = Server::start_in(root, opts).unwrap_or_else(|f| panic!("{}", f.stderr));
    let addr = server.addr();
    let ids: Vec<String> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr).expect("connect");
                (0..EVENTS / 4)
                    .map(|i| {
                        let body = format!("{{\"t\":{t},\"i\":{i}}}");
                        accepted(&c.post("/hooks/t", body.as_bytes(), &[])).0
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .flat_map(|h| h.join().expect("client"))
        .collect();
    assert_eq!(ids.len(), EVENTS);
    let metric = |name: &str| sample_value(&scrape(&server).1, name, &[]);
    assert!(metric("sluice_pump_window_overflows_total") >= 1.0);
    // Retried with backoff while the fault lasts (10 ms doubling: several tries in a second).
    let retried = wait_until(Duration::from_secs(10), || {
        metric("sluice_pump_readback_open_failures_total") >= 3.0
    });
    let stderr = server.stderr();
    fs::write(&control, "").unwrap();
    ds.hold(false);
    let unique = |seen: &[crate::downstream::Seen]| {
        seen.iter()
            .map(|s| s.webhook_id.clone())
            .collect::<HashSet<_>>()
            .len()
    };
    let all = ds.wait(Duration::from_secs(120), |seen| unique(seen) == EVENTS);
    let seen = ds.seen();
    assert!(
        all,
        "{} of {EVENTS} delivered; stderr:\n{}",
        unique(&seen),
        server.stderr()
    );
    let delivered: HashSet<&str> = seen.iter().map(|s| s.webhook_id.as_str()).collect();
    assert!(ids.iter().all(|id| delivered.contains(id.as_str())));
    assert_eq!(seen.len(), EVENTS, "an event was delivered twice");
    assert!(retried, "read-back opens were not retried: {stderr}");
    assert_eq!(
        stderr.matches("its events stay pending").count(),
        1,
        "one log line per run of failures: {stderr}"
    );
    assert!(server.stderr().contains("back again after"));
}
