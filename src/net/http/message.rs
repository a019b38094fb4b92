//! The codec's leaf types: size [`Limits`], the refusal [`HttpError`] (one status each), the
//! request [`Method`] and [`Version`], and how a body is delimited ([`BodyFraming`]).

use std::fmt;

/// Size limits applied while reading requests. Validated by `config`; the codec does not clamp.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Request line + header fields + final CRLF. Default: 16 KiB. Over it: 431.
    pub max_head_bytes: usize,
    /// Number of header fields. Default: 64. Over it: 431.
    pub max_headers: usize,
    /// Request-target (path and query). Default: 8 KiB. Over it: 414.
    pub max_uri_bytes: usize,
    /// Decoded body. Default: 10 MiB. Over it: 413.
    pub max_body_bytes: u64,
    /// One chunk-size line including extensions and CRLF. Default: 4 KiB. Over it: 400.
    pub max_chunk_line_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: 16 * 1024,
            max_headers: 64,
            max_uri_bytes: 8 * 1024,
            max_body_bytes: 10 * 1024 * 1024,
            max_chunk_line_bytes: 4 * 1024,
        }
    }
}

/// Why a request was refused. Every variant maps to one status code; all of them end the
/// connection (the reader cannot find the next request boundary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpError {
    /// 400: malformed message; the detail is a short lowercase text safe to send to the client.
    BadRequest(&'static str),
    /// 411: a method that carries a body came without `Content-Length` or chunked framing.
    LengthRequired,
    /// 413: the body is, or is declared to be, larger than `max_body_bytes`.
    PayloadTooLarge,
    /// 414: the request-target is longer than `max_uri_bytes`.
    UriTooLong,
    /// 417: an `Expect` other than `100-continue`.
    ExpectationFailed,
    /// 431: the head is larger than `max_head_bytes` or has more than `max_headers` fields.
    HeaderTooLarge,
    /// 501: a transfer coding we do not implement.
    NotImplemented,
    /// 505: an HTTP version other than 1.0 and 1.1.
    VersionNotSupported,
}

impl HttpError {
    /// The status code to answer with.
    pub fn status(&self) -> u16 {
        match self {
            HttpError::BadRequest(_) => 400,
            HttpError::LengthRequired => 411,
            HttpError::PayloadTooLarge => 413,
            HttpError::UriTooLong => 414,
            HttpError::ExpectationFailed => 417,
            HttpError::HeaderTooLarge => 431,
            HttpError::NotImplemented => 501,
            HttpError::VersionNotSupported => 505,
        }
    }

    /// A short text for the response body (no trailing newline).
    pub fn reason(&self) -> &'static str {
        match self {
            HttpError::BadRequest(detail) => detail,
            HttpError::LengthRequired => "length required",
            HttpError::PayloadTooLarge => "payload too large",
            HttpError::UriTooLong => "request-target too long",
            HttpError::ExpectationFailed => "unsupported expectation",
            HttpError::HeaderTooLarge => "request header fields too large",
            HttpError::NotImplemented => "transfer coding or method not implemented",
            HttpError::VersionNotSupported => "http version not supported",
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status(), self.reason())
    }
}

impl std::error::Error for HttpError {}

/// Request method. Methods are case-sensitive (RFC 9110 §9.1); anything else is `Other`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Patch,
    /// Any other token (at most 32 bytes).
    Other(Box<str>),
}

impl Method {
    pub(super) fn from_token(token: &str) -> Method {
        match token {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            "PATCH" => Method::Patch,
            other => Method::Other(other.into()),
        }
    }

    /// The method token as sent.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Patch => "PATCH",
            Method::Other(token) => token,
        }
    }

    /// Methods that must declare their body length (411 otherwise).
    pub(super) fn requires_length(&self) -> bool {
        matches!(self, Method::Post | Method::Put | Method::Patch)
    }
}

/// Protocol version of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

/// How the request body is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body (no `Content-Length`, not chunked, method that needs none).
    None,
    /// `Content-Length: n` (n ≤ `max_body_bytes`).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}
