//! Sans-IO HTTP/1.1 client codec for outbound deliveries: requests out, responses in.
//!
//! The dispatch connection (on the core's mio loop) owns a socket, an output `Vec<u8>` and a read
//! buffer. To deliver an event it calls [`write_request`] (which validates everything before it
//! writes a byte) and flushes the output; then it appends whatever the socket produced to the
//! read buffer and calls [`ResponseReader::poll`] until it returns something other than
//! [`ResponseEvent::Incomplete`]. When the socket reports EOF it calls
//! [`ResponseReader::on_eof`], which completes a close-delimited body or reports
//! [`ClientError::Truncated`]. Nothing here touches a socket, a clock or a thread: the clock is
//! passed to [`RetryAfter::delay_from`].
//!
//! # Reading a response (RFC 9112)
//!
//! 1. **Head.** New bytes are scanned once for the first empty line (lines end in LF, optionally
//!    preceded by CR, RFC 9112 §2.2); empty lines before the status line are skipped and the
//!    first bytes must read `HTTP/`. Only the first [`ClientLimits::max_head_bytes`] are looked
//!    at: no end of head inside them is [`ClientError::HeadTooLarge`], even while incomplete.
//!    `httparse` then parses the head once (more than [`ClientLimits::max_headers`] fields is
//!    `HeadTooLarge`; status codes outside 100..=599 are malformed).
//! 2. **Interim responses.** 1xx heads (100 Continue, 103 Early Hints, …) have no body and are
//!    skipped; reading continues with the final response. 101 is an error: we never ask to
//!    switch protocols.
//! 3. **Framing** (§6.3, for a request that is not HEAD or CONNECT): 204 and 304 have no body
//!    (framing fields ignored); otherwise `Transfer-Encoding` whose coding list is exactly
//!    `chunked` is decoded by the server's chunked decoder (`chunked.rs`, chunk extensions
//!    skipped, trailers read and discarded, a chunk-size line at most 4 KiB); any other coding
//!    list is [`ClientError::UnsupportedTransferEncoding`]; `Transfer-Encoding` together with
//!    `Content-Length`, or on an HTTP/1.0 response (§6.1), is malformed. Otherwise
//!    `Content-Length` (repeated or list values must be identical digits); otherwise the body
//!    runs until EOF and the connection cannot be reused.
//! 4. **Body.** At most [`ClientLimits::max_body_keep`] bytes are kept in
//!    [`Response::body_prefix`] (for logs and the DLQ); the rest is counted in
//!    [`Response::body_len`] and dropped as it arrives, never buffered. A declared length, a
//!    chunked running total or a close-delimited count over [`ClientLimits::max_body_bytes`] is
//!    [`ClientError::BodyTooLarge`].
//! 5. **Connection reuse.** `keep_alive` is true on HTTP/1.1 unless `Connection: close`, on
//!    HTTP/1.0 only with `Connection: keep-alive`, and never for a close-delimited body.
//!
//! # Caller contract
//!
//! - Parsing is resumable at any byte boundary: one byte per call gives the same responses and
//!   errors as everything at once. Between two `poll`s, only *append* to the buffer.
//!   [`ResponseReader::poll_slice`] is the same step without the drain.
//! - Pipelined responses are returned one per call; poll again before reading more.
//! - Call `on_eof` only after `poll` has returned `Incomplete` on everything buffered. EOF
//!   before any byte of a response ([`ResponseReader::is_idle`]) is also `Truncated`: the
//!   caller knows whether a request was outstanding (a keep-alive connection closed by the peer
//!   between deliveries is the common case, and the delivery can be retried on a new one).
//!   After `on_eof` the reader is finished.
//! - After [`ResponseEvent::Error`] close the connection: the framing is lost. The reader stays
//!   failed and returns the same error again. After a response with `keep_alive == false`, close.
//! - Memory: the reader holds at most `max_body_keep` body bytes plus the parsed head; the
//!   caller's buffer needs at most `max_head_bytes` plus one read.

