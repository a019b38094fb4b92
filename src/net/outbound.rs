//! The outbound pool of one core's dispatcher: the I/O half of delivery.
//!
//! It opens non-blocking TCP connections to destinations, keeps answered keep-alive connections
//! idle for reuse, writes an encoded request, reads and parses the response with the sans-IO
//! [`ResponseReader`], and hands back what happened to each attempt as a [`Finished`]: a
//! response or a failure class ([`Exchange`]), or a stale keep-alive connection that closed
//! before answering. It knows no domain type and decides nothing about the attempt: permits,
//! gates, classification, retries and outcomes belong to its caller (`dispatch`, which maps an
//! [`Exchange`] to its attempt result). The pool is generic over the payload `T` an attempt
//! carries (the dispatcher's job and permit), so it is tested here with plain numbers against a
//! real local listener.
//!
//! A pool belongs to one worker core and is driven from that core's loop: plain
//! single-threaded data. Its sockets are the core's outbound streams ([`Clients`], the same
//! `net::io` API as inbound connections): on mio, non-blocking sockets registered under
//! `Token(CLIENT_TOKEN_BASE + id)` whose readiness comes to [`OutboundPool::on_ready`]; on
//! io_uring, streams on the core's ring (connect watched by a `POLL_ADD`, then sends and
//! receives) submitted with the turn's one `io_uring_enter` ([`OutboundPool::submit`]), whose
//! completions come to [`OutboundPool::on_completion`]. The pool works the same either way:
//! it reads and writes its streams until `WouldBlock`.
//!
//! Bounds: busy connections ≤ attempts started and not finished (the dispatcher starts one per
//! permit, so ≤ `max_in_flight` per destination); idle connections per destination ≤ the
//! `idle_cap` the caller passes (the dispatcher passes `max_in_flight`), each closed after
//! `idle_timeout`; response bytes kept per attempt ≤ `ClientLimits::max_body_keep`; one read
//! scratch buffer of `READ_CHUNK` bytes per pool (mio and TLS; a plain io_uring stream is parsed
//! where it received); request buffers: one per open connection plus ≤ `SPARE_BUFFERS` spare
//! ones (each ≤ `SPARE_BUFFER_MAX`) for reuse (a request handed to an io_uring stream is its
//! outbox, within the stream's bounds, and the stream's empty buffer takes its place); the
//! timers: two heaps (`net::deadlines`), attempt deadlines of the busy connections and expiry
//! of the idle ones, each ≤ 2 × its live entries + `COMPACT_SLACK` ([`OutboundPool::timer_entries`]).
//!
//! Timers cost what is due, not what is open: [`OutboundPool::on_tick`] pops the deadlines that
//! passed (`O(log n)` each) and [`OutboundPool::next_deadline`] (the earliest attempt deadline,
//! for the poll timeout) is a peek. Starting, answering and closing a connection arm and disarm
//! its timers.
//!
//! Per delivery on a kept-alive connection: one send of the whole request (written from a
//! recycled buffer), one receive that usually holds the whole response (parsed in place, its
//! fields not copied out), no `epoll_ctl` (registered once, edge-triggered, for both
//! directions), no `getsockopt` (asked only while connecting), no allocation by the pool. On
//! mio the send and the receive are a `sendto` and a `recvfrom`; on io_uring they are ring
//! operations carried by the `io_uring_enter`s the core makes anyway, and the request and the
//! response are not copied through the pool: the request buffer becomes the stream's outbox
//! whole ([`Stream::hand_over`]; a request over `net::io::uring::OUT_CAP`, or one behind bytes
//! still in the outbox, is copied in as before), and the response is parsed in the stream's
//! inbox ([`Stream::read_with`]). One copy is left on the way in: the receive's completion
//! copies its bytes out of the ring's pooled buffer into the inbox, so that the buffer goes
//! back to the kernel at once (`net::io::uring`). Through TLS, rustls copies both ways as it
//! encrypts and decrypts.
//!
//! An `https` destination's connections speak TLS through [`Wire`] (rustls driven over the same
//! non-blocking stream, on this core's loop, on both backends); the pool sees plaintext either
//! way. A TLS connection is written and read on every readiness event or completion (TLS
//! couples the directions), and a certificate or handshake failure ends the attempt as
//! [`Failure::Tls`].
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use mio::Token;

