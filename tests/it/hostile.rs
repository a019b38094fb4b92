//! Hostile clients all at once — 2,000 slowloris connections, a connection flood past the
//! per-core cap, oversized heads, endless chunked bodies, pipelined garbage, half-closed
//! sockets — while a well-behaved client keeps getting answers with bounded latency and the
//! server's resident memory stays bounded (`/proc/PID/status`, `VmRSS`).
//!
//! `SLUICE_HOSTILE_SLOWLORIS` overrides the slowloris count (default 2,000). The test raises its
//! own `RLIMIT_NOFILE` soft limit (inherited by the server) when it is too low for the count.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

const WORKERS: usize = 2;
const CAP_PER_CORE: usize = 1200;
const FLOOD: usize = 800;
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the attack runs while the good client measures.
const ATTACK: Duration = Duration::from_secs(4);
/// Generous latency bound for the good client (debug build, 2 shared cores).
const MAX_LATENCY: Duration = Duration::from_secs(2);
const MAX_RSS_KIB: u64 = 256 * 1024;

/// Raises the soft `RLIMIT_NOFILE` to at least `want` (up to the hard limit); returns the soft
/// limit in force.
fn ensure_nofile(want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into the valid, exclusively borrowed `lim`.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    assert_eq!(rc, 0, "getrlimit: {}", io::Error::last_os_error());
    if lim.rlim_cur < want {
        lim.rlim_cur = want.min(lim.rlim_max);
        // SAFETY: setrlimit reads one valid `rlimit`; raising the soft limit up to the hard
        // limit needs no privilege and affects only this process (and children spawned later).
        let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
        assert_eq!(rc, 0, "setrlimit: {}", io::Error::last_os_error());
    }
    lim.rlim_cur
}

fn rss_kib(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn connect(addr: SocketAddr) -> Option<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(3))).ok()?;
    Some(s)
}

/// Reads until EOF/reset/timeout; returns the bytes.
fn drain(s: &mut TcpStream, max: usize) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while got.len() < max {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

/// Runs `attack` in a loop (each round bounded by its own socket timeouts) until `stop`.
fn repeat(
    stop: &Arc<AtomicBool>,
    rounds: &Arc<AtomicUsize>,
    attack: impl Fn() + Send + 'static,
) -> thread::JoinHandle<()> {
    let (stop, rounds) = (stop.clone(), rounds.clone());
    thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            attack();
            rounds.fetch_add(1, Ordering::Relaxed);
        }
    })
}

