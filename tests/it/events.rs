//! Issue 27, "where is my event": attempts and outcomes as the offline `sluice events` tools
//! read them from a real server's data dir, while it runs and after it stopped.

use std::time::Duration;

use crate::dispatch::{big_buckets, manifest};
use crate::downstream::{Behavior, Downstream};
use crate::support::*;

fn show(dir: &std::path::Path, id: &str) -> (i32, String, String) {
    let out = run_cli(&["events", "show", id, "--data-dir", path_str(dir), "--json"]);
    (
        out.status.code().unwrap_or(-1),
        out.stdout.clone(),
        out.all(),
    )
}

fn shown(dir: &std::path::Path, id: &str) -> Option<serde_json::Value> {
    let (code, stdout, _) = show(dir, id);
    (code == 0).then(|| serde_json::from_str(stdout.trim()).expect("json"))
}

fn statuses(v: &serde_json::Value) -> Vec<serde_json::Value> {
    let attempts = v["attempts"].as_array().expect("attempts");
    attempts.iter().map(|a| a["status"].clone()).collect()
}

#[test]
fn events_show_gives_each_attempt_and_the_outcome_while_running_and_after_a_stop() {
    let ds = Downstream::start(Behavior::default());
    let fail = |status| Behavior {
        status,
        ..Behavior::default()
    };
    ds.script(vec![fail(500), fail(500)]);
    let uri = ds.uri("/sink");
    let dest = "retry = { max_attempts = 5, base = \"50ms\", cap = \"100ms\" }";
    let mut server = Server::start(big_buckets(Opts::config(&manifest(&uri, dest, ""))));
    let dir = server.data_dir();
    let id = server.ingest("/hooks/t", b"{\"order\":1}");
    let delivered = |v: &serde_json::Value| v["status"] == "delivered";
    assert!(
        wait_until(Duration::from_secs(20), || shown(&dir, &id)
            .is_some_and(|v| delivered(&v))),
        "not delivered: {:?}",
        show(&dir, &id)
    );
    ds.set(fail(410));
    let gone = server.ingest("/hooks/t", b"{\"order\":2}");
    assert!(
        wait_until(Duration::from_secs(20), || shown(&dir, &gone)
            .is_some_and(|v| v["status"] == "dead_lettered")),
        "not dead-lettered: {:?}",
        show(&dir, &gone)
    );
    server.stop();
    let v = shown(&dir, &id).expect("found after the stop");
    assert_eq!(statuses(&v), [500, 500, 200], "{v}");
    for a in v["attempts"].as_array().unwrap() {
        assert!(a["at"].as_u64().unwrap() > 1_600_000_000_000, "{a}");
        assert!(a["latency_ms"].as_f64().unwrap() > 0.0, "{a}");
    }
    assert_eq!(
        (v["trigger"].as_str(), v["bytes"].as_u64()),
        (Some("t"), Some(11))
    );
    let g = shown(&dir, &gone).expect("found");
    assert_eq!(statuses(&g), [410], "{g}");
    assert_eq!(g["reason"], "permanent_failure");
    // An id nobody wrote: 1, saying so; a malformed one: 2.
    let (code, _, all) = show(&dir, "01HZX3K9V7Q2W8E5R4T6Y1V0AB");
    assert_eq!(code, 1, "{all}");
    assert!(all.contains("not found"), "{all}");
    assert_eq!(show(&dir, "nope").0, 2);
    let out = run_cli(&["events", "ledger", "--data-dir", path_str(&dir), "--json"]);
    assert!(out.status.success(), "{}", out.all());
    let l: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let t = &l["triggers"]["t"];
    assert_eq!(
        (t["accepted"].as_u64(), t["delivered"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(
        (t["dead_lettered"].as_u64(), t["pending"].as_u64()),
        (Some(1), Some(0))
    );
    let out = run_cli(&["events", "list", "--data-dir", path_str(&dir), "--json"]);
    assert!(out.status.success(), "{}", out.all());
    let ids: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].clone())
        .collect();
    assert_eq!(ids, [gone.as_str(), id.as_str()], "newest first");
}
