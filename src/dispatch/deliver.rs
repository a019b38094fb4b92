//! Delivery on a destination's owner core: per-destination queues, gates, outbound connections,
//! retry timers. Everything here is single-threaded (one [`Dispatcher`] per worker, driven from
//! that worker's mio loop), so the permit set, circuit, rate budget and pause of a destination
//! need no atomics and no locks.
//!
//! Flow: the pump hands a [`Job`] to its destination's owner core → [`Dispatcher::accept`]
//! passes it through its trigger's flow-control gates ([`crate::dispatch::flow`], core-local
//! like everything here: they may skip it, hold it, or merge it into a batch) → queues it (or
//! parks it until its recovered retry time) → [`Dispatcher::pump_dest`] asks the
//! destination's gate: fail fast (circuit open → DLQ `circuit_open`), wait (paused by a
//! downstream `Retry-After`, rate budget, or no free permit), or go with a permit → an idle
//! keep-alive connection (or a new one, never more than `max_in_flight` per destination, as each
//! busy connection holds a permit) carries `POST` with the raw body → the response is classified:
//! 2xx delivered; connect errors, timeouts, 408, 425, 429, 5xx retryable (backoff with full
//! jitter, the schedule reported to the pump to be made durable); other 4xx permanent (DLQ).
//!
//! A terminal outcome (delivered, dead-lettered) releases the event's singleton/concurrency
//! holds; a batch carrier reports its outcome once per member.
//!
//! Bounds: jobs held ≤ the pump's `max_outstanding` (the pump admits no more); connections per
//! destination ≤ `max_in_flight` busy + idle ones capped at the same number; response bytes kept
//! per attempt ≤ `ClientLimits::max_body_keep`; outcomes the pump has not taken yet ≤ one per
//! held job per attempt (the overflow queue, normally empty).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::sync::Unparker;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use crate::config::{Config, DestinationConfig};
use crate::dispatch::circuit::Transition;
use crate::dispatch::classify::{classify, AttemptResult, Class};
use crate::dispatch::destination::{DestinationEvent, DestinationState, Gate};
use crate::dispatch::dlq::DlqReason;
use crate::dispatch::flow::{FlowEngine, FlowOut};
use crate::dispatch::job::{Job, JobOutcome};
use crate::dispatch::permits::Permit;
use crate::dispatch::retry::RetryPolicy;
use crate::dispatch::rng::SmallRng;
use crate::metrics::dispatch::CoreDispatchMetrics;
use crate::net::http::client::{
    self, ClientLimits, OutboundRequest, ResponseEvent, ResponseReader,
};
use crate::ring;
use crate::sync::clock::unix_millis;

/// Tokens at and above this value belong to outbound connections.
pub const CLIENT_TOKEN_BASE: usize = 1 << 40;

const READ_CHUNK: usize = 16 * 1024;

#[derive(Debug)]
enum ConnState {
    /// Placeholder while a broken connection is being torn down.
    Broken,
    Idle {
        since: u64,
    },
    Busy(Box<Attempt>),
}

#[derive(Debug)]
struct Attempt {
    job: Job,
    permit: Permit,
    deadline: u64,
    started: u64,
    /// The connection had served a request before this one (a stale keep-alive connection
    /// closing under us is retried once at no cost).
    reused: bool,
    got_bytes: bool,
}

#[derive(Debug)]
struct ClientConn {
    dest: usize,
    stream: TcpStream,
    state: ConnState,
    wbuf: Vec<u8>,
    wpos: usize,
    rbuf: Vec<u8>,
    reader: ResponseReader,
    served: u64,
}

#[derive(Debug)]
struct Dest {
    state: DestinationState,
    policy: RetryPolicy,
    queue: VecDeque<Job>,
    idle: Vec<usize>,
    conns: usize,
    addr: Option<SocketAddr>,
    /// A wake-up timer is already set for this time (avoid piling up duplicates).
    wake_at: u64,
}

