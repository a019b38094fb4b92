//! The request head: an incremental scanner that finds its end and applies the limits early,
//! then one `httparse` pass and the semantic checks of RFC 9112 (framing, `Host`, `Connection`,
//! `Expect`).
//!
//! The scanner looks at each new byte once. On the request line it runs a byte lexer
//! (method → target → version), so a too-long target is answered 414 as soon as the target
//! crosses the limit and a non-HTTP/1.x version 505 as soon as its line ends. After the request
//! line it jumps from LF to LF, checks that each LF follows a CR and stops at the first empty
//! line. `httparse` then validates the whole head in one pass.

use std::mem::MaybeUninit;

use super::message::{BodyFraming, HttpError, Limits, Method, Version};

/// Longest accepted method token; longer ones get 501 (RFC 9110 §9.1).
const MAX_METHOD_BYTES: usize = 32;
/// Longest version token the lexer waits for before answering 400.
const MAX_VERSION_BYTES: usize = 16;
/// Header slots kept on the stack for `httparse`; a larger `max_headers` uses the heap.
const INLINE_HEADERS: usize = 64;

/// A parsed request head. Header names are lowercased; values are raw bytes (trimmed of
/// surrounding whitespace by `httparse`), in arrival order.
#[derive(Clone, Debug)]
pub struct RequestHead {
    pub method: Method,
    pub version: Version,
    /// HTTP/1.1: true unless `Connection: close`. HTTP/1.0: true only with `Connection: keep-alive`.
    pub keep_alive: bool,
    /// `Expect: 100-continue` on an HTTP/1.1 request.
    pub expect_continue: bool,
    pub framing: BodyFraming,
    /// Request-target as sent (origin form: path and optional query).
    target: String,
    /// All lowercased header names, back to back.
    names: String,
    /// All header values, back to back.
    values: Vec<u8>,
    /// End offsets of each field's name in `names` and value in `values`.
    fields: Vec<(usize, usize)>,
}

impl RequestHead {
    /// Bytes this head holds on the heap (what keeping it for reuse costs).
    pub fn heap_bytes(&self) -> usize {
        self.target.capacity()
            + self.names.capacity()
            + self.values.capacity()
            + self.fields.capacity() * std::mem::size_of::<(usize, usize)>()
    }

    /// The request-target: path and query, e.g. `/hooks/github?x=1`.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The path: the target up to the first `?`. For an absolute-form target
    /// (`http://host/p?q`, RFC 9112 §3.2.2) the scheme and authority are skipped and an empty
    /// path reads as `/`. An asterisk-form target (`OPTIONS *`) is returned as `*`.
    pub fn path(&self) -> &str {
        let origin = self.origin_part();
        match origin.split_once('?') {
            Some(("", _)) => "/",
            Some((path, _)) => path,
            None if origin.is_empty() => "/",
            None => origin,
        }
    }

    /// The target after the first `?`, if there is one.
    pub fn query(&self) -> Option<&str> {
        self.origin_part().split_once('?').map(|(_, query)| query)
    }

    /// The target without scheme and authority when it is in absolute form.
    fn origin_part(&self) -> &str {
        let t = self.target.as_str();
        if t.starts_with('/') || t == "*" {
            return t;
        }
        match t.split_once("://") {
            Some((_, rest)) => rest.find(['/', '?']).map_or("", |i| &rest[i..]),
            None => t,
        }
    }

    /// All fields in arrival order as (lowercased name, value).
    pub fn headers(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        let mut name_start = 0;
        let mut value_start = 0;
        self.fields.iter().map(move |&(name_end, value_end)| {
            let field = (
                &self.names[name_start..name_end],
                &self.values[value_start..value_end],
            );
            name_start = name_end;
            value_start = value_end;
            field
        })
    }

    /// The first value of the field `name` (compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Number of header fields.
    pub fn header_count(&self) -> usize {
        self.fields.len()
    }

