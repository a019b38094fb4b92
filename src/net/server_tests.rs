//! Unit tests of the server side with a fake handler: real loopback sockets, a real mio
//! reactor, the real codec and a manual clock. The handler records what it was given and
//! answers as each test tells it (at once, or with a pending slot filled in later), so each test
//! checks what the server did with the bytes: request order, the pipelining bound, the body
//! gate, the owed responses it reports on close, the connection bound and the deadlines.

use std::io::{Read, Write};
use std::net::TcpStream as StdStream;

use super::*;
use crate::metrics::Metrics;
use crate::sync::clock::ManualClock;

/// What the fake handler does with a request.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// `200` with the request's path as the body.
    Now,
    /// A pending slot carrying the request's number, filled by the test.
    Later,
}

struct Fake {
    answer: Answer,
    /// Paths handed over, in order.
    seen: Vec<String>,
    /// Bodies handed over.
    bodies: Vec<Vec<u8>>,
    /// The body gate refuses (and queues a `503`).
    refuse_bodies: bool,
    closed_with: Vec<u32>,
    draining: bool,
}

impl Fake {
    fn new(answer: Answer) -> Fake {
        Fake {
            answer,
            seen: Vec::new(),
            bodies: Vec::new(),
            refuse_bodies: false,
            closed_with: Vec::new(),
            draining: false,
        }
    }
}

impl Handler<u32> for Fake {
    fn on_request(
        &mut self,
        cx: &mut Ctx<'_, u32>,
        head: &RequestHead,
        body: Vec<u8>,
        keep_alive: bool,
    ) {
        self.seen.push(head.path().to_string());
        self.bodies.push(body);
        match self.answer {
            Answer::Now => {
                let path = head.path().as_bytes().to_vec();
                cx.respond(Route::Unmatched, 200, &[], &path, keep_alive, false)
            }
            Answer::Later => {
                let n = self.seen.len() as u32;
                cx.conn().unwrap().push(Slot::Pending(n));
            }
        }
    }

    fn gate_body(&mut self, cx: &mut Ctx<'_, u32>, want: u64) -> bool {
        if self.refuse_bodies {
            cx.respond(Route::Webhook, 503, &[], b"body_budget", false, false);
            return false;
        }
        cx.conn().unwrap().body.grow_to(want)
    }

    fn on_close(&mut self, pending: &u32) {
        self.closed_with.push(*pending);
    }

    fn draining(&self) -> bool {
        self.draining
    }

    fn note_input(&mut self, _at: u64) {}
}

struct Fx {
    reactor: Reactor,
    server: Server<u32>,
    registry: Metrics,
    metrics: CoreMetrics,
    clock: ManualClock,
    addr: std::net::SocketAddr,
}

fn spec(depth: usize, max_connections: usize) -> ServerSpec {
    let ms = Duration::from_millis;
    ServerSpec {
        limits: http::Limits::default(),
        max_connections,
        max_pipeline_depth: depth,
        max_queued_response_bytes: 1 << 20,
        timeouts: Timeouts::new(ms(100), ms(200), ms(300)),
    }
}

impl Fx {
    fn new(spec: ServerSpec) -> Fx {
        let reactor = Reactor::new(mio::Poll::new().unwrap());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let budget = crate::sync::Arc::new(BodyBudget::new(1 << 20));
        let server = Server::new(0, listener, reactor.registry(), spec, budget).unwrap();
        let registry = Metrics::new(1);
        Fx {
            reactor,
            server,
            metrics: registry.core(0),
            registry,
            clock: ManualClock::new(1_000_000_000),
            addr,
        }
    }

    fn net(&mut self) -> (&mut Server<u32>, Net<'_>) {
        let net = Net {
            reactor: &mut self.reactor,
            metrics: &self.metrics,
            clock: &self.clock,
        };
        (&mut self.server, net)
    }