/// A job waiting for its retry time (min-heap on `due`).
#[derive(Debug)]
struct Delayed {
    due: u64,
    seq: u64,
    job: Job,
}
impl PartialEq for Delayed {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Delayed {}
impl PartialOrd for Delayed {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Delayed {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

/// One core's delivery engine.
#[derive(Debug)]
pub struct Dispatcher {
    config: Arc<Config>,
    dests: HashMap<usize, Dest>,
    conns: Vec<Option<ClientConn>>,
    free: Vec<usize>,
    delayed: BinaryHeap<Reverse<Delayed>>,
    wakes: BinaryHeap<Reverse<(u64, usize)>>,
    seq: u64,
    outcomes: ring::Sender<JobOutcome>,
    overflow: VecDeque<JobOutcome>,
    pump: Unparker,
    rng: SmallRng,
    metrics: CoreDispatchMetrics,
    scratch: Box<[u8]>,
    /// Events held (a batch carrier counts its members).
    held: usize,
    flow: FlowEngine,
}

impl Dispatcher {
    pub fn new(
        core: usize,
        config: Arc<Config>,
        outcomes: ring::Sender<JobOutcome>,
        pump: Unparker,
        metrics: CoreDispatchMetrics,
    ) -> Dispatcher {
        Dispatcher {
            flow: FlowEngine::new(config.clone(), metrics.shared.clone()),
            config,
            dests: HashMap::new(),
            conns: Vec::new(),
            free: Vec::new(),
            delayed: BinaryHeap::new(),
            wakes: BinaryHeap::new(),
            seq: 0,
            outcomes,
            overflow: VecDeque::new(),
            pump,
            rng: SmallRng::seed_from_u64(
                0x5eed ^ (core as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ unix_millis(),
            ),
            metrics,
            scratch: vec![0u8; READ_CHUNK].into_boxed_slice(),
            held: 0,
        }
    }

    /// Jobs this core holds (queued, waiting for a retry, or in flight).
    pub fn held(&self) -> usize {
        self.held
    }

    /// Attempts on the wire.
    pub fn in_flight(&self) -> usize {
        self.conns
            .iter()
            .flatten()
            .filter(|c| matches!(c.state, ConnState::Busy(_)))
            .count()
    }

    fn dest(&mut self, d: usize) -> &mut Dest {
        let config = &self.config;
        self.dests.entry(d).or_insert_with(|| {
            let c: &DestinationConfig = &config.destinations[d];
            Dest {
                // Parameters were validated with the config, so this cannot fail; a failure
                // would be a bug, and unlimited permits are not an acceptable fallback.
                state: DestinationState::from_config(c).expect("validated destination config"),
                policy: RetryPolicy::from(&c.retry),
                queue: VecDeque::new(),
                idle: Vec::new(),
                conns: 0,
                addr: None,
                wake_at: 0,
            }
        })
    }

    /// Takes a job from the pump. While draining, jobs are only held (they stay pending in the
    /// WAL and are evaluated by the gates and delivered after the restart).
    pub fn accept(&mut self, job: Job, now: u64, registry: &Registry, draining: bool) {
        self.held += 1;
        if draining || !self.flow.gates(&job.event.trigger_id) {
            if let Some(d) = self.enqueue(job, now) {
                if !draining {
                    self.pump_dest(d, now, registry);
                }
            }
            return;
        }
        let mut out = FlowOut::default();
        self.flow.offer(job, now, &mut out);
        for d in self.apply_flow(out, now) {
            self.pump_dest(d, now, registry);
        }
    }

    /// Queues a job that passed the gates, or parks it until its recovered retry time. Returns
    /// its destination when it was queued.
    fn enqueue(&mut self, job: Job, now: u64) -> Option<usize> {
        let wait_ms = job.due_at_ms.saturating_sub(unix_millis());
        if wait_ms > 0 {
            let due = now + wait_ms * 1_000_000;
            self.delay(job, due);
            return None;
        }
        let d = job.dest;
        self.dest(d).queue.push_back(job);
        Some(d)
    }

    /// Carries out the gates' decisions: skipped events get their (terminal) outcome, ready
    /// jobs are queued. Returns the destinations to pump (deduplicated).
    fn apply_flow(&mut self, out: FlowOut, now: u64) -> Vec<usize> {
        for (job, reason) in out.skipped {
            self.held -= 1;
            self.send(JobOutcome::Skipped {
                lsn: job.lsn,
                reason,
                attempts: job.attempt.saturating_sub(1),
            });
        }
        let mut touched: Vec<usize> = out
            .ready
            .into_iter()
            .filter_map(|job| self.enqueue(job, now))
            .collect();
        touched.sort_unstable();
        touched.dedup();
        touched
    }

    /// The event at `lsn` is done: release its gate holds; admitted waiters are queued (the
    /// caller pumps their destination, which is the released event's).
    fn release_flow(&mut self, lsn: u64, now: u64) {
        let mut out = FlowOut::default();
        self.flow.release(lsn, &mut out);
        if !out.ready.is_empty() || !out.skipped.is_empty() {
            self.apply_flow(out, now);
        }
    }

    fn delay(&mut self, job: Job, due: u64) {
        self.seq += 1;
        self.delayed.push(Reverse(Delayed {
            due,
            seq: self.seq,
            job,
        }));
    }

    /// The earliest time something here needs attention (for the poll timeout).
    pub fn next_deadline(&self) -> Option<u64> {
        let mut t = self.delayed.peek().map(|Reverse(d)| d.due);
        if let Some(f) = self.flow.next_deadline() {
            t = Some(t.map_or(f, |x| x.min(f)));
        }
        if let Some(Reverse((w, _))) = self.wakes.peek() {
            t = Some(t.map_or(*w, |x| x.min(*w)));
        }
        for c in self.conns.iter().flatten() {
            if let ConnState::Busy(a) = &c.state {
                t = Some(t.map_or(a.deadline, |x| x.min(a.deadline)));
            }
        }
        t
    }

    /// Timers: due retries, destination wake-ups, attempt timeouts, idle connections.
    pub fn on_tick(&mut self, now: u64, registry: &Registry, draining: bool) {
        let mut touched: Vec<usize> = Vec::new();
        while self.delayed.peek().is_some_and(|Reverse(d)| d.due <= now) {
            let Some(Reverse(d)) = self.delayed.pop() else {
                break;
            };
            let dest = d.job.dest;
            self.dest(dest).queue.push_back(d.job);
            touched.push(dest);
        }
        while self.wakes.peek().is_some_and(|Reverse((t, _))| *t <= now) {
            let Some(Reverse((_, dest))) = self.wakes.pop() else {
                break;
            };
            self.dest(dest).wake_at = 0;
            touched.push(dest);
        }
        for id in 0..self.conns.len() {
            let expired = match self.conns[id].as_ref().map(|c| &c.state) {
                Some(ConnState::Busy(a)) => a.deadline <= now,
                Some(ConnState::Idle { since }) => {
                    now.saturating_sub(*since) > self.config.server.idle_timeout.as_nanos() as u64
                }
                _ => false,
            };
            if expired {
                let dest = self.conns[id].as_ref().map(|c| c.dest);
                self.fail_conn(id, AttemptResult::Timeout, now, registry);
                if let Some(d) = dest {
                    touched.push(d);
                }
            }
        }
        if !draining {
            let mut out = FlowOut::default();
            self.flow.on_tick(now, &mut out);
            touched.extend(self.apply_flow(out, now));
            touched.sort_unstable();
            touched.dedup();
            for d in touched {
                self.pump_dest(d, now, registry);
            }
        }
        self.flush_outcomes();
    }

    /// Starts as many queued jobs of destination `d` as its gate allows.
    pub fn pump_dest(&mut self, d: usize, now: u64, registry: &Registry) {
        loop {
            let dest = self.dest(d);
            if dest.queue.is_empty() {
                return;
            }
            match dest.state.gate(now) {
                Gate::FailFast { retry_after } => {
                    let Some(job) = dest.queue.pop_front() else {
                        return;
                    };
                    self.metrics.circuit_fail_fast();
                    let last_error = format!(
                        "destination circuit open for http:{}; retry after {}s",
                        self.config.destinations[d].handler.uri,
                        retry_after.as_secs().max(1)
                    );
                    let attempts = job.attempt - 1;
                    self.dead_letter(job, DlqReason::CircuitOpen, attempts, last_error, now);
                }
                Gate::Wait { until } => {
                    if until > 0 && (dest.wake_at == 0 || until < dest.wake_at) {
                        dest.wake_at = until;
                        self.wakes.push(Reverse((until, d)));
                    }
                    return;
                }
                Gate::Go { permit, probe } => {
                    let Some(job) = dest.queue.pop_front() else {
                        return;
                    };
                    if probe {
                        self.metrics.circuit_half_open_probe();
                    }
                    self.start(d, job, permit, now, registry);
                }
            }
        }
    }

    fn start(&mut self, d: usize, job: Job, permit: Permit, now: u64, registry: &Registry) {
        let cfg = &self.config.destinations[d];
        let timeout = cfg.timeout.as_nanos() as u64;
        // Encode the request.
        let mut wbuf = Vec::with_capacity(256 + job.event.body.len());
        let attempt = job.attempt.to_string();
        // The send time, not the receipt time: receivers check it against a window (Standard
        // Webhooks: 5 minutes), which a retried or replayed event would otherwise fail.
        let ts_secs = unix_millis() / 1000;
        let ts = ts_secs.to_string();
        let signature = cfg.signing_key.as_ref().map(|k| {
            crate::sign::standard_webhooks::sign(
                k.expose(),
                &job.event.event_id,
                ts_secs,
                &job.event.body,
            )
        });
        let content_type = job
            .event
            .headers
            .iter()
            .find(|(n, _)| n == "content-type")
            .map(|(_, v)| v.as_slice())
            .unwrap_or(b"application/octet-stream");
        let mut headers: Vec<(&str, &[u8])> = vec![
            ("content-type", content_type),
            ("webhook-id", job.event.event_id.as_bytes()),
            ("webhook-timestamp", ts.as_bytes()),
            ("x-sluice-attempt", attempt.as_bytes()),
            ("x-sluice-trigger", job.event.trigger_id.as_bytes()),
            ("user-agent", b"sluice"),
        ];
        if let Some(r) = &job.event.replay_of {
            headers.push(("x-sluice-replay-of", r.as_bytes()));
        }
        if let Some(sig) = &signature {
            headers.push(("webhook-signature", sig.as_bytes()));
        }
        for (n, v) in &cfg.headers {
            headers.push((n.as_str(), v.as_bytes()));
        }
        let req = OutboundRequest {
            method: "POST",
            authority: &cfg.handler.authority,
            path: &cfg.handler.path_and_query,
            headers: &headers,
            body: &job.event.body,
        };
        if let Err(e) = client::write_request(&mut wbuf, &req) {
            // Validated config and stored headers cannot produce this; fail the event visibly.
            let msg = format!("cannot encode request: {e}");
            let dest = self.dest(d);
            dest.state.release(permit);
            let attempts = job.attempt;
            self.dead_letter(job, DlqReason::PermanentFailure, attempts, msg, now);
            return;
        }
        let in_flight = self.dest(d).state.in_flight() as u64;
        self.metrics.set_in_flight(d, in_flight);
        let reuse = self.dest(d).idle.pop();
        let attempt = Box::new(Attempt {
            job,
            permit,
            deadline: now + timeout,
            started: now,
            reused: false,
            got_bytes: false,
        });
        match reuse {
            Some(id) => {
                let Some(c) = self.conns[id].as_mut() else {
                    return;
                };
                c.wbuf = wbuf;
                c.wpos = 0;
                let mut attempt = attempt;
                attempt.reused = c.served > 0;
                c.state = ConnState::Busy(attempt);
                self.write(id, now, registry);
            }
            None => self.connect(d, attempt, wbuf, now, registry),
        }
    }

    fn connect(
        &mut self,
        d: usize,
        attempt: Box<Attempt>,
        wbuf: Vec<u8>,
        now: u64,
        registry: &Registry,
    ) {
        let stream = match self.resolve(d).and_then(TcpStream::connect) {
            Ok(s) => s,
            Err(_) => return self.settle(d, *attempt, AttemptResult::ConnectError, now, registry),
        };
        let id = match self.free.pop() {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        let mut conn = ClientConn {
            dest: d,
            stream,
            state: ConnState::Broken,
            wbuf,
            wpos: 0,
            rbuf: Vec::new(),
            reader: ResponseReader::new(ClientLimits::default()),
            served: 0,
        };
        let token = Token(CLIENT_TOKEN_BASE + id);
        let interest = Interest::READABLE | Interest::WRITABLE;
        if registry
            .register(&mut conn.stream, token, interest)
            .is_err()
        {
            self.free.push(id);
            return self.settle(d, *attempt, AttemptResult::ConnectError, now, registry);
        }
        self.dest(d).conns += 1;
        conn.state = ConnState::Busy(attempt);
        self.conns[id] = Some(conn);
        self.metrics.connection_opened(d);
        // The write happens on the first writable event (connection established).
    }

    /// Resolves the destination's address once (a blocking lookup on first use only; an IP
    /// literal resolves without I/O).
    fn resolve(&mut self, d: usize) -> io::Result<SocketAddr> {
        if let Some(a) = self.dest(d).addr {
            return Ok(a);
        }
        let cfg = &self.config.destinations[d];
        let h = &cfg.handler;
        let addr = std::net::ToSocketAddrs::to_socket_addrs(&(h.host.as_str(), h.port))?
            .next()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{} did not resolve", h.host),
                )
            })?;
        self.dest(d).addr = Some(addr);
        Ok(addr)
    }

