//! Operator reads off the core loops (issue 39, item 1; `sched::readers`): the heaviest event
//! lists run on the reader thread, so `/healthz` on every core answers meanwhile, and past
//! `MAX_READS` outstanding reads the route answers `503 readers_busy` at once. And the outcome
//! index (item 2): an event's status is exact however late its outcome landed, and a list of a
//! rare trigger does not read the log to find its events.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::*;

/// Reads outstanding at once, node-wide (`sched::readers::MAX_READS`).
const MAX_READS: usize = 32;

/// A node holding one event of trigger `rare`, then `n` 1-KiB events of trigger `t` (posted on
/// four connections; buckets wide open, `durability = "os"` to fill the log fast):
/// `?trigger=rare` lists scan the whole log.
fn node_with_a_long_log(n: usize) -> Server {
    let config = "[ingest]\nglobal_capacity = 1000000\nper_source_capacity = 1000000\n\
                  refill_per_sec = 1000000\n[wal]\ndurability = \"os\"\n\n\
                  [[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\n\n\
                  [[triggers]]\nid = \"rare\"\nprovider = \"p\"\npath = \"/hooks/rare\"\n";
    let server = Server::start(Opts::config(config).workers(2));
    server.ingest("/hooks/rare", b"{\"first\":true}");
    let body = format!("{{\"pad\":\"{}\"}}", "x".repeat(1000));
    let posters: Vec<_> = (0..4)
        .map(|k| {
            let (addr, body) = (server.addr(), body.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(addr).expect("connect");
                for _ in (k..n).step_by(4) {
                    let r = c.post("/hooks/t", body.as_bytes(), &[]);
                    assert_eq!(r.status, 202, "{}", r.text());
                }
            })
        })
        .collect();
    posters.into_iter().for_each(|p| p.join().unwrap());
    server
}

const RARE: &str = "/api/v1/events?trigger=rare&limit=5";
/// The largest page: a thousand events read and rendered (tens of milliseconds in a debug
/// build), the heaviest read the API allows.
const PAGE: &str = "/api/v1/events?trigger=t&limit=1000";

#[test]
fn the_heaviest_lists_leave_healthz_on_every_core_fast() {
    let server = node_with_a_long_log(30_000);
    // What one list costs the reader, alone.
    let mut c = server.client();
    let t = Instant::now();
    let r = c.get(PAGE);
    let alone = t.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["events"].as_array().map(Vec::len), Some(1000));
    // A rare trigger's list finds its one event through the index, without reading the log.
    let t = Instant::now();
    let rare = c.get(RARE);
    let rare_took = t.elapsed();
    assert_eq!(rare.json()["events"].as_array().map(Vec::len), Some(1));
    // Three list loops and four `/healthz` probes (SO_REUSEPORT spreads the connections over
    // both cores), for 3 s.
    let stop = Arc::new(AtomicBool::new(false));
    let lists: Vec<_> = (0..3)
        .map(|_| {
            let (stop, addr) = (stop.clone(), server.addr());
            std::thread::spawn(move || {
                let mut c = Client::connect(addr).expect("connect");
                c.set_read_timeout(Duration::from_secs(30));
                let (mut done, mut slowest) = (0, Duration::ZERO);
                while !stop.load(Ordering::Relaxed) && done < 1_000 {
                    let t = Instant::now();
                    let r = c.get(PAGE);
                    assert_eq!(r.status, 200, "{}", r.text());
                    slowest = slowest.max(t.elapsed());
                    done += 1;
                }
                (done, slowest)
            })
        })
        .collect();
    let probes = HealthProbes::start(server.addr(), 4, Duration::from_millis(2));
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let (listed, slowest_list) = lists
        .into_iter()
        .map(|l| l.join().unwrap())
        .fold((0, Duration::ZERO), |(n, s), (d, w)| (n + d, s.max(w)));
    let (probed, worst) = probes.stop();
    eprintln!(
        "a page of 1,000 alone {alone:?}, the rare trigger's list {rare_took:?}; {listed} \
         pages (slowest {slowest_list:?}); {probed} probes, the slowest {worst:?}"
    );
    // The test means something only if a page takes longer than a probe may.
    assert!(
        slowest_list >= Duration::from_millis(50),
        "the pages took at most {slowest_list:?} (alone {alone:?}): too fast to tell"
    );
    // On the loop, every probe on the listing core waited for the list in progress.
    assert!(
        worst < Duration::from_millis(50),
        "a probe took {worst:?} while lists took up to {slowest_list:?}"
    );
    let (_, s) = scrape(&server);
    let served = sample_value(&s, "sluice_ops_reads_total", &[("result", "served")]);
    assert!(
        served >= listed as f64 + 1.0,
        "{served} served, {listed} listed"
    );
    assert_eq!(
        sample_value(&s, "sluice_ops_reads_max", &[]),
        MAX_READS as f64
    );
}

