//! The reactor: one portable API over a core's I/O, with one leaf per backend (mio's `sys/` folder
//! is the model: a small API on top, the OS mechanisms below it). The core's loop is written
//! once against it:
//!
//! ```text
//! loop {
//!     reactor.submit(&mut conns, &mut failed);    // what the turn's connections asked for
//!     reactor.wait(timeout, &mut events)?;         // one sleep: readiness or completions
//!     for ev in events.drain(..) {
//!         Event::Source { token, .. } => …         // listener, waker, outbound sockets
//!         Event::Conn(ev)  => reactor.settle(ev, stream) → Ready { input, closed, drive }
//!         Event::Out(ev)   => reactor.settle_out(ev, stream, clients) → Ready  // io_uring
//!         Event::FileDone(done) => …               // the core's own log's commit
//!     }
//! }
//! ```
//!
//! - **Connections** are the owner's slots (`idx`, below [`SOURCE_TOKEN_BASE`]): [`Reactor::adopt`]
//!   turns an accepted socket into the backend's [`Stream`], [`Reactor::release`] takes it back
//!   at the close. The owner reads and writes a stream as a readiness socket (`read`/`write`
//!   until `WouldBlock`) on both backends; [`Reactor::touch`] tells the reactor a stream was read
//!   dry or written to, and [`Reactor::submit`] turns that into the backend's operations before
//!   the next wait (nothing on mio; receives and sends on io_uring).
//! - **Sources** are registered by the owner on [`Reactor::registry`] with a token at or above
//!   [`SOURCE_TOKEN_BASE`]: the listener, the core's waker. They are readiness sources on both
//!   backends (on io_uring the poll's epoll fd is watched by the ring, so one wait covers both).
//! - **Outbound streams** ([`super::client::Clients`]): opened, touched and released by their
//!   owner without the reactor, submitted once per turn ([`Reactor::submit_out`]). On mio they
//!   are sources (readiness by token); on io_uring ring operations like the connections', whose
//!   completions are [`Event::Out`] ([`Reactor::settle_out`]).
//! - **Files**: on io_uring the core's own log is written and synced on the ring
//!   ([`Reactor::file_ring`], `wal::commit`); its end is one [`Event::FileDone`].
//!
//! The leaves: [`super::mio::MioLeaf`] (readiness: the event is the edge) and
//! [`crate::net::io::uring::leaf::UringLeaf`] (completions: [`Reactor::settle`] moves a completion's bytes
//! into the stream first). Which leaf runs is chosen once at start-up ([`super::select`]).
//!
//! Bounds: the events of one wait are at most [`super::mio::EVENTS`] readiness events plus the
//! completions of the operations in flight (one receive and one send per connection, the file
//! write, the poll watch); the owner's event buffer is reused from turn to turn.

use std::io;
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Poll, Registry, Token, Waker};

use super::event::{ConnEvent, ConnKind, Event, Ready, Streams, SOURCE_TOKEN_BASE};
use super::mio::MioLeaf;
use super::stream::Stream;
use super::uring::Uring;
use crate::net::io::uring::leaf::UringLeaf;

/// The backend the cores run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Mio,
    Uring,
}

impl Backend {
    /// The `backend` label of `sluice_io_backend`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Mio => "mio",
            Backend::Uring => "uring",
        }
    }
}

/// A core's I/O (module docs).
#[derive(Debug)]
pub struct Reactor {
    /// Readiness sources (and, on mio, the connections).
    poll: Poll,
    leaf: Leaf,
}

#[derive(Debug)]
enum Leaf {
    Mio(MioLeaf),
    Uring(Box<UringLeaf>),
}

impl Reactor {
    /// A reactor on the mio leaf over a poll of its own (a core's; the other threads wake it
    /// through [`Reactor::waker`]).
    pub fn open() -> io::Result<Reactor> {
        Ok(Reactor::new(Poll::new()?))
    }

    /// A reactor on the mio leaf over `poll`.
    pub fn new(poll: Poll) -> Reactor {
        let leaf = Leaf::Mio(MioLeaf::new());
        Reactor { poll, leaf }
    }

    /// A waker of this reactor's wait: its event is an [`Event::Source`] under `token`.
    pub fn waker(&self, token: Token) -> io::Result<Waker> {
        Waker::new(self.poll.registry(), token)
    }

    /// Moves to the io_uring leaf. Call on the core's own thread (the ring is single-issuer)
    /// before any connection is adopted; on an error the reactor stays on mio.
    pub fn start_uring(&mut self) -> io::Result<()> {
        let ring = Uring::new(std::os::fd::AsRawFd::as_raw_fd(&self.poll))?;
        self.leaf = Leaf::Uring(Box::new(UringLeaf::new(ring)));
        Ok(())
    }

    /// The backend this reactor runs on.
    pub fn backend(&self) -> Backend {
        match self.leaf {
            Leaf::Mio(_) => Backend::Mio,
            Leaf::Uring(_) => Backend::Uring,
        }
    }

