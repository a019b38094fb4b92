//! Chunked transfer coding decoder (RFC 9112 §7.1), hand-written and resumable at any byte.
//!
//! ```text
//! chunked-body = *chunk last-chunk trailer-section CRLF
//! chunk        = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//! chunk-size   = 1*HEXDIG            ; here: at most 16 digits, so it fits a u64
//! chunk-ext    = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-value ] )   ; skipped, bounded
//! last-chunk   = 1*("0") [ chunk-ext ] CRLF
//! ```
//!
//! Framing bytes are handled one at a time by a small state machine; chunk data is copied in
//! bulk. Bounds: a chunk-size line (digits, extensions, CRLF) may not exceed
//! `max_chunk_line_bytes` (400), the decoded total may not exceed `max_body_bytes` (413, checked
//! when a chunk's size is known, before its data arrives), and the trailer section may not
//! exceed `max_head_bytes` (431). Trailer fields are read and discarded; only their line
//! structure (CRLF, no bare CR/LF) is checked.

use super::message::{HttpError, Limits};

const MAX_SIZE_DIGITS: u8 = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading hex digits of a chunk size.
    Size,
    /// Whitespace after the digits; only `;` may follow.
    SizeWs,
    /// Inside chunk extensions, up to the CR.
    Ext,
    /// Saw the CR ending the size line.
    SizeLf,
    /// Chunk data; `remaining` bytes to go.
    Data,
    /// Expecting the CR after chunk data.
    DataCr,
    /// Expecting the LF after chunk data.
    DataLf,
    /// At the start of a trailer line (or of the final empty line).
    TrailerStart,
    /// Inside a trailer field line.
    TrailerLine,
    /// Saw the CR ending a trailer field line.
    TrailerLineLf,
    /// Saw the CR of the final empty line.
    FinalLf,
    Done,
}

/// Decoder state; one per chunked request.
#[derive(Debug)]
pub(crate) struct ChunkedDecoder {
    state: State,
    /// Chunk size being read, then data bytes left in the current chunk.
    size: u64,
    digits: u8,
    /// Bytes of the current size line so far.
    line_len: usize,
    /// Bytes of the trailer section so far.
    trailer_len: usize,
    /// Decoded bytes so far.
    total: u64,
}

impl ChunkedDecoder {
    pub(crate) fn new() -> Self {
        ChunkedDecoder {
            state: State::Size,
            size: 0,
            digits: 0,
            line_len: 0,
            trailer_len: 0,
            total: 0,
        }
    }

    /// True once the last chunk, the trailers and the final CRLF have been read.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes from `input`, appending chunk data to `body`. Returns the number of bytes
    /// consumed; stops right after the end of the chunked body (leaving pipelined bytes).
    pub(crate) fn decode(
        &mut self,
        input: &[u8],
        body: &mut Vec<u8>,
        limits: &Limits,
    ) -> Result<usize, HttpError> {
        let cap = limits.max_body_bytes;
        self.decode_with(input, limits, |data| append_capped(body, data, cap))
    }

    /// Like [`decode`](Self::decode), but hands each run of chunk data to `sink` instead of
    /// appending it to a buffer (the client keeps a bounded prefix and discards the rest).
    /// The running total is still checked against `limits.max_body_bytes`.
    pub(crate) fn decode_with(
        &mut self,
        input: &[u8],
        limits: &Limits,
        mut sink: impl FnMut(&[u8]),
    ) -> Result<usize, HttpError> {
        let mut pos = 0;
        while pos < input.len() && self.state != State::Done {
            if self.state == State::Data {
                let take = self.size.min((input.len() - pos) as u64) as usize;
                sink(&input[pos..pos + take]);
                self.size -= take as u64;
                pos += take;
                if self.size == 0 {
                    self.state = State::DataCr;
                }
                continue;
            }
            self.byte(input[pos], limits)?;
            pos += 1;
        }
        Ok(pos)
    }