    /// The `Content-Type` value, if any.
    pub fn content_type(&self) -> Option<&[u8]> {
        self.header("content-type")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Method,
    Target,
    Version,
    /// Saw the CR ending the request line.
    RequestLineLf,
    /// In the header section; `line_start` is the start of the current line.
    Fields,
}

/// Incremental end-of-head finder. Offsets are into the caller's buffer, which only grows at
/// the end between calls.
#[derive(Debug)]
pub(crate) struct HeadScanner {
    scanned: usize,
    phase: Phase,
    /// Start of the current token (request line) or line (fields).
    mark: usize,
}

impl HeadScanner {
    pub(crate) fn new() -> Self {
        HeadScanner {
            scanned: 0,
            phase: Phase::Method,
            mark: 0,
        }
    }

    /// True when no byte of a head has been seen yet.
    pub(crate) fn is_idle(&self) -> bool {
        self.scanned == 0
    }

    /// Scans the new bytes of `buf` (which starts at the request line). Returns the length of
    /// the head including its final CRLF once it is complete.
    pub(crate) fn scan(&mut self, buf: &[u8], limits: &Limits) -> Result<Option<usize>, HttpError> {
        let window = &buf[..buf.len().min(limits.max_head_bytes)];
        while self.scanned < window.len() {
            if self.phase == Phase::Target {
                // Skip the run of target bytes in one go (the lexer would accept each of them),
                // stopping at the byte that makes the target one byte too long.
                let max_end = (self.mark + limits.max_uri_bytes).min(window.len());
                let run = window[self.scanned..max_end.max(self.scanned)]
                    .iter()
                    .position(|b| !(0x21..=0x7e).contains(b))
                    .unwrap_or(max_end.saturating_sub(self.scanned));
                self.scanned += run;
                if self.scanned == window.len() {
                    break;
                }
            }
            if self.phase != Phase::Fields {
                self.request_line_byte(window, limits)?;
                self.scanned += 1;
                continue;
            }
            let Some(offset) = find_lf(&window[self.scanned..]) else {
                self.scanned = window.len();
                break;
            };
            let lf = self.scanned + offset;
            if window[lf - 1] != b'\r' {
                return Err(HttpError::BadRequest("bare LF in header section"));
            }
            self.scanned = lf + 1;
            if lf - 1 == self.mark {
                return Ok(Some(lf + 1));
            }
            self.mark = lf + 1;
        }
        if !buf.is_empty() && buf.len() >= limits.max_head_bytes {
            return Err(HttpError::HeaderTooLarge);
        }
        Ok(None)
    }

    /// One byte of the request line, at `window[self.scanned]`.
    fn request_line_byte(&mut self, window: &[u8], limits: &Limits) -> Result<(), HttpError> {
        let pos = self.scanned;
        let b = window[pos];
        let len = pos - self.mark;
        match self.phase {
            Phase::Method if b == b' ' => {
                if len == 0 {
                    return Err(HttpError::BadRequest("empty method"));
                }
                self.phase = Phase::Target;
                self.mark = pos + 1;
            }
            Phase::Method if is_tchar(b) => {
                if len >= MAX_METHOD_BYTES {
                    return Err(HttpError::NotImplemented);
                }
            }
            Phase::Method => return Err(HttpError::BadRequest("invalid method")),
            Phase::Target if b == b' ' => {
                if len == 0 {
                    return Err(HttpError::BadRequest("empty request-target"));
                }
                self.phase = Phase::Version;
                self.mark = pos + 1;
            }
            Phase::Target if (0x21..=0x7e).contains(&b) => {
                if len >= limits.max_uri_bytes {
                    return Err(HttpError::UriTooLong);
                }
            }
            Phase::Target => return Err(HttpError::BadRequest("invalid byte in request-target")),
            Phase::Version if b == b'\r' => {
                check_version(&window[self.mark..pos])?;
                self.phase = Phase::RequestLineLf;
            }
            Phase::Version if b == b'\n' => {
                return Err(HttpError::BadRequest("bare LF in request line"))
            }
            Phase::Version => {
                if len >= MAX_VERSION_BYTES {
                    return Err(HttpError::BadRequest("invalid http version"));
                }
            }
            Phase::RequestLineLf if b == b'\n' => {
                self.phase = Phase::Fields;
                self.mark = pos + 1;
            }
            Phase::RequestLineLf => return Err(HttpError::BadRequest("bare CR in request line")),
            Phase::Fields => unreachable!("fields are scanned line by line"),
        }
        Ok(())
    }
}

/// Position of the first LF, eight bytes at a time (SWAR zero-byte test on `word ^ 0x0a…0a`).
fn find_lf(bytes: &[u8]) -> Option<usize> {
    const LF: u64 = u64::from_ne_bytes([b'\n'; 8]);
    const LO: u64 = u64::from_ne_bytes([0x01; 8]);
    const HI: u64 = u64::from_ne_bytes([0x80; 8]);
    let mut words = bytes.chunks_exact(8);
    let mut offset = 0;
    for word in words.by_ref() {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let x = u64::from_ne_bytes(w) ^ LF;
        if x.wrapping_sub(LO) & !x & HI != 0 {
            break;
        }
        offset += 8;
    }
    bytes[offset..]
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| offset + i)
}

