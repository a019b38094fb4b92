//! The stream's retention (issue 41 item 4, README "Several nodes"): a real sluice node with
//! `[replication]` and 1 MiB segments on a real 3-node JetStream cluster on loopback.
//!
//! After many events are delivered, the stream holds about one segment per log, although the
//! node keeps its done segments locally (`dispatch.retention` stays at its 7 days); the dead
//! letters stored early are carried forward, not lost; a restore from the purged stream begins
//! each log where its records are retired and brings back every dead letter; the node restarts
//! on its own disk and goes on.
//!
//! `SLUICE_IT_RETENTION_EVENTS` sets how many events (default 24,000; the figure is
//! 100,000: `SLUICE_IT_RETENTION_EVENTS=100000 cargo test --test it replication_retention`).
//!
//! Without a nats-server >= 2.11 the test is skipped by name (a failure under
//! `SLUICE_REQUIRE_TOOLS=1`); `scripts/test.sh` provisions it. Every wait is bounded.

use std::time::{Duration, Instant};

use async_nats::jetstream;

use crate::dispatch::dlq_list;
use crate::downstream::{Behavior, Downstream};
use crate::replication::restore_cli;
use crate::replication_commit::{manifest, metric, opts, ready_cluster, STREAM};
use crate::support::*;

const SEGMENT: u64 = 1 << 20;

/// The bytes the stream holds.
fn stream_bytes(cluster: &NatsCluster) -> u64 {
    let urls = cluster.urls();
    block_on(async move {
        let js = jetstream::new(async_nats::connect(urls).await.expect("connect"));
        let mut s = js.get_stream(STREAM).await.expect("the stream");
        s.info().await.expect("stream info").state.bytes
    })
}

/// Posts `n` events of about 1 KiB on 8 connections, each retried after a `503` as a sender
/// does (a JetStream acknowledgement can take longer than `ack_timeout` on this machine);
/// returns how many were accepted and how many `503`s came first.
fn post_many(server: &Server, n: usize) -> (usize, usize) {
    let addr = server.addr();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr).expect("connect");
                c.set_read_timeout(Duration::from_secs(10));
                let (mut ok, mut refused) = (0, 0);
                for i in (t..n).step_by(8) {
                    let body = format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(1000));
                    for attempt in 0.. {
                        let r = c.post("/hooks/t", body.as_bytes(), &[]);
                        if r.status == 202 {
                            ok += 1;
                            break;
                        }
                        assert!(r.status == 503 && attempt < 50, "event {i}: {}", r.text());
                        refused += 1;
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
                (ok, refused)
            })
        })
        .collect();
    let each = threads.into_iter().map(|t| t.join().unwrap());
    each.fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

#[test]
fn after_many_events_the_stream_holds_about_a_segment_per_log_and_restores() {
    let Some(cluster) = ready_cluster(3) else {
        return;
    };
    let sink = Downstream::start(Behavior::default());
    let refusing = Downstream::start(Behavior {
        status: 400,
        ..Behavior::default()
    });
    let m = manifest(&cluster, "node-t", 3, &sink.uri("/sink")).replace(
        "[replication]",
        &format!(
            "[[triggers]]\nid = \"dead\"\nprovider = \"p\"\npath = \"/hooks/dead\"\n\
             handler = \"{}\"\n\n[[destinations]]\nuri = \"{}\"\nmax_in_flight = 2\n\n\
             [wal]\nsegment_bytes = {SEGMENT}\n\n[replication]",
            refusing.uri("/no"),
            refusing.uri("/no")
        ),
    );
    let mut server = Server::start(opts(&m).workers(2));
    // Dead letters first: they sit in the oldest messages.
    for i in 0..5 {
        let r = server.post("/hooks/dead", format!("{{\"d\":{i}}}").as_bytes());
        assert_eq!(r.status, 202, "{}", r.text());
    }
    assert!(
        wait_until(Duration::from_secs(20), || dlq_count(&server) == 5),
        "5 dead letters"
    );
    let n = std::env::var("SLUICE_IT_RETENTION_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24_000);
    let t0 = Instant::now();
    let (accepted, refused) = post_many(&server, n);
    assert_eq!(accepted, n);
    let posted = t0.elapsed();
    let done = || {
        let v = server.get("/api/v1/ledger").json();
        v["triggers"]["t"]["pending"] == 0 && v["triggers"]["t"]["accepted"] == n as u64
    };
    assert!(
        wait_until(Duration::from_secs(60), done),
        "not all delivered"
    );
    let written = stream_bytes(&cluster);
    // Two logs: about one segment each (the active one, never dropped), with the last messages
    // and the dead letters' frames.
    let bound = 2 * SEGMENT * 3 / 2;
    let t = Instant::now();
    let mut held = stream_bytes(&cluster);
    while held > bound {
        assert!(
            t.elapsed() < Duration::from_secs(40),
            "the stream still holds {held} bytes (bound {bound}); {}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(250));
        held = stream_bytes(&cluster);
    }
    let purged = metric(&server, "sluice_replication_purged_messages_total");
    eprintln!(
        "{n} events of ~1 KiB posted in {posted:?} ({refused} 503s retried); the stream held \
         {written} bytes when all were delivered and {held} bytes {:?} later (bound {bound}); \
         {purged} messages purged",
        t.elapsed()
    );
    assert!(purged > 0.0);
    let retained = metric(&server, "sluice_replication_retained_messages");
    assert!(
        retained >= 1.0,
        "the subjects' last messages are remembered: {retained}"
    );
    // A restore from what is left: each log begins where its records are retired, and every
    // dead letter is there (carried forward).
    let root = temp_root();
    let config = root.path().join("restore.toml");
    std::fs::write(&config, &m).unwrap();
    let target = root.path().join("restored");
    let out = restore_cli(&config, "node-t", &target);
    assert!(out.status.success(), "restore:\n{}", out.all());
    eprintln!("{}", out.stdout);
    assert!(
        out.stdout
            .lines()
            .any(|l| l.contains("LSN ") && !l.contains("LSN 1..=")),
        "a log begins above LSN 1:\n{}",
        out.stdout
    );
    assert_eq!(dlq_list(&target).len(), 5, "every dead letter restored");
    let events = wal_inspect(&target);
    let pending = events.iter().filter(|e| e.outcome == "pending").count();
    assert_eq!(pending, 0, "nothing pending in the restored logs");
    // The node itself goes on after a restart on its own disk.
    server.stop();
    server.restart();
    let r = server.post("/hooks/t", b"{}");
    assert_eq!(r.status, 202, "{}", r.text());
}

fn dlq_count(server: &Server) -> usize {
    let (_, samples) = scrape(server);
    sample_value(&samples, "sluice_dlq_entries", &[]) as usize
}
