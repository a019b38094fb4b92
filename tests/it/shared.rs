//! Destination budgets shared through Redis (issue 13): a real `redis-server` started by the
//! test on a free loopback port, three `sluice serve` processes, a real downstream that counts
//! the requests it serves at once.
//!
//! `redis-server` comes from the Debian package `redis-server` (`scripts/test.sh` installs it when
//! it may): without it each test here is skipped by name, or fails under
//! `SLUICE_REQUIRE_TOOLS=1` (CI), see `support::require_tool`.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::dispatch::{big_buckets, manifest};
use crate::downstream::{Behavior, Downstream};
use crate::support::*;

/// A `redis-server` child on 127.0.0.1 without persistence (a restart forgets everything).
struct Redis {
    bin: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Redis {
    /// `None` (the test is skipped, by name) when `redis-server` is not installed.
    fn start() -> Option<Redis> {
        let bin = require_tool("redis-server", "redis-server")?;
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind for a free port");
            l.local_addr().unwrap().port()
        };
        let mut r = Redis {
            bin,
            port,
            child: None,
        };
        r.spawn();
        Some(r)
    }

    fn spawn(&mut self) {
        let child = Command::new(&self.bin)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {} ({e})", self.bin.display()));
        self.child = Some(child);
        assert!(
            wait_until(Duration::from_secs(5), || self.ping()),
            "redis-server on port {} did not answer PING within 5 s",
            self.port
        );
    }

    fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = [0u8; 16];
        s.write_all(b"PING\r\n").is_ok()
            && s.read(&mut buf).is_ok_and(|n| &buf[..n] == b"+PONG\r\n")
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `n` nodes sharing `uri`'s budget (`shared_extra` goes into the `shared` table).
fn nodes(n: usize, uri: &str, dest: &str, redis: &Redis, shared_extra: &str) -> Vec<Server> {
    let key = format!("it-{}-{}", std::process::id(), redis.port);
    let dest = format!(
        "{dest}\nshared = {{ redis = \"{}\", key = \"{key}\"{shared_extra} }}",
        redis.url()
    );
    (0..n)
        .map(|_| {
            Server::start(big_buckets(
                Opts::config(&manifest(uri, &dest, ""))
                    .workers(1)
                    .durability("os"),
            ))
        })
        .collect()
}

/// Posts `count` events to each server from one thread per server; the accepted ids.
fn post_all(servers: &[Server], count: usize, tag: &str) -> HashSet<String> {
    std::thread::scope(|s| {
        let handles: Vec<_> = servers
            .iter()
            .enumerate()
            .map(|(k, server)| {
                s.spawn(move || {
                    let mut c = server.client();
                    (0..count)
                        .map(|i| {
                            let body = format!("{{\"{tag}\":{k},\"i\":{i}}}");
                            accepted(&c.post("/hooks/t", body.as_bytes(), &[])).0
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("poster"))
            .collect()
    })
}

fn delivered(ds: &Downstream) -> HashSet<String> {
    ds.seen().into_iter().map(|s| s.webhook_id).collect()
}

#[test]
fn three_nodes_never_pass_the_shared_max_in_flight_and_use_most_of_it() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let ds = Downstream::start(Behavior {
        delay: Duration::from_millis(40),
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let servers = nodes(3, &uri, "max_in_flight = 20", &redis, ", lease = \"2s\"");
    let ids = post_all(&servers, 300, "n");
    assert_eq!(ids.len(), 900);
    assert!(
        ds.wait(Duration::from_secs(30), |s| s.len() >= 900),
        "only {} of 900 delivered",
        ds.count()
    );
    assert_eq!(delivered(&ds), ids, "every accepted event, once each");
    let peak = ds.peak_concurrency();
    assert!(
        peak <= 20,
        "the downstream saw {peak} at once: past the shared 20"
    );
    assert!(
        peak >= 16,
        "the three nodes used only {peak} of the shared 20"
    );
    // The metrics say what happened: leases acquired and renewed, no failure.
    let (_, m) = scrape(&servers[0]);
    let label = [("destination", uri.as_str())];
    assert!(sample_value(&m, "sluice_shared_lease_acquisitions_total", &label) >= 1.0);
    assert!(sample_value(&m, "sluice_shared_lease_renewals_total", &label) >= 1.0);
    assert_eq!(
        sample_value(&m, "sluice_shared_failures_total", &label),
        0.0
    );
    assert_eq!(sample_value(&m, "sluice_shared_budget_limit", &label), 20.0);
    assert_eq!(sample_value(&m, "sluice_shared_redis_up", &label), 1.0);
}

#[test]
fn a_killed_nodes_permits_come_back_within_the_lease() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let ds = Downstream::start(Behavior {
        delay: Duration::from_millis(300),
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let lease = Duration::from_secs(1);
    let mut servers = nodes(3, &uri, "max_in_flight = 10", &redis, ", lease = \"1s\"");
    // Node 0 alone takes the whole budget.
    post_all(&servers[..1], 60, "a");
    assert!(
        wait_until(Duration::from_secs(10), || ds.in_flight() == 10),
        "node 0 never used the whole budget (in flight {})",
        ds.in_flight()
    );
    servers[0].sigkill();
    let killed = Instant::now();
    post_all(&servers[1..], 100, "b");
    // Until node 0's lease runs out the others get nothing it held; within lease + 2 s they
    // use the whole budget again.
    let mut back = None;
    while killed.elapsed() < lease + Duration::from_secs(2) {
        if ds.in_flight() >= 10 && killed.elapsed() > Duration::from_millis(350) {
            back = Some(killed.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let back = back.unwrap_or_else(|| {
        panic!(
            "the two live nodes did not reach the budget of 10 within lease + 2 s (in flight {})",
            ds.in_flight()
        )
    });
    eprintln!("budget back {back:?} after the SIGKILL (lease {lease:?})");
    assert!(
        ds.peak_concurrency() <= 10,
        "peak {}",
        ds.peak_concurrency()
    );
    assert!(
        ds.wait(Duration::from_secs(30), |s| s
            .iter()
            .filter(|x| x.body.starts_with(b"{\"b\""))
            .count()
            >= 200),
        "the live nodes' 200 events were not all delivered"
    );
    assert!(
        ds.peak_concurrency() <= 10,
        "peak {}",
        ds.peak_concurrency()
    );
}

#[test]
fn a_redis_restart_mid_run_loses_no_event_and_readyz_says_why() {
    let Some(mut redis) = Redis::start() else {
        return;
    };
    let ds = Downstream::start(Behavior {
        delay: Duration::from_millis(20),
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let servers = nodes(3, &uri, "max_in_flight = 8", &redis, ", lease = \"1s\"");
    let mut ids = post_all(&servers, 60, "before");
    assert!(
        ds.wait(Duration::from_secs(10), |s| s.len() >= 20),
        "delivery did not start"
    );
    redis.kill();
    // While Redis is down: events are still accepted (they wait), /readyz says why.
    ids.extend(post_all(&servers, 40, "during"));
    assert!(
        wait_until(Duration::from_secs(3), || {
            let r = servers[1].get("/readyz");
            r.status == 503 && r.text().contains("shared_budget_unavailable")
        }),
        "/readyz did not report the unreachable Redis: {:?}",
        servers[1].get("/readyz").text()
    );
    // `closed`: once the leases have run out (1 s), nothing more is sent.
    std::thread::sleep(Duration::from_millis(1200));
    let frozen = ds.count();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(ds.count(), frozen, "deliveries went on without a lease");
    assert!(
        frozen < ids.len(),
        "everything was delivered before the outage: no test"
    );
    redis.spawn();
    ids.extend(post_all(&servers, 40, "after"));
    assert_eq!(ids.len(), 3 * 140);
    assert!(
        ds.wait(Duration::from_secs(30), |s| s.len() >= ids.len()),
        "only {} of {} delivered after the restart",
        ds.count(),
        ids.len()
    );
    assert_eq!(delivered(&ds), ids, "every accepted event, once each");
    assert!(ds.peak_concurrency() <= 8, "peak {}", ds.peak_concurrency());
    assert!(
        wait_until(Duration::from_secs(3), || servers[1].get("/readyz").status
            == 200),
        "/readyz did not recover: {}",
        servers[1].get("/readyz").text()
    );
    let (_, m) = scrape(&servers[1]);
    let label = [("destination", uri.as_str())];
    assert!(sample_value(&m, "sluice_shared_failures_total", &label) >= 1.0);
    assert_eq!(sample_value(&m, "sluice_shared_redis_up", &label), 1.0);
}

#[test]
fn the_shared_rate_holds_within_five_percent_across_three_nodes() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    let per_sec = 100.0;
    let servers = nodes(
        3,
        &uri,
        "max_in_flight = 50\nrate = { per_sec = 100, burst = 1 }",
        &redis,
        ", lease = \"1s\"",
    );
    post_all(&servers, 150, "r");
    let window = Duration::from_secs(3);
    assert!(
        ds.wait(window + Duration::from_secs(10), |s| s.first().is_some_and(
            |f| f.at.elapsed() > window + Duration::from_millis(100)
        )),
        "delivery did not start"
    );
    let seen = ds.seen();
    let t0 = seen[0].at;
    let n = seen.iter().filter(|s| s.at - t0 < window).count() as f64;
    let nodes_seen: HashSet<&str> = seen
        .iter()
        .filter_map(|s| std::str::from_utf8(&s.body).ok()?.get(5..6))
        .collect();
    let expected = per_sec * window.as_secs_f64();
    eprintln!("{n} calls in {window:?} (expected {expected}) from nodes {nodes_seen:?}");
    assert!(
        nodes_seen.len() == 3,
        "every node delivered: {nodes_seen:?}"
    );
    assert!(
        n <= expected * 1.05 + 1.0,
        "{n} calls in {window:?}: more than 5% past the shared {per_sec}/s"
    );
    // The lower bound is looser: tokens a descheduled node did not use in time are dropped
    // (never saved up), which a loaded test machine turns into a few missing calls.
    assert!(
        n >= expected * 0.9,
        "{n} calls in {window:?}: the shared rate was not used (under 90% of {per_sec}/s)"
    );
}

#[test]
fn on_unavailable_local_falls_back_to_each_nodes_own_budget() {
    let Some(mut redis) = Redis::start() else {
        return;
    };
    let ds = Downstream::start(Behavior {
        delay: Duration::from_millis(20),
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let servers = nodes(
        2,
        &uri,
        "max_in_flight = 4",
        &redis,
        ", lease = \"1s\", on_unavailable = \"local\"",
    );
    let mut ids = post_all(&servers, 20, "shared");
    assert!(
        ds.wait(Duration::from_secs(10), |s| s.len() >= 40),
        "delivery under the shared budget did not finish"
    );
    assert!(ds.peak_concurrency() <= 4, "peak {}", ds.peak_concurrency());
    redis.kill();
    ids.extend(post_all(&servers, 100, "local"));
    assert!(
        ds.wait(Duration::from_secs(20), |s| s.len() >= ids.len()),
        "only {} of {} delivered on the local budgets",
        ds.count(),
        ids.len()
    );
    assert_eq!(delivered(&ds), ids);
    // Each node alone: up to 2 × 4 (the documented N× caveat), never more.
    assert!(ds.peak_concurrency() <= 8, "peak {}", ds.peak_concurrency());
    assert_eq!(
        servers[0].get("/readyz").status,
        200,
        "local mode stays ready"
    );
    let (_, m) = scrape(&servers[0]);
    let label = [("destination", uri.as_str())];
    assert_eq!(sample_value(&m, "sluice_shared_redis_up", &label), 0.0);
    assert!(sample_value(&m, "sluice_shared_failures_total", &label) >= 1.0);
}

/// SIGSTOP / SIGCONT to a running server.
fn signal(server: &Server, sig: libc::c_int) {
    let pid = server.pid().expect("server runs");
    // SAFETY: kill(2) with the PID of a child the harness spawned and has not reaped (so it
    // cannot have been reused) and a valid signal number; no memory is involved.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill({sig}): {}", std::io::Error::last_os_error());
}

#[test]
fn a_paused_node_does_not_come_back_over_the_budget() {
    let Some(mut redis) = Redis::start() else {
        return;
    };
    let ds = Downstream::start(Behavior {
        delay: Duration::from_millis(200),
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let servers = nodes(3, &uri, "max_in_flight = 10", &redis, ", lease = \"1s\"");
    post_all(&servers[..1], 40, "a");
    assert!(
        wait_until(Duration::from_secs(10), || ds.in_flight() == 10),
        "node 0 never used the whole budget"
    );
    // Frozen with its queue full and its lease in hand: the others take over after the lease.
    signal(&servers[0], libc::SIGSTOP);
    let stopped = Instant::now();
    post_all(&servers[1..], 40, "b");
    let from_b =
        |s: &[crate::downstream::Seen]| s.iter().filter(|x| x.body.starts_with(b"{\"b\"")).count();
    assert!(
        ds.wait(Duration::from_secs(5), |s| from_b(s) >= 10),
        "the two live nodes did not take the budget over ({} calls)",
        from_b(&ds.seen())
    );
    // Redis goes away: the live nodes stop at their lease's end.
    redis.kill();
    assert!(
        wait_until(Duration::from_secs(3), || ds.in_flight() == 0),
        "calls went on without a lease (in flight {})",
        ds.in_flight()
    );
    // Node 0 wakes long after its lease ended and cannot reach Redis: it sends nothing, though
    // its old calls were answered while it slept and its permits are free again.
    // (Its lease ends at most `lease − margin` after its last sync, which preceded the stop.)
    std::thread::sleep(Duration::from_millis(1200).saturating_sub(stopped.elapsed()));
    signal(&servers[0], libc::SIGCONT);
    let resumed = Instant::now();
    while resumed.elapsed() < Duration::from_millis(1500) {
        if ds.in_flight() != 0 {
            let late: Vec<String> = ds
                .seen()
                .iter()
                .filter(|x| x.at >= resumed)
                .map(|x| String::from_utf8_lossy(&x.body).into_owned())
                .collect();
            panic!("a node sent on an expired lease: {late:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    redis.spawn();
    assert!(
        ds.wait(Duration::from_secs(30), |s| s.len() >= 120),
        "only {} of 120 delivered",
        ds.count()
    );
    assert!(
        ds.peak_concurrency() <= 10,
        "peak {}",
        ds.peak_concurrency()
    );
}
