//! A core's server side: its listener and its client connections, from `accept` to the last
//! byte written. It accepts (bounded by `max_connections_per_core`: past it `503` and close),
//! reads, frames requests with the sans-IO codec, enforces the body gate, the pipelining
//! bounds and the connection deadlines, queues responses in request order and writes them. It
//! yields each complete request to a [`Handler`] (the owner: routing, ingest, ops) and knows no
//! domain type: what a request means, and what a pending response `P` waits for, are the
//! handler's.
//!
//! - **Requests.** [`Server::drive`] reads and frames until the socket is drained, the
//!   connection is closing, or its queued responses reach `max_pipeline_depth` slots or
//!   `max_queued_response_bytes` bytes (then it stops reading: [`Server::read_paused`]); it
//!   writes what is ready, and repeats while writing made room for requests already received.
//!   A request's answer is queued through its [`Ctx`] — at once, or as a `Slot::Pending(P)`
//!   the handler fills in later (`Conn::fill_slot`), which keeps the order.
//! - **The body gate.** The reader stops after every head with a body; the handler's
//!   [`Handler::gate_body`] grows the connection's share of the process-wide body budget to the
//!   declared `Content-Length`, or, for a chunked body, to its buffer after each read. Refused:
//!   the handler queued the answer, the request is dropped unread and the connection closes
//!   after the answer. `Expect: 100-continue` is answered only once the gate passed.
//! - **Deadlines** ([`Server::sweep`], with [`Timeouts`]): a client that stops reading (close), a
//!   head or body that does not arrive in time (`408` and close), an idle keep-alive connection
//!   (a half-close), a lingering one past `LINGER` (close); during the drain, a silent one once
//!   the node is quiet (the caller says when, [`may_end`]).
//! - **Ending without a reset** ([`Server::linger`]): FIN, then input is read and dropped until
//!   the client closes, within `LINGER` and `LINGER_MAX_BYTES`.
//! - **Accept at the fd limit.** With an edge-triggered listener a failed `accept` (EMFILE,
//!   ENFILE, ENOBUFS, ENOMEM) would not be retried until another connection arrives; the server
//!   retries every [`ACCEPT_RETRY`] while the limit lasts ([`Server::retry_accept`]).
//!
//! Bounds: connections ≤ `max_connections`; per connection, queued responses ≤
//! `max_pipeline_depth` and `max_queued_response_bytes`; one read buffer of
//! [`crate::net::conn::READ_CHUNK`] bytes per core, one spare request head ≤
//! [`SPARE_HEAD_BYTES`]. Gauges and counters: `sluice_connections_*`, `sluice_read_paused_total`,
//! `sluice_connection_timeouts_total`, `sluice_body_budget_refused_total`.

use std::io;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};

use crate::metrics::{ConnRefusal, CoreMetrics, PauseBound, Route, TimeoutKind};
use crate::net::budget::BodyBudget;
use crate::net::conn::{Conn, Flush, Phase, Slot};
use crate::net::conns::{Conns, Expired, Timeouts};
use crate::net::date::DateCache;
use crate::net::http::{self, HttpError, ReadEvent, Request, RequestHead};
use crate::net::io::{ConnEvent, Reactor, Ready};
use crate::sync::clock::{unix_millis, Clock};

/// The poll token of a core's listener.
pub const LISTENER: Token = Token(usize::MAX - 1);

/// How often `accept` is retried while the process is at its fd limit.
pub const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// How long a connection between requests must have been silent before the drain may
/// half-close it ([`may_end`]).
pub const DRAIN_IDLE: Duration = Duration::from_millis(200);

/// The most heap a core keeps in its spare request head (a larger head is freed after use).
pub const SPARE_HEAD_BYTES: usize = 8 * 1024;

/// The bounds of a core's server side.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    pub limits: http::Limits,
    pub max_connections: usize,
    pub max_pipeline_depth: usize,
    pub max_queued_response_bytes: usize,
    pub timeouts: Timeouts,
}

/// What a server call uses of the core besides its own state.
#[derive(Debug)]
pub struct Net<'a> {
    pub reactor: &'a mut Reactor,
    pub metrics: &'a CoreMetrics,
    pub clock: &'a dyn Clock,
}

/// One connection's place for the handler: its answers are queued here, in request order.
#[derive(Debug)]
pub struct Ctx<'a, P> {
    pub conns: &'a mut Conns<P>,
    pub idx: usize,
    /// The turn's `Date` header value.
    pub date: &'a str,
    pub metrics: &'a CoreMetrics,
}

