//! One client connection: socket, buffers, the request reader and the in-order response queue.
//!
//! The connection does I/O and bookkeeping only; what a request *means* is decided by the worker
//! (`crate::sched::worker`). Bounds, per connection:
//! - read buffer: at most [`READ_CHUNK`] bytes past what the request reader still needs (the
//!   reader itself refuses heads over `max_head_bytes` and bodies over `max_body_bytes`);
//! - queued responses: at most `max_pipeline_depth`; past it the connection is not read from
//!   (the client's bytes wait in the kernel socket buffer: TCP backpressure);
//! - write buffer: the queued responses, so also bounded by the pipeline depth.
//!
//! Responses leave in request order (pipelining): a slot waiting for the WAL holds back the
//! slots behind it.

use std::collections::VecDeque;
use std::io::{self, Read, Write};

use mio::net::TcpStream;

use crate::net::http::RequestReader;
use crate::wal::AppendRequest;

/// Bytes read from the socket per `read` call.
pub const READ_CHUNK: usize = 64 * 1024;

/// What the connection is waiting for, for timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the first byte of a request head (keep-alive idle, or just accepted).
    Idle,
    /// Part of a request head has arrived.
    Head,
    /// The head is complete; part of the body has arrived.
    Body,
    /// Every received request is being answered by the server; no read deadline.
    Busy,
    /// The final response is written and our side is shut down; the client's remaining input
    /// is read and discarded until it closes, for a short time.
    Linger,
}

/// A queued response, in request order.
// `Ingest` is the common variant (one per accepted event); boxing it would add an allocation
// per request to save space in a short per-connection queue.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Slot {
    /// Encoded and ready to write; `close` means the connection closes after it.
    Ready { bytes: Vec<u8>, close: bool },
    /// An accepted event on its way to the WAL.
    Ingest(PendingIngest),
}

/// An admitted event waiting to be durable before its 202.
#[derive(Debug)]
pub struct PendingIngest {
    pub ticket: u64,
    /// `Some` while waiting for room in the WAL ring; `None` once handed to the writer.
    pub offer: Option<AppendRequest>,
    /// When waiting for room in the ring stops and the request is refused (`wal_busy`).
    pub offer_deadline: u64,
    pub event_id: String,
    pub trigger_id: String,
    /// Index into the worker's per-source refusal accounting.
    pub source: std::sync::Arc<crate::ingest::sources::SourceEntry>,
    pub keep_alive: bool,
    /// The share of the durable backlog reserved for this event (released if it fails).
    pub cost: u64,
    /// Set for an admin replay: the DLQ entry to remove once the new event is durable.
    pub replay_of: Option<String>,
}

/// A client connection owned by one worker.
#[derive(Debug)]
pub struct Conn {
    pub stream: TcpStream,
    pub rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    wpos: usize,
    pub reader: RequestReader,
    pub slots: VecDeque<Slot>,
    pub phase: Phase,
    /// When `phase` last changed (clock nanos).
    pub phase_since: u64,
    /// When bytes last left the socket, or when output started waiting (clock nanos).
    pub write_since: u64,
    /// Edge-triggered readiness: true until a read returns `WouldBlock`.
    pub readable: bool,
    /// The peer shut down its sending side (read returned 0).
    pub peer_closed: bool,
    /// The poller reported the peer's FIN (EPOLLRDHUP): read until EOF.
    pub rdhup: bool,
    /// No more requests are read; close once the queue is written.
    pub closing: bool,
    /// `100 Continue` was sent for the request being read.
    pub continue_sent: bool,
    /// Requests parsed on this connection so far.
    pub served: u64,
}

/// Result of a flush.
#[derive(Debug, PartialEq, Eq)]
pub enum Flush {
    /// Everything queued and ready has been written.
    Done,
    /// The socket is full; wait for writability.
    Blocked,
}

impl Conn {
    pub fn new(stream: TcpStream, reader: RequestReader, now: u64) -> Conn {
        Conn {
            stream,
            rbuf: Vec::new(),
            wbuf: Vec::new(),
            wpos: 0,
            reader,
            slots: VecDeque::new(),
            phase: Phase::Idle,
            phase_since: now,
            write_since: now,
            readable: true,
            peer_closed: false,
            rdhup: false,
            closing: false,
            continue_sent: false,
            served: 0,
        }
    }

    /// Reads once from the socket into `scratch` and appends what arrived to `rbuf`. Returns the
    /// number of bytes read (0 on `WouldBlock` or EOF; see `readable` / `peer_closed`).
    ///
    /// `scratch` is the worker's reusable read buffer, so no per-read zeroing or growth of
    /// `rbuf` beyond what arrived. A short read (fewer bytes than `scratch` holds) means the
    /// socket's receive queue is empty: with edge-triggered epoll, more data raises a new edge,
    /// so `readable` is cleared without spending a `read` on `WouldBlock` — unless the peer's
    /// FIN was already signalled (`rdhup`), in which case we read on to see the EOF.
    pub fn read_into(&mut self, scratch: &mut [u8]) -> io::Result<usize> {
        let r = loop {
            match self.stream.read(scratch) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        match r {
            Ok(0) => {
                self.peer_closed = true;
                self.readable = false;
                Ok(0)
            }
            Ok(n) => {
                self.rbuf.extend_from_slice(&scratch[..n]);
                if n < scratch.len() && !self.rdhup {
                    self.readable = false;
                }
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.readable = false;
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }

    /// Queues raw bytes ahead of every slot (used for `100 Continue`).
    pub fn push_interim(&mut self, bytes: &[u8]) {
        self.wbuf.extend_from_slice(bytes);
    }

    /// Moves ready responses from the front of the queue to the socket, in order.
    /// After a `close` response, everything behind it is dropped and `closing` is set.
    pub fn flush(&mut self, now: u64) -> io::Result<Flush> {
        loop {
            if self.wpos == self.wbuf.len() {
                self.wbuf.clear();
                self.wpos = 0;
                match self.slots.front() {
                    Some(Slot::Ready { .. }) => {
                        if let Some(Slot::Ready { bytes, close }) = self.slots.pop_front() {
                            self.wbuf = bytes;
                            self.write_since = now;
                            if close {
                                self.closing = true;
                                self.slots.clear();
                            }
                        }
                    }
                    _ => return Ok(Flush::Done),
                }
                continue;
            }
            match self.stream.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.wpos += n;
                    self.write_since = now;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Flush::Blocked),
                Err(e) => return Err(e),
            }
        }
    }

    /// Bytes accepted for writing but not yet written.
    pub fn unwritten(&self) -> usize {
        self.wbuf.len() - self.wpos
    }

    /// True when nothing remains to be answered or written.
    pub fn is_quiet(&self) -> bool {
        self.slots.is_empty() && self.unwritten() == 0
    }

    /// Sets the phase, restarting its clock only when it changes.
    pub fn set_phase(&mut self, phase: Phase, now: u64) {
        if self.phase != phase {
            self.phase = phase;
            self.phase_since = now;
        }
    }
}
