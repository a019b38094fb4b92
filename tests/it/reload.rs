//! Hot reload (issue 14) through the real binary: SIGHUP and `POST /admin/reload`, with real
//! traffic to a real downstream during the reloads.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::dispatch::big_buckets;
use crate::downstream::{Behavior, Downstream};
use crate::support::*;

pub(crate) const TOKEN: &str = "reload-admin-token";

/// Trigger `t` (and `t2` when `with_t2`) to `uri` with `max_in_flight = max`.
fn manifest(uri: &str, max: usize, with_t2: bool) -> String {
    let t2 = if with_t2 {
        format!("[[triggers]]\nid = \"t2\"\nprovider = \"p2\"\npath = \"/hooks/t2\"\nhandler = \"{uri}\"\n\n")
    } else {
        String::new()
    };
    format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n\n{t2}\
         [[destinations]]\nuri = \"{uri}\"\nmax_in_flight = {max}\ntimeout = \"60s\"\n"
    )
}

pub(crate) fn start(text: &str) -> Server {
    Server::start(big_buckets(Opts::config(text)).env("SLUICE_ADMIN_TOKEN", TOKEN))
}

/// The manifest file the server was started with (rewritten by the tests before a reload).
pub(crate) fn manifest_path(server: &Server) -> std::path::PathBuf {
    server.root().path().join("sluice-0.toml")
}

pub(crate) fn sighup(server: &Server) {
    let pid = server.pid().expect("running");
    // SAFETY: kill(2) on the PID of our own child process, which is running (not reaped).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
}

pub(crate) fn metric(server: &Server, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (_, samples) = scrape(server);
    sample_value(&samples, name, labels)
}

pub(crate) fn wait_generation(server: &Server, n: f64) {
    assert!(
        wait_until(Duration::from_secs(10), || metric(
            server,
            "sluice_config_generation",
            &[]
        ) == n),
        "generation never reached {n}; stderr:\n{}",
        server.stderr()
    );
}

/// Writes invalid TOML and sends SIGHUP: the reload is refused and counted as
/// `result="error"` (the first such), and generation `generation` keeps serving.
pub(crate) fn sighup_with_invalid_toml_keeps_generation(server: &Server, generation: f64) {
    std::fs::write(manifest_path(server), "[[triggers]\nid = ").unwrap();
    sighup(server);
    assert!(wait_until(Duration::from_secs(10), || metric(
        server,
        "sluice_config_reloads_total",
        &[("result", "error")]
    ) == 1.0));
    assert_eq!(metric(server, "sluice_config_generation", &[]), generation);
}

pub(crate) fn admin_reload(server: &Server, token: Option<&str>) -> Response {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![];
    if let Some(a) = &auth {
        headers.push(("Authorization", a.as_str()));
    }
    server.client().post("/admin/reload", b"", &headers)
}

pub(crate) fn delivered_ids(ds: &Downstream) -> Vec<String> {
    ds.seen()
        .iter()
        .filter(|s| s.status == 200)
        .map(|s| s.webhook_id.clone())
        .collect()
}