/// What a handler answers with outside a request's own call (the 202s of a commit back):
/// every connection, the turn's `Date` value and the metrics ([`Server::answer`]).
#[derive(Debug)]
pub struct Answers<'a, P> {
    pub conns: &'a mut Conns<P>,
    /// The turn's `Date` header value.
    pub date: &'a str,
    pub metrics: &'a CoreMetrics,
}

impl<P> Answers<'_, P> {
    /// Fills connection `idx`'s deferred answer `ticket` (`Slot::Deferred`, queued in request
    /// order when the request was read) with a complete response, counted under `route`; the
    /// server writes it when the handler is done ([`Server::answer`]). False when the
    /// connection or the slot is gone (closed meanwhile: the answer is dropped).
    pub fn fill(
        &mut self,
        idx: usize,
        ticket: u64,
        route: Route,
        status: u16,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> bool {
        let Some(conn) = self.conns.get_mut(idx) else {
            return false;
        };
        let found = conn
            .slots
            .iter()
            .position(|s| matches!(s, Slot::Deferred { ticket: t, .. } if *t == ticket));
        let Some(pos) = found else {
            return false;
        };
        let Slot::Deferred {
            keep_alive,
            head_only,
            ..
        } = conn.slots[pos]
        else {
            return false;
        };
        let bytes = conn.response_bytes(self.date, status, headers, body, keep_alive, head_only);
        let close = !keep_alive;
        self.metrics.incr_http(route, status);
        self.conns.answer(idx, pos, Slot::Ready { bytes, close })
    }

    /// Fills every deferred answer `ticket` of connection `idx` with a `200` whose body is
    /// shared (`body`: one rendering for many answers, written by reference), counted under
    /// `route`; the server writes them when the handler is done. Returns how many.
    pub fn fill_shared(
        &mut self,
        idx: usize,
        ticket: u64,
        route: Route,
        content_type: &str,
        body: &std::sync::Arc<[u8]>,
    ) -> usize {
        let headers = [("Date", self.date), ("Content-Type", content_type)];
        let Some(conn) = self.conns.get_mut(idx) else {
            return 0;
        };
        let mut filled = Vec::new();
        for (pos, slot) in conn.slots.iter().enumerate() {
            if let Slot::Deferred {
                keep_alive,
                head_only,
                ticket: t,
                ..
            } = *slot
            {
                if t == ticket {
                    filled.push((pos, keep_alive, head_only));
                }
            }
        }
        for &(pos, keep_alive, head_only) in &filled {
            let mut head = Vec::with_capacity(160);
            http::write_response(&mut head, 200, &headers, body, keep_alive, true);
            let close = !keep_alive;
            let slot = if head_only {
                Slot::Ready { bytes: head, close }
            } else {
                let body = std::sync::Arc::clone(body);
                Slot::Shared { head, body, close }
            };
            self.conns.answer(idx, pos, slot);
            self.metrics.incr_http(route, 200);
        }
        filled.len()
    }
}

impl<P> Ctx<'_, P> {
    /// The connection (`None` only if the handler closed it).
    pub fn conn(&mut self) -> Option<&mut Conn<P>> {
        self.conns.get_mut(self.idx)
    }

    /// Queues a complete response, counted under `route`.
    // Every argument is a distinct part of the response; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub fn respond(
        &mut self,
        route: Route,
        status: u16,
        headers: &[(&str, &str)],
        body: &[u8],
        keep_alive: bool,
        head_only: bool,
    ) {
        self.metrics.incr_http(route, status);
        if let Some(conn) = self.conns.get_mut(self.idx) {
            conn.respond(self.date, status, headers, body, keep_alive, head_only);
        }
    }
}

