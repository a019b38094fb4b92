//! Flow-control acceptance tests (issue 4): each gate through HTTP, with a real downstream
//! (tests/it/downstream.rs) behind sluice. Skips must be durable: the event stays in the WAL
//! (`wal inspect` lists it), leaves the pending backlog, and is not delivered after a restart.

use std::time::Duration;

use crate::downstream::{Behavior, Downstream};
use crate::support::*;

/// Trigger `t` at `/hooks/t` with `gates`, and trigger `warm` at `/hooks/warm` (no gates) with
/// the same handler `uri`, so a test can open the keep-alive connection before it measures.
fn manifest(uri: &str, gates: &str) -> String {
    format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n{gates}\n\n\
         [[triggers]]\nid = \"warm\"\nprovider = \"p\"\npath = \"/hooks/warm\"\nhandler = \"{uri}\"\n"
    )
}

fn start(ds: &Downstream, gates: &str) -> Server {
    Server::start(Opts::config(&manifest(&ds.uri("/sink"), gates)))
}

fn metric(server: &Server, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (_, samples) = scrape(server);
    samples
        .iter()
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value)
        .unwrap_or(0.0)
}

fn flow_count(server: &Server, gate: &str, decision: &str) -> f64 {
    metric(
        server,
        "sluice_flow_control_total",
        &[("trigger", "t"), ("gate", gate), ("decision", decision)],
    )
}

fn pending(server: &Server) -> f64 {
    metric(server, "sluice_wal_pending_events", &[])
}

fn ids(ds: &Downstream) -> Vec<String> {
    ds.seen().into_iter().map(|s| s.webhook_id).collect()
}

/// Stops the server, checks `wal inspect` still lists `all`, restarts, and checks that nothing
/// more reaches the downstream (skipped events are done; delivered ones too).
fn restart_delivers_nothing_more(server: &mut Server, ds: &Downstream, all: &[String]) {
    let before = ds.count();
    server.stop();
    let events = wal_inspect(&server.data_dir());
    for id in all {
        find_event(&events, id);
    }
    server.restart();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(pending(server), 0.0, "nothing pending after the restart");
    assert_eq!(
        ds.count(),
        before,
        "a skipped or delivered event was delivered again after the restart: {:?}",
        ids(ds)
    );
}

#[test]
fn rate_limit_skips_the_second_event_durably() {
    let ds = Downstream::start(Behavior::default());
    let mut server = start(&ds, "rate_limit = { period = \"60s\", max = 1 }");
    let a = server.ingest("/hooks/t", b"{\"n\":1}");
    let b = server.ingest("/hooks/t", b"{\"n\":2}");
    assert!(
        wait_until(Duration::from_secs(10), || flow_count(
            &server,
            "rate_limit",
            "skip"
        ) == 1.0
            && pending(&server) == 0.0),
        "the second event was not skipped durably"
    );
    assert!(ds.wait(Duration::from_secs(10), |s| !s.is_empty()));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ids(&ds), vec![a.clone()], "only the first is delivered");
    assert_eq!(flow_count(&server, "rate_limit", "pass"), 1.0);
    restart_delivers_nothing_more(&mut server, &ds, &[a, b]);
}

#[test]
fn throttle_delays_the_second_event_by_the_period() {
    let ds = Downstream::start(Behavior::default());
    let server = start(&ds, "throttle = { period = \"1s\", max = 1 }");
    // Open the keep-alive connection first, so both measured calls travel the same way.
    server.ingest("/hooks/warm", b"warm");
    assert!(ds.wait(Duration::from_secs(10), |s| s.len() == 1));
    let mut c = server.client();
    let a = accepted(&c.post("/hooks/t", b"a", &[])).0;
    let b = accepted(&c.post("/hooks/t", b"b", &[])).0;
    assert!(
        ds.wait(Duration::from_secs(10), |s| s.len() == 3),
        "not both delivered: {:?}",
        ids(&ds)
    );
    let seen = ds.seen();
    assert_eq!((&seen[1].webhook_id, &seen[2].webhook_id), (&a, &b));
    let gap = seen[2].at.duration_since(seen[1].at);
    eprintln!("throttle: the second call came {gap:?} after the first");
    // The gate spaces the two by the period on sluice's clock, at the moment it admits each;
    // the downstream stamps them after delivery, so scheduling jitter between the two calls
    // (a loaded 2-core machine can delay one write by a few ms) is allowed for, and no more.
    assert!(
        gap >= Duration::from_millis(990),
        "the throttled event came {gap:?} after the first"
    );
    assert!(gap < Duration::from_secs(3), "waited too long: {gap:?}");
    assert_eq!(flow_count(&server, "throttle", "wait"), 1.0);
    assert!(wait_until(Duration::from_secs(5), || pending(&server) == 0.0));
}