/// Issue 14 acceptance: SIGHUP adding a trigger and raising the destination's `max_in_flight`
/// from 5 to 10: the new trigger answers 202 and the downstream then sees 10 calls at once; a
/// later SIGHUP with invalid TOML keeps serving and counts one `result="error"` reload. Every
/// accepted event is delivered once the downstream answers.
#[test]
fn sighup_adds_a_trigger_and_raises_max_in_flight() {
    let ds = Downstream::start(Behavior::default());
    ds.hold(true);
    let uri = ds.uri("/sink");
    let server = start(&manifest(&uri, 5, false));
    let mut c = server.client();
    let mut ids = HashSet::new();
    for i in 0..20 {
        ids.insert(accepted(&c.post("/hooks/t", format!("{{\"n\":{i}}}").as_bytes(), &[])).0);
    }
    assert!(wait_until(Duration::from_secs(10), || ds.in_flight() == 5));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        ds.in_flight(),
        5,
        "max_in_flight = 5 holds before the reload"
    );
    assert_eq!(
        c.post("/hooks/t2", b"{}", &[]).status,
        404,
        "t2 does not exist yet"
    );
    assert_eq!(metric(&server, "sluice_config_generation", &[]), 1.0);

    std::fs::write(manifest_path(&server), manifest(&uri, 10, true)).unwrap();
    sighup(&server);
    wait_generation(&server, 2.0);
    assert!(
        wait_until(Duration::from_secs(10), || ds.in_flight() == 10),
        "the raised limit did not start the queued calls: {} in flight",
        ds.in_flight()
    );
    ids.insert(accepted(&c.post("/hooks/t2", b"{\"new\":true}", &[])).0);
    assert_eq!(
        metric(&server, "sluice_config_reloads_total", &[("result", "ok")]),
        1.0
    );

    // Invalid TOML: refused, counted, the old (generation 2) configuration keeps serving.
    sighup_with_invalid_toml_keeps_generation(&server, 2.0);
    ids.insert(accepted(&c.post("/hooks/t2", b"{}", &[])).0);
    assert!(
        server.stderr().contains("reload refused"),
        "{}",
        server.stderr()
    );
    assert!(server.is_running());

    ds.hold(false);
    assert!(
        wait_until(Duration::from_secs(20), || delivered_ids(&ds).len()
            >= ids.len()),
        "only {} of {} delivered",
        delivered_ids(&ds).len(),
        ids.len()
    );
    let delivered = delivered_ids(&ds);
    assert_eq!(delivered.iter().cloned().collect::<HashSet<_>>(), ids);
    assert_eq!(delivered.len(), ids.len(), "each event delivered once");
    assert_eq!(ds.peak_concurrency(), 10);
}

/// What a reload refuses, through `POST /admin/reload`: the answer names the key, nothing
/// changes, the server keeps serving; the token is required.
#[test]
fn admin_reload_refuses_restart_only_and_invalid_changes() {
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    let text = manifest(&uri, 5, false);
    let server = start(&text);
    assert_eq!(admin_reload(&server, None).status, 401);
    assert_eq!(admin_reload(&server, Some("wrong")).status, 401);

    // Unchanged manifest: a reload that applies nothing new still succeeds.
    let r = admin_reload(&server, Some(TOKEN));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["generation"], 2);

    let path = manifest_path(&server);
    let cases = [
        // (listen, data_dir and workers come from the command line here, which wins at a
        // reload as at start; their refusal is covered by the unit tests of the diff.)
        (format!("{text}\n[server]\nmax_connections_per_core = 10\n"), 409, "server.max_connections_per_core"),
        (format!("{text}\n[ingest]\nmax_sources = 7\n"), 409, "[ingest]"),
        (
            text.replace("timeout = \"60s\"", "timeout = \"60s\"\ncircuit = { failures = 2 }"),
            409,
            "circuit",
        ),
        (format!("{text}\n[wal]\ndurability = \"os\"\n"), 409, "wal.durability"),
        (text.replace("max_in_flight = 5", "max_in_flight = 0"), 400, "max_in_flight"),
        (text.replace("timeout = \"60s\"", "timeout = \"60s\"\nbogus = 1"), 400, "bogus"),
        (
            format!("{text}\n[[triggers]]\nid = \"s\"\nprovider = \"x\"\npath = \"/s\"\nverify = \"github\"\nsecrets = [{{ env = \"NOPE_SECRET\" }}]\n"),
            400,
            "NOPE_SECRET",
        ),
        (
            format!("{text}\n[[triggers]]\nid = \"g\"\nprovider = \"x\"\npath = \"/g\"\nmax_pending = {{ events = 10 }}\n"),
            409,
            "max_pending",
        ),
    ];
    for (i, (manifest, status, key)) in cases.iter().enumerate() {
        std::fs::write(&path, manifest).unwrap();
        let r = admin_reload(&server, Some(TOKEN));
        assert_eq!(r.status, *status, "case {i}: {}", r.text());
        let v = r.json();
        assert!(v["detail"].as_str().unwrap().contains(key), "case {i}: {v}");
        assert_eq!(v["generation"], 2, "case {i}: nothing published");
    }
    assert_eq!(
        metric(
            &server,
            "sluice_config_reloads_total",
            &[("result", "error")]
        ),
        cases.len() as f64
    );
    // Still serving generation 2.
    accepted(&server.post("/hooks/t", b"{}"));
    assert_eq!(metric(&server, "sluice_config_generation", &[]), 2.0);
}