/// `tchar` of RFC 9110 §5.6.2.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// HTTP/1.0 and HTTP/1.1 pass; `HTTP/<digits>[.<digits>]` is 505; anything else 400.
fn check_version(token: &[u8]) -> Result<(), HttpError> {
    if token == b"HTTP/1.1" || token == b"HTTP/1.0" {
        return Ok(());
    }
    let Some(number) = token.strip_prefix(b"HTTP/") else {
        return Err(HttpError::BadRequest("invalid http version"));
    };
    let (major, minor) = match number.iter().position(|&b| b == b'.') {
        Some(dot) => (&number[..dot], Some(&number[dot + 1..])),
        None => (number, None),
    };
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    let minor_ok = match minor {
        Some(minor) => digits(minor),
        None => true,
    };
    if digits(major) && minor_ok {
        Err(HttpError::VersionNotSupported)
    } else {
        Err(HttpError::BadRequest("invalid http version"))
    }
}

/// Parses a complete head (`head` ends with the empty line) and applies the semantic checks.
/// `spare`, a head the caller is done with, lends its buffers (cleared here), so a steady
/// stream of requests allocates nothing for its heads.
pub(crate) fn parse(
    head: &[u8],
    limits: &Limits,
    spare: Option<RequestHead>,
) -> Result<RequestHead, HttpError> {
    // Uninitialised slots: httparse writes only those it fills, which saves a 2 KiB memset.
    let mut inline = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; INLINE_HEADERS];
    let mut heap;
    let slots: &mut [MaybeUninit<httparse::Header<'_>>] = if limits.max_headers <= INLINE_HEADERS {
        &mut inline[..limits.max_headers]
    } else {
        heap = Vec::with_capacity(limits.max_headers);
        heap.resize_with(limits.max_headers, MaybeUninit::uninit);
        &mut heap
    };
    let mut req = httparse::Request::new(&mut []);
    match req.parse_with_uninit_headers(head, slots) {
        Ok(httparse::Status::Complete(n)) if n == head.len() => {}
        Ok(_) => return Err(HttpError::BadRequest("malformed request head")),
        Err(e) => return Err(map_httparse_error(e)),
    }
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(HttpError::BadRequest("malformed request line"));
    };
    let version = if version == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let (mut target_buf, mut names, mut values, mut fields) = match spare {
        Some(h) => (h.target, h.names, h.values, h.fields),
        None => Default::default(),
    };
    target_buf.clear();
    target_buf.push_str(target);
    names.clear();
    names.reserve(req.headers.iter().map(|h| h.name.len()).sum());
    values.clear();
    values.reserve(req.headers.iter().map(|h| h.value.len()).sum());
    fields.clear();
    fields.reserve(req.headers.len());
    let mut parsed = RequestHead {
        method: Method::from_token(method),
        version,
        keep_alive: false,
        expect_continue: false,
        framing: BodyFraming::None,
        target: target_buf,
        names,
        values,
        fields,
    };
    for h in req.headers.iter() {
        let start = parsed.names.len();
        parsed.names.push_str(h.name);
        parsed.names[start..].make_ascii_lowercase();
        parsed.values.extend_from_slice(h.value);
        parsed
            .fields
            .push((parsed.names.len(), parsed.values.len()));
    }
    interpret(&mut parsed, limits)?;
    Ok(parsed)
}