#[test]
fn debounce_delivers_only_the_last_of_a_quick_burst() {
    let ds = Downstream::start(Behavior::default());
    let mut server = start(
        &ds,
        "debounce = { key = \"event.body.pr\", period = \"500ms\" }",
    );
    let mut c = server.client();
    let sent: Vec<String> = (0..5)
        .map(|i| {
            let body = format!("{{\"pr\":7,\"n\":{i}}}");
            accepted(&c.post("/hooks/t", body.as_bytes(), &[])).0
        })
        .collect();
    assert!(ds.wait(Duration::from_secs(10), |s| !s.is_empty()));
    assert!(wait_until(Duration::from_secs(10), || pending(&server) == 0.0));
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        ids(&ds),
        vec![sent[4].clone()],
        "only the last is delivered"
    );
    assert_eq!(flow_count(&server, "debounce", "skip"), 4.0);
    restart_delivers_nothing_more(&mut server, &ds, &sent);
}

#[test]
fn singleton_skips_an_event_during_a_slow_delivery() {
    let ds = Downstream::start(Behavior::default());
    ds.script(vec![Behavior {
        delay: Duration::from_millis(1500),
        ..Behavior::default()
    }]);
    let mut server = start(&ds, "singleton = {}");
    let a = server.ingest("/hooks/t", b"a");
    assert!(ds.wait(Duration::from_secs(10), |s| s.len() == 1));
    let b = server.ingest("/hooks/t", b"b");
    assert!(
        wait_until(Duration::from_secs(10), || flow_count(
            &server,
            "singleton",
            "skip"
        ) == 1.0),
        "b was not skipped"
    );
    // Once a is done, the key is free again.
    assert!(wait_until(Duration::from_secs(10), || pending(&server) == 0.0));
    let c = server.ingest("/hooks/t", b"c");
    assert!(ds.wait(Duration::from_secs(10), |s| s.len() == 2));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(ids(&ds), vec![a.clone(), c.clone()]);
    restart_delivers_nothing_more(&mut server, &ds, &[a, b, c]);
}

#[test]
fn concurrency_waiters_leave_in_priority_order() {
    let ds = Downstream::start(Behavior::default());
    ds.script(vec![Behavior {
        delay: Duration::from_millis(1000),
        ..Behavior::default()
    }]);
    let server = start(
        &ds,
        "concurrency = { max = 1 }\n\
         priority = { key = \"event.headers.x-tier\", order = [\"gold\", \"silver\", \"bronze\"] }",
    );
    let mut c = server.client();
    let mut post = |tier: &str| accepted(&c.post("/hooks/t", b"{}", &[("X-Tier", tier)])).0;
    let busy = post("bronze");
    assert!(ds.wait(Duration::from_secs(10), |s| s.len() == 1));
    let bronze = post("bronze");
    let gold = post("gold");
    let silver = post("silver");
    assert!(
        ds.wait(Duration::from_secs(15), |s| s.len() == 4),
        "not all delivered: {:?}",
        ids(&ds)
    );
    assert_eq!(ids(&ds), vec![busy, gold, silver, bronze]);
    assert_eq!(ds.peak_concurrency(), 1, "concurrency max = 1");
    assert_eq!(flow_count(&server, "concurrency", "wait"), 3.0);
}

