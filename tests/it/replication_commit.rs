//! Replicated commit (issue 41, README "Several nodes"): a real sluice node with `[replication]`
//! against a real 3-node JetStream cluster on loopback (`support::NatsCluster`).
//!
//! - a 202 comes only once JetStream holds the batch: every accepted event is in the stream
//!   (decoded with the node's own message format) and delivered;
//! - with one nats-server lost, ingest goes on; with two (no quorum), no 202 at all, `503
//!   replication_unavailable` and `/readyz` says so; with one back, ingest recovers by itself;
//!   nothing acknowledged is lost and every accepted event is delivered;
//! - a node whose subject another wrote is fenced: `503 replication_fenced`, a log line naming
//!   the subject and both sequences, and it never writes the subject again;
//! - start-up refuses a stream with fewer replicas, and a `max_payload` below the largest record.
//!
//! Without a nats-server >= 2.11 each test is skipped by name (a failure under
//! `SLUICE_REQUIRE_TOOLS=1`); `scripts/test.sh` provisions it. Every wait is bounded.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use sluice::replication::fence::number_in;
use sluice::replication::message::decode;
use sluice::wal::{decode_payload, Record};

use crate::downstream::{Behavior, Downstream};
use crate::support::*;

pub(crate) const STREAM: &str = "sluice";
/// Elections after a lost nats-server take a few seconds; ingest must be back well within.
pub(crate) const RECOVERS_WITHIN: Duration = Duration::from_secs(30);

/// A manifest for node `node` on `cluster`, one trigger `t` delivering to `sink`.
pub(crate) fn manifest(cluster: &NatsCluster, node: &str, replicas: usize, sink: &str) -> String {
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "[server]\nmax_body_bytes = 65536\n\n\
         [[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{sink}\"\n\n\
         [[destinations]]\nuri = \"{sink}\"\nmax_in_flight = 8\n\n\
         [replication]\nnats = [{}]\nstream = \"{STREAM}\"\nreplicas = {replicas}\n\
         node = \"{node}\"\nack_timeout = \"1s\"\nlease = \"6s\"\n",
        urls.join(", ")
    )
}

/// Open buckets: the tests measure replication, not admission.
pub(crate) fn opts(manifest: &str) -> Opts {
    let big = "1000000000";
    Opts::config(manifest)
        .env(ENV_GLOBAL_CAPACITY, big)
        .env(ENV_PER_SOURCE_CAPACITY, big)
        .env(ENV_REFILL_PER_SEC, big)
}

pub(crate) fn ready_cluster(n: usize) -> Option<NatsCluster> {
    let cluster = NatsCluster::start(n)?;
    assert!(
        cluster.wait_ready(NATS_READY_TIMEOUT),
        "the JetStream cluster was not ready; logs:\n{}",
        cluster.log_tails()
    );
    Some(cluster)
}