use crate::net::deadlines::Deadlines;
use crate::net::http::client::{ClientLimits, ResponseEvent, ResponseReader};
use crate::net::io::event::ConnEvent;
use crate::net::io::{Clients, Reactor, Stream, Streams};
use crate::net::tls::{tls_fault, TlsClient, TlsFault, Wire};
use crate::sync::clock::unix_millis;

/// Body bytes of each response kept for the attempt record (`wal::MAX_RESPONSE_PREFIX_BYTES`,
/// checked in `dispatch::job`).
pub const RESPONSE_PREFIX_BYTES: usize = 512;

/// Tokens at and above this value belong to outbound connections.
pub const CLIENT_TOKEN_BASE: usize = 1 << 40;

/// Bytes read from a socket per `read` call.
const READ_CHUNK: usize = 16 * 1024;
/// Request buffers kept for reuse besides those of the open connections
/// ([`OutboundPool::request_buffer`]).
const SPARE_BUFFERS: usize = 64;
/// A spare request buffer larger than this is dropped rather than kept (one outsized event
/// must not pin its memory).
const SPARE_BUFFER_MAX: usize = 64 * 1024;

/// Where an attempt goes.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The destination's index (idle connections are kept per destination).
    pub dest: usize,
    /// Host to resolve on first use (an IP literal resolves without I/O).
    pub host: &'a str,
    pub port: u16,
    /// Idle keep-alive connections kept for this destination at most.
    pub idle_cap: usize,
    /// TLS settings of an `https` destination (`None`: plain TCP).
    pub tls: Option<&'a TlsClient>,
}

/// How an exchange on the wire ended, as the pool sees it (no meaning attached: the caller
/// classifies it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exchange {
    /// A complete response. `retry_after` is its parsed `Retry-After` header (delta-seconds,
    /// or an HTTP date converted to a delay from now), if present.
    Response {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// No complete response (the connection is closed).
    Failed(Failure),
}

/// Why an exchange ended without a complete response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The TCP connection could not be established (no address, refused, unreachable).
    Connect,
    /// The attempt's deadline passed before a complete response.
    Timeout,
    /// TLS failed: the certificate, the handshake, or a hang-up during it.
    Tls(TlsFault),
    /// The connection broke mid-exchange, or the response was malformed or truncated.
    Broken,
}

/// What happened to an attempt the pool carried.
#[derive(Debug)]
pub enum Finished<T> {
    /// The attempt ended: a complete response (the connection went back to the idle set or was
    /// closed) or a failure (the connection is closed).
    Done {
        dest: usize,
        payload: T,
        result: Exchange,
        /// The first [`RESPONSE_PREFIX_BYTES`] of the response body (empty without a response
        /// or with an empty body): the attempt record's `response_prefix`.
        body_prefix: Vec<u8>,
    },
    /// A reused keep-alive connection broke before any byte of the response arrived: the
    /// server had closed it. Not an attempt; resend on a fresh connection.
    Stale { dest: usize, payload: T },
}

impl<T> Finished<T> {
    /// The destination the attempt went to.
    pub fn dest(&self) -> usize {
        match self {
            Finished::Done { dest, .. } | Finished::Stale { dest, .. } => *dest,
        }
    }
}

/// How [`OutboundPool::start`] carried an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// On an idle keep-alive connection of the destination.
    Reused,
    /// On a new connection (the request is written once it is established).
    Opened,
}

#[derive(Debug)]
enum ConnState<T> {
    /// Placeholder while a broken connection is being torn down.
    Broken,
    /// Kept alive for reuse; its expiry is in the pool's idle timers.
    Idle,
    /// Its attempt's deadline is in the pool's attempt timers.
    Busy(InFlight<T>),
}

/// An attempt on the wire.
#[derive(Debug)]
struct InFlight<T> {
    payload: T,
    deadline: u64,
    /// The connection had served a request before this one (a stale keep-alive connection
    /// closing under us is reported as [`Finished::Stale`]).
    reused: bool,
    got_bytes: bool,
}

#[derive(Debug)]
struct ClientConn<T> {
    dest: usize,
    wire: Wire<Stream>,
    state: ConnState<T>,
    /// The request, `wbuf[wpos..]` not yet taken by the stream (empty once the stream took it
    /// whole, `Stream::hand_over`).
    wbuf: Vec<u8>,
    wpos: usize,
    /// The stream took bytes of the current request (so its connect had completed).
    accepted: bool,
    rbuf: Vec<u8>,
    reader: ResponseReader,
    served: u64,
}