fn map_httparse_error(e: httparse::Error) -> HttpError {
    match e {
        httparse::Error::TooManyHeaders => HttpError::HeaderTooLarge,
        httparse::Error::HeaderName => HttpError::BadRequest("invalid header name"),
        httparse::Error::HeaderValue => HttpError::BadRequest("invalid header value"),
        httparse::Error::NewLine => HttpError::BadRequest("invalid line ending"),
        httparse::Error::Version => HttpError::BadRequest("invalid http version"),
        httparse::Error::Token | httparse::Error::Status => {
            HttpError::BadRequest("malformed request line")
        }
    }
}

/// What the framing-related fields said, gathered in one pass over the fields.
#[derive(Default)]
struct Framing {
    hosts: usize,
    content_length: Option<Result<u64, HttpError>>,
    te_present: bool,
    te_chunked: usize,
    te_other: bool,
    conn_close: bool,
    conn_keep_alive: bool,
    expect_continue: bool,
    expect_other: bool,
}

/// Applies RFC 9112 §3.2 (Host), §6.1–§6.3 (framing), §9.3 (persistence), RFC 9110 §10.1.1.
fn interpret(head: &mut RequestHead, limits: &Limits) -> Result<(), HttpError> {
    let mut f = Framing::default();
    for (name, value) in head.headers() {
        match name {
            "host" => f.hosts += 1,
            "content-length" => {
                let n = parse_content_length(value);
                f.content_length = Some(match (f.content_length, n) {
                    (None, n) => n,
                    (Some(Ok(a)), Ok(b)) if a == b => Ok(a),
                    (Some(Err(e)), _) => Err(e),
                    (Some(_), Err(e)) => Err(e),
                    (Some(Ok(_)), Ok(_)) => {
                        Err(HttpError::BadRequest("conflicting content-length"))
                    }
                });
            }
            "transfer-encoding" => {
                f.te_present = true;
                for coding in list_elements(value) {
                    if coding.eq_ignore_ascii_case(b"chunked") {
                        f.te_chunked += 1;
                    } else {
                        f.te_other = true;
                    }
                }
            }
            "connection" => {
                for option in list_elements(value) {
                    f.conn_close |= option.eq_ignore_ascii_case(b"close");
                    f.conn_keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
                }
            }
            "expect" if head.version == Version::Http11 => {
                if value.eq_ignore_ascii_case(b"100-continue") {
                    f.expect_continue = true;
                } else {
                    f.expect_other = true;
                }
            }
            _ => {}
        }
    }
    if f.hosts > 1 {
        return Err(HttpError::BadRequest("more than one host field"));
    }
    if f.hosts == 0 && head.version == Version::Http11 {
        return Err(HttpError::BadRequest("missing host field"));
    }
    head.framing = framing(&f, head, limits)?;
    head.keep_alive = match head.version {
        Version::Http11 => !f.conn_close,
        Version::Http10 => f.conn_keep_alive && !f.conn_close,
    };
    if f.expect_other {
        return Err(HttpError::ExpectationFailed);
    }
    head.expect_continue = f.expect_continue;
    Ok(())
}

fn framing(f: &Framing, head: &RequestHead, limits: &Limits) -> Result<BodyFraming, HttpError> {
    if f.te_present {
        if f.content_length.is_some() {
            return Err(HttpError::BadRequest(
                "both content-length and transfer-encoding",
            ));
        }
        if head.version == Version::Http10 {
            return Err(HttpError::BadRequest("transfer-encoding in http/1.0"));
        }
        if f.te_other {
            return Err(HttpError::NotImplemented);
        }
        return match f.te_chunked {
            0 => Err(HttpError::BadRequest("empty transfer-encoding")),
            1 => Ok(BodyFraming::Chunked),
            _ => Err(HttpError::BadRequest("chunked applied more than once")),
        };
    }
    match f.content_length {
        Some(Ok(n)) if n > limits.max_body_bytes => Err(HttpError::PayloadTooLarge),
        Some(Ok(n)) => Ok(BodyFraming::Length(n)),
        Some(Err(e)) => Err(e),
        None if head.method.requires_length() => Err(HttpError::LengthRequired),
        None => Ok(BodyFraming::None),
    }
}

