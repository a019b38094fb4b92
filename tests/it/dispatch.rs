//! Dispatch acceptance tests: a real downstream (tests/it/downstream.rs) behind sluice.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::downstream::{Behavior, Downstream};
use crate::support::*;

/// `harn_backpressure_events_total{dimension="circuit",action}` from a scrape (0 if absent).
pub(crate) fn circuit_count(server: &Server, action: &str) -> f64 {
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

/// A manifest with one trigger `t` at `/hooks/t` whose handler is `uri`, plus extra text.
pub(crate) fn manifest(uri: &str, destination: &str, extra: &str) -> String {
    format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n\n\
         [[destinations]]\nuri = \"{uri}\"\n{destination}\n\n{extra}\n"
    )
}

pub(crate) fn big_buckets(o: Opts) -> Opts {
    o.env("HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY", "1000000")
        .env("HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY", "1000000")
        .env("HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC", "1000000")
}

/// True once the server counts at least `n` dead letters (`sluice_dlq_entries`). Its admin
/// routes act on its own index, which takes a batch once the batch's directory sync is done:
/// a moment after `sluice dlq list` can see the renamed file.
pub(crate) fn server_counts_dlq(server: &Server, n: usize) -> bool {
    let (_, samples) = scrape(server);
    sample_value(&samples, "sluice_dlq_entries", &[]) >= n as f64
}

