//! A client connection's socket on the core's backend: one type the connection layer reads and
//! writes as a readiness socket (`read`/`write` until `WouldBlock`) on both.

use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;

use super::sock;
use super::uring;

/// A client connection's socket, on the core's backend.
#[derive(Debug)]
pub enum Stream {
    Mio(::mio::net::TcpStream),
    Uring(uring::UringStream),
}

impl Stream {
    /// Shuts down one or both directions. On io_uring a write shutdown waits until the
    /// bytes already accepted have been sent.
    pub fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        match self {
            Stream::Mio(s) => s.shutdown(how),
            Stream::Uring(s) => s.shutdown(how),
        }
    }

    /// The socket's pending error (`SO_ERROR`: a failed non-blocking connect), on io_uring the
    /// connect's error, once. Nothing else is asked of an io_uring stream: later errors come
    /// from `read` and `write`.
    pub fn take_error(&mut self) -> io::Result<Option<io::Error>> {
        match self {
            Stream::Mio(s) => s.take_error(),
            Stream::Uring(s) => Ok(s.take_connect_error()),
        }
    }

    /// Reads and gives what came to `f`, which consumes all of it: `Ok(None)` at the end of
    /// the stream, errors and `WouldBlock` as [`Read::read`]. On io_uring `f` reads the bytes
    /// in the stream's inbox, not copied ([`uring::UringStream::read_with`]); on mio they are
    /// read into `scratch` first (at most its length).
    pub fn read_with<R>(
        &mut self,
        scratch: &mut [u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<Option<R>> {
        match self {
            Stream::Mio(s) => match s.read(scratch)? {
                0 => Ok(None),
                n => Ok(Some(f(&scratch[..n]))),
            },
            Stream::Uring(s) => s.read_with(f),
        }
    }

    /// Takes `buf` whole as the next bytes to send, without a copy, leaving an empty buffer
    /// (a reusable allocation) in its place: on io_uring when the stream's outbox is empty and
    /// `buf` fits in it ([`uring::UringStream::hand_over`]). False, nothing taken, otherwise
    /// (and always on mio, whose `write` is the `send` itself): `write` it as usual.
    pub fn hand_over(&mut self, buf: &mut Vec<u8>) -> bool {
        match self {
            Stream::Mio(_) => false,
            Stream::Uring(s) => s.hand_over(buf),
        }
    }

    /// True if bytes from the client are already here and not yet read (in the socket, or on
    /// io_uring in the stream's inbox): a connection that looks idle but is not. Nothing is
    /// consumed.
    pub fn input_waiting(&self) -> bool {
        match self {
            Stream::Mio(s) => sock::peek(s),
            Stream::Uring(s) => s.input_waiting(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Mio(s) => s.read(buf),
            Stream::Uring(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Mio(s) => s.write(buf),
            Stream::Uring(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Mio(s) => s.write_vectored(bufs),
            Stream::Uring(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