/// A destination's connections as the pool sees them.
#[derive(Debug, Default)]
struct DestConns {
    /// Idle keep-alive connections, most recently used last.
    idle: Vec<usize>,
    /// Idle connections kept at most (the last [`Target::idle_cap`] seen).
    idle_cap: usize,
    /// Open connections, busy and idle.
    open: usize,
    /// Resolved on first use.
    addr: Option<SocketAddr>,
}

/// One core's outbound connections.
#[derive(Debug)]
pub struct OutboundPool<T> {
    conns: Vec<Option<ClientConn<T>>>,
    free: Vec<usize>,
    dests: HashMap<usize, DestConns>,
    scratch: Box<[u8]>,
    /// Emptied request buffers for the next requests: ≤ [`SPARE_BUFFERS`], each of capacity
    /// ≤ [`SPARE_BUFFER_MAX`].
    spare: Vec<Vec<u8>>,
    /// Idle connections older than this (ns) are closed on a tick.
    idle_timeout: u64,
    /// The busy connections' attempt deadlines: one live entry per busy connection
    /// (`net::deadlines`: stale entries at most its live ones + `COMPACT_SLACK`).
    attempt_timers: Deadlines,
    /// When each idle connection expires (when it went idle + `idle_timeout` + 1 ns: closed
    /// once idle for longer than the timeout): one live entry per idle connection, bound as
    /// above.
    idle_timers: Deadlines,
    /// The streams on the core's backend.
    clients: Clients,
    /// Connections whose ring operations could not be submitted, by id and stream generation:
    /// failed on the next tick if the id still holds that stream. Bound: the pool's
    /// connections (one entry per stream per submit).
    unsubmitted: Vec<(usize, u32)>,
}

/// The pool's connections as the reactor sees them when it submits their operations.
struct ById<'a, T>(&'a mut [Option<ClientConn<T>>]);

impl<T> Streams for ById<'_, T> {
    fn stream(&mut self, id: usize) -> Option<&mut Stream> {
        self.0.get_mut(id)?.as_mut().map(|c| c.wire.stream())
    }
}

impl<T> OutboundPool<T> {
    /// A pool closing idle connections after `idle_timeout_nanos`.
    pub fn new(idle_timeout_nanos: u64) -> OutboundPool<T> {
        OutboundPool {
            conns: Vec::new(),
            free: Vec::new(),
            dests: HashMap::new(),
            scratch: vec![0u8; READ_CHUNK].into_boxed_slice(),
            spare: Vec::new(),
            idle_timeout: idle_timeout_nanos,
            attempt_timers: Deadlines::default(),
            idle_timers: Deadlines::default(),
            clients: Clients::default(),
            unsubmitted: Vec::new(),
        }
    }

    /// Opens new connections on `clients` (the core's reactor's outbound side,
    /// [`crate::net::io::Reactor::clients`]: mio until its loop set up the ring, then the
    /// loop's backend). A connection already open stays on its backend until it closes
    /// (release and touch go by the stream's own kind; both handles are of the same poll).
    pub fn attach(&mut self, clients: Clients) {
        if !self.clients.attached() || self.clients.backend() != clients.backend() {
            self.clients = clients;
        }
    }

    /// Submits the ring operations the turn's work on the connections asked for (io_uring;
    /// nothing on mio). Call once per turn, before the reactor's wait.
    pub fn submit(&mut self, reactor: &mut Reactor) {
        let mut ids = ById(&mut self.conns);
        reactor.submit_out(&mut self.clients, &mut ids, &mut self.unsubmitted);
    }

    /// A completion of one of the pool's streams ([`crate::net::io::Event::Out`], io_uring).
    /// Pushes the attempt's end, if it ended, to `out`.
    pub fn on_completion(
        &mut self,
        ev: ConnEvent,
        reactor: &mut Reactor,
        now: u64,
        out: &mut Vec<Finished<T>>,
    ) {
        let id = ev.idx();
        let stream = self
            .conns
            .get_mut(id)
            .and_then(Option::as_mut)
            .map(|c| c.wire.stream());
        let Some(ready) = reactor.settle_out(ev, stream, &mut self.clients) else {
            return;
        };
        if ready.drive {
            self.drive(id, ready.input, true, now, out);
        }
    }

