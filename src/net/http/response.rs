//! Response serialisation: status line, framing headers, caller headers, body.

use super::message::HttpError;

/// Appends a complete response to `out`:
///
/// ```text
/// HTTP/1.1 <status> <reason>\r\n
/// content-length: <body.len()>\r\n      (omitted for 1xx and 204, RFC 9110 §8.6)
/// connection: close\r\n                (when !keep_alive)
/// connection: keep-alive\r\n           (when keep_alive: required for HTTP/1.0 clients that
///                                       asked for it, RFC 9112 §9.3; harmless on HTTP/1.1)
/// <name>: <value>\r\n                   (each of `headers`, in order)
/// \r\n
/// <body>                                (omitted when head_only, e.g. for HEAD)
/// ```
///
/// `headers` must not contain `content-length`, `transfer-encoding` or `connection`, nor CR, LF
/// or NUL in names or values: they are written verbatim (checked in debug builds). `status` must
/// be in 100..=999.
pub fn write_response(
    out: &mut Vec<u8>,
    status: u16,
    headers: &[(&str, &str)],
    body: &[u8],
    keep_alive: bool,
    head_only: bool,
) {
    debug_assert!((100..=999).contains(&status), "status {status}");
    let reason = reason_phrase(status);
    let extra: usize = headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
    let body_len = if head_only { 0 } else { body.len() };
    out.reserve(64 + reason.len() + extra + body_len);

    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
    let bodiless = status < 200 || status == 204;
    debug_assert!(!bodiless || body.is_empty(), "status {status} has no body");
    if !bodiless {
        out.extend_from_slice(b"content-length: ");
        push_decimal(out, body.len() as u64);
        out.extend_from_slice(b"\r\n");
    }
    if keep_alive {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    } else {
        out.extend_from_slice(b"connection: close\r\n");
    }
    for (name, value) in headers {
        debug_assert!(
            safe_field(name) && safe_field(value),
            "unsafe field {name:?}"
        );
        debug_assert!(
            !["content-length", "transfer-encoding", "connection"]
                .iter()
                .any(|n| n.eq_ignore_ascii_case(name)),
            "{name} is written by write_response"
        );
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only && !bodiless {
        out.extend_from_slice(body);
    }
}

/// The content type of every plain-text body sluice writes: protocol and routing errors (the
/// codec's, the router's, timeouts, the connection cap) and the operational endpoints. Decisions
/// about an event (`202`, `401`, `503` refusals) and the admin routes are `application/json`.
pub const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

/// Appends the response for a codec error: its status, a `text/plain` body with
/// [`HttpError::reason`], and `connection: close` (the connection must be closed after it).
pub fn write_error(out: &mut Vec<u8>, error: &HttpError, head_only: bool) {
    let reason = error.reason();
    let mut body = Vec::with_capacity(reason.len() + 1);
    body.extend_from_slice(reason.as_bytes());
    body.push(b'\n');
    let headers = [("content-type", TEXT_PLAIN)];
    write_response(out, error.status(), &headers, &body, false, head_only);
}

/// Appends the interim `100 Continue` response (send at most once, before reading the body).
pub fn write_continue(out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
}

/// The reason phrase for `status` (RFC 9110 §15); empty for codes it does not name.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

fn safe_field(s: &str) -> bool {
    !s.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0))
}

/// Appends `n` in decimal without going through `fmt`.
pub(crate) fn push_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    out.extend_from_slice(decimal(&mut digits, n).as_bytes());
}

/// `n` in decimal, written into `digits` (a `u64` has at most 20): a header value without a
/// `String`.
pub fn decimal(digits: &mut [u8; 20], mut n: u64) -> &str {
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written, so this never falls back.
    std::str::from_utf8(&digits[i..]).unwrap_or("0")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(out: &[u8]) -> &str {
        std::str::from_utf8(out).unwrap()
    }

    #[test]
    fn keep_alive_response() {
        let mut out = Vec::new();
        let body = br#"{"event_id":"01J"}"#;
        write_response(
            &mut out,
            202,
            &[("content-type", "application/json")],
            body,
            true,
            false,
        );
        assert_eq!(
            text(&out),
            "HTTP/1.1 202 Accepted\r\ncontent-length: 18\r\nconnection: keep-alive\r\ncontent-type: application/json\r\n\r\n{\"event_id\":\"01J\"}"
        );
    }

    #[test]
    fn close_and_head_only() {
        let mut out = Vec::new();
        write_response(&mut out, 503, &[("retry-after", "2")], b"busy", false, true);
        assert_eq!(
            text(&out),
            "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\nconnection: close\r\nretry-after: 2\r\n\r\n"
        );
    }

    #[test]
    fn no_content_length_for_204_and_unknown_reason() {
        let mut out = Vec::new();
        write_response(&mut out, 204, &[], b"", true, false);
        assert_eq!(
            text(&out),
            "HTTP/1.1 204 No Content\r\nconnection: keep-alive\r\n\r\n"
        );
        out.clear();
        write_response(&mut out, 299, &[], b"", true, false);
        assert_eq!(
            text(&out),
            "HTTP/1.1 299 \r\ncontent-length: 0\r\nconnection: keep-alive\r\n\r\n"
        );
    }

    #[test]
    fn error_and_continue() {
        let mut out = Vec::new();
        write_continue(&mut out);
        write_error(&mut out, &HttpError::UriTooLong, false);
        assert_eq!(
            text(&out),
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 414 URI Too Long\r\ncontent-length: 24\r\nconnection: close\r\ncontent-type: text/plain; charset=utf-8\r\n\r\nrequest-target too long\n"
        );
    }

    #[test]
    fn decimal() {
        for n in [0u64, 7, 10, 999, 1024, u64::MAX] {
            let mut out = Vec::new();
            push_decimal(&mut out, n);
            assert_eq!(text(&out), n.to_string());
            assert_eq!(super::decimal(&mut [0; 20], n), n.to_string());
        }
    }
}
