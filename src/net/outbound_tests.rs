//! The pool against a real listener on 127.0.0.1: each test's server thread is bounded by
//! a read timeout, and each poll loop by a deadline.

use super::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use mio::{Events, Poll};

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
fn read_request(r: &mut BufReader<std::net::TcpStream>) -> bool {
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

/// Polls until `want` attempts finished (at most 5 s).
fn drive(
    pool: &mut OutboundPool<u32>,
    poll: &mut Poll,
    now: u64,
    want: usize,
) -> Vec<Finished<u32>> {
    let mut out = Vec::new();
    let mut events = Events::with_capacity(16);
    let stop = Instant::now() + Duration::from_secs(5);
    while out.len() < want && Instant::now() < stop {
        poll.poll(&mut events, Some(Duration::from_millis(20)))
            .unwrap();
        for e in events.iter() {
            let readable = e.is_readable() || e.is_read_closed() || e.is_error();
            let writable = e.is_writable() || e.is_error();
            pool.on_ready(
                e.token(),
                readable,
                writable,
                now,
                poll.registry(),
                &mut out,
            );
        }
    }
    out
}

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

#[test]
fn an_answered_keep_alive_connection_carries_the_next_attempt() {
    let (port, server) = server(1, vec![OK, OK]);
    let mut poll = Poll::new().unwrap();
    let mut pool = OutboundPool::<u32>::new(60 * SECOND);
    let r = pool.start(
        target(port, 4),
        1,
        REQUEST.to_vec(),
        10 * SECOND,
        poll.registry(),
    );
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

    let r = pool.start(
        target(port, 4),
        2,
        REQUEST.to_vec(),
        10 * SECOND,
        poll.registry(),
    );
    assert_eq!(r.unwrap(), Started::Reused);
    let out = drive(&mut pool, &mut poll, 2, 1);
    assert_eq!(done(&out[0]), (2, STATUS_200));
    assert_eq!(pool.connections(0), 1, "one connection served both");
    assert_eq!(server.join().unwrap(), 2);
}

#[test]
fn a_kept_alive_connection_the_server_closed_is_stale_not_an_attempt() {
    // The server answers once, then closes the connection when the list runs out.
    let (port, server) = server(1, vec![OK]);
    let mut poll = Poll::new().unwrap();
    let mut pool = OutboundPool::<u32>::new(60 * SECOND);
    pool.start(
        target(port, 4),
        1,
        REQUEST.to_vec(),
        10 * SECOND,
        poll.registry(),
    )
    .unwrap();
    assert_eq!(done(&drive(&mut pool, &mut poll, 1, 1)[0]), (1, STATUS_200));
    assert_eq!(server.join().unwrap(), 1);
    // The server's close is not seen yet (no poll in between): the idle connection is
    // reused, and breaks before any byte of a response.
    let r = pool.start(
        target(port, 4),
        2,
        REQUEST.to_vec(),
        10 * SECOND,
        poll.registry(),
    );
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

#[test]
fn a_refused_connect_is_a_connect_error() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut poll = Poll::new().unwrap();
    let mut pool = OutboundPool::<u32>::new(60 * SECOND);
    let f = match pool.start(
        target(port, 4),
        7,
        REQUEST.to_vec(),
        SECOND,
        poll.registry(),
    ) {
        Ok(Started::Opened) => drive(&mut pool, &mut poll, 1, 1).pop().unwrap(),
        Ok(Started::Reused) => panic!("nothing to reuse"),
        Err(f) => f,
    };
    assert_eq!(done(&f), (7, Exchange::Failed(Failure::Connect)));
    assert_eq!((pool.in_flight(), pool.connections(0)), (0, 0));
}

#[test]
fn a_silent_server_times_the_attempt_out_at_its_deadline() {
    // The server reads the request and never answers.
    let (port, server) = server(1, vec![b""]);
    let mut poll = Poll::new().unwrap();
    let mut pool = OutboundPool::<u32>::new(60 * SECOND);
    pool.start(
        target(port, 4),
        3,
        REQUEST.to_vec(),
        2 * SECOND,
        poll.registry(),
    )
    .unwrap();
    // Let the connection establish and the request go out; nothing comes back.
    let mut events = Events::with_capacity(16);
    let mut out = Vec::new();
    for _ in 0..10 {
        poll.poll(&mut events, Some(Duration::from_millis(20)))
            .unwrap();
        for e in events.iter() {
            let (r, w) = (e.is_readable(), e.is_writable());
            pool.on_ready(e.token(), r, w, SECOND, poll.registry(), &mut out);
        }
    }
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(pool.in_flight(), 1);
    pool.on_tick(2 * SECOND - 1, poll.registry(), &mut out);
    assert!(out.is_empty(), "not before the deadline");
    pool.on_tick(2 * SECOND, poll.registry(), &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(done(&out[0]), (3, Exchange::Failed(Failure::Timeout)));
    assert_eq!(pool.connections(0), 0);
    server.join().unwrap();
}

#[test]
fn idle_connections_close_after_idle_timeout_and_past_the_idle_cap() {
    let (port, server) = server(2, vec![OK, OK]);
    let mut poll = Poll::new().unwrap();
    let mut pool = OutboundPool::<u32>::new(5 * SECOND);
    // idle_cap 0: the answered connection is closed at once.
    pool.start(
        target(port, 0),
        1,
        REQUEST.to_vec(),
        10 * SECOND,
        poll.registry(),
    )
    .unwrap();
    assert_eq!(
        done(&drive(&mut pool, &mut poll, SECOND, 1)[0]),
        (1, STATUS_200)
    );
    assert_eq!(pool.connections(0), 0);
    // idle_cap 1: kept, then closed once idle for longer than the idle timeout.
    pool.start(
        target(port, 1),
        2,
        REQUEST.to_vec(),
        10 * SECOND,
        poll.registry(),
    )
    .unwrap();
    assert_eq!(
        done(&drive(&mut pool, &mut poll, SECOND, 1)[0]),
        (2, STATUS_200)
    );
    assert_eq!(pool.idle(0), 1);
    let mut out = Vec::new();
    pool.on_tick(6 * SECOND, poll.registry(), &mut out);
    assert_eq!(pool.idle(0), 1, "idle for exactly the timeout: kept");
    pool.on_tick(6 * SECOND + 1, poll.registry(), &mut out);
    assert!(out.is_empty(), "closing an idle connection ends no attempt");
    assert_eq!((pool.idle(0), pool.connections(0)), (0, 0));
    assert_eq!(server.join().unwrap(), 2);
}

#[test]
fn retry_after_is_parsed_and_a_malformed_response_is_an_io_failure() {
    let (port, server) = server(
        2,
        vec![
            b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 7\r\ncontent-length: 0\r\n\r\n",
            b"nonsense\r\n\r\n",
        ],
    );
    let mut poll = Poll::new().unwrap();
    let mut pool = OutboundPool::<u32>::new(60 * SECOND);
    pool.start(
        target(port, 0),
        1,
        REQUEST.to_vec(),
        10 * SECOND,
        poll.registry(),
    )
    .unwrap();
    let f = drive(&mut pool, &mut poll, 1, 1).pop().unwrap();
    let want = Exchange::Response {
        status: 429,
        retry_after: Some(Duration::from_secs(7)),
    };
    assert_eq!(done(&f), (1, want));
    pool.start(
        target(port, 0),
        2,
        REQUEST.to_vec(),
        10 * SECOND,
        poll.registry(),
    )
    .unwrap();
    let f = drive(&mut pool, &mut poll, 1, 1).pop().unwrap();
    assert_eq!(done(&f), (2, Exchange::Failed(Failure::Broken)));
    assert_eq!(pool.connections(0), 0);
    assert_eq!(server.join().unwrap(), 2);
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
