//! Issue 12 dispatch features against a real downstream: `circuit.on_open = "hold"`, bulk DLQ
//! replay (online and offline).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::dispatch::{big_buckets, circuit_count, dlq_list, server_counts_dlq};
use crate::downstream::{Behavior, Downstream};
use crate::support::*;

/// The dispatch tests' one-trigger manifest, with no extra text.
fn manifest(uri: &str, destination: &str) -> String {
    crate::dispatch::manifest(uri, destination, "")
}

/// Issue 12 acceptance: a downstream answering 500 for its first 4 s, then 200; 200 events;
/// with `on_open = "hold"` none is dead-lettered and all are delivered, the circuit having
/// opened at least once.
#[test]
fn hold_keeps_events_through_an_outage_and_delivers_them_all() {
    let ds = Downstream::start(Behavior {
        status: 500,
        ..Behavior::default()
    });
    let started = Instant::now();
    let uri = ds.uri("/sink");
    // `max_attempts` ≥ `failures`: a failure charges an attempt only while the circuit is
    // closed, and one event's own consecutive failures open it by its 5th attempt, so no event
    // can run out of attempts however slowly the events arrive. (With 3 attempts, an event
    // ingested while the first commits were slow — a loaded machine — failed 3 times before 5
    // consecutive failures opened the circuit and was dead-lettered: "only 199 of 200".)
    let dest =
        "max_in_flight = 8\nretry = { max_attempts = 5, base = \"100ms\", cap = \"200ms\" }\n\
                circuit = { failures = 5, open_for = \"500ms\", on_open = \"hold\" }";
    let server = Server::start(big_buckets(Opts::config(&manifest(&uri, dest))));
    let mut c = server.client();
    let mut ids = HashSet::new();
    for i in 0..200u32 {
        let (id, _) = accepted(&c.post("/hooks/t", format!("{{\"n\":{i}}}").as_bytes(), &[]));
        ids.insert(id);
    }
    assert!(
        wait_until(Duration::from_secs(10), || circuit_count(&server, "opened")
            >= 1.0),
        "the circuit never opened"
    );
    let outage = Duration::from_secs(4);
    std::thread::sleep(outage.saturating_sub(started.elapsed()));
    let failed_during_outage = ds.count();
    ds.set(Behavior::default());
    let delivered = || {
        ds.seen()
            .iter()
            .filter(|s| s.status == 200)
            .map(|s| s.webhook_id.clone())
            .collect::<HashSet<_>>()
    };
    assert!(
        wait_until(Duration::from_secs(30), || delivered().len() >= 200),
        "only {} of 200 delivered",
        delivered().len()
    );
    assert_eq!(delivered(), ids, "every accepted event delivered");
    assert!(
        dlq_list(&server.data_dir()).is_empty(),
        "nothing may be dead-lettered for the outage: {:?}",
        dlq_list(&server.data_dir())
    );
    assert!(circuit_count(&server, "opened") >= 1.0);
    assert_eq!(circuit_count(&server, "fail_fast"), 0.0);
    assert!(circuit_count(&server, "half_open_probe") >= 2.0);
    assert!(circuit_count(&server, "closed") >= 1.0);
    // Held, not hammered: while open only the probes (one per 500 ms window) reach the
    // downstream, so the 4 s outage saw far fewer calls than events.
    assert!(
        failed_during_outage < 100,
        "{failed_during_outage} calls during the outage: the circuit did not hold them back"
    );
}

/// Ingests `n` events that a 400-answering downstream dead-letters as `permanent_failure`;
/// returns their ids once all are in the DLQ.
fn dead_letter_n(server: &Server, n: usize) -> HashSet<String> {
    let mut c = server.client();
    let ids: HashSet<String> = (0..n)
        .map(|i| accepted(&c.post("/hooks/t", format!("{{\"n\":{i}}}").as_bytes(), &[])).0)
        .collect();
    let dir = server.data_dir();
    assert!(
        wait_until(Duration::from_secs(20), || dlq_list(&dir).len() >= n
            && server_counts_dlq(server, n)),
        "only {} of {n} dead-lettered",
        dlq_list(&dir).len()
    );
    for e in dlq_list(&dir) {
        assert_eq!(e["reason"], "permanent_failure", "{e}");
    }
    ids
}

fn replays_delivered(ds: &Downstream) -> HashSet<String> {
    ds.seen()
        .iter()
        .filter(|s| s.status == 200)
        .filter_map(|s| s.replay_of.clone())
        .collect()
}

