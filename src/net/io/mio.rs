//! The mio leaf of the reactor (`reactor.rs`): readiness. A client socket is the non-blocking
//! socket itself, registered edge-triggered (readable and writable) with the core's poll under
//! its slot's token; the owner reads until `WouldBlock` on a readable edge and writes until
//! `WouldBlock`, resuming on a writable edge. A wait is one `epoll_wait`; each readiness event
//! becomes one [`Event`] (a connection's edge is settled with no work: it *is* the readiness).

use std::io;
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Registry, Token};

use super::event::{ConnEvent, Event, SOURCE_TOKEN_BASE};
use super::stream::Stream;

/// Readiness events taken per wait (more stay with the kernel for the next wait).
pub const EVENTS: usize = 1024;

/// The mio leaf's state: the reused event buffer.
#[derive(Debug)]
pub struct MioLeaf {
    events: Events,
}

impl MioLeaf {
    pub(super) fn new() -> MioLeaf {
        MioLeaf {
            events: Events::with_capacity(EVENTS),
        }
    }

    /// Registers an accepted client socket with the core's poll under slot `idx`.
    pub(super) fn adopt(registry: &Registry, idx: usize, mut s: TcpStream) -> io::Result<Stream> {
        registry.register(&mut s, Token(idx), Interest::READABLE | Interest::WRITABLE)?;
        Ok(Stream::Mio(s))
    }

    /// One `epoll_wait`, its events translated.
    pub(super) fn wait(
        &mut self,
        poll: &mut Poll,
        timeout: Duration,
        out: &mut Vec<Event>,
    ) -> io::Result<()> {
        poll_into(poll, &mut self.events, timeout, out).map(drop)
    }
}

/// One `epoll_wait` into `events`, translated into `out`; returns how many came (an
/// interrupted wait: none).
pub(super) fn poll_into(
    poll: &mut Poll,
    events: &mut Events,
    timeout: Duration,
    out: &mut Vec<Event>,
) -> io::Result<usize> {
    match poll.poll(events, Some(timeout)) {
        Ok(()) => Ok(translate(events, out)),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

/// Readiness events as the reactor's: a token below [`SOURCE_TOKEN_BASE`] is a connection.
fn translate(events: &Events, out: &mut Vec<Event>) -> usize {
    let mut n = 0;
    for ev in events.iter() {
        n += 1;
        let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
        let token = ev.token();
        out.push(if token.0 >= SOURCE_TOKEN_BASE {
            Event::Source {
                token,
                readable,
                writable: ev.is_writable() || ev.is_error(),
            }
        } else {
            let closed = ev.is_read_closed() || ev.is_error();
            Event::Conn(ConnEvent::ready(token.0, readable, closed))
        });
    }
    n
}
