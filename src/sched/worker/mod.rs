//! One core's event loop, written once over the core's reactor (`net::io::Reactor`, mio or
//! io_uring below it): submit, wait, hand the events to their owners, then the turn's work
//! (`end_turn`). The loop owns nothing of a request itself:
//!
//! - `net::server::Server`: the core's listener and connections — accept, read, frame, the
//!   body gate, pipelining bounds, deadlines, writes. It yields complete requests to its
//!   handler, `ingest::serve::Serve`, which routes them: ingest to the core's
//!   `ingest::front::Front` (admission to the 202: pipeline, dedupe claims, staging into the
//!   core's group commit itself, settling on the commit's answer), every other route to the
//!   core's handler side (`sched::handler::Core`, lent for each server call by `lend.rs`). A
//!   batch back from its commit is settled inside `Server::answer`, which then writes the
//!   connections it answered (`links.rs`).
//! - the core's commit helper (`wal::commit`), its pump and its dispatcher, and its links to
//!   the other cores (`sched::wiring`; what goes over them each turn is `dispatch::exchange`'s,
//!   called from `links.rs`).
//!
//! Each worker owns: its reactor, its own `SO_REUSEPORT` listener (the kernel spreads new
//! connections across workers), its server, its ingest front, a shard of the metrics, its
//! log's commit helper, its pump and its dispatcher (`CoreParts`). Nothing here takes a lock on
//! the request path, except the dedupe index's sharded locks for triggers with `dedupe` (held
//! for one hash-map operation; `ingest::dedupe`).
//!
//! An ingest request: the server frames it → `ingest::serve` routes it → the front runs the
//! pipeline and stages the record in the core's next group commit (if that batch is full, it
//! retries every millisecond until `offer_timeout`, then `503 wal_busy`) → at the end of the
//! loop turn the batch goes to the core's commit helper, which writes and syncs it and wakes the
//! poll once → the front settles the claim and queues the `202` (or `503 wal_unavailable`) in
//! request order, and the durable event goes to the core's pump from memory (`links.rs`).
//!
//! Bounds: connections ≤ `max_connections_per_core` (past it: `503` and close); ingest appends
//! staged or with the commit helper ≤ `2 × max_batch`; queued responses per connection ≤
//! `max_pipeline_depth` and `max_queued_response_bytes`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mio::Token;

use crate::dispatch::deliver::dispatcher::{Dispatcher, CLIENT_TOKEN_BASE};
use crate::dispatch::dlq::online::OnlineReplays;
use crate::ingest::front::Front;
use crate::ingest::pending::PendingIngest;
use crate::metrics::CoreMetrics;
use crate::net::io::event::ConnEvent;
use crate::net::io::{Backend, Event, Reactor, SOURCE_TOKEN_BASE};
use crate::net::server::{Server, LISTENER};
use crate::ops::reload::CoreView;
use crate::sched::commit::{self, Committer};
use crate::sched::handler::Scrapes;
use crate::sched::pump::CorePump;
use crate::sched::readers::ReadLink;
use crate::sched::state::Shared;

mod build;
mod drain;
mod lend;
mod links;

pub use crate::sched::wiring::CoreLinks;
/// The poll token of a core's waker.
pub const WAKER_TOKEN: Token = crate::sched::wiring::WAKER;

// The core's own sources and the dispatcher's outbound sockets (on mio) are sources of the
// reactor, not connections.
const _: () = assert!(
    CLIENT_TOKEN_BASE >= SOURCE_TOKEN_BASE
        && WAKER_TOKEN.0 >= SOURCE_TOKEN_BASE
        && LISTENER.0 >= SOURCE_TOKEN_BASE
);

/// How often connection deadlines are checked.
const SWEEP_EVERY: Duration = Duration::from_millis(100);
/// Poll timeout while requests wait for room in the core's next batch.
const OFFER_RETRY: Duration = Duration::from_millis(1);

/// What a worker's core owns besides its connections: its reactor (whose waker its commit
/// helper and the other cores hold), its commit helper, its pump and its links to other cores.
#[derive(Debug)]
pub struct CoreParts {
    pub reactor: Reactor,
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
    /// The core's listener and connections.
    server: Server<PendingIngest>,
    shared: Arc<Shared>,
    metrics: CoreMetrics,
    /// Ingest requests from admission to their reply.
    front: Front,
    /// The core's commit helper (its log's group commit, dead letters).
    committer: Committer,
    /// The core's pump over the logs it owns.
    pump: CorePump,
    /// Rings and wakers to and from the other cores.
    links: CoreLinks,
    hard_stop: Arc<AtomicBool>,
    draining_since: Option<u64>,
    /// Delivery to the destinations this core owns.
    dispatcher: Dispatcher,
    /// When this core reported itself quiet during the drain.
    reported_quiet: bool,
    /// The injected clock read once per loop turn (nanos): token-bucket decisions use it.
    turn_now: u64,
    /// Bulk and single DLQ replays and discards on their way (`dispatch::dlq::online`).
    replays: OnlineReplays,
    /// Deferred scrapes (`sched::handler`).
    scrapes: Scrapes,
    /// This core's end of the operator readers (`sched::readers`).
    reads: ReadLink,
    /// Gives freed memory back after a wave of connections or bodies (`sched::alloc`).
    trimmer: crate::sched::alloc::Trimmer,
    /// The configuration generation this core runs (`ops::reload`): its router for routing.
    view: CoreView,
    /// The backend asked for; `uring` is set up on the core's own thread when the loop starts.
    backend: Backend,
}

