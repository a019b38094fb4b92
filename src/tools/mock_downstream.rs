//! `sluice mock-downstream`: an HTTP/1.1 server that models a third party with a capacity.
//!
//! One thread, one `mio` loop, keep-alive connections parsed with the server codec
//! ([`RequestReader`]) and answered with [`write_response`]. A request other than `GET /stats`
//! asks for *service*:
//!
//! - **Capacity.** At most `--max-concurrency` requests are in service at once, and at most
//!   `--max-rps` requests *start* service in each one-second window (counted from start-up).
//! - **Past capacity** (`--over-capacity`): `queue` puts the request in a FIFO of at most
//!   `--queue-limit` entries (past it: 503), served as capacity frees; `429`/`503` answer at once
//!   with `Retry-After: --retry-after-secs`.
//! - **Service time** is a timer in the loop (fixed or uniform in a range); no thread sleeps. When
//!   it fires the request leaves service and is answered 200, or `--fail-status` with probability
//!   `--fail-rate`.
//!
//! Each connection has at most one request in service or queued; pipelined requests wait in its
//! buffer until the response is written. A connection that closes while its request is in service
//! keeps the slot until the timer fires (the third party does not know the caller left).
//!
//! Statistics: totals, the peak number in service, counts per status and, per second, requests
//! received, the peak in service and counts per status (the last 3600 seconds). `GET /stats`
//! returns them as JSON; on SIGTERM/SIGINT or at the end of `--duration` the same JSON is printed
//! to stdout and the process exits 0.
//!
//! Bounds: connections ≤ `--max-connections` (past it: accepted and closed), queue ≤
//! `--queue-limit`, timers ≤ connections, history ≤ 3600 seconds, input per connection ≤ the
//! codec's head and body limits.
#![forbid(unsafe_code)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use serde::Serialize;

use super::spec::{parse_span, Rng, ServiceTime};
use super::ToolError;
use crate::net::http::{
    write_continue, write_error, write_response, Limits, Method, ReadEvent, RequestReader,
};

const LISTENER: Token = Token(usize::MAX - 1);
/// Seconds of per-second history kept.
const HISTORY: usize = 3600;
/// Longest poll sleep, so signals and the duration are noticed promptly.
const TICK: Duration = Duration::from_millis(20);

/// What happens to a request past capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OverCapacity {
    /// Wait in a bounded FIFO.
    Queue,
    /// Answer 429 with Retry-After.
    #[value(name = "429")]
    TooMany,
    /// Answer 503 with Retry-After.
    #[value(name = "503")]
    Unavailable,
}

/// `sluice mock-downstream` arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct MockArgs {
    /// Listen address; port 0 picks a free port (printed on stdout).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Service time: fixed (`20ms`) or uniform in a range (`10ms..30ms`).
    #[arg(long, default_value = "20ms")]
    pub service_time: String,
    /// Most requests in service at once (default: unlimited).
    #[arg(long)]
    pub max_concurrency: Option<usize>,
    /// Most requests starting service per one-second window (default: unlimited).
    #[arg(long)]
    pub max_rps: Option<u64>,
    /// Past capacity: queue, 429 or 503.
    #[arg(long, value_enum, default_value = "queue")]
    pub over_capacity: OverCapacity,
    /// Retry-After (seconds) on 429/503.
    #[arg(long, default_value_t = 1)]
    pub retry_after_secs: u64,
    /// Queue bound with `--over-capacity queue`; past it: 503.
    #[arg(long, default_value_t = 10_000)]
    pub queue_limit: usize,
    /// Fraction of served requests answered with --fail-status (0..=1).
    #[arg(long, default_value_t = 0.0)]
    pub fail_rate: f64,
    /// Status of injected failures.
    #[arg(long, default_value_t = 500)]
    pub fail_status: u16,
    /// Stop by itself after this long (e.g. `60s`).
    #[arg(long)]
    pub duration: Option<String>,
    /// Most open connections (past it: accepted and closed at once).
    #[arg(long, default_value_t = 10_000)]
    pub max_connections: usize,
    /// PRNG seed for service times and failures.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// The validated form of [`MockArgs`].
#[derive(Clone, Debug)]
struct Model {
    service: ServiceTime,
    max_concurrency: usize,
    max_rps: u64,
    over: OverCapacity,
    retry_after: String,
    queue_limit: usize,
    fail_rate: f64,
    fail_status: u16,
    duration: Option<Duration>,
    max_connections: usize,
}

