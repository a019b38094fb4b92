//! One core's event loop, written once over the core's reactor (`net::io::Reactor`, mio or
//! io_uring below it): submit, wait, handle the events, then the turn's work (`end_turn`).
//!
//! Each worker owns: its reactor, its own `SO_REUSEPORT` listener (the kernel spreads new
//! connections across workers), a bounded connection table (`net::conns`), a cache of per-source
//! buckets, a shard of the metrics, its log's commit helper, its pump and its dispatcher
//! (`CoreParts`). Nothing here takes a lock on the request path, except the dedupe index's
//! sharded locks for triggers with `dedupe` (held for one hash-map operation; `ingest::dedupe`).
//!
//! The life of an ingest request (decided by the sans-IO `ingest::pipeline`, applied by `ingest.rs`):
//! parse (sans-IO codec) → route → signature (`401`) → token
//! buckets (all-or-nothing across global and per-source) → dedupe claim (`200
//! duplicate_dropped`, `503 duplicate_in_flight`) → the durable backlog reservation → the record
//! is staged in the core's next group commit (`sched::commit`; if that batch is full, retry every
//! millisecond until `offer_timeout`, then `503 wal_busy`) → at the end of the loop turn the batch
//! goes to the core's commit helper, which writes and syncs it and wakes the poll once → `202`
//! (or `503 wal_unavailable`) is queued in request order on the connection, and the durable event
//! goes to the core's pump from memory (`links.rs`).
//!
//! Bounds: connections ≤ `max_connections_per_core` (past it: `503` and close); ingest appends
//! staged or with the commit helper ≤ `2 × max_batch`; queued responses per connection ≤
//! `max_pipeline_depth` and `max_queued_response_bytes`.
//!
//! Dedupe claims (`ingest::dedupe`) are kept per ticket in `claims` until settled: confirmed
//! when the WAL reports the event durable (before the 202 is queued), released when the append
//! is refused or fails, or when the connection closes before its event was staged in a batch.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::dispatch::dispatcher::{Dispatcher, CLIENT_TOKEN_BASE};
use crate::dispatch::metrics::CoreDispatchMetrics;
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Poll, Token};

use crate::ingest::dedupe::ClaimToken;
use crate::ingest::event_id::EventIdGen;
use crate::ingest::pending::PendingIngest;
use crate::ingest::respond::Refusal;
use crate::ingest::router::{AdminRoute, OpsEndpoint, RouteMatch};
use crate::ingest::sources::SourceCache;
use crate::ingest::verify;
use crate::metrics::{ConnRefusal, CoreMetrics, Route, TimeoutKind};
use crate::net::conn::{Flush, Phase};
use crate::net::conns::Conns;
use crate::net::date::DateCache;
use crate::net::http::{self, HttpError, ReadEvent, Request};
use crate::net::io::event::ConnEvent;
use crate::net::io::{Backend, Event, Reactor, SOURCE_TOKEN_BASE};
use crate::sched::commit::Committer;
use crate::sched::pump::CorePump;
use crate::sched::state::{Phase as Lifecycle, Shared};
use crate::sync::clock::unix_millis;
use crate::wal::{self, AppendOutcome, AppendRequest};

mod books;
mod budgets;
mod drain;
mod ingest;
mod links;
mod ops;
mod replay;
mod timeouts;
mod wiring;

/// A client connection of this core; its pending responses are ingest events.
type Conn = crate::net::conn::Conn<PendingIngest>;
type Slot = crate::net::conn::Slot<PendingIngest>;

pub use wiring::CoreLinks;
/// The poll token of a core's waker.
pub const WAKER_TOKEN: Token = wiring::WAKER;

const LISTENER: Token = Token(usize::MAX - 1);
// The core's own sources and the dispatcher's outbound sockets are sources of the reactor, not
// connections.
const _: () =
    assert!(CLIENT_TOKEN_BASE >= SOURCE_TOKEN_BASE && wiring::WAKER.0 >= SOURCE_TOKEN_BASE);

/// Bits of a ticket that carry the per-worker sequence; the bits above hold the connection slot.
const TICKET_SEQ_BITS: u32 = 40;

/// How often connection deadlines are checked.
const SWEEP_EVERY: Duration = Duration::from_millis(100);
/// Poll timeout while requests wait for room in the core's next batch.
const OFFER_RETRY: Duration = Duration::from_millis(1);

