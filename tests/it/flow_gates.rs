//! Issue 17: flow gates hold events without holding the dispatch window. Each test reproduces
//! one finding of the issue's "Why" list through the real binary and a real downstream, with
//! a small `max_outstanding`, and fails if the finding comes back:
//! head-of-line blocking across triggers, debounce past `max_outstanding` keys, batches capped
//! by the pump, priority only among admitted events, gate windows reset by a restart, and the
//! skip reason visible nowhere.

use std::time::{Duration, Instant};

use crate::downstream::{Behavior, Downstream};
use crate::support::*;

/// `[orchestrator] pumps.max_outstanding = max_outstanding`, then `triggers`: `(id, gates)`,
/// each at `/hooks/{id}` with the same handler.
fn manifest(uri: &str, max_outstanding: usize, triggers: &[(&str, &str)]) -> String {
    let mut m = format!("[orchestrator]\npumps = {{ max_outstanding = {max_outstanding} }}\n\n");
    for (id, gates) in triggers {
        m.push_str(&format!(
            "[[triggers]]\nid = \"{id}\"\nprovider = \"p\"\npath = \"/hooks/{id}\"\n\
             handler = \"{uri}\"\n{gates}\n\n"
        ));
    }
    m
}

fn held(server: &Server, trigger: &str, gate: &str) -> f64 {
    let (_, samples) = scrape(server);
    sample_value(
        &samples,
        "sluice_flow_held",
        &[("trigger", trigger), ("gate", gate)],
    )
}

fn pending(server: &Server) -> f64 {
    let (_, samples) = scrape(server);
    sample_value(&samples, "sluice_wal_pending_events", &[])
}

fn ids(ds: &Downstream) -> Vec<String> {
    ds.seen().into_iter().map(|s| s.webhook_id).collect()
}

/// Finding 1. `max_outstanding` 4, two triggers throttled to 1 per 2 s with 8 events each
/// waiting (each trigger may hold 3 of the 4 slots, so before the fix the two filled the
/// window): an event of an ungated trigger is delivered within 1 s.
#[test]
fn an_ungated_trigger_is_not_delayed_by_throttled_ones() {
    let ds = Downstream::start(Behavior::default());
    let throttle = "throttle = { period = \"2s\", max = 1 }";
    let server = Server::start(Opts::config(&manifest(
        &ds.uri("/sink"),
        4,
        &[("slow", throttle), ("slow2", throttle), ("free", "")],
    )));
    let mut c = server.client();
    for i in 0..8 {
        for t in ["slow", "slow2"] {
            accepted(&c.post(&format!("/hooks/{t}"), format!("{i}").as_bytes(), &[]));
        }
    }
    assert!(
        wait_until(Duration::from_secs(10), || held(
            &server, "slow", "throttle"
        ) == 7.0
            && held(&server, "slow2", "throttle") == 7.0),
        "7 events of each throttled trigger should be waiting in its gate"
    );
    let t0 = Instant::now();
    let free = accepted(&c.post("/hooks/free", b"free", &[])).0;
    assert!(
        ds.wait(Duration::from_secs(10), |s| s
            .iter()
            .any(|x| x.webhook_id == free)),
        "the ungated event was never delivered"
    );
    let took = t0.elapsed();
    eprintln!("ungated event delivered {took:?} after its 202, 14 events held by throttles");
    assert!(
        took < Duration::from_secs(1),
        "head-of-line blocking: the ungated event took {took:?}"
    );
    assert_eq!(ds.count(), 3, "one per throttled trigger, and the free one");
}

