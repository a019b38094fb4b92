//! The return schedule (issue 16) end to end: a real server in front of a real slow downstream
//! (`sluice mock-downstream`, 2 × 200 ms: 10 deliveries/s) with a backlog bound of 20. Clients
//! that honour `Retry-After` are refused about once and accepted on their return; a client that
//! ignores it is counted in `sluice_ingest_early_returns_total{source}`; refusals are told
//! different seconds, not all the same one.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;
use crate::tools::Mock;

const POLITE: usize = 12;
const BOUND: usize = 20;

/// One trigger per polite client (each its own source), one for the rude client and one for
/// the events that fill the backlog, all delivered to `uri` with 2 permits.
fn manifest(uri: &str) -> String {
    // One shared pool (no default shares): every trigger is refused once the filler filled it.
    let mut m = format!("[dispatch]\nmax_pending_events = {BOUND}\nreserved_fraction = 0\n\n");
    let names = (0..POLITE)
        .map(|i| format!("polite-{i}"))
        .chain(["rude".to_string(), "filler".to_string()]);
    for name in names {
        m.push_str(&format!(
            "[[triggers]]\nid = \"{name}\"\nprovider = \"{name}\"\npath = \"/hooks/{name}\"\n\
             handler = \"{uri}\"\n\n"
        ));
    }
    m.push_str(&format!(
        "[[destinations]]\nuri = \"{uri}\"\nmax_in_flight = 2\n"
    ));
    m
}

fn retry_after(r: &Response) -> u64 {
    assert_eq!(r.json()["reason"], "queue_full", "{}", r.text());
    let ra: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("503 without a numeric Retry-After: {:?}", r.headers));
    assert_eq!(r.json()["retry_after"], ra, "{}", r.text());
    assert!((1..=60).contains(&ra), "Retry-After {ra}");
    ra
}

fn metric(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value)
        .sum()
}

/// Posts to `/hooks/filler` until the backlog refuses once (the bound is reached).
fn fill(server: &Server) {
    let mut c = server.client();
    for _ in 0..BOUND * 3 {
        if c.post("/hooks/filler", b"{}", &[]).status == 503 {
            return;
        }
    }
    panic!("the backlog of {BOUND} never refused");
}

#[test]
fn honouring_clients_are_refused_about_once_and_early_returns_are_counted() {
    let mock = Mock::start(&["--service-time", "200ms", "--max-concurrency", "2"]);
    let uri = format!("{}/hook", mock.url());
    let server = Arc::new(Server::start(
        Opts::config(&manifest(&uri))
            .env(ENV_GLOBAL_CAPACITY, "1000000")
            .env(ENV_PER_SOURCE_CAPACITY, "1000000")
            .env(ENV_REFILL_PER_SEC, "1000000"),
    ));
    // Fill the backlog, let the pump measure its drain rate (~10/s) for a while, fill again.
    fill(&server);
    thread::sleep(Duration::from_millis(2500));
    fill(&server);

    // The rude client ignores Retry-After: it re-sends its one event at once a few times, then
    // every 300 ms, until it is accepted or has tried 40 times.
    let rude = {
        let server = server.clone();
        thread::spawn(move || {
            let mut c = server.client();
            let mut refused = 0;
            for _ in 0..40 {
                let r = c.post("/hooks/rude", b"{}", &[]);
                if r.status == 202 {
                    break;
                }
                retry_after(&r);
                refused += 1;
                if refused >= 4 {
                    thread::sleep(Duration::from_millis(300));
                }
            }
            refused
        })
    };
    // Polite clients: one event each, re-sent after Retry-After × [1, 1.5) like loadgen's
    // `honor`, at most 8 times.
    let polite: Vec<_> = (0..POLITE)
        .map(|i| {
            let server = server.clone();
            thread::spawn(move || {
                let mut c = server.client();
                let path = format!("/hooks/polite-{i}");
                let mut told = Vec::new();
                for _ in 0..8 {
                    let r = c.post(&path, b"{}", &[]);
                    if r.status == 202 {
                        return (told, true);
                    }
                    assert_eq!(r.status, 503, "{}", r.text());
                    let ra = retry_after(&r);
                    told.push(ra);
                    let jitter = 1.0 + i as f64 / (2 * POLITE) as f64;
                    thread::sleep(Duration::from_secs_f64(ra as f64 * jitter + 0.02));
                }
                (told, false)
            })
        })
        .collect();
    let started = Instant::now();
    let results: Vec<(Vec<u64>, bool)> = polite.into_iter().map(|h| h.join().unwrap()).collect();
    let rude_refused = rude.join().unwrap();
    eprintln!(
        "returns: polite Retry-After per event {:?}; rude refused {rude_refused} times; {:?}",
        results.iter().map(|r| &r.0).collect::<Vec<_>>(),
        started.elapsed()
    );

    // Every polite event got in, after about one refusal on average.
    assert!(
        results.iter().all(|r| r.1),
        "a polite event was never accepted"
    );
    let refusals: usize = results.iter().map(|r| r.0.len()).sum();
    let once = results.iter().filter(|r| r.0.len() <= 1).count();
    assert!(
        refusals <= 2 * POLITE && once * 2 >= POLITE,
        "{refusals} refusals for {POLITE} polite events, {once} refused at most once"
    );
    // Refused together, they were not all told the same second.
    let first: std::collections::BTreeSet<u64> = results
        .iter()
        .filter_map(|r| r.0.first().copied())
        .collect();
    assert!(first.len() > 1, "every polite client was told {first:?}");

    let (_, samples) = scrape(&server);
    const EARLY: &str = "sluice_ingest_early_returns_total";
    // Trigger sources are labelled `<provider>@<trigger id>` (source isolation, README).
    let rude_early = metric(&samples, EARLY, &[("source", "rude@rude")]);
    assert!(
        rude_refused >= 2,
        "the rude client was refused {rude_refused} times"
    );
    assert!(
        rude_early >= 1.0 && rude_early <= rude_refused as f64,
        "rude: {rude_early} early returns of {rude_refused} refusals"
    );
    for i in 0..POLITE {
        let source = format!("polite-{i}@polite-{i}");
        let early = metric(&samples, EARLY, &[("source", &source)]);
        assert_eq!(
            early, 0.0,
            "{source} honoured Retry-After but has early returns"
        );
    }
    // The gauges exist for both reasons and four windows; queue_full promises were made.
    const PROMISED: &str = "sluice_ingest_promised_returns";
    let series = samples.iter().filter(|s| s.name == PROMISED).count();
    assert_eq!(series, 8, "promised-returns series");
    let refused_total = metric(
        &samples,
        "sluice_ingest_refusals_total",
        &[("reason", "queue_full")],
    );
    assert!(refused_total >= (refusals + rude_refused) as f64);
    // The refusals are still counted as backpressure rejections, unchanged.
    let (text, _) = scrape(&server);
    assert!(
        text.contains("harn_backpressure_events_total{"),
        "no harn_backpressure_events_total in /metrics"
    );
}