/// The owner of the requests a [`Server`] frames. Generic (monomorphised), not `dyn`.
pub trait Handler<P> {
    /// A complete request on `cx`'s connection; `keep_alive` false: it is the connection's last
    /// (nothing pipelined behind it is read). Answer it through `cx`, now or later.
    fn on_request(
        &mut self,
        cx: &mut Ctx<'_, P>,
        head: &RequestHead,
        body: Vec<u8>,
        keep_alive: bool,
    );
    /// The body gate: grow the connection's body share (`Conn::body`) to `want` bytes for the
    /// head waiting in its reader. `false`: refused, and the handler queued the answer; the
    /// server drops the request unread and closes the connection after the answer.
    fn gate_body(&mut self, cx: &mut Ctx<'_, P>, want: u64) -> bool;
    /// A connection closed with `pending` still queued (owed, never to be written).
    fn on_close(&mut self, pending: &P);
    /// The node is draining: every answer closes its connection.
    fn draining(&self) -> bool;
    /// A client's bytes arrived at `at` (clock nanos) while draining.
    fn note_input(&mut self, at: u64);
}

/// A core's listener and connections (module docs).
#[derive(Debug)]
pub struct Server<P> {
    core: usize,
    conns: Conns<P>,
    listener: Option<TcpListener>,
    spec: ServerSpec,
    budget: crate::sync::Arc<BodyBudget>,
    /// Reusable socket read buffer ([`crate::net::conn::READ_CHUNK`] bytes).
    scratch: Box<[u8]>,
    /// The last handled request's head, whose buffers the next parsed head reuses (kept only
    /// while it holds at most [`SPARE_HEAD_BYTES`]).
    spare_head: Option<RequestHead>,
    dates: DateCache,
    /// The `Date` header value, refreshed once per loop turn.
    date: String,
    /// When to retry `accept` (clock nanos), while at the fd limit.
    accept_retry_at: Option<u64>,
    /// The fd limit was logged; reset once an accept retry no longer fails.
    fd_limit_logged: bool,
    /// The connections [`Server::answer`] drives (a buffer, reused turn to turn).
    answered: Vec<usize>,
}

/// The `accept` errors that mean "out of descriptors or memory for now".
fn at_fd_limit(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// True if the drain may end `conn` now: `draining` (the node is quiet), it is between
/// requests with nothing received, queued or owed, has been silent for [`DRAIN_IDLE`] (`age`:
/// nanos in its current phase), and no byte of a next request is already waiting in its
/// socket (a request that arrived since the loop last looked is answered, not dropped behind
/// our FIN).
pub fn may_end<P>(conn: &Conn<P>, draining: bool, age: u64) -> bool {
    draining
        && conn.is_between_requests()
        && age >= DRAIN_IDLE.as_nanos() as u64
        && !conn.stream.input_waiting()
}

impl<P> Server<P> {
    /// Core `core`'s server over `listener` (registered with `registry` as [`LISTENER`]).
    pub fn new(
        core: usize,
        listener: std::net::TcpListener,
        registry: &Registry,
        spec: ServerSpec,
        budget: crate::sync::Arc<BodyBudget>,
    ) -> io::Result<Server<P>> {
        let mut listener = TcpListener::from_std(listener);
        registry.register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(Server {
            core,
            conns: Conns::new(spec.max_connections),
            listener: Some(listener),
            spec,
            budget,
            scratch: vec![0u8; crate::net::conn::READ_CHUNK].into_boxed_slice(),
            spare_head: None,
            dates: DateCache::default(),
            date: String::new(),
            accept_retry_at: None,
            fd_limit_logged: false,
            answered: Vec::new(),
        })
    }

    pub fn conns(&self) -> &Conns<P> {
        &self.conns
    }

    /// The connections and the turn's `Date` value, side by side (answers filled in later).
    pub fn parts(&mut self) -> (&mut Conns<P>, &str) {
        (&mut self.conns, &self.date)
    }

    /// The `Date` header value of this turn.
    pub fn date(&self) -> &str {
        &self.date
    }

    /// Refreshes the `Date` value (once per loop turn).
    pub fn refresh_date(&mut self) {
        let text = self.dates.get(unix_millis());
        if text != self.date {
            self.date.clear();
            self.date.push_str(text);
        }
    }

    /// The listener, while it is open.
    pub fn listener(&self) -> Option<&TcpListener> {
        self.listener.as_ref()
    }

    /// Closes the listener (end of the drain's handshake settle).
    pub fn close_listener(&mut self, registry: &Registry) {
        if let Some(mut l) = self.listener.take() {
            let _ = registry.deregister(&mut l);
        }
    }

    /// Submits the operations the turn's connections asked for; closes those that failed.
    pub fn submit(&mut self, net: &mut Net<'_>, h: &mut impl Handler<P>) {
        let mut failed = Vec::new();
        net.reactor.submit(&mut self.conns, &mut failed);
        for idx in failed {
            self.close(net, h, idx);
        }
    }

    /// Connection `idx` was read dry or written to: the reactor submits what it needs before
    /// the next wait.
    fn note_io(&mut self, net: &mut Net<'_>, idx: usize) {
        if let Some(conn) = self.conns.get_mut(idx) {
            net.reactor.touch(idx, &mut conn.stream);
        }
    }

    /// Settles a readiness or completion event of a connection with the reactor and records
    /// what it means on the connection; the caller drives it when `drive` is set.
    pub fn settle(&mut self, reactor: &mut Reactor, ev: ConnEvent) -> Option<Ready> {
        let mut conn = self.conns.get_mut(ev.idx());
        let stream = conn.as_mut().map(|c| &mut c.stream);
        let ready = reactor.settle(ev, stream)?;
        if let Some(c) = conn {
            c.readable |= ready.input;
            c.rdhup |= ready.closed;
        }
        Some(ready)
    }

    // ----- accept -----------------------------------------------------------------------------

    /// Accepts every queued connection.
    pub fn accept_all(&mut self, net: &mut Net<'_>, h: &mut impl Handler<P>) {
        loop {
            let Some(listener) = self.listener.as_ref() else {
                return;
            };
            match listener.accept() {
                Ok((stream, _)) => self.admit(net, h, stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // EMFILE/ENFILE and friends: leave the rest in the backlog and retry on a
                // timer. Counted so operators see it.
                Err(e) => return self.accept_failed(net, &e),
            }
        }
    }

    fn admit(&mut self, net: &mut Net<'_>, h: &mut impl Handler<P>, mut stream: TcpStream) {
        if self.conns.is_full() {
            net.metrics
                .incr_connections_refused(ConnRefusal::PerCoreCap);
            let mut out = Vec::new();
            http::write_response(
                &mut out,
                503,
                &[("Retry-After", "1"), ("Content-Type", http::TEXT_PLAIN)],
                b"connection limit reached\n",
                false,
                false,
            );
            // Best effort: one non-blocking write, then close.
            let _ = io::Write::write(&mut stream, &out);
            return;
        }
        let _ = stream.set_nodelay(true);
        let idx = self.conns.reserve();
        let stream = match net.reactor.adopt(idx, stream) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("sluice: worker {}: register failed: {e}", self.core);
                self.conns.unreserve(idx);
                return;
            }
        };
        let now = net.clock.now_nanos();
        let reader = http::RequestReader::new(self.spec.limits.clone()).with_body_gate();
        let mut conn = Conn::new(stream, reader, self.budget.clone(), now);
        // A new connection must send its head within the header timeout (slowloris).
        conn.set_phase(Phase::Head, now);
        self.conns.put(idx, conn);
        net.metrics.incr_connections_accepted();
        net.metrics.set_connections_open(self.conns.open() as u64);
        self.drive(net, h, idx);
    }

    /// An `accept` error: at the fd limit, retry on the timer; anything else waits for the
    /// next readiness event. Counted either way.
    fn accept_failed(&mut self, net: &mut Net<'_>, e: &io::Error) {
        if !at_fd_limit(e) {
            net.metrics
                .incr_connections_refused(ConnRefusal::AcceptError);
            eprintln!("sluice: worker {}: accept failed: {e}", self.core);
            return;
        }
        net.metrics.incr_connections_refused(ConnRefusal::FdLimit);
        if !std::mem::replace(&mut self.fd_limit_logged, true) {
            eprintln!(
                "sluice: worker {}: accept failed: {e}; retrying every {:?} while at the limit",
                self.core, ACCEPT_RETRY
            );
        }
        self.accept_retry_at = Some(net.clock.now_nanos() + ACCEPT_RETRY.as_nanos() as u64);
    }

    /// Called once per loop turn: retries `accept` when the fd-limit timer is due.
    pub fn retry_accept(&mut self, net: &mut Net<'_>, h: &mut impl Handler<P>, now: u64) {
        if self.accept_retry_at.is_some_and(|at| now >= at) {
            self.accept_retry_at = None;
            self.accept_all(net, h);
            if self.accept_retry_at.is_none() {
                self.fd_limit_logged = false;
            }
        }
    }

    /// `timeout`, shortened to a pending accept retry.
    pub fn accept_timeout(&self, timeout: Duration, now: u64) -> Duration {
        match self.accept_retry_at {
            Some(at) => timeout.min(Duration::from_nanos(at.saturating_sub(now))),
            None => timeout,
        }
    }

    // ----- reading and writing ------------------------------------------------------------------

    /// Reads, frames and hands requests to `h` as far as the connection allows, then writes;
    /// repeats while writing made room under the pipeline bounds for requests already received.
    pub fn drive(&mut self, net: &mut Net<'_>, h: &mut impl Handler<P>, idx: usize) {
        if let Some(Phase::Linger) = self.conns.get(idx).map(|c| c.phase) {
            return self.discard(net, h, idx);
        }
        let (depth, max_bytes) = (
            self.spec.max_pipeline_depth,
            self.spec.max_queued_response_bytes,
        );
        loop {
            let at_depth = self.read_and_handle(net, h, idx);
            self.flush(net, h, idx);
            let room = self.conns.get(idx).is_some_and(|c| {
                c.phase != Phase::Linger && c.slots.len() < depth && c.queued_bytes() < max_bytes
            });
            if !(at_depth && room) {
                return;
            }
        }
    }

    /// Lets the handler answer what it owes outside a request's call (`f`: the answers of a
    /// commit back), then writes the connections it answered: the server flushes what it
    /// answered itself, once each, and a connection that stopped reading at its pipeline depth
    /// reads again.
    pub fn answer<H: Handler<P>>(
        &mut self,
        net: &mut Net<'_>,
        h: &mut H,
        f: impl FnOnce(&mut H, Answers<'_, P>),
    ) {
        let answers = Answers {
            conns: &mut self.conns,
            date: &self.date,
            metrics: net.metrics,
        };
        f(h, answers);
        self.flush_answered(net, h);
    }

    /// Drives every connection answered since the last call (`Conns::answer`: the handler filled
    /// a response it owed), once each.
    fn flush_answered(&mut self, net: &mut Net<'_>, h: &mut impl Handler<P>) {
        let mut answered = std::mem::take(&mut self.answered);
        self.conns.take_answered(&mut answered);
        for &idx in &answered {
            self.drive(net, h, idx);
        }
        self.answered = answered;
    }

    /// Frames buffered requests and reads more, until the socket is drained, the connection is
    /// closing, or its queued responses reach a bound. Returns true in the last case.
    fn read_and_handle(&mut self, net: &mut Net<'_>, h: &mut impl Handler<P>, idx: usize) -> bool {
        let draining = h.draining();
        loop {
            let Some(conn) = self.conns.get_mut(idx) else {
                return false;
            };
            if conn.closing {
                return false;
            }
            if self.read_paused(net.metrics, idx) {
                return true;
            }
            let Some(conn) = self.conns.get_mut(idx) else {
                return false;
            };
            match conn
                .reader
                .poll_reusing(&mut conn.rbuf, &mut self.spare_head)
            {
                ReadEvent::Request(req) => {
                    conn.continue_sent = false;
                    conn.served += 1;
                    // The body now belongs to the handler and its bounds.
                    conn.body.release();
                    self.handle(net, h, idx, req, draining);
                    continue;
                }
                ReadEvent::HeadReady { expect_continue } => {
                    // The body gate: nothing of the body is read before the budget covers it.
                    let want = conn.reader.declared_length().unwrap_or(0);
                    if !self.gate_body(net, h, idx, want) {
                        return false;
                    }
                    self.send_continue(net, idx, expect_continue);
                    continue;
                }
                ReadEvent::Incomplete => {
                    if conn.reader.pending_head().is_some() {
                        let want = conn.reader.body_capacity() as u64;
                        if !self.gate_body(net, h, idx, want) {
                            return false;
                        }
                    }
                }
                ReadEvent::Error(e) => {
                    self.respond_error(net, idx, e);
                    return false;
                }
            }
            if !self.read_some(net, h, idx, draining) {
                return false;
            }
        }
    }

    /// One read from the socket into the connection's buffer. False: nothing more to read now
    /// (or the connection closed).
    fn read_some(
        &mut self,
        net: &mut Net<'_>,
        h: &mut impl Handler<P>,
        idx: usize,
        draining: bool,
    ) -> bool {
        let Some(conn) = self.conns.get_mut(idx) else {
            return false;
        };
        if !conn.readable || conn.peer_closed {
            return false;
        }
        match conn.read_into(&mut self.scratch) {
            Err(_) => {
                self.close(net, h, idx);
                return false;
            }
            Ok(0) => {}
            // After the read returned: every request in these bytes was sent before it.
            Ok(_) => {
                conn.read_at = net.clock.now_nanos();
                if draining {
                    // The node is not quiet: idle connections stay open.
                    h.note_input(conn.read_at);
                }
            }
        }
        true
    }

    /// `100 Continue` for a head that asked for it, once per request.
    fn send_continue(&mut self, net: &mut Net<'_>, idx: usize, expect_continue: bool) {
        let Some(conn) = self.conns.get_mut(idx) else {
            return;
        };
        if expect_continue && !conn.continue_sent {
            conn.continue_sent = true;
            let mut bytes = Vec::with_capacity(32);
            http::write_continue(&mut bytes);
            conn.push(Slot::Ready {
                bytes,
                close: false,
            });
            net.metrics.incr_http(Route::Webhook, 100);
        }
    }

    /// The handler's body gate on connection `idx` (module docs).
    fn gate_body(
        &mut self,
        net: &mut Net<'_>,
        h: &mut impl Handler<P>,
        idx: usize,
        want: u64,
    ) -> bool {
        let mut cx = self.ctx(net, idx);
        if h.gate_body(&mut cx, want) {
            return true;
        }
        if let Some(conn) = self.conns.get_mut(idx) {
            conn.reader = http::RequestReader::new(self.spec.limits.clone()).with_body_gate();
            conn.body.release();
            conn.closing = true;
        }
        net.metrics.incr_body_budget_refused();
        false
    }

    /// True (and counted) when connection `idx`'s queued responses reached a bound: stop
    /// reading it.
    pub fn read_paused(&self, metrics: &CoreMetrics, idx: usize) -> bool {
        let Some(conn) = self.conns.get(idx) else {
            return false;
        };
        let bound = if conn.slots.len() >= self.spec.max_pipeline_depth {
            PauseBound::PipelineDepth
        } else if conn.queued_bytes() >= self.spec.max_queued_response_bytes {
            PauseBound::ResponseBytes
        } else {
            return false;
        };
        metrics.incr_read_paused(bound);
        true
    }

    fn handle(
        &mut self,
        net: &mut Net<'_>,
        h: &mut impl Handler<P>,
        idx: usize,
        req: Request,
        draining: bool,
    ) {
        let Request { head, body } = req;
        let keep_alive = head.keep_alive && !draining;
        if !keep_alive {
            // This is the connection's last request: nothing pipelined behind it is read (and
            // so nothing behind it is handled without an answer).
            if let Some(c) = self.conns.get_mut(idx) {
                c.closing = true;
            }
        }
        let mut cx = self.ctx(net, idx);
        h.on_request(&mut cx, &head, body, keep_alive);
        if head.heap_bytes() <= SPARE_HEAD_BYTES {
            self.spare_head = Some(head);
        }
    }

    fn respond_error(&mut self, net: &mut Net<'_>, idx: usize, e: HttpError) {
        // The failed reader dropped any partial body.
        if let Some(c) = self.conns.get_mut(idx) {
            c.body.release();
        }
        let body = format!("{}\n", e.reason());
        self.respond_last(net, idx, e.status(), body.as_bytes());
    }

    /// Queues a plain-text answer that ends the connection (a framing error, a timeout).
    fn respond_last(&mut self, net: &Net<'_>, idx: usize, status: u16, body: &[u8]) {
        let text = [("Content-Type", http::TEXT_PLAIN)];
        self.ctx(net, idx)
            .respond(Route::Unmatched, status, &text, body, false, false);
    }

    /// The handler's place on connection `idx`.
    fn ctx<'s>(&'s mut self, net: &'s Net<'_>, idx: usize) -> Ctx<'s, P> {
        Ctx {
            conns: &mut self.conns,
            idx,
            date: &self.date,
            metrics: net.metrics,
        }
    }