    /// Stream `id` was read or written: its operations go out with the next submit.
    fn touch(&mut self, id: usize) {
        if let Some(c) = self.conns.get_mut(id).and_then(Option::as_mut) {
            self.clients.touch(id, c.wire.stream());
        }
    }

    /// Attempts on the wire (each busy connection has its attempt's deadline armed).
    pub fn in_flight(&self) -> usize {
        self.attempt_timers.live()
    }

    /// Entries in the pool's two timer heaps, live and stale: at most 2 × the open connections
    /// + 2 × `net::deadlines::COMPACT_SLACK`.
    pub fn timer_entries(&self) -> usize {
        self.attempt_timers.entries() + self.idle_timers.entries()
    }

    /// Open connections (busy and idle) to `dest`.
    pub fn connections(&self, dest: usize) -> usize {
        self.dests.get(&dest).map_or(0, |d| d.open)
    }

    /// Idle keep-alive connections to `dest`.
    pub fn idle(&self, dest: usize) -> usize {
        self.dests.get(&dest).map_or(0, |d| d.idle.len())
    }

    /// An empty buffer to encode the next request into (for [`Self::start`]): one a finished
    /// request left, when there is one, so that a warm pool allocates none per request.
    pub fn request_buffer(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }

    /// The earliest attempt deadline (for the poll timeout; idle expiry waits for a tick).
    pub fn next_deadline(&self) -> Option<u64> {
        self.attempt_timers.peek()
    }

    /// Sends `request` (an encoded HTTP request) to `target` on an idle connection, or on a new
    /// one. The attempt times out at `deadline`. A failure known at once (no address, connect
    /// refused, registration failed, a reused connection broke on the first write) is returned
    /// as the attempt's end; later ones come from [`Self::on_ready`] and [`Self::on_tick`].
    pub fn start(
        &mut self,
        target: Target<'_>,
        payload: T,
        request: Vec<u8>,
        deadline: u64,
    ) -> Result<Started, Finished<T>> {
        let d = target.dest;
        self.dests.entry(d).or_default().idle_cap = target.idle_cap;
        let attempt = InFlight {
            payload,
            deadline,
            reused: false,
            got_bytes: false,
        };
        let reuse = self.dests.get_mut(&d).and_then(|x| x.idle.pop());
        // An idle id always names an open connection (`close` removes it from the idle set).
        if let Some((id, c)) = reuse.and_then(|id| Some((id, self.conns[id].as_mut()?))) {
            let old = std::mem::replace(&mut c.wbuf, request);
            c.wpos = 0;
            c.accepted = false;
            let mut attempt = attempt;
            attempt.reused = c.served > 0;
            c.state = ConnState::Busy(attempt);
            self.idle_timers.disarm(id);
            self.attempt_timers.arm(id, deadline);
            recycle(&mut self.spare, old);
            let written = self.write(id);
            self.touch(id);
            return match written {
                Some(f) => Err(f),
                None => Ok(Started::Reused),
            };
        }
        self.connect(target, attempt, request)
    }

