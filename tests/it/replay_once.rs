//! Online DLQ replay hands each dead letter to the WAL once, whichever cores the calls land on:
//! the set of entries on their way is shared by every core (`dispatch::replay_claims`).
//!
//! Two workers, 600 events dead-lettered by a downstream answering 400, the downstream fixed,
//! then several `POST /admin/dlq/replay` calls at once on connections spread over both cores
//! (checked with `sluice_connections_open{core}`): every entry is delivered exactly once (counted
//! at the downstream by `replay_of`), the calls' `replayed` sum to 600, and the DLQ is empty.

use std::collections::HashMap;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use crate::dispatch::{big_buckets, dlq_list, server_counts_dlq};
use crate::downstream::{Behavior, Downstream};
use crate::support::*;

const TOKEN: &str = "s3cret-token";
const ENTRIES: usize = 600;
const CALLS: usize = 6;

/// `CALLS` connections of which at least one sits on each of the two cores (at most 10 tries:
/// SO_REUSEPORT spreads connections by their address hash).
fn connections_on_both_cores(server: &Server) -> Vec<Client> {
    for _ in 0..10 {
        let clients: Vec<Client> = (0..CALLS)
            .map(|_| Client::connect(server.addr()).expect("connect"))
            .collect();
        // Let both loops accept them (bounded), then count per core; the scrape's own
        // connection is one more on one core.
        let per_core = |s: &[Sample], core: &str| {
            sample_value(s, "sluice_connections_open", &[("core", core)])
        };
        let mut spread = false;
        wait_until(Duration::from_secs(5), || {
            let (_, s) = scrape(server);
            let (a, b) = (per_core(&s, "0"), per_core(&s, "1"));
            spread = a >= 1.0 && b >= 1.0 && a.min(b) >= 1.0 + f64::from(a + b > CALLS as f64);
            a + b > CALLS as f64
        });
        if spread {
            return clients;
        }
    }
    panic!("10 tries of {CALLS} connections never reached both cores");
}

fn replay_round(backend_note: &str) {
    let ds = Downstream::start(Behavior {
        status: 400,
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let cfg = crate::dispatch::manifest(&uri, "", "");
    let opts = big_buckets(Opts::config(&cfg))
        .workers(2)
        .env("SLUICE_ADMIN_TOKEN", TOKEN);
    let server = Server::start(opts);
    let mut c = server.client();
    for i in 0..ENTRIES {
        accepted(&c.post("/hooks/t", format!("{{\"n\":{i}}}").as_bytes(), &[]));
    }
    let dir = server.data_dir();
    assert!(
        wait_until(Duration::from_secs(60), || server_counts_dlq(
            &server, ENTRIES
        )),
        "{backend_note}: only {} of {ENTRIES} dead-lettered",
        dlq_list(&dir).len()
    );
    ds.set(Behavior::default());
    let before = ds.count();

    let clients = connections_on_both_cores(&server);
    let barrier = Arc::new(Barrier::new(CALLS));
    let calls: Vec<_> = clients
        .into_iter()
        .map(|mut client| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                // Each call lists and reads the 600 entries on its core's loop, the calls of
                // one core one after another: allow more than the harness's 10 s on a loaded
                // machine (debug build).
                client.set_read_timeout(Duration::from_secs(60));
                barrier.wait();
                let auth = [("Authorization", "Bearer s3cret-token")];
                let started = std::time::Instant::now();
                let r = client.try_post("/admin/dlq/replay", b"", &auth);
                (r, started.elapsed())
            })
        })
        .collect();
    let mut replayed = 0;
    for call in calls {
        let (r, took) = call.join().unwrap();
        let r =
            r.unwrap_or_else(|e| panic!("{backend_note}: replay call failed after {took:?}: {e}"));
        assert!(matches!(r.status, 200 | 202), "{}", r.text());
        eprintln!(
            "{backend_note}: call answered {} in {took:?}: {}",
            r.status,
            r.text()
        );
        replayed += r.json()["replayed"].as_u64().unwrap();
    }
    assert_eq!(
        replayed, ENTRIES as u64,
        "{backend_note}: the calls together handed {replayed} entries to the WAL"
    );
    // Every replay delivered, then nothing pending: no second copy can still be on its way.
    let replays = |ds: &Downstream| {
        let mut by_entry: HashMap<String, usize> = HashMap::new();
        for s in ds.seen().iter().filter(|s| s.status == 200) {
            if let Some(of) = &s.replay_of {
                *by_entry.entry(of.clone()).or_default() += 1;
            }
        }
        by_entry
    };
    assert!(
        wait_until(Duration::from_secs(60), || replays(&ds).len() >= ENTRIES),
        "{backend_note}: {} of {ENTRIES} entries delivered",
        replays(&ds).len()
    );
    assert!(
        wait_until(Duration::from_secs(30), || {
            let (_, s) = scrape(&server);
            sample_value(&s, "sluice_wal_pending_events", &[]) == 0.0
                && sample_value(&s, "sluice_dlq_entries", &[]) == 0.0
        }),
        "{backend_note}: backlog or DLQ not drained"
    );
    let by_entry = replays(&ds);
    let twice: Vec<_> = by_entry.iter().filter(|(_, &n)| n > 1).collect();
    assert!(
        twice.is_empty(),
        "{backend_note}: {} entries delivered more than once, e.g. {:?}",
        twice.len(),
        twice.first()
    );
    assert_eq!(by_entry.len(), ENTRIES);
    assert_eq!(ds.count() - before, ENTRIES, "{backend_note}: deliveries");
    let (_, s) = scrape(&server);
    assert_eq!(sample_value(&s, "sluice_dlq_replays_in_flight", &[]), 0.0);
    assert!(dlq_list(&dir).is_empty());
}

