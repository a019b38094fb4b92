//! The pool against a real listener on 127.0.0.1: each test's server thread is bounded by
//! a read timeout, and each poll loop by a deadline.

use super::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use mio::Poll;

use crate::net::io::{Backend, Event};

const REQUEST: &[u8] = b"POST /h HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\n\r\nhi";
const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
const SECOND: u64 = 1_000_000_000;

fn target(port: u16, idle_cap: usize) -> Target<'static> {
    Target {
        dest: 0,
        host: "127.0.0.1",
        port,
        idle_cap,
        tls: None,
    }
}

/// Reads one request of the shape of [`REQUEST`] (head, then a 2-byte body).
fn read_request(r: &mut impl BufRead) -> bool {
    let mut line = String::new();
    loop {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return false,
            Ok(_) if line == "\r\n" => break,
            Ok(_) => {}
        }
    }
    let mut body = [0u8; 2];
    r.read_exact(&mut body).is_ok()
}

/// A server that accepts `conns` connections and answers each request on them with the
/// next of `answers` (then closes that connection when the list for it is exhausted).
/// Returns its port and a handle yielding the number of requests it read.
fn server(conns: usize, answers: Vec<&'static [u8]>) -> (u16, JoinHandle<usize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = thread::spawn(move || {
        let mut served = 0;
        let mut answers = answers.into_iter();
        for _ in 0..conns {
            let (s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut w = s.try_clone().unwrap();
            let mut r = BufReader::new(s);
            while read_request(&mut r) {
                served += 1;
                match answers.next() {
                    Some(a) if !a.is_empty() => w.write_all(a).unwrap(),
                    // An empty answer: stay silent until the client closes (or the read
                    // timeout).
                    _ => {
                        let mut sink = Vec::new();
                        let _ = r.read_to_end(&mut sink);
                        break;
                    }
                }
                if answers.len() == 0 {
                    break;
                }
            }
        }
        served
    });
    (port, h)
}

/// A core's I/O for the pool: a reactor on one backend.
struct Rig {
    reactor: Reactor,
}

impl Rig {
    /// A reactor on `backend`; `None` (after saying so) when io_uring is unavailable here.
    fn new(backend: Backend) -> Option<Rig> {
        let poll = Poll::new().unwrap();
        let mut reactor = Reactor::new(poll);
        if backend == Backend::Uring {
            if let Err(why) = crate::net::io::uring::probe() {
                eprintln!("io_uring unavailable here ({why}); uring pool test not run");
                return None;
            }
            reactor.start_uring().unwrap();
        }
        Some(Rig { reactor })
    }

    /// A pool on this rig's backend.
    fn pool(&self, idle_timeout: u64) -> OutboundPool<u32> {
        let mut pool = OutboundPool::new(idle_timeout);
        pool.attach(self.reactor.clients().unwrap());
        pool
    }

    /// One turn of the core's loop for the pool: submit, wait (at most 20 ms), hand the
    /// events over.
    fn turn(&mut self, pool: &mut OutboundPool<u32>, now: u64, out: &mut Vec<Finished<u32>>) {
        let mut events = Vec::new();
        pool.submit(&mut self.reactor);
        self.reactor
            .wait(Duration::from_millis(20), &mut events)
            .unwrap();
        for ev in events {
            match ev {
                Event::Source {
                    token,
                    readable,
                    writable,
                } => pool.on_ready(token.0, readable, writable, now, out),
                Event::Out(ev) => pool.on_completion(ev, &mut self.reactor, now, out),
                other => panic!("not the pool's: {other:?}"),
            }
        }
    }
}

/// Runs turns until `want` attempts finished (at most 5 s).
fn drive(pool: &mut OutboundPool<u32>, rig: &mut Rig, now: u64, want: usize) -> Vec<Finished<u32>> {
    let mut out = Vec::new();
    let stop = Instant::now() + Duration::from_secs(5);
    while out.len() < want && Instant::now() < stop {
        rig.turn(pool, now, &mut out);
    }
    out
}

