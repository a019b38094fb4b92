//! Issue 12 dispatch features against a real downstream: `circuit.on_open = "hold"`, bulk DLQ
//! replay (online and offline).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::downstream::{Behavior, Downstream};
use crate::support::*;

fn manifest(uri: &str, destination: &str) -> String {
    format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n\n\
         [[destinations]]\nuri = \"{uri}\"\n{destination}\n"
    )
}

fn big_buckets(o: Opts) -> Opts {
    o.env("HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY", "1000000")
        .env("HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY", "1000000")
        .env("HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC", "1000000")
}

fn dlq_list(data_dir: &std::path::Path) -> Vec<serde_json::Value> {
    let out = run_cli(&["dlq", "list", "--data-dir", path_str(data_dir), "--json"]);
    assert!(out.status.success(), "dlq list failed: {}", out.all());
    out.stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

fn circuit_count(server: &Server, action: &str) -> f64 {
    let (_, samples) = scrape(server);
    samples
        .iter()
        .find(|s| {
            s.name == "harn_backpressure_events_total"
                && s.label("dimension") == Some("circuit")
                && s.label("action") == Some(action)
        })
        .map(|s| s.value)
        .unwrap_or(0.0)
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
    let dest =
        "max_in_flight = 8\nretry = { max_attempts = 3, base = \"100ms\", cap = \"200ms\" }\n\
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