impl MockArgs {
    fn validate(&self) -> Result<Model, ToolError> {
        let usage = ToolError::Usage;
        let service = ServiceTime::parse(&self.service_time).map_err(usage)?;
        if self.max_concurrency == Some(0) || self.max_rps == Some(0) {
            return Err(usage("--max-concurrency and --max-rps must be ≥ 1".into()));
        }
        if !(0.0..=1.0).contains(&self.fail_rate) {
            return Err(usage("--fail-rate must be in 0..=1".into()));
        }
        if !(100..=599).contains(&self.fail_status) {
            return Err(usage("--fail-status must be in 100..=599".into()));
        }
        if self.retry_after_secs > 86_400 {
            return Err(usage("--retry-after-secs must be ≤ 86400".into()));
        }
        if self.queue_limit > 1_000_000 || !(1..=100_000).contains(&self.max_connections) {
            return Err(usage(
                "--queue-limit must be ≤ 1000000, --max-connections in 1..=100000".into(),
            ));
        }
        let duration = match &self.duration {
            Some(d) => Some(parse_span(d).map_err(usage)?),
            None => None,
        };
        Ok(Model {
            service,
            max_concurrency: self.max_concurrency.unwrap_or(usize::MAX),
            max_rps: self.max_rps.unwrap_or(u64::MAX),
            over: self.over_capacity,
            retry_after: self.retry_after_secs.to_string(),
            queue_limit: self.queue_limit,
            fail_rate: self.fail_rate,
            fail_status: self.fail_status,
            duration,
            max_connections: self.max_connections,
        })
    }
}

/// Statistics of one second.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SecondStats {
    pub second: u64,
    /// Requests received (excluding `/stats`).
    pub requests: u64,
    /// Peak number in service during the second.
    pub max_concurrency: usize,
    /// Responses sent, by status.
    pub status: BTreeMap<u16, u64>,
}

/// The `/stats` and exit summary document.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    pub total: u64,
    pub max_concurrency_seen: usize,
    pub per_status: BTreeMap<u16, u64>,
    pub per_second: VecDeque<SecondStats>,
}

impl Stats {
    fn second(&mut self, sec: u64) -> &mut SecondStats {
        if self.per_second.back().map_or(true, |s| s.second < sec) {
            let from = self.per_second.back().map_or(0, |s| s.second + 1);
            for s in from.max(sec.saturating_sub(HISTORY as u64 - 1))..=sec {
                if self.per_second.len() == HISTORY {
                    self.per_second.pop_front();
                }
                self.per_second.push_back(SecondStats {
                    second: s,
                    ..SecondStats::default()
                });
            }
        }
        self.per_second.back_mut().expect("just pushed")
    }
}

/// A request that is in service or queued: the connection and its generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Ticket {
    conn: usize,
    gen: u64,
}

#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    gen: u64,
    input: Vec<u8>,
    reader: RequestReader,
    output: Vec<u8>,
    /// A request of this connection is queued or in service.
    busy: bool,
    keep_alive: bool,
    head_only: bool,
    /// Close once `output` is written.
    closing: bool,
}

struct Server {
    model: Model,
    poll: Poll,
    listener: TcpListener,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    next_gen: u64,
    open: usize,
    in_service: usize,
    window: (u64, u64),
    queue: VecDeque<Ticket>,
    timers: BinaryHeap<Reverse<(Instant, Ticket)>>,
    stats: Stats,
    start: Instant,
    rng: Rng,
}

/// Runs the mock until SIGTERM/SIGINT or `--duration`; `on_ready` receives the bound address.
/// Returns the final statistics.
pub fn run(args: &MockArgs, on_ready: &mut dyn FnMut(SocketAddr)) -> Result<Stats, ToolError> {
    let model = args.validate()?;
    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, term.clone()).map_err(ToolError::io("signals"))?;
    }
    let std_listener =
        std::net::TcpListener::bind(args.listen).map_err(ToolError::io("binding"))?;
    std_listener
        .set_nonblocking(true)
        .map_err(ToolError::io("binding"))?;
    let addr = std_listener
        .local_addr()
        .map_err(ToolError::io("binding"))?;
    let mut listener = TcpListener::from_std(std_listener);
    let poll = Poll::new().map_err(ToolError::io("poll"))?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .map_err(ToolError::io("poll"))?;
    let mut server = Server {
        model,
        poll,
        listener,
        conns: Vec::new(),
        free: Vec::new(),
        next_gen: 0,
        open: 0,
        in_service: 0,
        window: (0, 0),
        queue: VecDeque::new(),
        timers: BinaryHeap::new(),
        stats: Stats::default(),
        start: Instant::now(),
        rng: Rng::new(args.seed),
    };
    on_ready(addr);
    server.run(&term)?;
    Ok(server.stats)
}

