//! Sans-IO HTTP/1.1 codec. Server side (this module): bytes in, requests out; responses in,
//! bytes out. Client side ([`client`], for outbound deliveries): [`client::write_request`]
//! appends a request, [`client::ResponseReader`] reads responses with the same resumable
//! `poll`/`poll_slice` contract as [`RequestReader`], keeps a bounded body prefix and shares the
//! chunked decoder (`chunked.rs`) with the server side; its header documents framing and bounds.
//!
//! Files: `message.rs` holds the leaf types (limits, refusals, method, version, framing),
//! `request.rs` what the reader hands over, `head.rs` / `chunked.rs` / `reader.rs` the reading,
//! `response.rs` the writing; this file only declares and re-exports, so no file of the codec
//! depends on one that depends on it.
//!
//! Nothing here touches a socket, a clock or a thread. The connection layer owns a read buffer
//! (`Vec<u8>`), appends whatever the socket produced, and calls [`RequestReader::poll`]; the
//! reader consumes what it used from the front of that buffer and says what happened
//! ([`ReadEvent`]). Responses are appended to an output `Vec<u8>` by [`write_response`],
//! [`write_error`] and [`write_continue`]. Because it is pure, the codec is unit-tested at every
//! byte boundary and benchmarked without sockets (`benches/http_parse.rs`).
//!
//! # How a request is read
//!
//! 1. **Head.** New bytes are scanned once, incrementally (`head.rs`): a small lexer checks the
//!    request line as it arrives (method token, request-target of visible ASCII no longer than
//!    [`Limits::max_uri_bytes`] → 414, version → 505/400), then every later LF must follow a CR
//!    (bare LF/CR → 400) and the first empty line ends the head. Only the first
//!    [`Limits::max_head_bytes`] of the buffer are ever looked at: no end of head inside them → 431,
//!    even while the head is incomplete. When the end is found, `httparse` parses the head in one
//!    pass (syntax errors → 400, more than [`Limits::max_headers`] fields → 431) and the framing
//!    and connection semantics of RFC 9112 §6–§9 are applied (see the table below).
//! 2. **Body.** `Content-Length` bodies are copied out as they arrive; chunked bodies go through a
//!    hand-written byte-at-a-time state machine (`chunked.rs`, RFC 9112 §7.1) whose data runs are
//!    copied in bulk. The body buffer grows with the bytes actually received, never past the
//!    declared length or [`Limits::max_body_bytes`], so a lying `Content-Length` costs nothing.
//!
//! Every step keeps its position in the reader, so parsing is resumable at any byte boundary:
//! feeding one byte per call yields the same requests and errors as feeding everything at once
//! (the tests check this over all split points). Pipelined requests are returned one per call;
//! the bytes of the next request stay in the buffer, so the caller should `poll` again before
//! reading more from the socket.
//!
//! # Caller contract
//!
//! - Between two `poll`s, only *append* to the buffer (the reader remembers offsets into it).
//!   [`RequestReader::poll_slice`] is the same step without the drain: it returns the number of
//!   bytes consumed, so a caller can keep an offset and compact its buffer once per socket read
//!   (with many tiny pipelined requests, `poll`'s per-request shift would be quadratic).
//! - After [`ReadEvent::Error`], write the error (e.g. [`write_error`]) and close the connection:
//!   the framing is lost. The reader stays failed and returns the same error again.
//! - After a request with `keep_alive == false`, close after the response.
//! - Memory: the reader holds at most one head (≤ `max_head_bytes`) and one body
//!   (≤ `max_body_bytes`); the caller's buffer needs at most `max_head_bytes` plus one read.
//!
//! # Error → status
//!
//! | condition | error | status |
//! |---|---|---|
//! | malformed request line or field (httparse), bare CR or LF, obs-fold, control/non-ASCII byte in the target, missing `Host` on HTTP/1.1, more than one `Host`, invalid or conflicting `Content-Length`, both `Content-Length` and `Transfer-Encoding`, `Transfer-Encoding` on HTTP/1.0, `chunked` twice, invalid chunk-size line or missing CRLF after chunk data, chunk line over `max_chunk_line_bytes` | `BadRequest(detail)` | 400 |
//! | POST/PUT/PATCH with neither `Content-Length` nor chunked | `LengthRequired` | 411 |
//! | `Content-Length` (or a chunked running total) over `max_body_bytes`, or a `Content-Length` that overflows u64 | `PayloadTooLarge` | 413 |
//! | request-target over `max_uri_bytes` | `UriTooLong` | 414 |
//! | `Expect` other than `100-continue` on HTTP/1.1 (ignored on HTTP/1.0, RFC 9110 §10.1.1) | `ExpectationFailed` | 417 |
//! | head over `max_head_bytes` (also while incomplete), more than `max_headers` fields, trailers over `max_head_bytes` | `HeaderTooLarge` | 431 |
//! | any transfer coding other than `chunked` (`gzip`, `gzip, chunked`, `chunked, gzip`, …), method token over 32 bytes | `NotImplemented` | 501 |
//! | version other than HTTP/1.0 and HTTP/1.1 that looks like `HTTP/<digits>[.<digits>]` | `VersionNotSupported` | 505 |
//!
//! # Decisions
//!
//! - RFC 9112 §6.3 asks for 400 when `chunked` is present but not the final coding; we answer
//!   501 for every coding list other than exactly `chunked`, since we decode no other coding.
//!   Both close the connection, which is what matters against request smuggling. Empty list
//!   elements are ignored (`Transfer-Encoding: , chunked` is chunked).
//! - `Content-Length` may be repeated or a list only with identical values; all digits but
//!   beyond u64 is 413 (it is certainly over the limit), anything else malformed is 400.
//! - `Expect: 100-continue` (any case) sets `expect_continue` on HTTP/1.1; any other expectation
//!   is 417. On HTTP/1.0 every `Expect` is ignored (RFC 9110 §10.1.1).
//! - 414 is exact: the lexer counts target bytes as they arrive, so a target one byte over the
//!   limit is refused even before its line ends (no `max_uri_bytes + slack` heuristic needed).
//! - Empty lines before a request line are skipped (RFC 9112 §2.2), e.g. a stray CRLF after a
//!   body. Absolute-form targets are accepted; [`RequestHead::path`] strips scheme and authority.
//! - The response writer adds `content-length` (except for 1xx and 204) and `connection: close`
//!   or `connection: keep-alive` (the latter is what keeps an HTTP/1.0 client that asked for
//!   keep-alive from waiting for a close, e.g. `ab -k`; on HTTP/1.1 it restates the default);
//!   it writes no `Date`, because the codec has no clock. RFC 9110 §6.6.1 requires an origin
//!   server with a clock to send `Date` on 2xx–4xx, so the connection layer should pass one
//!   (formatted once per second from the injected clock) in `headers`.

mod chunked;
pub mod client;
mod head;
mod message;
mod reader;
mod request;
mod response;
#[cfg(test)]
mod tests;

pub use head::RequestHead;
pub use message::{BodyFraming, HttpError, Limits, Method, Version};
pub use reader::RequestReader;
pub use request::{ReadEvent, Request};
pub use response::{
    decimal, reason_phrase, write_continue, write_error, write_response, TEXT_PLAIN,
};
