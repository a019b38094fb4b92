//! Event-loop I/O backends for a core's client connections: readiness on mio (epoll) or
//! completions on io_uring. The connection layer (`net::conn`) reads and writes a [`Stream`];
//! which backend moves its bytes is chosen once at start-up ([`IoMode`], [`select`]).
//!
//! - [`mio`]: the socket itself, non-blocking, registered edge-triggered with the core's poll.
//! - [`uring`]: a socket owned by the core's ring; receives land in a small per-connection inbox
//!   and writes go to a bounded outbox that the loop submits once per turn
//!   ([`uring::UringStream`]). Accepts, the cores' wakers and outbound (dispatch) sockets stay
//!   on the core's mio poll, whose epoll fd is itself watched by the ring, so one wait covers
//!   both.

use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;

pub mod mio;
mod sock;
pub mod uring;

/// `[server] io` / `serve --io` / `SLUICE_IO`: which backend the cores use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoMode {
    /// io_uring where the kernel allows it (every operation the backend needs is supported),
    /// else mio; one log line at start-up says which and why.
    #[default]
    Auto,
    Mio,
    Uring,
}

impl IoMode {
    /// Parses `auto`, `mio` or `uring`.
    pub fn parse(text: &str) -> Result<IoMode, String> {
        match text.trim() {
            "auto" => Ok(IoMode::Auto),
            "mio" => Ok(IoMode::Mio),
            "uring" => Ok(IoMode::Uring),
            other => Err(format!(
                "{other:?} is not an I/O backend: use \"auto\", \"mio\" or \"uring\""
            )),
        }
    }
}

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

/// Resolves the configured mode against this kernel: the backend, and the sentence the
/// start-up log prints. `uring` asked for explicitly but unavailable is an error (the
/// operator asked for it; silently running something else would hide it).
pub fn select(mode: IoMode) -> Result<(Backend, String), String> {
    match mode {
        IoMode::Mio => Ok((Backend::Mio, "mio (configured)".into())),
        IoMode::Uring => match uring::probe() {
            Ok(()) => Ok((Backend::Uring, "io_uring (configured)".into())),
            Err(why) => Err(format!("io = \"uring\" but io_uring is unavailable: {why}")),
        },
        IoMode::Auto => match uring::probe() {
            Ok(()) => Ok((
                Backend::Uring,
                "io_uring (auto: the kernel supports every operation used)".into(),
            )),
            Err(why) => Ok((
                Backend::Mio,
                format!("mio (auto: io_uring unavailable: {why})"),
            )),
        },
    }
}

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
