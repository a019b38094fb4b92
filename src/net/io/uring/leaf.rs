//! The io_uring leaf of the reactor (`reactor.rs`): completions, on the core's ring
//! ([`crate::net::io::uring`], which holds the mechanisms and their bounds).
//!
//! - A wait is one `io_uring_enter`: it submits the operations the connections touched since the
//!   last wait asked for (`UringLeaf::submit`: sends of what was written, receives for those
//!   read dry, deferred write shutdowns) and waits for completions.
//! - A receive's completion is a connection's readable edge, a send's the writable one:
//!   `UringLeaf::settle` first moves the completion into the stream (bytes to its inbox, room
//!   in its outbox).
//! - The core's mio poll (sources: listener, wakers, outbound sockets) is watched by the ring
//!   (its epoll fd, multishot `POLL_ADD`): when that fires, the poll is drained without waiting
//!   in the same turn (and again next turn if a full batch came back), so nothing waits in two
//!   places.
//! - Outbound streams' completions (`client.rs`) are [`Event::Out`], settled by their owner.
//! - The file write's end is one [`Event::FileDone`].
//!
//! Bounds: the touched list holds each live connection at most once (its `queued` flag); the
//! completion buffer is reused (the operations in flight bound it, `mod.rs`).

use std::io;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Poll};

use crate::net::io::event::{ConnEvent, Event, Ready, Streams};
use crate::net::io::mio::{poll_into, EVENTS};
use crate::net::io::stream::Stream;
use crate::net::io::uring::{Completion, Op, Uring, UringStream};

/// The io_uring leaf's state.
#[derive(Debug)]
pub struct UringLeaf {
    ring: Uring,
    /// The turn's completions (reused).
    completions: Vec<Completion>,
    /// The mio poll's readiness events (reused).
    events: Events,
    /// The poll has (or may have) sources ready: drain it without waiting this turn.
    poll_ready: bool,
    /// Connections whose operations need (re)arming at the next submit.
    touched: Vec<usize>,
}

impl UringLeaf {
    pub(in crate::net::io) fn new(ring: Uring) -> UringLeaf {
        UringLeaf {
            ring,
            completions: Vec::new(),
            events: Events::with_capacity(EVENTS),
            // Drain the poll once at the start: the listener may already have connections.
            poll_ready: true,
            touched: Vec::new(),
        }
    }

    pub(in crate::net::io) fn ring(&mut self) -> &mut Uring {
        &mut self.ring
    }

    pub(in crate::net::io) fn adopt(&mut self, stream: TcpStream) -> io::Result<Stream> {
        self.ring.stream(stream.into()).map(Stream::Uring)
    }

    pub(in crate::net::io) fn release(&mut self, idx: usize, stream: UringStream) {
        self.ring.retire(idx, stream);
    }

    pub(in crate::net::io) fn touch(&mut self, idx: usize, s: &mut UringStream) {
        if !s.queued {
            s.queued = true;
            self.touched.push(idx);
        }
    }

    pub(in crate::net::io) fn submit(
        &mut self,
        streams: &mut impl Streams,
        failed: &mut Vec<usize>,
    ) {
        for idx in self.touched.drain(..) {
            let Some(Stream::Uring(s)) = streams.stream(idx) else {
                continue;
            };
            s.queued = false;
            if let Err(e) = self.ring.arm(idx, s) {
                eprintln!("sluice: io_uring: submitting for a connection: {e}");
                failed.push(idx);
            }
        }
    }

    pub(in crate::net::io) fn wait(
        &mut self,
        poll: &mut Poll,
        timeout: Duration,
        out: &mut Vec<Event>,
    ) -> io::Result<()> {
        let timeout = if self.poll_ready {
            Duration::ZERO
        } else {
            timeout
        };
        self.ring.wait(timeout)?;
        self.ring.completions(&mut self.completions);
        for c in &self.completions {
            match c.op {
                Op::Poll => self.poll_ready = true,
                Op::Recv | Op::Send => out.push(Event::Conn(ConnEvent::done(*c))),
                // An outbound stream's (`client.rs`): its owner settles it.
                Op::OutRecv | Op::OutSend | Op::OutConnect => {
                    out.push(Event::Out(ConnEvent::done(*c)))
                }
                // The own log's commit is back (`wal::commit`).
                Op::File => out.extend(self.ring.take_file_done().map(Event::FileDone)),
                Op::Provide
                | Op::Cancel
                | Op::FileWrite
                | Op::FileSync
                | Op::FileReg
                | Op::FileClear => {}
            }
        }
        if self.poll_ready {
            let n = poll_into(poll, &mut self.events, Duration::ZERO, out)?;
            // A full batch may have left events behind: drain again next turn.
            self.poll_ready = n == self.events.capacity();
        }
        Ok(())
    }

    /// A receive or send completed for connection `c.idx`, whose stream is `stream` if the
    /// slot is live.
    pub(in crate::net::io) fn settle(
        &mut self,
        c: Completion,
        stream: Option<&mut Stream>,
    ) -> Option<Ready> {
        let live = match stream {
            Some(Stream::Uring(s)) if s.gen() == c.gen => Some(s),
            _ => None,
        };
        let Some(s) = live else {
            self.ring.on_orphan(&c);
            return None;
        };
        let ready = settle_stream(&mut self.ring, &c, s);
        if ready.starved || c.op == Op::Send {
            // Re-arm: the receive the empty pool refused, or the rest of the send.
            self.touch(c.idx, s);
        }
        Some(ready)
    }

    pub(in crate::net::io) fn sweep(&mut self) {
        self.ring.sweep(Instant::now());
    }

    pub(in crate::net::io) fn closing_sends(&self) -> usize {
        self.ring.retired()
    }

    pub(in crate::net::io) fn registered_files(&self) -> usize {
        self.ring.fixed_files().0
    }
}

/// Moves a completion into its live stream and says what it means (both sides: inbound
/// connections here, outbound streams in `client.rs`). The caller re-arms the stream.
pub(in crate::net::io) fn settle_stream(
    ring: &mut Uring,
    c: &Completion,
    s: &mut UringStream,
) -> Ready {
    match c.op {
        Op::Recv | Op::OutRecv if !ring.on_recv(s, c) => Ready {
            // The buffer pool was empty: try again at the next submit.
            starved: true,
            ..Ready::default()
        },
        Op::Recv | Op::OutRecv => Ready {
            input: true,
            drive: true,
            ..Ready::default()
        },
        Op::OutConnect => {
            ring.on_connect(s, c);
            let drive = s.take_writable();
            Ready {
                drive,
                ..Ready::default()
            }
        }
        _ => {
            ring.on_send(s, c);
            // Room in the outbox (or an error to find): carry on where writing stopped.
            let drive = s.take_writable() || c.res < 0;
            Ready {
                drive,
                ..Ready::default()
            }
        }
    }
}