impl Server {
    fn run(&mut self, term: &AtomicBool) -> Result<(), ToolError> {
        let mut events = Events::with_capacity(1024);
        let deadline = self.model.duration.map(|d| self.start + d);
        while !term.load(Ordering::Relaxed) {
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                break;
            }
            self.fire_timers(now);
            self.start_queued(now);
            let mut wait = TICK;
            if let Some(Reverse((at, _))) = self.timers.peek() {
                wait = wait.min(at.saturating_duration_since(now));
            }
            match self.poll.poll(&mut events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ToolError::io("poll")(e)),
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(),
                    Token(i) => self.on_conn_event(i),
                }
            }
        }
        Ok(())
    }

    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.start).as_secs()
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    if self.open >= self.model.max_connections {
                        drop(stream);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let i = self.free.pop().unwrap_or_else(|| {
                        self.conns.push(None);
                        self.conns.len() - 1
                    });
                    let interest = Interest::READABLE | Interest::WRITABLE;
                    if self
                        .poll
                        .registry()
                        .register(&mut stream, Token(i), interest)
                        .is_err()
                    {
                        self.free.push(i);
                        continue;
                    }
                    self.next_gen += 1;
                    self.conns[i] = Some(Conn {
                        stream,
                        gen: self.next_gen,
                        input: Vec::new(),
                        reader: RequestReader::new(Limits::default()),
                        output: Vec::new(),
                        busy: false,
                        keep_alive: true,
                        head_only: false,
                        closing: false,
                    });
                    self.open += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // EMFILE and the like: try again on the next readiness event.
                Err(_) => return,
            }
        }
    }

    /// Reads what the socket has (up to 1 MiB buffered), handles requests, writes responses.
    /// Also called after a response, to pick up pipelined or unread input.
    fn on_conn_event(&mut self, i: usize) {
        let Some(Some(conn)) = self.conns.get_mut(i) else {
            return;
        };
        let mut scratch = [0u8; 16 * 1024];
        let mut eof = false;
        while conn.input.len() < 1 << 20 {
            match conn.stream.read(&mut scratch) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => conn.input.extend_from_slice(&scratch[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    eof = true;
                    break;
                }
            }
        }
        self.process(i);
        if eof {
            match self.conns[i].as_mut() {
                // Half-closed while in service: answer, then close.
                Some(c) if c.busy => c.keep_alive = false,
                Some(c) => c.closing = true,
                None => return,
            }
        }
        self.flush(i);
    }

    /// Parses and handles requests while the connection is not busy.
    fn process(&mut self, i: usize) {
        let now = Instant::now();
        loop {
            let Some(conn) = self.conns[i].as_mut() else {
                return;
            };
            if conn.busy || conn.closing {
                return;
            }
            match conn.reader.poll(&mut conn.input) {
                ReadEvent::HeadReady {
                    expect_continue: true,
                } => {
                    write_continue(&mut conn.output);
                    return;
                }
                ReadEvent::Incomplete | ReadEvent::HeadReady { .. } => return,
                ReadEvent::Error(e) => {
                    write_error(&mut conn.output, &e, false);
                    conn.closing = true;
                    return;
                }
                ReadEvent::Request(req) => {
                    conn.keep_alive = req.head.keep_alive;
                    conn.head_only = req.head.method == Method::Head;
                    if req.head.method == Method::Get && req.head.path() == "/stats" {
                        let body = serde_json::to_vec(&self.stats).unwrap_or_default();
                        let conn = self.conns[i].as_mut().expect("checked above");
                        let headers = [("content-type", "application/json")];
                        let (ka, ho) = (conn.keep_alive, conn.head_only);
                        write_response(&mut conn.output, 200, &headers, &body, ka, ho);
                        conn.closing = !ka;
                        continue;
                    }
                    let ticket = Ticket {
                        conn: i,
                        gen: conn.gen,
                    };
                    conn.busy = true;
                    let sec = self.second(now);
                    self.stats.total += 1;
                    self.stats.second(sec).requests += 1;
                    self.admit(ticket, now);
                }
            }
        }
    }

    /// True if one more request may start service now (and counts it in the window).
    fn take_capacity(&mut self, now: Instant) -> bool {
        let sec = self.second(now);
        if self.window.0 != sec {
            self.window = (sec, 0);
        }
        if self.in_service >= self.model.max_concurrency || self.window.1 >= self.model.max_rps {
            return false;
        }
        self.window.1 += 1;
        true
    }

    fn admit(&mut self, ticket: Ticket, now: Instant) {
        if self.queue.is_empty() && self.take_capacity(now) {
            self.begin_service(ticket, now);
            return;
        }
        match self.model.over {
            OverCapacity::Queue if self.queue.len() < self.model.queue_limit => {
                self.queue.push_back(ticket);
            }
            OverCapacity::TooMany => self.respond(ticket, 429, now),
            _ => self.respond(ticket, 503, now),
        }
    }

    fn begin_service(&mut self, ticket: Ticket, now: Instant) {
        self.in_service += 1;
        let peak = self.in_service;
        self.stats.max_concurrency_seen = self.stats.max_concurrency_seen.max(peak);
        let s = self.stats.second(self.second(now));
        s.max_concurrency = s.max_concurrency.max(peak);
        let service = self.model.service.sample(self.rng.next_f64());
        self.timers.push(Reverse((now + service, ticket)));
    }

    fn fire_timers(&mut self, now: Instant) {
        while let Some(Reverse((at, ticket))) = self.timers.peek().copied() {
            if at > now {
                return;
            }
            self.timers.pop();
            self.in_service -= 1;
            let fail = self.model.fail_rate > 0.0 && self.rng.next_f64() < self.model.fail_rate;
            let status = if fail { self.model.fail_status } else { 200 };
            self.respond(ticket, status, now);
            if self.is_live(ticket) {
                self.on_conn_event(ticket.conn);
            }
            self.start_queued(now);
        }
    }

    fn start_queued(&mut self, now: Instant) {
        while let Some(&ticket) = self.queue.front() {
            if !self.is_live(ticket) {
                self.queue.pop_front();
                continue;
            }
            if !self.take_capacity(now) {
                return;
            }
            self.queue.pop_front();
            self.begin_service(ticket, now);
        }
    }

    fn is_live(&self, t: Ticket) -> bool {
        matches!(self.conns.get(t.conn), Some(Some(c)) if c.gen == t.gen)
    }

    /// Writes the response for `ticket` (if its connection is still there) and counts it.
    fn respond(&mut self, ticket: Ticket, status: u16, now: Instant) {
        let sec = self.second(now);
        *self.stats.per_status.entry(status).or_default() += 1;
        *self.stats.second(sec).status.entry(status).or_default() += 1;
        if !self.is_live(ticket) {
            return;
        }
        let retry_after = self.model.retry_after.clone();
        let conn = self.conns[ticket.conn].as_mut().expect("live");
        let mut headers = vec![("content-type", "application/json")];
        if status == 429 || status == 503 {
            headers.push(("retry-after", retry_after.as_str()));
        }
        let body: &[u8] = match status {
            200 => br#"{"ok":true}"#,
            429 | 503 => br#"{"error":"over capacity"}"#,
            _ => br#"{"error":"injected failure"}"#,
        };
        let body = if status < 200 || status == 204 {
            &b""[..]
        } else {
            body
        };
        let (ka, ho) = (conn.keep_alive, conn.head_only);
        write_response(&mut conn.output, status, &headers, body, ka, ho);
        conn.busy = false;
        conn.closing = !ka;
    }

    fn flush(&mut self, i: usize) {
        let Some(conn) = self.conns[i].as_mut() else {
            return;
        };
        let mut written = 0;
        while written < conn.output.len() {
            match conn.stream.write(&conn.output[written..]) {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.close(i);
                    return;
                }
            }
        }
        conn.output.drain(..written);
        if conn.output.is_empty() && conn.closing {
            self.close(i);
        }
    }

    fn close(&mut self, i: usize) {
        if let Some(mut conn) = self.conns[i].take() {
            let _ = self.poll.registry().deregister(&mut conn.stream);
            self.free.push(i);
            self.open -= 1;
        }
    }
}

/// The summary printed at exit and served at `/stats`.
pub fn stats_json(stats: &Stats) -> String {
    serde_json::to_string(stats).unwrap_or_else(|_| "{}".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_is_bounded_and_contiguous() {
        let mut s = Stats::default();
        s.second(0).requests = 1;
        s.second(3).requests = 2;
        assert_eq!(
            s.per_second.iter().map(|x| x.second).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        s.second(10_000).requests = 3;
        assert_eq!(s.per_second.len(), HISTORY);
        assert_eq!(s.per_second.front().unwrap().second, 10_000 - 3599);
        assert_eq!(s.second(10_000).requests, 3);
    }
}