    /// Connects a client that has already sent `bytes`, and accepts it: its slot.
    fn connect(&mut self, h: &mut Fake, bytes: &[u8]) -> (usize, StdStream) {
        let mut client = StdStream::connect(self.addr).unwrap();
        client.write_all(bytes).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let before: Vec<usize> = (0..self.server.conns().slots())
            .filter(|&i| self.server.conns().get(i).is_some())
            .collect();
        let (server, mut net) = self.net();
        server.accept_all(&mut net, h);
        let idx = (0..self.server.conns().slots())
            .find(|&i| self.server.conns().get(i).is_some() && !before.contains(&i))
            .expect("accepted");
        (idx, client)
    }

    /// Drives `idx` until the handler has seen `n` requests (bounded: the bytes are on
    /// loopback already, but the kernel may hand them over in more than one read).
    fn drive_until(&mut self, h: &mut Fake, idx: usize, n: usize) {
        for _ in 0..200 {
            if h.seen.len() >= n {
                return;
            }
            if let Some(c) = self.server.conns.get_mut(idx) {
                c.readable = true;
            }
            let (server, mut net) = self.net();
            server.drive(&mut net, h, idx);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(h.seen.len() >= n, "saw {:?}", h.seen);
    }

    /// Fills the pending slot carrying `n` with `200 n`, then drives the connection.
    fn fill(&mut self, h: &mut Fake, idx: usize, n: u32) {
        let (conns, date) = self.server.parts();
        let date = date.to_string();
        let conn = conns.get_mut(idx).unwrap();
        let pos = conn
            .slots
            .iter()
            .position(|s| matches!(s, Slot::Pending(p) if *p == n))
            .unwrap();
        let bytes = crate::net::conn::response_bytes(
            &date,
            200,
            &[],
            n.to_string().as_bytes(),
            true,
            false,
        );
        conn.fill_slot(
            pos,
            Slot::Ready {
                bytes,
                close: false,
            },
        );
        let (server, mut net) = self.net();
        server.drive(&mut net, h, idx);
    }
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n")
}

/// Reads from `client` until `want` occurrences of "HTTP/1.1 " arrived; the text.
fn read_responses(client: &mut StdStream, want: usize) -> String {
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    while text.matches("HTTP/1.1 ").count() < want {
        let n = client.read(&mut buf).expect("a response");
        assert!(n > 0, "closed early after {text:?}");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    text
}

#[test]
fn pipelined_requests_are_answered_in_request_order_whatever_order_they_complete_in() {
    let mut fx = Fx::new(spec(8, 4));
    let mut h = Fake::new(Answer::Later);
    let bytes = format!("{}{}", get("/a"), get("/b"));
    let (idx, mut client) = fx.connect(&mut h, bytes.as_bytes());
    fx.drive_until(&mut h, idx, 2);
    assert_eq!(h.seen, vec!["/a", "/b"]);
    // The second completes first: nothing is written until the first is answered.
    fx.fill(&mut h, idx, 2);
    assert_eq!(fx.server.conns().get(idx).unwrap().slots.len(), 2);
    fx.fill(&mut h, idx, 1);
    let text = read_responses(&mut client, 2);
    let (first, second) = (
        text.find("\r\n\r\n1").unwrap(),
        text.find("\r\n\r\n2").unwrap(),
    );
    assert!(first < second, "{text}");
}

#[test]
fn reading_stops_at_the_pipeline_depth_and_resumes_when_answers_leave() {
    let mut fx = Fx::new(spec(1, 4));
    let mut h = Fake::new(Answer::Later);
    let bytes = format!("{}{}", get("/a"), get("/b"));
    let (idx, mut client) = fx.connect(&mut h, bytes.as_bytes());
    fx.drive_until(&mut h, idx, 1);
    assert_eq!(h.seen, vec!["/a"], "the second waits in the buffer");
    assert!(fx.registry.read_paused(PauseBound::PipelineDepth) >= 1);
    fx.fill(&mut h, idx, 1);
    // Writing the first made room: the second is framed in the same drive.
    assert_eq!(h.seen, vec!["/a", "/b"]);
    fx.fill(&mut h, idx, 2);
    let text = read_responses(&mut client, 2);
    assert!(
        text.contains("\r\n\r\n1") && text.contains("\r\n\r\n2"),
        "{text}"
    );
}

#[test]
fn a_refused_body_is_answered_unread_and_the_request_never_reaches_the_handler() {
    let mut fx = Fx::new(spec(8, 4));
    let mut h = Fake::new(Answer::Now);
    h.refuse_bodies = true;
    let req = "POST /in HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello";
    let (idx, mut client) = fx.connect(&mut h, req.as_bytes());
    let text = read_responses(&mut client, 1);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("body_budget"), "{text}");
    assert!(h.seen.is_empty(), "the handler got no request");
    let conn = fx.server.conns().get(idx);
    assert!(
        conn.is_none_or(|c| c.closing),
        "the connection ends after the answer"
    );
}

#[test]
fn a_gated_body_is_handed_over_whole_and_expect_continue_is_answered_first() {
    let mut fx = Fx::new(spec(8, 4));
    let mut h = Fake::new(Answer::Now);
    let head = "POST /in HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n";
    let (idx, mut client) = fx.connect(&mut h, head.as_bytes());
    let text = read_responses(&mut client, 1);
    assert!(text.starts_with("HTTP/1.1 100"), "{text}");
    client.write_all(b"hello").unwrap();
    fx.drive_until(&mut h, idx, 1);
    assert_eq!(h.bodies, vec![b"hello".to_vec()]);
    let text = read_responses(&mut client, 1);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

#[test]
fn closing_a_connection_reports_every_response_it_still_owed() {
    let mut fx = Fx::new(spec(8, 4));
    let mut h = Fake::new(Answer::Later);
    let bytes = format!("{}{}", get("/a"), get("/b"));
    let (idx, client) = fx.connect(&mut h, bytes.as_bytes());
    fx.drive_until(&mut h, idx, 2);
    drop(client);
    let (server, mut net) = fx.net();
    server.close(&mut net, &mut h, idx);
    assert_eq!(h.closed_with, vec![1, 2]);
    assert_eq!(fx.server.conns().open(), 0);
}

#[test]
fn past_the_connection_bound_a_client_gets_503_and_is_not_admitted() {
    let mut fx = Fx::new(spec(8, 1));
    let mut h = Fake::new(Answer::Now);
    let (_idx, _first) = fx.connect(&mut h, b"");
    let mut second = StdStream::connect(fx.addr).unwrap();
    second
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let (server, mut net) = fx.net();
    server.accept_all(&mut net, &mut h);
    let text = read_responses(&mut second, 1);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("connection limit reached"), "{text}");
    assert_eq!(fx.server.conns().open(), 1);
}

#[test]
fn a_head_that_does_not_arrive_in_time_gets_408_on_the_sweep() {
    let mut fx = Fx::new(spec(8, 4));
    let mut h = Fake::new(Answer::Now);
    let (idx, mut client) = fx.connect(&mut h, b"GET /slow HTTP/1.1\r\n");
    let start = fx.clock.now_nanos();
    let (server, mut net) = fx.net();
    server.sweep(&mut net, &mut h, start + 50_000_000, false);
    assert!(
        fx.server.conns().get(idx).is_some(),
        "within the header timeout"
    );
    let (server, mut net) = fx.net();
    server.sweep(&mut net, &mut h, start + 101_000_000, false);
    let text = read_responses(&mut client, 1);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(h.seen.is_empty());
}

#[test]
fn draining_answers_close_the_connection() {
    let mut fx = Fx::new(spec(8, 4));
    let mut h = Fake::new(Answer::Now);
    h.draining = true;
    let (idx, mut client) = fx.connect(&mut h, get("/a").as_bytes());
    fx.drive_until(&mut h, idx, 1);
    let text = read_responses(&mut client, 1);
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
}
