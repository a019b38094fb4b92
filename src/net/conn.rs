//! One client connection: socket, buffers, the request reader and the in-order response queue.
//!
//! The connection does I/O and bookkeeping only; what a request *means* is decided by its owner
//! (`crate::sched::worker`), which keeps its own record `P` in the slots of responses it will
//! fill in later ([`Slot::Pending`]). The socket is a [`Stream`] on the core's backend
//! (`net::io`: mio or io_uring); this layer is the same on both. Bounds, per connection:
//! - read buffer: at most [`READ_CHUNK`] bytes past what the request reader still needs (the
//!   reader itself refuses heads over `max_head_bytes` and bodies over `max_body_bytes`), and
//!   given back (not kept at its high-water capacity) once empty: [`Conn::trim`]. Body bytes
//!   pass through it one read at a time into the reader's body buffer, so a body is held once;
//! - the body being received: covered by a share of the process-wide body budget
//!   ([`crate::net::budget`]) that the connection owns ([`Conn::body`]) and that is released
//!   when the request completes or the connection is dropped;
//! - queued responses: at most `max_pipeline_depth` slots and `max_queued_response_bytes`
//!   bytes ([`Conn::queued_bytes`]: ready slots plus what is not yet written); past either the
//!   connection is not read from (the client's bytes wait in the kernel socket buffer: TCP
//!   backpressure). One response may take it past the byte bound, so the bound is
//!   `max_queued_response_bytes` plus the largest response. A [`Slot::Shared`] response body
//!   (the `/metrics` rendering) is queued by reference, not copied per connection, but counts
//!   in full;
//! - write buffer: the response being written, so also bounded by the above.
//!
//! Responses leave in request order (pipelining): a slot waiting for the WAL holds back the
//! slots behind it.
//!
//! # Ending a connection without a reset
//!
//! `close(2)` on a socket with unread input, or input that arrives after it, makes the kernel
//! send RST, which can destroy a response the client has not read yet, and makes a proxy that
//! just sent a request on a kept-alive connection report `Connection reset by peer` (nginx: a
//! `502` for a POST it may not retry). So a connection that ends while the client may still
//! be sending is ended with a half-close ([`Conn::start_linger`]): our sending side is shut
//! down after everything queued has been written (a FIN follows the last response), then the
//! client's input is read and dropped ([`Conn::discard_input`]) until it closes its side,
//! for at most [`LINGER`] and [`LINGER_MAX_BYTES`]; only then is the socket closed. Past
//! either bound the close may still be a reset (a client that keeps sending after our FIN).

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::sync::Arc;
use std::time::Duration;

use crate::net::budget::{BodyBudget, Reservation};
use crate::net::http::RequestReader;
use crate::net::io::Stream;

/// Bytes read from the socket per `read` call.
pub const READ_CHUNK: usize = 64 * 1024;
/// Read-buffer capacity an idle connection keeps; a larger empty buffer is freed.
const RBUF_KEEP: usize = 4 * 1024;
/// How long a half-closed connection's input is read and dropped before the socket closes
/// (module docs).
pub const LINGER: Duration = Duration::from_secs(2);
/// The most input a half-closed connection drops before the socket closes anyway: enough for
/// a client to notice our answer and stop sending a large body, small enough that a client
/// that never stops costs a bounded amount of reading.
pub const LINGER_MAX_BYTES: u64 = 4 << 20;

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
// `Pending` is the common variant (one per accepted event); boxing it would add an allocation
// per request to save space in a short per-connection queue.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Slot<P> {
    /// Encoded and ready to write; `close` means the connection closes after it.
    Ready { bytes: Vec<u8>, close: bool },
    /// A response head plus a body shared with other connections (written by reference).
    Shared {
        head: Vec<u8>,
        body: Arc<[u8]>,
        close: bool,
    },
    /// A response the worker fills in later: a `/metrics` scrape (`ticket` 0), rendered once
    /// for every scrape read in the turn, or an operator read (`ticket` ≠ 0, the owner's
    /// number for it) answered by a reader thread. `charge` is its expected size, counted
    /// against the queued-bytes bound until it is filled.
    Deferred {
        keep_alive: bool,
        head_only: bool,
        charge: usize,
        ticket: u64,
    },
    /// A response that waits for something outside the connection (for ingest: the event
    /// becoming durable). `P` is the owner's record of what it waits for; the connection only
    /// keeps it in order.
    Pending(P),
}

