//! Graceful shutdown: SIGTERM stops admitting new connections, finishes what is in flight,
//! closes idle connections and exits 0; `shutdown_timeout` bounds the wait.

use std::io;
use std::time::{Duration, Instant};

use crate::support::*;

/// Sends a POST head with `Expect: 100-continue` and waits for `100 Continue`, which proves the
/// server has parsed the head; then sends the first `sent` bytes of the body.
fn start_slow_upload(server: &Server, path: &str, body: &[u8], sent: usize) -> Client {
    let mut c = server.client();
    c.send(
        format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .expect("send head");
    let interim = c.read_response().expect("100 Continue");
    assert_eq!(interim.status, 100);
    c.send(&body[..sent]).expect("send part of the body");
    c
}

/// Probes `/readyz` on new connections until the server stops reporting ready (≤ 5 s).
/// Returns what it saw: "refused", "closed" or "503 draining".
fn wait_not_ready(server: &Server) -> &'static str {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let mut c = match Client::connect(server.addr()) {
            Err(_) => return "refused",
            Ok(c) => c,
        };
        c.set_read_timeout(Duration::from_secs(3));
        match c.try_request("GET", "/readyz", &[], b"") {
            Ok(r) if r.status == 200 => std::thread::sleep(Duration::from_millis(20)),
            Ok(r) => {
                assert_eq!(
                    r.status,
                    503,
                    "/readyz while draining: {} {}",
                    r.status,
                    r.text()
                );
                assert_eq!(r.text().trim(), "draining");
                return "503 draining";
            }
            Err(e) => {
                assert!(
                    !matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ),
                    "a connection made during the drain hangs: {e}"
                );
                return "closed";
            }
        }
    }
    panic!("/readyz still 200 five seconds after SIGTERM");
}

#[test]
fn sigterm_finishes_the_in_flight_request_then_exits_0() {
    let mut server = Server::start(Opts::config("[server]\nshutdown_timeout = \"15s\"\n"));
    let body: Vec<u8> = b"in flight ".repeat(20);
    let mut upload = start_slow_upload(&server, "/webhooks/inflight", &body, 10);
    server.sigterm();
    let seen = wait_not_ready(&server);
    // The upload finishes after the signal and is still accepted.
    upload.send(&body[10..]).expect("send the rest of the body");
    let r = upload
        .read_response()
        .expect("response to the in-flight request");
    let (id, _) = accepted(&r);
    assert!(
        r.closes(),
        "a response during the drain should close the connection: {:?}",
        r.headers
    );
    upload.assert_closed(Duration::from_secs(5));
    let status = server.wait_exit(Duration::from_secs(20));
    assert!(
        status.success(),
        "exit {status:?} after SIGTERM; stderr:\n{}",
        server.stderr()
    );
    let events = wal_inspect(&server.data_dir());
    assert_eq!(find_event(&events, &id).body_sha256, sha256_hex(&body));
    println!("drain: new connections saw {seen}");
}

#[test]
fn sigterm_closes_idle_connections_and_exits_promptly() {
    let mut server = Server::start(Opts::default());
    let mut idle: Vec<Client> = (0..3).map(|_| server.client()).collect();
    for c in &mut idle {
        accepted(&c.post("/webhooks/idle", b"{}", &[]));
    }
    let t0 = Instant::now();
    server.sigterm();
    let status = server.wait_exit(Duration::from_secs(20));
    let took = t0.elapsed();
    assert!(
        status.success(),
        "exit {status:?}; stderr:\n{}",
        server.stderr()
    );
    // Idle keep-alive connections do not hold the drain for shutdown_timeout (30 s).
    assert!(
        took < Duration::from_secs(10),
        "exit took {took:?} with idle connections"
    );
    for c in &mut idle {
        c.assert_closed(Duration::from_secs(5));
    }
}

#[test]
fn shutdown_timeout_bounds_the_drain() {
    let mut server = Server::start(Opts::config("[server]\nshutdown_timeout = \"2s\"\n"));
    let body = vec![b'x'; 1000];
    let mut stuck = start_slow_upload(&server, "/webhooks/stuck", &body, 100);
    let t0 = Instant::now();
    server.sigterm();
    let status = server.wait_exit(Duration::from_secs(15));
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(1500),
        "exited after {took:?}, before shutdown_timeout (2s)"
    );
    assert!(
        took <= Duration::from_secs(2 + 6),
        "exit took {took:?} with shutdown_timeout 2s"
    );
    assert!(
        status.success(),
        "exit {status:?}; stderr:\n{}",
        server.stderr()
    );
    // The unfinished request got no 202 and is not in the WAL.
    let (_, got) = stuck.wait_closed(Duration::from_secs(5));
    let text = String::from_utf8_lossy(&got);
    assert!(
        !text.contains(" 202 "),
        "an unfinished upload was accepted: {text:?}"
    );
    assert!(wal_inspect(&server.data_dir()).is_empty());
}

#[test]
fn sigint_drains_like_sigterm() {
    let mut server = Server::start(Opts::default());
    let id = server.ingest("/webhooks/int", b"{}");
    let pid = server.pid().expect("pid");
    // SAFETY: kill(2) on the PID of our own unreaped child.
    let rc = unsafe { libc::kill(pid, libc::SIGINT) };
    assert_eq!(rc, 0);
    let status = server.wait_exit(Duration::from_secs(20));
    assert!(
        status.success(),
        "exit {status:?} after SIGINT; stderr:\n{}",
        server.stderr()
    );
    find_event(&wal_inspect(&server.data_dir()), &id);
}
