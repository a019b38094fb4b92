//! `/readyz` leaves `wal_unavailable` on its own (issue 11, item 8; `--features failpoints`):
//! after a storage fault the writer probes the disk at most once a second (a write and sync at
//! the end of the log that commits no record) and turns health back on when the probe succeeds,
//! without any request having to write.

use std::fs;
use std::time::{Duration, Instant};

use crate::support::*;

#[test]
fn readyz_recovers_from_wal_unavailable_without_any_post() {
    let root = temp_root();
    let control = root.path().join("failpoints");
    fs::write(&control, "").unwrap();
    let opts = Opts::config("").env("SLUICE_FAILPOINTS", path_str(&control));
    let mut server = Server::start_in(root, opts).unwrap_or_else(|f| panic!("{}", f.stderr));
    let mut acked = vec![server.ingest("/webhooks/probe", b"before")];
    for mode in ["eio-sync", "enospc", "eio-write"] {
        // The last event's `Done` record durable first: a record of the pump still to commit
        // when the fault starts is retried each loop turn, and its first success after the
        // fault would restore health before the probe is due (this test is about the probe).
        assert!(
            wait_until(Duration::from_secs(5), || {
                let (_, s) = scrape(&server);
                sample_value(&s, "sluice_wal_pending_events", &[]) == 0.0
            }),
            "{mode}: the acknowledged events stay pending"
        );
        fs::write(&control, mode).unwrap();
        let r = server.post("/webhooks/probe", format!("refused-{mode}").as_bytes());
        assert_eq!(r.status, 503, "{mode}: {}", r.text());
        assert_eq!(
            r.json()["reason"],
            "wal_unavailable",
            "{mode}: {}",
            r.text()
        );
        let ready = server.get("/readyz");
        assert_eq!(ready.status, 503, "{mode}: {}", ready.text());
        assert!(ready.text().contains("wal_unavailable"), "{}", ready.text());
        // While the fault lasts, probes fail and the server stays unready.
        std::thread::sleep(Duration::from_millis(1500));
        let ready = server.get("/readyz");
        assert_eq!(ready.status, 503, "{mode}: a failing probe restored health");
        // The fault clears; no request writes; readiness returns within about a second.
        fs::write(&control, "off").unwrap();
        let cleared = Instant::now();
        assert!(
            wait_until(Duration::from_secs(5), || server.get("/readyz").status
                == 200),
            "{mode}: /readyz still {} after the fault cleared",
            server.get("/readyz").text()
        );
        let took = cleared.elapsed();
        assert!(took < Duration::from_secs(3), "{mode}: {took:?}");
        let (_, samples) = scrape(&server);
        let healthy = samples
            .iter()
            .find(|s| s.name == "sluice_wal_healthy")
            .expect("sluice_wal_healthy")
            .value;
        assert_eq!(healthy, 1.0, "{mode}");
        acked.push(server.ingest("/webhooks/probe", format!("after-{mode}").as_bytes()));
    }
    assert!(
        server.stderr().contains("probe write succeeded"),
        "{}",
        server.stderr()
    );
    server.stop();
    // The probes committed nothing: the log holds exactly the acknowledged events.
    assert_wal_clean(&server.data_dir());
    let events = wal_inspect(&server.data_dir());
    // (Inspect lists log by log: compare as sets.)
    let mut ids: Vec<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
    let mut want: Vec<&str> = acked.iter().map(String::as_str).collect();
    ids.sort_unstable();
    want.sort_unstable();
    assert_eq!(ids, want);
}
