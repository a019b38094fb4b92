//! What the reader hands over: a complete [`Request`] (head plus decoded body), or the
//! [`ReadEvent`] that says what it is waiting for or why it refused.

use super::head::RequestHead;
use super::message::HttpError;

/// A complete request: head plus decoded body (chunk framing and trailers removed).
#[derive(Clone, Debug)]
pub struct Request {
    pub head: RequestHead,
    pub body: Vec<u8>,
}

/// What [`RequestReader::poll`](super::RequestReader::poll) found.
#[derive(Debug)]
pub enum ReadEvent {
    /// More bytes are needed.
    Incomplete,
    /// The head is parsed (see [`RequestReader::pending_head`](super::RequestReader::pending_head)) but the body is not complete yet.
    /// Returned once per request, and only when a body is still expected; with
    /// [`RequestReader::with_body_gate`](super::RequestReader::with_body_gate), for every request with a body, before any of it is
    /// consumed (see [`RequestReader::declared_length`](super::RequestReader::declared_length)). If `expect_continue`,
    /// the caller may send [`write_continue`](super::write_continue) (once) or refuse early with a final status.
    HeadReady { expect_continue: bool },
    /// A complete request; bytes after it stay in the buffer.
    Request(Request),
    /// The request is refused; answer `error.status()` and close the connection.
    Error(HttpError),
}
