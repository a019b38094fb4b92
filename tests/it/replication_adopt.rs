//! Adoption (issue 41 item 3, README "Several nodes"): two real sluice nodes with `[replication]`
//! on a real 3-node JetStream cluster on loopback (`support::NatsCluster`).
//!
//! - node A under load is SIGKILLed and its data dir deleted: within `lease` + 5 s node B
//!   adopts A's logs (rebuilt from the stream) and delivers every event A acknowledged; the
//!   events delivered twice are counted and stay within A's redelivery bound;
//! - B's outcomes for A's logs are published on A's subjects: a restore of A from the stream
//!   finds every event B delivered done;
//! - A restarted on its old disk after the adoption refuses to start and names B; B's
//!   `sluice_replication_adopted_logs` and dashboard show the adopted logs; B restarted runs
//!   them again.
//!
//! Without a nats-server >= 2.11 each test is skipped by name (a failure under
//! `SLUICE_REQUIRE_TOOLS=1`); `scripts/test.sh` provisions it. Every wait is bounded.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::downstream::{Behavior, Downstream};
use crate::replication::restore_cli;
use crate::replication_commit::{manifest, metric, opts, ready_cluster, Loaders};
use crate::support::*;

/// The lease of both nodes (short: the test waits it out).
const LEASE: Duration = Duration::from_secs(3);

/// Node `node`'s manifest with [`LEASE`].
fn node(cluster: &NatsCluster, node: &str, sink: &str) -> String {
    let m = manifest(cluster, node, 3, sink);
    m.replace(
        "lease = \"6s\"",
        &format!("lease = \"{}s\"", LEASE.as_secs()),
    )
}

/// How many times the downstream received each id.
fn deliveries(sink: &Downstream) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for s in sink.seen() {
        *n.entry(s.webhook_id).or_default() += 1;
    }
    n
}

