//! The load tools themselves (issue 5 acceptance): `sluice loadgen` holds its rate, and
//! `sluice mock-downstream` keeps its concurrency cap and sends `Retry-After` with its refusals.
//! Everything runs on loopback and every wait is bounded (processes are killed on drop).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{run_cli, temp_root, wait_until, Client, BIN};

const MOCK_LISTENING: &str = "mock-downstream: listening on http://";

/// A running `sluice mock-downstream`; SIGKILLed on drop if still running.
pub(crate) struct Mock {
    child: Option<Child>,
    addr: SocketAddr,
    /// Every stdout line after the listening line.
    lines: mpsc::Receiver<String>,
}

impl Mock {
    pub(crate) fn start(args: &[&str]) -> Mock {
        let mut child = Command::new(BIN)
            .arg("mock-downstream")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn mock-downstream");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let first = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("mock-downstream did not print its address");
        let addr = first
            .strip_prefix(MOCK_LISTENING)
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .parse()
            .expect("address");
        Mock {
            child: Some(child),
            addr,
            lines: rx,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn stats(&self) -> Value {
        let r = Client::connect(self.addr).expect("connect").get("/stats");
        assert_eq!(r.status, 200);
        r.json()
    }

    /// SIGTERM, wait for exit 0 (≤ 10 s) and return the summary it printed.
    fn stop(mut self) -> Value {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill(2) with the PID of a child this struct owns and has not reaped.
        let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(sent, 0, "kill: {}", std::io::Error::last_os_error());
        let deadline = Instant::now() + Duration::from_secs(10);
        let exit = loop {
            if let Some(s) = child.try_wait().expect("try_wait") {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("mock-downstream ignored SIGTERM");
            }
            thread::sleep(Duration::from_millis(10));
        };
        assert!(exit.success(), "mock-downstream exited with {exit:?}");
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(5))
            .expect("no summary on stdout");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("summary {line:?}: {e}"))
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs `sluice loadgen` (≤ 30 s) and returns its JSON summary.
fn loadgen(args: &[&str]) -> Value {
    let mut all = vec!["loadgen"];
    all.extend_from_slice(args);
    let out = run_cli(&all);
    assert!(out.status.success(), "loadgen failed: {}", out.all());
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("loadgen summary is not JSON ({e}): {}", out.all()))
}

/// A closed port refuses every connection: each request is an I/O error (not a timeout, which
/// would blame a slow server), the summary still prints, and the exit status is 1.
#[test]
fn loadgen_against_a_closed_port_counts_errors_and_exits_1() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let out = run_cli(&[
        "loadgen",
        "--url",
        &url,
        "--rate",
        "20",
        "--requests",
        "20",
        "--timeout",
        "2s",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", out.all());
    assert!(
        out.stderr.contains("20 requests failed on I/O"),
        "{}",
        out.stderr
    );
    let summary: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("summary is not JSON ({e}): {}", out.all()));
    assert_eq!(n(&summary, &["totals", "offered"]), 20, "{summary}");
    assert_eq!(n(&summary, &["totals", "errors"]), 20, "{summary}");
    assert_eq!(n(&summary, &["totals", "timeouts"]), 0, "{summary}");
    assert_eq!(n(&summary, &["totals", "sent"]), 0, "{summary}");
}

fn n(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_u64()
        .unwrap_or_else(|| panic!("{path:?} is not an integer in {v}"))
}

#[test]
fn loadgen_holds_1000_per_second_for_10_seconds() {
    let mock = Mock::start(&["--service-time", "1ms"]);
    let root = temp_root();
    let timeline = root.path().join("timeline.csv");
    let summary = loadgen(&[
        "--url",
        &mock.url(),
        "--rate",
        "1000",
        "--duration",
        "10s",
        "--connections",
        "32",
        "--target",
        "/webhooks/a=3,/webhooks/b=1",
        "--timeline-out",
        timeline.to_str().unwrap(),
    ]);
    let sent = n(&summary, &["totals", "sent"]);
    assert!(
        (9_800..=10_200).contains(&sent),
        "sent {sent}, want 10000 ± 2%: {summary}"
    );
    assert_eq!(n(&summary, &["totals", "offered"]), 10_000, "{summary}");
    assert_eq!(n(&summary, &["totals", "errors"]), 0, "{summary}");
    assert!(n(&summary, &["totals", "2xx"]) >= 9_800, "{summary}");

    let csv = std::fs::read_to_string(&timeline).expect("timeline");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let (sec_col, sent_col) = (col("second"), col("sent"));
    let rows: Vec<Vec<u64>> = lines
        .map(|l| {
            l.split(',')
                .take(col("dropped_client") + 1)
                .map(|x| x.parse().expect("integer"))
                .collect()
        })
        .collect();
    let total: u64 = rows.iter().map(|r| r[sent_col]).sum();
    assert_eq!(total, sent, "timeline rows add up to the summary");
    for r in rows.iter().filter(|r| r[sec_col] < 10) {
        assert!(
            (700..=1300).contains(&r[sent_col]),
            "second {} sent {}:\n{csv}",
            r[sec_col],
            r[sent_col]
        );
    }
    assert!(
        rows.iter().filter(|r| r[sec_col] < 10).count() == 10,
        "{csv}"
    );

    let stats = mock.stop();
    assert_eq!(n(&stats, &["total"]), sent, "mock saw every request");
}

#[test]
fn mock_never_exceeds_its_concurrency_at_5x_load() {
    // Capacity: 8 in flight × 20 ms = 400 req/s; offered: 2000 req/s.
    let mock = Mock::start(&[
        "--service-time",
        "20ms",
        "--max-concurrency",
        "8",
        "--over-capacity",
        "503",
    ]);
    let summary = loadgen(&[
        "--url",
        &mock.url(),
        "--rate",
        "2000",
        "--duration",
        "3s",
        "--connections",
        "64",
    ]);
    assert!(n(&summary, &["totals", "503"]) > 0, "{summary}");
    assert!(n(&summary, &["totals", "2xx"]) > 0, "{summary}");
    let live = mock.stats();
    let stats = mock.stop();
    assert_eq!(n(&live, &["total"]), n(&stats, &["total"]));
    assert_eq!(n(&stats, &["max_concurrency_seen"]), 8, "{stats}");
    for s in stats["per_second"].as_array().expect("per_second") {
        assert!(n(s, &["max_concurrency"]) <= 8, "{s}");
    }
    assert_eq!(n(&stats, &["total"]), n(&summary, &["totals", "sent"]));
    assert_eq!(
        n(&stats, &["per_status", "503"]),
        n(&summary, &["totals", "503"])
    );
}

#[test]
fn mock_queue_serves_everyone_within_its_concurrency() {
    let mock = Mock::start(&["--service-time", "50ms", "--max-concurrency", "4"]);
    let addr = mock.addr;
    let started = Instant::now();
    let handles: Vec<_> = (0..20)
        .map(|_| thread::spawn(move || Client::connect(addr).unwrap().post("/x", b"{}", &[])))
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap().status, 200);
    }
    // 20 requests, 4 at a time, 50 ms each: at least 5 rounds.
    assert!(started.elapsed() >= Duration::from_millis(245));
    let stats = mock.stop();
    assert_eq!(n(&stats, &["max_concurrency_seen"]), 4, "{stats}");
    assert_eq!(n(&stats, &["per_status", "200"]), 20, "{stats}");
}