/// What a worker's core owns besides its connections: its poll (with the waker its commit
/// helper and the other cores use), its commit helper, its pump and its links to other cores.
#[derive(Debug)]
pub struct CoreParts {
    pub poll: Poll,
    pub committer: Committer,
    pub pump: CorePump,
    pub links: CoreLinks,
}

/// A worker before it runs: created on the main thread so that bind errors surface at startup.
#[derive(Debug)]
pub struct Worker {
    id: usize,
    /// The core's I/O: connections, sources (listener, waker, outbound sockets), the ring.
    reactor: Reactor,
    listener: Option<TcpListener>,
    /// The core's connections (at most `max_connections_per_core`).
    conns: Conns<PendingIngest>,
    shared: Arc<Shared>,
    metrics: CoreMetrics,
    sources: SourceCache,
    /// The core's commit helper (its log's group commit, dead letters).
    committer: Committer,
    /// The core's pump over the logs it owns.
    pump: CorePump,
    /// Rings and wakers to and from the other cores.
    links: CoreLinks,
    /// Ingest appends staged or with the commit helper.
    outstanding: usize,
    max_outstanding: usize,
    seq: u64,
    offer_waiters: VecDeque<usize>,
    /// Unsettled dedupe claims by ticket (module docs).
    claims: HashMap<u64, ClaimToken>,
    ids: EventIdGen,
    limits: http::Limits,
    hard_stop: Arc<AtomicBool>,
    draining_since: Option<u64>,
    /// Reusable socket read buffer ([`crate::net::conn::READ_CHUNK`] bytes).
    scratch: Box<[u8]>,
    dates: DateCache,
    /// The `Date` header value, refreshed once per loop turn.
    date: String,
    /// Delivery to the destinations this core owns.
    dispatcher: Dispatcher,
    /// Backlog reservations of appends whose connection closed before the completion came
    /// (ticket → (backlog slot, cost)). At most `max_outstanding` entries (appends in flight).
    orphans: std::collections::HashMap<u64, (usize, u64)>,
    /// When this core reported itself quiet during the drain.
    reported_quiet: bool,
    /// The injected clock read once per loop turn (nanos): token-bucket decisions use it.
    turn_now: u64,
    /// Bulk DLQ replays whose append has not completed (`replay.rs`).
    replays: books::Replays,
    /// Connection budgets: deferred scrapes, the accept retry (`budgets.rs`).
    edge: books::Edge,
    /// Gives freed memory back after a wave of connections or bodies (`sched::alloc`).
    trimmer: crate::sched::alloc::Trimmer,
    /// The configuration generation this core runs (`ops::reload`): its router for routing.
    view: crate::ops::reload::CoreView,
    /// The backend asked for; `uring` is set up on the core's own thread when the loop starts.
    backend: Backend,
    /// The last handled request's head, whose buffers the next parsed head reuses (one per
    /// core; kept only while it holds at most [`SPARE_HEAD_BYTES`]).
    spare_head: Option<http::RequestHead>,
    /// The JSON body of the 202 (or 503) being written, reused from answer to answer.
    reply_body: String,
}

/// The most heap a core keeps in its spare request head (a larger head is freed after use).
const SPARE_HEAD_BYTES: usize = 8 * 1024;

impl Worker {
    /// Builds worker `id` with its listener and the parts of its core.
    pub fn new(
        id: usize,
        listener: std::net::TcpListener,
        shared: Arc<Shared>,
        hard_stop: Arc<AtomicBool>,
        parts: CoreParts,
    ) -> io::Result<Worker> {
        let CoreParts {
            poll,
            committer,
            pump,
            links,
        } = parts;
        let shared_backend = shared.io_backend;
        let mut listener = TcpListener::from_std(listener);
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let cfg = &shared.config;
        // Staged (one batch filling) plus with the helper (one batch).
        let max_outstanding = 2 * cfg.wal.max_batch;
        let limits = http::Limits {
            max_head_bytes: cfg.server.max_head_bytes,
            max_uri_bytes: cfg.server.max_uri_bytes,
            max_body_bytes: cfg.server.max_body_bytes,
            ..http::Limits::default()
        };
        let dispatcher = Dispatcher::new(
            id,
            Arc::new(shared.config.dispatch_spec()),
            CoreDispatchMetrics {
                core: shared.metrics.core(id),
                shared: shared.metrics_dispatch.clone(),
            },
            pump.slots(),
        )
        .with_budgets(|d| shared.cluster.budget_for(d));
        Ok(Worker {
            id,
            reactor: Reactor::new(poll),
            listener: Some(listener),
            conns: Conns::new(shared.config.server.max_connections_per_core),
            metrics: shared.metrics.core(id),
            sources: SourceCache::new(shared.sources.clone()),
            view: crate::ops::reload::CoreView::new(&shared.reload),
            shared,
            committer,
            pump,
            links,
            outstanding: 0,
            max_outstanding,
            seq: 0,
            offer_waiters: VecDeque::new(),
            claims: HashMap::new(),
            ids: EventIdGen::new(id),
            limits,
            hard_stop,
            draining_since: None,
            scratch: vec![0u8; crate::net::conn::READ_CHUNK].into_boxed_slice(),
            dates: DateCache::default(),
            date: String::new(),
            dispatcher,
            orphans: std::collections::HashMap::new(),
            reported_quiet: false,
            turn_now: 0,
            replays: books::Replays::default(),
            edge: books::Edge::default(),
            trimmer: Default::default(),
            backend: shared_backend,
            spare_head: None,
            reply_body: String::new(),
        })
    }