/// Each test on both backends (`mio` and `uring` in a module named after it).
macro_rules! both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::*;
            #[test]
            fn mio() {
                super::$name(Backend::Mio)
            }
            #[test]
            fn uring() {
                super::$name(Backend::Uring)
            }
        }
    )*};
}

both!(
    an_answered_keep_alive_connection_carries_the_next_attempt,
    a_kept_alive_connection_the_server_closed_is_stale_not_an_attempt,
    a_refused_connect_is_a_connect_error,
    a_silent_server_times_the_attempt_out_at_its_deadline,
    idle_connections_close_after_idle_timeout_and_past_the_idle_cap,
    retry_after_is_parsed_and_a_malformed_response_is_an_io_failure,
    a_server_closing_mid_response_breaks_the_exchange,
    an_https_destination_is_answered_over_tls,
    an_untrusted_https_destination_is_a_tls_failure,
    a_reused_connection_loses_its_idle_expiry_and_the_timers_stay_bounded,
);

fn done(f: &Finished<u32>) -> (u32, Exchange) {
    match f {
        Finished::Done {
            payload, result, ..
        } => (*payload, *result),
        other => panic!("expected Done, got {other:?}"),
    }
}

const STATUS_200: Exchange = Exchange::Response {
    status: 200,
    retry_after: None,
};

fn an_answered_keep_alive_connection_carries_the_next_attempt(b: Backend) {
    let (port, server) = server(1, vec![OK, OK]);
    let Some(mut poll) = Rig::new(b) else {
        return;
    };
    let mut pool = poll.pool(60 * SECOND);
    let r = pool.start(target(port, 4), 1, REQUEST.to_vec(), 10 * SECOND);
    assert_eq!(r.unwrap(), Started::Opened);
    assert_eq!(pool.in_flight(), 1);
    assert_eq!(pool.next_deadline(), Some(10 * SECOND));
    let out = drive(&mut pool, &mut poll, 1, 1);
    assert_eq!(out.len(), 1);
    assert_eq!(done(&out[0]), (1, STATUS_200));
    assert_eq!(
        (pool.in_flight(), pool.idle(0), pool.connections(0)),
        (0, 1, 1)
    );
    assert_eq!(pool.next_deadline(), None);

    let r = pool.start(target(port, 4), 2, REQUEST.to_vec(), 10 * SECOND);
    assert_eq!(r.unwrap(), Started::Reused);
    let out = drive(&mut pool, &mut poll, 2, 1);
    assert_eq!(done(&out[0]), (2, STATUS_200));
    assert_eq!(pool.connections(0), 1, "one connection served both");
    assert_eq!(server.join().unwrap(), 2);
}

fn a_kept_alive_connection_the_server_closed_is_stale_not_an_attempt(b: Backend) {
    // The server answers once, then closes the connection when the list runs out.
    let (port, server) = server(1, vec![OK]);
    let Some(mut poll) = Rig::new(b) else {
        return;
    };
    let mut pool = poll.pool(60 * SECOND);
    pool.start(target(port, 4), 1, REQUEST.to_vec(), 10 * SECOND)
        .unwrap();
    assert_eq!(done(&drive(&mut pool, &mut poll, 1, 1)[0]), (1, STATUS_200));
    assert_eq!(server.join().unwrap(), 1);
    // The server's close is not seen yet (no poll in between): the idle connection is
    // reused, and breaks before any byte of a response.
    let r = pool.start(target(port, 4), 2, REQUEST.to_vec(), 10 * SECOND);
    let f = match r {
        Ok(Started::Reused) => drive(&mut pool, &mut poll, 2, 1).pop().unwrap(),
        Ok(Started::Opened) => panic!("the idle connection was not reused"),
        Err(f) => f,
    };
    assert!(
        matches!(
            f,
            Finished::Stale {
                dest: 0,
                payload: 2
            }
        ),
        "{f:?}"
    );
    assert_eq!(pool.connections(0), 0);
}