#[test]
fn mock_refusals_carry_retry_after() {
    for status in ["429", "503"] {
        let mock = Mock::start(&[
            "--service-time",
            "2s",
            "--max-concurrency",
            "1",
            "--over-capacity",
            status,
            "--retry-after-secs",
            "7",
        ]);
        let mut busy = Client::connect(mock.addr).unwrap();
        busy.send(&crate::support::encode_request("POST", "/x", &[], b"{}"))
            .unwrap();
        assert!(
            wait_until(Duration::from_secs(5), || n(&mock.stats(), &["total"]) == 1),
            "first request never arrived"
        );
        let r = Client::connect(mock.addr).unwrap().post("/x", b"{}", &[]);
        assert_eq!(r.status.to_string(), status);
        assert_eq!(r.header("retry-after"), Some("7"), "{:?}", r.headers);
        drop(busy);
        mock.stop();
    }
}

#[test]
fn loadgen_honor_waits_for_retry_after() {
    let mock = Mock::start(&[
        "--service-time",
        "50ms",
        "--max-concurrency",
        "1",
        "--over-capacity",
        "429",
        "--retry-after-secs",
        "1",
    ]);
    // Five arrivals 2.5 ms apart: the first is served, the next four are refused at once.
    let started = Instant::now();
    let summary = loadgen(&[
        "--url",
        &mock.url(),
        "--rate",
        "400",
        "--requests",
        "5",
        "--connections",
        "5",
        "--on-refusal",
        "honor",
    ]);
    let retries = n(&summary, &["totals", "retries"]);
    assert!(retries >= 4, "{summary}");
    let min = summary["retry_delay_min_ms"].as_f64().expect("min delay");
    let max = summary["retry_delay_max_ms"].as_f64().expect("max delay");
    assert!(min >= 1000.0, "re-sent {min} ms after a Retry-After: 1");
    // The jitter is [1, 1.5) × Retry-After; the measured delay adds the loadgen thread's
    // scheduling latency, which on a loaded 2-core CI machine reached 114 ms past 1.5 s.
    assert!(
        max < 2000.0,
        "jitter is [1, 1.5) × Retry-After (+ scheduling), got {max} ms"
    );
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert!(n(&summary, &["totals", "2xx"]) >= 2, "{summary}");
    let stats = mock.stop();
    assert_eq!(n(&stats, &["total"]), n(&summary, &["totals", "sent"]));

    // `immediate` re-sends without waiting.
    let mock = Mock::start(&[
        "--service-time",
        "300ms",
        "--max-concurrency",
        "1",
        "--over-capacity",
        "429",
    ]);
    let summary = loadgen(&[
        "--url",
        &mock.url(),
        "--rate",
        "100",
        "--requests",
        "2",
        "--connections",
        "2",
        "--on-refusal",
        "immediate",
        "--max-retries",
        "3",
    ]);
    assert_eq!(n(&summary, &["totals", "retries"]), 3, "{summary}");
    assert!(summary["retry_delay_max_ms"].as_f64().unwrap() < 200.0);
    mock.stop();
}
