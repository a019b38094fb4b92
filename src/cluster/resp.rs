//! RESP2, the Redis wire protocol: the subset sluice speaks, as pure functions over bytes.
//!
//! Requests are arrays of bulk strings ([`encode_command`]). Replies ([`Reply`]) are simple
//! strings (`+`), errors (`-`), integers (`:`), bulk strings (`$`, `-1` = nil) and arrays (`*`,
//! `-1` = nil), nested. [`parse`] takes a buffer and returns the first complete reply and the
//! bytes it used, `Ok(None)` when more bytes are needed, or a [`ProtocolError`] for bytes no
//! Redis sends. Bounds: a bulk string ≤ [`MAX_BULK`], an array ≤ [`MAX_ARRAY`] elements, nesting
//! ≤ [`MAX_DEPTH`] (sluice's scripts return flat arrays of a few integers; anything bigger is a
//! misconfigured endpoint, refused rather than buffered).
#![forbid(unsafe_code)]

/// Longest bulk string accepted in a reply.
pub const MAX_BULK: usize = 1 << 20;
/// Most elements of one reply array.
pub const MAX_ARRAY: usize = 1024;
/// Deepest nesting of reply arrays.
pub const MAX_DEPTH: usize = 4;

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The integer of an `Int`, or of a bulk string holding a decimal integer.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            Reply::Bulk(Some(b)) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        }
    }
}

/// Bytes that are not RESP2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    /// An unknown type byte.
    Type(u8),
    /// A length or integer line that is not a decimal number.
    Number,
    /// A length past the bounds above.
    TooLarge,
    /// A bulk string not followed by CRLF.
    Framing,
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtocolError::Type(b) => write!(f, "unknown RESP type byte 0x{b:02x}"),
            ProtocolError::Number => f.write_str("malformed RESP number"),
            ProtocolError::TooLarge => f.write_str("RESP reply past sluice's bounds"),
            ProtocolError::Framing => f.write_str("RESP bulk string without its CRLF"),
        }
    }
}

/// Appends `args` as one command (an array of bulk strings).
pub fn encode_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.push(b'*');
    out.extend_from_slice(args.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for a in args {
        out.push(b'$');
        out.extend_from_slice(a.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// The first complete reply in `buf` and the bytes it took; `Ok(None)` when incomplete.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, ProtocolError> {
    parse_at(buf, 0, 0)
}

fn line(buf: &[u8], from: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(from..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..end], from + end + 2))
}

fn number(text: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or(ProtocolError::Number)
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Reply, usize)>, ProtocolError> {
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some((text, next)) = line(buf, at + 1) else {
        return Ok(None);
    };
    let text_string = || String::from_utf8_lossy(text).into_owned();
    match kind {
        b'+' => Ok(Some((Reply::Simple(text_string()), next))),
        b'-' => Ok(Some((Reply::Error(text_string()), next))),
        b':' => Ok(Some((Reply::Int(number(text)?), next))),
        b'$' => {
            let n = number(text)?;
            if n < 0 {
                return Ok(Some((Reply::Bulk(None), next)));
            }
            let n = usize::try_from(n).map_err(|_| ProtocolError::TooLarge)?;
            if n > MAX_BULK {
                return Err(ProtocolError::TooLarge);
            }
            if buf.len() < next + n + 2 {
                return Ok(None);
            }
            if &buf[next + n..next + n + 2] != b"\r\n" {
                return Err(ProtocolError::Framing);
            }
            Ok(Some((
                Reply::Bulk(Some(buf[next..next + n].to_vec())),
                next + n + 2,
            )))
        }
        b'*' => {
            let n = number(text)?;
            if n < 0 {
                return Ok(Some((Reply::Array(None), next)));
            }
            let n = usize::try_from(n).map_err(|_| ProtocolError::TooLarge)?;
            if n > MAX_ARRAY || depth >= MAX_DEPTH {
                return Err(ProtocolError::TooLarge);
            }
            let mut items = Vec::with_capacity(n);
            let mut pos = next;
            for _ in 0..n {
                match parse_at(buf, pos, depth + 1)? {
                    Some((r, p)) => {
                        items.push(r);
                        pos = p;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(Some(items)), pos)))
        }
        other => Err(ProtocolError::Type(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_a_command() {
        let mut out = Vec::new();
        encode_command(&mut out, &[b"SELECT", b"3"]);
        assert_eq!(out, b"*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n");
    }

    #[test]
    fn parses_every_kind_and_reports_the_length() {
        let buf = b"+OK\r\n-ERR x y\r\n:-42\r\n$3\r\nabc\r\n$-1\r\n*2\r\n:1\r\n*1\r\n$0\r\n\r\n";
        let mut at = 0;
        let mut got = Vec::new();
        while let Some((r, n)) = parse(&buf[at..]).unwrap() {
            got.push(r);
            at += n;
        }
        assert_eq!(at, buf.len());
        assert_eq!(
            got,
            vec![
                Reply::Simple("OK".into()),
                Reply::Error("ERR x y".into()),
                Reply::Int(-42),
                Reply::Bulk(Some(b"abc".to_vec())),
                Reply::Bulk(None),
                Reply::Array(Some(vec![
                    Reply::Int(1),
                    Reply::Array(Some(vec![Reply::Bulk(Some(Vec::new()))]))
                ])),
            ]
        );
    }

    #[test]
    fn every_prefix_of_a_reply_is_incomplete_not_an_error() {
        let buf = b"*3\r\n:7\r\n$5\r\nhello\r\n*1\r\n+x\r\n";
        for cut in 0..buf.len() {
            assert_eq!(parse(&buf[..cut]), Ok(None), "prefix of {cut} bytes");
        }
        assert_eq!(parse(buf).unwrap().unwrap().1, buf.len());
    }

    #[test]
    fn refuses_what_redis_never_sends() {
        assert_eq!(parse(b"?x\r\n"), Err(ProtocolError::Type(b'?')));
        assert_eq!(parse(b":1x\r\n"), Err(ProtocolError::Number));
        assert_eq!(parse(b"$3\r\nabcd\r\n"), Err(ProtocolError::Framing));
        assert_eq!(parse(b"$99999999\r\n"), Err(ProtocolError::TooLarge));
        assert_eq!(parse(b"*5000\r\n"), Err(ProtocolError::TooLarge));
        assert_eq!(
            parse(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"),
            Err(ProtocolError::TooLarge)
        );
    }

    #[test]
    fn integers_from_bulk_strings() {
        assert_eq!(Reply::Bulk(Some(b"12".to_vec())).as_int(), Some(12));
        assert_eq!(Reply::Simple("12".into()).as_int(), None);
    }
}
