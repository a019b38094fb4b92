//! Connection-level protection: slow clients are cut by the header timeout without starving
//! well-behaved ones, and the per-core connection cap refuses the connection past it.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// Slack allowed past the header timeout before a slow connection must be gone.
const CUT_SLACK: Duration = Duration::from_secs(3);

/// One slow client socket and what happened to it.
struct Slow {
    stream: TcpStream,
    opened: Instant,
    /// Sends one head byte per 500 ms if true; sends nothing otherwise.
    drips: bool,
    got: Vec<u8>,
    closed: Option<(Duration, &'static str)>,
}

/// Drives the slow sockets until all are closed or `deadline`; returns them.
fn run_slow_clients(mut slow: Vec<Slow>, deadline: Instant) -> Vec<Slow> {
    let head = format!(
        "POST /webhooks/slow HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: {}",
        "s".repeat(200)
    );
    let head = head.as_bytes();
    let mut sent = 0usize;
    let mut next_drip = Instant::now();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline && slow.iter().any(|s| s.closed.is_none()) {
        let drip = Instant::now() >= next_drip;
        if drip {
            next_drip += Duration::from_millis(500);
        }
        for s in slow.iter_mut().filter(|s| s.closed.is_none()) {
            loop {
                match s.stream.read(&mut buf) {
                    Ok(0) => {
                        s.closed = Some((s.opened.elapsed(), "eof"));
                        break;
                    }
                    Ok(n) => s.got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        s.closed = Some((s.opened.elapsed(), "reset"));
                        break;
                    }
                }
            }
            if drip && s.drips && s.closed.is_none() && sent < head.len() {
                match s.stream.write(&head[sent..sent + 1]) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => s.closed = Some((s.opened.elapsed(), "write failed")),
                }
            }
        }
        if drip {
            sent += 1;
        }
        thread::sleep(Duration::from_millis(20));
    }
    slow
}

#[test]
fn slowloris_is_cut_and_does_not_starve_good_clients() {
    let server = Server::start(Opts::config("[server]\nheader_timeout = \"2s\"\n"));
    let addr = server.addr();
    let mut slow = Vec::new();
    for i in 0..55 {
        let stream =
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect slow client");
        stream.set_nodelay(true).expect("nodelay");
        stream.set_nonblocking(true).expect("nonblocking");
        // 50 drip one byte per 500 ms; 5 send nothing at all.
        slow.push(Slow {
            stream,
            opened: Instant::now(),
            drips: i < 50,
            got: Vec::new(),
            closed: None,
        });
    }
    let deadline = Instant::now() + HEADER_TIMEOUT + CUT_SLACK + Duration::from_secs(2);
    let slow_thread = thread::spawn(move || run_slow_clients(slow, deadline));

    // A well-behaved client keeps posting meanwhile (every 100 ms for ~5 s, new connections).
    let t0 = Instant::now();
    let mut good = 0;
    while t0.elapsed() < Duration::from_secs(5) {
        let mut c = server.client();
        let r = c.post("/webhooks/good", b"{\"ok\":true}", &[]);
        accepted(&r);
        good += 1;
        thread::sleep(Duration::from_millis(100));
    }
    assert!(good >= 10, "only {good} good requests in 5 s");

    let slow = slow_thread.join().expect("slow client thread");
    let mut cut_408 = 0;
    for (i, s) in slow.iter().enumerate() {
        let (after, how) = s.closed.unwrap_or_else(|| {
            panic!(
                "slow connection {i} (drips: {}) still open after {:?}",
                s.drips,
                s.opened.elapsed()
            )
        });
        assert!(
            after <= HEADER_TIMEOUT + CUT_SLACK,
            "slow connection {i} closed ({how}) only after {after:?}"
        );
        assert!(
            after >= Duration::from_millis(1500),
            "slow connection {i} cut after only {after:?}"
        );
        if !s.got.is_empty() {
            let text = String::from_utf8_lossy(&s.got);
            assert!(
                text.starts_with("HTTP/1.1 408 ") || text.starts_with("HTTP/1.0 408 "),
                "slow connection {i} got {text:?}"
            );
            cut_408 += 1;
        }
    }
    println!(
        "slowloris: {good} good 202s; {} slow connections cut ({cut_408} with a 408)",
        slow.len()
    );
}

#[test]
fn per_core_connection_cap_refuses_past_the_limit() {
    let server = Server::start(Opts::config("[server]\nmax_connections_per_core = 4\n").workers(1));
    let mut held: Vec<Client> = (0..4).map(|_| server.client()).collect();
    for c in &mut held {
        assert_eq!(c.get("/healthz").status, 200);
    }
    // The fifth connection: the kernel accepts it, the worker answers 503 and closes (or just
    // closes). Nothing is sent, so that the refusal cannot turn into a reset.
    let mut fifth = server.client();
    fifth.set_read_timeout(Duration::from_secs(5));
    match fifth.read_response() {
        Ok(r) => {
            assert_eq!(
                r.status,
                503,
                "fifth connection got {} {}",
                r.status,
                r.text()
            );
            fifth.assert_closed(Duration::from_secs(5));
        }
        Err(e) => assert!(
            matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
            ),
            "fifth connection neither refused nor closed: {e}"
        ),
    }
    // The first four still work.
    for c in &mut held {
        assert_eq!(c.get("/healthz").status, 200);
        accepted(&c.post("/webhooks/capped", b"{}", &[]));
    }
    // Closing one frees a slot.
    drop(held.pop());
    let freed = wait_until(Duration::from_secs(5), || {
        Client::connect(server.addr())
            .and_then(|mut c| c.try_request("GET", "/healthz", &[], b""))
            .is_ok_and(|r| r.status == 200)
    });
    assert!(freed, "no connection accepted after one of the four closed");
}