impl<P> Slot<P> {
    /// Bytes this slot counts against `max_queued_response_bytes`. An ingest slot counts
    /// A pending slot counts nothing until its (small) response is filled in; at most
    /// `max_pipeline_depth` wait.
    pub fn charge(&self) -> usize {
        match self {
            Slot::Ready { bytes, .. } => bytes.len(),
            Slot::Shared { head, body, .. } => head.len() + body.len(),
            Slot::Deferred { charge, .. } => *charge,
            Slot::Pending(_) => 0,
        }
    }
}

/// A client connection owned by one worker.
#[derive(Debug)]
pub struct Conn<P> {
    pub stream: Stream,
    pub rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    /// The last response's buffer once written, reused for the next response's bytes
    /// ([`Conn::response_bytes`]): no allocation per response once a connection has answered
    /// one (kept only up to [`SPARE_KEEP`] bytes of capacity).
    spare: Vec<u8>,
    wpos: usize,
    /// A shared response body written after `wbuf` (from a [`Slot::Shared`]).
    wbody: Option<Arc<[u8]>>,
    wbody_pos: usize,
    pub reader: RequestReader,
    /// This connection's share of the body budget: what the body being received reserved.
    pub body: Reservation,
    /// In request order. Add and replace slots through [`push`](Self::push) and
    /// [`fill_slot`](Self::fill_slot), which keep [`queued_bytes`](Self::queued_bytes) exact.
    pub slots: VecDeque<Slot<P>>,
    /// Sum of [`Slot::charge`] over `slots`.
    slot_bytes: usize,
    /// When a read last returned bytes (clock nanos, taken after the read returned): every
    /// request handled since was sent before this time.
    pub read_at: u64,
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
    /// Input dropped since the half-close ([`Phase::Linger`]).
    lingered: u64,
    /// On its table's list of answered connections (`Conns::answer`), not yet driven.
    pub(super) answered: bool,
}

/// Capacity up to which a written response's buffer is kept for the next response.
pub const SPARE_KEEP: usize = 1024;

/// A response's bytes: `Date: date`, then `headers` (on the stack for up to seven of them),
/// then `body` (none with `head_only`). `write_response` reserves the exact size: one
/// allocation ([`Conn::response_bytes`] reuses the connection's last one instead).
pub fn response_bytes(
    date: &str,
    status: u16,
    headers: &[(&str, &str)],
    body: &[u8],
    keep_alive: bool,
    head_only: bool,
) -> Vec<u8> {
    let mut bytes = Vec::new();
    response_into(
        &mut bytes, date, status, headers, body, keep_alive, head_only,
    );
    bytes
}

/// [`response_bytes`] appended to `bytes`.
// Every argument is a distinct part of the response; a struct would only rename them.
#[allow(clippy::too_many_arguments)]
fn response_into(
    bytes: &mut Vec<u8>,
    date: &str,
    status: u16,
    headers: &[(&str, &str)],
    body: &[u8],
    keep_alive: bool,
    head_only: bool,
) {
    let mut inline = [("", ""); 8];
    let heap: Vec<(&str, &str)>;
    let all: &[(&str, &str)] = if headers.len() < inline.len() {
        inline[0] = ("Date", date);
        inline[1..=headers.len()].copy_from_slice(headers);
        &inline[..=headers.len()]
    } else {
        heap = std::iter::once(("Date", date))
            .chain(headers.iter().copied())
            .collect();
        &heap
    };
    crate::net::http::write_response(bytes, status, all, body, keep_alive, head_only);
}