    fn connect(
        &mut self,
        target: Target<'_>,
        attempt: InFlight<T>,
        wbuf: Vec<u8>,
    ) -> Result<Started, Finished<T>> {
        let d = target.dest;
        let connect_error = |attempt: InFlight<T>| Finished::Done {
            dest: d,
            payload: attempt.payload,
            result: Exchange::Failed(Failure::Connect),
            body_prefix: Vec::new(),
        };
        let id = match self.free.pop() {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        let token = Token(CLIENT_TOKEN_BASE + id);
        let opened = self
            .resolve(target)
            .and_then(|addr| self.clients.connect(addr, token));
        let stream = match opened {
            Ok(s) => s,
            Err(_) => {
                self.free.push(id);
                return Err(connect_error(attempt));
            }
        };
        let wire = match Wire::new(stream, target.tls) {
            Ok(w) => w,
            Err((e, stream)) => {
                self.clients.release(id, stream);
                self.free.push(id);
                return Err(Finished::Done {
                    dest: d,
                    payload: attempt.payload,
                    result: Exchange::Failed(failure(&e, Failure::Connect)),
                    body_prefix: Vec::new(),
                });
            }
        };
        let mut conn = ClientConn {
            dest: d,
            wire,
            state: ConnState::Broken,
            wbuf,
            wpos: 0,
            accepted: false,
            rbuf: Vec::new(),
            reader: ResponseReader::new(ClientLimits::default())
                .status_only()
                .keeping_body(RESPONSE_PREFIX_BYTES),
            served: 0,
        };
        self.dests.entry(d).or_default().open += 1;
        self.attempt_timers.arm(id, attempt.deadline);
        conn.state = ConnState::Busy(attempt);
        self.conns[id] = Some(conn);
        // The write happens on the first writable event (connection established); on io_uring
        // the connect's watch goes out with the next submit.
        self.touch(id);
        Ok(Started::Opened)
    }

    /// Resolves the destination's address once (a blocking lookup on first use only; an IP
    /// literal resolves without I/O).
    fn resolve(&mut self, target: Target<'_>) -> io::Result<SocketAddr> {
        let dest = self.dests.entry(target.dest).or_default();
        if let Some(a) = dest.addr {
            return Ok(a);
        }
        let addr = std::net::ToSocketAddrs::to_socket_addrs(&(target.host, target.port))?
            .next()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{} did not resolve", target.host),
                )
            })?;
        dest.addr = Some(addr);
        Ok(addr)
    }

    /// Readiness of an outbound connection. Pushes the attempt's end, if it ended, to `out`;
    /// an answered keep-alive connection is idle (reusable) before that happens.
    pub fn on_ready(
        &mut self,
        token: usize,
        readable: bool,
        writable: bool,
        now: u64,
        out: &mut Vec<Finished<T>>,
    ) {
        let Some(id) = token.checked_sub(CLIENT_TOKEN_BASE) else {
            return;
        };
        self.drive(id, readable, writable, now, out);
    }

    /// Connection `id` may make progress (a readiness event or a completion): writes and
    /// reads it as far as it goes.
    fn drive(
        &mut self,
        id: usize,
        readable: bool,
        writable: bool,
        now: u64,
        out: &mut Vec<Finished<T>>,
    ) {
        self.exchange(id, readable, writable, now, out);
        self.touch(id);
    }

    fn exchange(
        &mut self,
        id: usize,
        readable: bool,
        writable: bool,
        now: u64,
        out: &mut Vec<Finished<T>>,
    ) {
        let Some(c) = self.conns.get_mut(id).and_then(Option::as_mut) else {
            return;
        };
        // A failed non-blocking connect shows up as a pending socket error. Only a connection
        // still connecting (or in its TLS handshake) is asked: that costs a `getsockopt` per
        // readiness event, and on an established connection a reset surfaces as the read or
        // write error anyway.
        let fresh = c.served == 0 && !c.accepted;
        let connecting = fresh || c.wire.in_handshake();
        if connecting && matches!(c.wire.stream().take_error(), Ok(Some(_)) | Err(_)) {
            let r = if c.wire.in_handshake() {
                Failure::Tls(TlsFault::HandshakeAborted)
            } else if fresh {
                Failure::Connect
            } else {
                Failure::Broken
            };
            out.extend(self.fail_conn(id, r));
            return;
        }
        // TLS couples the directions (a handshake read lets the request go out): drive both.
        let tls = c.wire.is_tls();
        if writable || tls {
            if let Some(f) = self.write(id) {
                // The connection is gone; nothing left to read.
                out.push(f);
                return;
            }
        }
        if readable || tls {
            if let Some(f) = self.read(id, now) {
                out.push(f);
                return;
            }
        }
        if tls {
            out.extend(self.write(id));
        }
    }

    /// Timers: attempts past their deadline end with `Timeout`; idle connections older than
    /// `idle_timeout` are closed.
    pub fn on_tick(&mut self, now: u64, out: &mut Vec<Finished<T>>) {
        while let Some((id, gen)) = self.unsubmitted.pop() {
            // The id may have been closed and given to a new connection since: only the stream
            // whose submit failed is failed.
            let same = self
                .conns
                .get_mut(id)
                .and_then(Option::as_mut)
                .is_some_and(|c| matches!(c.wire.stream(), Stream::Uring(s) if s.gen() == gen));
            if same {
                out.extend(self.fail_conn(id, Failure::Broken));
            }
        }
        // Only what is due is looked at (`net::deadlines`); `close` disarms a closed
        // connection's timers, so an id popped here is open and in the state its timer is for.
        while let Some(id) = self.attempt_timers.pop_due(now) {
            out.extend(self.fail_conn(id, Failure::Timeout));
        }
        while let Some(id) = self.idle_timers.pop_due(now) {
            self.fail_conn(id, Failure::Timeout); // an idle connection carries no attempt
        }
    }

    /// Writes what is left of the request. A broken connection is torn down and its attempt's
    /// end returned.
    fn write(&mut self, id: usize) -> Option<Finished<T>> {
        let c = self.conns.get_mut(id).and_then(Option::as_mut)?;
        // On io_uring the whole request becomes the stream's outbox, not copied into it; the
        // stream's empty buffer comes back as `wbuf` (a plain stream only: TLS encrypts).
        if let Wire::Plain(s) = &mut c.wire {
            if c.wpos == 0 && s.hand_over(&mut c.wbuf) {
                c.accepted = true;
                return None;
            }
        }
        loop {
            // A TLS connection may hold records after the last plaintext byte went in.
            let rest = &c.wbuf[c.wpos..];
            if rest.is_empty() && !c.wire.is_tls() {
                break;
            }
            match c.wire.write(rest) {
                Ok(0) if rest.is_empty() => break,
                Ok(0) => return self.fail_conn(id, Failure::Broken),
                Ok(n) => {
                    c.wpos += n;
                    c.accepted = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return None, // connecting
                Err(e) => {
                    let connecting = c.served == 0 && !c.accepted && !c.wire.is_tls();
                    let r = if connecting {
                        Failure::Connect
                    } else {
                        Failure::Broken
                    };
                    return self.fail_conn(id, failure(&e, r));
                }
            }
        }
        None
    }

    /// Reads and parses what came on connection `id`, until `WouldBlock` or the attempt's end.
    /// On a plain io_uring stream the bytes are parsed where the receive put them (the
    /// stream's inbox); on mio, and through TLS, they are read into the pool's scratch buffer.
    fn read(&mut self, id: usize, now: u64) -> Option<Finished<T>> {
        loop {
            let c = self.conns.get_mut(id).and_then(Option::as_mut)?;
            let (state, reader, rbuf) = (&mut c.state, &mut c.reader, &mut c.rbuf);
            let mut take = |bytes: &[u8]| take_bytes(state, reader, rbuf, bytes);
            let got = match &mut c.wire {
                Wire::Plain(s) => s.read_with(&mut self.scratch, take),
                tls => match tls.read(&mut self.scratch) {
                    Ok(0) => Ok(None),
                    Ok(n) => Ok(Some(take(&self.scratch[..n]))),
                    Err(e) => Err(e),
                },
            };
            let event = match got {
                Ok(None) => return self.on_eof(id, now),
                Ok(Some(Some(event))) => event,
                Ok(Some(None)) => {
                    // Bytes on an idle connection: the server is confused; drop the connection.
                    self.close(id);
                    return None;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let r = if e.kind() == io::ErrorKind::ConnectionRefused {
                        Failure::Connect
                    } else {
                        Failure::Broken
                    };
                    return self.fail_conn(id, failure(&e, r));
                }
            };
            match event {
                ResponseEvent::Incomplete => continue,
                ResponseEvent::Response(r) => {
                    let pause = r.retry_after.map(|ra| ra.delay_from(unix_millis() / 1000));
                    let result = Exchange::Response {
                        status: r.status,
                        retry_after: pause,
                    };
                    let prefix = r.body_prefix;
                    return self.complete(id, (result, prefix), r.keep_alive, now);
                }
                ResponseEvent::Error(_) => return self.fail_conn(id, Failure::Broken),
            }
        }
    }

    /// Connection `id` reached its end of stream: a close-delimited body ends, anything else
    /// during an attempt is broken; an idle connection just closes.
    fn on_eof(&mut self, id: usize, now: u64) -> Option<Finished<T>> {
        let c = self.conns.get_mut(id).and_then(Option::as_mut)?;
        let ev = c.reader.on_eof();
        match (ev, &c.state) {
            (ResponseEvent::Response(r), ConnState::Busy(_)) => {
                let result = Exchange::Response {
                    status: r.status,
                    retry_after: None,
                };
                self.complete(id, (result, r.body_prefix), false, now)
            }
            (_, ConnState::Busy(_)) => self.fail_conn(id, Failure::Broken),
            _ => {
                self.close(id);
                None
            }
        }
    }

    /// An attempt on connection `id` got a response: keep the connection idle (keep-alive,
    /// nothing extra buffered, under the destination's idle cap) or close it.
    fn complete(
        &mut self,
        id: usize,
        (result, body_prefix): (Exchange, Vec<u8>),
        keep_alive: bool,
        now: u64,
    ) -> Option<Finished<T>> {
        let c = self.conns.get_mut(id).and_then(Option::as_mut)?;
        let d = c.dest;
        let state = std::mem::replace(&mut c.state, ConnState::Idle);
        let ConnState::Busy(attempt) = state else {
            return None;
        };
        self.attempt_timers.disarm(id);
        c.served += 1;
        c.wbuf.clear();
        c.wpos = 0;
        c.accepted = false;
        c.reader = ResponseReader::new(ClientLimits::default())
            .status_only()
            .keeping_body(RESPONSE_PREFIX_BYTES);
        let keep = keep_alive && c.rbuf.is_empty();
        let dest = self.dests.entry(d).or_default();
        if keep && dest.idle.len() < dest.idle_cap {
            dest.idle.push(id);
            // Closed once idle for longer than `idle_timeout` (`on_tick`).
            let expiry = now.saturating_add(self.idle_timeout).saturating_add(1);
            self.idle_timers.arm(id, expiry);
        } else {
            self.close(id);
        }
        Some(Finished::Done {
            dest: d,
            payload: attempt.payload,
            result,
            body_prefix,
        })
    }

    /// The connection broke (or timed out) during an attempt, or while idle: close it and
    /// report the attempt's end, if one was on it.
    fn fail_conn(&mut self, id: usize, failure: Failure) -> Option<Finished<T>> {
        let c = self.conns.get_mut(id).and_then(Option::as_mut)?;
        let dest = c.dest;
        let state = std::mem::replace(&mut c.state, ConnState::Broken);
        self.close(id);
        let ConnState::Busy(attempt) = state else {
            return None;
        };
        let stale = attempt.reused && !attempt.got_bytes && failure != Failure::Timeout;
        let payload = attempt.payload;
        Some(if stale {
            Finished::Stale { dest, payload }
        } else {
            Finished::Done {
                dest,
                payload,
                result: Exchange::Failed(failure),
                body_prefix: Vec::new(),
            }
        })
    }

    fn close(&mut self, id: usize) {
        if let Some(mut c) = self.conns.get_mut(id).and_then(Option::take) {
            self.free.push(id);
            self.attempt_timers.disarm(id);
            self.idle_timers.disarm(id);
            recycle(&mut self.spare, std::mem::take(&mut c.wbuf));
            self.clients.release(id, c.wire.into_stream());
            if let Some(dest) = self.dests.get_mut(&c.dest) {
                dest.open -= 1;
                dest.idle.retain(|&x| x != id);
            }
        }
    }
}

