//! What the reactor (`reactor.rs`) reports, the same on both leaves: [`Event`]s of one wait,
//! and [`Ready`], what a connection's event means once applied to its stream.

use mio::Token;

use super::stream::Stream;
use super::uring::{Completion, FileDone};

/// Poll tokens below this are connections (the owner's slot index); sources the owner registers
/// itself (listener, waker, outbound sockets) use tokens at or above it.
pub const SOURCE_TOKEN_BASE: usize = 1 << 40;

/// One thing that happened during a wait.
#[derive(Debug)]
pub enum Event {
    /// A source registered by token is ready. `readable` includes the peer's close and an
    /// error, `writable` an error (the source finds out which on its next call).
    Source {
        token: Token,
        readable: bool,
        writable: bool,
    },
    /// Something happened on a connection: hand it to [`Reactor::settle`](super::Reactor::settle) with its stream.
    Conn(ConnEvent),
    /// Something happened on an outbound stream (io_uring; on mio an outbound socket's
    /// readiness is a [`Event::Source`]): its owner hands it to
    /// [`Reactor::settle_out`](super::Reactor::settle_out) with the stream.
    Out(ConnEvent),
    /// The file write on the ring finished ([`Reactor::file_ring`](super::Reactor::file_ring)).
    FileDone(FileDone),
}

/// An event on connection [`ConnEvent::idx`], not yet applied to its stream.
#[derive(Debug)]
pub struct ConnEvent {
    idx: usize,
    pub(super) kind: ConnKind,
}

#[derive(Debug)]
pub(super) enum ConnKind {
    /// mio: the readiness edge.
    Ready { readable: bool, closed: bool },
    /// io_uring: a receive or a send completed.
    Done(Completion),
}

impl ConnEvent {
    /// A readiness edge (the mio leaf).
    pub(super) fn ready(idx: usize, readable: bool, closed: bool) -> ConnEvent {
        let kind = ConnKind::Ready { readable, closed };
        ConnEvent { idx, kind }
    }

    /// A completion (the io_uring leaf).
    pub(super) fn done(c: Completion) -> ConnEvent {
        let kind = ConnKind::Done(c);
        ConnEvent { idx: c.idx, kind }
    }

    /// The connection's slot.
    pub fn idx(&self) -> usize {
        self.idx
    }
}

/// What a connection event means for its owner, once settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ready {
    /// Input (or its end, or an error) is there to read: read until `WouldBlock`.
    pub input: bool,
    /// The peer closed its side or the socket failed (mio's `EPOLLRDHUP`): read until EOF.
    pub closed: bool,
    /// The connection may make progress: read, parse and write it now.
    pub drive: bool,
    /// A receive found the buffer pool empty (counted; the stream re-arms at the next submit).
    pub starved: bool,
}

/// The owner's connections, by slot, as the reactor needs them to submit their operations.
pub trait Streams {
    /// The stream of the connection in slot `idx`, if that slot is live.
    fn stream(&mut self, idx: usize) -> Option<&mut Stream>;
}