    /// Writes what is ready; closes when done or broken; updates the timeout phase.
    pub fn flush(&mut self, net: &mut Net<'_>, h: &mut impl Handler<P>, idx: usize) {
        self.note_io(net, idx);
        let now = net.clock.now_nanos();
        let Some(conn) = self.conns.get_mut(idx) else {
            return;
        };
        if conn.phase == Phase::Linger {
            return;
        }
        match conn.flush(now) {
            Err(_) => return self.close(net, h, idx),
            Ok(Flush::Blocked) => {}
            Ok(Flush::Done) => {
                if conn.closing && conn.is_quiet() {
                    return self.linger(net, h, idx, now);
                }
            }
        }
        if conn.peer_closed && conn.is_quiet() {
            // The client will send nothing more and is owed nothing.
            return self.close(net, h, idx);
        }
        conn.trim();
        conn.update_phase(now);
    }

    // ----- ending -------------------------------------------------------------------------------

    /// Closes connection `idx`; the handler learns of every response it still owed.
    pub fn close(&mut self, net: &mut Net<'_>, h: &mut impl Handler<P>, idx: usize) {
        if let Some(c) = self.conns.take(idx) {
            net.reactor.release(idx, c.stream);
            for slot in &c.slots {
                if let Slot::Pending(p) = slot {
                    h.on_close(p);
                }
            }
            net.metrics.set_connections_open(self.conns.open() as u64);
        }
    }