    /// Readiness of an outbound connection.
    pub fn on_ready(
        &mut self,
        token: Token,
        readable: bool,
        writable: bool,
        now: u64,
        registry: &Registry,
    ) {
        let id = token.0 - CLIENT_TOKEN_BASE;
        let Some(c) = self.conns.get_mut(id).and_then(Option::as_mut) else {
            return;
        };
        // A failed non-blocking connect (or a reset) shows up as a pending socket error.
        if let Ok(Some(_)) | Err(_) = c.stream.take_error() {
            let fresh = c.served == 0 && c.wpos == 0;
            let r = if fresh {
                AttemptResult::ConnectError
            } else {
                AttemptResult::Io
            };
            return self.fail_conn(id, r, now, registry);
        }
        if writable {
            self.write(id, now, registry);
        }
        if readable {
            self.read(id, now, registry);
        }
    }

    fn write(&mut self, id: usize, now: u64, registry: &Registry) {
        let Some(c) = self.conns.get_mut(id).and_then(Option::as_mut) else {
            return;
        };
        while c.wpos < c.wbuf.len() {
            match c.stream.write(&c.wbuf[c.wpos..]) {
                Ok(0) => return self.fail_conn(id, AttemptResult::Io, now, registry),
                Ok(n) => c.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return, // still connecting
                Err(_) => {
                    let connecting = c.served == 0 && c.wpos == 0;
                    let r = if connecting {
                        AttemptResult::ConnectError
                    } else {
                        AttemptResult::Io
                    };
                    return self.fail_conn(id, r, now, registry);
                }
            }
        }
    }

