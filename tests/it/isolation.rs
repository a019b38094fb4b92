//! Isolation (issue 18): one stalled destination never refuses another trigger's senders.
//! Trigger `a`'s handler is a local TCP listener that accepts and never answers; trigger `b`'s
//! is `sluice mock-downstream` answering at once. With `max_pending_events = 1000`, 3,000
//! events to `a` fill its share and the common pool (750 of 1,000 accepted, the rest
//! refused `queue_full` with a `Retry-After`), then 200 events to `b` are all accepted and
//! delivered, and `/readyz` stays 200.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;
use crate::tools::Mock;

/// Accepts connections and never answers; holds them until dropped (bounded: 10 minutes).
pub(crate) struct Silent {
    pub(crate) addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    held: Option<thread::JoinHandle<usize>>,
}

impl Silent {
    pub(crate) fn start() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let held = thread::spawn(move || {
            let mut conns: Vec<TcpStream> = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(600);
            while !flag.load(Ordering::Relaxed) && Instant::now() < deadline {
                match listener.accept() {
                    Ok((s, _)) => conns.push(s),
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
            conns.len()
        });
        Silent {
            addr,
            stop,
            held: Some(held),
        }
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.held.take() {
            let _ = h.join();
        }
    }
}

fn manifest(silent: &str, fast: &str) -> String {
    format!(
        "[dispatch]\nmax_pending_events = 1000\n\n\
         [[triggers]]\nid = \"a\"\nprovider = \"pa\"\npath = \"/hooks/a\"\nhandler = \"{silent}\"\n\n\
         [[triggers]]\nid = \"b\"\nprovider = \"pb\"\npath = \"/hooks/b\"\nhandler = \"{fast}\"\n\n\
         [[destinations]]\nuri = \"{silent}\"\ntimeout = \"120s\"\n"
    )
}

fn gauge(samples: &[Sample], name: &str, trigger: &str) -> f64 {
    samples
        .iter()
        .find(|s| s.name == name && s.label("trigger") == Some(trigger))
        .map(|s| s.value)
        .unwrap_or_else(|| panic!("no {name}{{trigger={trigger}}}"))
}

#[test]
fn a_stalled_trigger_fills_only_its_share_and_the_pool_while_another_keeps_flowing() {
    let silent = Silent::start();
    let mock = Mock::start(&["--service-time", "0ms"]);
    let silent_uri = format!("http://{}/never", silent.addr);
    let fast_uri = format!("{}/hook", mock.url());
    let server = Server::start(
        Opts::config(&manifest(&silent_uri, &fast_uri))
            .env(ENV_GLOBAL_CAPACITY, "1000000")
            .env(ENV_PER_SOURCE_CAPACITY, "1000000")
            .env(ENV_REFILL_PER_SEC, "1000000"),
    );
    let mut c = server.client();
    let (mut accepted_a, mut refused_a) = (0u64, 0u64);
    for n in 0..3000 {
        let r = c.post("/hooks/a", format!("{{\"n\":{n}}}").as_bytes(), &[]);
        match r.status {
            202 => accepted_a += 1,
            503 => {
                assert_eq!(r.json()["reason"], "queue_full", "{}", r.text());
                let ra: u64 = r
                    .header("retry-after")
                    .expect("Retry-After")
                    .parse()
                    .unwrap();
                assert!((1..=60).contains(&ra), "{ra}");
                refused_a += 1;
            }
            s => panic!("unexpected {s}: {}", r.text()),
        }
    }
    // a's guaranteed share (250: half of 1,000 over a and b; the default route is off and
    // would hold none anyway) plus the pool (1,000 − 2 × 250 = 500).
    assert_eq!(accepted_a, 250 + 500, "refused {refused_a}");
    assert_eq!(
        server.get("/readyz").status,
        200,
        "one trigger full is not the node"
    );

    let mut accepted_b = 0;
    for n in 0..200 {
        let r = c.post("/hooks/b", format!("{{\"m\":{n}}}").as_bytes(), &[]);
        assert_eq!(r.status, 202, "event {n} to b: {}", r.text());
        accepted_b += 1;
    }
    assert_eq!(accepted_b, 200);
    let delivered = |m: &Mock| m.stats()["per_status"]["200"].as_u64().unwrap_or(0);
    assert!(
        wait_until(Duration::from_secs(30), || delivered(&mock) >= 200),
        "b's events delivered: {} of 200",
        delivered(&mock)
    );
    assert_eq!(delivered(&mock), 200);
    let r = server.get("/readyz");
    assert_eq!(r.status, 200, "{}", r.text());

    // The refusals, the per-trigger backlog and the pool are visible in the metrics.
    let (_, samples) = scrape(&server);
    assert!(
        wait_until(Duration::from_secs(10), || {
            let (_, s) = scrape(&server);
            gauge(&s, "sluice_backlog_events", "b") == 0.0
        }),
        "b's backlog drained"
    );
    assert_eq!(gauge(&samples, "sluice_backlog_events", "a"), 750.0);
    let refusals = samples
        .iter()
        .find(|s| {
            s.name == "sluice_ingest_trigger_refusals_total"
                && s.label("trigger") == Some("a")
                && s.label("reason") == Some("queue_full")
        })
        .expect("refusals of a")
        .value;
    assert_eq!(refusals, refused_a as f64);
    let pool = samples
        .iter()
        .find(|s| s.name == "sluice_backlog_pool_events" && s.label("state") == Some("used"))
        .expect("pool gauge")
        .value;
    assert_eq!(pool, 500.0);
    // a holds its cap of the dispatch window (64 − 64/4), the rest of its events are parked:
    // without the cap its jobs held all 64 and b's events were never dispatched.
    assert_eq!(gauge(&samples, "sluice_pump_window_jobs", "a"), 48.0);
    let parked = samples
        .iter()
        .find(|s| s.name == "sluice_pump_parked_events")
        .expect("parked gauge")
        .value;
    assert_eq!(parked, 750.0 - 48.0);
    drop(server);
    drop(silent);
}

/// A full DLQ holds back only the trigger whose events wait to be dead-lettered: `a`'s handler
/// refuses everything permanently (400), the DLQ holds one entry, `max_outstanding = 4`. `a`'s
/// waiting dead letters stay pending in its backlog share but hold no dispatch slot, so `b`'s
/// events keep being delivered.
#[test]
fn a_full_dlq_holds_back_only_the_trigger_whose_events_wait_for_it() {
    let refusing = Mock::start(&[
        "--service-time",
        "0ms",
        "--fail-rate",
        "1",
        "--fail-status",
        "400",
    ]);
    let mock = Mock::start(&["--service-time", "0ms"]);
    let a_uri = format!("{}/refuse", refusing.url());
    let b_uri = format!("{}/hook", mock.url());
    let cfg = format!(
        "[orchestrator.pumps]\nmax_outstanding = 4\n\n\
         [dispatch]\nmax_pending_events = 1000\nmax_dlq_entries = 1\n\n\
         [[triggers]]\nid = \"a\"\nprovider = \"pa\"\npath = \"/hooks/a\"\nhandler = \"{a_uri}\"\n\n\
         [[triggers]]\nid = \"b\"\nprovider = \"pb\"\npath = \"/hooks/b\"\nhandler = \"{b_uri}\"\n"
    );
    let server = Server::start(
        Opts::config(&cfg)
            .env(ENV_GLOBAL_CAPACITY, "1000000")
            .env(ENV_PER_SOURCE_CAPACITY, "1000000")
            .env(ENV_REFILL_PER_SEC, "1000000"),
    );
    let mut c = server.client();
    for n in 0..10 {
        let r = c.post("/hooks/a", format!("{{\"n\":{n}}}").as_bytes(), &[]);
        assert_eq!(r.status, 202, "{}", r.text());
    }
    // Each of a's events is refused by its handler once and dead-lettered: one fits the DLQ,
    // nine wait for room, pending in a's share but holding no dispatch slot.
    let waiting = || {
        let (_, s) = scrape(&server);
        (
            gauge(&s, "sluice_backlog_events", "a"),
            gauge(&s, "sluice_pump_window_jobs", "a"),
        )
    };
    assert!(
        wait_until(Duration::from_secs(20), || {
            refusing.stats()["per_status"]["400"].as_u64() == Some(10) && waiting() == (9.0, 0.0)
        }),
        "a's dead letters waiting: {:?} (backlog, window jobs)",
        waiting()
    );
    for n in 0..50 {
        let r = c.post("/hooks/b", format!("{{\"m\":{n}}}").as_bytes(), &[]);
        assert_eq!(r.status, 202, "{}", r.text());
    }
    let delivered = |m: &Mock| m.stats()["per_status"]["200"].as_u64().unwrap_or(0);
    assert!(
        wait_until(Duration::from_secs(20), || delivered(&mock) == 50),
        "b delivered {} of 50",
        delivered(&mock)
    );
    assert_eq!(waiting().0, 9.0, "a's events still wait for the DLQ");
    assert_eq!(server.get("/readyz").status, 200);
}