    /// Ends a connection after its final response, or between requests, with a half-close.
    /// Closing at once with unread input would make the kernel send RST, which can destroy
    /// the response (e.g. a 413) before the client reads it.
    pub fn linger(&mut self, net: &mut Net<'_>, h: &mut impl Handler<P>, idx: usize, now: u64) {
        let Some(conn) = self.conns.get_mut(idx) else {
            return;
        };
        if conn.peer_closed || conn.start_linger(now).is_err() {
            return self.close(net, h, idx);
        }
        self.discard(net, h, idx);
    }

    /// Reads and drops input of a lingering connection; closes it at EOF, on error or at the
    /// byte bound (the time bound is the sweep's).
    fn discard(&mut self, net: &mut Net<'_>, h: &mut impl Handler<P>, idx: usize) {
        self.note_io(net, idx);
        let Some(conn) = self.conns.get_mut(idx) else {
            return;
        };
        if conn.discard_input(&mut self.scratch) {
            self.close(net, h, idx);
        }
    }

    /// Checks every connection's deadlines (module docs); `drain_quiet`: the drain may end
    /// silent connections ([`may_end`]).
    pub fn sweep(
        &mut self,
        net: &mut Net<'_>,
        h: &mut impl Handler<P>,
        now: u64,
        drain_quiet: bool,
    ) {
        let timeouts = self.spec.timeouts;
        for idx in 0..self.conns.slots() {
            let Some(conn) = self.conns.get(idx) else {
                continue;
            };
            let expired = timeouts.check_conn(conn, now);
            let age = now.saturating_sub(conn.phase_since);
            // The drain ends a silent connection by half-closing it.
            let silent = matches!(conn.phase, Phase::Idle | Phase::Head);
            if expired != Some(Expired::Write) && silent && may_end(conn, drain_quiet, age) {
                self.linger(net, h, idx, now);
                continue;
            }
            match expired {
                Some(Expired::Write) => {
                    // The client stopped reading its responses.
                    net.metrics.incr_timeout(TimeoutKind::Write);
                    self.close(net, h, idx);
                }
                Some(Expired::Header) => {
                    net.metrics.incr_timeout(TimeoutKind::Header);
                    self.timeout_408(net, h, idx);
                }
                Some(Expired::Body) => {
                    net.metrics.incr_timeout(TimeoutKind::Body);
                    self.timeout_408(net, h, idx);
                }
                Some(Expired::Linger) => self.close(net, h, idx),
                Some(Expired::Idle) => {
                    net.metrics.incr_timeout(TimeoutKind::Idle);
                    // A half-close: a request that crossed our FIN is dropped, not reset.
                    self.linger(net, h, idx, now);
                }
                None => {}
            }
        }
    }

    fn timeout_408(&mut self, net: &mut Net<'_>, h: &mut impl Handler<P>, idx: usize) {
        let Some(conn) = self.conns.get_mut(idx) else {
            return;
        };
        if conn.closing {
            return self.close(net, h, idx);
        }
        conn.reader = http::RequestReader::new(self.spec.limits.clone()).with_body_gate();
        conn.body.release();
        conn.rbuf.clear();
        self.respond_last(net, idx, 408, b"request timeout\n");
        self.flush(net, h, idx);
    }

    /// Ends the loop's connections (the reactor's shutdown).
    pub fn shutdown(&mut self, reactor: &mut Reactor) {
        reactor.shutdown(&mut self.conns);
    }
}

#[cfg(all(test, not(sluice_loom)))]
#[path = "server_tests.rs"]
mod tests;