/// Issue 12 acceptance: 20 events dead-lettered as `permanent_failure`, the downstream fixed,
/// one bulk replay call: 20 delivered and the DLQ empty.
#[test]
fn bulk_replay_route_replays_every_matching_entry() {
    let ds = Downstream::start(Behavior {
        status: 400,
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let opts =
        big_buckets(Opts::config(&manifest(&uri, ""))).env("SLUICE_ADMIN_TOKEN", "s3cret-token");
    let server = Server::start(opts);
    let ids = dead_letter_n(&server, 20);
    ds.set(Behavior::default());
    let auth = [("Authorization", "Bearer s3cret-token")];
    let path = "/admin/dlq/replay";
    let r = server.client().post(path, b"", &[]);
    assert_eq!(r.status, 401, "no token: {}", r.text());
    // Bad filters are refused precisely, nothing replayed.
    for (q, needle) in [
        ("?reason=nope", "reason"),
        ("?since=yesterday", "since"),
        ("?limit=3", "unknown parameter"),
    ] {
        let r = server.client().post(&format!("{path}{q}"), b"", &auth);
        assert_eq!(r.status, 400, "{q}: {}", r.text());
        assert!(r.text().contains(needle), "{q}: {}", r.text());
    }
    // A filter that matches nothing: 200, nothing replayed.
    let r = server
        .client()
        .post(&format!("{path}?reason=circuit_open"), b"", &auth);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["replayed"], 0);
    assert_eq!(dlq_list(&server.data_dir()).len(), 20);
    // The call: every permanent failure of trigger t since an hour ago.
    let since = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        - 3_600_000)
        .to_string();
    let r = server.client().post(
        &format!("{path}?reason=permanent_failure&trigger=t&since={since}"),
        b"",
        &auth,
    );
    assert_eq!(r.status, 202, "{}", r.text());
    let v = r.json();
    assert_eq!(v["replayed"], 20, "{v}");
    assert_eq!(v["remaining"], 0, "{v}");
    assert!(
        wait_until(Duration::from_secs(20), || replays_delivered(&ds).len()
            >= 20),
        "only {} replays delivered",
        replays_delivered(&ds).len()
    );
    assert_eq!(replays_delivered(&ds), ids, "each entry replayed once");
    let dir = server.data_dir();
    assert!(
        wait_until(Duration::from_secs(10), || dlq_list(&dir).is_empty()),
        "DLQ not empty: {:?}",
        dlq_list(&dir)
    );
    let r = server.client().post(path, b"", &auth);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["replayed"], 0);
}