fn a_refused_connect_is_a_connect_error(b: Backend) {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let Some(mut poll) = Rig::new(b) else {
        return;
    };
    let mut pool = poll.pool(60 * SECOND);
    let f = match pool.start(target(port, 4), 7, REQUEST.to_vec(), SECOND) {
        Ok(Started::Opened) => drive(&mut pool, &mut poll, 1, 1).pop().unwrap(),
        Ok(Started::Reused) => panic!("nothing to reuse"),
        Err(f) => f,
    };
    assert_eq!(done(&f), (7, Exchange::Failed(Failure::Connect)));
    assert_eq!((pool.in_flight(), pool.connections(0)), (0, 0));
}

fn a_silent_server_times_the_attempt_out_at_its_deadline(b: Backend) {
    // The server reads the request and never answers.
    let (port, server) = server(1, vec![b""]);
    let Some(mut poll) = Rig::new(b) else {
        return;
    };
    let mut pool = poll.pool(60 * SECOND);
    pool.start(target(port, 4), 3, REQUEST.to_vec(), 2 * SECOND)
        .unwrap();
    // Let the connection establish and the request go out; nothing comes back.
    let mut out = Vec::new();
    for _ in 0..10 {
        poll.turn(&mut pool, SECOND, &mut out);
    }
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(pool.in_flight(), 1);
    pool.on_tick(2 * SECOND - 1, &mut out);
    assert!(out.is_empty(), "not before the deadline");
    pool.on_tick(2 * SECOND, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(done(&out[0]), (3, Exchange::Failed(Failure::Timeout)));
    assert_eq!(pool.connections(0), 0);
    server.join().unwrap();
}

fn idle_connections_close_after_idle_timeout_and_past_the_idle_cap(b: Backend) {
    let (port, server) = server(2, vec![OK, OK]);
    let Some(mut poll) = Rig::new(b) else {
        return;
    };
    let mut pool = poll.pool(5 * SECOND);
    // idle_cap 0: the answered connection is closed at once.
    pool.start(target(port, 0), 1, REQUEST.to_vec(), 10 * SECOND)
        .unwrap();
    assert_eq!(
        done(&drive(&mut pool, &mut poll, SECOND, 1)[0]),
        (1, STATUS_200)
    );
    assert_eq!(pool.connections(0), 0);
    // idle_cap 1: kept, then closed once idle for longer than the idle timeout.
    pool.start(target(port, 1), 2, REQUEST.to_vec(), 10 * SECOND)
        .unwrap();
    assert_eq!(
        done(&drive(&mut pool, &mut poll, SECOND, 1)[0]),
        (2, STATUS_200)
    );
    assert_eq!(pool.idle(0), 1);
    let mut out = Vec::new();
    pool.on_tick(6 * SECOND, &mut out);
    assert_eq!(pool.idle(0), 1, "idle for exactly the timeout: kept");
    pool.on_tick(6 * SECOND + 1, &mut out);
    assert!(out.is_empty(), "closing an idle connection ends no attempt");
    assert_eq!((pool.idle(0), pool.connections(0)), (0, 0));
    assert_eq!(server.join().unwrap(), 2);
}

/// Every attempt on one kept-alive connection arms an attempt deadline and, once answered, an
/// idle expiry: a reuse takes the idle expiry away (it does not close the busy connection), and
/// the stale entries those re-arms leave stay within the heaps' bound.
fn a_reused_connection_loses_its_idle_expiry_and_the_timers_stay_bounded(b: Backend) {
    const ROUNDS: u32 = 200;
    let (port, server) = server(1, vec![OK; ROUNDS as usize + 1]);
    let Some(mut poll) = Rig::new(b) else {
        return;
    };
    let mut pool = poll.pool(5 * SECOND);
    for i in 0..ROUNDS {
        let now = u64::from(i) * SECOND;
        let started = pool.start(target(port, 1), i, REQUEST.to_vec(), now + 100 * SECOND);
        let opened = if i == 0 {
            Started::Opened
        } else {
            Started::Reused
        };
        assert_eq!(started.unwrap(), opened);
        assert_eq!(
            done(&drive(&mut pool, &mut poll, now, 1)[0]),
            (i, STATUS_200)
        );
        assert_eq!((pool.idle(0), pool.connections(0)), (1, 1));
        let bound = 2 * pool.connections(0) + 2 * crate::net::deadlines::COMPACT_SLACK;
        assert!(pool.timer_entries() <= bound, "{}", pool.timer_entries());
    }
    // Answered at ROUNDS - 1 s, reused at ROUNDS s: its idle expiry (ROUNDS + 4 s + 1) is gone.
    let now = u64::from(ROUNDS) * SECOND;
    pool.start(
        target(port, 1),
        ROUNDS,
        REQUEST.to_vec(),
        now + 100 * SECOND,
    )
    .unwrap();
    let mut out = Vec::new();
    pool.on_tick(now + 50 * SECOND, &mut out);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(
        (pool.in_flight(), pool.next_deadline()),
        (1, Some(now + 100 * SECOND))
    );
    assert_eq!(
        done(&drive(&mut pool, &mut poll, now, 1)[0]),
        (ROUNDS, STATUS_200)
    );
    assert_eq!(
        pool.next_deadline(),
        None,
        "idle expiry is not an attempt deadline"
    );
    drop(pool);
    assert_eq!(server.join().unwrap(), ROUNDS as usize + 1);
}

fn retry_after_is_parsed_and_a_malformed_response_is_an_io_failure(b: Backend) {
    let (port, server) = server(
        2,
        vec![
            b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 7\r\ncontent-length: 9\r\n\r\nslow down",
            b"nonsense\r\n\r\n",
        ],
    );
    let Some(mut poll) = Rig::new(b) else {
        return;
    };
    let mut pool = poll.pool(60 * SECOND);
    pool.start(target(port, 0), 1, REQUEST.to_vec(), 10 * SECOND)
        .unwrap();
    let f = drive(&mut pool, &mut poll, 1, 1).pop().unwrap();
    let want = Exchange::Response {
        status: 429,
        retry_after: Some(Duration::from_secs(7)),
    };
    assert_eq!(done(&f), (1, want));
    let Finished::Done { body_prefix, .. } = &f else {
        unreachable!()
    };
    assert_eq!(
        body_prefix, b"slow down",
        "the body's first bytes are carried"
    );
    pool.start(target(port, 0), 2, REQUEST.to_vec(), 10 * SECOND)
        .unwrap();
    let f = drive(&mut pool, &mut poll, 1, 1).pop().unwrap();
    assert_eq!(done(&f), (2, Exchange::Failed(Failure::Broken)));
    assert_eq!(pool.connections(0), 0);
    assert_eq!(server.join().unwrap(), 2);
}

fn a_server_closing_mid_response_breaks_the_exchange(b: Backend) {
    // A head promising 10 bytes of body, 3 of them, then the close.
    let (port, server) = server(1, vec![b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc"]);
    let Some(mut poll) = Rig::new(b) else {
        return;
    };
    let mut pool = poll.pool(60 * SECOND);
    pool.start(target(port, 4), 5, REQUEST.to_vec(), 10 * SECOND)
        .unwrap();
    let f = drive(&mut pool, &mut poll, 1, 1).pop().unwrap();
    assert_eq!(done(&f), (5, Exchange::Failed(Failure::Broken)));
    assert_eq!(pool.connections(0), 0);
    assert_eq!(server.join().unwrap(), 1);
}

/// An HTTPS server with `pki`'s certificate answering one request with [`OK`]; returns its
/// port and whether it answered.
fn https_server(pki: &crate::net::tls::tests::Pki) -> (u16, JoinHandle<bool>) {
    use rustls::pki_types::PrivatePkcs8KeyDer;
    let provider = crate::net::tls::tests::provider();
    let key = PrivatePkcs8KeyDer::from(pki.server_key.clone());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(pki.server_chain.clone(), key.into())
        .unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let conn = rustls::ServerConnection::new(std::sync::Arc::new(config)).unwrap();
        let mut r = BufReader::new(rustls::StreamOwned::new(conn, s));
        if !read_request(&mut r) {
            return false;
        }
        let tls = r.get_mut();
        tls.write_all(OK).is_ok() && tls.flush().is_ok()
    });
    (port, h)
}

fn https_target(port: u16, tls: &TlsClient) -> Target<'_> {
    Target {
        tls: Some(tls),
        ..target(port, 4)
    }
}

