//! Issue 38 item 3: `ordering = { key, on_exhausted }`, FIFO per key as one setting, through
//! the real binary (2 workers, events accepted on both cores) and a real downstream: 0
//! inversions over 4 keys × 200 events with retries, a SIGKILL and a reload; a key whose
//! events fail holds only itself; `on_exhausted = "hold"` keeps the key stopped (through a
//! restart) until its dead letter is replayed (the replay first) or discarded.

use std::collections::HashSet;
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use crate::downstream::{Behavior, Downstream, Seen};
use crate::keys::{manifest, post_all};
use crate::reload::{manifest_path, metric, sighup, wait_generation};
use crate::support::*;

const TOKEN: &str = "ordering-admin-token";

/// The event index `i` of a body `"<key> <i>"`.
fn index(body: &[u8]) -> Option<usize> {
    std::str::from_utf8(body)
        .ok()?
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

/// Per key, the successful calls in the order the downstream answered them: (event id, index).
fn delivered(seen: &[Seen], key: &str) -> Vec<(String, usize)> {
    let prefix = format!("{key} ");
    let mut out: Vec<(String, usize)> = Vec::new();
    for s in seen
        .iter()
        .filter(|s| s.status == 200 && s.body.starts_with(prefix.as_bytes()))
    {
        // A call answered before a SIGKILL is sent again after it (at least once): its first
        // success is its place.
        if !out.iter().any(|(id, _)| *id == s.webhook_id) {
            out.push((s.webhook_id.clone(), index(&s.body).unwrap_or(usize::MAX)));
        }
    }
    out
}

/// Pairs of one key delivered against acceptance order (the event id, a ULID).
fn inversions(seen: &[Seen], key: &str) -> usize {
    let got = delivered(seen, key);
    let mut n = 0;
    for (i, (a, _)) in got.iter().enumerate() {
        for (b, _) in &got[i + 1..] {
            if b < a {
                eprintln!("key {key}: {a} delivered before the older {b}");
                n += 1;
            }
        }
    }
    n
}

/// Trigger `t`'s destination with `retry = { policy }`.
fn retry(ds: &Downstream, policy: &str) -> String {
    format!(
        "[[destinations]]\nuri = \"{}\"\nretry = {{ {policy} }}\n",
        ds.uri("/t")
    )
}

/// Bodies failed once already (the rule fails the first try of every 10th event).
static FAILED_ONCE: Mutex<Option<HashSet<Vec<u8>>>> = Mutex::new(None);

#[test]
fn ordering_keeps_each_keys_acceptance_order_through_retries_a_sigkill_and_a_reload() {
    let ds = Downstream::start(Behavior {
        delay: Duration::from_millis(2),
        ..Behavior::default()
    });
    ds.rule(|body, _| {
        if index(body)? % 10 != 3 {
            return None;
        }
        let mut set = FAILED_ONCE.lock().unwrap();
        let first = set.get_or_insert_with(HashSet::new).insert(body.to_vec());
        first.then(|| Behavior {
            status: 503,
            ..Behavior::default()
        })
    });
    // Small bounds, so events are parked and held by reference as well.
    let head = "[orchestrator]\npumps = { max_outstanding = 4 }\n[flow]\nmax_held = 8\n";
    let gates = "ordering = { key = \"event.headers.x-key\" }";
    let m = manifest(&ds, head, &[("t", gates), ("other", "")])
        + &retry(&ds, "max_attempts = 10, base = \"20ms\", cap = \"50ms\"");
    let mut server = Server::start(Opts::config(&m).workers(2).env("SLUICE_ADMIN_TOKEN", TOKEN));
    let keys = ["a", "b", "c", "d"];
    let per_key = 200;
    let bodies = |range: std::ops::Range<usize>| {
        let mut v = Vec::new();
        for i in range {
            for k in keys {
                v.push((k.to_owned(), format!("{k} {i}").into_bytes()));
            }
        }
        v
    };
    post_all(&server, "/hooks/t", bodies(0..100), 8);
    // A SIGKILL while the keys are being delivered, then a start on the same data.
    assert!(
        ds.wait(Duration::from_secs(30), |s| s.len() >= 60),
        "deliveries started"
    );
    server.sigkill();
    server.restart();
    post_all(&server, "/hooks/t", bodies(100..150), 8);
    // A reload that changes another trigger while keys wait.
    let m2 = m.replace(
        "path = \"/hooks/other\"",
        "path = \"/hooks/other\"\nsingleton = {}",
    );
    assert_ne!(m, m2);
    std::fs::write(manifest_path(&server), &m2).unwrap();
    sighup(&server);
    wait_generation(&server, 2.0);
    post_all(&server, "/hooks/t", bodies(150..per_key), 8);
    let all = |s: &[Seen]| keys.iter().all(|k| delivered(s, k).len() == per_key);
    assert!(
        ds.wait(Duration::from_secs(120), all),
        "delivered per key: {:?}",
        keys.map(|k| delivered(&ds.seen(), k).len())
    );
    let seen = ds.seen();
    let retried = seen.iter().filter(|s| s.attempt > 1).count();
    assert!(retried >= 40, "retries happened: {retried}");
    let total: usize = keys.iter().map(|k| inversions(&seen, k)).sum();
    eprintln!(
        "ordering: {} calls, {retried} retries, {total} inversions over 4 keys × {per_key}",
        seen.len()
    );
    assert_eq!(total, 0);
}

/// Whether the downstream fails `"a 3"` (permanently: 400, a dead letter at once).
static FAIL_A3: Mutex<bool> = Mutex::new(true);

#[test]
fn on_exhausted_hold_stops_only_the_failing_key_until_its_dead_letter_is_replayed_or_discarded() {
    let ds = Downstream::start(Behavior::default());
    ds.rule(|body, _| {
        let fail =
            (body == b"a 3" && *FAIL_A3.lock().unwrap()) || body == b"a 12" || body == b"a 17";
        fail.then(|| Behavior {
            status: 400,
            ..Behavior::default()
        })
    });
    let gates = "ordering = { key = \"event.headers.x-key\", on_exhausted = \"hold\" }";
    let m = manifest(&ds, "", &[("t", gates)])
        + &retry(&ds, "max_attempts = 2, base = \"20ms\", cap = \"20ms\"");
    let mut server = Server::start(Opts::config(&m).workers(2).env("SLUICE_ADMIN_TOKEN", TOKEN));
    let post = |server: &Server, key: &str, range: std::ops::Range<usize>| {
        let bodies = range.map(|i| (key.to_owned(), format!("{key} {i}").into_bytes()));
        post_all(server, "/hooks/t", bodies.collect(), 1);
    };
    let got = |key: &str| -> Vec<usize> {
        delivered(&ds.seen(), key)
            .into_iter()
            .map(|(_, i)| i)
            .collect()
    };
    post(&server, "a", 0..10);
    post(&server, "b", 0..10);
    assert!(
        ds.wait(Duration::from_secs(20), |s| delivered(s, "b").len() == 10),
        "key b is not held by key a: {:?}",
        got("b")
    );
    assert!(wait_until(Duration::from_secs(10), || got("a") == vec![0, 1, 2]));
    thread::sleep(Duration::from_millis(700));
    assert_eq!(got("a"), vec![0, 1, 2], "a 3 is dead-lettered: key a stops");
    let stopped =
        |server: &Server| metric(server, "sluice_ordering_keys_stopped", &[("trigger", "t")]);
    assert!(
        wait_until(Duration::from_secs(5), || stopped(&server) == 1.0),
        "{}",
        stopped(&server)
    );
    // The dashboard names the stopped key and its DLQ entry.
    let v = server.client().get("/api/v1/state").json();
    let t = v["triggers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "t")
        .unwrap();
    assert_eq!(t["ordering"]["stopped"][0]["key"], "a", "{}", t["ordering"]);
    let entry = t["ordering"]["stopped"][0]["dlq_entry"]
        .as_str()
        .unwrap()
        .to_owned();
    // And the page, in a real Chromium (where the test command installed one).
    if let Some(browser) = crate::browser::Browser::start() {
        browser.goto(&format!("http://{}/ui", server.addr()));
        let want = format!("stopped: a (DLQ {entry})");
        let read = "const e = document.querySelector('[data-testid=\"trigger-ordering\"]'); \
                    return e ? e.textContent : null;";
        let mut line = serde_json::Value::Null;
        let shown = wait_until(Duration::from_secs(20), || {
            line = browser.eval(read);
            line.as_str().is_some_and(|l| l.contains(&want))
        });
        assert!(shown, "the dashboard's ordering line: {line}");
        eprintln!("dashboard: {line}");
    }

    // Release: replay the dead letter; it goes first, then the rest of key a in order.
    *FAIL_A3.lock().unwrap() = false;
    let r = server.client().post(
        &format!("/admin/dlq/{entry}/replay"),
        b"",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
    );
    assert_eq!(r.status, 202, "{}", r.text());
    assert!(
        ds.wait(Duration::from_secs(20), |s| delivered(s, "a").len() == 10),
        "{:?}",
        got("a")
    );
    assert_eq!(
        got("a"),
        (0..10).collect::<Vec<_>>(),
        "the replay of a 3 first"
    );

    // Skip: a 12 fails permanently; a restart keeps the key stopped; a discard lets it go on.
    post(&server, "a", 10..15);
    assert!(wait_until(Duration::from_secs(10), || got("a").len() == 12));
    assert!(wait_until(Duration::from_secs(5), || stopped(&server) == 1.0));
    server.sigkill();
    server.restart();
    post(&server, "a", 15..16);
    post(&server, "b", 10..12);
    assert!(ds.wait(Duration::from_secs(20), |s| delivered(s, "b").len() == 12));
    thread::sleep(Duration::from_millis(700));
    assert_eq!(
        got("a"),
        (0..12).collect::<Vec<_>>(),
        "still stopped after a restart"
    );
    let ids: Vec<String> = (crate::dispatch::dlq_list(&server.data_dir()).iter())
        .filter_map(|e| e["id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        ids.len(),
        1,
        "a 12's entry only (a 3's left with its replay): {ids:?}"
    );
    let id = ids[0].clone();
    let out = run_cli(&[
        "dlq",
        "discard",
        &id,
        "--data-dir",
        path_str(&server.data_dir()),
    ]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        ds.wait(Duration::from_secs(20), |s| delivered(s, "a").len() == 15),
        "{:?}",
        got("a")
    );
    let expect: Vec<usize> = (0..16).filter(|i| *i != 12).collect();
    assert_eq!(got("a"), expect, "a 12 skipped, the rest in order");
    assert!(wait_until(Duration::from_secs(5), || stopped(&server) == 0.0));

    // Skip over HTTP: a 17 fails, a 18 and a 19 wait; `POST /admin/dlq/{id}/discard`.
    post(&server, "a", 16..20);
    assert!(wait_until(Duration::from_secs(10), || got("a").len() == 16));
    assert!(wait_until(Duration::from_secs(5), || stopped(&server) == 1.0));
    let ids: Vec<String> = (crate::dispatch::dlq_list(&server.data_dir()).iter())
        .filter_map(|e| e["id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(ids.len(), 1, "a 17's entry: {ids:?}");
    let path = format!("/admin/dlq/{}/discard", ids[0]);
    let auth = format!("Bearer {TOKEN}");
    let r = server.client().post(&path, b"", &[]);
    assert_eq!(r.status, 401, "no token: {}", r.text());
    // Two discards pipelined on one connection: the second finds the first on its way.
    let one = encode_request("POST", &path, &[("Authorization", &auth)], b"");
    let mut c = server.client();
    c.send(&[one.clone(), one].concat()).unwrap();
    let rs = c.read_responses(2).unwrap();
    assert_eq!(rs[0].status, 202, "{}", rs[0].text());
    assert_eq!(rs[1].status, 409, "{}", rs[1].text());
    assert_eq!(rs[1].json()["reason"], "in_progress");
    assert!(
        ds.wait(Duration::from_secs(20), |s| delivered(s, "a").len() == 18),
        "{:?}",
        got("a")
    );
    let expect: Vec<usize> = (0..20).filter(|i| *i != 12 && *i != 17).collect();
    assert_eq!(
        got("a"),
        expect,
        "a 17 skipped over HTTP, the rest in order"
    );
    assert!(wait_until(Duration::from_secs(5), || {
        crate::dispatch::dlq_list(&server.data_dir()).is_empty()
    }));
    let r = server
        .client()
        .post(&path, b"", &[("Authorization", &auth)]);
    assert_eq!(r.status, 404, "gone: {}", r.text());
    let r = server
        .client()
        .post("/admin/dlq/nope/discard", b"", &[("Authorization", &auth)]);
    assert_eq!(r.status, 400, "{}", r.text());
}