#[test]
fn past_the_bound_a_read_is_refused_at_once_and_counted() {
    let server = node_with_a_long_log(20_000);
    // 48 lists sent at once on their own connections: one reader answers them one by one
    // (each scans the whole log), so past MAX_READS outstanding the route refuses.
    let mut clients: Vec<Client> = (0..MAX_READS + 16)
        .map(|_| Client::connect(server.addr()).expect("connect"))
        .collect();
    let request = encode_request("GET", PAGE, &[], b"");
    for c in clients.iter_mut() {
        c.send(&request).expect("send");
    }
    let (mut ok, mut busy) = (0, 0);
    for c in clients.iter_mut() {
        c.set_read_timeout(Duration::from_secs(120));
        let r = c.read_response().expect("an answer");
        match r.status {
            200 => ok += 1,
            503 => {
                assert_eq!(r.json()["reason"], "readers_busy", "{}", r.text());
                assert_eq!(r.header("retry-after"), Some("1"));
                busy += 1;
            }
            s => panic!("unexpected {s}: {}", r.text()),
        }
    }
    eprintln!("{ok} answered, {busy} refused readers_busy");
    assert!(busy >= 1, "48 lists at once: none refused");
    assert!(ok >= MAX_READS - 2, "only {ok} answered");
    let (_, s) = scrape(&server);
    let refused = sample_value(&s, "sluice_ops_reads_total", &[("result", "refused")]);
    assert_eq!(refused, busy as f64);
    // Every slot came back: a read now is answered.
    assert_eq!(sample_value(&s, "sluice_ops_reads_outstanding", &[]), 0.0);
    assert_eq!(server.client().get(PAGE).status, 200);
}

/// Issue 39 item 2: an event retried while 25,000 records land after it reads `delivered` the
/// moment its outcome is durable — online (the outcome index, fed as outcomes commit), offline
/// (`sluice events show`, an unbounded scan) and online after a restart (the index rebuilt by
/// recovery). Before the index, the online lookup stopped 20,000 records past the event and
/// read `retrying` for good.
#[test]
fn an_outcome_far_behind_its_event_reads_exactly_online_offline_and_after_a_restart() {
    use crate::downstream::{Behavior, Downstream};
    let failing = Behavior {
        status: 503,
        ..Behavior::default()
    };
    let ds = Downstream::start(failing);
    let uri = ds.uri("/sink");
    let config = format!(
        "[ingest]\nglobal_capacity = 1000000\nper_source_capacity = 1000000\n\
         refill_per_sec = 1000000\n[wal]\ndurability = \"os\"\n\n\
         [[triggers]]\nid = \"slow\"\nprovider = \"p\"\npath = \"/hooks/slow\"\nhandler = \"{uri}\"\n\n\
         [[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\n\n\
         [[destinations]]\nuri = \"{uri}\"\n\
         retry = {{ max_attempts = 100, base = \"100ms\", cap = \"300ms\" }}\n\
         circuit = {{ failures = 1000, open_for = \"1s\", on_open = \"hold\" }}\n"
    );
    // One core: one log holds the event, the 25,000 after it and the outcome.
    let mut server = Server::start(Opts::config(&config).workers(1));
    let id = server.ingest("/hooks/slow", b"{\"slow\":true}");
    assert!(ds.wait(Duration::from_secs(10), |s| !s.is_empty()));
    let posters: Vec<_> = (0..4)
        .map(|k| {
            let addr = server.addr();
            std::thread::spawn(move || {
                let mut c = Client::connect(addr).expect("connect");
                for i in (k..25_000).step_by(4) {
                    let r = c.post("/hooks/t", format!("{{\"i\":{i}}}").as_bytes(), &[]);
                    assert_eq!(r.status, 202, "{}", r.text());
                }
            })
        })
        .collect();
    posters.into_iter().for_each(|p| p.join().unwrap());
    let lookup = |s: &Server| s.get(&format!("/api/v1/events/{id}")).json();
    let before = lookup(&server);
    assert_eq!(before["status"], "retrying", "{before}");
    ds.set(Behavior::default());
    let delivered = |v: &serde_json::Value| v["status"] == "delivered";
    let mut online = serde_json::Value::Null;
    assert!(
        wait_until(Duration::from_secs(20), || {
            online = lookup(&server);
            delivered(&online)
        }),
        "online: {online}"
    );
    let lsn = online["lsn"].as_u64().unwrap();
    let attempts = online["attempts"].as_array().unwrap().clone();
    assert!(attempts.len() >= 2, "{online}");
    assert_eq!(attempts.last().unwrap()["status"], 200, "{online}");
    assert!(online.get("outcome_search").is_none(), "{online}");
    // Its attempt records span the 25,000 records: the lookup reads the first 20,000 records of
    // that span and the last attempt record, and says so.
    let partial = online.get("attempts_search").is_some();
    // The outcome is far behind: the ledger of the log says how far.
    let (_, s) = scrape(&server);
    let appended = sample_value(&s, "sluice_wal_appends_total", &[]);
    assert!(
        appended > lsn as f64 + 25_000.0,
        "{appended} records, event at {lsn}"
    );
    // Offline, the same.
    let out = run_cli(&[
        "events",
        "show",
        &id,
        "--data-dir",
        path_str(&server.data_dir()),
        "--json",
    ]);
    let offline: serde_json::Value = serde_json::from_str(&out.stdout).expect(&out.stderr);
    assert_eq!(offline["status"], "delivered", "{offline}");
    let all = offline["attempts"].as_array().unwrap();
    assert!(
        attempts.iter().all(|a| all.contains(a)),
        "{online} vs {offline}"
    );
    assert_eq!(
        all.len() == attempts.len(),
        !partial,
        "{online} vs {offline}"
    );
    // After a restart: recovery rebuilds the index.
    server.stop();
    server.restart();
    let again = lookup(&server);
    assert_eq!(again["status"], "delivered", "{again}");
    assert_eq!(again["attempts"], online["attempts"], "{again}");
    // And a list of the trigger finds it the same way.
    let listed = server.get("/api/v1/events?trigger=slow&limit=5").json();
    let first = &listed["events"][0];
    assert_eq!(
        (&first["id"], &first["status"]),
        (&online["id"], &online["status"])
    );
    let in_list = first["attempts"].as_array().unwrap();
    assert!(attempts.iter().all(|a| in_list.contains(a)), "{listed}");
}
