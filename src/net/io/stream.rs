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
