//! One generator thread: its share of the arrivals and of the connections, on one `mio` poll.
//!
//! Arrival `k` of the run is due at `start + schedule.arrival_time(k)`; thread `i` of `T` owns
//! the arrivals with `k % T == i`, so the threads together follow the schedule exactly and none
//! of them waits for a response before issuing the next arrival (open loop). A due arrival goes
//! to the FIFO of pending requests and is written on the first idle keep-alive connection; its
//! latency is measured from its due time, so time spent waiting for a connection counts
//! (no coordinated omission). `--timeout` runs from the due time too: a request still queued
//! or unanswered by then is a timeout (an unanswered one also costs its connection, which is
//! reopened). A connection that cannot be opened (refused, unreachable) is an I/O failure: while
//! no connection of the thread is up, every queued request fails at the next failed attempt and
//! counts as an `error`, not as a timeout (a closed port is not a slow server).
//!
//! Bounds: connections fixed; in flight ≤ connections; pending and scheduled retries ≤
//! `queue_cap` each (past it: `dropped_client`); response buffer ≤ 1 MiB per connection.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use serde::Serialize;

use super::response::{self, Outcome, MAX_RESPONSE_BYTES};
use super::timeline::{Aggregator, Counts, Slot};
use crate::tools::histogram::Histogram;
use crate::tools::spec::{Rng, Schedule, Targets};

/// How often the connection table is scanned for in-flight deadlines and due reconnects.
const SWEEP: Duration = Duration::from_millis(5);
/// Wait before reopening a connection that failed to connect.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(100);

/// What to do with a 429/503.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnRefusal {
    /// Count it and move on.
    Drop,
    /// Re-send after Retry-After (default 1 s) × uniform jitter [1, 1.5).
    Honor,
    /// Re-send at once.
    Immediate,
}

/// Everything the threads share, read-only.
#[derive(Debug)]
pub struct Plan {
    pub addr: SocketAddr,
    /// One encoded request per target.
    pub requests: Vec<Vec<u8>>,
    pub targets: Targets,
    pub schedule: Schedule,
    /// Arrivals of the whole run (original requests, not retries).
    pub max_arrivals: u64,
    /// No arrival or retry is due at or after this offset from the start.
    pub end: Duration,
    pub timeout: Duration,
    pub on_refusal: OnRefusal,
    pub max_retries: u32,
    pub queue_cap: usize,
    pub threads: usize,
    pub seed: u64,
    pub start: Instant,
}

/// What one thread reports at the end.
#[derive(Debug, Default)]
pub struct Totals {
    pub counts: Counts,
    pub accepted: Histogram,
    pub refused: Histogram,
    /// Shortest and longest wait between a refusal and its re-send.
    pub retry_delay: Option<(Duration, Duration)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Arrival {
    due: Instant,
    target: usize,
    attempt: u32,
    /// When the refusal that caused this retry arrived.
    refused_at: Option<Instant>,
}

#[derive(Debug)]
enum State {
    Connecting,
    Idle,
    Busy {
        req: Arrival,
        written: usize,
    },
    /// Waiting to reconnect.
    Down {
        until: Instant,
    },
}

#[derive(Debug)]
struct Conn {
    stream: Option<TcpStream>,
    state: State,
    input: Vec<u8>,
}

struct Worker<'a> {
    id: usize,
    plan: &'a Plan,
    agg: &'a Aggregator,
    poll: Poll,
    conns: Vec<Conn>,
    idle: VecDeque<usize>,
    pending: VecDeque<Arrival>,
    retries: BinaryHeap<Reverse<Arrival>>,
    busy: usize,
    /// Connections `Idle` or `Busy` (connected).
    up: usize,
    next_k: u64,
    next_due: Option<Instant>,
    /// Next scan of the connection table (deadlines, reconnects): every `SWEEP`.
    next_sweep: Instant,
    rng: Rng,
    slot: Slot,
    slot_sec: u64,
    totals: Totals,
}