    fn read(&mut self, id: usize, now: u64, registry: &Registry) {
        loop {
            let Some(c) = self.conns.get_mut(id).and_then(Option::as_mut) else {
                return;
            };
            let n = match c.stream.read(&mut self.scratch) {
                Ok(0) => {
                    // EOF: a close-delimited body ends, anything else is broken.
                    let ev = c.reader.on_eof();
                    return match (ev, &c.state) {
                        (ResponseEvent::Response(r), ConnState::Busy(_)) => self.complete(
                            id,
                            AttemptResult::Status {
                                code: r.status,
                                retry_after: None,
                            },
                            false,
                            r.retry_after.map(|ra| ra.delay_from(unix_millis() / 1000)),
                            now,
                            registry,
                        ),
                        (_, ConnState::Busy(_)) => {
                            self.fail_conn(id, AttemptResult::Io, now, registry)
                        }
                        _ => self.close(id, registry),
                    };
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let r = if e.kind() == io::ErrorKind::ConnectionRefused {
                        AttemptResult::ConnectError
                    } else {
                        AttemptResult::Io
                    };
                    return self.fail_conn(id, r, now, registry);
                }
            };
            c.rbuf.extend_from_slice(&self.scratch[..n]);
            if let ConnState::Busy(a) = &mut c.state {
                a.got_bytes = true;
            } else {
                // Bytes on an idle connection: the server is confused; drop the connection.
                return self.close(id, registry);
            }
            match c.reader.poll(&mut c.rbuf) {
                ResponseEvent::Incomplete => continue,
                ResponseEvent::Response(r) => {
                    let pause = r.retry_after.map(|ra| ra.delay_from(unix_millis() / 1000));
                    let result = AttemptResult::Status {
                        code: r.status,
                        retry_after: pause,
                    };
                    return self.complete(id, result, r.keep_alive, pause, now, registry);
                }
                ResponseEvent::Error(_) => {
                    return self.fail_conn(id, AttemptResult::Io, now, registry)
                }
            }
        }
    }

