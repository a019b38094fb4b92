//! Online bulk DLQ replay keeps the cores' loops free and commits each entry's removal with
//! the next commit (`wal::group::Item::Release`: one group, one directory sync, on the commit
//! helper; issue 39 item 3, issue 40 item 4).
//!
//! - 2,500 dead letters replayed in bulk while `/healthz` is probed on connections on both
//!   cores: every probe answers within 200 ms, and each entry is delivered once.
//! - SIGKILL 0–200 ms after a bulk replay's `202`, six rounds: after a restart and a second
//!   replay of what stayed in the DLQ, no entry is replayed twice (two distinct replay events
//!   of one entry). Without start-up's removal of the entries whose replays are pending in the
//!   log, up to the replays of one commit batch were (`wal.max_batch`: measured 129 in one
//!   round of six).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::dispatch::{big_buckets, dlq_list, server_counts_dlq};
use crate::downstream::{Behavior, Downstream};
use crate::support::*;

const AUTH: [(&str, &str); 1] = [("Authorization", "Bearer s3cret-token")];

/// A 2-worker server whose trigger dead-letters `n` events at a downstream answering 400 (then
/// fixed), with `wal` settings; the server and the downstream.
fn dead_lettered(n: usize, wal: &str) -> (Server, Downstream) {
    let ds = Downstream::start(Behavior {
        status: 400,
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let cfg = crate::dispatch::manifest(&uri, "max_in_flight = 64", wal);
    let opts = big_buckets(Opts::config(&cfg))
        .workers(2)
        .env("SLUICE_ADMIN_TOKEN", "s3cret-token");
    let server = Server::start(opts);
    std::thread::scope(|s| {
        for k in 0..8 {
            let server = &server;
            s.spawn(move || {
                let mut c = server.client();
                for i in (k..n).step_by(8) {
                    accepted(&c.post("/hooks/t", format!("{{\"n\":{i}}}").as_bytes(), &[]));
                }
            });
        }
    });
    assert!(
        wait_until(Duration::from_secs(120), || server_counts_dlq(&server, n)),
        "only {} of {n} dead-lettered",
        dlq_list(&server.data_dir()).len()
    );
    ds.set(Behavior::default());
    (server, ds)
}

/// Replays the whole DLQ in bulk calls (waiting out `503 queue_full`); the entries handed over
/// and the slowest call.
fn replay_all(server: &Server) -> (u64, Duration) {
    let mut c = server.client();
    c.set_read_timeout(Duration::from_secs(60));
    let (mut replayed, mut slowest) = (0, Duration::ZERO);
    for _ in 0..200 {
        let t = Instant::now();
        let r = c.post("/admin/dlq/replay", b"", &AUTH);
        slowest = slowest.max(t.elapsed());
        eprintln!(
            "replay call: {} in {:?}: {}",
            r.status,
            t.elapsed(),
            r.text()
        );
        assert!(matches!(r.status, 200 | 202 | 503), "{}", r.text());
        let v = r.json();
        replayed += v["replayed"].as_u64().unwrap_or(0);
        if r.status == 200 && v["remaining"] == 0 {
            return (replayed, slowest);
        }
        if r.status == 503 {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    panic!("the DLQ never emptied");
}

/// Per replayed entry (`replay_of`), the distinct replay events delivered at `ds`: an entry
/// replayed twice has two (a redelivery of one event after a crash, at least once, is the same
/// event and counts once).
fn deliveries_by_entry(ds: &Downstream) -> HashMap<String, usize> {
    let mut events: HashMap<String, HashSet<String>> = HashMap::new();
    for s in ds.seen().iter().filter(|s| s.status == 200) {
        if let Some(of) = &s.replay_of {
            events
                .entry(of.clone())
                .or_default()
                .insert(s.webhook_id.clone());
        }
    }
    events.into_iter().map(|(k, v)| (k, v.len())).collect()
}

#[test]
fn a_bulk_replay_of_2500_entries_keeps_probes_under_200ms_and_delivers_each_once() {
    const N: usize = 2_500;
    let (server, ds) = dead_lettered(N, "");
    // Probes on 4 connections (SO_REUSEPORT spreads them over both cores), every 5 ms each.
    let probes = HealthProbes::start(server.addr(), 4, Duration::from_millis(5));
    std::thread::sleep(Duration::from_millis(100));
    let (replayed, slowest_call) = replay_all(&server);
    assert!(
        wait_until(Duration::from_secs(120), || deliveries_by_entry(&ds).len()
            >= N),
        "{} of {N} entries delivered",
        deliveries_by_entry(&ds).len()
    );
    let (probed, worst) = probes.stop();
    eprintln!("{replayed} replayed; {probed} probes, the slowest {worst:?}");
    assert_eq!(replayed, N as u64);
    // The bound. The bulk call's listing and reads run on a reader thread and only
    // the appends on the core's loop: the slowest probe took 17 ms (io_uring) and 26 ms (mio)
    // with a fuzz campaign and a release build beside the test. With the listing on the loop
    // (debug build) it took 98–136 ms alone and up to ~220 ms beside the suite; with the
    // removals on the loop 1.1–2.3 s.
    assert!(
        worst < Duration::from_millis(200),
        "a probe took {worst:?}; the slowest replay call {slowest_call:?}"
    );
    let by_entry = deliveries_by_entry(&ds);
    assert_eq!(by_entry.len(), N);
    assert!(
        by_entry.values().all(|&n| n == 1),
        "an entry delivered twice"
    );
    assert!(wait_until(Duration::from_secs(30), || {
        let (_, s) = scrape(&server);
        sample_value(&s, "sluice_dlq_entries", &[]) == 0.0
            && sample_value(&s, "sluice_dlq_replays_in_flight", &[]) == 0.0
    }));
}

#[test]
fn sigkill_right_after_a_bulk_replays_202_replays_no_entry_twice() {
    const MAX_BATCH: usize = 256;
    const N: usize = 600;
    for round in 0..6u64 {
        let wal = format!("[wal]\nmax_batch = {MAX_BATCH}");
        let (mut server, ds) = dead_lettered(N, &wal);
        let mut c = server.client();
        let r = c.post("/admin/dlq/replay", b"", &AUTH);
        assert_eq!(r.status, 202, "{}", r.text());
        // 0–200 ms after the answer, spread over the rounds.
        std::thread::sleep(Duration::from_millis(round * 40));
        server.sigkill();
        server.restart();
        let _ = replay_all(&server);
        assert!(
            wait_until(Duration::from_secs(120), || deliveries_by_entry(&ds).len()
                >= N),
            "round {round}: {} of {N} entries delivered",
            deliveries_by_entry(&ds).len()
        );
        assert!(wait_until(Duration::from_secs(30), || {
            let (_, s) = scrape(&server);
            sample_value(&s, "sluice_wal_pending_events", &[]) == 0.0
                && sample_value(&s, "sluice_dlq_entries", &[]) == 0.0
        }));
        let twice = deliveries_by_entry(&ds)
            .values()
            .filter(|&&n| n > 1)
            .count();
        eprintln!(
            "round {round} (SIGKILL {} ms after the 202): {twice} entries delivered twice",
            round * 40
        );
        assert_eq!(twice, 0, "round {round}: {twice} entries replayed twice");
    }
}