/// `sluice dlq replay --all` (server stopped), with a filter that selects a subset.
#[test]
fn offline_bulk_replay_replays_the_selection() {
    let ds = Downstream::start(Behavior {
        status: 400,
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let mut server = Server::start(big_buckets(Opts::config(&manifest(&uri, ""))));
    let ids = dead_letter_n(&server, 12);
    server.stop();
    ds.set(Behavior::default());
    let dir = server.data_dir();
    let d = path_str(&dir);
    let out = run_cli(&[
        "dlq",
        "replay",
        "--all",
        "--reason",
        "nope",
        "--data-dir",
        d,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", out.all());
    let out = run_cli(&["dlq", "replay", "--data-dir", d]);
    assert_eq!(out.status.code(), Some(2), "an ID or --all: {}", out.all());
    let out = run_cli(&[
        "dlq",
        "replay",
        "--all",
        "--reason",
        "circuit_open",
        "--data-dir",
        d,
    ]);
    assert!(out.status.success(), "{}", out.all());
    assert_eq!(out.stdout.trim(), "replayed 0 remaining 0");
    let out = run_cli(&[
        "dlq",
        "replay",
        "--all",
        "--trigger",
        "t",
        "--limit",
        "5",
        "--data-dir",
        d,
    ]);
    assert!(out.status.success(), "{}", out.all());
    assert_eq!(out.stdout.trim(), "replayed 5 remaining 7");
    let out = run_cli(&[
        "dlq",
        "replay",
        "--all",
        "--reason",
        "permanent_failure",
        "--data-dir",
        d,
    ]);
    assert!(out.status.success(), "{}", out.all());
    assert_eq!(out.stdout.trim(), "replayed 7 remaining 0");
    assert!(dlq_list(&dir).is_empty());
    server.restart();
    assert!(
        wait_until(Duration::from_secs(20), || replays_delivered(&ds).len()
            >= 12),
        "only {} replays delivered",
        replays_delivered(&ds).len()
    );
    assert_eq!(replays_delivered(&ds), ids);
}

fn sum_samples(samples: &[Sample], name: &str, label: Option<(&str, &str)>) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && label.map_or(true, |(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value)
        .sum()
}

/// Issue 12 acceptance scenario for `max_in_flight = "auto"`: `sluice mock-downstream` serving
/// 40 at once, 40 ms each, FIFO beyond; timeout 500 ms; cap 500; 6,000 events. Prints what it
/// measures (goodput after the first 3 s, mean latency over the second half, the limit over
/// time) and asserts a robust version of the behaviour: the limit settles between 20 and 120
/// (a fixed 500 would queue ~460 calls past their timeout), at most 1% dead-lettered, and every
/// event delivered.
#[test]
fn adaptive_permits_find_the_downstream_concurrency() {
    let mock = crate::tools::Mock::start(&[
        "--max-concurrency",
        "40",
        "--service-time",
        "40ms",
        "--over-capacity",
        "queue",
    ]);
    let uri = format!("{}/sink", mock.url());
    let dest = "max_in_flight = \"auto\"\nmax_in_flight_cap = 500\ntimeout = \"500ms\"\n\
                retry = { base = \"100ms\", cap = \"1s\" }";
    let opts = big_buckets(Opts::config(&manifest(&uri, dest))).arg("--pump-max-outstanding=600");
    let server = Server::start(opts);
    const N: usize = 6000;
    let started = Instant::now();
    let senders: Vec<_> = (0..4)
        .map(|t| {
            let addr = server.addr();
            std::thread::spawn(move || {
                let mut c = Client::connect(addr).expect("connect");
                for i in 0..N / 4 {
                    let r = c.post(
                        "/hooks/t",
                        format!("{{\"t\":{t},\"i\":{i}}}").as_bytes(),
                        &[],
                    );
                    assert_eq!(r.status, 202, "{}", r.text());
                }
            })
        })
        .collect();
    // (elapsed s, delivered, duration sum, duration count, permits)
    let mut trace: Vec<(f64, f64, f64, f64, f64)> = Vec::new();
    let uri_label = ("destination", uri.as_str());
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (_, s) = scrape(&server);
        let delivered = sum_samples(
            &s,
            "sluice_dispatch_attempts_total",
            Some(("outcome", "delivered")),
        );
        trace.push((
            started.elapsed().as_secs_f64(),
            delivered,
            sum_samples(&s, "sluice_dispatch_duration_seconds_sum", None),
            sum_samples(&s, "sluice_dispatch_duration_seconds_count", None),
            sum_samples(&s, "sluice_destination_permits", Some(uri_label)),
        ));
        let dlq = dlq_list(&server.data_dir()).len();
        if delivered as usize + dlq >= N || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    for s in senders {
        s.join().expect("sender");
    }
    let dead = dlq_list(&server.data_dir()).len();
    let last = *trace.last().unwrap();
    let at3 = trace.iter().find(|t| t.0 >= 3.0).copied().unwrap_or(last);
    let half = trace
        .iter()
        .find(|t| t.1 >= N as f64 / 2.0)
        .copied()
        .unwrap_or(last);
    let goodput = (last.1 - at3.1) / (last.0 - at3.0).max(0.001);
    let mean_ms = (last.2 - half.2) / (last.3 - half.3).max(1.0) * 1000.0;
    let limits: Vec<f64> = trace.iter().map(|t| t.4).collect();
    eprintln!(
        "adaptive: {} delivered, {dead} dead-lettered in {:.1} s; goodput after 3 s {goodput:.0}/s; \
         mean latency second half {mean_ms:.1} ms; mock peak concurrency {}; limit every 250 ms {limits:?}",
        last.1,
        last.0,
        mock.stats()["max_concurrency_seen"]
    );
    assert!(
        dead * 100 <= N,
        "{dead} of {N} dead-lettered (more than 1%)"
    );
    assert!(last.1 as usize + dead >= N, "not finished: {last:?}");
    let second_half: Vec<f64> = trace
        .iter()
        .filter(|t| t.1 >= N as f64 / 2.0)
        .map(|t| t.4)
        .collect();
    assert!(
        second_half.iter().all(|l| (20.0..=120.0).contains(l)),
        "the limit did not settle between 20 and 120: {second_half:?}"
    );
}