use std::fmt;
use std::mem::{self, MaybeUninit};
use std::time::Duration;

use super::chunked::{append_capped, ChunkedDecoder};
use super::response::push_decimal;
use super::{HttpError, Limits};
use crate::net::date::parse_http_date;

/// Header slots kept on the stack for `httparse`; a larger `max_headers` uses the heap.
const INLINE_HEADERS: usize = 64;
/// Longest chunk-size line (digits, extensions, CRLF) accepted in a chunked response body.
const MAX_CHUNK_LINE_BYTES: usize = 4 * 1024;
/// The longest pause a `Retry-After` can ask for; longer values are capped to it.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(86_400);

// ---------------------------------------------------------------------------------------------
// Requests

/// One outbound request. `headers` must not contain `host`, `content-length` or
/// `transfer-encoding`: [`write_request`] writes the first two itself and never chunks.
#[derive(Clone, Copy, Debug)]
pub struct OutboundRequest<'a> {
    /// Method token, e.g. `POST`.
    pub method: &'a str,
    /// `host[:port]` for the `Host` header.
    pub authority: &'a str,
    /// Path and query (origin form); starts with `/`.
    pub path: &'a str,
    /// Extra fields as (name, value), written in order.
    pub headers: &'a [(&'a str, &'a [u8])],
    pub body: &'a [u8],
}

/// Why [`write_request`] refused a request (nothing was written). These come from configuration
/// or event data, so the caller should fail the delivery, not the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestError {
    /// The method is empty or not a token.
    Method,
    /// The authority is empty or has a byte other than visible ASCII.
    Authority,
    /// The path does not start with `/` or has a byte other than visible ASCII.
    Path,
    /// Header `index` has an empty name or a name that is not a token (e.g. CR, LF, NUL, `:`).
    HeaderName { index: usize },
    /// Header `index` has a value with CR, LF, NUL or another control byte (HTAB is allowed).
    HeaderValue { index: usize },
    /// Header `index` is `host`, `content-length` or `transfer-encoding`, which the writer owns.
    ReservedHeader { index: usize },
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Method => f.write_str("invalid request method"),
            RequestError::Authority => f.write_str("invalid authority"),
            RequestError::Path => f.write_str("invalid request path"),
            RequestError::HeaderName { index } => write!(f, "invalid name in header {index}"),
            RequestError::HeaderValue { index } => write!(f, "invalid value in header {index}"),
            RequestError::ReservedHeader { index } => {
                write!(f, "header {index} is set by the client codec")
            }
        }
    }
}

impl std::error::Error for RequestError {}

/// Appends `METHOD path HTTP/1.1`, `host`, `content-length`, the given headers and the body to
/// `out`. Validates first: on error `out` is unchanged.
pub fn write_request(out: &mut Vec<u8>, req: &OutboundRequest<'_>) -> Result<(), RequestError> {
    validate(req)?;
    let fields: usize = req.headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
    out.reserve(
        req.method.len() + req.path.len() + req.authority.len() + fields + req.body.len() + 64,
    );
    out.extend_from_slice(req.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(req.authority.as_bytes());
    out.extend_from_slice(b"\r\ncontent-length: ");
    push_decimal(out, req.body.len() as u64);
    out.extend_from_slice(b"\r\n");
    for (name, value) in req.headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(req.body);
    Ok(())
}

fn validate(req: &OutboundRequest<'_>) -> Result<(), RequestError> {
    if !is_token(req.method.as_bytes()) {
        return Err(RequestError::Method);
    }
    if req.authority.is_empty() || !all_visible(req.authority.as_bytes()) {
        return Err(RequestError::Authority);
    }
    if !req.path.starts_with('/') || !all_visible(req.path.as_bytes()) {
        return Err(RequestError::Path);
    }
    for (index, (name, value)) in req.headers.iter().enumerate() {
        if !is_token(name.as_bytes()) {
            return Err(RequestError::HeaderName { index });
        }
        if ["host", "content-length", "transfer-encoding"]
            .iter()
            .any(|r| name.eq_ignore_ascii_case(r))
        {
            return Err(RequestError::ReservedHeader { index });
        }
        // No early exit, so the loop vectorises (values are the bulk of the bytes checked).
        let bad = value.iter().fold(false, |bad, &b| {
            bad | ((b < 0x20) & (b != b'\t')) | (b == 0x7f)
        });
        if bad {
            return Err(RequestError::HeaderValue { index });
        }
    }
    Ok(())
}

/// Every byte is visible ASCII (0x21..=0x7e).
fn all_visible(s: &[u8]) -> bool {
    s.iter()
        .fold(true, |ok, &b| ok & (b.wrapping_sub(0x21) < 0x7f - 0x21))
}

/// `token` of RFC 9110 §5.6.2: one or more `tchar`.
fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| TCHAR[usize::from(b)])
}