fn an_https_destination_is_answered_over_tls(b: Backend) {
    use crate::net::tls::tests::{client, pki};
    let pki = pki(&["localhost"]);
    let (port, server) = https_server(&pki);
    let tls = client(&pki.ca_der, "localhost");
    let Some(mut poll) = Rig::new(b) else {
        return;
    };
    let mut pool = poll.pool(60 * SECOND);
    let t = https_target(port, &tls);
    pool.start(t, 8, REQUEST.to_vec(), 10 * SECOND).unwrap();
    let f = drive(&mut pool, &mut poll, 1, 1).pop().unwrap();
    assert_eq!(done(&f), (8, STATUS_200));
    assert!(server.join().unwrap());
}

fn an_untrusted_https_destination_is_a_tls_failure(b: Backend) {
    use crate::net::tls::tests::{client, pki};
    let pki = pki(&["localhost"]);
    let other = crate::net::tls::tests::pki(&["localhost"]);
    let (port, server) = https_server(&pki);
    let tls = client(&other.ca_der, "localhost");
    let Some(mut poll) = Rig::new(b) else {
        return;
    };
    let mut pool = poll.pool(60 * SECOND);
    let t = https_target(port, &tls);
    pool.start(t, 9, REQUEST.to_vec(), 10 * SECOND).unwrap();
    let f = drive(&mut pool, &mut poll, 1, 1).pop().unwrap();
    let unknown = Failure::Tls(TlsFault::UnknownIssuer);
    assert_eq!(done(&f), (9, Exchange::Failed(unknown)));
    assert_eq!(pool.connections(0), 0);
    assert!(!server.join().unwrap());
}

