//! Memory budgets of the connection layer, against the real binary: the in-flight body budget
//! under 120 (and 400) stalled 10 MiB uploads, unread pipelined `/metrics` with 3,000 sources,
//! accepts at the fd limit, and HTTP/1.0 keep-alive. Memory is the server's `VmRSS`.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

const MIB: u64 = 1 << 20;
/// README "Memory under large bodies": what one connection receiving a body holds besides
/// it, `max_head_bytes` (default 16 KiB) + 16 KiB.
const CONN_OVERHEAD: u64 = (16 << 10) + (16 << 10);
/// README "Memory under large bodies": a core's buffers for the connection it is serving.
const CORE_OVERHEAD: u64 = MIB;

/// How a stalled upload ended.
#[derive(Debug)]
enum Upload {
    /// All but the last byte sent and no answer: the body is in flight.
    InFlight(Client),
    /// Answered before the body was complete.
    Answered(Response),
}

/// Connects, declares `len` bytes and sends all but the last, stopping early if an answer
/// arrives (a refused client stops sending, as a real one would).
fn stalled_upload(addr: std::net::SocketAddr, source: &str, len: u64) -> Upload {
    let mut c = Client::connect(addr).expect("connect");
    let head = format!(
        "POST /webhooks/{source} HTTP/1.1\r\nHost: t\r\nContent-Type: application/octet-stream\r\nContent-Length: {len}\r\n\r\n"
    );
    c.send(head.as_bytes()).expect("send head");
    let chunk = vec![b'x'; 256 * 1024];
    let mut left = len - 1;
    while left > 0 {
        if answer_waiting(&c.stream) {
            break;
        }
        let n = left.min(chunk.len() as u64) as usize;
        if let Err(e) = c.stream.write_all(&chunk[..n]) {
            // Refused and closed under us: the answer was sent before the close.
            assert!(
                matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset),
                "{e}"
            );
            break;
        }
        left -= n as u64;
    }
    c.set_read_timeout(Duration::from_millis(1500));
    match c.read_response() {
        Ok(r) => Upload::Answered(r),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            Upload::InFlight(c)
        }
        Err(e) => panic!("upload of {len} bytes: {e}"),
    }
}

/// True if the peer has sent something (non-blocking peek).
fn answer_waiting(s: &TcpStream) -> bool {
    s.set_nonblocking(true).expect("nonblocking");
    let mut b = [0u8; 1];
    let got = matches!(s.peek(&mut b), Ok(n) if n > 0);
    s.set_nonblocking(false).expect("blocking");
    got
}

fn metric(server: &Server, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (_, samples) = scrape(server);
    sample_value(&samples, name, labels)
}

