//! Flow gates that keep their promises through reloads, restarts and their own bounds, through
//! the real binary (2 cores) and a real downstream: a reload that changes another trigger's
//! gates moves no held deadline; throttle waiters leave in acceptance order (the event id)
//! across a reload and a restart, with events on both cores' logs; a full debounce gate takes
//! the event that supersedes one it holds; a call in flight at a crash takes no second unit of
//! its throttle window.

use std::time::{Duration, Instant};

use crate::downstream::{Behavior, Downstream};
use crate::reload::{manifest_path, metric, sighup, start, wait_generation};
use crate::support::*;

/// Trigger `t` with `gates`, trigger `u` with `u_gates`, both to `uri`; then `extra`.
fn manifest(uri: &str, gates: &str, u_gates: &str, extra: &str) -> String {
    format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n\
         {gates}\n\n[[triggers]]\nid = \"u\"\nprovider = \"p\"\npath = \"/hooks/u\"\n\
         handler = \"{uri}\"\n{u_gates}\n\n{extra}"
    )
}

/// Rewrites the manifest and reloads by SIGHUP; waits for generation `generation`.
fn reload(server: &Server, text: &str, generation: f64) {
    std::fs::write(manifest_path(server), text).unwrap();
    sighup(server);
    wait_generation(server, generation);
}

/// The worker (core) that accepted the event: bits 62..70 of its id (`wal::event_id`).
fn worker_of(id: &str) -> u32 {
    const CROCKFORD: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let v = id.bytes().fold(0u128, |v, c| {
        let d = CROCKFORD.iter().position(|&x| x == c).expect("crockford") as u128;
        (v << 5) | d
    });
    ((v >> 62) & 0xff) as u32
}

/// Posts events to `/hooks/t`, one per fresh connection, until there are at least 8 and both
/// cores accepted some; returns their ids in posting order (which must be id order).
fn post_spread(server: &Server) -> Vec<String> {
    let mut ids = Vec::new();
    while ids.len() < 8 || (ids.len() < 24 && !both_cores(&ids)) {
        ids.push(server.ingest("/hooks/t", format!("{{\"n\":{}}}", ids.len()).as_bytes()));
    }
    assert!(
        both_cores(&ids),
        "24 fresh connections all went to one core"
    );
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(
        sorted, ids,
        "ids of sequential posts are in acceptance order"
    );
    ids
}

fn both_cores(ids: &[String]) -> bool {
    ids.iter().any(|i| worker_of(i) == 0) && ids.iter().any(|i| worker_of(i) == 1)
}

/// Each id once, in the order the downstream first saw it.
fn first_seen(ds: &Downstream) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in ds.seen() {
        if !out.contains(&s.webhook_id) {
            out.push(s.webhook_id);
        }
    }
    out
}

/// Issue acceptance: debounce 3 s, one event, a SIGHUP every second for 9 s that adds and
/// removes another trigger's throttle: delivered 3 s ± 0.3 s after its 202.
#[test]
fn reloads_of_another_trigger_do_not_move_a_debounce_deadline() {
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    let gates = "debounce = { period = \"3s\" }";
    let server = start(&manifest(&uri, gates, "", ""));
    let t0 = Instant::now();
    let id = server.ingest("/hooks/t", b"{}");
    for i in 1..=9u32 {
        let next = t0 + Duration::from_secs(i.into());
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let u = match i % 2 {
            1 => "throttle = { period = \"1s\", max = 1 }",
            _ => "",
        };
        reload(&server, &manifest(&uri, gates, u, ""), f64::from(i) + 1.0);
    }
    let seen = ds.seen();
    assert_eq!(seen.len(), 1, "one delivery: {seen:?}");
    assert_eq!(seen[0].webhook_id, id);
    let at = seen[0].at.duration_since(t0);
    eprintln!("debounce 3 s through 9 reloads of another trigger: delivered at {at:?}");
    assert!(
        at >= Duration::from_millis(2_700) && at <= Duration::from_millis(3_300),
        "delivered at {at:?}, not 3 s ± 0.3 s"
    );
    assert_eq!(
        metric(
            &server,
            "sluice_flow_control_total",
            &[("trigger", "t"), ("gate", "debounce"), ("decision", "wait")]
        ),
        1.0,
        "wait counted once"
    );
}

/// Throttle 1/s, events on both cores' logs, then `disrupt` at 0.5 s: every event delivered,
/// in acceptance order.
fn throttle_order_survives(disrupt: impl FnOnce(&mut Server, &str)) {
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    let mut server = start(&manifest(
        &uri,
        "throttle = { period = \"1s\", max = 1 }",
        "",
        "",
    ));
    let t0 = Instant::now();
    let ids = post_spread(&server);
    std::thread::sleep((t0 + Duration::from_millis(500)).saturating_duration_since(Instant::now()));
    disrupt(&mut server, &uri);
    assert!(
        ds.wait(Duration::from_secs(ids.len() as u64 + 15), |s| {
            ids.iter().all(|i| s.iter().any(|x| &x.webhook_id == i))
        }),
        "not every event delivered: {:?}",
        first_seen(&ds)
    );
    let got = first_seen(&ds);
    let index = |v: &[String]| -> Vec<usize> {
        v.iter()
            .map(|i| ids.iter().position(|x| x == i).expect("a posted id"))
            .collect()
    };
    let cores: Vec<u32> = ids.iter().map(|i| worker_of(i)).collect();
    eprintln!(
        "throttle order: delivered {:?} (accepted on cores {cores:?})",
        index(&got)
    );
    assert_eq!(
        index(&got),
        (0..ids.len()).collect::<Vec<_>>(),
        "acceptance order"
    );
}