/// `tchar` of RFC 9110 §5.6.2, as a table.
static TCHAR: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric()
            || matches!(c, b'!' | b'#' | b'$' | b'%' | b'&')
            || matches!(
                c,
                b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~'
            );
        b += 1;
    }
    table
};

// ---------------------------------------------------------------------------------------------
// Responses

/// Bounds applied while reading responses. Validated by `config`; the codec does not clamp.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientLimits {
    /// Status line + header fields + final CRLF, per head (interim heads included); also bounds
    /// a chunked body's trailer section. Default: 16 KiB. Over it: `HeadTooLarge`.
    pub max_head_bytes: usize,
    /// Number of header fields. Default: 64. Over it: `HeadTooLarge`.
    pub max_headers: usize,
    /// Body bytes kept in [`Response::body_prefix`]; the rest is counted and dropped.
    /// Default: 4096.
    pub max_body_keep: usize,
    /// Total body bytes allowed (declared or received). Default: 64 MiB. Over it: `BodyTooLarge`.
    pub max_body_bytes: u64,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            max_head_bytes: 16 * 1024,
            max_headers: 64,
            max_body_keep: 4096,
            max_body_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Why a response could not be read. All of them end the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientError {
    /// Not a valid HTTP/1.x response; the detail is a short lowercase text.
    Malformed(&'static str),
    /// A head (or trailer section) over `max_head_bytes`, or more than `max_headers` fields.
    HeadTooLarge,
    /// A body declared or received over `max_body_bytes`.
    BodyTooLarge,
    /// EOF before the end of the response (or before any response).
    Truncated,
    /// A transfer coding other than exactly `chunked`.
    UnsupportedTransferEncoding,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Malformed(detail) => write!(f, "malformed response: {detail}"),
            ClientError::HeadTooLarge => f.write_str("response head too large"),
            ClientError::BodyTooLarge => f.write_str("response body too large"),
            ClientError::Truncated => f.write_str("connection closed before the response ended"),
            ClientError::UnsupportedTransferEncoding => {
                f.write_str("unsupported transfer coding in response")
            }
        }
    }
}

impl std::error::Error for ClientError {}

/// A downstream's `Retry-After` (RFC 9110 §10.2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// delay-seconds, capped at [`MAX_RETRY_AFTER`].
    Delay(Duration),
    /// An HTTP-date, as Unix seconds.
    At(u64),
}

impl RetryAfter {
    /// How long to wait from `now_unix_secs`: a date in the past is zero; capped at
    /// [`MAX_RETRY_AFTER`].
    pub fn delay_from(&self, now_unix_secs: u64) -> Duration {
        match *self {
            RetryAfter::Delay(d) => d,
            RetryAfter::At(t) => Duration::from_secs(t.saturating_sub(now_unix_secs)),
        }
        .min(MAX_RETRY_AFTER)
    }
}