#[test]
fn a_node_killed_with_its_disk_deleted_has_every_acknowledged_event_delivered_by_its_adopter() {
    let Some(cluster) = ready_cluster(3) else {
        return;
    };
    // The destination holds its calls while A is under load (8 in flight, never answered): A
    // holds a backlog when it is killed. Released at the kill, it answers each in 10 ms.
    let sink = Downstream::start(Behavior {
        delay: Duration::from_millis(10),
        ..Behavior::default()
    });
    sink.hold(true);
    let uri = sink.uri("/sink");
    let mut a = Server::start(opts(&node(&cluster, "node-a", &uri)));
    let b = Server::start(opts(&node(&cluster, "node-b", &uri)));
    // Load on A; its 202s are the events it acknowledged.
    let loads = Loaders::start(&a, 4);
    std::thread::sleep(Duration::from_millis(1_500));
    // SIGKILL under load, then the disk goes.
    a.sigkill();
    let killed = Instant::now();
    sink.hold(false);
    let seen = loads.stop();
    std::fs::remove_dir_all(a.data_dir()).expect("delete A's data dir");
    let acknowledged: HashSet<String> = (seen.accepted.iter()).map(|(_, id)| id.clone()).collect();
    // What reached the destination before the kill: A's calls then in flight.
    let before = deliveries(&sink);
    let pending = (acknowledged.iter())
        .filter(|id| !before.contains_key(*id))
        .count();
    assert!(
        pending >= 50,
        "A acknowledged {} and had only {pending} not yet sent at its kill",
        acknowledged.len()
    );
    let within = LEASE + Duration::from_secs(5);
    loop {
        let got = deliveries(&sink);
        let missing = acknowledged
            .iter()
            .filter(|id| !got.contains_key(*id))
            .count();
        if missing == 0 {
            break;
        }
        assert!(
            killed.elapsed() < within,
            "{missing} of {} events A acknowledged not delivered {within:?} after its kill; \
             B's stderr:\n{}",
            acknowledged.len(),
            b.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let all_delivered = killed.elapsed();
    let got = deliveries(&sink);
    let twice: usize = (acknowledged.iter())
        .map(|id| got[id].saturating_sub(1))
        .sum();
    // A's redelivery bound (`dispatch::pump`, "Redeliveries"): jobs out plus terminal
    // outcomes awaiting their commit, max_outstanding + cores × max(max_outstanding, 64).
    let bound = 64 + 2 * 64;
    assert!(
        twice <= bound,
        "{twice} duplicates, above A's bound {bound}"
    );
    let t = Instant::now();
    while !b.stderr().contains("adopted node node-a") {
        assert!(t.elapsed() < Duration::from_secs(5), "{}", b.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(b.stderr().contains("restored log core-"), "{}", b.stderr());
    for line in b.stderr().lines().filter(|l| l.contains("replication: ")) {
        eprintln!("B: {line}");
    }
    assert!(metric(&b, "sluice_replication_adopted_logs") >= 1.0);
    eprintln!(
        "{} events A acknowledged ({pending} not yet sent at its SIGKILL) all delivered \
         {all_delivered:?} after the kill (lease {LEASE:?}); {twice} delivered twice (bound \
         {bound})",
        acknowledged.len()
    );
}

#[test]
fn a_node_back_on_its_old_disk_after_the_adoption_refuses_to_start_and_names_the_adopter() {
    let Some(cluster) = ready_cluster(3) else {
        return;
    };
    // The downstream holds A's calls: its events stay pending on A.
    let sink = Downstream::start(Behavior::default());
    sink.hold(true);
    let uri = sink.uri("/sink");
    let mut a = Server::start(opts(&node(&cluster, "node-a", &uri)));
    let b = Server::start(opts(&node(&cluster, "node-b", &uri)));
    let mut ids = HashSet::new();
    for i in 0..30 {
        let r = a.post("/hooks/t", format!("{{\"i\":{i}}}").as_bytes());
        assert_eq!(r.status, 202, "{}", r.text());
        ids.insert(accepted(&r).0);
    }
    a.sigkill();
    sink.hold(false);
    let t = Instant::now();
    while !ids.iter().all(|id| deliveries(&sink).contains_key(id)) {
        assert!(
            t.elapsed() < LEASE + Duration::from_secs(10),
            "A's pending events not delivered by B; B's stderr:\n{}",
            b.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // B's outcomes went to A's subjects: a restore of A from the stream finds every one of
    // those events delivered (B's `Done` records follow A's records in A's logs).
    let root = temp_root();
    let config = root.path().join("restore.toml");
    std::fs::write(&config, node(&cluster, "node-b", &uri)).unwrap();
    let target = root.path().join("a-again");
    let t = Instant::now();
    let delivered_in_stream = loop {
        let _ = std::fs::remove_dir_all(&target);
        let out = restore_cli(&config, "node-a", &target);
        assert!(out.status.success(), "restore of node-a:\n{}", out.all());
        let events = wal_inspect(&target);
        let done = (events.iter())
            .filter(|e| ids.contains(&e.event_id) && e.outcome == "delivered")
            .count();
        if done == ids.len() || t.elapsed() > Duration::from_secs(10) {
            break done;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        delivered_in_stream,
        ids.len(),
        "B's outcomes in A's subjects"
    );
    // The dashboard names the adopted node.
    let state = b.get("/api/v1/state").json();
    let adopted = &state["replication"]["adopted"];
    assert_eq!(adopted[0]["node"], "node-a", "{state}");
    // A on its old disk: refused, naming B; it serves nothing.
    let f = a
        .try_restart()
        .expect_err("A started after its logs were adopted");
    assert!(
        f.stderr.contains("adopted by node \"node-b\""),
        "{}",
        f.stderr
    );
    assert_ne!(f.status.and_then(|s| s.code()), Some(0));
    // B restarted runs the adopted logs again from its disk, without rebuilding them.
    let mut b = b;
    b.stop();
    b.try_restart().expect("B restarts");
    assert!(metric(&b, "sluice_replication_adopted_logs") >= 1.0);
    let r = b.post("/hooks/t", b"{}");
    assert_eq!(r.status, 202, "{}", r.text());
}