#[test]
fn concurrent_bulk_replays_on_two_cores_deliver_each_entry_once() {
    let backend = std::env::var("SLUICE_IO").unwrap_or_else(|_| "default".into());
    replay_round(&format!("io {backend}"));
}

/// A single replay of an entry a bulk replay has on its way is `409 in_progress`; once the
/// entry is gone it is `404`.
#[test]
fn a_single_replay_of_an_entry_on_its_way_is_refused() {
    let ds = Downstream::start(Behavior {
        status: 400,
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let cfg = crate::dispatch::manifest(&uri, "", "");
    let opts = big_buckets(Opts::config(&cfg)).env("SLUICE_ADMIN_TOKEN", TOKEN);
    let server = Server::start(opts);
    accepted(&server.client().post("/hooks/t", b"{}", &[]));
    assert!(wait_until(Duration::from_secs(20), || server_counts_dlq(
        &server, 1
    )));
    let id = dlq_list(&server.data_dir())[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    ds.set(Behavior::default());
    let auth = [("Authorization", "Bearer s3cret-token")];
    // Two replays of the entry pipelined on one connection: the first is on its way (its
    // answer waits for durability) when the second is read.
    let mut c = server.client();
    let path = format!("/admin/dlq/{id}/replay");
    let one = encode_request("POST", &path, &auth, b"");
    let two = [one.clone(), one].concat();
    c.send(&two).unwrap();
    let rs = c.read_responses(2).unwrap();
    assert_eq!(rs[0].status, 202, "{}", rs[0].text());
    assert_eq!(rs[1].status, 409, "{}", rs[1].text());
    assert_eq!(rs[1].json()["reason"], "in_progress");
    assert!(ds.wait(Duration::from_secs(20), |s| s
        .iter()
        .any(|s| s.replay_of.as_deref() == Some(id.as_str()))));
    // The entry leaves the DLQ with the core's next commit after the replay's, which may be
    // the one carrying the replay's own `Done`, so milliseconds after the delivery (README:
    // until then a call is `409 in_progress`); then `404`.
    let mut last = (0, String::new());
    let gone = wait_until(Duration::from_secs(5), || {
        let r = server.client().post(&path, b"", &auth);
        assert!(
            r.status == 404 || (r.status == 409 && r.json()["reason"] == "in_progress"),
            "{} {}",
            r.status,
            r.text()
        );
        last = (r.status, r.text());
        r.status == 404
    });
    assert!(gone, "still {last:?} 5 s after the replay's delivery");
    let delivered = ds
        .seen()
        .iter()
        .filter(|s| s.replay_of.as_deref() == Some(id.as_str()))
        .count();
    assert_eq!(delivered, 1);
}