#[test]
fn batch_of_three_is_one_call_with_every_event() {
    let ds = Downstream::start(Behavior::default());
    let mut server = start(&ds, "batch = { size = 3, timeout = \"30s\" }");
    let mut c = server.client();
    let bodies: [&[u8]; 3] = [b"{\"n\":1}", b"plain text", b"[1,2]"];
    let sent: Vec<String> = bodies
        .iter()
        .map(|b| accepted(&c.post("/hooks/t", b, &[])).0)
        .collect();
    assert!(ds.wait(Duration::from_secs(10), |s| !s.is_empty()));
    assert!(wait_until(Duration::from_secs(10), || pending(&server) == 0.0));
    std::thread::sleep(Duration::from_millis(200));
    let seen = ds.seen();
    assert_eq!(seen.len(), 1, "one downstream call");
    let call = &seen[0];
    assert_eq!(call.content_type.as_deref(), Some("application/json"));
    assert_eq!(call.webhook_id, sent[0]);
    let body: serde_json::Value = serde_json::from_slice(&call.body).expect("a JSON array");
    let members = body.as_array().expect("array");
    assert_eq!(members.len(), 3);
    for (m, id) in members.iter().zip(&sent) {
        assert_eq!(m["event_id"], id.as_str());
        assert_eq!(m["source"], "p");
        assert!(m["received_at"].as_u64().is_some());
    }
    assert_eq!(members[0]["body"]["n"], 1);
    assert_eq!(members[1]["body_base64"], "cGxhaW4gdGV4dA==");
    assert_eq!(members[2]["body"][1], 2);
    assert_eq!(flow_count(&server, "batch", "pass"), 1.0);
    assert_eq!(flow_count(&server, "batch", "wait"), 2.0);
    restart_delivers_nothing_more(&mut server, &ds, &sent);
}

#[test]
fn invalid_gates_fail_startup_naming_the_trigger_and_keys() {
    let cases = [
        (
            "batch = { size = 2, timeout = \"1s\" }\ndebounce = { period = \"1s\" }",
            &["\"t\"", "batch", "debounce"][..],
        ),
        (
            "concurrency = { key = \"event.nope\", max = 1 }",
            &["\"t\"", "concurrency.key", "event.nope"][..],
        ),
        (
            "throttle = { period = \"1y\", max = 1 }",
            &["\"t\"", "throttle.period"][..],
        ),
    ];
    for (gates, needles) in cases {
        let f = Server::start_in(
            temp_root(),
            Opts::config(&manifest("http://127.0.0.1:9/", gates)),
        )
        .expect_err("must not start");
        for n in needles {
            assert!(f.stderr.contains(n), "{gates:?}: {n} not in {}", f.stderr);
        }
    }
}

#[test]
fn a_failed_batch_dead_letters_every_member() {
    let ds = Downstream::start(Behavior {
        status: 422,
        ..Behavior::default()
    });
    let server = start(&ds, "batch = { size = 2, timeout = \"30s\" }");
    let sent = [
        server.ingest("/hooks/t", b"{\"n\":1}"),
        server.ingest("/hooks/t", b"{\"n\":2}"),
    ];
    assert!(wait_until(Duration::from_secs(10), || pending(&server) == 0.0));
    assert_eq!(ds.count(), 1, "one call for the batch, not retried (422)");
    let out = run_cli(&[
        "dlq",
        "list",
        "--data-dir",
        path_str(&server.data_dir()),
        "--json",
    ]);
    assert!(out.status.success(), "{}", out.all());
    let entries: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    for id in &sent {
        assert!(
            entries
                .iter()
                .any(|e| e["id"] == id.as_str() && e["reason"] == "permanent_failure"),
            "member {id} has no DLQ entry: {entries:?}"
        );
    }
}

#[test]
fn an_event_waiting_in_a_gate_stays_pending_across_a_restart() {
    let ds = Downstream::start(Behavior::default());
    let mut server = start(&ds, "throttle = { period = \"1h\", max = 1 }");
    let a = server.ingest("/hooks/t", b"a");
    let b = server.ingest("/hooks/t", b"b");
    assert!(ds.wait(Duration::from_secs(10), |s| s.len() == 1));
    assert!(
        wait_until(Duration::from_secs(10), || pending(&server) == 1.0
            && metric(
                &server,
                "sluice_flow_held",
                &[("trigger", "t"), ("gate", "throttle")]
            ) == 1.0),
        "b should be waiting in the throttle and still pending"
    );
    server.stop();
    let events = wal_inspect(&server.data_dir());
    assert_eq!(find_event(&events, &a).outcome, "delivered");
    assert_eq!(find_event(&events, &b).outcome, "pending");
    server.restart();
    // The window survived: b is held again (evaluated again), not delivered.
    assert!(
        wait_until(Duration::from_secs(10), || metric(
            &server,
            "sluice_flow_held",
            &[("trigger", "t"), ("gate", "throttle")]
        ) == 1.0),
        "b is not held after the restart"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        ids(&ds),
        vec![a],
        "b went through a window that is still full"
    );
    assert_eq!(pending(&server), 1.0);
}