/// Issue acceptance: a reload at 0.5 s that changes the trigger's throttle (its key kept).
#[test]
fn throttle_waiters_keep_acceptance_order_across_a_reload() {
    throttle_order_survives(|server, uri| {
        let changed = "throttle = { period = \"1001ms\", max = 1 }";
        reload(server, &manifest(uri, changed, "singleton = {}", ""), 2.0);
    });
}

/// Issue acceptance: a restart (SIGTERM, start again) at 0.5 s: the events pending in both
/// logs reach the gate log by log, and still leave in acceptance order.
#[test]
fn throttle_waiters_keep_acceptance_order_across_a_restart() {
    throttle_order_survives(|server, _| {
        let t = Instant::now();
        server.stop();
        server.restart();
        eprintln!("restart (SIGTERM, start again) took {:?}", t.elapsed());
    });
}

/// Issue acceptance: `max_held = 50`, debounce 4 s, keys k0…k49 held, then a newer event for
/// k0: only the newer one is delivered for k0, 4 s after it; nothing parked, no overflow.
#[test]
fn a_full_debounce_gate_takes_the_superseding_event() {
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    let server = start(&manifest(
        &uri,
        "debounce = { key = \"event.body.k\", period = \"4s\" }",
        "",
        "[flow]\nmax_held = 50\n",
    ));
    let mut c = server.client();
    let mut post = |k: &str, v: u32| {
        let body = format!("{{\"k\":\"{k}\",\"v\":{v}}}");
        accepted(&c.post("/hooks/t", body.as_bytes(), &[])).0
    };
    let first: Vec<String> = (0..50).map(|k| post(&format!("k{k}"), 1)).collect();
    let held = |s: &Server| {
        metric(
            s,
            "sluice_flow_held",
            &[("trigger", "t"), ("gate", "debounce")],
        )
    };
    assert!(wait_until(Duration::from_secs(10), || held(&server) == 50.0));
    let t1 = Instant::now();
    let newer = post("k0", 2);
    assert!(
        ds.wait(Duration::from_secs(20), |s| s.len() >= 50
            && s.iter().any(|x| x.webhook_id == newer)),
        "the newer event of k0 and k1…k49 were not all delivered: {}",
        ds.count()
    );
    // Anything more (k0 v1, a duplicate) would arrive by now.
    std::thread::sleep(Duration::from_millis(500));
    let seen = ds.seen();
    let at = seen
        .iter()
        .find(|x| x.webhook_id == newer)
        .map(|x| x.at.duration_since(t1))
        .unwrap();
    eprintln!("max_held 50: k0 v2 delivered {at:?} after its post (debounce 4 s)");
    assert!(
        at >= Duration::from_millis(3_900) && at <= Duration::from_millis(5_000),
        "v2 not at its period: {at:?}"
    );
    assert!(
        !seen.iter().any(|x| x.webhook_id == first[0]),
        "the superseded k0 v1 was delivered"
    );
    assert_eq!(seen.len(), 50, "k1…k49 and k0 v2, once each");
    assert_eq!(metric(&server, "sluice_pump_parked_events", &[]), 0.0);
    assert_eq!(
        metric(
            &server,
            "sluice_flow_key_overflow_total",
            &[("trigger", "t"), ("gate", "debounce")]
        ),
        0.0
    );
}

/// A call in flight when the process dies is retried after the restart without a second unit
/// of its throttle window: it goes at once, and the next event waits only for the rest of the
/// period of the first call's hit (before: the retry waited a whole period, the next one two).
#[test]
fn a_call_in_flight_at_a_crash_takes_no_second_throttle_unit() {
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    let mut server = start(&manifest(
        &uri,
        "throttle = { period = \"10s\", max = 1 }",
        "",
        "",
    ));
    ds.hold(true);
    let a = server.ingest("/hooks/t", b"a");
    assert!(wait_until(Duration::from_secs(10), || ds.in_flight() == 1));
    let b = server.ingest("/hooks/t", b"b");
    // The window is saved at most 100 ms after its hit.
    std::thread::sleep(Duration::from_millis(500));
    server.sigkill();
    ds.hold(false);
    server.restart();
    let restarted = Instant::now();
    assert!(
        ds.wait(Duration::from_secs(30), |s| s
            .iter()
            .any(|x| x.webhook_id == b)),
        "b never delivered: {:?}",
        first_seen(&ds)
    );
    let seen = ds.seen();
    let retry = seen
        .iter()
        .filter(|x| x.webhook_id == a)
        .nth(1)
        .expect("a retried after the restart");
    let b_at = seen.iter().find(|x| x.webhook_id == b).unwrap().at;
    let retry_after = retry.at.saturating_duration_since(restarted);
    // From the first call's arrival downstream (its window hit came a few ms before).
    let first_call = seen.iter().find(|x| x.webhook_id == a).unwrap().at;
    let b_after = b_at.duration_since(first_call);
    eprintln!(
        "crash with a call in flight: retried {retry_after:?} after the restart, the next \
         event {b_after:?} after the first call (period 10 s)"
    );
    assert!(
        retry_after < Duration::from_secs(3),
        "the retry waited for a unit it already had: {retry_after:?}"
    );
    assert!(
        b_after >= Duration::from_millis(9_500) && b_after < Duration::from_secs(14),
        "the next event should go one period after the first call: {b_after:?}"
    );
}