#[test]
fn stalled_uploads_are_held_to_the_body_budget() {
    let server = Server::start(Opts::default());
    let pid = server.pid().expect("pid");
    let addr = server.addr();
    let len = 10 * MIB;
    let uploads: Vec<Upload> = (0..120)
        .map(|i| thread::spawn(move || stalled_upload(addr, &format!("big{}", i % 4), len)))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().expect("upload thread"))
        .collect();
    let rss = rss_bytes(pid);
    let (mut in_flight, mut refused) = (Vec::new(), 0u64);
    for u in uploads {
        match u {
            Upload::InFlight(s) => in_flight.push(s),
            Upload::Answered(r) => {
                assert_eq!(r.status, 503, "{}", r.text());
                assert_eq!(r.header("retry-after"), Some("1"));
                assert_eq!(
                    r.text(),
                    r#"{"status":"refused","reason":"body_budget","retry_after":1}"#
                );
                assert!(r.closes(), "a body_budget refusal closes the connection");
                refused += 1;
            }
        }
    }
    println!(
        "in flight {}, refused {refused}, server RSS {} MiB",
        in_flight.len(),
        rss / MIB
    );
    // 256 MiB holds 25 bodies of 10 MiB; every other one was refused unread.
    assert!(in_flight.len() <= 25, "{} in flight", in_flight.len());
    assert!(
        in_flight.len() >= 5,
        "the budget admitted only {}",
        in_flight.len()
    );
    assert_eq!(in_flight.len() as u64 + refused, 120);
    assert!(rss < 512 * MIB, "server RSS {} MiB", rss / MIB);

    // A small POST on a fresh connection still fits next to the stalled bodies.
    let t0 = Instant::now();
    accepted(&server.post("/webhooks/small", b"{\"ok\":true}"));
    println!("small POST answered in {:?}", t0.elapsed());
    let (_, samples) = scrape(&server);
    let v = |name, labels: &[(&str, &str)]| sample_value(&samples, name, labels);
    assert_eq!(v("sluice_body_budget_refusals_total", &[]), refused as f64);
    assert_eq!(
        v("sluice_ingest_refusals_total", &[("reason", "body_budget")]),
        refused as f64
    );
    assert_eq!(
        v("sluice_body_budget_bytes", &[]),
        (in_flight.len() as u64 * len) as f64
    );
    assert_eq!(v("sluice_body_budget_limit_bytes", &[]), (256 * MIB) as f64);

    // Completing one body answers it 202 and gives its share back; the others are dropped
    // abruptly (reset), and their shares come back too.
    let mut done = in_flight.pop().expect("one in flight");
    done.send(b"x").expect("last byte");
    done.set_read_timeout(Duration::from_secs(20));
    accepted(&done.read_response().expect("202 for the completed body"));
    for c in in_flight {
        // SO_LINGER 0: the close is a reset, the abrupt end of a client.
        let _ = socket2::SockRef::from(&c.stream).set_linger(Some(Duration::ZERO));
        drop(c);
    }
    assert!(
        wait_until(Duration::from_secs(5), || metric(
            &server,
            "sluice_body_budget_bytes",
            &[]
        ) == 0.0),
        "the budget did not return to 0 after the connections died"
    );
    // With the budget free, a full-size body is admitted again.
    let mut c = server.client();
    let body = vec![b'y'; len as usize];
    c.set_read_timeout(Duration::from_secs(20));
    accepted(&c.post("/webhooks/after", &body, &[]));
}

/// The largest `VmRSS` of `pid` seen every 20 ms until `stop`.
fn peak_rss(pid: i32, stop: Arc<AtomicBool>) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let mut peak = 0;
        while !stop.load(Ordering::Relaxed) {
            peak = peak.max(rss_bytes(pid));
            thread::sleep(Duration::from_millis(20));
        }
        peak.max(rss_bytes(pid))
    })
}

/// 400 stalled 10 MiB uploads against the default 256 MiB body budget: the server's memory
/// stays within the bound README documents ("Memory under large bodies"), and goes back to what it was idle once
/// the clients have gone.
#[test]
fn many_large_bodies_stay_within_the_budget_and_are_given_back() {
    const CONNS: u64 = 400;
    let workers = 2;
    let server = Server::start(Opts::default().workers(workers));
    let pid = server.pid().expect("pid");
    let addr = server.addr();
    // Idle: started, and one request served on each side of the codec.
    accepted(&server.post("/webhooks/warm", b"{}"));
    thread::sleep(Duration::from_secs(1));
    let idle = rss_bytes(pid);

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = peak_rss(pid, stop.clone());
    let len = 10 * MIB;
    let uploads: Vec<Upload> = (0..CONNS)
        .map(|i| thread::spawn(move || stalled_upload(addr, &format!("m{}", i % 8), len)))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().expect("upload thread"))
        .collect();
    let held = rss_bytes(pid);
    stop.store(true, Ordering::Relaxed);
    let peak = sampler.join().expect("sampler");
    let in_flight: Vec<Client> = uploads
        .into_iter()
        .filter_map(|u| match u {
            Upload::InFlight(c) => Some(c),
            Upload::Answered(r) => {
                assert_eq!(r.status, 503, "{}", r.text());
                None
            }
        })
        .collect();
    let budget = 256 * MIB;
    let bound = idle + budget + CONNS * CONN_OVERHEAD + workers as u64 * CORE_OVERHEAD;
    println!(
        "{} of {CONNS} uploads in flight; RSS idle {} MiB, held {} MiB, peak {} MiB, bound {} MiB",
        in_flight.len(),
        idle / MIB,
        held / MIB,
        peak / MIB,
        bound / MIB
    );
    assert!(
        in_flight.len() >= 5,
        "the budget admitted only {}",
        in_flight.len()
    );
    drop(in_flight);
    thread::sleep(Duration::from_secs(10));
    let after = rss_bytes(pid);
    println!("RSS 10 s after the clients closed: {} MiB", after / MIB);
    assert!(
        peak <= bound,
        "peak RSS {} MiB over the bound {} MiB (idle {} MiB)",
        peak / MIB,
        bound / MIB,
        idle / MIB
    );
    assert!(
        after <= idle + idle / 10,
        "RSS {} KiB 10 s after the clients closed, idle was {} KiB",
        after >> 10,
        idle >> 10
    );
}