    fn refresh_date(&mut self) {
        let text = self.dates.get(unix_millis());
        if text != self.date {
            self.date.clear();
            self.date.push_str(text);
        }
    }

    fn now(&self) -> u64 {
        self.shared.clock.now_nanos()
    }

    /// Runs the loop until drained (or hard-stopped), on the backend chosen at start-up.
    pub fn run(mut self) {
        if self.backend == Backend::Uring {
            // The ring is single-issuer: it is set up on the thread that uses it.
            if let Err(e) = self.reactor.start_uring() {
                eprintln!(
                    "sluice: worker {}: setting up io_uring failed ({e}); this core runs on mio",
                    self.id
                );
            }
        }
        let mut events = Vec::new();
        let mut last_sweep = self.now();
        loop {
            self.finish_scrapes();
            self.submit_io();
            let mut timeout = self.turn_timeout();
            if self.reactor.backend() == Backend::Mio {
                // On mio the loop parks on its commit helper while a batch with requests is
                // out (`sched::commit`): measured side by side, the same durable 202s as
                // reading on, with a third of the switches beyond four per commit
                // (BENCHMARKS.md). On io_uring it reads on: disk and CPU overlap.
                timeout = self.committer.wait_for_commit(timeout);
            }
            if let Err(e) = self.reactor.wait(timeout, &mut events) {
                eprintln!("sluice: worker {}: waiting for I/O failed: {e}", self.id);
                return;
            }
            self.begin_turn();
            for ev in events.drain(..) {
                self.on_event(ev);
            }
            let closing = self.reactor.closing_sends() as u64;
            self.metrics.set_io_retired(closing);
            if self.end_turn(&mut last_sweep) {
                break;
            }
        }
        self.reactor.shutdown(&mut self.conns);
    }

    /// Submits the operations the turn's connections asked for; closes those that failed.
    fn submit_io(&mut self) {
        let mut failed = Vec::new();
        self.reactor.submit(&mut self.conns, &mut failed);
        for idx in failed {
            self.close(idx);
        }
    }

    /// Connection `idx` was read dry or written to: the reactor submits what it needs before
    /// the next wait.
    pub(super) fn note_io(&mut self, idx: usize) {
        if let Some(conn) = self.conns.get_mut(idx) {
            self.reactor.touch(idx, &mut conn.stream);
        }
    }

    /// How long the loop may sleep: until the next sweep, offer retry, dispatch deadline or
    /// accept retry.
    fn turn_timeout(&self) -> Duration {
        let mut timeout = if self.offer_waiters.is_empty() {
            SWEEP_EVERY
        } else {
            OFFER_RETRY
        };
        if let Some(at) = self.dispatcher.next_deadline() {
            let wait = Duration::from_nanos(at.saturating_sub(self.now()));
            timeout = timeout.min(wait.max(Duration::from_millis(1)));
        }
        self.edge_timeout(timeout, self.now())
    }

    fn begin_turn(&mut self) {
        self.refresh_date();
        // One clock read per loop turn for admission decisions (token buckets): a turn is
        // short (bounded work per event), and `Instant::now()` was most of a bucket
        // decision's cost.
        self.turn_now = self.now();
        self.follow_reload();
    }