/// Runs thread `id` with `connections` connections until its arrivals are done and settled,
/// `stop` is set, or the hard deadline (end + timeout + 1 s) passes.
pub fn run(
    id: usize,
    connections: usize,
    plan: &Plan,
    agg: &Aggregator,
    stop: &Arc<AtomicBool>,
) -> io::Result<Totals> {
    let mut w = Worker {
        id,
        plan,
        agg,
        poll: Poll::new()?,
        conns: Vec::with_capacity(connections),
        idle: VecDeque::with_capacity(connections),
        pending: VecDeque::new(),
        retries: BinaryHeap::new(),
        busy: 0,
        up: 0,
        next_k: id as u64,
        next_due: None,
        next_sweep: Instant::now(),
        rng: Rng::new(plan.seed ^ (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        slot: Slot::default(),
        slot_sec: 0,
        totals: Totals::default(),
    };
    w.next_due = w.due_of(w.next_k);
    for i in 0..connections {
        w.conns.push(Conn {
            stream: None,
            state: State::Down {
                until: Instant::now(),
            },
            input: Vec::new(),
        });
        w.connect(i);
    }
    w.event_loop(stop)?;
    w.flush_slot(u64::MAX);
    Ok(w.totals)
}

impl Worker<'_> {
    fn due_of(&self, k: u64) -> Option<Instant> {
        if k >= self.plan.max_arrivals {
            return None;
        }
        let at = self.plan.schedule.arrival_time(k)?;
        (at < self.plan.end).then(|| self.plan.start + at)
    }

    fn finished(&self) -> bool {
        self.next_due.is_none()
            && self.retries.is_empty()
            && self.pending.is_empty()
            && self.busy == 0
    }

    fn event_loop(&mut self, stop: &AtomicBool) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let hard_end = self.plan.start + self.plan.end + self.plan.timeout + Duration::from_secs(1);
        loop {
            let now = Instant::now();
            self.roll_second(now);
            if self.finished() || stop.load(Ordering::Relaxed) || now >= hard_end {
                return Ok(());
            }
            self.issue_due(now);
            self.expire_pending(now);
            if now >= self.next_sweep {
                self.sweep(now);
                self.next_sweep = now + SWEEP;
            }
            self.dispatch(now);
            let wait = self.next_wake(now);
            match self.poll.poll(&mut events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            for event in events.iter() {
                let i = event.token().0;
                if event.is_writable() {
                    self.on_writable(i, now);
                }
                if event.is_readable() || event.is_read_closed() || event.is_error() {
                    self.on_readable(i, now);
                }
            }
            self.dispatch(now);
        }
    }

    fn next_wake(&self, now: Instant) -> Duration {
        let mut at = now + Duration::from_millis(50);
        if let Some(d) = self.next_due {
            at = at.min(d);
        }
        if let Some(Reverse(r)) = self.retries.peek() {
            at = at.min(r.due);
        }
        // Deadlines and reconnects are checked every `SWEEP`.
        at = at.min(self.next_sweep.max(now));
        let next_sec = self.plan.start + Duration::from_secs(self.slot_sec + 1);
        at = at.min(next_sec.max(now));
        at.saturating_duration_since(now)
    }

    /// Hands the finished second to the aggregator when the clock enters a new one.
    fn roll_second(&mut self, now: Instant) {
        let sec = now.saturating_duration_since(self.plan.start).as_secs();
        if sec != self.slot_sec {
            self.flush_slot(sec);
            self.slot_sec = sec;
        }
    }

    fn flush_slot(&mut self, watermark: u64) {
        self.agg
            .submit(self.id, self.slot_sec, &self.slot, watermark);
        self.totals.counts.add(&self.slot.counts);
        self.totals.accepted.merge(&self.slot.accepted);
        self.totals.refused.merge(&self.slot.refused);
        self.slot.reset();
    }

    fn enqueue(&mut self, a: Arrival) {
        if self.pending.len() >= self.plan.queue_cap {
            self.slot.counts.dropped_client += 1;
        } else {
            self.pending.push_back(a);
        }
    }

    fn issue_due(&mut self, now: Instant) {
        while let Some(due) = self.next_due.filter(|d| *d <= now) {
            self.slot.counts.offered += 1;
            let target = self.plan.targets.pick(self.rng.next_u64());
            self.enqueue(Arrival {
                due,
                target,
                attempt: 0,
                refused_at: None,
            });
            self.next_k += self.plan.threads as u64;
            self.next_due = self.due_of(self.next_k);
        }
        while let Some(Reverse(r)) = self.retries.peek().copied() {
            if r.due > now {
                break;
            }
            self.retries.pop();
            self.slot.counts.retries += 1;
            self.enqueue(r);
        }
    }

    /// Timeouts of queued requests (the oldest are at the front).
    fn expire_pending(&mut self, now: Instant) {
        let timeout = self.plan.timeout;
        while self.pending.front().is_some_and(|a| now >= a.due + timeout) {
            self.pending.pop_front();
            self.slot.counts.timeouts += 1;
        }
    }

    /// One pass over the connections: in-flight timeouts and due reconnects.
    fn sweep(&mut self, now: Instant) {
        let timeout = self.plan.timeout;
        for i in 0..self.conns.len() {
            match self.conns[i].state {
                State::Busy { req, .. } if now >= req.due + timeout => {
                    self.slot.counts.timeouts += 1;
                    self.drop_conn(i, now, false);
                    self.connect(i);
                }
                State::Down { until } if until <= now => self.connect(i),
                _ => {}
            }
        }
    }

    fn connect(&mut self, i: usize) {
        let conn = &mut self.conns[i];
        conn.input.clear();
        if let Ok(mut s) = TcpStream::connect(self.plan.addr) {
            let interest = Interest::READABLE | Interest::WRITABLE;
            if self
                .poll
                .registry()
                .register(&mut s, Token(i), interest)
                .is_ok()
            {
                let _ = s.set_nodelay(true);
                conn.stream = Some(s);
                conn.state = State::Connecting;
                return;
            }
        }
        conn.state = State::Down {
            until: Instant::now() + RECONNECT_BACKOFF,
        };
        self.connect_failed();
    }

    /// A connection could not be opened. With none up, the queued requests cannot be sent:
    /// each fails now as an I/O error (module header).
    fn connect_failed(&mut self) {
        if self.up == 0 {
            self.slot.counts.errors += self.pending.len() as u64;
            self.pending.clear();
        }
    }

    /// Closes connection `i` (reopened by the next sweep); a request on it counts as an error
    /// unless already counted.
    fn drop_conn(&mut self, i: usize, now: Instant, count_error: bool) {
        let conn = &mut self.conns[i];
        if let Some(mut s) = conn.stream.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        match conn.state {
            State::Busy { .. } => {
                self.busy -= 1;
                self.up -= 1;
                if count_error {
                    self.slot.counts.errors += 1;
                }
            }
            State::Idle => self.up -= 1,
            State::Connecting | State::Down { .. } => {}
        }
        conn.state = State::Down { until: now };
    }

    fn dispatch(&mut self, now: Instant) {
        while !self.pending.is_empty() {
            let Some(i) = self.idle.pop_front() else {
                return;
            };
            if !matches!(self.conns[i].state, State::Idle) {
                continue;
            }
            let req = self.pending.pop_front().expect("not empty");
            if let Some(refused_at) = req.refused_at {
                let d = now.saturating_duration_since(refused_at);
                let (lo, hi) = self.totals.retry_delay.unwrap_or((d, d));
                self.totals.retry_delay = Some((lo.min(d), hi.max(d)));
            }
            self.slot.counts.sent += 1;
            self.busy += 1;
            self.conns[i].state = State::Busy { req, written: 0 };
            self.write_some(i, now);
        }
    }

    fn write_some(&mut self, i: usize, now: Instant) {
        let conn = &mut self.conns[i];
        let (State::Busy { req, written }, Some(stream)) = (&mut conn.state, &mut conn.stream)
        else {
            return;
        };
        let bytes = &self.plan.requests[req.target];
        while *written < bytes.len() {
            match stream.write(&bytes[*written..]) {
                Ok(n) if n > 0 => *written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                _ => {
                    self.drop_conn(i, now, true);
                    return;
                }
            }
        }
    }

    fn on_writable(&mut self, i: usize, now: Instant) {
        let Some(conn) = self.conns.get_mut(i) else {
            return;
        };
        match conn.state {
            State::Connecting => {
                let ok = conn
                    .stream
                    .as_ref()
                    .is_some_and(|s| matches!(s.take_error(), Ok(None)) && s.peer_addr().is_ok());
                if ok {
                    conn.state = State::Idle;
                    self.up += 1;
                    self.idle.push_back(i);
                } else {
                    self.drop_conn(i, now, false);
                    self.conns[i].state = State::Down {
                        until: now + RECONNECT_BACKOFF,
                    };
                    self.connect_failed();
                }
            }
            State::Busy { .. } => self.write_some(i, now),
            _ => {}
        }
    }

    fn on_readable(&mut self, i: usize, now: Instant) {
        let Some(conn) = self.conns.get_mut(i) else {
            return;
        };
        let Some(stream) = conn.stream.as_mut() else {
            return;
        };
        let mut scratch = [0u8; 16 * 1024];
        let mut closed = false;
        loop {
            match stream.read(&mut scratch) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => conn.input.extend_from_slice(&scratch[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    closed = true;
                    break;
                }
            }
            if conn.input.len() > MAX_RESPONSE_BYTES {
                break;
            }
        }
        let State::Busy { req, .. } = conn.state else {
            // Bytes or a close on a connection with nothing outstanding: start afresh; a close
            // before the connection was up is a failed connect.
            let connecting = matches!(conn.state, State::Connecting);
            if closed || !conn.input.is_empty() {
                self.drop_conn(i, now, false);
                if connecting {
                    self.conns[i].state = State::Down {
                        until: now + RECONNECT_BACKOFF,
                    };
                    self.connect_failed();
                }
            }
            return;
        };
        match response::parse(&conn.input) {
            Outcome::Done(p) => {
                conn.input.drain(..p.consumed);
                conn.state = State::Idle;
                self.busy -= 1;
                self.complete(req, p.status, p.retry_after, now);
                if p.close || closed || !self.conns[i].input.is_empty() {
                    self.drop_conn(i, now, false);
                } else {
                    self.idle.push_back(i);
                }
            }
            Outcome::Incomplete if !closed => {}
            _ => self.drop_conn(i, now, true),
        }
    }

    /// Counts a response and schedules a retry for a refusal when the policy asks for one.
    fn complete(&mut self, req: Arrival, status: u16, retry_after: Option<u64>, now: Instant) {
        let latency = now.saturating_duration_since(req.due).as_micros() as u64;
        let c = &mut self.slot.counts;
        match status {
            200..=299 => {
                c.ok += 1;
                self.slot.accepted.record(latency);
            }
            429 | 503 => {
                if status == 429 {
                    c.too_many += 1;
                } else {
                    c.unavailable += 1;
                }
                self.slot.refused.record(latency);
                self.schedule_retry(req, retry_after, now);
            }
            _ => c.other += 1,
        }
    }

    fn schedule_retry(&mut self, req: Arrival, retry_after: Option<u64>, now: Instant) {
        let delay = match self.plan.on_refusal {
            OnRefusal::Drop => return,
            OnRefusal::Immediate => Duration::ZERO,
            OnRefusal::Honor => {
                let secs = retry_after.unwrap_or(1).min(3600) as f64;
                Duration::from_secs_f64(secs * (1.0 + 0.5 * self.rng.next_f64()))
            }
        };
        let due = now + delay;
        if req.attempt >= self.plan.max_retries || due >= self.plan.start + self.plan.end {
            return;
        }
        if self.retries.len() >= self.plan.queue_cap {
            self.slot.counts.dropped_client += 1;
            return;
        }
        self.retries.push(Reverse(Arrival {
            due,
            target: req.target,
            attempt: req.attempt + 1,
            refused_at: Some(now),
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    const REQUEST: &[u8] = b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n";
    const ACCEPTED: &[u8] = b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n";
    const REFUSED: &[u8] =
        b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 0\r\nContent-Length: 0\r\n\r\n";

    /// `arrivals` requests at 200/s to `addr`, one thread, one connection.
    fn plan(addr: SocketAddr, arrivals: u64, timeout: Duration, on_refusal: OnRefusal) -> Plan {
        Plan {
            addr,
            requests: vec![REQUEST.to_vec()],
            targets: Targets::parse("/x").unwrap(),
            schedule: Schedule::constant(200.0).unwrap(),
            max_arrivals: arrivals,
            end: Duration::from_secs(5),
            timeout,
            on_refusal,
            max_retries: 2,
            queue_cap: 16,
            threads: 1,
            seed: 7,
            start: Instant::now(),
        }
    }

    fn run_plan(plan: &Plan) -> Totals {
        let agg = Aggregator::new(1);
        let stop = Arc::new(AtomicBool::new(false));
        run(0, 1, plan, &agg, &stop).unwrap()
    }

    /// A loopback server answering each request on a connection with the next of `replies`
    /// (`None`: read it and never answer), one connection at a time, until `replies` are used
    /// up, the returned flag is set, or 10 s passed. Joining it yields the replies sent.
    fn server(replies: Vec<Option<&'static [u8]>>) -> (SocketAddr, Server) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let handle = thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut next = replies.into_iter();
            let mut served = 0;
            listener.set_nonblocking(true).unwrap();
            let mut held = Vec::new();
            let over = || Instant::now() >= deadline || flag.load(Ordering::Relaxed);
            while !over() {
                let Ok((mut s, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(2));
                    continue;
                };
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(300)))
                    .unwrap();
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                loop {
                    while let Some(end) = find(&buf, b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        if let Some(Some(reply)) = next.next() {
                            served += 1;
                            let _ = s.write_all(reply);
                        }
                    }
                    match s.read(&mut chunk) {
                        Ok(0) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            if over() || next.len() == 0 {
                                break;
                            }
                        }
                        Err(_) => break,
                    }
                }
                held.push(s);
                if next.len() == 0 {
                    break;
                }
            }
            served
        });
        (addr, Server { done, handle })
    }

    struct Server {
        done: Arc<AtomicBool>,
        handle: thread::JoinHandle<usize>,
    }

    impl Server {
        fn join(self) -> usize {
            self.done.store(true, Ordering::Relaxed);
            self.handle.join().unwrap()
        }
    }

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }

    #[test]
    fn accepted_and_refused_responses_are_counted_and_a_refusal_is_resent() {
        let replies = vec![
            Some(ACCEPTED),
            Some(REFUSED),
            Some(ACCEPTED),
            Some(ACCEPTED),
        ];
        let (addr, server) = server(replies);
        let plan = plan(addr, 3, Duration::from_secs(5), OnRefusal::Immediate);
        let t = run_plan(&plan);
        assert_eq!(server.join(), 4);
        let c = &t.counts;
        assert_eq!((c.offered, c.sent, c.retries), (3, 4, 1), "{c:?}");
        assert_eq!(
            (c.ok, c.unavailable, c.too_many, c.other),
            (3, 1, 0, 0),
            "{c:?}"
        );
        assert_eq!((c.errors, c.timeouts, c.dropped_client), (0, 0, 0), "{c:?}");
        assert!(t.retry_delay.is_some(), "the re-send's wait is measured");
    }

    #[test]
    fn a_refusal_is_not_resent_when_the_policy_drops_it() {
        let (addr, server) = server(vec![Some(REFUSED), Some(ACCEPTED)]);
        let t = run_plan(&plan(addr, 2, Duration::from_secs(5), OnRefusal::Drop));
        assert_eq!(server.join(), 2);
        let c = &t.counts;
        assert_eq!(
            (c.sent, c.retries, c.ok, c.unavailable),
            (2, 0, 1, 1),
            "{c:?}"
        );
        assert_eq!(t.retry_delay, None);
    }

    #[test]
    fn a_malformed_response_is_an_error_and_costs_the_connection() {
        let (addr, server) = server(vec![Some(b"garbage\r\n\r\n"), Some(ACCEPTED)]);
        let t = run_plan(&plan(addr, 2, Duration::from_secs(5), OnRefusal::Drop));
        server.join();
        let c = &t.counts;
        assert_eq!((c.errors, c.ok, c.other, c.timeouts), (1, 1, 0, 0), "{c:?}");
    }

    #[test]
    fn a_server_that_never_answers_yields_timeouts_not_errors() {
        let (addr, server) = server(vec![None, None, None]);
        let t = run_plan(&plan(addr, 2, Duration::from_millis(200), OnRefusal::Drop));
        server.join();
        let c = &t.counts;
        assert_eq!((c.timeouts, c.errors, c.ok), (2, 0, 0), "{c:?}");
    }

    #[test]
    fn a_closed_port_fails_every_request_as_an_error_not_a_timeout() {
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap(); // the listener is dropped: nothing listens on `addr`
        let t = run_plan(&plan(addr, 3, Duration::from_secs(5), OnRefusal::Immediate));
        let c = &t.counts;
        assert_eq!(
            (c.offered, c.errors, c.timeouts, c.sent),
            (3, 3, 0, 0),
            "{c:?}"
        );
    }
}