    /// Where the owner registers its sources (tokens ≥ [`SOURCE_TOKEN_BASE`]).
    pub fn registry(&self) -> &Registry {
        self.poll.registry()
    }

    /// Takes an accepted client socket into slot `idx`.
    pub fn adopt(&mut self, idx: usize, stream: TcpStream) -> io::Result<Stream> {
        debug_assert!(idx < SOURCE_TOKEN_BASE);
        match &mut self.leaf {
            Leaf::Mio(_) => MioLeaf::adopt(self.poll.registry(), idx, stream),
            Leaf::Uring(u) => u.adopt(stream),
        }
    }

    /// Takes back the stream of a connection that closed (slot `idx`). On io_uring, bytes it
    /// accepted and has not sent still leave ([`Reactor::closing_sends`]).
    pub fn release(&mut self, idx: usize, stream: Stream) {
        match (&mut self.leaf, stream) {
            (_, Stream::Mio(mut s)) => {
                let _ = self.poll.registry().deregister(&mut s);
            }
            (Leaf::Uring(u), Stream::Uring(s)) => u.release(idx, s),
            (Leaf::Mio(_), Stream::Uring(_)) => {}
        }
    }

    /// Connection `idx` was read dry or written to: its operations are submitted by the next
    /// [`Reactor::submit`] (io_uring; nothing to do on mio).
    pub fn touch(&mut self, idx: usize, stream: &mut Stream) {
        if let (Leaf::Uring(u), Stream::Uring(s)) = (&mut self.leaf, stream) {
            u.touch(idx, s);
        }
    }

    /// Submits what the connections touched since the last call need. Slots whose operations
    /// could not be submitted are added to `failed` (the owner closes them).
    pub fn submit(&mut self, streams: &mut impl Streams, failed: &mut Vec<usize>) {
        if let Leaf::Uring(u) = &mut self.leaf {
            u.submit(streams, failed);
        }
    }

    /// Sleeps until something happens, at most `timeout`, and appends what happened to `out`.
    /// An interrupted wait returns with no events.
    pub fn wait(&mut self, timeout: Duration, out: &mut Vec<Event>) -> io::Result<()> {
        match &mut self.leaf {
            Leaf::Mio(m) => m.wait(&mut self.poll, timeout, out),
            Leaf::Uring(u) => u.wait(&mut self.poll, timeout, out),
        }
    }

    /// Applies a connection event to the connection's stream (`None`: the slot is no longer
    /// live) and says what it means; `None` when there is nothing for the owner to do (the
    /// event was for a connection that is gone: a late completion's buffer goes back here).
    pub fn settle(&mut self, ev: ConnEvent, stream: Option<&mut Stream>) -> Option<Ready> {
        match ev.kind {
            ConnKind::Ready { readable, closed } => stream.map(|_| Ready {
                input: readable,
                closed,
                drive: true,
                starved: false,
            }),
            ConnKind::Done(c) => match &mut self.leaf {
                Leaf::Uring(u) => u.settle(c, stream),
                Leaf::Mio(_) => None,
            },
        }
    }

    /// Housekeeping on the owner's sweep: cuts short closed connections whose last bytes
    /// take too long to leave (io_uring).
    pub fn sweep(&mut self) {
        if let Leaf::Uring(u) = &mut self.leaf {
            u.sweep();
        }
    }

    /// Closed connections whose last bytes are still being sent (io_uring; 0 on mio).
    pub fn closing_sends(&self) -> usize {
        match &self.leaf {
            Leaf::Mio(_) => 0,
            Leaf::Uring(u) => u.closing_sends(),
        }
    }

    /// Sockets in the ring's registered file table (io_uring; 0 on mio).
    pub fn registered_files(&self) -> usize {
        match &self.leaf {
            Leaf::Mio(_) => 0,
            Leaf::Uring(u) => u.registered_files(),
        }
    }

    /// The ring (outbound streams, `client.rs`); `None` on mio.
    pub(super) fn ring_mut(&mut self) -> Option<&mut Uring> {
        self.file_ring()
    }

    /// The ring, for the core's own log's writes (`wal::commit`); `None` on mio.
    pub fn file_ring(&mut self) -> Option<&mut Uring> {
        match &mut self.leaf {
            Leaf::Mio(_) => None,
            Leaf::Uring(u) => Some(u.ring()),
        }
    }

    /// The loop is done: submits what is left, then cancels every operation and waits (at most
    /// a second) for them, so none outlives its buffers.
    pub fn shutdown(&mut self, streams: &mut impl Streams) {
        let mut failed = Vec::new();
        self.submit(streams, &mut failed);
        if let Leaf::Uring(u) = &mut self.leaf {
            u.ring().cancel_all();
        }
    }
}

#[cfg(test)]
#[path = "reactor_tests.rs"]
mod tests;