/// Parses a `Retry-After` value: delay-seconds (1*DIGIT, capped at [`MAX_RETRY_AFTER`]) or an
/// HTTP-date in any of its three forms. Surrounding spaces and tabs are ignored; anything else
/// (negative or fractional numbers, garbage) is `None`.
pub fn parse_retry_after(value: &[u8]) -> Option<RetryAfter> {
    let v = trim_ows(value);
    if !v.is_empty() && v.iter().all(u8::is_ascii_digit) {
        let secs = v
            .iter()
            .try_fold(0u64, |n, &b| {
                n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
            })
            .unwrap_or(u64::MAX);
        return Some(RetryAfter::Delay(
            Duration::from_secs(secs).min(MAX_RETRY_AFTER),
        ));
    }
    parse_http_date(v).map(RetryAfter::At)
}

/// A complete final response. Interim (1xx) responses are not reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// All fields in arrival order as (lowercased name, raw value).
    pub headers: Vec<(String, Vec<u8>)>,
    /// The first `max_body_keep` bytes of the decoded body.
    pub body_prefix: Vec<u8>,
    /// Decoded body length (chunk framing excluded), including the bytes not kept.
    pub body_len: u64,
    /// The connection can carry the next request.
    pub keep_alive: bool,
    /// The first `Retry-After` field, if present and valid.
    pub retry_after: Option<RetryAfter>,
}

impl Response {
    /// The first value of the field `name` (compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

/// What [`ResponseReader::poll`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResponseEvent {
    /// More bytes are needed.
    Incomplete,
    /// A complete final response; bytes after it stay in the buffer.
    Response(Response),
    /// The response cannot be read; close the connection.
    Error(ClientError),
}

/// Reads responses from one connection's buffer. Cheap to create.
#[derive(Debug)]
pub struct ResponseReader {
    limits: ClientLimits,
    /// The same bounds in the shape the shared chunked decoder takes.
    chunk_limits: Limits,
    state: State,
}

#[derive(Debug)]
enum State {
    Head(HeadScanner),
    Body {
        response: Response,
        decoder: BodyDecoder,
    },
    Failed(ClientError),
}

#[derive(Debug)]
enum BodyDecoder {
    Length { remaining: u64 },
    Chunked(ChunkedDecoder),
    UntilClose,
}

/// How the body after a head is delimited.
enum Framing {
    Interim,
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

impl ResponseReader {
    pub fn new(limits: ClientLimits) -> Self {
        let chunk_limits = Limits {
            max_head_bytes: limits.max_head_bytes,
            max_headers: limits.max_headers,
            max_uri_bytes: 0,
            max_body_bytes: limits.max_body_bytes,
            max_chunk_line_bytes: MAX_CHUNK_LINE_BYTES,
        };
        ResponseReader {
            limits,
            chunk_limits,
            state: State::Head(HeadScanner::default()),
        }
    }

    /// The limits this reader enforces.
    pub fn limits(&self) -> &ClientLimits {
        &self.limits
    }

    /// True between responses: no byte of a next response has been seen.
    pub fn is_idle(&self) -> bool {
        matches!(&self.state, State::Head(scanner) if scanner.is_idle())
    }

    /// Advances on the bytes in `buf` and removes the bytes it consumed from its front.
    /// Between calls the caller may only append to `buf`.
    pub fn poll(&mut self, buf: &mut Vec<u8>) -> ResponseEvent {
        let (event, consumed) = self.poll_slice(buf);
        buf.drain(..consumed);
        event
    }

    /// Like [`poll`](Self::poll) without touching the buffer: returns the event and how many
    /// bytes from the front of `input` were consumed. The next call must be given the input
    /// starting right after those bytes (the unconsumed rest, possibly with more appended).
    pub fn poll_slice(&mut self, input: &[u8]) -> (ResponseEvent, usize) {
        let mut consumed = 0;
        let event = self.step(input, &mut consumed);
        if let ResponseEvent::Error(e) = event {
            self.state = State::Failed(e);
        }
        (event, consumed)
    }