    /// An attempt on connection `id` got a response.
    fn complete(
        &mut self,
        id: usize,
        result: AttemptResult,
        keep_alive: bool,
        _pause: Option<Duration>,
        now: u64,
        registry: &Registry,
    ) {
        let Some(c) = self.conns.get_mut(id).and_then(Option::as_mut) else {
            return;
        };
        let d = c.dest;
        let state = std::mem::replace(&mut c.state, ConnState::Idle { since: now });
        let ConnState::Busy(attempt) = state else {
            return;
        };
        c.served += 1;
        c.wbuf.clear();
        c.wpos = 0;
        c.reader = ResponseReader::new(ClientLimits::default());
        if keep_alive && c.rbuf.is_empty() {
            let cap = self.config.destinations[d].max_in_flight;
            let dest = self.dest(d);
            if dest.idle.len() < cap {
                dest.idle.push(id);
            } else {
                self.close(id, registry);
            }
        } else {
            self.close(id, registry);
        }
        self.settle(d, *attempt, result, now, registry);
    }

    /// The connection broke (or timed out) during an attempt, or while idle.
    fn fail_conn(&mut self, id: usize, result: AttemptResult, now: u64, registry: &Registry) {
        let Some(c) = self.conns.get_mut(id).and_then(Option::as_mut) else {
            return;
        };
        let d = c.dest;
        let state = std::mem::replace(&mut c.state, ConnState::Broken);
        self.close(id, registry);
        if let ConnState::Busy(attempt) = state {
            if attempt.reused && !attempt.got_bytes && !matches!(result, AttemptResult::Timeout) {
                // A kept-alive connection the server had closed: resend on a fresh connection,
                // once, without counting an attempt or feeding the circuit.
                let Attempt { job, permit, .. } = *attempt;
                self.dest(d).state.release(permit);
                self.dest(d).queue.push_front(job);
                self.pump_dest(d, now, registry);
                return;
            }
            self.settle(d, *attempt, result, now, registry);
        }
    }