#[test]
fn spare_request_buffers_are_bounded_in_number_and_size() {
    let mut spare = Vec::new();
    for _ in 0..SPARE_BUFFERS + 10 {
        recycle(&mut spare, Vec::with_capacity(1024));
    }
    assert_eq!(spare.len(), SPARE_BUFFERS, "at most SPARE_BUFFERS kept");
    let mut spare = Vec::new();
    recycle(&mut spare, Vec::with_capacity(SPARE_BUFFER_MAX + 1));
    recycle(&mut spare, Vec::new());
    assert!(spare.is_empty(), "outsized and empty buffers are dropped");
    let mut used = Vec::with_capacity(16);
    used.extend_from_slice(b"stale");
    recycle(&mut spare, used);
    assert!(spare[0].is_empty(), "a kept buffer is cleared");
}

/// A stream whose ring submit failed is failed at the next tick only while its id still holds
/// it: an id closed and given to a new connection in between keeps the new attempt.
#[test]
fn a_failed_submit_fails_only_the_stream_it_was_for() {
    let (port, _server) = server(1, vec![OK]);
    let Some(rig) = Rig::new(Backend::Uring) else {
        return;
    };
    let mut pool = rig.pool(60 * SECOND);
    let r = pool.start(target(port, 4), 7, REQUEST.to_vec(), 10 * SECOND);
    assert_eq!(r.unwrap(), Started::Opened);
    let gen = match pool.conns[0].as_mut().unwrap().wire.stream() {
        Stream::Uring(s) => s.gen(),
        other => panic!("a ring stream: {other:?}"),
    };
    let mut out = Vec::new();
    // A failure reported for an earlier stream of id 0: nothing happens to this one.
    pool.unsubmitted.push((0, gen.wrapping_sub(1)));
    pool.on_tick(1, &mut out);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(pool.in_flight(), 1);
    // Its own: the attempt ends as a broken connection.
    pool.unsubmitted.push((0, gen));
    pool.on_tick(1, &mut out);
    assert_eq!(done(&out[0]), (7, Exchange::Failed(Failure::Broken)));
    assert_eq!(pool.in_flight(), 0);
}