    /// The peer closed the connection (after `poll` returned `Incomplete` on all buffered
    /// bytes). Completes a close-delimited body; anything else is `Truncated`. Afterwards the
    /// reader is finished and keeps returning an error.
    pub fn on_eof(&mut self) -> ResponseEvent {
        let state = mem::replace(&mut self.state, State::Failed(ClientError::Truncated));
        match state {
            State::Body {
                response,
                decoder: BodyDecoder::UntilClose,
            } => ResponseEvent::Response(response),
            State::Failed(e) => {
                self.state = State::Failed(e);
                ResponseEvent::Error(e)
            }
            State::Head(_) | State::Body { .. } => ResponseEvent::Error(ClientError::Truncated),
        }
    }

    fn step(&mut self, input: &[u8], consumed: &mut usize) -> ResponseEvent {
        loop {
            let scanner = match &mut self.state {
                State::Failed(e) => return ResponseEvent::Error(*e),
                State::Body { .. } => return self.read_body(input, consumed),
                State::Head(scanner) => scanner,
            };
            if scanner.is_idle() {
                // Stray empty lines before a status line (e.g. after a body) are skipped.
                loop {
                    let rest = &input[*consumed..];
                    if rest.starts_with(b"\r\n") {
                        *consumed += 2;
                    } else if rest.starts_with(b"\n") {
                        *consumed += 1;
                    } else if rest == b"\r" {
                        return ResponseEvent::Incomplete;
                    } else {
                        break;
                    }
                }
            }
            let start = *consumed;
            let end = match scanner.scan(&input[start..], self.limits.max_head_bytes) {
                Ok(Some(len)) => start + len,
                Ok(None) => return ResponseEvent::Incomplete,
                Err(e) => return ResponseEvent::Error(e),
            };
            let head = match parse_head(&input[start..end], self.limits.max_headers) {
                Ok(head) => head,
                Err(e) => return ResponseEvent::Error(e),
            };
            *consumed = end;
            let framing = match framing(&head, &self.limits) {
                Ok(framing) => framing,
                Err(e) => return ResponseEvent::Error(e),
            };
            let decoder = match framing {
                Framing::Interim => {
                    self.state = State::Head(HeadScanner::default());
                    continue;
                }
                Framing::None | Framing::Length(0) => {
                    self.state = State::Head(HeadScanner::default());
                    return ResponseEvent::Response(head.into_response(true));
                }
                Framing::Length(n) => BodyDecoder::Length { remaining: n },
                Framing::Chunked => BodyDecoder::Chunked(ChunkedDecoder::new()),
                Framing::UntilClose => BodyDecoder::UntilClose,
            };
            let until_close = matches!(decoder, BodyDecoder::UntilClose);
            let response = head.into_response(!until_close);
            self.state = State::Body { response, decoder };
            return self.read_body(input, consumed);
        }
    }

    /// Feeds `input[*consumed..]` to the body decoder; on completion returns the response and
    /// resets for the next one.
    fn read_body(&mut self, input: &[u8], consumed: &mut usize) -> ResponseEvent {
        let State::Body { response, decoder } = &mut self.state else {
            unreachable!("read_body outside the body state");
        };
        let input = &input[*consumed..];
        let keep = self.limits.max_body_keep;
        let done = match decoder {
            BodyDecoder::Length { remaining } => {
                let take = (*remaining).min(input.len() as u64) as usize;
                keep_prefix(response, &input[..take], keep);
                *remaining -= take as u64;
                *consumed += take;
                *remaining == 0
            }
            BodyDecoder::Chunked(chunked) => {
                let sink = |data: &[u8]| keep_prefix(response, data, keep);
                match chunked.decode_with(input, &self.chunk_limits, sink) {
                    Ok(n) => *consumed += n,
                    Err(e) => return ResponseEvent::Error(chunked_error(e)),
                }
                chunked.is_done()
            }
            BodyDecoder::UntilClose => {
                let total = response.body_len.saturating_add(input.len() as u64);
                if total > self.limits.max_body_bytes {
                    return ResponseEvent::Error(ClientError::BodyTooLarge);
                }
                keep_prefix(response, input, keep);
                *consumed += input.len();
                false
            }
        };
        if !done {
            return ResponseEvent::Incomplete;
        }
        match mem::replace(&mut self.state, State::Head(HeadScanner::default())) {
            State::Body { response, .. } => ResponseEvent::Response(response),
            _ => unreachable!("checked above"),
        }
    }
}

/// Counts `data` into the body and keeps what fits in the first `keep` bytes.
fn keep_prefix(response: &mut Response, data: &[u8], keep: usize) {
    response.body_len += data.len() as u64;
    let room = keep
        .saturating_sub(response.body_prefix.len())
        .min(data.len());
    if room > 0 {
        append_capped(&mut response.body_prefix, &data[..room], keep as u64);
    }
}

fn chunked_error(e: HttpError) -> ClientError {
    match e {
        HttpError::BadRequest(detail) => ClientError::Malformed(detail),
        HttpError::PayloadTooLarge => ClientError::BodyTooLarge,
        HttpError::HeaderTooLarge => ClientError::HeadTooLarge,
        _ => ClientError::Malformed("invalid chunked body"),
    }
}

/// Incremental end-of-head finder over the buffer starting at the status line.
#[derive(Debug, Default)]
struct HeadScanner {
    scanned: usize,
    line_start: usize,
}

impl HeadScanner {
    fn is_idle(&self) -> bool {
        self.scanned == 0
    }