impl Worker {
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
        match self.reactor.clients() {
            Ok(clients) => self.dispatcher.attach(clients),
            // Outbound connections stay on the poll (mio) the dispatcher was built with.
            Err(e) => eprintln!(
                "sluice: worker {}: the outbound streams stay on mio ({e})",
                self.id
            ),
        }
        let mut events = Vec::new();
        let mut last_sweep = self.now();
        loop {
            self.finish_scrapes();
            let (server, mut net, mut core) = self.split();
            server.submit(&mut net, &mut core);
            // The outbound connections' operations ride the same `io_uring_enter`.
            self.dispatcher.submit_io(&mut self.reactor);
            let mut timeout = self.turn_timeout();
            if self.reactor.backend() == Backend::Mio {
                // On mio the loop parks on its commit helper while a batch with requests is
                // out (`wal::commit`): measured side by side, the same durable 202s as
                // reading on, with a third of the switches beyond four per commit
                // (BENCHMARKS.md). On io_uring it reads on: disk and CPU overlap.
                timeout = self.committer.wait_for_commit(timeout);
            }
            if let Err(e) = self.reactor.wait(timeout, &mut events) {
                eprintln!("sluice: worker {}: waiting for I/O failed: {e}", self.id);
                return;
            }
            if self.turn(&mut events, &mut last_sweep) {
                break;
            }
        }
        self.server.shutdown(&mut self.reactor);
    }

    /// One turn on the events the reactor's wait gave: each to its owner, then the turn's work.
    /// Returns true when the loop must stop.
    fn turn(&mut self, events: &mut Vec<Event>, last_sweep: &mut u64) -> bool {
        self.begin_turn();
        for ev in events.drain(..) {
            self.on_event(ev);
        }
        let closing = self.reactor.closing_sends() as u64;
        self.metrics.set_io_retired(closing);
        self.metrics
            .set_io_fixed_files(self.reactor.registered_files() as u64);
        self.end_turn(last_sweep)
    }

    /// How long the loop may sleep: until the next sweep, offer retry, dispatch deadline or
    /// accept retry.
    fn turn_timeout(&self) -> Duration {
        let mut timeout = if self.front.offers_waiting() {
            OFFER_RETRY
        } else {
            SWEEP_EVERY
        };
        if self.pump.more_to_read() {
            // It stopped reading a log at its per-turn bound (`dispatch::pump`).
            return Duration::ZERO;
        }
        if let Some(at) = self.dispatcher.next_deadline() {
            let wait = Duration::from_nanos(at.saturating_sub(self.now()));
            timeout = timeout.min(wait.max(Duration::from_millis(1)));
        }
        if self.scrapes.pending() {
            return Duration::ZERO;
        }
        // Requests whose batch waits for replication are answered at their `ack_timeout`.
        let timeout = commit::poll_timeout(&self.committer, timeout);
        self.server.accept_timeout(timeout, self.now())
    }

    fn begin_turn(&mut self) {
        // Before any id is minted this turn (`dispatch::horizon`, "Idle cores").
        self.pump.wake_horizon();
        self.server.refresh_date();
        // One clock read per loop turn for admission decisions (token buckets): a turn is
        // short (bounded work per event), and `Instant::now()` was most of a bucket
        // decision's cost.
        self.turn_now = self.now();
        self.follow_reload();
        self.take_adopted();
    }

    /// Logs adopted from another node while the node runs (`sched::logs`): each to the pump and
    /// the commit helper, at the same slot, in the same turn.
    fn take_adopted(&mut self) {
        let Some(logs) = self.shared.adoptions().take(self.id) else {
            return;
        };
        for a in logs {
            self.pump.adopt(a.pump, a.helper.shared.clone());
            self.committer.adopt(a.helper, a.link);
        }
    }

    /// One event of the core's reactor.
    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Source {
                token: LISTENER, ..
            } => {
                let (server, mut net, mut core) = self.split();
                server.accept_all(&mut net, &mut core);
            }
            Event::Source {
                token,
                readable,
                writable,
            } if token.0 >= CLIENT_TOKEN_BASE => {
                let now = self.now();
                self.dispatcher.on_ready(token.0, readable, writable, now);
            }
            // The waker: the turn's work looks at what woke it.
            Event::Source { .. } => {}
            Event::Conn(ev) => self.on_conn_event(ev),
            Event::Out(ev) => {
                let now = self.now();
                let reactor = &mut self.reactor;
                self.dispatcher.on_completion(ev, reactor, now);
            }
            // The own log's commit is back (`wal::commit`): answered at turn end.
            Event::FileDone(done) => {
                (self.committer).on_ring_done((done.buf, done.written, done.synced))
            }
        }
    }

    /// Readiness or a completion on a connection.
    fn on_conn_event(&mut self, ev: ConnEvent) {
        let idx = ev.idx();
        let (server, net, _) = self.split();
        let Some(ready) = server.settle(net.reactor, ev) else {
            return;
        };
        if ready.starved {
            self.metrics.incr_io_pool_empty();
        }
        if ready.drive {
            self.drive(idx);
        }
    }

    /// Reads, frames and answers on connection `idx` as far as it allows, then writes
    /// (`net::server::Server::drive`).
    fn drive(&mut self, idx: usize) {
        let (server, mut net, mut core) = self.split();
        server.drive(&mut net, &mut core, idx);
    }

    /// The work of every turn after its events: commits, offers, accepts, the cores' links,
    /// the sweep, shutdown. Returns true when the loop must stop.
    fn end_turn(&mut self, last_sweep: &mut u64) -> bool {
        self.take_commits();
        self.answer_unreplicated();
        self.take_reads();
        self.retry_offers();
        let now = self.now();
        let (server, mut net, mut core) = self.split();
        server.retry_accept(&mut net, &mut core, now);
        self.exchange(now);
        if now.saturating_sub(*last_sweep) >= SWEEP_EVERY.as_nanos() as u64 {
            *last_sweep = now;
            self.sweep(now);
        }
        self.publish_horizon(now);
        if self.hard_stop.load(Ordering::Relaxed) {
            return true;
        }
        self.shared.accepting_stopped(now) && self.drain_step(now)
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Instant;

    use super::*;
    use crate::config::{Config, Overrides};

    /// The loop's turn driven by hand: the test stands in for the reactor's wait and hands each
    /// turn the events the wait would have given — the listener's readiness, then the wake of
    /// the commit helper — over a real one-core node (sockets, log, helper thread).
    #[test]
    fn one_turn_admits_and_stages_a_request_and_a_later_turn_answers_it_once_durable() {
        let dir = tempfile::tempdir().unwrap();
        let text = "[server]\nworkers = 1\nio = \"mio\"\nlisten = \"127.0.0.1:0\"\n\
                    [[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\n";
        let overrides = Overrides {
            data_dir: Some(dir.path().to_path_buf()),
            ..Overrides::default()
        };
        let raw = Config::parse_manifest(text).unwrap();
        let config = Config::build(raw, &|_| None, &overrides).unwrap();
        let (mut w, addr, readers) = crate::sched::runtime::test_worker(config);
        let mut client = TcpStream::connect(addr).unwrap();
        let request = b"POST /t HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                        Content-Length: 2\r\n\r\n{}";
        client.write_all(request).unwrap();
        let mut last_sweep = w.now();
        let source = |token| Event::Source {
            token,
            readable: true,
            writable: false,
        };
        assert!(!w.turn(&mut vec![source(LISTENER)], &mut last_sweep));
        assert_eq!(
            w.front.in_flight(),
            1,
            "accepted, read, admitted and staged"
        );
        assert!(
            !w.committer.is_idle(),
            "with the helper from the turn's end"
        );
        client
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        while !got.windows(4).any(|b| b == b"\r\n\r\n") {
            assert!(Instant::now() < deadline, "answered within 10 s");
            assert!(!w.turn(&mut vec![source(WAKER_TOKEN)], &mut last_sweep));
            let mut buf = [0u8; 512];
            if let Ok(n) = client.read(&mut buf) {
                got.extend_from_slice(&buf[..n]);
            }
        }
        let answer = String::from_utf8_lossy(&got);
        assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
        assert_eq!(w.front.in_flight(), 0, "settled by the commit's turn");
        // No handler: the pump finishes the event at once and its record goes to this core's
        // shelf for the next request (`wal::shelf`), which the gauge shows.
        while w.metrics.event_shelf() == 0 {
            assert!(Instant::now() < deadline, "shelved within 10 s");
            assert!(!w.turn(&mut vec![source(WAKER_TOKEN)], &mut last_sweep));
        }
        assert_eq!(w.metrics.event_shelf(), 1);
        readers.stop();
    }
}
