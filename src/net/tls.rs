//! The byte stream of one outbound connection: plain TCP, or TLS (rustls) over the same
//! non-blocking stream — any `Read + Write` with socket semantics: the core's
//! `net::io::Stream` (a mio socket, or a stream on the io_uring ring), or a mio `TcpStream`.
//!
//! [`Wire`] reads and writes *plaintext* with socket semantics (`WouldBlock` when no progress
//! is possible now, `Ok(0)` at the end of the stream), so the outbound pool and the sans-IO
//! HTTP/1.1 client codec above it do not know whether TLS is in the way. For TLS it drives a
//! [`rustls::ClientConnection`] by hand:
//!
//! - **write**: queued TLS records are flushed to the socket first (`write_tls` until
//!   `WouldBlock`); plaintext is then handed to rustls (buffered while the handshake runs, up to
//!   rustls's plaintext buffer limit, 64 KiB by default) and flushed again. When rustls takes no
//!   plaintext and has nothing to send (the handshake waits for the server), the write is
//!   `WouldBlock`: the caller retries after the next read made progress.
//! - **read**: decrypted plaintext is returned first; otherwise `read_tls` pulls what the socket
//!   has, `process_new_packets` runs the state machine (a certificate or handshake failure
//!   surfaces here), and records it produced (handshake replies, alerts) are flushed.
//!
//! Because mio readiness is edge-triggered and TLS couples the directions (a handshake read
//! enables the request write), the pool calls both `write` and `read` on every readiness
//! event of a TLS connection ([`Wire::is_tls`]); both are cheap no-ops without progress.
//!
//! Failures of TLS itself come back as `io::Error`s wrapping a [`TlsFault`] (see
//! [`tls_fault`]): a rustls error, or the server closing/resetting the connection while the
//! handshake is still running. They are their own attempt outcome (`tls_error`).
//!
//! Bounds: rustls buffers at most its default plaintext/TLS buffer limits (64 KiB each way) per
//! connection; the received-plaintext buffer is drained by every `read`.
#![forbid(unsafe_code)]

use std::fmt;
use std::io::{self, Read, Write};
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{CertificateError, ClientConfig, ClientConnection};

/// What went wrong in TLS, small enough to travel in a `Copy` attempt result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFault {
    /// The server's certificate chain does not lead to a trusted root.
    UnknownIssuer,
    /// The server's certificate is not valid for the server name.
    NameMismatch,
    /// The server's certificate is expired or not yet valid.
    Expired,
    /// Any other problem with the server's certificate.
    BadCertificate,
    /// The server sent a fatal alert (e.g. it rejected our client certificate).
    AlertReceived,
    /// The server closed or reset the connection during the handshake.
    HandshakeAborted,
    /// Any other TLS protocol error.
    Protocol,
}

impl TlsFault {
    fn from_rustls(e: &rustls::Error) -> TlsFault {
        match e {
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::UnknownIssuer => TlsFault::UnknownIssuer,
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => TlsFault::NameMismatch,
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. } => TlsFault::Expired,
                _ => TlsFault::BadCertificate,
            },
            rustls::Error::AlertReceived(_) => TlsFault::AlertReceived,
            _ => TlsFault::Protocol,
        }
    }
}

impl fmt::Display for TlsFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsFault::UnknownIssuer => "the server certificate is not signed by a trusted CA",
            TlsFault::NameMismatch => "the server certificate is not valid for the server name",
            TlsFault::Expired => "the server certificate is expired or not yet valid",
            TlsFault::BadCertificate => "the server certificate was rejected",
            TlsFault::AlertReceived => "the server aborted the handshake with an alert",
            TlsFault::HandshakeAborted => "the connection closed during the TLS handshake",
            TlsFault::Protocol => "TLS protocol error",
        })
    }
}

impl std::error::Error for TlsFault {}

/// The TLS fault an I/O error from [`Wire`] carries, if it is one.
pub fn tls_fault(e: &io::Error) -> Option<TlsFault> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<TlsFault>())
        .copied()
}

fn fault(f: TlsFault) -> io::Error {
    io::Error::other(f)
}

/// What a connection needs to speak TLS to one destination: the shared client configuration
/// (roots, client certificate, the in-memory session cache used for resumption) and the name
/// the certificate must be valid for.
#[derive(Debug, Clone)]
pub struct TlsClient {
    pub config: Arc<ClientConfig>,
    pub server_name: ServerName<'static>,
}

/// A TLS connection over a non-blocking stream `S`.
#[derive(Debug)]
pub struct TlsStream<S> {
    tcp: S,
    tls: ClientConnection,
    /// TLS bytes reached the socket (the TCP connect had completed).
    sent: bool,
}

