//! Durability: a 202 means the event is in the WAL, across a clean restart, a SIGKILL in the
//! middle of a burst, both durability modes and segment rollover.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::*;

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

/// `received_at` is either Unix milliseconds or a text timestamp; a number must lie in range.
fn assert_received_at(e: &WalEvent, lo_ms: u64, hi_ms: u64) {
    match &e.received_at {
        serde_json::Value::Number(n) => {
            let v = n
                .as_u64()
                .unwrap_or_else(|| panic!("received_at {n} is not an integer"));
            assert!(
                v + 5_000 >= lo_ms && v <= hi_ms + 5_000,
                "received_at {v} not in [{lo_ms}, {hi_ms}]"
            );
        }
        serde_json::Value::String(s) => assert!(!s.is_empty(), "empty received_at"),
        other => panic!("received_at is {other}"),
    }
}

fn assert_lsns_unique_and_ordered(events: &[WalEvent]) {
    let mut seen = HashSet::new();
    // LSNs are per log: ordered within each log (inspect lists log by log).
    for w in events.windows(2).filter(|w| w[0].log == w[1].log) {
        assert!(
            w[0].lsn < w[1].lsn,
            "inspect lists LSNs out of order: {} then {}",
            w[0].lsn,
            w[1].lsn
        );
    }
    for e in events {
        assert!(
            seen.insert((e.log.clone(), e.lsn)),
            "LSN {} of {} listed twice",
            e.lsn,
            e.log
        );
        assert!(e.lsn >= 1, "LSN 0");
    }
}

#[test]
fn accepted_events_survive_restart_byte_identical() {
    let mut server = Server::start(Opts::default());
    let lo = unix_ms();
    let json = "{\"id\":1,\"text\":\"h\u{e9}llo\"}".as_bytes().to_vec();
    let binary = binary_body(3000);
    let empty: Vec<u8> = Vec::new();
    let cases = [
        ("json-src", json),
        ("bin.src", binary),
        ("empty_src", empty),
    ];
    let mut ids = Vec::new();
    for (source, body) in &cases {
        let r = server.client().post(
            &format!("/webhooks/{source}"),
            body,
            &[("Content-Type", "application/octet-stream")],
        );
        let (id, trigger) = accepted(&r);
        assert_eq!(trigger, "default");
        ids.push(id);
    }
    let hi = unix_ms();
    server.stop();

    assert_wal_clean(&server.data_dir());
    let events = wal_inspect(&server.data_dir());
    assert_eq!(events.len(), cases.len(), "{events:#?}");
    assert_lsns_unique_and_ordered(&events);
    for ((source, body), id) in cases.iter().zip(&ids) {
        let e = find_event(&events, id);
        assert_eq!(e.trigger_id, "default");
        assert_eq!(&e.source, source);
        assert_eq!(e.body_len, body.len() as u64, "{source}");
        assert_eq!(e.body_sha256, sha256_hex(body), "{source}: body differs");
        assert_received_at(e, lo, hi);
    }

    server.restart();
    let after = server.ingest("/webhooks/after-restart", b"later");
    assert!(!ids.contains(&after));
    // Event ids sort by time, across restarts.
    assert!(
        ids.iter().all(|id| *id < after),
        "{after} does not sort after {ids:?}"
    );
    server.stop();
    let events2 = wal_inspect(&server.data_dir());
    assert_eq!(events2.len(), cases.len() + 1);
    // Old events unchanged, the new one after them.
    for e in &events {
        let e2 = find_event(&events2, &e.event_id);
        assert_eq!(
            (e2.lsn, &e2.body_sha256, &e2.source),
            (e.lsn, &e.body_sha256, &e.source)
        );
    }
    // LSNs are per log: the new event follows the old ones of its own log.
    let new = find_event(&events2, &after);
    let max_old = events
        .iter()
        .filter(|e| e.log == new.log)
        .map(|e| e.lsn)
        .max()
        .unwrap_or(0);
    assert!(
        new.lsn > max_old,
        "LSN after restart {} <= {max_old} in {}",
        new.lsn,
        new.log
    );
    assert_eq!(new.source, "after-restart");
    assert_lsns_unique_and_ordered(&events2);
}