/// `sluice dlq list --json`, which must succeed.
pub(crate) fn dlq_list(data_dir: &std::path::Path) -> Vec<serde_json::Value> {
    let out = run_cli(&["dlq", "list", "--data-dir", path_str(data_dir), "--json"]);
    assert!(out.status.success(), "dlq list failed: {}", out.all());
    out.stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

#[test]
fn permits_bind_exactly_at_max_in_flight() {
    let ds = Downstream::start(Behavior {
        delay: Duration::from_millis(20),
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let server = Server::start(big_buckets(Opts::config(&manifest(
        &uri,
        "max_in_flight = 20",
        "",
    ))));
    let mut c = server.client();
    let mut ids = HashSet::new();
    for i in 0..2000u32 {
        let (id, _) = accepted(&c.post(
            "/hooks/t",
            format!("{{\"n\":{i}}}").as_bytes(),
            &[("Content-Type", "application/json")],
        ));
        ids.insert(id);
    }
    assert!(
        ds.wait(Duration::from_secs(60), |s| s
            .iter()
            .map(|x| &x.webhook_id)
            .collect::<HashSet<_>>()
            .len()
            >= 2000),
        "only {} of 2000 delivered",
        ds.count()
    );
    let seen: HashSet<String> = ds.seen().into_iter().map(|s| s.webhook_id).collect();
    assert_eq!(seen, ids, "the downstream saw exactly the accepted events");
    assert_eq!(
        ds.peak_concurrency(),
        20,
        "in-flight calls must reach and never exceed max_in_flight"
    );
    let first = &ds.seen()[0];
    assert_eq!(first.content_type.as_deref(), Some("application/json"));
    assert!(
        ds.seen().iter().all(|s| s.signature.is_none()),
        "no signing_secret, no signature"
    );
    assert!(
        ds.seen().iter().all(|s| s.attempt == 1),
        "a 200 downstream needs no retries"
    );
}

#[test]
fn circuit_opens_fails_fast_then_probes_and_closes() {
    let ds = Downstream::start(Behavior {
        status: 500,
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let dest =
        "max_in_flight = 1\nretry = { max_attempts = 1, base = \"100ms\", cap = \"100ms\" }\n\
                circuit = { failures = 5, open_for = \"2s\" }";
    let server = Server::start(big_buckets(Opts::config(&manifest(&uri, dest, ""))));
    for i in 0..5 {
        server.ingest("/hooks/t", format!("fail {i}").as_bytes());
        assert!(
            ds.wait(Duration::from_secs(10), |s| s.len() > i),
            "attempt {i} never reached the downstream"
        );
    }
    // Open: the next events go to the DLQ without reaching the downstream.
    let opened_at = Instant::now();
    let blocked: Vec<String> = (0..3)
        .map(|i| server.ingest("/hooks/t", format!("blocked {i}").as_bytes()))
        .collect();
    let dir = server.data_dir();
    let all_blocked_dead_lettered = || {
        let entries = dlq_list(&dir);
        blocked.iter().all(|id| {
            entries
                .iter()
                .any(|e| e["id"] == id.as_str() && e["reason"] == "circuit_open")
        })
    };
    assert!(
        wait_until(Duration::from_secs(10), all_blocked_dead_lettered),
        "circuit_open entries missing: {:?}",
        dlq_list(&dir)
    );
    assert_eq!(
        ds.count(),
        5,
        "an open circuit must not call the downstream"
    );
    let entries = dlq_list(&dir);
    for id in &blocked {
        assert!(
            entries
                .iter()
                .any(|e| e["id"] == id.as_str() && e["reason"] == "circuit_open"),
            "{id} not dead-lettered as circuit_open"
        );
    }
    // After open_for: one probe; it succeeds; the circuit closes and delivery resumes.
    ds.set(Behavior::default());
    while opened_at.elapsed() < Duration::from_millis(2100) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let probe = server.ingest("/hooks/t", b"probe");
    assert!(
        ds.wait(Duration::from_secs(10), |s| s
            .iter()
            .any(|x| x.webhook_id == probe)),
        "no probe"
    );
    let after = server.ingest("/hooks/t", b"after");
    assert!(
        ds.wait(Duration::from_secs(10), |s| s
            .iter()
            .any(|x| x.webhook_id == after)),
        "not resumed"
    );
    let count = |action: &str| circuit_count(&server, action);
    assert!(count("opened") >= 1.0);
    assert!(count("fail_fast") >= 3.0);
    assert!(count("half_open_probe") >= 1.0);
    assert!(count("closed") >= 1.0);
}

#[test]
fn retry_after_429_pauses_the_destination() {
    let ds = Downstream::start(Behavior::default());
    ds.script(vec![Behavior {
        status: 429,
        retry_after: Some(2),
        ..Behavior::default()
    }]);
    let uri = ds.uri("/sink");
    let dest = "retry = { max_attempts = 5, base = \"100ms\", cap = \"200ms\" }";
    let server = Server::start(big_buckets(Opts::config(&manifest(&uri, dest, ""))));
    let a = server.ingest("/hooks/t", b"a");
    assert!(
        ds.wait(Duration::from_secs(10), |s| !s.is_empty()),
        "first attempt never came"
    );
    let b = server.ingest("/hooks/t", b"b");
    assert!(
        ds.wait(Duration::from_secs(15), |s| s.len() >= 3),
        "the paused deliveries never resumed"
    );
    let seen = ds.seen();
    let t0 = seen[0].at;
    assert_eq!(seen[0].status, 429);
    for s in &seen[1..] {
        let gap = s.at.duration_since(t0);
        assert!(
            gap >= Duration::from_millis(1990),
            "a call reached the downstream {gap:?} after a 429 with Retry-After: 2"
        );
    }
    let delivered: HashSet<&str> = seen
        .iter()
        .filter(|s| s.status == 200)
        .map(|s| s.webhook_id.as_str())
        .collect();
    assert!(delivered.contains(a.as_str()) && delivered.contains(b.as_str()));
    let (_, samples) = scrape(&server);
    assert!(samples
        .iter()
        .any(|s| s.name == "harn_backpressure_events_total"
            && s.label("dimension") == Some("destination")
            && s.label("action") == Some("paused")
            && s.value >= 1.0));
}

#[test]
fn permanent_failure_goes_to_dlq_and_replay_delivers_it() {
    let ds = Downstream::start(Behavior {
        status: 422,
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let mut server = Server::start(big_buckets(Opts::config(&manifest(&uri, "", ""))));
    let id = server.ingest("/hooks/t", b"{\"order\":1}");
    let dir = server.data_dir();
    assert!(
        wait_until(Duration::from_secs(10), || dlq_list(&dir)
            .iter()
            .any(|e| e["id"] == id.as_str())),
        "not dead-lettered"
    );
    assert_eq!(ds.count(), 1, "a permanent failure is not retried");
    let e = dlq_list(&dir)
        .into_iter()
        .find(|e| e["id"] == id.as_str())
        .unwrap();
    assert_eq!(e["reason"], "permanent_failure");
    assert_eq!(e["attempts"], 1);
    // Fix the downstream; replay offline (the server is stopped: the WAL is locked while it runs).
    server.stop();
    ds.set(Behavior::default());
    let out = run_cli(&["dlq", "replay", &id, "--data-dir", path_str(&dir)]);
    assert!(out.status.success(), "replay failed: {}", out.all());
    server.restart();
    assert!(
        ds.wait(Duration::from_secs(10), |s| s.iter().any(|x| x.status
            == 200
            && x.replay_of.as_deref() == Some(id.as_str()))),
        "the replay was not delivered: {:?}",
        ds.seen()
    );
    assert!(
        dlq_list(&dir).iter().all(|e| e["id"] != id.as_str()),
        "a replayed entry leaves the DLQ"
    );
    let replayed = ds.seen().into_iter().find(|x| x.status == 200).unwrap();
    assert_eq!(replayed.body, b"{\"order\":1}");
}

#[test]
fn sigkill_with_pending_events_redelivers_them_after_restart() {
    let ds = Downstream::start(Behavior {
        delay: Duration::from_millis(50),
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let mut server = Server::start(big_buckets(Opts::config(&manifest(
        &uri,
        "max_in_flight = 10",
        "",
    ))));
    let mut c = server.client();
    let mut ids = HashSet::new();
    for i in 0..1000u32 {
        ids.insert(accepted(&c.post("/hooks/t", format!("{i}").as_bytes(), &[])).0);
    }
    // Some delivered, most pending: kill.
    assert!(ds.wait(Duration::from_secs(20), |s| s.len() >= 50));
    server.sigkill();
    let before = ds.count();
    server.restart();
    assert!(
        ds.wait(Duration::from_secs(60), |s| s
            .iter()
            .map(|x| x.webhook_id.clone())
            .collect::<HashSet<_>>()
            .is_superset(&ids)),
        "not every accepted event was delivered after the restart"
    );
    let mut per_id: HashMap<String, usize> = HashMap::new();
    for s in ds.seen() {
        *per_id.entry(s.webhook_id).or_default() += 1;
    }
    let duplicates: usize = per_id.values().map(|n| n - 1).sum();
    eprintln!(
        "sigkill: {} delivered before the kill, {} duplicates after the restart",
        before, duplicates
    );
    // Redelivered at most what could have been in flight (10 permits) plus what finished
    // between the last durable outcome record and the kill (one pump batch).
    assert!(duplicates <= 10 + 64, "{duplicates} duplicates");
}

#[test]
fn max_pending_refuses_with_queue_full_and_memory_stays_flat() {
    // A stalled downstream: it takes 30 s per call.
    let ds = Downstream::start(Behavior {
        delay: Duration::from_secs(30),
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let cfg = manifest(
        &uri,
        "max_in_flight = 2\ntimeout = \"60s\"",
        // One shared pool (no default shares): the whole bound is this trigger's to fill, and
        // the node is saturated once it has (tests/it/isolation.rs covers the shares).
        "[dispatch]\nmax_pending_events = 100\nreserved_fraction = 0\n",
    );
    let server = Server::start(big_buckets(Opts::config(&cfg)));
    let mut c = server.client();
    let mut accepted_n = 0;
    let mut first_refusal = None;
    for i in 0..200 {
        let r = c.post("/hooks/t", b"x", &[]);
        match r.status {
            202 => accepted_n += 1,
            503 => {
                assert_eq!(r.json()["reason"], "queue_full", "{}", r.text());
                assert!(r
                    .header("retry-after")
                    .and_then(|v| v.parse::<u64>().ok())
                    .is_some_and(|v| v >= 1));
                first_refusal.get_or_insert(i);
            }
            s => panic!("unexpected {s}: {}", r.text()),
        }
    }
    assert_eq!(accepted_n, 100, "exactly max_pending_events are accepted");
    assert_eq!(first_refusal, Some(100));
    let ready = server.get("/readyz");
    assert_eq!((ready.status, ready.text().trim()), (503, "saturated"));
    // Keep sending for a while; RSS must stay flat.
    let rss = |pid: i32| -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        s.lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    };
    let pid = server.pid().expect("pid");
    let start_rss = rss(pid);
    let end = Instant::now() + Duration::from_secs(20);
    let mut sent = 0u64;
    while Instant::now() < end && sent < 2_000_000 {
        let r = c.post("/hooks/t", &[b'y'; 1024], &[]);
        assert_eq!(r.status, 503);
        sent += 1;
    }
    let end_rss = rss(pid);
    eprintln!("queue_full: {sent} refusals in 20 s; RSS {start_rss} kB -> {end_rss} kB");
    assert!(
        end_rss < start_rss + 16 * 1024,
        "RSS grew from {start_rss} kB to {end_rss} kB"
    );
}

#[test]
fn deliveries_are_signed_with_standard_webhooks_when_configured() {
    use base64::Engine as _;
    use hmac::{Hmac, Mac};
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    let key = b"an independent 32-byte test key!";
    let secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    );
    let dest = "signing_secret = { env = \"SINK_SIGNING_SECRET\" }";
    let opts =
        big_buckets(Opts::config(&manifest(&uri, dest, ""))).env("SINK_SIGNING_SECRET", &secret);
    let server = Server::start(opts);
    let body = b"{\"signed\":true}";
    let id = server.ingest("/hooks/t", body);
    assert!(
        ds.wait(Duration::from_secs(10), |s| !s.is_empty()),
        "not delivered"
    );
    let seen = ds.seen().remove(0);
    assert_eq!(seen.webhook_id, id);
    let ts = seen.timestamp.expect("webhook-timestamp");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let ts_n: u64 = ts.parse().expect("numeric timestamp");
    assert!(
        ts_n.abs_diff(now) <= 60,
        "timestamp {ts_n} far from now {now}"
    );
    // Independent computation: HMAC-SHA256(key, "id.ts.body"), base64, "v1," prefix.
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(body);
    let expected = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    );
    let sig = seen.signature.expect("webhook-signature");
    assert!(
        sig.split(' ').any(|s| s == expected),
        "signature {sig:?} != {expected:?}"
    );
    assert!(
        server.stderr().find(&secret).is_none(),
        "the secret leaked into the log"
    );
}

#[test]
fn signing_secret_that_is_missing_or_malformed_fails_startup() {
    let uri = "http://127.0.0.1:9/sink";
    for (env_value, needle) in [
        (None, "SINK_KEY"),
        (Some("whsec_!!notbase64!!"), "signing_secret"),
        // Valid base64 without the prefix is not silently decoded: whsec_ or marked raw.
        (Some("YWJjZA=="), "encoding = \"raw\""),
    ] {
        let dest = "signing_secret = { env = \"SINK_KEY\" }";
        let mut opts = Opts::config(&manifest(uri, dest, ""));
        if let Some(v) = env_value {
            opts = opts.env("SINK_KEY", v);
        }
        let failure = refused_config(opts, "a bad signing secret");
        assert!(failure.stderr.contains(needle), "{}", failure.stderr);
        assert!(!failure.stderr.contains("YWJjZA"), "{}", failure.stderr);
    }
}

#[test]
fn admin_route_replays_a_dead_letter_online() {
    let ds = Downstream::start(Behavior {
        status: 400,
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let opts = big_buckets(Opts::config(&manifest(&uri, "", "")))
        .env("SLUICE_ADMIN_TOKEN", "s3cret-token");
    let server = Server::start(opts);
    let id = server.ingest("/hooks/t", b"replay me");
    let dir = server.data_dir();
    assert!(
        wait_until(Duration::from_secs(10), || dlq_list(&dir)
            .iter()
            .any(|e| e["id"] == id.as_str())
            && server_counts_dlq(&server, 1)),
        "not dead-lettered"
    );
    ds.set(Behavior::default());
    let path = format!("/admin/dlq/{id}/replay");
    let r = server.client().post(&path, b"", &[]);
    assert_eq!(r.status, 401, "no token: {}", r.text());
    let r = server
        .client()
        .post(&path, b"", &[("Authorization", "Bearer s3cret-token")]);
    assert_eq!(r.status, 202, "{}", r.text());
    let v = r.json();
    assert_eq!(v["replay_of"], id.as_str());
    let new_id = v["event_id"].as_str().expect("new event id").to_string();
    assert_ne!(new_id, id);
    assert!(
        ds.wait(Duration::from_secs(10), |s| s
            .iter()
            .any(|x| x.status == 200
                && x.webhook_id == new_id
                && x.replay_of.as_deref() == Some(id.as_str()))),
        "replay not delivered"
    );
    assert!(
        dlq_list(&dir).iter().all(|e| e["id"] != id.as_str()),
        "entry still in the DLQ"
    );
    let r = server
        .client()
        .post(&path, b"", &[("Authorization", "Bearer s3cret-token")]);
    assert_eq!(r.status, 404, "a replayed entry is gone: {}", r.text());
}

#[test]
fn retention_deletes_done_segments_and_recovery_still_works() {
    let cfg = "[server]\nmax_body_bytes = 65536\n[wal]\nsegment_bytes = 1048576\n\
               [dispatch]\nretention = \"1s\"\n";
    let mut server = Server::start(big_buckets(Opts::config(cfg).workers(1)));
    let mut c = server.client();
    let mut ids = Vec::new();
    for i in 0..40u32 {
        let body = vec![b'a' + (i % 26) as u8; 60_000];
        ids.push(accepted(&c.post("/webhooks/ret", &body, &[])).0);
    }
    let wal = server.wal_dir();
    let first_segments = segments(&wal);
    assert!(
        first_segments.len() >= 3,
        "expected rollover: {first_segments:?}"
    );
    // Events without a handler are done at once; retention runs every few seconds.
    assert!(
        wait_until(Duration::from_secs(30), || !segments(&wal)
            .contains(&first_segments[0])),
        "the oldest, fully done segment was never deleted: {:?}",
        segments(&wal)
    );
    assert!(
        segments(&wal).last() == first_segments.last(),
        "the active segment must stay"
    );
    // Restart: recovery starts from a segment whose first LSN is not 1.
    server.stop();
    server.restart();
    let id = server.ingest("/webhooks/ret", b"after retention");
    server.stop();
    assert_wal_clean(&server.data_dir());
    let events = wal_inspect(&server.data_dir());
    find_event(&events, &id);
    find_event(&events, ids.last().unwrap());
    assert!(
        events.len() < ids.len() + 1,
        "deleted segments' events are gone from the log"
    );
}

#[test]
fn max_wal_bytes_refuses_with_wal_full() {
    // One worker, two 1 MiB segments at most: once the second exists, one more would pass
    // the bound.
    let cfg = "[server]\nmax_body_bytes = 65536\n[wal]\nsegment_bytes = 1048576\n\
               [dispatch]\nmax_wal_bytes = 2097152\n";
    let server = Server::start(big_buckets(Opts::config(cfg).workers(1)));
    let mut c = server.client();
    let body = vec![b'w'; 60_000];
    let mut accepted_n = 0;
    let refused = wait_until(Duration::from_secs(30), || {
        let r = c.post("/webhooks/full", &body, &[]);
        match r.status {
            202 => {
                accepted_n += 1;
                false
            }
            503 => {
                assert_eq!(r.json()["reason"], "wal_full", "{}", r.text());
                assert!(r.header("retry-after").is_some());
                true
            }
            s => panic!("unexpected {s}: {}", r.text()),
        }
    });
    assert!(refused, "never refused wal_full after {accepted_n} events");
    assert!(
        accepted_n >= 17,
        "refused before the first segment was full ({accepted_n})"
    );
    let (_, samples) = scrape(&server);
    assert!(samples
        .iter()
        .any(|s| s.name == "sluice_ingest_refusals_total"
            && s.label("reason") == Some("wal_full")
            && s.value >= 1.0));
}