/// Result of a flush.
#[derive(Debug, PartialEq, Eq)]
pub enum Flush {
    /// Everything queued and ready has been written.
    Done,
    /// The socket is full; wait for writability.
    Blocked,
}

impl<P> Conn<P> {
    pub fn new(
        stream: Stream,
        reader: RequestReader,
        budget: crate::sync::Arc<BodyBudget>,
        now: u64,
    ) -> Conn<P> {
        Conn {
            stream,
            rbuf: Vec::new(),
            wbuf: Vec::new(),
            spare: Vec::new(),
            wpos: 0,
            wbody: None,
            wbody_pos: 0,
            reader,
            body: Reservation::new(budget),
            slots: VecDeque::new(),
            slot_bytes: 0,
            read_at: now,
            phase: Phase::Idle,
            phase_since: now,
            write_since: now,
            readable: true,
            peer_closed: false,
            rdhup: false,
            closing: false,
            continue_sent: false,
            served: 0,
            lingered: 0,
            answered: false,
        }
    }

    /// Reads once from the socket into `scratch` and appends what arrived to `rbuf`. Returns the
    /// number of bytes read (0 on `WouldBlock` or EOF; see `readable` / `peer_closed`). The
    /// caller sets `read_at` after a read that returned bytes.
    ///
    /// `scratch` is the worker's reusable read buffer, so no per-read zeroing or growth of
    /// `rbuf` beyond what arrived. A short read (fewer bytes than `scratch` holds) means the
    /// socket's receive queue is empty: with edge-triggered epoll, more data raises a new edge,
    /// so `readable` is cleared without spending a `read` on `WouldBlock` — unless the peer's
    /// FIN was already signalled (`rdhup`), in which case we read on to see the EOF.
    pub fn read_into(&mut self, scratch: &mut [u8]) -> io::Result<usize> {
        let n = self.read_scratch(scratch)?;
        self.rbuf.extend_from_slice(&scratch[..n]);
        Ok(n)
    }

    /// One read into `scratch` only (see [`read_into`](Self::read_into)).
    fn read_scratch(&mut self, scratch: &mut [u8]) -> io::Result<usize> {
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

    /// Queues a response behind the others.
    pub fn push(&mut self, slot: Slot<P>) {
        self.slot_bytes += slot.charge();
        self.slots.push_back(slot);
    }

    /// Replaces the slot at `pos` (an ingest or deferred slot getting its response).
    pub fn fill_slot(&mut self, pos: usize, slot: Slot<P>) {
        self.slot_bytes += slot.charge();
        let old = std::mem::replace(&mut self.slots[pos], slot);
        self.slot_bytes -= old.charge();
    }

    /// [`response_bytes`] written into the connection's spare buffer (the last response's,
    /// once written): no allocation per response in the steady state.
    pub fn response_bytes(
        &mut self,
        date: &str,
        status: u16,
        headers: &[(&str, &str)],
        body: &[u8],
        keep_alive: bool,
        head_only: bool,
    ) -> Vec<u8> {
        let mut bytes = std::mem::take(&mut self.spare);
        bytes.clear();
        response_into(
            &mut bytes, date, status, headers, body, keep_alive, head_only,
        );
        bytes
    }

    /// Queues a complete response (`Date: date` first, then `headers`) behind the others; a
    /// response without keep-alive is the connection's last ([`Conn::closing`]).
    // Every argument is a distinct part of the response; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub fn respond(
        &mut self,
        date: &str,
        status: u16,
        headers: &[(&str, &str)],
        body: &[u8],
        keep_alive: bool,
        head_only: bool,
    ) {
        let bytes = self.response_bytes(date, status, headers, body, keep_alive, head_only);
        self.push(Slot::Ready {
            bytes,
            close: !keep_alive,
        });
        if !keep_alive {
            self.closing = true;
        }
    }

    /// Response bytes queued and not yet written (the `max_queued_response_bytes` measure).
    pub fn queued_bytes(&self) -> usize {
        self.slot_bytes + self.unwritten()
    }