#[test]
fn large_body_within_max_body_is_stored() {
    // 5 MiB, under the default max_body_bytes (10 MiB).
    let mut server = Server::start(Opts::default());
    let body: Vec<u8> = (0..5 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let r = server.client().post("/webhooks/big", &body, &[]);
    let (id, _) = accepted(&r);
    server.stop();
    let events = wal_inspect(&server.data_dir());
    let e = find_event(&events, &id);
    assert_eq!(e.body_len, body.len() as u64);
    assert_eq!(e.body_sha256, sha256_hex(&body));
}

/// What one burst client thread saw.
#[derive(Default)]
struct BurstLog {
    acked: Vec<String>,
    other_status: HashMap<u16, usize>,
    io_errors: usize,
}

#[test]
fn sigkill_mid_burst_keeps_every_acknowledged_event() {
    // Buckets out of the way: every request should be a 202 until the kill.
    let big = "1000000000";
    let mut server = Server::start(
        Opts::default()
            .env(ENV_GLOBAL_CAPACITY, big)
            .env(ENV_PER_SOURCE_CAPACITY, big)
            .env(ENV_REFILL_PER_SEC, big),
    );
    let addr = server.addr();
    let stop = Arc::new(AtomicBool::new(false));
    let running = Arc::new(AtomicUsize::new(8));
    let log = Arc::new(Mutex::new(BurstLog::default()));
    let mut threads = Vec::new();
    for t in 0..8 {
        let (stop, running, log) = (stop.clone(), running.clone(), log.clone());
        threads.push(thread::spawn(move || {
            // Bounded by the stop flag (set at the kill), a 15 s deadline and a request count.
            let deadline = Instant::now() + Duration::from_secs(15);
            let mut sent = 0usize;
            let more = |sent: usize| {
                !stop.load(Ordering::Relaxed) && sent < 100_000 && Instant::now() < deadline
            };
            'outer: while more(sent) {
                let Ok(mut c) = Client::connect(addr) else {
                    break;
                };
                while more(sent) {
                    sent += 1;
                    let body = format!("{{\"thread\":{t},\"n\":{sent}}}");
                    match c.try_post(&format!("/webhooks/burst{t}"), body.as_bytes(), &[]) {
                        Ok(r) if r.status == 202 => {
                            let id = accepted(&r).0;
                            log.lock().expect("log").acked.push(id);
                        }
                        Ok(r) => {
                            *log.lock()
                                .expect("log")
                                .other_status
                                .entry(r.status)
                                .or_default() += 1
                        }
                        Err(_) => {
                            log.lock().expect("log").io_errors += 1;
                            continue 'outer;
                        }
                    }
                }
            }
            running.fetch_sub(1, Ordering::SeqCst);
        }));
    }
    // Let the burst run ~1 s (and at least until some events were acknowledged), then kill -9.
    let t0 = Instant::now();
    thread::sleep(Duration::from_millis(1000));
    let enough = wait_until(Duration::from_secs(10), || {
        log.lock().expect("log").acked.len() >= 20
    });
    let running_for = t0.elapsed();
    let still_running = running.load(Ordering::SeqCst);
    server.sigkill();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("burst thread");
    }
    assert_eq!(still_running, 8, "the burst was over before the kill");
    let log = std::mem::take(&mut *log.lock().expect("log"));
    assert!(
        enough,
        "only {} events acknowledged before the kill",
        log.acked.len()
    );
    let acked_set: HashSet<&String> = log.acked.iter().collect();
    assert_eq!(
        acked_set.len(),
        log.acked.len(),
        "the server gave the same event id twice"
    );

    // Restart recovers (truncating a torn tail if there is one) and accepts again.
    server.restart();
    let after = server.ingest("/webhooks/after-crash", b"after");
    server.stop();
    assert_wal_clean(&server.data_dir());
    let events = wal_inspect(&server.data_dir());
    assert_lsns_unique_and_ordered(&events);
    let mut count: HashMap<&str, usize> = HashMap::new();
    for e in &events {
        *count.entry(e.event_id.as_str()).or_default() += 1;
    }
    let missing: Vec<&String> = log
        .acked
        .iter()
        .filter(|id| !count.contains_key(id.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged events lost: {missing:?}",
        missing.len(),
        log.acked.len()
    );
    let dups: Vec<(&&str, &usize)> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "events listed more than once: {dups:?}");
    assert_eq!(count.get(after.as_str()), Some(&1));
    let extra = events.len() - log.acked.len() - 1;
    println!(
        "crash burst: killed after {running_for:?}; {} 202s, {} events in the WAL, {extra} durable but not acknowledged; \
         other statuses {:?}; {} connection errors",
        log.acked.len(),
        events.len() - 1,
        log.other_status,
        log.io_errors
    );
}

