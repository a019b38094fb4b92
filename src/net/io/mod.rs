//! A core's I/O: one reactor API ([`reactor`]) with a leaf per backend — readiness on mio
//! (epoll, [`mio`]) or completions on io_uring ([`uring::leaf`] over the ring driver [`uring`]).
//! The core's loop is written once against [`Reactor`]; the connection layer (`net::conn`)
//! reads and writes a [`Stream`] as a readiness socket on both. Which backend runs is chosen
//! once at start-up ([`IoMode`], [`select`]).
//!
//! - mio: the socket itself, non-blocking, registered edge-triggered with the core's poll.
//! - io_uring: a socket owned by the core's ring; receives land in a small per-connection inbox
//!   and writes go to a bounded outbox that the reactor submits once per turn
//!   ([`uring::UringStream`]). Outbound streams ([`client`]) are the same streams on the same
//!   ring: connect watched by a `POLL_ADD`, then sends and receives. Sources (accepts, the
//!   cores' wakers) stay on the core's mio poll, whose epoll fd is itself watched by the ring,
//!   so one wait covers both.

pub mod client;
pub mod event;
pub mod mio;
pub mod reactor;
mod sock;
pub mod stream;
pub mod uring;

/// What another thread holds to end a core's wait ([`Reactor::waker`]).
pub use ::mio::Waker;
pub use client::Clients;
pub use event::{ConnEvent, Event, Ready, Streams, SOURCE_TOKEN_BASE};
pub use reactor::{Backend, Reactor};
pub use stream::Stream;

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