#[test]
fn hostile_clients_do_not_starve_a_good_one_or_grow_memory() {
    let slowloris: usize = std::env::var("SLUICE_HOSTILE_SLOWLORIS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let nofile = ensure_nofile(2 * (slowloris + FLOOD) as u64 + 512);
    assert!(
        nofile >= (slowloris + FLOOD) as u64 + 256,
        "RLIMIT_NOFILE {nofile} is too low for {slowloris} slowloris connections"
    );
    let manifest = format!(
        "[server]\nmax_connections_per_core = {CAP_PER_CORE}\nheader_timeout = \"{}s\"\n\
         body_timeout = \"3s\"\nmax_body_bytes = 1048576\nmax_head_bytes = 16384\n",
        HEADER_TIMEOUT.as_secs()
    );
    let big = "1000000000";
    let server = Server::start(
        Opts::config(&manifest)
            .workers(WORKERS)
            .env(ENV_GLOBAL_CAPACITY, big)
            .env(ENV_PER_SOURCE_CAPACITY, big)
            .env(ENV_REFILL_PER_SEC, big),
    );
    let addr = server.addr();
    let pid = server.pid().expect("pid");
    // The good client connects first (a keep-alive connection, like a partner's pool).
    let mut good = server.client();
    good.set_read_timeout(Duration::from_secs(5));
    accepted(&good.post("/webhooks/good", b"warm-up", &[]));
    let rss_before = rss_kib(pid).expect("VmRSS");

    // Slowloris: a partial head on each, then one more byte per second.
    let t_open = Instant::now();
    let mut slow: Vec<TcpStream> = Vec::with_capacity(slowloris);
    for _ in 0..slowloris {
        let s =
            TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("slowloris connect");
        s.set_nonblocking(true).expect("nonblocking");
        let _ = (&s).write(b"POST /webhooks/slow HTTP/1.1\r\nHost: x\r\nX-A: ");
        slow.push(s);
    }
    let opened_in = t_open.elapsed();

    let stop = Arc::new(AtomicBool::new(false));
    let counters: Vec<Arc<AtomicUsize>> = (0..6).map(|_| Arc::new(AtomicUsize::new(0))).collect();
    let mut attackers = Vec::new();
    // Oversized head: 64 KiB of header fields, never finished.
    attackers.push(repeat(&stop, &counters[0], move || {
        if let Some(mut s) = connect(addr) {
            let mut head = b"POST /webhooks/big HTTP/1.1\r\nHost: x\r\n".to_vec();
            for i in 0..2048 {
                head.extend_from_slice(format!("X-{i}: {}\r\n", "v".repeat(24)).as_bytes());
            }
            let _ = s.write_all(&head);
            let got = drain(&mut s, 1 << 16);
            assert!(
                got.is_empty()
                    || got.starts_with(b"HTTP/1.1 431")
                    || got.starts_with(b"HTTP/1.1 503"),
                "oversized head got {:?}",
                String::from_utf8_lossy(&got[..got.len().min(80)])
            );
        }
    }));
    // Endless chunked body: 4 KiB chunks until the server stops it (413 past max_body_bytes).
    attackers.push(repeat(&stop, &counters[1], move || {
        if let Some(mut s) = connect(addr) {
            let _ = s.write_all(
                b"POST /webhooks/endless HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            );
            let chunk = format!("1000\r\n{}\r\n", "c".repeat(4096));
            for _ in 0..1024 {
                if s.write_all(chunk.as_bytes()).is_err() {
                    break;
                }
            }
            let got = drain(&mut s, 1 << 16);
            assert!(
                got.is_empty()
                    || got.starts_with(b"HTTP/1.1 413")
                    || got.starts_with(b"HTTP/1.1 503"),
                "endless body got {:?}",
                String::from_utf8_lossy(&got[..got.len().min(80)])
            );
        }
    }));
    // Pipelined requests followed by garbage: answers for the valid ones, then 400 and close.
    attackers.push(repeat(&stop, &counters[2], move || {
        if let Some(mut s) = connect(addr) {
            let mut bytes = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".repeat(16);
            bytes.extend_from_slice(b"\x00\x01GARBAGE \xff\xfe\r\n\r\n");
            bytes.extend_from_slice(&[0xAB; 4096]);
            let _ = s.write_all(&bytes);
            let got = drain(&mut s, 1 << 20);
            let text = String::from_utf8_lossy(&got);
            assert!(
                got.is_empty()
                    || text.starts_with("HTTP/1.1 200")
                    || text.starts_with("HTTP/1.1 503"),
                "pipelined garbage got {:?}",
                &text[..text.len().min(80)]
            );
        }
    }));
    // Half-closed: a partial head, then shutdown(Write); the server must close, not hang.
    attackers.push(repeat(&stop, &counters[3], move || {
        if let Some(mut s) = connect(addr) {
            let _ = s.write_all(
                b"POST /webhooks/half HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc",
            );
            let _ = s.shutdown(Shutdown::Write);
            let _ = drain(&mut s, 1 << 16);
        }
    }));
    // Flood: FLOOD more connections held open at once, past the per-core cap.
    let flood_refused = counters[4].clone();
    let flood_stop = stop.clone();
    attackers.push(thread::spawn(move || {
        let mut held = Vec::new();
        for _ in 0..FLOOD {
            if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                let _ = s.set_nonblocking(true);
                held.push(s);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !flood_stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        // Refused ones were answered 503 and/or closed by the server.
        let mut buf = [0u8; 512];
        for mut s in held {
            match s.read(&mut buf) {
                Ok(0) => flood_refused.fetch_add(1, Ordering::Relaxed),
                Ok(_) if buf.starts_with(b"HTTP/1.1 503") => {
                    flood_refused.fetch_add(1, Ordering::Relaxed)
                }
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => {
                    flood_refused.fetch_add(1, Ordering::Relaxed)
                }
                _ => 0,
            };
        }
    }));

    // The good client: one request every 20 ms on its keep-alive connection (reconnecting if it
    // is ever closed), while the slowloris sockets drip one byte per second.
    let t0 = Instant::now();
    let mut latencies = Vec::new();
    let mut peak_rss = rss_before;
    let mut next_drip = Instant::now();
    let mut held_at_end_of_attack = 0;
    let mut reconnects = 0;
    while t0.elapsed() < ATTACK {
        if Instant::now() >= next_drip {
            next_drip += Duration::from_secs(1);
            for s in &slow {
                let _ = (&*s).write(b"a");
            }
        }
        let t = Instant::now();
        let r = match good.try_post("/webhooks/good", b"{\"good\":true}", &[]) {
            Ok(r) => r,
            Err(e) => {
                reconnects += 1;
                assert!(
                    reconnects <= 3,
                    "the good client keeps losing its connection: {e}"
                );
                good = server.client();
                continue;
            }
        };
        latencies.push(t.elapsed());
        accepted(&r);
        peak_rss = peak_rss.max(rss_kib(pid).unwrap_or(0));
        thread::sleep(Duration::from_millis(20));
    }
    // How many slowloris sockets the server still holds open (neither EOF nor reset yet).
    let mut buf = [0u8; 1024];
    for s in &slow {
        match (&*s).read(&mut buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => held_at_end_of_attack += 1,
            _ => {}
        }
    }
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.join().expect("attacker thread");
    }
    // Past the header timeout every slowloris connection must have been cut.
    let cut_deadline = t_open + HEADER_TIMEOUT + Duration::from_secs(5);
    let mut open = slowloris;
    while Instant::now() < cut_deadline && open > 0 {
        open = 0;
        for s in &slow {
            match (&*s).read(&mut buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => open += 1,
                _ => {}
            }
        }
        thread::sleep(Duration::from_millis(100));
    }
    peak_rss = peak_rss.max(rss_kib(pid).unwrap_or(0));
    // After the attack a fresh client is served again.
    let fresh = wait_until(Duration::from_secs(5), || {
        Client::connect(addr)
            .and_then(|mut c| c.try_request("GET", "/healthz", &[], b""))
            .is_ok_and(|r| r.status == 200)
    });

    latencies.sort();
    let max = *latencies.last().expect("latencies");
    let p50 = latencies[latencies.len() / 2];
    let rounds: Vec<usize> = counters.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    eprintln!(
        "hostile: {slowloris} slowloris opened in {opened_in:?}, {held_at_end_of_attack} held at \
         {ATTACK:?}, {open} still open after the header timeout; flood {FLOOD} ({} refused); \
         rounds: oversized {} endless {} garbage {} half-closed {}; good client {} requests, \
         p50 {p50:?}, max {max:?}, {reconnects} reconnects; RSS {rss_before} KiB → peak \
         {peak_rss} KiB",
        rounds[4],
        rounds[0],
        rounds[1],
        rounds[2],
        rounds[3],
        latencies.len()
    );
    assert!(
        max <= MAX_LATENCY,
        "good client latency {max:?} > {MAX_LATENCY:?}"
    );
    assert!(
        latencies.len() >= 20,
        "the good client got only {} answers",
        latencies.len()
    );
    assert!(
        peak_rss <= MAX_RSS_KIB,
        "server RSS peaked at {peak_rss} KiB"
    );
    assert!(
        held_at_end_of_attack * 10 >= slowloris * 9,
        "the server dropped slowloris connections before their header timeout: {held_at_end_of_attack} of {slowloris} held"
    );
    assert_eq!(
        open, 0,
        "slowloris connections still open past the header timeout"
    );
    assert!(
        rounds[4] >= FLOOD + slowloris - WORKERS * CAP_PER_CORE,
        "flood past the cap: only {} refused",
        rounds[4]
    );
    assert!(
        rounds[0] > 0 && rounds[1] > 0 && rounds[2] > 0 && rounds[3] > 0,
        "an attacker never ran: {rounds:?}"
    );
    assert!(fresh, "no fresh connection served after the attack");
}
