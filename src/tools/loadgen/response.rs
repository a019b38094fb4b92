//! A minimal sans-IO HTTP/1.1 response reader for the load generator: status line and headers
//! through `httparse`, then a `Content-Length` or chunked body (skipped, not kept). Only what
//! the generator needs is extracted: status, `Retry-After` (delta-seconds) and whether the
//! server closes the connection.

/// Longest response (head + body) the generator accepts; longer is an error.
pub const MAX_RESPONSE_BYTES: usize = 1 << 20;
const MAX_HEADERS: usize = 64;

/// A complete response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub status: u16,
    /// `Retry-After` in seconds, when present as delta-seconds.
    pub retry_after: Option<u64>,
    /// `Connection: close`, HTTP/1.0 without keep-alive, or a close-delimited body.
    pub close: bool,
    /// Bytes of the buffer used by this response.
    pub consumed: usize,
}

/// What [`parse`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Incomplete,
    Done(Parsed),
    /// Malformed, too large or unsupported framing: the connection must be dropped.
    Invalid,
}

/// Parses one response from the front of `buf`. Interim (1xx) responses are skipped.
/// Stateless: call again with more bytes appended (responses are small, the rescan is cheap).
pub fn parse(buf: &[u8]) -> Outcome {
    let mut start = 0;
    loop {
        match parse_one(&buf[start..]) {
            Outcome::Done(p) if (100..200).contains(&p.status) => start += p.consumed,
            Outcome::Done(p) => {
                return Outcome::Done(Parsed {
                    consumed: start + p.consumed,
                    ..p
                })
            }
            other => return other,
        }
    }
}

fn parse_one(buf: &[u8]) -> Outcome {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < MAX_RESPONSE_BYTES => {
            return Outcome::Incomplete
        }
        _ => return Outcome::Invalid,
    };
    let status = resp.code.unwrap_or(0);
    let mut close = resp.version == Some(0);
    let mut length: Option<usize> = None;
    let mut chunked = false;
    let mut retry_after = None;
    for h in resp.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or("").trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            match value.parse() {
                Ok(n) if length.map_or(true, |m| m == n) => length = Some(n),
                _ => return Outcome::Invalid,
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
            if !chunked {
                return Outcome::Invalid;
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            let v = value.to_ascii_lowercase();
            if v.contains("close") {
                close = true;
            } else if v.contains("keep-alive") {
                close = false;
            }
        } else if h.name.eq_ignore_ascii_case("retry-after") {
            retry_after = value.parse().ok();
        }
    }
    let bodiless = (100..200).contains(&status) || status == 204 || status == 304;
    let body_len = if bodiless {
        0
    } else if chunked {
        match chunked_len(&buf[head_len..]) {
            Some(Ok(n)) => n,
            Some(Err(())) => return Outcome::Invalid,
            None if buf.len() < MAX_RESPONSE_BYTES => return Outcome::Incomplete,
            None => return Outcome::Invalid,
        }
    } else {
        match length {
            Some(n) => n,
            // Close-delimited bodies are not supported: the connection could not be reused.
            None => return Outcome::Invalid,
        }
    };
    let total = head_len + body_len;
    if total > MAX_RESPONSE_BYTES {
        return Outcome::Invalid;
    }
    if buf.len() < total {
        return Outcome::Incomplete;
    }
    Outcome::Done(Parsed {
        status,
        retry_after,
        close,
        consumed: total,
    })
}

/// Length of a complete chunked body (chunks, last chunk, trailers, final CRLF) at the front
/// of `b`: `None` if incomplete, `Some(Err)` if malformed.
fn chunked_len(b: &[u8]) -> Option<Result<usize, ()>> {
    let mut pos = 0;
    loop {
        let line_end = pos + find_crlf(&b[pos..])?;
        let line = std::str::from_utf8(&b[pos..line_end]).ok();
        let size_text = line.and_then(|l| l.split(';').next()).map(str::trim);
        let Some(size) = size_text.and_then(|s| usize::from_str_radix(s, 16).ok()) else {
            return Some(Err(()));
        };
        pos = line_end + 2;
        if size == 0 {
            // Trailer fields until an empty line.
            loop {
                let end = pos + find_crlf(&b[pos..])?;
                let empty = end == pos;
                pos = end + 2;
                if empty {
                    return Some(Ok(pos));
                }
            }
        }
        if size > MAX_RESPONSE_BYTES {
            return Some(Err(()));
        }
        if b.len() < pos + size + 2 {
            return None;
        }
        if &b[pos + size..pos + size + 2] != b"\r\n" {
            return Some(Err(()));
        }
        pos += size + 2;
    }
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_and_retry_after() {
        let r = b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 3\r\ncontent-length: 2\r\n\r\nokHTTP/1.1";
        for cut in 0..r.len() - 10 {
            assert_eq!(parse(&r[..cut]), Outcome::Incomplete, "cut {cut}");
        }
        let want = Parsed {
            status: 429,
            retry_after: Some(3),
            close: false,
            consumed: r.len() - 8,
        };
        assert_eq!(parse(r), Outcome::Done(want));
    }

    #[test]
    fn chunked_interim_and_close() {
        let r = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\nx: y\r\n\r\n";
        for cut in 0..r.len() {
            assert_eq!(parse(&r[..cut]), Outcome::Incomplete, "cut {cut}");
        }
        match parse(r) {
            Outcome::Done(p) => {
                assert_eq!((p.status, p.close, p.consumed), (200, true, r.len()));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn invalid_framing() {
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\n\r\nbody"), Outcome::Invalid);
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n"),
            Outcome::Invalid
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"),
            Outcome::Invalid
        );
        assert_eq!(parse(b"garbage\r\n\r\n"), Outcome::Invalid);
        assert_eq!(
            parse(b"HTTP/1.1 204 No Content\r\n\r\n"),
            Outcome::Done(Parsed {
                status: 204,
                retry_after: None,
                close: false,
                consumed: 27
            })
        );
    }
}