/// Finding 2. Debounce on 6 keys with `max_outstanding` 4, then a newer event for the first
/// key: only the newer one is delivered for that key (before the fix the held one saw a quiet
/// period while the newer one waited in the WAL, and both were delivered).
#[test]
fn debounce_with_more_keys_than_max_outstanding_delivers_only_the_last_per_key() {
    let ds = Downstream::start(Behavior::default());
    let mut server = Server::start(Opts::config(&manifest(
        &ds.uri("/sink"),
        4,
        &[(
            "t",
            "debounce = { key = \"event.body.k\", period = \"1500ms\" }",
        )],
    )));
    let mut c = server.client();
    let mut post = |k: u32, n: u32| {
        let body = format!("{{\"k\":{k},\"n\":{n}}}");
        accepted(&c.post("/hooks/t", body.as_bytes(), &[])).0
    };
    let first: Vec<String> = (1..=6).map(|k| post(k, 0)).collect();
    let newer = post(1, 1);
    assert!(
        ds.wait(Duration::from_secs(15), |s| s.len() >= 6),
        "not every key delivered: {:?}",
        ids(&ds)
    );
    assert!(wait_until(Duration::from_secs(10), || pending(&server) == 0.0));
    std::thread::sleep(Duration::from_millis(500));
    let mut got = ids(&ds);
    got.sort();
    let mut want: Vec<String> = first[1..].to_vec();
    want.push(newer.clone());
    want.sort();
    assert_eq!(got, want, "the superseded event of key 1 was delivered");
    server.stop();
    let events = wal_inspect(&server.data_dir());
    let old = find_event(&events, &first[0]);
    assert_eq!(
        (
            old.outcome.as_str(),
            old.gate.as_deref(),
            old.reason.as_deref()
        ),
        ("skipped", Some("debounce"), Some("debounced")),
        "wal inspect shows the skip and its reason"
    );
    assert_eq!(find_event(&events, &newer).outcome, "delivered");
}