    /// One framing byte.
    fn byte(&mut self, b: u8, limits: &Limits) -> Result<(), HttpError> {
        if matches!(
            self.state,
            State::Size | State::SizeWs | State::Ext | State::SizeLf
        ) {
            self.line_len += 1;
            if self.line_len > limits.max_chunk_line_bytes {
                return Err(HttpError::BadRequest("chunk-size line too long"));
            }
        }
        if matches!(
            self.state,
            State::TrailerStart | State::TrailerLine | State::TrailerLineLf | State::FinalLf
        ) {
            self.trailer_len += 1;
            if self.trailer_len > limits.max_head_bytes {
                return Err(HttpError::HeaderTooLarge);
            }
        }
        self.state = match (self.state, b) {
            (State::Size, _) if b.is_ascii_hexdigit() => {
                if self.digits == MAX_SIZE_DIGITS {
                    return Err(HttpError::BadRequest("chunk size too large"));
                }
                self.digits += 1;
                self.size = (self.size << 4) | u64::from(hex_value(b));
                State::Size
            }
            (State::Size, _) if self.digits == 0 => {
                return Err(HttpError::BadRequest("invalid chunk size"))
            }
            (State::Size | State::SizeWs, b' ' | b'\t') => State::SizeWs,
            (State::Size | State::SizeWs, b';') => State::Ext,
            (State::Size, b'\r') => State::SizeLf,
            (State::Size | State::SizeWs, _) => {
                return Err(HttpError::BadRequest("invalid chunk size"))
            }
            (State::Ext, b'\r') => State::SizeLf,
            (State::Ext, b'\t') => State::Ext,
            (State::Ext, _) if b.is_ascii_control() => {
                return Err(HttpError::BadRequest("invalid chunk extension"))
            }
            (State::Ext, _) => State::Ext,
            (State::SizeLf, b'\n') => self.chunk_start(limits)?,
            (State::SizeLf, _) => return Err(HttpError::BadRequest("bare CR in chunk-size line")),
            (State::DataCr, b'\r') => State::DataLf,
            (State::DataLf, b'\n') => State::Size,
            (State::DataCr | State::DataLf, _) => {
                return Err(HttpError::BadRequest("missing CRLF after chunk data"))
            }
            (State::TrailerStart, b'\r') => State::FinalLf,
            (State::TrailerStart | State::TrailerLine, b'\n') => {
                return Err(HttpError::BadRequest("bare LF in trailer section"))
            }
            (State::TrailerLine, b'\r') => State::TrailerLineLf,
            (State::TrailerStart | State::TrailerLine, _) => State::TrailerLine,
            (State::TrailerLineLf, b'\n') => State::TrailerStart,
            (State::FinalLf, b'\n') => State::Done,
            (State::TrailerLineLf | State::FinalLf, _) => {
                return Err(HttpError::BadRequest("bare CR in trailer section"))
            }
            (State::Data | State::Done, _) => unreachable!("not a framing state"),
        };
        Ok(())
    }

    /// The size line is complete: start the chunk's data, or the trailers after the last chunk.
    fn chunk_start(&mut self, limits: &Limits) -> Result<State, HttpError> {
        self.line_len = 0;
        self.digits = 0;
        if self.size == 0 {
            return Ok(State::TrailerStart);
        }
        match self.total.checked_add(self.size) {
            Some(total) if total <= limits.max_body_bytes => {
                self.total = total;
                Ok(State::Data)
            }
            _ => Err(HttpError::PayloadTooLarge),
        }
    }
}

fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