/// Every message of `node`'s log subjects (not their fence subjects, `replication::fence`)
/// the stream holds, in stream order. A message it no longer has (purged, deleted) is skipped;
/// any other error (a leader election after a lost server) is retried within
/// `RECOVERS_WITHIN`.
fn node_messages(cluster: &NatsCluster, node: &str) -> Vec<jetstream::message::StreamMessage> {
    let urls = cluster.urls();
    let prefix = format!("{STREAM}.{node}.");
    block_on(async move {
        let client = async_nats::connect(urls).await.expect("connect");
        let js = jetstream::new(client);
        let deadline = Instant::now() + RECOVERS_WITHIN;
        let stream = loop {
            match js.get_stream(STREAM).await {
                Ok(s) => break s,
                Err(e) => assert!(Instant::now() < deadline, "stream {STREAM}: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let mut out = Vec::new();
        let last = stream.cached_info().state.last_sequence;
        for seq in 1..=last {
            let m = loop {
                match stream.get_raw_message(seq).await {
                    Ok(m) => break Some(m),
                    Err(e)
                        if e.kind() == jetstream::stream::RawMessageErrorKind::NoMessageFound =>
                    {
                        break None
                    }
                    Err(e) => assert!(Instant::now() < deadline, "sequence {seq}: {e}"),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            let log_subject = |m: &jetstream::message::StreamMessage| {
                (m.subject.strip_prefix(&prefix)).is_some_and(|rest| !rest.contains('.'))
            };
            out.extend(m.filter(log_subject));
        }
        out
    })
}

/// Every event id in the stream's messages of `node`, read back through the node's own
/// message format.
fn ids_in_stream(cluster: &NatsCluster, node: &str) -> HashSet<String> {
    let mut ids = HashSet::new();
    for m in node_messages(cluster, node) {
        let d = decode(&m.payload).unwrap_or_else(|e| panic!("sequence {}: {e}", m.sequence));
        for f in &d.frames {
            for (_, records) in &f.parts {
                for r in records {
                    if let Ok(Record::Event(ev)) = decode_payload(r.kind, r.payload) {
                        ids.insert(ev.event_id);
                    }
                }
            }
        }
    }
    ids
}

/// The event ids a downstream received.
pub(crate) fn delivered(sink: &Downstream) -> HashSet<String> {
    sink.seen().into_iter().map(|s| s.webhook_id).collect()
}

/// Waits until `sink` has every id of `want`, at most `within`.
fn await_delivered(sink: &Downstream, want: &HashSet<String>, within: Duration) {
    let t = Instant::now();
    loop {
        let got = delivered(sink);
        let missing: Vec<_> = want.difference(&got).collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            t.elapsed() < within,
            "{} accepted events not delivered within {within:?}, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(3)]
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a load thread saw: each answer's reason, and the ids of the 202s.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) accepted: Vec<(Instant, String)>,
    pub(crate) refused: Vec<(Instant, String)>,
}

/// `n` connections posting events ([`load`]) until stopped.
pub(crate) struct Loaders {
    stop: Arc<AtomicBool>,
    pub(crate) seen: Arc<Mutex<Seen>>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl Loaders {
    pub(crate) fn start(server: &Server, n: usize) -> Loaders {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let handles = (0..n)
            .map(|_| load(server, stop.clone(), seen.clone()))
            .collect();
        Loaders {
            stop,
            seen,
            handles,
        }
    }

    /// Stops and joins them; what they saw.
    pub(crate) fn stop(self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            h.join().unwrap();
        }
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

/// Posts events one after another on one connection until `stop`, recording each answer.
pub(crate) fn load(
    server: &Server,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
) -> std::thread::JoinHandle<()> {
    let addr = server.addr();
    std::thread::spawn(move || {
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let Ok(mut c) = Client::connect(addr) else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            c.set_read_timeout(Duration::from_secs(10));
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let body = format!("{{\"n\":{i}}}");
                let Ok(r) = c.try_post("/hooks/t", body.as_bytes(), &[]) else {
                    break;
                };
                let now = Instant::now();
                let mut s = seen.lock().unwrap();
                match r.status {
                    202 => s.accepted.push((now, accepted(&r).0)),
                    503 => s
                        .refused
                        .push((now, r.json()["reason"].as_str().unwrap_or("").into())),
                    other => panic!("unexpected {other}: {}", r.text()),
                }
                drop(s);
                if r.status == 503 {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    })
}

pub(crate) fn metric(server: &Server, name: &str) -> f64 {
    let (_, samples) = scrape(server);
    samples
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.value)
        .sum()
}

#[test]
fn every_202_is_in_the_stream_and_delivered_and_the_node_reports_replication_up() {
    let Some(cluster) = ready_cluster(3) else {
        return;
    };
    let sink = Downstream::start(Behavior::default());
    let server = Server::start(opts(&manifest(&cluster, "node-a", 3, &sink.uri("/sink"))));
    let mut ids = HashSet::new();
    for i in 0..200 {
        let r = server.post("/hooks/t", format!("{{\"i\":{i}}}").as_bytes());
        assert_eq!(r.status, 202, "{}", r.text());
        ids.insert(accepted(&r).0);
    }
    await_delivered(&sink, &ids, RECOVERS_WITHIN);
    let in_stream = ids_in_stream(&cluster, "node-a");
    let missing: Vec<_> = ids.difference(&in_stream).collect();
    assert!(missing.is_empty(), "202s not in the stream: {missing:?}");
    assert_eq!(metric(&server, "sluice_replication_up"), 1.0);
    assert!(metric(&server, "sluice_replication_ack_seconds_count") >= 1.0);
    assert_eq!(server.get("/readyz").status, 200);
    let state = server.get("/api/v1/state").json();
    let rep = &state["replication"];
    assert_eq!(rep["state"], "up", "{rep}");
    assert!(rep["acks"].as_u64().unwrap() >= 1, "{rep}");
    assert_eq!(rep["adopted_logs"], 0, "{rep}");
}

/// The deepest pipeline (16 messages in flight, each fence subject used again right after its
/// message's ack) under load on an R3 stream: no publish is refused, so no take is needed, and
/// every subject stays in log order.
#[test]
fn sixteen_messages_in_flight_need_no_take_and_keep_log_order() {
    let Some(cluster) = ready_cluster(3) else {
        return;
    };
    let sink = Downstream::start(Behavior::default());
    let m = manifest(&cluster, "node-p", 3, &sink.uri("/sink"))
        .replace("lease = \"6s\"\n", "lease = \"6s\"\nmax_inflight = 16\n");
    assert!(m.contains("max_inflight = 16"));
    let server = Server::start(opts(&m));
    let loaders = Loaders::start(&server, 16);
    std::thread::sleep(Duration::from_secs(3));
    let s = loaders.stop();
    assert!(
        s.accepted.len() > 100,
        "too little load: {}",
        s.accepted.len()
    );
    assert!(
        s.refused.is_empty(),
        "refused: {:?}",
        &s.refused[..s.refused.len().min(5)]
    );
    let ids: HashSet<String> = s.accepted.iter().map(|(_, id)| id.clone()).collect();
    await_delivered(&sink, &ids, RECOVERS_WITHIN);
    assert_eq!(
        metric(&server, "sluice_replication_retakes_total"),
        0.0,
        "{}",
        server.stderr()
    );
    let in_stream = ids_in_stream(&cluster, "node-p");
    assert!(ids.is_subset(&in_stream), "202s not in the stream");
    assert_in_log_order(&cluster, "node-p");
    eprintln!("{} accepted with up to 16 messages in flight", ids.len());
}

#[test]
fn one_nats_server_lost_ingest_goes_on_two_lost_no_202_and_it_recovers_by_itself() {
    let Some(mut cluster) = ready_cluster(3) else {
        return;
    };
    let sink = Downstream::start(Behavior::default());
    let server = Server::start(opts(&manifest(&cluster, "node-a", 3, &sink.uri("/sink"))));
    let loaders = Loaders::start(&server, 4);
    let seen = loaders.seen.clone();
    let accepted_since = |t: Instant| {
        let s = seen.lock().unwrap();
        s.accepted.iter().filter(|(at, _)| *at > t).count()
    };
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        accepted_since(Instant::now() - Duration::from_secs(1)) > 0,
        "no load"
    );

    // One of three lost: a quorum remains; after any election, 202s go on.
    cluster.kill(0);
    let one_lost = Instant::now();
    let t = Instant::now();
    while accepted_since(one_lost + Duration::from_millis(10)) < 50 {
        assert!(
            t.elapsed() < RECOVERS_WITHIN,
            "ingest stopped with one nats-server lost"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "one nats-server lost: 50 more 202s within {:?}",
        t.elapsed()
    );

    // Two lost: no quorum. After one ack_timeout (1 s) for what was on its way, no 202 at all.
    cluster.kill(1);
    let two_lost = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let quiet_from = two_lost + Duration::from_millis(1500);
    let window_end = Instant::now();
    {
        let s = seen.lock().unwrap();
        let late: Vec<_> = (s.accepted.iter())
            .filter(|(at, _)| *at > quiet_from && *at < window_end)
            .collect();
        assert!(
            late.is_empty(),
            "202s without a JetStream quorum: {}",
            late.len()
        );
        let reasons: HashSet<&str> = (s.refused.iter())
            .filter(|(at, _)| *at > quiet_from)
            .map(|(_, r)| r.as_str())
            .collect();
        assert_eq!(
            reasons,
            HashSet::from(["replication_unavailable"]),
            "503 reasons"
        );
    }
    let ready = server.get("/readyz");
    assert_eq!(ready.status, 503);
    assert!(
        ready.text().contains("replication_unavailable"),
        "{}",
        ready.text()
    );
    assert_eq!(metric(&server, "sluice_replication_up"), 0.0);

    // One back: a quorum again; ingest recovers by itself.
    cluster.restart(1);
    let back = Instant::now();
    while accepted_since(back) < 20 {
        assert!(
            back.elapsed() < RECOVERS_WITHIN,
            "ingest did not recover within {RECOVERS_WITHIN:?} of a quorum; logs:\n{}",
            cluster.log_tails()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("quorum back: 202s again after {:?}", back.elapsed());
    let seen = loaders.stop();

    // Nothing acknowledged was lost: every 202 is in the stream and delivered.
    let ids: HashSet<String> = seen.accepted.iter().map(|(_, id)| id.clone()).collect();
    await_delivered(&sink, &ids, RECOVERS_WITHIN);
    let in_stream = ids_in_stream(&cluster, "node-a");
    let missing: Vec<_> = ids.difference(&in_stream).collect();
    assert!(
        missing.is_empty(),
        "{} 202s not in the stream (purged {}); {}",
        missing.len(),
        metric(&server, "sluice_replication_purged_messages_total"),
        server.stderr()
    );
    eprintln!("{} accepted, all in the stream and delivered", ids.len());
    assert!(
        metric(&server, "sluice_replication_retakes_total") >= 1.0,
        "the outage made the node take its subject again"
    );
    assert_in_log_order(&cluster, "node-a");
}

/// Each of `node`'s subjects, read in stream order, is one gap-free sequence: message numbers
/// follow on by one, and each log's records come in LSN order with no LSN twice or skipped
/// (what a take after a failed pipelined publish must leave, `replication::fence`).
fn assert_in_log_order(cluster: &NatsCluster, node: &str) {
    let mut numbers: std::collections::HashMap<String, u64> = Default::default();
    let mut lsns: std::collections::HashMap<u16, u64> = Default::default();
    for m in node_messages(cluster, node) {
        let seq = m.sequence;
        let n = number_in(&m.headers).expect("numbered");
        if let Some(prev) = numbers.insert(m.subject.to_string(), n) {
            assert_eq!(
                n,
                prev + 1,
                "{}: message {n} after {prev} (seq {seq})",
                m.subject
            );
        }
        let d = decode(&m.payload).unwrap_or_else(|e| panic!("sequence {seq}: {e}"));
        for f in &d.frames {
            for (log, records) in &f.parts {
                for r in records {
                    if let Some(prev) = lsns.insert(*log, r.lsn) {
                        assert_eq!(r.lsn, prev + 1, "log {log}: LSN {} after {prev}", r.lsn);
                    }
                }
            }
        }
    }
    assert!(!numbers.is_empty(), "no message of {node}");
}

#[test]
fn a_node_whose_subject_another_wrote_is_fenced_and_accepts_nothing_more() {
    let Some(cluster) = ready_cluster(1) else {
        return;
    };
    let sink = Downstream::start(Behavior::default());
    let server =
        Server::start(opts(&manifest(&cluster, "node-f", 1, &sink.uri("/sink"))).workers(1));
    let r = server.post("/hooks/t", b"{}");
    assert_eq!(r.status, 202, "{}", r.text());
    // Another node takes this node's subject as an adopter does: a marker on each of its
    // fence subjects (`replication::fence`).
    let subject = format!("{STREAM}.node-f.core-0");
    let urls = cluster.urls();
    let s2 = subject.clone();
    block_on(async move {
        let js = jetstream::new(async_nats::connect(urls).await.unwrap());
        for k in 0..sluice::replication::fence::SLOTS {
            let slot = sluice::replication::fence::slot_subject(&s2, k);
            js.publish(slot, "adopted".into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    });
    let r = server.post("/hooks/t", b"{}");
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["reason"], "replication_fenced", "{}", r.text());
    let r = server.post("/hooks/t", b"{}");
    assert_eq!(
        r.json()["reason"],
        "replication_fenced",
        "refused at admission now"
    );
    assert!(server.get("/readyz").text().contains("replication_fenced"));
    assert_eq!(metric(&server, "sluice_replication_fenced_total"), 1.0);
    let err = server.stderr();
    let line = err
        .lines()
        .find(|l| l.contains("FENCED"))
        .expect("a FENCED log line");
    assert!(line.contains(&subject), "{line}");
    assert!(
        line.contains("expected its last sequence") && line.contains("the stream has"),
        "{line}"
    );
}

#[test]
fn start_up_refuses_a_stream_with_fewer_replicas_and_a_max_payload_below_a_record() {
    let Some(cluster) = ready_cluster(1) else {
        return;
    };
    let urls = cluster.urls();
    block_on(async move {
        let js = jetstream::new(async_nats::connect(urls).await.unwrap());
        js.create_stream(jetstream::stream::Config {
            name: STREAM.into(),
            subjects: vec![format!("{STREAM}.>")],
            num_replicas: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    });
    let sink = "http://127.0.0.1:9/sink";
    let m = manifest(&cluster, "node-r", 3, sink);
    let f = Server::start_in(temp_root(), opts(&m)).expect_err("started with an R1 stream");
    assert!(
        f.stderr.contains("has 1 replicas") && f.stderr.contains("replicas = 3"),
        "{}",
        f.stderr
    );
    let m = manifest(&cluster, "node-r", 1, sink)
        .replace("max_body_bytes = 65536", "max_body_bytes = 4194304");
    let f = Server::start_in(temp_root(), opts(&m))
        .expect_err("started with records above max_payload");
    assert!(f.stderr.contains("max_payload"), "{}", f.stderr);
}

#[test]
fn records_durable_here_but_not_in_the_stream_are_published_before_the_cores_start() {
    let Some(mut cluster) = ready_cluster(3) else {
        return;
    };
    let sink = Downstream::start(Behavior::default());
    let mut server = Server::start(opts(&manifest(&cluster, "node-c", 3, &sink.uri("/sink"))));
    for i in 0..5 {
        assert_eq!(
            server
                .post("/hooks/t", format!("{{\"i\":{i}}}").as_bytes())
                .status,
            202
        );
    }
    // Quiet first: the five delivered and their outcomes replicated, so that no publish of
    // the node is on its way when JetStream goes (one failing would mark the node down, and the
    // next events would be refused at admission instead of written here).
    let five: HashSet<String> = wal_inspect(&server.data_dir())
        .into_iter()
        .map(|e| e.event_id)
        .collect();
    await_delivered(&sink, &five, RECOVERS_WITHIN);
    let t = Instant::now();
    let mut quiet = 0;
    while quiet < 5 {
        assert!(t.elapsed() < RECOVERS_WITHIN, "the node never went quiet");
        let busy = metric(&server, "sluice_replication_inflight_batches") > 0.0;
        quiet = if busy { 0 } else { quiet + 1 };
        std::thread::sleep(Duration::from_millis(100));
    }
    // No JetStream at all: the next events are written here, answered 503 at ack_timeout,
    // and cannot reach the stream before the node is killed. (With one server left, the
    // stream's leader could keep a message in its Raft log and commit it once the quorum is
    // back: that one would be in the stream already.)
    cluster.kill(0);
    cluster.kill(1);
    cluster.kill(2);
    let mut held = 0;
    let t = Instant::now();
    while held < 3 {
        assert!(t.elapsed() < RECOVERS_WITHIN, "no held event");
        let r = server.post("/hooks/t", b"{\"held\":true}");
        assert_eq!(r.status, 503, "{}", r.text());
        // The first of an outage waits its ack_timeout; the rest are refused at admission.
        if r.json()["reason"] == "replication_unavailable" {
            held += 1;
        }
    }
    server.sigkill();
    let local: HashSet<String> = wal_inspect(&server.data_dir())
        .into_iter()
        .map(|e| e.event_id)
        .collect();
    assert!(
        local.len() > 5,
        "the held events are in the local log: {}",
        local.len()
    );
    let before = ids_in_stream_when_ready(&mut cluster, "node-c");
    assert!(
        local.difference(&before).count() > 0,
        "some local events are not in the stream"
    );

    server.restart();
    let err = server.stderr();
    assert!(err.contains("before the cores start"), "{err}");
    let after = ids_in_stream(&cluster, "node-c");
    let missing: Vec<_> = local.difference(&after).collect();
    assert!(
        missing.is_empty(),
        "local events not published at start-up: {missing:?}"
    );
    await_delivered(&sink, &local, RECOVERS_WITHIN);
}

/// [`ids_in_stream`] once the nodes are back and JetStream answers.
fn ids_in_stream_when_ready(cluster: &mut NatsCluster, node: &str) -> HashSet<String> {
    for i in 0..3 {
        cluster.restart(i);
    }
    assert!(
        cluster.wait_ready(RECOVERS_WITHIN),
        "{}",
        cluster.log_tails()
    );
    ids_in_stream(cluster, node)
}

#[test]
fn a_node_whose_logs_were_adopted_fences_itself_and_refuses_to_start_naming_the_adopter() {
    let Some(cluster) = ready_cluster(1) else {
        return;
    };
    let sink = Downstream::start(Behavior::default());
    let mut server = Server::start(opts(&manifest(&cluster, "node-l", 1, &sink.uri("/sink"))));
    assert_eq!(server.post("/hooks/t", b"{}").status, 202);
    // Another node adopts node-l's logs: a compare-and-set on node-l's lease entry.
    let urls = cluster.urls();
    block_on(async move {
        let js = jetstream::new(async_nats::connect(urls).await.unwrap());
        let kv = js
            .get_key_value(format!("{STREAM}_nodes"))
            .await
            .expect("the lease bucket");
        let e = kv
            .entry("node-l")
            .await
            .unwrap()
            .expect("node-l holds a lease");
        let mut v: serde_json::Value = serde_json::from_slice(&e.value).unwrap();
        assert_eq!(v["node"], "node-l");
        v["adopted_by"] = "node-z".into();
        v["adopted_at_ms"] = 1.into();
        kv.update("node-l", serde_json::to_vec(&v).unwrap().into(), e.revision)
            .await
            .expect("the adopter's compare-and-set");
    });
    // Its next renewal (every lease / 3 = 2 s) finds it: fenced, refusing.
    let t = Instant::now();
    while !server.get("/readyz").text().contains("replication_fenced") {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "not fenced after adoption"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = server.post("/hooks/t", b"{}");
    assert_eq!(r.json()["reason"], "replication_fenced", "{}", r.text());
    assert!(
        server.stderr().contains("adopted by node \"node-z\""),
        "{}",
        server.stderr()
    );
    server.stop();
    let f = server.try_restart().expect_err("an adopted node started");
    assert!(
        f.stderr.contains("adopted by node \"node-z\""),
        "{}",
        f.stderr
    );
    assert!(f.stderr.contains("new replication.node"), "{}", f.stderr);
    // Nor with a new, empty disk: its logs are not restored for it.
    let root = temp_root();
    let m = manifest(&cluster, "node-l", 1, &sink.uri("/sink"));
    let f = Server::start_in(root.clone(), opts(&m)).expect_err("an adopted node started empty");
    assert!(
        f.stderr.contains("adopted by node \"node-z\""),
        "{}",
        f.stderr
    );
    assert!(
        !root.path().join("data").join("wal").join("core-0").exists(),
        "restored anyway"
    );
}

#[test]
fn a_node_restored_from_the_stream_delivers_the_events_its_lost_disk_had_pending() {
    let Some(cluster) = ready_cluster(3) else {
        return;
    };
    // The downstream holds every call: the accepted events stay pending on the first node.
    let sink = Downstream::start(Behavior::default());
    sink.hold(true);
    let m = manifest(&cluster, "node-p", 3, &sink.uri("/sink"));
    let mut first = Server::start(opts(&m));
    let mut ids = HashSet::new();
    for i in 0..50 {
        let r = first.post("/hooks/t", format!("{{\"i\":{i}}}").as_bytes());
        assert_eq!(r.status, 202, "{}", r.text());
        ids.insert(accepted(&r).0);
    }
    // The node and its disk are lost; the calls it had out were never answered.
    first.sigkill();
    std::fs::remove_dir_all(first.data_dir()).expect("delete the data dir");
    // (Requests it sent just before dying are read by the downstream within this.)
    std::thread::sleep(Duration::from_millis(300));
    let unanswered = sink.seen().len();
    // The same node name on an empty disk: restored from the stream, then delivered.
    let second = Server::start(opts(&m));
    assert!(
        second.stderr().contains("restored log core-"),
        "{}",
        second.stderr()
    );
    sink.hold(false);
    let t = Instant::now();
    loop {
        // Delivered by the successor: a call that came after the lost node's calls.
        let after: HashSet<String> = (sink.seen().into_iter().skip(unanswered))
            .map(|s| s.webhook_id)
            .collect();
        let missing = ids.difference(&after).count();
        if missing == 0 {
            break;
        }
        assert!(
            t.elapsed() < RECOVERS_WITHIN,
            "{missing} of {} events of the lost node not delivered by its successor",
            ids.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "{} events of the lost node delivered by its restored successor ({unanswered} calls were \
         out at the kill)",
        ids.len()
    );
}

#[test]
fn a_node_whose_jetstream_does_not_answer_within_its_lease_refuses_to_start() {
    // No nats-server needed: nothing listens on the port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let m = format!(
        "[server]\nmax_body_bytes = 65536\n\n\
         [replication]\nnats = [\"nats://127.0.0.1:{port}\"]\nnode = \"node-u\"\n\
         ack_timeout = \"500ms\"\nlease = \"3s\"\n"
    );
    let f = Server::start_in(temp_root(), opts(&m)).expect_err("started without JetStream");
    assert!(
        f.stderr.contains("no JetStream server answered"),
        "{}",
        f.stderr
    );
    assert!(f.elapsed < Duration::from_secs(15), "took {:?}", f.elapsed);
    assert!(
        f.elapsed >= Duration::from_secs(3),
        "gave up before its lease: {:?}",
        f.elapsed
    );
}

/// A broken pipeline's tail (`replication::fence`): a message whose number does not follow on
/// from the subject's last (the one before it never landed) is deleted when the node takes its
/// subject at start-up, counted, and numbering goes on from the last kept message.
#[test]
fn a_message_published_behind_one_that_never_landed_is_deleted_at_start_up() {
    let Some(cluster) = ready_cluster(1) else {
        return;
    };
    let sink = Downstream::start(Behavior::default());
    let mut server =
        Server::start(opts(&manifest(&cluster, "node-g", 1, &sink.uri("/sink"))).workers(1));
    for i in 0..3 {
        let r = server.post("/hooks/t", format!("{{\"i\":{i}}}").as_bytes());
        assert_eq!(r.status, 202, "{}", r.text());
    }
    server.stop();
    let subject = format!("{STREAM}.node-g.core-0");
    let urls = cluster.urls();
    let s2 = subject.clone();
    // What a node killed mid-pipeline leaves: number last + 2 landed, last + 1 did not.
    let (kept, gap) = block_on(async move {
        let js = jetstream::new(async_nats::connect(urls).await.unwrap());
        let stream = js.get_stream(STREAM).await.unwrap();
        let last = stream.get_last_raw_message_by_subject(&s2).await.unwrap();
        let number = number_in(&last.headers).expect("numbered");
        let lists = decode(&last.payload).unwrap().lists();
        let orphan = sluice::replication::adopt::marker(0, &lists);
        let publish = jetstream::message::PublishMessage::build()
            .payload(orphan.into())
            .message_id(sluice::replication::fence::message_id(&s2, number + 2, 0));
        let ack = js.send_publish(s2, publish).await.unwrap().await.unwrap();
        (last.sequence, ack.sequence)
    });
    server.restart();
    let err = server.stderr();
    assert!(
        err.contains(&format!("deleted 1 messages of {subject}")),
        "{err}"
    );
    assert_eq!(
        metric(&server, "sluice_replication_voided_messages_total"),
        1.0
    );
    let r = server.post("/hooks/t", b"{\"after\":true}");
    assert_eq!(r.status, 202, "{}", r.text());
    let urls = cluster.urls();
    let s2 = subject.clone();
    block_on(async move {
        let js = jetstream::new(async_nats::connect(urls).await.unwrap());
        let stream = js.get_stream(STREAM).await.unwrap();
        let gone = stream.get_raw_message(gap).await;
        assert!(gone.is_err(), "message {gap} is still in the stream");
        // The first message after the last kept one (later ones may follow: the new event's
        // delivery commits its outcome).
        let next = (stream
            .direct_get_next_for_subject(&s2, Some(kept + 1))
            .await)
            .unwrap();
        let was = stream.get_raw_message(kept).await.unwrap();
        let (was, now) = (
            number_in(&was.headers).expect("numbered"),
            number_in(&next.headers).expect("numbered"),
        );
        assert_eq!(now, was + 1, "the next message follows the last kept one");
    });
    let want: HashSet<String> = wal_inspect(&server.data_dir())
        .into_iter()
        .map(|e| e.event_id)
        .collect();
    await_delivered(&sink, &want, RECOVERS_WITHIN);
}