/// Finding 3. `size = 100`, `timeout = "2s"`, `max_outstanding` 10, 25 events: one call of 25
/// (before the fix: calls of at most `max_outstanding` members, each after the full timeout).
#[test]
fn a_batch_is_not_capped_by_max_outstanding() {
    let ds = Downstream::start(Behavior::default());
    let server = Server::start(Opts::config(&manifest(
        &ds.uri("/sink"),
        10,
        &[("t", "batch = { size = 100, timeout = \"2s\" }")],
    )));
    let mut c = server.client();
    let sent: Vec<String> = (0..25)
        .map(|i| accepted(&c.post("/hooks/t", format!("{{\"n\":{i}}}").as_bytes(), &[])).0)
        .collect();
    assert!(
        wait_until(Duration::from_secs(10), || held(&server, "t", "batch")
            == 25.0),
        "the batch gate should hold all 25 members"
    );
    assert!(ds.wait(Duration::from_secs(10), |s| !s.is_empty()));
    assert!(wait_until(Duration::from_secs(10), || pending(&server) == 0.0));
    std::thread::sleep(Duration::from_millis(300));
    let seen = ds.seen();
    assert_eq!(seen.len(), 1, "one call");
    let body: serde_json::Value = serde_json::from_slice(&seen[0].body).expect("JSON array");
    let members: Vec<&str> = body
        .as_array()
        .expect("array")
        .iter()
        .map(|m| m["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(members, sent, "every member, in arrival order");
}

/// A batch size above `[flow] max_held` is refused at startup with a precise message.
#[test]
fn a_batch_larger_than_max_held_fails_startup() {
    let m = format!(
        "{}[flow]\nmax_held = 50\n",
        manifest(
            "http://127.0.0.1:9/",
            10,
            &[("t", "batch = { size = 100, timeout = \"2s\" }")]
        )
    );
    let f = Server::start_in(temp_root(), Opts::config(&m)).expect_err("must not start");
    assert!(
        f.stderr.contains("\"t\"")
            && f.stderr.contains("batch.size: 100")
            && f.stderr.contains("max_held (50)"),
        "{}",
        f.stderr
    );
}

/// Finding 4. Concurrency 1 with priority, `max_outstanding` 4: with 6 bronze events waiting
/// and a slow delivery in progress, a gold event arriving later goes next (before the fix it
/// was fifth: only the events admitted to the pump's window were ordered).
#[test]
fn priority_orders_every_waiter_not_only_the_admitted_ones() {
    let ds = Downstream::start(Behavior::default());
    ds.script(vec![Behavior {
        delay: Duration::from_millis(1500),
        ..Behavior::default()
    }]);
    let server = Server::start(Opts::config(&manifest(
        &ds.uri("/sink"),
        4,
        &[(
            "t",
            "concurrency = { max = 1 }\n\
             priority = { key = \"event.headers.x-tier\", order = [\"gold\", \"silver\", \"bronze\"] }",
        )],
    )));
    let mut c = server.client();
    let mut post = |tier: &str| accepted(&c.post("/hooks/t", b"{}", &[("X-Tier", tier)])).0;
    let busy = post("bronze");
    assert!(ds.wait(Duration::from_secs(10), |s| s.len() == 1));
    let bronze: Vec<String> = (0..6).map(|_| post("bronze")).collect();
    assert!(
        wait_until(Duration::from_secs(10), || held(
            &server,
            "t",
            "concurrency"
        ) == 6.0),
        "the 6 bronze events should all wait in the gate"
    );
    let gold = post("gold");
    assert!(
        ds.wait(Duration::from_secs(20), |s| s.len() == 8),
        "not all delivered: {:?}",
        ids(&ds)
    );
    let mut want = vec![busy, gold];
    want.extend(bronze);
    assert_eq!(
        ids(&ds),
        want,
        "gold goes right after the delivery in progress"
    );
    assert_eq!(ds.peak_concurrency(), 1);
}

/// Finding 5a. A 1-per-10 s throttle across a SIGTERM and restart: the second event is not
/// delivered before 10 s after the first (before the fix: 0.2 s later).
#[test]
fn a_throttle_window_survives_a_restart() {
    let ds = Downstream::start(Behavior::default());
    let mut server = Server::start(Opts::config(&manifest(
        &ds.uri("/sink"),
        4,
        &[("t", "throttle = { period = \"10s\", max = 1 }")],
    )));
    let a = server.ingest("/hooks/t", b"a");
    assert!(ds.wait(Duration::from_secs(10), |s| s.len() == 1));
    let b = server.ingest("/hooks/t", b"b");
    std::thread::sleep(Duration::from_millis(200));
    server.stop();
    assert_eq!(
        find_event(&wal_inspect(&server.data_dir()), &b).outcome,
        "pending"
    );
    server.restart();
    assert!(
        ds.wait(Duration::from_secs(20), |s| s.len() == 2),
        "b was never delivered after the restart"
    );
    let seen = ds.seen();
    assert_eq!((&seen[0].webhook_id, &seen[1].webhook_id), (&a, &b));
    let gap = seen[1].at.duration_since(seen[0].at);
    eprintln!("throttle across a restart: the second call came {gap:?} after the first");
    // Hits are saved and restored in whole milliseconds, rounded towards "more recent": the
    // window can only reopen later, never earlier (a few ms of delivery jitter allowed for).
    assert!(
        gap >= Duration::from_millis(9_950),
        "the restart opened the window early: {gap:?}"
    );
}

/// Finding 5b. A 1-per-hour rate_limit across a SIGTERM and restart skips the second event,
/// and `wal inspect` says why.
#[test]
fn a_rate_limit_window_survives_a_restart() {
    let ds = Downstream::start(Behavior::default());
    let mut server = Server::start(Opts::config(&manifest(
        &ds.uri("/sink"),
        4,
        &[("t", "rate_limit = { period = \"1h\", max = 1 }")],
    )));
    let a = server.ingest("/hooks/t", b"a");
    assert!(ds.wait(Duration::from_secs(10), |s| s.len() == 1));
    assert!(wait_until(Duration::from_secs(10), || pending(&server) == 0.0));
    server.stop();
    server.restart();
    let b = server.ingest("/hooks/t", b"b");
    assert!(
        wait_until(Duration::from_secs(10), || pending(&server) == 0.0),
        "b was not settled"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        ids(&ds),
        vec![a.clone()],
        "the rate limit let a second event through"
    );
    server.stop();
    let events = wal_inspect(&server.data_dir());
    let e = find_event(&events, &b);
    assert_eq!(
        (e.outcome.as_str(), e.gate.as_deref(), e.reason.as_deref()),
        ("skipped", Some("rate_limit"), Some("rate_limited"))
    );
    assert_eq!(find_event(&events, &a).outcome, "delivered");
}

/// Held by reference: with `[flow] max_held_bytes = 0` no held body stays in memory; each is
/// read back from its log when the gate releases it, and the downstream gets the exact bytes
/// (a throttled event, and the members of a batch, on a one-worker and a two-worker server).
#[test]
fn held_bodies_are_read_back_from_the_log() {
    for workers in [1, 2] {
        let ds = Downstream::start(Behavior::default());
        let m = format!(
            "{}[flow]\nmax_held_bytes = 0\n",
            manifest(
                &ds.uri("/sink"),
                4,
                &[
                    ("thr", "throttle = { period = \"500ms\", max = 1 }"),
                    ("bat", "batch = { size = 3, timeout = \"5s\" }"),
                ],
            )
        );
        let server = Server::start(Opts::config(&m).workers(workers));
        let mut c = server.client();
        let bodies: Vec<Vec<u8>> = (0..3)
            .map(|i| format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(100 * i)).into_bytes())
            .collect();
        let thr: Vec<String> = bodies
            .iter()
            .map(|b| accepted(&c.post("/hooks/thr", b, &[])).0)
            .collect();
        let bat: Vec<String> = bodies
            .iter()
            .map(|b| accepted(&c.post("/hooks/bat", b, &[])).0)
            .collect();
        assert!(
            ds.wait(Duration::from_secs(15), |s| s.len() == 4),
            "workers={workers}: {:?}",
            ids(&ds)
        );
        let seen = ds.seen();
        for (id, body) in thr.iter().zip(&bodies) {
            let call = seen
                .iter()
                .find(|s| &s.webhook_id == id)
                .expect("delivered");
            assert_eq!(&call.body, body, "workers={workers}: body of {id}");
        }
        let call = seen.iter().find(|s| s.webhook_id == bat[0]).expect("batch");
        let v: serde_json::Value = serde_json::from_slice(&call.body).unwrap();
        for (i, m) in v.as_array().unwrap().iter().enumerate() {
            assert_eq!(m["event_id"], bat[i].as_str());
            let want: serde_json::Value = serde_json::from_slice(&bodies[i]).unwrap();
            assert_eq!(m["body"], want, "workers={workers}: member {i}");
        }
        let (_, samples) = scrape(&server);
        assert_eq!(
            sample_value(&samples, "sluice_flow_read_back_failures_total", &[]),
            0.0
        );
    }
}

/// A gate at `[flow] max_held` holds the rest of its waiters by reference (issue 38): their
/// records stay in the log (pending, in the backlog bound), the pump parks none of them and
/// goes on reading the log, so another trigger is not held back.
#[test]
fn a_gate_at_max_held_holds_the_rest_by_reference_in_the_log() {
    let ds = Downstream::start(Behavior::default());
    let m = format!(
        "{}[flow]\nmax_held = 3\n",
        manifest(
            &ds.uri("/sink"),
            8,
            &[
                ("slow", "throttle = { period = \"1h\", max = 1 }"),
                ("free", "")
            ],
        )
    );
    let server = Server::start(Opts::config(&m).workers(1));
    let mut c = server.client();
    for i in 0..10 {
        accepted(&c.post("/hooks/slow", format!("{i}").as_bytes(), &[]));
    }
    assert!(ds.wait(Duration::from_secs(10), |s| s.len() == 1));
    let sample = |name: &str, labels: &[(&str, &str)]| {
        let (_, samples) = scrape(&server);
        sample_value(&samples, name, labels)
    };
    let in_log = || {
        sample(
            "sluice_flow_held_in_log",
            &[("trigger", "slow"), ("gate", "throttle")],
        )
    };
    assert!(
        wait_until(Duration::from_secs(10), || in_log() == 6.0),
        "6 events should wait by reference: in the log {}, held {}",
        in_log(),
        held(&server, "slow", "throttle")
    );
    assert_eq!(
        held(&server, "slow", "throttle"),
        9.0,
        "3 in full, 6 by reference"
    );
    assert_eq!(
        sample("sluice_pump_parked_events", &[]),
        0.0,
        "the pump parks none"
    );
    // One key (no `key`): its bound, `max_held_per_key` (by default `max_held` when smaller).
    let left = &[("trigger", "slow"), ("gate", "throttle"), ("bound", "key")];
    assert_eq!(sample("sluice_flow_left_in_log_total", left), 6.0);
    // The delivered event leaves `pending` when its `Done` record commits, which may be after
    // the downstream saw the call: wait for it rather than read once.
    assert!(
        wait_until(Duration::from_secs(10), || pending(&server) == 9.0),
        "held events are all pending: pending {}",
        pending(&server)
    );
    let free = accepted(&c.post("/hooks/free", b"free", &[])).0;
    assert!(
        ds.wait(Duration::from_secs(5), |s| s
            .iter()
            .any(|x| x.webhook_id == free)),
        "another trigger is not held back"
    );
}

/// Released events keep the per-trigger cap of the dispatch window: a throttled trigger whose
/// released events all wait on a slow destination holds at most `max_outstanding −
/// max_outstanding/4` slots, so another trigger's event still goes at once.
#[test]
fn released_events_keep_their_triggers_window_cap() {
    let slow = Downstream::start(Behavior {
        delay: Duration::from_secs(4),
        ..Behavior::default()
    });
    let fast = Downstream::start(Behavior::default());
    let m = format!(
        "[orchestrator]\npumps = {{ max_outstanding = 4 }}\n\n\
         [[triggers]]\nid = \"a\"\nprovider = \"p\"\npath = \"/hooks/a\"\nhandler = \"{}\"\n\
         throttle = {{ period = \"50ms\", max = 1 }}\n\n\
         [[triggers]]\nid = \"b\"\nprovider = \"p\"\npath = \"/hooks/b\"\nhandler = \"{}\"\n",
        slow.uri("/slow"),
        fast.uri("/fast")
    );
    let server = Server::start(Opts::config(&m));
    let mut c = server.client();
    for i in 0..8 {
        accepted(&c.post("/hooks/a", format!("{i}").as_bytes(), &[]));
    }
    // Every released event of `a` waits on the slow destination: they would fill the window.
    std::thread::sleep(Duration::from_millis(800));
    let t0 = Instant::now();
    let b = accepted(&c.post("/hooks/b", b"b", &[])).0;
    assert!(
        fast.wait(Duration::from_secs(10), |s| s
            .iter()
            .any(|x| x.webhook_id == b)),
        "b never delivered"
    );
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "b waited {took:?} behind a's released events"
    );
    assert!(
        slow.peak_concurrency() <= 3,
        "a held more than its cap: {} calls at once",
        slow.peak_concurrency()
    );
}