#[test]
fn durability_os_mode_accepts_and_persists() {
    // One worker: the gauge below is read for log 0, and with two each connection may land on
    // either core's log (SO_REUSEPORT): with two, 1 run in 18 here read 0 for log 0.
    let mut server = Server::start(Opts::default().durability("os").workers(1));
    let mut ids: Vec<String> = (0..5)
        .map(|i| server.ingest("/webhooks/os", format!("os {i}").as_bytes()))
        .collect();
    // The acknowledged, not yet synced bytes the log keeps in memory are published per log.
    let (text, samples) = scrape(&server);
    let unsynced = sample_value(&samples, "sluice_wal_os_unsynced_bytes", &[("log", "0")]);
    assert!(
        unsynced >= 5.0 * 17.0,
        "os_unsynced_bytes {unsynced}:\n{text}"
    );
    server.stop();
    let events = wal_inspect(&server.data_dir());
    for id in &ids {
        find_event(&events, id);
    }
    // `os` mode survives a process crash (the page cache has the records).
    server.restart();
    ids.extend((5..8).map(|i| server.ingest("/webhooks/os", format!("os {i}").as_bytes())));
    server.sigkill();
    server.restart();
    server.stop();
    let events = wal_inspect(&server.data_dir());
    assert_eq!(events.len(), ids.len(), "{events:#?}");
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            find_event(&events, id).body_sha256,
            sha256_hex(format!("os {i}").as_bytes())
        );
    }
    assert_wal_clean(&server.data_dir());
}

#[test]
fn durability_mode_from_manifest() {
    let mut server = Server::start(Opts::config("[wal]\ndurability = \"os\"\n"));
    let id = server.ingest("/webhooks/manifest-os", b"m");
    server.stop();
    find_event(&wal_inspect(&server.data_dir()), &id);
}

#[test]
fn segments_roll_over_and_recover() {
    // The smallest segment the server accepts; 40 bodies of 1 MB fill more than one.
    let config = "[server]\nmax_body_bytes = 1048576\n[wal]\nsegment_bytes = 33825701\n";
    let mut server = Server::start(Opts::config(config).workers(1));
    let mut sent = Vec::new();
    let mut c = server.client();
    for i in 0..40u32 {
        let body: Vec<u8> = (0..1_000_000u32)
            .map(|j| ((i * 31 + j) % 253) as u8)
            .collect();
        let (id, _) = accepted(&c.post("/webhooks/roll", &body, &[]));
        sent.push((id, sha256_hex(&body)));
    }
    server.stop();
    let segs = segments(&server.wal_dir());
    assert!(
        segs.len() >= 2,
        "40 MB in 32 MiB segments made only {} segment(s)",
        segs.len()
    );
    server.restart();
    let last = server.ingest("/webhooks/roll", b"last");
    server.stop();
    assert_wal_clean(&server.data_dir());
    let events = wal_inspect(&server.data_dir());
    assert_lsns_unique_and_ordered(&events);
    assert_eq!(events.len(), sent.len() + 1);
    for (id, sha) in &sent {
        assert_eq!(&find_event(&events, id).body_sha256, sha);
    }
    assert_eq!(
        events.last().map(|e| e.event_id.as_str()),
        Some(last.as_str())
    );
}

#[test]
fn small_segment_size_allowed_by_the_spec_is_accepted() {
    // Spec: segment_bytes >= max_body_bytes + 1 MiB, min 1 MiB.
    let config = "[server]\nmax_body_bytes = 65536\n[wal]\nsegment_bytes = 1114112\n";
    let mut server = Server::start(Opts::config(config));
    let id = server.ingest("/webhooks/small-seg", b"x");
    server.stop();
    find_event(&wal_inspect(&server.data_dir()), &id);
}

#[test]
fn library_reader_returns_identical_bodies_and_stored_headers() {
    let mut server = Server::start(Opts::default().workers(1));
    let body = binary_body(2048);
    let r = server.client().post(
        "/webhooks/lib",
        &body,
        &[
            ("Content-Type", "application/octet-stream"),
            ("X-GitHub-Delivery", "d-123"),
            ("X-Not-Stored", "secret"),
        ],
    );
    let (id, _) = accepted(&r);
    server.stop();
    let mut reader = sluice::wal::WalReader::open(&server.wal_dir()).expect("open WAL reader");
    let mut found = Vec::new();
    for _ in 0..1000 {
        match reader.next_event() {
            None => break,
            Some(Ok((lsn, ev))) => found.push((lsn, ev)),
            Some(Err(e)) => panic!("WAL reader error: {e}"),
        }
    }
    let (lsn, ev) = found
        .iter()
        .find(|(_, e)| e.event_id == id)
        .unwrap_or_else(|| panic!("event {id} not read back ({} events)", found.len()));
    assert!(*lsn >= 1);
    assert_eq!(ev.body, body, "body differs byte for byte");
    assert_eq!(ev.trigger_id, "default");
    assert_eq!(ev.source, "lib");
    let header = |name: &str| {
        ev.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    };
    assert_eq!(
        header("content-type"),
        Some(&b"application/octet-stream"[..]),
        "{:?}",
        ev.headers
    );
    assert_eq!(
        header("x-github-delivery"),
        Some(&b"d-123"[..]),
        "{:?}",
        ev.headers
    );
    assert_eq!(
        header("x-not-stored"),
        None,
        "an unlisted header was stored: {:?}",
        ev.headers
    );
}