/// Appends `data`, growing `body` geometrically but never past `cap` bytes of capacity, so the
/// allocation follows the bytes received rather than what the client declared.
pub(crate) fn append_capped(body: &mut Vec<u8>, data: &[u8], cap: u64) {
    let needed = body.len() + data.len();
    if needed > body.capacity() {
        let cap = usize::try_from(cap).unwrap_or(usize::MAX).max(needed);
        let target = needed.max(body.capacity().saturating_mul(2)).min(cap);
        body.reserve_exact(target - body.len());
    }
    body.extend_from_slice(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8], limits: &Limits) -> Result<(Vec<u8>, usize), HttpError> {
        let mut d = ChunkedDecoder::new();
        let mut body = Vec::new();
        let n = d.decode(input, &mut body, limits)?;
        assert!(d.is_done(), "not done after {n} bytes");
        Ok((body, n))
    }

    #[test]
    fn decodes_chunks_extensions_and_trailers() {
        let l = Limits::default();
        let input = b"5;name=\"v\"\r\nhello\r\nA \t; x\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let (body, n) = decode_all(input, &l).unwrap();
        assert_eq!(body, b"hello0123456789");
        assert_eq!(&input[n..], b"NEXT");
    }

    #[test]
    fn byte_at_a_time() {
        let l = Limits::default();
        let input = b"3\r\nabc\r\n10\r\n0123456789abcdef\r\n000\r\n\r\n";
        let mut d = ChunkedDecoder::new();
        let mut body = Vec::new();
        for &b in input.iter() {
            assert_eq!(d.decode(&[b], &mut body, &l), Ok(1));
        }
        assert!(d.is_done());
        assert_eq!(body, b"abc0123456789abcdef");
    }

    #[test]
    fn rejects_bad_framing() {
        let l = Limits::default();
        let cases: &[&[u8]] = &[
            b"\r\n",                    // no digits
            b"x\r\n",                   // not hex
            b"5 x\r\nhello\r\n",        // junk after size
            b"5\nhello\r\n",            // bare LF
            b"5\rxhello\r\n",           // bare CR
            b"5\r\nhelloXX",            // no CRLF after data
            b"5\r\nhello\rX",           // CR without LF after data
            b"5;a\x01\r\nhello\r\n",    // control in extension
            b"0\r\nX: 1\nY: 2\r\n\r\n", // bare LF in trailer
            b"0\r\n\rX",                // bare CR at the end
        ];
        for &c in cases {
            let mut d = ChunkedDecoder::new();
            let r = d.decode(c, &mut Vec::new(), &l);
            assert!(matches!(r, Err(HttpError::BadRequest(_))), "{c:?} → {r:?}");
        }
    }

    #[test]
    fn size_digits_bounded() {
        let l = Limits::default();
        let mut d = ChunkedDecoder::new();
        let r = d.decode(b"00000000000000001\r\n", &mut Vec::new(), &l);
        assert_eq!(r, Err(HttpError::BadRequest("chunk size too large")));
        // 16 digits parse, and are refused as too large for the body limit.
        let mut d = ChunkedDecoder::new();
        let r = d.decode(b"ffffffffffffffff\r\n", &mut Vec::new(), &l);
        assert_eq!(r, Err(HttpError::PayloadTooLarge));
    }

    #[test]
    fn line_and_trailer_limits() {
        let l = Limits {
            max_chunk_line_bytes: 16,
            max_head_bytes: 32,
            ..Limits::default()
        };
        let mut d = ChunkedDecoder::new();
        let r = d.decode(b"1;aaaaaaaaaaaaaaaaaaaa\r\n", &mut Vec::new(), &l);
        assert_eq!(r, Err(HttpError::BadRequest("chunk-size line too long")));
        let mut d = ChunkedDecoder::new();
        let r = d.decode(
            b"0\r\nX-A: 0123456789012345678901234567890\r\n\r\n",
            &mut Vec::new(),
            &l,
        );
        assert_eq!(r, Err(HttpError::HeaderTooLarge));
    }

    #[test]
    fn running_total_limit() {
        let l = Limits {
            max_body_bytes: 8,
            ..Limits::default()
        };
        let mut d = ChunkedDecoder::new();
        let mut body = Vec::new();
        let r = d.decode(b"5\r\nhello\r\n4\r\n", &mut body, &l);
        assert_eq!(r, Err(HttpError::PayloadTooLarge));
        assert_eq!(body, b"hello");
        assert!(body.capacity() <= 8);
    }

    #[test]
    fn append_never_exceeds_cap() {
        let mut v = Vec::new();
        for _ in 0..10 {
            append_capped(&mut v, &[0; 100], 1000);
        }
        assert_eq!(v.len(), 1000);
        assert_eq!(v.capacity(), 1000);
    }
}