/// Reloads while a sender posts continuously: `t2` is added and removed, the limit moves
/// between 3 and 8, by SIGHUP and by the admin route alternately. No accepted event is lost
/// (events of `t2` accepted before its removal included), no request fails other than `t2`'s
/// 404 while it does not exist, and a cut limit never cancels a call in flight.
#[test]
fn reloads_during_traffic_lose_no_event() {
    let ds = Downstream::start(Behavior {
        delay: Duration::from_millis(20),
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let server = start(&manifest(&uri, 3, false));
    let addr = server.addr();
    let stop = Arc::new(AtomicBool::new(false));
    let accepted_ids = Arc::new(Mutex::new(HashSet::new()));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let sender = {
        let (stop, ids, failures) = (stop.clone(), accepted_ids.clone(), failures.clone());
        std::thread::spawn(move || {
            let mut c = Client::connect(addr).unwrap();
            let started = Instant::now();
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed)
                && started.elapsed() < Duration::from_secs(30)
                && n < 5000
            {
                n += 1;
                let path = if n % 3 == 0 { "/hooks/t2" } else { "/hooks/t" };
                let r = c.post(path, format!("{{\"n\":{n}}}").as_bytes(), &[]);
                match r.status {
                    202 => {
                        ids.lock()
                            .unwrap()
                            .insert(r.json()["event_id"].as_str().unwrap().to_string());
                    }
                    404 if path == "/hooks/t2" => {}
                    s => failures
                        .lock()
                        .unwrap()
                        .push(format!("{path}: {s} {}", r.text())),
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let path = manifest_path(&server);
    for round in 0..6u32 {
        std::thread::sleep(Duration::from_millis(300));
        let (max, with_t2) = if round % 2 == 0 {
            (8, true)
        } else {
            (3, false)
        };
        std::fs::write(&path, manifest(&uri, max, with_t2)).unwrap();
        if round % 2 == 0 {
            sighup(&server);
            wait_generation(&server, f64::from(round) + 2.0);
        } else {
            let r = admin_reload(&server, Some(TOKEN));
            assert_eq!(r.status, 200, "{}", r.text());
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    assert!(
        failures.lock().unwrap().is_empty(),
        "{:?}",
        failures.lock().unwrap()
    );
    let ids = accepted_ids.lock().unwrap().clone();
    assert!(ids.len() > 100, "too little traffic: {}", ids.len());
    assert!(
        wait_until(Duration::from_secs(30), || delivered_ids(&ds).len()
            >= ids.len()),
        "only {} of {} delivered",
        delivered_ids(&ds).len(),
        ids.len()
    );
    let delivered = delivered_ids(&ds);
    let set: HashSet<String> = delivered.iter().cloned().collect();
    assert_eq!(set, ids, "every accepted event delivered");
    // No call was cut short by a shrinking limit: one attempt per event.
    assert!(
        ds.seen().iter().all(|s| s.attempt == 1),
        "a call was retried"
    );
    assert!(ds.peak_concurrency() <= 8, "peak {}", ds.peak_concurrency());
    assert_eq!(metric(&server, "sluice_config_generation", &[]), 7.0);
    assert!(server.is_running());
}

/// `[server] io` is restart-only: the cores' loops run on the backend chosen at start. A reload
/// changing it is refused naming the key (the server is started without `SLUICE_IO`, which
/// would win over the manifest, at start as at a reload).
#[test]
fn reload_refuses_a_change_of_the_io_backend() {
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    let text = format!("{}\n[server]\nio = \"mio\"\n", manifest(&uri, 5, false));
    let opts = big_buckets(Opts::config(&text)).env("SLUICE_ADMIN_TOKEN", TOKEN);
    let server = Server::start(opts.env_remove("SLUICE_IO"));
    std::fs::write(manifest_path(&server), text.replace("\"mio\"", "\"auto\"")).unwrap();
    let r = admin_reload(&server, Some(TOKEN));
    assert_eq!(r.status, 409, "{}", r.text());
    let v = r.json();
    assert_eq!(v["reason"], "needs_restart", "{v}");
    assert!(
        v["detail"].as_str().unwrap().starts_with("server.io"),
        "{v}"
    );
    assert_eq!(v["generation"], 1, "nothing published");
    assert_eq!(metric(&server, "sluice_config_generation", &[]), 1.0);
}

/// Gates re-keyed by a reload without losing a waiting event: `throttle = { period = "60s",
/// max = 2 }` lets 2 of 10 events through and holds 8 for a minute; a reload to `max = 100`
/// re-offers the 8 waiting events to the new gate, which passes them at once. Each event is
/// delivered exactly once.
#[test]
fn reload_rekeys_flow_gates_without_losing_waiting_events() {
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    let gated = |max: u32| {
        manifest(&uri, 5, false).replace(
            "handler = ",
            &format!("throttle = {{ period = \"60s\", max = {max} }}\nhandler = "),
        )
    };
    let server = start(&gated(2));
    let mut c = server.client();
    let mut ids = HashSet::new();
    for i in 0..10 {
        ids.insert(accepted(&c.post("/hooks/t", format!("{{\"n\":{i}}}").as_bytes(), &[])).0);
    }
    assert!(wait_until(Duration::from_secs(10), || ds.count() == 2));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(ds.count(), 2, "the throttle holds 8 events");
    let state = server.get("/api/v1/state").json();
    assert_eq!(state["triggers"][0]["pending_events"], 8, "{state}");
    assert_eq!(state["triggers"][0]["gate_waiting"], 8, "{state}");
    assert_eq!(
        metric(
            &server,
            "sluice_flow_held",
            &[("trigger", "t"), ("gate", "throttle")]
        ),
        8.0
    );

    std::fs::write(manifest_path(&server), gated(100)).unwrap();
    let r = admin_reload(&server, Some(TOKEN));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        wait_until(Duration::from_secs(10), || delivered_ids(&ds).len() == 10),
        "the waiting events were not re-offered: {} delivered",
        delivered_ids(&ds).len()
    );
    let delivered = delivered_ids(&ds);
    assert_eq!(delivered.iter().cloned().collect::<HashSet<_>>(), ids);
    assert_eq!(delivered.len(), 10, "each once");
    // 2 passed before the reload; 8 waited, counted once: when they left the new gate (at
    // once, re-offered to their own stage), not also when they left the old one.
    let flow = |decision: &str| {
        metric(
            &server,
            "sluice_flow_control_total",
            &[
                ("trigger", "t"),
                ("gate", "throttle"),
                ("decision", decision),
            ],
        )
    };
    assert_eq!(flow("wait"), 8.0);
    assert_eq!(flow("pass"), 2.0);
    assert_eq!(
        metric(
            &server,
            "sluice_flow_held",
            &[("trigger", "t"), ("gate", "throttle")]
        ),
        0.0,
        "the gauge follows the re-keyed gates"
    );
}

/// Held by reference across a re-key: with `[flow] max_held_bytes = 0` the 5 events a throttle
/// holds have no body in memory. The reload keys the throttle by `event.body.k` (distinct per
/// event), so every event passes the new gate only if its body was read back *before* its key
/// was resolved again (an empty body would put all five under one key, and four would wait a
/// minute). Each is delivered once with its exact bytes; the held gauges (gates and dispatch)
/// return to 0 and no read-back failed.
#[test]
fn reload_rekeys_held_events_whose_bodies_are_in_the_log() {
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    let gated = |gate: &str| {
        format!(
            "{}\n[flow]\nmax_held_bytes = 0\n",
            manifest(&uri, 5, false).replace("handler = ", &format!("{gate}\nhandler = "))
        )
    };
    let server = start(&gated("throttle = { period = \"60s\", max = 1 }"));
    let mut c = server.client();
    let bodies: Vec<Vec<u8>> = (0..6)
        .map(|i| format!("{{\"k\":\"k{i}\",\"pad\":\"{}\"}}", "y".repeat(50 * i)).into_bytes())
        .collect();
    let ids: Vec<String> = bodies
        .iter()
        .map(|b| accepted(&c.post("/hooks/t", b, &[])).0)
        .collect();
    assert!(wait_until(Duration::from_secs(10), || ds.count() == 1));
    let held = |gate: &str| {
        metric(
            &server,
            "sluice_flow_held",
            &[("trigger", "t"), ("gate", gate)],
        )
    };
    assert!(wait_until(Duration::from_secs(10), || held("throttle") == 5.0));
    std::fs::write(
        manifest_path(&server),
        gated("throttle = { key = \"event.body.k\", period = \"60s\", max = 1 }"),
    )
    .unwrap();
    let r = admin_reload(&server, Some(TOKEN));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        wait_until(Duration::from_secs(10), || delivered_ids(&ds).len() == 6),
        "{} delivered: a re-offered event was keyed without its body",
        delivered_ids(&ds).len()
    );
    let seen = ds.seen();
    assert_eq!(seen.len(), 6, "each once");
    for (id, body) in ids.iter().zip(&bodies) {
        let call = seen
            .iter()
            .find(|s| &s.webhook_id == id)
            .expect("delivered");
        assert_eq!(&call.body, body, "body of {id}");
    }
    assert!(wait_until(Duration::from_secs(5), || held("throttle")
        == 0.0
        && held("dispatch") == 0.0));
    assert_eq!(
        metric(&server, "sluice_flow_read_back_failures_total", &[]),
        0.0
    );
}

/// Shrinking `max_in_flight` from 10 to 3 with 10 calls held by the downstream: none is
/// cancelled (all 10 stay in flight, each is answered and counted once, on its first attempt),
/// and once they return at most 3 calls run at a time.
#[test]
fn shrinking_max_in_flight_waits_for_releases() {
    let ds = Downstream::start(Behavior::default());
    ds.hold(true);
    let uri = ds.uri("/sink");
    let server = start(&manifest(&uri, 10, false));
    let mut c = server.client();
    let mut ids = HashSet::new();
    for i in 0..20 {
        ids.insert(accepted(&c.post("/hooks/t", format!("{{\"n\":{i}}}").as_bytes(), &[])).0);
    }
    assert!(wait_until(Duration::from_secs(10), || ds.in_flight() == 10));
    std::fs::write(manifest_path(&server), manifest(&uri, 3, false)).unwrap();
    assert_eq!(admin_reload(&server, Some(TOKEN)).status, 200);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(ds.in_flight(), 10, "a cut limit cancelled calls in flight");
    assert_eq!(ds.count(), 10, "no new call started past the new limit");
    // Slow answers from now on, so the concurrency after the release is observable.
    ds.set(Behavior {
        delay: Duration::from_millis(100),
        ..Behavior::default()
    });
    ds.hold(false);
    // The 10 held calls return within milliseconds; the next ones take 100 ms each, so with
    // the old limit 10 would run at once again and this never holds.
    assert!(
        wait_until(Duration::from_secs(5), || ds.in_flight() <= 3),
        "{} in flight after the release",
        ds.in_flight()
    );
    let mut peak_after = 0;
    let started = Instant::now();
    while (ds.count() < 20 || ds.in_flight() > 0) && started.elapsed() < Duration::from_secs(20) {
        peak_after = peak_after.max(ds.in_flight());
        std::thread::sleep(Duration::from_millis(5));
    }
    let delivered = delivered_ids(&ds);
    assert_eq!(delivered.iter().cloned().collect::<HashSet<_>>(), ids);
    assert_eq!(delivered.len(), 20, "each once");
    assert!(
        ds.seen().iter().all(|s| s.attempt == 1),
        "a call was retried"
    );
    assert!(
        peak_after <= 3,
        "{peak_after} calls at once after the cut to 3"
    );
    assert!(peak_after >= 1);
}

/// A trigger added by SIGHUP with a flow-control gate (issue 14): its gate applies at once and
/// is bounded like a start-up trigger's. With `[flow] max_held = 3` and the new trigger `g`
/// throttled to 1 per hour, 10 events to `g` give 1 delivery, 3 held in the gate (its own
/// `sluice_flow_held` series, claimed by the reload) and 6 parked in the log, while `t` keeps
/// flowing; a second reload raising the throttle delivers all 10, each once.
#[test]
fn sighup_adds_a_trigger_with_a_throttle_gate() {
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    let base = format!("[flow]\nmax_held = 3\n{}", manifest(&uri, 8, false));
    let with_g = |max: u32| {
        format!(
            "{base}\n[[triggers]]\nid = \"g\"\nprovider = \"pg\"\npath = \"/hooks/g\"\n\
             handler = \"{uri}\"\nthrottle = {{ period = \"1h\", max = {max} }}\n"
        )
    };
    let server =
        Server::start(big_buckets(Opts::config(&base).workers(1)).env("SLUICE_ADMIN_TOKEN", TOKEN));
    let mut c = server.client();
    let mut t_ids = HashSet::new();
    t_ids.insert(accepted(&c.post("/hooks/t", b"{}", &[])).0);
    assert_eq!(c.post("/hooks/g", b"{}", &[]).status, 404);

    std::fs::write(manifest_path(&server), with_g(1)).unwrap();
    sighup(&server);
    wait_generation(&server, 2.0);
    let mut g_ids = HashSet::new();
    for i in 0..10 {
        g_ids.insert(accepted(&c.post("/hooks/g", format!("{{\"g\":{i}}}").as_bytes(), &[])).0);
        t_ids.insert(accepted(&c.post("/hooks/t", format!("{{\"t\":{i}}}").as_bytes(), &[])).0);
    }
    let held = |s: &Server| {
        metric(
            s,
            "sluice_flow_held",
            &[("trigger", "g"), ("gate", "throttle")],
        )
    };
    let parked = |s: &Server| metric(s, "sluice_pump_parked_events", &[]);
    let in_log = |s: &Server| {
        metric(
            s,
            "sluice_flow_held_in_log",
            &[("trigger", "g"), ("gate", "throttle")],
        )
    };
    // Past `max_held` the gate holds g's waiters by reference (issue 38): none is parked.
    assert!(
        wait_until(Duration::from_secs(10), || in_log(&server) == 6.0),
        "6 of g's events should wait by reference: in the log {}, held {}, parked {}",
        in_log(&server),
        held(&server),
        parked(&server)
    );
    assert_eq!(held(&server), 9.0, "3 in full, 6 by reference");
    assert_eq!(parked(&server), 0.0);
    let delivered = |ids: &HashSet<String>| {
        delivered_ids(&ds)
            .into_iter()
            .filter(|d| ids.contains(d))
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(10), || delivered(&t_ids) == t_ids.len()),
        "t keeps flowing past g's gate"
    );
    assert_eq!(delivered(&g_ids), 1, "the throttle lets 1 through");

    std::fs::write(manifest_path(&server), with_g(100)).unwrap();
    let r = admin_reload(&server, Some(TOKEN));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        wait_until(Duration::from_secs(10), || delivered(&g_ids) == 10),
        "g's held and parked events were not delivered: {}",
        delivered(&g_ids)
    );
    let all = delivered_ids(&ds);
    assert_eq!(all.len(), 21, "each event once: {all:?}");
    assert_eq!(all.iter().cloned().collect::<HashSet<_>>().len(), 21);
    assert_eq!(held(&server), 0.0);
    let flow = |d: &str| {
        metric(
            &server,
            "sluice_flow_control_total",
            &[("trigger", "g"), ("gate", "throttle"), ("decision", d)],
        )
    };
    // 1 passed; 9 were held (3 in full, 6 by reference), re-offered to the new gate and left
    // it (one `wait` each).
    assert_eq!((flow("pass"), flow("wait")), (1.0, 9.0));
}

/// `X-Hub-Signature-256` of `body` under `secret`.
fn github_signature(secret: &str, body: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    m.update(body);
    let hex: String = m
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

/// Issue 14: SIGHUP adds a GitHub webhook trigger with its secret from the environment, dedupe
/// and a throttle gate, while `t` takes traffic. From the new generation on, unsigned and
/// forged requests to it get 401 (counted in its own `sluice_signature_failures_total`
/// series), signed ones 202, a redelivery `200 duplicate_dropped`; the throttle holds all but
/// 2 of 6 events until a second reload raises it, then every accepted event is delivered once.
/// A third reload drops `verify`: the trigger then takes unsigned requests.
#[test]
fn sighup_adds_a_verified_deduped_throttled_trigger() {
    const SECRET: &str = "reload-gh-secret";
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    let base = manifest(&uri, 8, false);
    let with_gh = |auth: &str, max: u32| {
        format!(
            "{base}\n[[triggers]]\nid = \"gh\"\nprovider = \"github\"\npath = \"/hooks/gh\"\n\
             handler = \"{uri}\"\n{auth}throttle = {{ period = \"1h\", max = {max} }}\n"
        )
    };
    let signed = "verify = \"github\"\nsecrets = [{ env = \"GH_RELOAD_SECRET\" }]\ndedupe = true\n";
    let server = Server::start(
        big_buckets(Opts::config(&base))
            .env("SLUICE_ADMIN_TOKEN", TOKEN)
            .env("GH_RELOAD_SECRET", SECRET),
    );
    let mut c = server.client();
    let mut ids = HashSet::new();
    ids.insert(accepted(&c.post("/hooks/t", b"{}", &[])).0);
    assert_eq!(c.post("/hooks/gh", b"{}", &[]).status, 404);

    std::fs::write(manifest_path(&server), with_gh(signed, 2)).unwrap();
    sighup(&server);
    wait_generation(&server, 2.0);
    let post_gh = |c: &mut Client, n: usize, sig: Option<&str>| {
        let body = format!("{{\"number\":{n}}}");
        let good = github_signature(SECRET, body.as_bytes());
        let delivery = format!("delivery-{n}");
        let mut h = vec![("X-GitHub-Delivery", delivery.as_str())];
        if let Some(s) = sig {
            h.push(("X-Hub-Signature-256", if s.is_empty() { &good } else { s }));
        }
        c.post("/hooks/gh", body.as_bytes(), &h)
    };
    let failures = |reason: &str| {
        metric(
            &server,
            "sluice_signature_failures_total",
            &[("reason", reason), ("trigger", "gh")],
        )
    };
    assert_eq!(failures("missing_signature"), 0.0, "its series, rendered");
    let mut gh = HashSet::new();
    for n in 0..6 {
        assert_eq!(post_gh(&mut c, n, None).status, 401, "unsigned");
        assert_eq!(post_gh(&mut c, n, Some("sha256=00")).status, 401, "forged");
        gh.insert(accepted(&post_gh(&mut c, n, Some(""))).0);
        ids.insert(accepted(&c.post("/hooks/t", format!("{{\"t\":{n}}}").as_bytes(), &[])).0);
    }
    let dup = post_gh(&mut c, 0, Some(""));
    assert_eq!(dup.status, 200, "{}", dup.text());
    assert!(dup.text().contains("duplicate_dropped"), "{}", dup.text());
    assert_eq!(failures("missing_signature"), 6.0);
    assert_eq!(failures("bad_signature"), 6.0);
    assert_eq!(
        metric(&server, "sluice_dedupe_dropped_total", &[("trigger", "gh")]),
        1.0
    );
    let delivered = |of: &HashSet<String>| {
        delivered_ids(&ds)
            .into_iter()
            .filter(|d| of.contains(d))
            .count()
    };
    assert!(wait_until(Duration::from_secs(10), || delivered(&ids) == ids.len()));
    assert!(wait_until(Duration::from_secs(10), || delivered(&gh) == 2));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(delivered(&gh), 2, "the throttle holds the other 4");
    assert_eq!(
        metric(
            &server,
            "sluice_flow_held",
            &[("trigger", "gh"), ("gate", "throttle")]
        ),
        4.0
    );

    std::fs::write(manifest_path(&server), with_gh(signed, 100)).unwrap();
    assert_eq!(admin_reload(&server, Some(TOKEN)).status, 200);
    assert!(
        wait_until(Duration::from_secs(10), || delivered(&gh) == 6),
        "held events lost: {} of 6 delivered",
        delivered(&gh)
    );

    // Without `verify` (and dedupe) the trigger takes unsigned requests from the next turn.
    std::fs::write(manifest_path(&server), with_gh("", 100)).unwrap();
    assert_eq!(admin_reload(&server, Some(TOKEN)).status, 200);
    let (open, _) = accepted(&post_gh(&mut c, 99, None));
    gh.insert(open);
    assert!(wait_until(Duration::from_secs(10), || delivered(&gh) == 7));
    let all = delivered_ids(&ds);
    assert_eq!(all.len(), ids.len() + gh.len(), "each event once: {all:?}");
}

/// A reload that keeps trigger `t` but takes its handler away applies live, and says on stderr
/// that `t`'s events not yet dispatched are recorded `no_handler` from that generation on.
#[test]
fn a_reload_that_removes_a_kept_triggers_handler_says_so() {
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    let server = start(&manifest(&uri, 5, false));
    let store_only = "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\n";
    std::fs::write(manifest_path(&server), store_only).unwrap();
    let r = admin_reload(&server, Some(TOKEN));
    assert_eq!(r.status, 200, "{}", r.text());
    let line = "trigger \"t\" has no handler from generation 2 on";
    assert!(
        wait_until(Duration::from_secs(5), || server.stderr().contains(line)),
        "stderr: {}",
        server.stderr()
    );
    // Still served: stored, not delivered.
    let mut c = server.client();
    accepted(&c.post("/hooks/t", b"{\"n\":1}", &[]));
}