/// Bytes arrived on a connection: parsed for its attempt, or `None` if it has none (idle).
fn take_bytes<T>(
    state: &mut ConnState<T>,
    reader: &mut ResponseReader,
    rbuf: &mut Vec<u8>,
    bytes: &[u8],
) -> Option<ResponseEvent> {
    let ConnState::Busy(a) = state else {
        return None;
    };
    a.got_bytes = true;
    // Usually nothing is buffered and the whole response came in this read: it is parsed
    // where it was read, and only a rest is kept.
    Some(if rbuf.is_empty() {
        let (event, used) = reader.poll_slice(bytes);
        rbuf.extend_from_slice(&bytes[used..]);
        event
    } else {
        rbuf.extend_from_slice(bytes);
        reader.poll(rbuf)
    })
}

/// Keeps `buf`, emptied, for a next request if there is room and it is not outsized.
fn recycle(spare: &mut Vec<Vec<u8>>, mut buf: Vec<u8>) {
    if spare.len() < SPARE_BUFFERS && buf.capacity() > 0 && buf.capacity() <= SPARE_BUFFER_MAX {
        buf.clear();
        spare.push(buf);
    }
}

/// The attempt result of a failed read/write: a TLS fault, or `otherwise`.
fn failure(e: &io::Error, otherwise: Failure) -> Failure {
    tls_fault(e).map_or(otherwise, Failure::Tls)
}

#[cfg(test)]
#[path = "outbound_tests.rs"]
mod tests;
