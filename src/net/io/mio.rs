//! The mio backend: a client socket is the non-blocking socket itself, registered
//! edge-triggered (readable and writable) with the core's poll; the worker reads until
//! `WouldBlock` on a readable edge and writes until `WouldBlock`, resuming on a writable edge.

use std::io;

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

/// Registers an accepted client socket with the core's poll.
pub fn register(registry: &Registry, stream: &mut TcpStream, token: Token) -> io::Result<()> {
    registry.register(stream, token, Interest::READABLE | Interest::WRITABLE)
}