    /// A reload: this core switches to the newest published generation here, at the top of a
    /// turn and again before each request is routed. The second check (one `Acquire` load)
    /// makes a reload's answer a barrier: a request sent after `POST /admin/reload` answered,
    /// or after `sluice_config_generation` showed the new number, is routed by it, even on a
    /// core that was mid-turn when the reload was published.
    fn follow_reload(&mut self) {
        if let Some(next) = self.view.pick_up(&self.shared.reload) {
            let (now, registry) = (self.turn_now, self.reactor.registry());
            let draining = self.shared.accepting_stopped(now);
            // Between two requests of this loop: the pump learns the new trigger → destination
            // map, the dispatcher the new destinations (limits, retry, timeouts, gates).
            let config = &next.value.config;
            self.pump.learn_handlers(config);
            let dispatcher = &mut self.dispatcher;
            let spec = Arc::new(config.dispatch_spec());
            dispatcher.reconfigure(spec, now, registry, draining);
        }
    }

    /// One event of the core's reactor.
    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Source {
                token: LISTENER, ..
            } => self.accept_all(),
            Event::Source {
                token,
                readable,
                writable,
            } if token.0 >= CLIENT_TOKEN_BASE => {
                let (now, registry) = (self.now(), self.reactor.registry());
                self.dispatcher
                    .on_ready(token, readable, writable, now, registry);
            }
            // The waker: the turn's work looks at what woke it.
            Event::Source { .. } => {}
            Event::Conn(ev) => self.on_conn_event(ev),
            // The own log's commit is back (`sched::commit`): answered at turn end.
            Event::FileDone(done) => self.committer.on_ring_done(done),
        }
    }

    /// Readiness or a completion on a connection.
    fn on_conn_event(&mut self, ev: ConnEvent) {
        let idx = ev.idx();
        let mut conn = self.conns.get_mut(idx);
        let stream = conn.as_mut().map(|c| &mut c.stream);
        let Some(ready) = self.reactor.settle(ev, stream) else {
            return;
        };
        if ready.starved {
            self.metrics.incr_io_pool_empty();
        }
        if let Some(c) = conn {
            c.readable |= ready.input;
            c.rdhup |= ready.closed;
        }
        if ready.drive {
            self.drive(idx);
        }
    }

    /// The work of every turn after its events: commits, offers, accepts, the cores' links,
    /// the sweep, shutdown. Returns true when the loop must stop.
    fn end_turn(&mut self, last_sweep: &mut u64) -> bool {
        self.take_commits();
        self.retry_offers();
        let now = self.now();
        self.retry_accept(now);
        self.exchange(now);
        if now.saturating_sub(*last_sweep) >= SWEEP_EVERY.as_nanos() as u64 {
            *last_sweep = now;
            self.sweep(now);
        }
        if self.hard_stop.load(Ordering::Relaxed) {
            return true;
        }
        self.shared.accepting_stopped(now) && self.drain_step(now)
    }

    // ----- connections ----------------------------------------------------------------------

    fn accept_all(&mut self) {
        loop {
            let Some(listener) = self.listener.as_ref() else {
                return;
            };
            match listener.accept() {
                Ok((stream, _)) => self.admit_connection(stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // EMFILE/ENFILE and friends: leave the rest in the backlog and retry on a
                    // timer (`budgets.rs`). Counted so operators see it.
                    return self.accept_failed(&e);
                }
            }
        }
    }

    fn admit_connection(&mut self, mut stream: TcpStream) {
        if self.conns.is_full() {
            self.metrics
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
        let stream = match self.reactor.adopt(idx, stream) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("sluice: worker {}: register failed: {e}", self.id);
                self.conns.unreserve(idx);
                return;
            }
        };
        let now = self.now();
        let reader = http::RequestReader::new(self.limits.clone()).with_body_gate();
        let budget = self.shared.body_budget.clone();
        let mut conn = Conn::new(stream, reader, budget, now);
        // A new connection must send its head within the header timeout (slowloris).
        conn.set_phase(Phase::Head, now);
        self.conns.put(idx, conn);
        self.metrics.incr_connections_accepted();
        self.metrics.set_connections_open(self.conns.open() as u64);
        self.drive(idx);
    }

    fn close(&mut self, idx: usize) {
        if let Some(c) = self.conns.take(idx) {
            self.reactor.release(idx, c.stream);
            // Events never offered to the WAL: release their dedupe claim and backlog share now.
            // Events already with the writer are settled when their completion arrives.
            for slot in &c.slots {
                if let Slot::Pending(p) = slot {
                    if p.offer.is_some() {
                        self.settle_claim(p.ticket, false);
                        self.settle_single_replay(p.ticket, false);
                        self.shared
                            .backlog
                            .release_for(&p.reply.trigger_id, p.reply.cost);
                    } else {
                        let slot = self.shared.backlog.slot(&p.reply.trigger_id);
                        self.orphans.insert(p.ticket, (slot, p.reply.cost));
                    }
                }
            }
            self.metrics.set_connections_open(self.conns.open() as u64);
        }
    }

    /// Reads, parses and answers as far as the connection allows, then writes; repeats while
    /// writing made room under the pipeline depth for requests already received.
    fn drive(&mut self, idx: usize) {
        if let Some(Phase::Linger) = self.conns.get(idx).map(|c| c.phase) {
            return self.discard(idx);
        }
        let cfg = &self.shared.config.server;
        let (depth, max_bytes) = (cfg.max_pipeline_depth, cfg.max_queued_response_bytes);
        loop {
            let at_depth = self.read_and_handle(idx);
            self.flush(idx);
            let room = self.conns.get(idx).is_some_and(|c| {
                c.phase != Phase::Linger && c.slots.len() < depth && c.queued_bytes() < max_bytes
            });
            if !(at_depth && room) {
                return;
            }
        }
    }

    /// Parses buffered requests and reads more, until the socket is drained, the connection is
    /// closing, or its queued responses reach `max_pipeline_depth` or
    /// `max_queued_response_bytes`. Returns true in the last case.
    fn read_and_handle(&mut self, idx: usize) -> bool {
        let draining = self.shared.phase() == Lifecycle::Draining;
        loop {
            let Some(conn) = self.conns.get_mut(idx) else {
                return false;
            };
            if conn.closing {
                return false;
            }
            if self.read_paused(idx) {
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
                    // The body now belongs to the ingest path and its bounds.
                    conn.body.release();
                    self.handle(idx, req, draining);
                    continue;
                }
                ReadEvent::HeadReady { expect_continue } => {
                    // The body gate: nothing of the body is read before the budget covers it.
                    if !self.admit_body(idx) {
                        return false;
                    }
                    let Some(conn) = self.conns.get_mut(idx) else {
                        return false;
                    };
                    if expect_continue && !conn.continue_sent {
                        conn.continue_sent = true;
                        let mut bytes = Vec::with_capacity(32);
                        http::write_continue(&mut bytes);
                        conn.push(Slot::Ready {
                            bytes,
                            close: false,
                        });
                        self.metrics.incr_http(Route::Webhook, 100);
                    }
                    continue;
                }
                ReadEvent::Incomplete => {
                    if conn.reader.pending_head().is_some() && !self.charge_body(idx) {
                        return false;
                    }
                }
                ReadEvent::Error(e) => {
                    self.respond_error(idx, e);
                    return false;
                }
            }
            let Some(conn) = self.conns.get_mut(idx) else {
                return false;
            };
            if !conn.readable || conn.peer_closed {
                return false;
            }
            match conn.read_into(&mut self.scratch) {
                Err(_) => {
                    self.close(idx);
                    return false;
                }
                Ok(0) => {}
                // After the read returned: every request in these bytes was sent before it.
                Ok(_) => {
                    conn.read_at = self.shared.clock.now_nanos();
                    if draining {
                        // The node is not quiet: idle connections stay open (`drain.rs`).
                        self.shared.note_drain_input(conn.read_at);
                    }
                }
            }
        }
    }

    /// Writes what is ready; closes when done or broken; updates the timeout phase.
    fn flush(&mut self, idx: usize) {
        self.note_io(idx);
        let now = self.now();
        let Some(conn) = self.conns.get_mut(idx) else {
            return;
        };
        if conn.phase == Phase::Linger {
            return;
        }
        match conn.flush(now) {
            Err(_) => return self.close(idx),
            Ok(Flush::Blocked) => {}
            Ok(Flush::Done) => {
                if conn.closing && conn.is_quiet() {
                    return self.linger(idx, now);
                }
            }
        }
        if conn.peer_closed && conn.is_quiet() {
            // The client will send nothing more and is owed nothing.
            return self.close(idx);
        }
        conn.trim();
        conn.update_phase(now);
    }

    // ----- requests ---------------------------------------------------------------------------

    // Every argument is a distinct part of the response; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    fn push_ready(
        &mut self,
        idx: usize,
        route: Route,
        status: u16,
        headers: &[(&str, &str)],
        body: &[u8],
        keep_alive: bool,
        head_only: bool,
    ) {
        self.metrics.incr_http(route, status);
        let Some(conn) = self.conns.get_mut(idx) else {
            return;
        };
        // `Date` and the caller's headers, on the stack (every route passes a few).
        let mut inline = [("", ""); 8];
        let heap: Vec<(&str, &str)>;
        let all: &[(&str, &str)] = if headers.len() < inline.len() {
            inline[0] = ("Date", &self.date);
            inline[1..=headers.len()].copy_from_slice(headers);
            &inline[..=headers.len()]
        } else {
            heap = std::iter::once(("Date", &*self.date))
                .chain(headers.iter().copied())
                .collect();
            &heap
        };
        // `write_response` reserves the exact size: one allocation.
        let mut bytes = Vec::new();
        http::write_response(&mut bytes, status, all, body, keep_alive, head_only);
        conn.push(Slot::Ready {
            bytes,
            close: !keep_alive,
        });
        if !keep_alive {
            conn.closing = true;
        }
    }

    fn respond_error(&mut self, idx: usize, e: HttpError) {
        // The failed reader dropped any partial body.
        if let Some(c) = self.conns.get_mut(idx) {
            c.body.release();
        }
        let body = format!("{}\n", e.reason());
        self.push_ready(
            idx,
            Route::Unmatched,
            e.status(),
            &[("Content-Type", http::TEXT_PLAIN)],
            body.as_bytes(),
            false,
            false,
        );
    }

    fn handle(&mut self, idx: usize, req: Request, draining: bool) {
        let Request { head, body } = req;
        self.route_request(idx, &head, body, draining);
        if head.heap_bytes() <= SPARE_HEAD_BYTES {
            self.spare_head = Some(head);
        }
    }

    fn route_request(
        &mut self,
        idx: usize,
        head: &http::RequestHead,
        body: Vec<u8>,
        draining: bool,
    ) {
        let keep_alive = head.keep_alive && !draining;
        let head_only = head.method.as_str() == "HEAD";
        if !keep_alive {
            // This is the connection's last request: nothing pipelined behind it is read (and
            // so nothing behind it is ingested without an answer).
            if let Some(c) = self.conns.get_mut(idx) {
                c.closing = true;
            }
        }
        self.follow_reload();
        let shared = self.shared.clone();
        let router = self.view.router().clone();
        match router.route(head.method.as_str(), head.path()) {
            RouteMatch::Ops(ep @ (OpsEndpoint::Ui | OpsEndpoint::State | OpsEndpoint::Ledger)) => {
                let a = crate::ops::dashboard::answer(&shared, ep, head.header("authorization"));
                let h = a.headers();
                self.push_ready(idx, Route::Ui, a.status, &h, &a.body, keep_alive, head_only)
            }
            RouteMatch::Ops(OpsEndpoint::Event) => {
                let auth = head.header("authorization");
                let a = crate::ops::events_api::answer(&shared, head.path(), head.query(), auth);
                let h = a.headers();
                self.push_ready(idx, Route::Ui, a.status, &h, &a.body, keep_alive, head_only)
            }
            RouteMatch::Ops(ep) => self.handle_ops(idx, ep, keep_alive, head_only),
            RouteMatch::Admin(route) => self.handle_admin(idx, route, head, keep_alive, head_only),
            RouteMatch::MethodNotAllowed(allow) => self.push_ready(
                idx,
                Route::Unmatched,
                405,
                &[("Allow", allow), ("Content-Type", http::TEXT_PLAIN)],
                b"method not allowed\n",
                keep_alive,
                head_only,
            ),
            RouteMatch::BadSource => self.push_ready(
                idx,
                Route::Webhook,
                400,
                &[("Content-Type", http::TEXT_PLAIN)],
                b"invalid source: must match [A-Za-z0-9._-]{1,64}\n",
                keep_alive,
                head_only,
            ),
            RouteMatch::NotFound => self.push_ready(
                idx,
                Route::Unmatched,
                404,
                &[("Content-Type", http::TEXT_PLAIN)],
                b"not found\n",
                keep_alive,
                head_only,
            ),
            RouteMatch::Ingest { trigger_id, source } => {
                self.handle_ingest(idx, head, body, trigger_id, source, keep_alive)
            }
        }
    }
}