    /// Scans the new bytes of `buf`; returns the head's length (through the empty line) once
    /// complete.
    fn scan(&mut self, buf: &[u8], max_head_bytes: usize) -> Result<Option<usize>, ClientError> {
        const PREFIX: &[u8] = b"HTTP/";
        let window = &buf[..buf.len().min(max_head_bytes)];
        if self.scanned < PREFIX.len() {
            let n = window.len().min(PREFIX.len());
            if window[..n] != PREFIX[..n] {
                return Err(ClientError::Malformed("not an http/1.x response"));
            }
        }
        while let Some(offset) = find_lf(&window[self.scanned..]) {
            let lf = self.scanned + offset;
            self.scanned = lf + 1;
            let line = &window[self.line_start..lf];
            if line.is_empty() || line == b"\r" {
                return Ok(Some(lf + 1));
            }
            self.line_start = lf + 1;
        }
        self.scanned = window.len();
        if !buf.is_empty() && buf.len() >= max_head_bytes {
            return Err(ClientError::HeadTooLarge);
        }
        Ok(None)
    }
}

/// Position of the first LF. Tests 16 bytes at a time without an early exit, so the test
/// vectorises; the byte search then runs only inside the block that has the LF.
fn find_lf(bytes: &[u8]) -> Option<usize> {
    let mut offset = 0;
    for block in bytes.chunks_exact(16) {
        if block.iter().fold(false, |found, &b| found | (b == b'\n')) {
            break;
        }
        offset += 16;
    }
    bytes[offset..]
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| offset + i)
}

/// A parsed response head.
struct Head {
    status: u16,
    http11: bool,
    headers: Vec<(String, Vec<u8>)>,
}

impl Head {
    fn into_response(self, keep_alive_allowed: bool) -> Response {
        let keep_alive = keep_alive_allowed && self.keep_alive();
        let retry_after = self
            .headers
            .iter()
            .find(|(n, _)| n == "retry-after")
            .and_then(|(_, v)| parse_retry_after(v));
        Response {
            status: self.status,
            headers: self.headers,
            body_prefix: Vec::new(),
            body_len: 0,
            keep_alive,
            retry_after,
        }
    }

    /// RFC 9112 §9.3: HTTP/1.1 persists unless `close`; HTTP/1.0 only with `keep-alive`.
    fn keep_alive(&self) -> bool {
        let (mut close, mut keep) = (false, false);
        for token in self.list("connection") {
            close |= token.eq_ignore_ascii_case(b"close");
            keep |= token.eq_ignore_ascii_case(b"keep-alive");
        }
        !close && (self.http11 || keep)
    }

