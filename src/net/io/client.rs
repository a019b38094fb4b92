//! Outbound streams on the core's backend: what an owner of client connections (the outbound
//! pool, `net::outbound`) needs of the reactor, the same API on both leaves.
//!
//! - [`Clients::connect`] opens a non-blocking connection and returns it as a [`Stream`], read
//!   and written like an inbound one (`read`/`write` until `WouldBlock`). On mio it is the
//!   socket itself, registered edge-triggered under the owner's token; its readiness comes back
//!   as [`Event::Source`](super::Event::Source). On io_uring it is a
//!   [`UringStream`] on the core's ring: the connect is watched by a
//!   `POLL_ADD` (`POLLOUT`), then sends and receives are ring operations, submitted with the
//!   turn's one `io_uring_enter` like the inbound connections'; their completions come back as
//!   [`Event::Out`](super::Event::Out), settled by [`Reactor::settle_out`].
//! - The owner calls [`Clients::touch`] after it read or wrote a stream, [`Clients::release`]
//!   when it closes one, and [`Reactor::submit_out`] once per turn before the wait. None of
//!   these needs the reactor itself, so the owner can work from anywhere in the turn (the
//!   dispatcher is called from inside the server's request handling) and submit at its end.
//!
//! Bounds: the touched list holds each open stream at most once (its `queued` flag); the
//! released list holds the streams closed since the last submit (at most the open streams),
//! handed to the ring's retire list (bounded there, `uring/mod.rs`) at the submit.

use std::io;
use std::net::SocketAddr;

use mio::{Interest, Registry, Token};

use super::event::{ConnEvent, ConnKind, Ready, Streams};
use super::reactor::{Backend, Reactor};
use super::stream::Stream;
use super::uring::UringStream;

/// Outbound ids (ring completions carry 24 bits of a slot).
pub const MAX_CLIENTS: usize = 1 << 24;

/// The outbound side of one core's I/O (module docs).
#[derive(Debug)]
pub struct Clients {
    backend: Backend,
    /// Generations of the outbound streams (a completion for a closed id that was reused
    /// carries an older one).
    next_gen: u32,
    /// Streams that need their operations (re)armed at the next submit (io_uring).
    touched: Vec<usize>,
    /// Streams closed since the last submit, to be retired on the ring (io_uring).
    released: Vec<(usize, UringStream)>,
    /// The core's poll, where mio streams are registered (a handle of the reactor's own,
    /// [`Reactor::clients`]); `None` until the owner is attached to a reactor.
    registry: Option<Registry>,
}

impl Default for Clients {
    /// Not attached to a reactor: a connect fails until the owner gets the reactor's
    /// ([`Reactor::clients`]).
    fn default() -> Self {
        Clients::new(Backend::Mio, None)
    }
}

impl Clients {
    /// Outbound streams on `backend`, mio streams registered with `registry` (the core's
    /// reactor's: [`Reactor::clients`]).
    pub fn new(backend: Backend, registry: Option<Registry>) -> Clients {
        Clients {
            backend,
            next_gen: 0,
            touched: Vec::new(),
            released: Vec::new(),
            registry,
        }
    }

    /// The backend new streams are opened on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Attached to a reactor (its registry is known).
    pub fn attached(&self) -> bool {
        self.registry.is_some()
    }

    /// Opens a non-blocking connection to `addr`; on mio it is registered under `token`. The connect finishes later: its failure shows as
    /// [`Stream::take_error`] (or a read/write error); `write` says `WouldBlock` until then.
    /// On io_uring the connect's watch goes out once the owner has stored the stream and
    /// [`Clients::touch`]ed it.
    pub fn connect(&mut self, addr: SocketAddr, token: Token) -> io::Result<Stream> {
        let Some(registry) = &self.registry else {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the outbound streams are not attached to the core's reactor",
            ));
        };
        let mut sock = mio::net::TcpStream::connect(addr)?;
        match self.backend {
            Backend::Mio => {
                registry.register(&mut sock, token, Interest::READABLE | Interest::WRITABLE)?;
                Ok(Stream::Mio(sock))
            }
            Backend::Uring => {
                self.next_gen = self.next_gen.wrapping_add(1);
                let gen = self.next_gen;
                Ok(Stream::Uring(UringStream::connecting(sock.into(), gen)))
            }
        }
    }

    /// Stream `id` was read dry or written to: its operations go out with the next
    /// [`Reactor::submit_out`] (io_uring; nothing to do on mio).
    pub fn touch(&mut self, id: usize, stream: &mut Stream) {
        debug_assert!(id < MAX_CLIENTS);
        if let Stream::Uring(s) = stream {
            if !s.queued {
                s.queued = true;
                self.touched.push(id);
            }
        }
    }

    /// Stream `id` is closed: deregistered (mio), or retired on the ring at the next submit
    /// (io_uring: its operations are cancelled, bytes it accepted still leave, `uring/mod.rs`).
    pub fn release(&mut self, id: usize, stream: Stream) {
        match stream {
            Stream::Mio(mut s) => {
                if let Some(registry) = &self.registry {
                    let _ = registry.deregister(&mut s);
                }
            }
            Stream::Uring(s) => self.released.push((id, s)),
        }
    }
}

impl Reactor {
    /// The outbound side of this reactor, for an owner of client connections: its backend,
    /// and a handle of its poll's registry (mio streams register there).
    pub fn clients(&self) -> io::Result<Clients> {
        Ok(Clients::new(
            self.backend(),
            Some(self.registry().try_clone()?),
        ))
    }

    /// Submits what the outbound streams touched since the last call need, and retires the
    /// ones released. Streams whose operations could not be submitted are added to `failed`,
    /// as their id and generation (the owner closes them if the id still holds that stream).
    pub fn submit_out(
        &mut self,
        clients: &mut Clients,
        streams: &mut impl Streams,
        failed: &mut Vec<(usize, u32)>,
    ) {
        let Some(ring) = self.ring_mut() else {
            return;
        };
        for (id, s) in clients.released.drain(..) {
            ring.retire(id, s);
        }
        for id in clients.touched.drain(..) {
            let Some(Stream::Uring(s)) = streams.stream(id) else {
                continue;
            };
            s.queued = false;
            if let Err(e) = ring.arm(id, s) {
                eprintln!("sluice: io_uring: submitting for an outbound connection: {e}");
                failed.push((id, s.gen()));
            }
        }
    }

    /// Applies an outbound completion ([`super::Event::Out`]) to its stream (`None`: the id
    /// is no longer open) and says what it means, as [`Reactor::settle`] does for a
    /// connection: `drive` when the owner should read and write the stream now.
    pub fn settle_out(
        &mut self,
        ev: ConnEvent,
        stream: Option<&mut Stream>,
        clients: &mut Clients,
    ) -> Option<Ready> {
        let ConnKind::Done(c) = ev.kind else {
            return None;
        };
        let ring = self.ring_mut()?;
        let live = match stream {
            Some(Stream::Uring(s)) if s.gen() == c.gen => Some(s),
            _ => None,
        };
        let Some(s) = live else {
            ring.on_orphan(&c);
            return None;
        };
        let ready = crate::net::io::uring::leaf::settle_stream(ring, &c, s);
        if !s.queued {
            s.queued = true;
            clients.touched.push(c.idx);
        }
        Some(ready)
    }
}