    /// Frees an empty read buffer that grew past `RBUF_KEEP`, so a connection that once
    /// received a large body or a burst does not keep that memory while idle.
    pub fn trim(&mut self) {
        if self.rbuf.is_empty() && self.rbuf.capacity() > RBUF_KEEP {
            self.rbuf = Vec::new();
        }
    }

    /// Moves ready responses from the front of the queue to the socket, in order.
    /// After a `close` response, everything behind it is dropped and `closing` is set.
    pub fn flush(&mut self, now: u64) -> io::Result<Flush> {
        loop {
            if self.unwritten() == 0 {
                self.wbuf.clear();
                self.wpos = 0;
                self.wbody = None;
                self.wbody_pos = 0;
                if !self.start_next(now) {
                    return Ok(Flush::Done);
                }
                continue;
            }
            match self.write_some() {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.advance(n);
                    self.write_since = now;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Flush::Blocked),
                Err(e) => return Err(e),
            }
        }
    }

    /// Takes the front slot into the write buffers if it is ready; false if there is none.
    fn start_next(&mut self, now: u64) -> bool {
        if !matches!(
            self.slots.front(),
            Some(Slot::Ready { .. } | Slot::Shared { .. })
        ) {
            return false;
        }
        let Some(slot) = self.slots.pop_front() else {
            return false;
        };
        self.slot_bytes -= slot.charge();
        let close = match slot {
            Slot::Ready { bytes, close } => {
                self.keep_spare(bytes);
                close
            }
            Slot::Shared { head, body, close } => {
                self.keep_spare(head);
                self.wbody = Some(body);
                close
            }
            Slot::Deferred { .. } | Slot::Pending(_) => unreachable!("checked above"),
        };
        self.write_since = now;
        if close {
            self.closing = true;
            self.slots.clear();
            self.slot_bytes = 0;
        }
        true
    }

    /// `next` becomes the write buffer; the written one (empty) is kept as the spare if it is
    /// small, so the next response reuses it.
    fn keep_spare(&mut self, next: Vec<u8>) {
        let written = std::mem::replace(&mut self.wbuf, next);
        if written.capacity() <= SPARE_KEEP && written.capacity() >= self.spare.capacity() {
            self.spare = written;
        }
    }

    /// One write of what is buffered: the head and a shared body go out in one `writev`.
    fn write_some(&mut self) -> io::Result<usize> {
        let head = &self.wbuf[self.wpos..];
        match &self.wbody {
            Some(body) if !head.is_empty() => self
                .stream
                .write_vectored(&[IoSlice::new(head), IoSlice::new(&body[self.wbody_pos..])]),
            Some(body) => self.stream.write(&body[self.wbody_pos..]),
            None => self.stream.write(head),
        }
    }

    fn advance(&mut self, n: usize) {
        let head = (self.wbuf.len() - self.wpos).min(n);
        self.wpos += head;
        self.wbody_pos += n - head;
    }

    /// Bytes accepted for writing but not yet written.
    pub fn unwritten(&self) -> usize {
        let body = self.wbody.as_ref().map_or(0, |b| b.len() - self.wbody_pos);
        self.wbuf.len() - self.wpos + body
    }

    /// True when nothing remains to be answered or written.
    pub fn is_quiet(&self) -> bool {
        self.slots.is_empty() && self.unwritten() == 0
    }

    /// Starts the half-close (module docs): our side is shut down once what is queued has been
    /// written, nothing more is parsed, and the body share goes back now. Fails if the socket
    /// is already broken; the caller then closes it.
    pub fn start_linger(&mut self, now: u64) -> io::Result<()> {
        self.stream.shutdown(std::net::Shutdown::Write)?;
        self.set_phase(Phase::Linger, now);
        self.closing = true;
        self.rbuf = Vec::new();
        self.lingered = 0;
        // Nothing more is read into a body: its budget share goes back now, not at the close.
        self.body.release();
        Ok(())
    }

    /// Reads and drops what a half-closed connection's client still sends. Returns true when
    /// the socket should now be closed: the client closed its side (EOF), the socket failed,
    /// or [`LINGER_MAX_BYTES`] were dropped. [`LINGER`] is the caller's (a timeout).
    pub fn discard_input(&mut self, scratch: &mut [u8]) -> bool {
        while self.readable {
            // Into the worker's scratch buffer only: a lingering connection keeps no buffer.
            match self.read_scratch(scratch) {
                Err(_) => return true,
                Ok(n) => self.lingered += n as u64,
            }
            if self.peer_closed || self.lingered >= LINGER_MAX_BYTES {
                return true;
            }
        }
        self.peer_closed
    }

    /// True between requests with nothing received, queued or owed: a connection that may
    /// be ended without losing anything (the drain's candidates).
    pub fn is_between_requests(&self) -> bool {
        !self.closing && self.is_quiet() && self.rbuf.is_empty() && self.reader.is_idle()
    }

    /// Sets the phase from what the connection waits for now (after a flush, outside the
    /// half-close): an answer it owes (`Busy`), the rest of a body (`Body`), the rest of a
    /// head — or the first head of a fresh connection — (`Head`), or the next request (`Idle`).
    pub fn update_phase(&mut self, now: u64) {
        let phase = if !self.slots.is_empty() {
            Phase::Busy
        } else if self.reader.pending_head().is_some() {
            Phase::Body
        } else if !self.rbuf.is_empty() || !self.reader.is_idle() || self.served == 0 {
            // A fresh connection must send its first head within the header timeout.
            Phase::Head
        } else {
            Phase::Idle
        };
        self.set_phase(phase, now);
    }

    /// Sets the phase, restarting its clock only when it changes.
    pub fn set_phase(&mut self, phase: Phase, now: u64) {
        if self.phase != phase {
            self.phase = phase;
            self.phase_since = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::http::Limits;
    use std::time::Instant;

    /// A `Conn` on one end of a real loopback connection, and the peer's end.
    fn pair(budget: &crate::sync::Arc<BodyBudget>) -> (Conn<()>, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (ours, _) = listener.accept().unwrap();
        ours.set_nonblocking(true).unwrap();
        let reader = RequestReader::new(Limits::default());
        let stream = Stream::Mio(mio::net::TcpStream::from_std(ours));
        let conn = Conn::new(stream, reader, budget.clone(), 0);
        (conn, peer)
    }

    fn read_exactly(peer: &mut std::net::TcpStream, n: usize) -> Vec<u8> {
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = vec![0; n];
        peer.read_exact(&mut out).unwrap();
        out
    }

    #[test]
    fn a_written_response_buffer_is_reused_for_the_next_response() {
        let budget = crate::sync::Arc::new(BodyBudget::new(1 << 20));
        let (mut c, mut peer) = pair(&budget);
        let first = c.response_bytes("d", 202, &[], b"{}", true, false);
        let expected = response_bytes("d", 202, &[], b"{}", true, false);
        assert_eq!(first, expected);
        c.push(Slot::Ready {
            bytes: first,
            close: false,
        });
        assert_eq!(c.flush(0).unwrap(), Flush::Done);
        assert_eq!(read_exactly(&mut peer, expected.len()), expected);
        // The next response's bytes go to the buffer the first one was written from, once
        // the one after it has taken the write buffer's place.
        c.push(Slot::Ready {
            bytes: b"x".to_vec(),
            close: false,
        });
        assert_eq!(c.flush(0).unwrap(), Flush::Done);
        let ptr = c.spare.as_ptr();
        assert!(c.spare.capacity() >= expected.len());
        let again = c.response_bytes("d", 202, &[], b"{}", true, false);
        assert_eq!((again.as_ptr(), &again), (ptr, &expected));
    }

    #[test]
    fn queued_bytes_follow_pushes_fills_and_writes() {
        let budget = crate::sync::Arc::new(BodyBudget::new(1 << 20));
        let (mut c, mut peer) = pair(&budget);
        let shared: Arc<[u8]> = Arc::from(&b"0123456789"[..]);
        c.push(Slot::Ready {
            bytes: b"abc".to_vec(),
            close: false,
        });
        c.push(Slot::Deferred {
            keep_alive: true,
            head_only: false,
            charge: 100,
            ticket: 0,
        });
        assert_eq!(c.queued_bytes(), 103);
        c.fill_slot(
            1,
            Slot::Shared {
                head: b"H:".to_vec(),
                body: shared.clone(),
                close: false,
            },
        );
        assert_eq!(c.queued_bytes(), 3 + 2 + 10);
        // Two connections' worth of the same body is one allocation.
        assert_eq!(Arc::strong_count(&shared), 2);
        assert_eq!(c.flush(1).unwrap(), Flush::Done);
        assert_eq!(c.queued_bytes(), 0);
        assert!(c.is_quiet());
        assert_eq!(read_exactly(&mut peer, 15), b"abcH:0123456789");
        assert_eq!(Arc::strong_count(&shared), 1, "written, then let go");
    }

    #[test]
    fn a_pending_front_holds_back_the_queue_and_close_drops_the_rest() {
        let budget = crate::sync::Arc::new(BodyBudget::new(1 << 20));
        let (mut c, mut peer) = pair(&budget);
        c.push(Slot::Deferred {
            keep_alive: true,
            head_only: false,
            charge: 7,
            ticket: 0,
        });
        c.push(Slot::Ready {
            bytes: b"tail".to_vec(),
            close: false,
        });
        // The front is not ready: nothing is written, in order.
        assert_eq!(c.flush(0).unwrap(), Flush::Done);
        assert_eq!(c.queued_bytes(), 11);
        c.fill_slot(
            0,
            Slot::Ready {
                bytes: b"bye".to_vec(),
                close: true,
            },
        );
        assert_eq!(c.flush(0).unwrap(), Flush::Done);
        assert!(c.closing);
        assert_eq!(c.queued_bytes(), 0, "slots behind a close are dropped");
        assert_eq!(read_exactly(&mut peer, 3), b"bye");
    }

    #[test]
    fn unread_responses_stay_counted_until_the_peer_reads() {
        let budget = crate::sync::Arc::new(BodyBudget::new(1 << 20));
        let (mut c, mut peer) = pair(&budget);
        let big: Arc<[u8]> = Arc::from(vec![7u8; 8 << 20]);
        c.push(Slot::Shared {
            head: b"head".to_vec(),
            body: big.clone(),
            close: false,
        });
        // 8 MiB does not fit in the socket buffers of a peer that does not read.
        assert_eq!(c.flush(0).unwrap(), Flush::Blocked);
        let left = c.queued_bytes();
        assert!(left > 0 && left < 4 + (8 << 20), "{left}");
        // The peer reads everything; the rest goes out.
        let reader = std::thread::spawn(move || read_exactly(&mut peer, 4 + (8 << 20)));
        let deadline = Instant::now() + Duration::from_secs(10);
        while c.flush(0).unwrap() == Flush::Blocked {
            assert!(Instant::now() < deadline, "peer never drained");
            std::thread::sleep(Duration::from_millis(1));
        }
        let got = reader.join().unwrap();
        assert_eq!(&got[..4], b"head");
        assert!(got[4..].iter().all(|&b| b == 7));
        assert_eq!(c.queued_bytes(), 0);
    }

    #[test]
    fn dropping_a_connection_releases_its_body_share() {
        let budget = crate::sync::Arc::new(BodyBudget::new(100));
        let (mut c, peer) = pair(&budget);
        assert!(c.body.grow_to(60));
        assert!(!budget.try_reserve(41));
        drop(peer);
        drop(c);
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn an_empty_read_buffer_is_given_back() {
        let budget = crate::sync::Arc::new(BodyBudget::new(100));
        let (mut c, _peer) = pair(&budget);
        c.rbuf.extend_from_slice(&[0; READ_CHUNK]);
        c.trim();
        assert!(c.rbuf.capacity() >= READ_CHUNK, "not empty: kept");
        c.rbuf.clear();
        c.trim();
        assert_eq!(c.rbuf.capacity(), 0);
    }

    #[test]
    fn a_half_close_sends_fin_after_the_answer_and_drops_input_until_eof() {
        let budget = crate::sync::Arc::new(BodyBudget::new(100));
        let (mut c, mut peer) = pair(&budget);
        assert!(c.body.grow_to(60));
        c.push(Slot::Ready {
            bytes: b"bye".to_vec(),
            close: true,
        });
        assert_eq!(c.flush(0).unwrap(), Flush::Done);
        c.start_linger(5).unwrap();
        assert_eq!((c.phase, c.phase_since), (Phase::Linger, 5));
        assert_eq!(
            budget.in_use(),
            0,
            "the body share goes back at the half-close"
        );
        // The client still sends (it had not seen the answer yet), then closes: it reads the
        // answer and a clean EOF (no reset), and its bytes are read and dropped.
        peer.write_all(b"more request bytes").unwrap();
        peer.shutdown(std::net::Shutdown::Write).unwrap();
        let mut got = Vec::new();
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        peer.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"bye");
        let mut scratch = vec![0u8; 1024];
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            c.readable = true;
            if c.discard_input(&mut scratch) {
                break;
            }
            assert!(Instant::now() < deadline, "no EOF after the peer closed");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(c.lingered, 18);
        assert!(c.peer_closed);
        assert!(c.rbuf.is_empty());
    }

    #[test]
    fn waiting_input_is_seen_without_being_read() {
        let budget = crate::sync::Arc::new(BodyBudget::new(100));
        let (mut c, mut peer) = pair(&budget);
        assert!(!c.stream.input_waiting());
        peer.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        assert!(
            wait(|| c.stream.input_waiting()),
            "the request's bytes are not seen"
        );
        let mut scratch = vec![0u8; 64];
        assert_eq!(
            c.read_into(&mut scratch).unwrap(),
            16,
            "the peek consumed nothing"
        );
        assert!(!c.stream.input_waiting());
        drop(peer);
        // EOF is not input: the connection may be ended.
        assert!(!wait(|| c.stream.input_waiting()));
    }

    fn wait(mut f: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_millis(500);
        while Instant::now() < deadline {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    #[test]
    fn the_phase_follows_what_the_connection_waits_for() {
        let budget = crate::sync::Arc::new(BodyBudget::new(100));
        let (mut c, _peer) = pair(&budget);
        c.update_phase(1);
        assert_eq!(
            (c.phase, c.phase_since),
            (Phase::Head, 1),
            "fresh: its first head"
        );
        c.served = 1;
        c.update_phase(2);
        assert_eq!((c.phase, c.phase_since), (Phase::Idle, 2));
        c.rbuf.extend_from_slice(b"PO");
        c.update_phase(3);
        assert_eq!(c.phase, Phase::Head, "part of a head");
        c.push(Slot::Ready {
            bytes: b"x".to_vec(),
            close: false,
        });
        c.update_phase(4);
        assert_eq!(
            (c.phase, c.phase_since),
            (Phase::Busy, 4),
            "an answer is owed"
        );
        c.update_phase(5);
        assert_eq!(c.phase_since, 4, "the same phase keeps its clock");
    }

    #[test]
    fn discarding_stops_at_the_byte_bound() {
        let budget = crate::sync::Arc::new(BodyBudget::new(100));
        let (mut c, mut peer) = pair(&budget);
        c.start_linger(0).unwrap();
        let writer = std::thread::spawn(move || {
            let chunk = vec![0u8; 64 * 1024];
            // Until the server closes: a client that never stops sending.
            while peer.write_all(&chunk).is_ok() {}
        });
        let mut scratch = vec![0u8; READ_CHUNK];
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            c.readable = true;
            if c.discard_input(&mut scratch) {
                break;
            }
            assert!(Instant::now() < deadline, "never reached the byte bound");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            c.lingered >= LINGER_MAX_BYTES && !c.peer_closed,
            "{}",
            c.lingered
        );
        drop(c);
        writer.join().unwrap();
    }
}
