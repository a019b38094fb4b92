//! Sans-IO HTTP/1.1 client codec for outbound deliveries: requests out, responses in.
//!
//! The dispatch connection (on the core's loop over `net::io`) owns a socket, an output
//! `Vec<u8>` and a read buffer. To deliver an event it calls [`write_request`] (which validates
//! everything before it writes a byte) and flushes the output; then it appends whatever the
//! socket produced to the read buffer and calls [`ResponseReader::poll`] until it returns
//! something other than [`ResponseEvent::Incomplete`]. When the socket reports EOF it calls
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
use super::message::{HttpError, Limits};
use crate::net::date::parse_http_date;

/// Header slots kept on the stack for `httparse`; a larger `max_headers` uses the heap.
const INLINE_HEADERS: usize = 64;
/// Longest chunk-size line (digits, extensions, CRLF) accepted in a chunked response body.
const MAX_CHUNK_LINE_BYTES: usize = 4 * 1024;
/// The longest pause a `Retry-After` can ask for; longer values are capped to it.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(86_400);

mod request;
pub mod uri;
pub use request::{is_token, write_request, OutboundRequest, RequestError, RequestTemplate};

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
    /// All fields in arrival order as (lowercased name, raw value); empty from a reader made
    /// [`ResponseReader::status_only`].
    pub headers: Vec<(String, Vec<u8>)>,
    /// The first `max_body_keep` bytes of the decoded body (none from a
    /// [`ResponseReader::status_only`] reader).
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
    /// Responses carry their fields and body prefix; see [`ResponseReader::status_only`].
    keep_headers: bool,
    /// Body bytes kept in [`Response::body_prefix`]: `max_body_keep`, or what
    /// [`ResponseReader::status_only`] and [`ResponseReader::keeping_body`] set.
    keep_body: usize,
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
#[derive(Clone, Copy)]
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
            keep_body: limits.max_body_keep,
            limits,
            keep_headers: true,
            chunk_limits,
            state: State::Head(HeadScanner::default()),
        }
    }

    /// This reader, reporting responses with an empty [`Response::headers`] and
    /// [`Response::body_prefix`]: the status, framing (every bound included), `body_len`,
    /// `keep_alive` and `retry_after` are read as before, but neither a field nor a body byte is
    /// copied out (a caller that needs only those, like the outbound pool, saves an
    /// allocation per field and one for the body).
    pub fn status_only(mut self) -> Self {
        self.keep_headers = false;
        self.keep_body = 0;
        self
    }

    /// This reader, keeping the first `n` body bytes (at most `max_body_keep`) in
    /// [`Response::body_prefix`] whatever else it keeps: a [`status_only`](Self::status_only)
    /// reader that still reports the start of the body (the outbound pool's
    /// `response_prefix`, issue 27). An empty body allocates nothing.
    pub fn keeping_body(mut self, n: usize) -> Self {
        self.keep_body = n.min(self.limits.max_body_keep);
        self
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
            let head = match parse_head(&input[start..end], &self.limits, self.keep_headers) {
                Ok(head) => head,
                Err(e) => return ResponseEvent::Error(e),
            };
            *consumed = end;
            let decoder = match head.framing {
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
        let keep = self.keep_body;
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

/// A parsed response head: what the reader acts on, and its fields when they are kept.
struct Head {
    status: u16,
    framing: Framing,
    /// The fields allow reuse (before the framing's say: a close-delimited body never does).
    keep_alive: bool,
    retry_after: Option<RetryAfter>,
    /// All fields as (lowercased name, raw value); empty when the reader does not keep them.
    headers: Vec<(String, Vec<u8>)>,
}

impl Head {
    fn into_response(self, keep_alive_allowed: bool) -> Response {
        Response {
            status: self.status,
            headers: self.headers,
            body_prefix: Vec::new(),
            body_len: 0,
            keep_alive: keep_alive_allowed && self.keep_alive,
            retry_after: self.retry_after,
        }
    }
}

/// The fields of a head as `httparse` found them (names in any case), read in place.
struct Fields<'h, 'b> {
    http11: bool,
    fields: &'h [httparse::Header<'b>],
}

impl<'h, 'b> Fields<'h, 'b> {
    /// The values of every `name` field (`name` lowercase; field names compared without case).
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'b [u8]> + 'a {
        self.fields
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }

    /// The non-empty elements of every `name` field, trimmed (RFC 9110 §5.6.1).
    fn list<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'b [u8]> + 'a {
        self.values(name)
            .flat_map(|v| v.split(|&b| b == b','))
            .map(trim_ows)
            .filter(|e| !e.is_empty())
    }

    fn has(&self, name: &str) -> bool {
        self.values(name).next().is_some()
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
}

/// Parses a complete head (`bytes` ends with the empty line) and its framing; the fields are
/// copied out only when `keep_headers`.
fn parse_head(
    bytes: &[u8],
    limits: &ClientLimits,
    keep_headers: bool,
) -> Result<Head, ClientError> {
    let max_headers = limits.max_headers;
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
    let fields = Fields {
        http11: version == 1,
        fields: resp.headers,
    };
    let framing = framing(status, &fields, limits)?;
    let headers = match keep_headers {
        true => fields
            .fields
            .iter()
            .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
            .collect(),
        false => Vec::new(),
    };
    let keep_alive = fields.keep_alive();
    let retry_after = fields
        .values("retry-after")
        .next()
        .and_then(parse_retry_after);
    Ok(Head {
        status,
        framing,
        keep_alive,
        retry_after,
        headers,
    })
}

/// Body framing of a response to a request other than HEAD or CONNECT (RFC 9112 §6.3).
fn framing(
    status: u16,
    head: &Fields<'_, '_>,
    limits: &ClientLimits,
) -> Result<Framing, ClientError> {
    match status {
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
        .values("content-length")
        .flat_map(|v| v.split(|&b| b == b','))
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
