//! Per-core logs (`wal/core-K/`): the upgrade from the single-log layout, adoption of the logs
//! of a run with more workers, and events spread over several logs.

use crate::support::*;
use sluice::wal::{EventRecord, WalConfig};
use std::time::Duration;

fn pending(server: &Server) -> f64 {
    let (_, samples) = scrape(server);
    samples
        .iter()
        .find(|s| s.name == "sluice_wal_pending_events")
        .map_or(-1.0, |s| s.value)
}

fn event(i: u64) -> EventRecord {
    EventRecord {
        event_id: format!("01LEGACY0000000000000000{i:02}"),
        trigger_id: "default".into(),
        source: "old".into(),
        received_at_ms: 1_700_000_000_000 + i,
        headers: vec![("content-type".into(), b"application/json".to_vec())],
        body: format!("{{\"n\":{i}}}").into_bytes(),
        replay_of: None,
        body_json: Default::default(),
    }
}

#[test]
fn a_data_dir_of_the_single_log_layout_is_adopted_on_first_start() {
    let root = temp_root();
    let wal_dir = root.path().join("data").join("wal");
    // What the previous version wrote: segments directly in data/wal, three events pending.
    {
        let (mut wal, _) = sluice::wal::open(&WalConfig::new(&wal_dir)).expect("old layout");
        wal.append_events(&[event(1), event(2), event(3)])
            .expect("append");
    }
    let mut server = Server::start_in(root, Opts::default().workers(1)).expect("starts");
    // The adopted events have no handler: core 0 marks them done in the legacy log itself.
    assert!(
        wait_until(Duration::from_secs(10), || pending(&server) == 0.0),
        "legacy events still pending: {}",
        pending(&server)
    );
    let new_id = server.ingest("/webhooks/new", b"{}");
    server.stop();
    let events = wal_inspect(&server.data_dir());
    for i in 1..=3 {
        let e = find_event(&events, &event(i).event_id);
        assert_eq!(e.body_sha256, sha256_hex(&event(i).body));
    }
    find_event(&events, &new_id);
    assert_wal_clean(&server.data_dir());
    // The new event went to core 0's own log; the legacy log only got outcomes.
    assert!(!segments(&server.wal_dir()).is_empty());
    let inspect = run_cli(&[
        "wal",
        "inspect",
        "--data-dir",
        path_str(&server.data_dir()),
        "--json",
    ]);
    let logs: Vec<String> = inspect
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["log"].to_string())
        .collect();
    assert_eq!(
        logs,
        ["\"core-0\"", "\"legacy\"", "\"legacy\"", "\"legacy\""],
        "{}",
        inspect.stdout
    );
    // Nothing is delivered or marked again after another restart.
    server.restart();
    assert_eq!(pending(&server), 0.0);
}

#[test]
fn a_restart_with_fewer_workers_adopts_the_orphaned_logs() {
    let root = temp_root();
    let toml = r#"
[dispatch]
max_pending_events = 100000
"#;
    let mut server = Server::start_in(root.clone(), Opts::config(toml).workers(3)).expect("starts");
    // Many connections: the kernel spreads them over the three listeners.
    let mut ids = Vec::new();
    for i in 0..60 {
        let mut c = server.client();
        let r = c.post(&format!("/webhooks/s{i}"), b"{}", &[]);
        ids.push(accepted(&r).0);
    }
    server.stop();
    let inspect = run_cli(&[
        "wal",
        "inspect",
        "--data-dir",
        path_str(&server.data_dir()),
        "--json",
    ]);
    let mut logs: Vec<String> = inspect
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["log"].to_string())
        .collect();
    logs.dedup();
    assert!(
        logs.len() >= 2,
        "events spread over the cores' logs: {logs:?}"
    );
    drop(server);
    let mut server = Server::start_in(root, Opts::config(toml).workers(1)).expect("restarts");
    let id = server.ingest("/webhooks/after", b"{}");
    assert!(wait_until(Duration::from_secs(10), || pending(&server) == 0.0));
    server.stop();
    let events = wal_inspect(&server.data_dir());
    for id in ids.iter().chain([&id]) {
        find_event(&events, id);
    }
    assert_eq!(events.len(), 61);
    assert_wal_clean(&server.data_dir());
}

/// The in-memory dispatch window (4096 events per core) overflows while the downstream is slow:
/// the pump switches to reading its log back, and every event is still delivered, each once.
#[test]
fn past_the_in_memory_window_events_are_read_back_from_the_log_and_all_delivered() {
    use crate::downstream::{Behavior, Downstream};
    const EVENTS: usize = 4600;
    let ds = Downstream::start(Behavior {
        delay: Duration::from_millis(50),
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let toml = format!(
        "[orchestrator]\npumps = {{ max_outstanding = 1 }}\n\
         [[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n\n\
         [[destinations]]\nuri = \"{uri}\"\nmax_in_flight = 1\n"
    );
    let server = Server::start(
        Opts::config(&toml)
            .workers(1)
            .env(ENV_GLOBAL_CAPACITY, "1000000")
            .env(ENV_PER_SOURCE_CAPACITY, "1000000")
            .env(ENV_REFILL_PER_SEC, "1000000"),
    );
    // Four keep-alive clients ingest far faster than 20 deliveries a second.
    let addr = server.addr();
    let ids: Vec<String> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr).expect("connect");
                (0..EVENTS / 4)
                    .map(|i| {
                        let body = format!("{{\"t\":{t},\"i\":{i}}}");
                        accepted(&c.post("/hooks/t", body.as_bytes(), &[])).0
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .flat_map(|h| h.join().expect("client"))
        .collect();
    assert_eq!(ids.len(), EVENTS);
    let (_, samples) = scrape(&server);
    let overflows = samples
        .iter()
        .find(|s| s.name == "sluice_pump_window_overflows_total")
        .map_or(0.0, |s| s.value);
    assert!(overflows >= 1.0, "the window never overflowed");
    // Now let the downstream answer at once: everything drains, through the log read-back.
    ds.set(Behavior::default());
    assert!(
        wait_until(Duration::from_secs(60), || pending(&server) == 0.0),
        "still pending: {}",
        pending(&server)
    );
    let seen = ds.seen();
    let mut delivered: Vec<&str> = seen.iter().map(|s| s.webhook_id.as_str()).collect();
    delivered.sort_unstable();
    let before = delivered.len();
    delivered.dedup();
    assert_eq!(before, delivered.len(), "an event was delivered twice");
    let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(delivered, want);
}