#[test]
fn second_server_on_the_same_data_dir_is_refused() {
    let mut a = Server::start(Opts::default());
    let second = Server::start_in(a.root(), Opts::default());
    let mut b = match second {
        Err(f) => {
            let status = f
                .status
                .unwrap_or_else(|| panic!("second server hung:\n{}", f.stderr));
            assert!(!status.success(), "{status:?}");
            // The first keeps working.
            a.ingest("/webhooks/first", b"a");
            return;
        }
        Ok(b) => b,
    };
    // Both run on one WAL: show what that does to acknowledged events.
    let mut acked = Vec::new();
    for i in 0..5 {
        acked.push(a.ingest("/webhooks/first", format!("a{i}").as_bytes()));
        acked.push(b.ingest("/webhooks/second", format!("b{i}").as_bytes()));
    }
    b.stop();
    a.stop();
    let verify = wal_verify(&a.data_dir());
    let inspect = run_cli(&[
        "wal",
        "inspect",
        "--data-dir",
        path_str(&a.data_dir()),
        "--json",
    ]);
    let listed = inspect
        .stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count();
    let lost: Vec<&String> = acked
        .iter()
        .filter(|id| !inspect.stdout.contains(id.as_str()))
        .collect();
    panic!(
        "a second server started on the same data dir; after 10 acknowledged events: wal verify {:?}, \
         inspect {:?} listed {listed}, lost {} acknowledged: {lost:?}\n{}",
        verify.status,
        inspect.status,
        lost.len(),
        verify.all()
    );
}

#[test]
fn full_wal_ring_refuses_with_wal_busy_and_never_writes_refused_events() {
    // One record per group commit (one batch filling, one with the commit helper): concurrent
    // clients outrun the disk.
    let config = "[wal]\nmax_batch = 1\n[ingest]\noffer_timeout = \"1ms\"\n";
    let mut server = Server::start(Opts::config(config).workers(1));
    let addr = server.addr();
    let mut threads = Vec::new();
    for t in 0..16 {
        threads.push(thread::spawn(move || {
            let mut acked = Vec::new();
            let mut busy = 0usize;
            let mut c = Client::connect(addr).expect("connect");
            for i in 0..25 {
                let r = c.post(
                    &format!("/webhooks/busy{t}"),
                    format!("{t}/{i}").as_bytes(),
                    &[],
                );
                match r.status {
                    202 => acked.push(accepted(&r).0),
                    503 => {
                        assert_eq!(
                            r.text(),
                            r#"{"status":"refused","reason":"wal_busy","retry_after":1}"#
                        );
                        assert_eq!(r.header("retry-after"), Some("1"));
                        busy += 1;
                    }
                    other => panic!("unexpected {other}: {}", r.text()),
                }
            }
            (acked, busy)
        }));
    }
    let mut acked = Vec::new();
    let mut busy = 0;
    for t in threads {
        let (a, b) = t.join().expect("client thread");
        acked.extend(a);
        busy += b;
    }
    let (text, samples) = scrape(&server);
    if busy > 0 {
        let counted: f64 = samples
            .iter()
            .filter(|s| {
                s.name == "sluice_ingest_refusals_total" && s.label("reason") == Some("wal_busy")
            })
            .map(|s| s.value)
            .sum();
        assert_eq!(
            counted as usize, busy,
            "wal_busy refusals counted in /metrics:\n{text}"
        );
    }
    server.stop();
    let events = wal_inspect(&server.data_dir());
    let listed: HashSet<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
    for id in &acked {
        assert!(listed.contains(id.as_str()), "acknowledged {id} missing");
    }
    assert_eq!(
        events.len(),
        acked.len(),
        "refused events were written to the WAL"
    );
    println!(
        "wal ring: {} accepted, {busy} refused wal_busy",
        acked.len()
    );
}