    /// Feeds the gate and decides the job's fate after one attempt.
    fn settle(
        &mut self,
        d: usize,
        attempt: Attempt,
        result: AttemptResult,
        now: u64,
        registry: &Registry,
    ) {
        let Attempt {
            mut job,
            permit,
            started,
            ..
        } = attempt;
        let class = classify(&result);
        let uri = self.config.destinations[d].handler.uri.clone();
        let events = self.dest(d).state.complete(permit, now, &class);
        let mut opened = false;
        for e in events {
            match e {
                DestinationEvent::Circuit(Transition::Opened) => {
                    opened = true;
                    self.metrics.circuit_opened();
                }
                DestinationEvent::Circuit(Transition::Closed) => self.metrics.circuit_closed(),
                DestinationEvent::Paused { .. } => self.metrics.destination_paused(),
            }
        }
        let in_flight = self.dest(d).state.in_flight() as u64;
        self.metrics.set_in_flight(d, in_flight);
        self.metrics.attempt(d, &class, now.saturating_sub(started));
        match class {
            Class::Delivered => {
                let attempts = job.attempt;
                self.held -= job.events();
                if job.batch.is_empty() {
                    self.delivered(job.lsn, attempts, job.event.received_at_ms, now);
                } else {
                    for m in job.batch {
                        self.delivered(m.lsn, attempts, m.event.received_at_ms, now);
                    }
                }
            }
            Class::Permanent => {
                let attempts = job.attempt;
                self.dead_letter(
                    job,
                    DlqReason::PermanentFailure,
                    attempts,
                    describe(&result, &uri),
                    now,
                );
            }
            Class::Retryable { .. } if opened => {
                let attempts = job.attempt;
                let why = format!(
                    "destination circuit opened for http:{uri} after {} consecutive failures: {}",
                    self.config.destinations[d].circuit.failures,
                    describe(&result, &uri)
                );
                self.dead_letter(job, DlqReason::CircuitOpen, attempts, why, now);
            }
            Class::Retryable { .. } => {
                let next = job.attempt + 1;
                let policy = self.dest(d).policy;
                match policy.delay_before(next, &mut self.rng) {
                    Some(delay) => {
                        let due = now + delay.as_nanos() as u64;
                        let due_at_ms = unix_millis() + delay.as_millis() as u64;
                        let last_error = describe(&result, &uri);
                        job.attempt = next;
                        for lsn in job.lsns() {
                            self.send(JobOutcome::RetryScheduled {
                                lsn,
                                next_attempt: next,
                                due_at_ms,
                                last_error: last_error.clone(),
                            });
                        }
                        self.delay(job, due);
                    }
                    None => {
                        let attempts = job.attempt;
                        self.dead_letter(
                            job,
                            DlqReason::RetryExhausted,
                            attempts,
                            describe(&result, &uri),
                            now,
                        );
                    }
                }
            }
        }
        self.pump_dest(d, now, registry);
        self.flush_outcomes();
    }