/// Issue 38 item 4: one key's failures do not dead-letter another key's events without a call.
/// `concurrency = { key = event.body.k, max = 1 }`, a circuit opening at 3 consecutive
/// failures: key A's event fails every attempt (5 of them, one at a time); while it retries,
/// 3 events of key B are delivered, none dead-lettered `circuit_open`. The circuit counts one
/// key's failures once per streak.
#[test]
fn one_keys_failures_do_not_open_the_circuit_on_the_other_keys() {
    let ds = Downstream::start(Behavior::default());
    ds.rule(|body, _| {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        (v["k"] == "a").then(|| Behavior {
            status: 500,
            ..Behavior::default()
        })
    });
    let uri = ds.uri("/h");
    let m = format!(
        "{}[[destinations]]\nuri = \"{uri}\"\n\
         retry = {{ max_attempts = 5, base = \"100ms\", cap = \"200ms\" }}\n\
         circuit = {{ failures = 3, open_for = \"30s\" }}\n",
        manifest(
            &uri,
            64,
            &[("t", "concurrency = { key = \"event.body.k\", max = 1 }")]
        )
    );
    let server = Server::start(Opts::config(&m));
    let mut c = server.client();
    accepted(&c.post("/hooks/t", br#"{"k":"a","n":0}"#, &[]));
    // A fails at least 3 times in a row: enough to open a circuit that counts every failure.
    assert!(ds.wait(Duration::from_secs(10), |s| s
        .iter()
        .filter(|x| x.status == 500)
        .count()
        >= 3));
    let b: Vec<String> = (1..=3)
        .map(|n| {
            accepted(&c.post(
                "/hooks/t",
                format!("{{\"k\":\"b\",\"n\":{n}}}").as_bytes(),
                &[],
            ))
            .0
        })
        .collect();
    assert!(
        ds.wait(Duration::from_secs(10), |s| b.iter().all(|id| s
            .iter()
            .any(|x| x.status == 200 && &x.webhook_id == id))),
        "key b's events not all delivered: {:?}",
        ds.seen()
            .iter()
            .map(|x| (x.status, x.webhook_id.clone()))
            .collect::<Vec<_>>()
    );
    // A's event is dead-lettered for its own retries, not the circuit.
    assert!(wait_until(Duration::from_secs(15), || {
        let (_, s) = scrape(&server);
        sample_value(&s, "sluice_dlq_entries", &[]) == 1.0
    }));
    let entries = crate::dispatch::dlq_list(&server.data_dir());
    let reasons: Vec<&str> = entries
        .iter()
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        ["retry_exhausted"],
        "only key a's event, for its own retries"
    );
    let a500 = ds.seen().iter().filter(|x| x.status == 500).count();
    assert_eq!(a500, 5, "key a tried 5 times");
}