#[test]
fn a_chunked_body_is_charged_as_it_grows() {
    // Budget = one body of 64 KiB. A chunked upload that grows past what is free is refused
    // mid-body with body_budget; the budget is whole again afterwards.
    let cfg = "[server]\nmax_body_bytes = 65536\nmax_inflight_body_bytes = 65536\n";
    let server = Server::start(Opts::config(cfg));
    let mut holder = server.client();
    holder
        .send(b"POST /webhooks/a HTTP/1.1\r\nHost: t\r\nContent-Length: 40000\r\n\r\n")
        .expect("send");
    thread::sleep(Duration::from_millis(200));
    let mut c = server.client();
    c.send(b"POST /webhooks/b HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        .expect("send");
    let chunk = format!("{:x}\r\n{}\r\n", 8192, "z".repeat(8192));
    for _ in 0..8 {
        if answer_waiting(&c.stream) || c.send(chunk.as_bytes()).is_err() {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let r = c.read_response().expect("an answer to the chunked upload");
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["reason"], "body_budget");
    drop(holder);
    assert!(wait_until(Duration::from_secs(5), || metric(
        &server,
        "sluice_body_budget_bytes",
        &[]
    ) == 0.0));
    let mut c = server.client();
    let body = chunked(&vec![b'w'; 60_000], &[8192]);
    let r = c.request(
        "POST",
        "/webhooks/b",
        &[("Transfer-Encoding", "chunked")],
        &body,
    );
    accepted(&r);
}

#[test]
fn unread_pipelined_scrapes_stay_bounded() {
    let server = Server::start(Opts::default().durability("os"));
    let pid = server.pid().expect("pid");
    // 3,000 sources, pipelined 16 at a time on one connection.
    let mut c = server.client();
    for batch in 0..(3000 / 16 + 1) {
        let mut wire = Vec::new();
        let names: Vec<String> = (batch * 16..(batch * 16 + 16).min(3000))
            .map(|i| format!("src-{i:04}"))
            .collect();
        for name in &names {
            wire.extend(encode_request(
                "POST",
                &format!("/webhooks/{name}"),
                &[],
                b"{}",
            ));
        }
        c.send(&wire).expect("send batch");
        for r in c.read_responses(names.len()).expect("batch answers") {
            accepted(&r);
        }
    }
    let before = rss_bytes(pid);
    // 150 connections, 64 scrapes each, never read.
    let scrape = b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n".repeat(64);
    let hostile: Vec<TcpStream> = (0..150)
        .map(|_| {
            let mut s = TcpStream::connect(server.addr()).expect("connect");
            s.write_all(&scrape).expect("pipeline");
            s
        })
        .collect();
    thread::sleep(Duration::from_secs(2));
    let rss = rss_bytes(pid);
    let t0 = Instant::now();
    let mut good = server.client();
    good.set_read_timeout(Duration::from_secs(1));
    let r = good
        .try_post("/webhooks/good", b"{}", &[])
        .expect("a normal POST answered within 1 s");
    let took = t0.elapsed();
    accepted(&r);
    println!(
        "RSS before {} MiB, with 150 x 64 unread scrapes {} MiB; POST in {took:?}",
        before / MIB,
        rss / MIB
    );
    assert!(rss < 256 * MIB, "server RSS {} MiB", rss / MIB);
    assert!(took < Duration::from_secs(1), "{took:?}");
    let (text, samples) = scrape_fresh(&server);
    let v = |name, labels: &[(&str, &str)]| sample_value(&samples, name, labels);
    // The per-source families are bounded: top 100 plus `_other`.
    let series = samples
        .iter()
        .filter(|s| s.name == "sluice_ingest_accepted_total")
        .count();
    assert_eq!(series, 101, "{series} accepted series");
    assert!(v("sluice_metrics_sources_folded", &[]) >= 2900.0);
    assert!(text.len() < 64 * 1024, "one scrape is {} bytes", text.len());
    let renders = v("sluice_metrics_renders_total", &[]);
    let scrapes = v(
        "sluice_http_requests_total",
        &[("route", "metrics"), ("status", "200")],
    );
    println!(
        "renders {renders}, scrapes answered {scrapes}, reads paused {}",
        v("sluice_connections_read_paused_total", &[])
    );
    assert!(
        renders * 4.0 < scrapes,
        "{renders} renderings for {scrapes} scrapes"
    );
    drop(hostile);
}

/// A scrape on a new connection (the hostile ones hold theirs).
fn scrape_fresh(server: &Server) -> (String, Vec<Sample>) {
    scrape(server)
}

#[test]
fn queued_connections_are_accepted_after_the_fd_limit_clears() {
    // Find how many descriptors the server needs idle, then leave room for a few connections.
    let probe = Server::start(Opts::default().workers(1));
    let pid = probe.pid().expect("pid");
    let base = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fds")
        .count() as u64;
    drop(probe);
    let server = Server::start(Opts::default().workers(1).nofile(base + 8));
    let mut clients: Vec<Client> = (0..30).map(|_| server.client()).collect();
    for c in &mut clients {
        c.send(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            .expect("send");
    }
    // Every client holds its connection: the accepted ones answer, the others wait in the
    // listen backlog because the server is out of descriptors.
    let (mut served, mut queued) = (Vec::new(), Vec::new());
    for mut c in clients {
        c.set_read_timeout(Duration::from_millis(300));
        match c.read_response() {
            Ok(r) => {
                assert_eq!(r.status, 200);
                served.push(c);
            }
            Err(_) => queued.push(c),
        }
    }
    println!(
        "fd limit {}: {} served, {} queued",
        base + 8,
        served.len(),
        queued.len()
    );
    assert!(!served.is_empty(), "nothing was accepted");
    assert!(!queued.is_empty(), "the fd limit was never reached");
    // Closing the served connections frees descriptors once the server sees the closes.
    drop(served);
    // No new connection arrives: the worker's retry timer must pick the queued ones up, in
    // backlog order, as each answered one closes and frees its descriptor.
    for mut c in queued {
        c.set_read_timeout(Duration::from_secs(5));
        let r = c.read_response().unwrap_or_else(|e| {
            panic!(
                "a queued connection was not accepted after the limit cleared: {e}; stderr:\n{}",
                server.stderr()
            )
        });
        assert_eq!(r.status, 200);
    }
    thread::sleep(Duration::from_millis(200));
    let failed = metric(
        &server,
        "sluice_connections_refused_total",
        &[("reason", "fd_limit")],
    );
    assert!(failed >= 1.0, "fd_limit accept failures not counted");
}

#[test]
fn http_1_0_keep_alive_is_answered_with_keep_alive() {
    let server = Server::start(Opts::default());
    let mut c = server.client();
    c.send(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .expect("send");
    let r = c.read_response().expect("first");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("keep-alive"));
    c.send(b"POST /webhooks/old HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}")
        .expect("send");
    let r = c.read_response().expect("second");
    accepted(&r);
    assert_eq!(r.header("connection"), Some("keep-alive"));
    // Without keep-alive, HTTP/1.0 is answered with close, and closed.
    c.send(b"GET /healthz HTTP/1.0\r\n\r\n").expect("send");
    let r = c.read_response().expect("third");
    assert_eq!(r.header("connection"), Some("close"));
    c.assert_closed(Duration::from_secs(5));
    // The same for /metrics, whose body is shared between connections.
    let mut c = server.client();
    c.send(b"GET /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .expect("send");
    let r = c.read_response().expect("metrics");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("keep-alive"));
    assert!(r.text().contains("sluice_body_budget_limit_bytes"));
    let mut buf = [0u8; 1];
    c.set_read_timeout(Duration::from_millis(300));
    assert!(
        matches!(c.stream.read(&mut buf), Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)),
        "the keep-alive connection was closed"
    );
}