/// The stream of one outbound connection.
#[derive(Debug)]
pub enum Wire<S> {
    Plain(S),
    Tls(Box<TlsStream<S>>),
}

impl<S: Read + Write> Wire<S> {
    /// Wraps `tcp` (connecting or connected) in a TLS client for `client`, or leaves it plain.
    /// On an error the stream comes back with it.
    pub fn new(tcp: S, client: Option<&TlsClient>) -> Result<Wire<S>, (io::Error, S)> {
        Ok(match client {
            None => Wire::Plain(tcp),
            Some(c) => {
                let tls = match ClientConnection::new(c.config.clone(), c.server_name.clone()) {
                    Ok(t) => t,
                    Err(e) => return Err((fault(TlsFault::from_rustls(&e)), tcp)),
                };
                Wire::Tls(Box::new(TlsStream {
                    tcp,
                    tls,
                    sent: false,
                }))
            }
        })
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Wire::Tls(_))
    }

    /// The TLS handshake is under way on an established TCP connection: a socket error now is
    /// a handshake failure ([`TlsFault::HandshakeAborted`]), not a connect or exchange error.
    pub fn in_handshake(&self) -> bool {
        match self {
            Wire::Plain(_) => false,
            Wire::Tls(t) => t.in_handshake(),
        }
    }

    /// The stream below (for registration and socket errors).
    pub fn stream(&mut self) -> &mut S {
        match self {
            Wire::Plain(s) => s,
            Wire::Tls(t) => &mut t.tcp,
        }
    }

    /// The stream below, the wire done with (the caller closes or retires it).
    pub fn into_stream(self) -> S {
        match self {
            Wire::Plain(s) => s,
            Wire::Tls(t) => t.tcp,
        }
    }

    /// Writes plaintext (see the module notes).
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Wire::Plain(s) => s.write(buf),
            Wire::Tls(t) => t.write(buf),
        }
    }

    /// Reads plaintext (see the module notes).
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Wire::Plain(s) => s.read(buf),
            Wire::Tls(t) => t.read(buf),
        }
    }
}

impl<S: Read + Write> TlsStream<S> {
    fn in_handshake(&self) -> bool {
        self.sent && self.tls.is_handshaking()
    }

    /// Sends queued TLS records until the socket would block. A socket error while the
    /// handshake runs is a TLS fault (the server hung up on us mid-handshake).
    fn flush_tls(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(0) => return Err(self.broken(io::ErrorKind::WriteZero.into())),
                Ok(_) => self.sent = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.broken(e)),
            }
        }
        Ok(())
    }

    /// Maps a socket error: during the handshake (and after the TCP connect) it is a TLS fault.
    fn broken(&self, e: io::Error) -> io::Error {
        let transient = matches!(
            e.kind(),
            io::ErrorKind::WouldBlock
                | io::ErrorKind::NotConnected
                | io::ErrorKind::ConnectionRefused
        );
        if self.in_handshake() && !transient && tls_fault(&e).is_none() {
            fault(TlsFault::HandshakeAborted)
        } else {
            e
        }
    }

    /// Flushes, ignoring `WouldBlock` (the writable event resumes it).
    fn flush_quiet(&mut self) -> io::Result<()> {
        match self.flush_tls() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            other => other,
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.flush_tls()?;
        let n = self.tls.writer().write(buf)?;
        if n == 0 && !buf.is_empty() {
            // The plaintext buffer is full while the handshake waits for the server.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.flush_quiet()?;
        Ok(n)
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The server closed TCP without close_notify: an end of stream like any other
                // (the HTTP framing decides whether the response was complete).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            let got = match self.tls.read_tls(&mut self.tcp) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Not connected yet: nothing to read.
                Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                    return Err(io::ErrorKind::WouldBlock.into())
                }
                Err(e) => return Err(self.broken(e)),
            };
            if let Err(e) = self.tls.process_new_packets() {
                // Best effort: tell the server why (the alert rustls queued).
                let _ = self.flush_tls();
                return Err(fault(TlsFault::from_rustls(&e)));
            }
            self.flush_quiet()?;
            if got == 0 {
                if self.tls.is_handshaking() {
                    return Err(fault(TlsFault::HandshakeAborted));
                }
                // Plaintext decrypted before the close is still returned by the next reader
                // call; after it, the reader reports the end.
                return match self.tls.reader().read(buf) {
                    Ok(n) => Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                    Err(e) => Err(e),
                };
            }
        }
    }
}

#[cfg(test)]
#[path = "tls_tests.rs"]
pub(crate) mod tests;