    fn delivered(&mut self, lsn: u64, attempts: u32, received_at_ms: u64, now: u64) {
        self.send(JobOutcome::Delivered {
            lsn,
            attempts,
            received_at_ms,
        });
        self.release_flow(lsn, now);
    }

    /// Terminal failure of `job` (every member of a batch gets its own DLQ entry).
    fn dead_letter(
        &mut self,
        job: Job,
        reason: DlqReason,
        attempts: u32,
        last_error: String,
        now: u64,
    ) {
        self.held -= job.events();
        for m in job.into_members() {
            let lsn = m.lsn;
            self.send(JobOutcome::DeadLetter {
                job: m,
                reason,
                attempts,
                last_error: last_error.clone(),
            });
            self.release_flow(lsn, now);
        }
    }

    fn send(&mut self, o: JobOutcome) {
        if !self.overflow.is_empty() {
            self.overflow.push_back(o);
            return;
        }
        match self.outcomes.try_push(o) {
            Ok(()) => self.pump.unpark(),
            Err(e) => self.overflow.push_back(e.into_inner()),
        }
    }

    /// Hands outcomes the pump's ring had no room for (normally none).
    pub fn flush_outcomes(&mut self) {
        while let Some(o) = self.overflow.pop_front() {
            if let Err(e) = self.outcomes.try_push(o) {
                self.overflow.push_front(e.into_inner());
                break;
            }
        }
        self.pump.unpark();
    }

    fn close(&mut self, id: usize, registry: &Registry) {
        if let Some(mut c) = self.conns.get_mut(id).and_then(Option::take) {
            let _ = registry.deregister(&mut c.stream);
            self.free.push(id);
            if let Some(dest) = self.dests.get_mut(&c.dest) {
                dest.conns -= 1;
                dest.idle.retain(|&x| x != id);
            }
        }
    }
}

/// `last_error` text for an attempt.
fn describe(result: &AttemptResult, uri: &str) -> String {
    match result {
        AttemptResult::Status { code, .. } => format!("{uri} answered {code}"),
        AttemptResult::ConnectError => format!("cannot connect to {uri}"),
        AttemptResult::Timeout => format!("{uri} did not answer within the timeout"),
        AttemptResult::Io => format!("connection to {uri} broke before a complete response"),
    }
}