/// `Content-Length = 1*DIGIT`, also as a list of identical values (RFC 9110 §8.6).
/// All digits but beyond u64 → 413; anything else malformed → 400.
fn parse_content_length(value: &[u8]) -> Result<u64, HttpError> {
    let mut result = None;
    for element in value.split(|&b| b == b',') {
        let digits = trim_ows(element);
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return Err(HttpError::BadRequest("invalid content-length"));
        }
        let n = digits.iter().try_fold(0u64, |acc, &d| {
            acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        });
        let n = n.ok_or(HttpError::PayloadTooLarge)?;
        match result {
            Some(prev) if prev != n => {
                return Err(HttpError::BadRequest("conflicting content-length"))
            }
            _ => result = Some(n),
        }
    }
    result.ok_or(HttpError::BadRequest("invalid content-length"))
}

/// Non-empty elements of a comma-separated list, trimmed of optional whitespace.
fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim_ows)
        .filter(|e| !e.is_empty())
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_parsed_into_a_spare_keeps_nothing_of_the_spare() {
        let limits = Limits::default();
        let big = b"POST /hooks/a-long-path?with=query HTTP/1.1\r\nHost: h\r\n\
            X-One: 1111111111\r\nX-Two: 2222222222\r\nContent-Length: 3\r\n\r\n";
        let small = b"GET /m HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
        let spare = parse(big, &limits, None).unwrap();
        let reused = parse(small, &limits, Some(spare)).unwrap();
        let fresh = parse(small, &limits, None).unwrap();
        assert_eq!(format!("{reused:?}"), format!("{fresh:?}"));
        assert_eq!(reused.headers().count(), 1);
        assert_eq!(reused.target(), "/m");
        assert!(reused.keep_alive);
        // The buffers came along: as large as the first head needed.
        assert!(reused.heap_bytes() >= fresh.heap_bytes());
    }

    #[test]
    fn version_tokens() {
        assert_eq!(check_version(b"HTTP/1.1"), Ok(()));
        assert_eq!(check_version(b"HTTP/1.0"), Ok(()));
        for v in [&b"HTTP/2.0"[..], b"HTTP/1.2", b"HTTP/3", b"HTTP/10.25"] {
            assert_eq!(
                check_version(v),
                Err(HttpError::VersionNotSupported),
                "{v:?}"
            );
        }
        for v in [
            &b"HTTP/"[..],
            b"HTTP/1.",
            b"http/1.1",
            b"FOO",
            b"HTTP/1.x",
            b"",
        ] {
            assert!(
                matches!(check_version(v), Err(HttpError::BadRequest(_))),
                "{v:?}"
            );
        }
    }

    #[test]
    fn content_length_values() {
        assert_eq!(parse_content_length(b"0"), Ok(0));
        assert_eq!(parse_content_length(b"42"), Ok(42));
        assert_eq!(parse_content_length(b"42, 42"), Ok(42));
        assert_eq!(
            parse_content_length(b"18446744073709551616"),
            Err(HttpError::PayloadTooLarge)
        );
        for bad in [&b""[..], b"+5", b"-1", b"5 5", b"0x10", b"1,2", b"4,", b" "] {
            assert!(
                matches!(parse_content_length(bad), Err(HttpError::BadRequest(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn find_lf_matches_naive_search() {
        let mut bytes = vec![b'a'; 40];
        assert_eq!(find_lf(&bytes), None);
        for i in 0..40 {
            bytes[i] = b'\n';
            assert_eq!(find_lf(&bytes), Some(i));
            assert_eq!(find_lf(&bytes[..i]), None);
            bytes[i] = 0x8a; // LF with the high bit set must not match
            assert_eq!(find_lf(&bytes), None);
            bytes[i] = b'a';
        }
    }

    #[test]
    fn ows_and_lists() {
        assert_eq!(trim_ows(b" \ta b\t "), b"a b");
        let v: Vec<&[u8]> = list_elements(b" gzip ,, chunked ").collect();
        assert_eq!(v, vec![&b"gzip"[..], b"chunked"]);
    }
}
