//! The request half of the client codec: [`write_request`] renders one request, a
//! [`RequestTemplate`] renders a destination's fixed parts once and then each request's own
//! fields. Both validate everything before they write a byte.

use std::fmt;

use crate::net::http::response::push_decimal;

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
    push_fields(out, req.headers);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(req.body);
    Ok(())
}

/// The parts of a destination's requests that are the same for every request — the request
/// line, `host`, and the fields that end every head — rendered and validated once, so that
/// [`RequestTemplate::write`] renders and checks only the per-request fields. Its output is
/// byte for byte what [`write_request`] writes for the same request with the per-request fields
/// followed by the trailing ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestTemplate {
    /// `METHOD path HTTP/1.1\r\nhost: authority\r\ncontent-length: `.
    prefix: Vec<u8>,
    /// The trailing fields, each `name: value\r\n`, then the empty line.
    suffix: Vec<u8>,
}

impl RequestTemplate {
    /// Validates and renders the fixed parts (as [`write_request`] would; a header error's
    /// `index` counts in `trailing`).
    pub fn new(
        method: &str,
        authority: &str,
        path: &str,
        trailing: &[(&str, &[u8])],
    ) -> Result<RequestTemplate, RequestError> {
        let fixed = OutboundRequest {
            method,
            authority,
            path,
            headers: trailing,
            body: b"",
        };
        validate(&fixed)?;
        let mut prefix = Vec::with_capacity(method.len() + path.len() + authority.len() + 40);
        prefix.extend_from_slice(method.as_bytes());
        prefix.push(b' ');
        prefix.extend_from_slice(path.as_bytes());
        prefix.extend_from_slice(b" HTTP/1.1\r\nhost: ");
        prefix.extend_from_slice(authority.as_bytes());
        prefix.extend_from_slice(b"\r\ncontent-length: ");
        let mut suffix = Vec::new();
        push_fields(&mut suffix, trailing);
        suffix.extend_from_slice(b"\r\n");
        Ok(RequestTemplate { prefix, suffix })
    }

    /// Appends one request: the fixed parts, `fields` and `body`; reserves the exact length
    /// once. The fields' values are checked first (no controls but HTAB; on error `out` is
    /// unchanged). Their names are the caller's constants (`'static`): that they are tokens
    /// and not one of the writer's own (`host`, `content-length`, `transfer-encoding`) is
    /// checked in debug builds, so every test of a caller checks its names, and a release
    /// build does not check the same literals again for every request (~1 k instructions).
    pub fn write(
        &self,
        out: &mut Vec<u8>,
        fields: &[(&'static str, &[u8])],
        body: &[u8],
    ) -> Result<(), RequestError> {
        debug_assert!(
            fields.iter().all(|(name, _)| name_ok(name)),
            "a header name that is not a token, or one the writer sets itself: {fields:?}"
        );
        validate_values(fields)?;
        let len: usize = fields.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        out.reserve(self.prefix.len() + 22 + len + self.suffix.len() + body.len());
        out.extend_from_slice(&self.prefix);
        push_decimal(out, body.len() as u64);
        out.extend_from_slice(b"\r\n");
        push_fields(out, fields);
        out.extend_from_slice(&self.suffix);
        out.extend_from_slice(body);
        Ok(())
    }
}

/// Appends each field as `name: value\r\n`.
fn push_fields(out: &mut Vec<u8>, fields: &[(&str, &[u8])]) {
    for (name, value) in fields {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
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
    validate_fields(req.headers)
}

/// Every field has a token name other than the writer's own and a value without controls.
fn validate_fields(fields: &[(&str, &[u8])]) -> Result<(), RequestError> {
    for (index, (name, value)) in fields.iter().enumerate() {
        if !is_token(name.as_bytes()) {
            return Err(RequestError::HeaderName { index });
        }
        if reserved(name) {
            return Err(RequestError::ReservedHeader { index });
        }
        if !value_ok(value) {
            return Err(RequestError::HeaderValue { index });
        }
    }
    Ok(())
}

/// A token, and not a field the writer sets itself.
fn name_ok(name: &str) -> bool {
    is_token(name.as_bytes()) && !reserved(name)
}

/// `host`, `content-length` and `transfer-encoding`: the writer's own fields.
fn reserved(name: &str) -> bool {
    ["host", "content-length", "transfer-encoding"]
        .iter()
        .any(|r| name.eq_ignore_ascii_case(r))
}

/// Every value is free of controls but HTAB (and of DEL).
fn validate_values(fields: &[(&str, &[u8])]) -> Result<(), RequestError> {
    match fields.iter().position(|(_, value)| !value_ok(value)) {
        Some(index) => Err(RequestError::HeaderValue { index }),
        None => Ok(()),
    }
}

/// No controls but HTAB, and no DEL.
fn value_ok(value: &[u8]) -> bool {
    // No early exit, so the loop vectorises (values are the bulk of the bytes checked).
    !value.iter().fold(false, |bad, &b| {
        bad | ((b < 0x20) & (b != b'\t')) | (b == 0x7f)
    })
}

/// Every byte is visible ASCII (0x21..=0x7e).
fn all_visible(s: &[u8]) -> bool {
    s.iter()
        .fold(true, |ok, &b| ok & (b.wrapping_sub(0x21) < 0x7f - 0x21))
}

/// `token` of RFC 9110 §5.6.2: one or more `tchar`.
pub fn is_token(s: &[u8]) -> bool {
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