    /// The non-empty elements of every `name` field, trimmed (RFC 9110 §5.6.1).
    fn list<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n == name)
            .flat_map(|(_, v)| v.split(|&b| b == b','))
            .map(trim_ows)
            .filter(|e| !e.is_empty())
    }

    fn has(&self, name: &str) -> bool {
        self.headers.iter().any(|(n, _)| n == name)
    }
}

/// Parses a complete head (`bytes` ends with the empty line).
fn parse_head(bytes: &[u8], max_headers: usize) -> Result<Head, ClientError> {
    // Uninitialised slots: httparse writes only those it fills.
    let mut inline = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; INLINE_HEADERS];
    let mut heap;
    let slots: &mut [MaybeUninit<httparse::Header<'_>>] = if max_headers <= INLINE_HEADERS {
        &mut inline[..max_headers]
    } else {
        heap = Vec::with_capacity(max_headers);
        heap.resize_with(max_headers, MaybeUninit::uninit);
        &mut heap
    };
    let mut resp = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, bytes, slots);
    match parsed {
        Ok(httparse::Status::Complete(n)) if n == bytes.len() => {}
        Ok(_) => return Err(ClientError::Malformed("malformed response head")),
        Err(httparse::Error::TooManyHeaders) => return Err(ClientError::HeadTooLarge),
        Err(httparse::Error::Status) => return Err(ClientError::Malformed("invalid status line")),
        Err(httparse::Error::Version) => {
            return Err(ClientError::Malformed("invalid http version"))
        }
        Err(_) => return Err(ClientError::Malformed("invalid header field")),
    }
    let (Some(version), Some(status)) = (resp.version, resp.code) else {
        return Err(ClientError::Malformed("invalid status line"));
    };
    if !(100..=599).contains(&status) {
        return Err(ClientError::Malformed("invalid status code"));
    }
    let headers = resp
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
        .collect();
    Ok(Head {
        status,
        http11: version == 1,
        headers,
    })
}

/// Body framing of a response to a request other than HEAD or CONNECT (RFC 9112 §6.3).
fn framing(head: &Head, limits: &ClientLimits) -> Result<Framing, ClientError> {
    match head.status {
        101 => return Err(ClientError::Malformed("unexpected 101 switching protocols")),
        100..=199 => return Ok(Framing::Interim),
        204 | 304 => return Ok(Framing::None),
        _ => {}
    }
    if head.has("transfer-encoding") {
        if !head.http11 {
            return Err(ClientError::Malformed("transfer-encoding on http/1.0"));
        }
        if head.has("content-length") {
            return Err(ClientError::Malformed(
                "both content-length and transfer-encoding",
            ));
        }
        let mut codings = head.list("transfer-encoding");
        return match (codings.next(), codings.next()) {
            (None, _) => Err(ClientError::Malformed("empty transfer-encoding")),
            (Some(c), None) if c.eq_ignore_ascii_case(b"chunked") => Ok(Framing::Chunked),
            _ => Err(ClientError::UnsupportedTransferEncoding),
        };
    }
    if !head.has("content-length") {
        return Ok(Framing::UntilClose);
    }
    let mut length = None;
    for element in head
        .headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .flat_map(|(_, v)| v.split(|&b| b == b','))
    {
        let n = parse_length(trim_ows(element))?;
        if length.is_some_and(|l| l != n) {
            return Err(ClientError::Malformed("conflicting content-length"));
        }
        length = Some(n);
    }
    match length {
        Some(n) if n > limits.max_body_bytes => Err(ClientError::BodyTooLarge),
        Some(n) => Ok(Framing::Length(n)),
        None => Err(ClientError::Malformed("invalid content-length")),
    }
}

/// 1*DIGIT; all digits but over u64 is certainly too large.
fn parse_length(s: &[u8]) -> Result<u64, ClientError> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return Err(ClientError::Malformed("invalid content-length"));
    }
    s.iter()
        .try_fold(0u64, |n, &b| {
            n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        })
        .ok_or(ClientError::BodyTooLarge)
}

fn trim_ows(s: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = s.iter().position(|b| !is_ows(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !is_ows(b)).map_or(start, |i| i + 1);
    &s[start..end]
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
