//! Byte layout of WAL records and of the event payload (pure functions over bytes).
//!
//! The layout is specified byte by byte in the `wal` module header; this file is its only
//! implementation. Every decoder bounds-checks each length before slicing and returns a typed
//! error: no input, however malformed, makes it panic (see the mutation tests below).
#![forbid(unsafe_code)]

use std::fmt;

/// Bytes in a record header: `len` u32, `crc` u32, `lsn` u64, `kind` u8.
pub const RECORD_HEADER_BYTES: usize = 17;

/// Longest `event_id`, `trigger_id` or `source`, in bytes (UTF-8).
pub const MAX_ID_BYTES: usize = 256;
/// Most headers stored with one event.
pub const MAX_HEADERS: usize = 32;
/// Longest stored header name, in bytes (UTF-8).
pub const MAX_HEADER_NAME_BYTES: usize = 256;
/// Longest stored header value, in bytes.
pub const MAX_HEADER_VALUE_BYTES: usize = 8 * 1024;
/// Largest event body the WAL accepts (ingest enforces its own, smaller or equal, limit first).
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// Largest possible event payload: every field at its bound.
pub const MAX_EVENT_PAYLOAD_BYTES: usize = 3 * (2 + MAX_ID_BYTES)
    + 8
    + 2
    + MAX_HEADERS * (2 + MAX_HEADER_NAME_BYTES + 2 + MAX_HEADER_VALUE_BYTES)
    + 4
    + MAX_BODY_BYTES;

/// Largest possible record (header + largest payload of any kind) = 33 825 701 bytes.
/// A segment must be at least this big, so that every record fits in an empty segment.
pub const MAX_RECORD_BYTES: usize = RECORD_HEADER_BYTES + MAX_EVENT_PAYLOAD_BYTES;

/// Largest possible record when bodies are at most `max_body` bytes (`<= MAX_BODY_BYTES`).
pub const fn max_record_bytes_for(max_body: usize) -> usize {
    MAX_RECORD_BYTES - MAX_BODY_BYTES + max_body
}

/// What a record carries. Only `Event` is written today; the others are reserved so that their
/// numbers never change meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RecordKind {
    Event = 1,
    Outcome = 2,
    RetryScheduled = 3,
    Dlq = 4,
    Replay = 5,
}

impl RecordKind {
    pub fn from_u8(b: u8) -> Option<RecordKind> {
        Some(match b {
            1 => RecordKind::Event,
            2 => RecordKind::Outcome,
            3 => RecordKind::RetryScheduled,
            4 => RecordKind::Dlq,
            5 => RecordKind::Replay,
            _ => return None,
        })
    }
}

/// One accepted webhook event, as stored in the WAL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EventRecord {
    pub event_id: String,
    pub trigger_id: String,
    pub source: String,
    /// Wall-clock receive time, Unix milliseconds.
    pub received_at_ms: u64,
    /// Selected request headers (at most [`MAX_HEADERS`]).
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// Why an event cannot be encoded (a field exceeds its documented bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodeError {
    /// The named field is `len` bytes (or items), above its bound `max`.
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::TooLong { field, len, max } => {
                write!(
                    f,
                    "event field `{field}` is {len}, above the WAL bound {max}"
                )
            }
        }
    }
}

impl std::error::Error for EncodeError {}

/// Why bytes are not a valid event payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended inside `field`.
    Truncated { field: &'static str },
    /// A length prefix of `field` exceeds the field's bound.
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    /// `field` is not valid UTF-8.
    InvalidUtf8 { field: &'static str },
    /// Bytes remain after the body.
    TrailingBytes { count: usize },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated { field } => write!(f, "payload truncated in `{field}`"),
            DecodeError::TooLong { field, len, max } => {
                write!(f, "`{field}` length {len} above bound {max}")
            }
            DecodeError::InvalidUtf8 { field } => write!(f, "`{field}` is not UTF-8"),
            DecodeError::TrailingBytes { count } => write!(f, "{count} trailing bytes"),
        }
    }
}

impl std::error::Error for DecodeError {}

fn check(field: &'static str, len: usize, max: usize) -> Result<(), EncodeError> {
    if len > max {
        return Err(EncodeError::TooLong { field, len, max });
    }
    Ok(())
}

/// The exact encoded size of `ev`'s payload, after checking every bound.
pub fn event_payload_len(ev: &EventRecord) -> Result<usize, EncodeError> {
    check("event_id", ev.event_id.len(), MAX_ID_BYTES)?;
    check("trigger_id", ev.trigger_id.len(), MAX_ID_BYTES)?;
    check("source", ev.source.len(), MAX_ID_BYTES)?;
    check("headers", ev.headers.len(), MAX_HEADERS)?;
    check("body", ev.body.len(), MAX_BODY_BYTES)?;
    let mut n = 3 * 2 + ev.event_id.len() + ev.trigger_id.len() + ev.source.len() + 8 + 2;
    for (name, value) in &ev.headers {
        check("header name", name.len(), MAX_HEADER_NAME_BYTES)?;
        check("header value", value.len(), MAX_HEADER_VALUE_BYTES)?;
        n += 2 + name.len() + 2 + value.len();
    }
    Ok(n + 4 + ev.body.len())
}

/// Appends `ev`'s payload to `out` (see the module header for the layout).
/// On error nothing is appended.
pub fn encode_event_into(ev: &EventRecord, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let len = event_payload_len(ev)?;
    out.reserve(len);
    // Each length below was bounds-checked by `event_payload_len`, so the casts cannot truncate.
    for s in [&ev.event_id, &ev.trigger_id, &ev.source] {
        out.extend_from_slice(&(s.len() as u16).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    out.extend_from_slice(&ev.received_at_ms.to_le_bytes());
    out.extend_from_slice(&(ev.headers.len() as u16).to_le_bytes());
    for (name, value) in &ev.headers {
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(value.len() as u16).to_le_bytes());
        out.extend_from_slice(value);
    }
    out.extend_from_slice(&(ev.body.len() as u32).to_le_bytes());
    out.extend_from_slice(&ev.body);
    Ok(())
}

/// `ev`'s payload as a new buffer.
pub fn encode_event(ev: &EventRecord) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    encode_event_into(ev, &mut out)?;
    Ok(out)
}

/// A bounds-checked little-endian cursor.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < n {
            return Err(DecodeError::Truncated { field });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }
    fn u16(&mut self, field: &'static str) -> Result<usize, DecodeError> {
        Ok(u16::from_le_bytes(self.array(field)?) as usize)
    }
    fn bytes(
        &mut self,
        len_bytes: usize,
        max: usize,
        field: &'static str,
    ) -> Result<&'a [u8], DecodeError> {
        let len = if len_bytes == 2 {
            self.u16(field)?
        } else {
            u32::from_le_bytes(self.array(field)?) as usize
        };
        if len > max {
            return Err(DecodeError::TooLong { field, len, max });
        }
        self.take(len, field)
    }
    fn string(&mut self, max: usize, field: &'static str) -> Result<String, DecodeError> {
        let b = self.bytes(2, max, field)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| DecodeError::InvalidUtf8 { field })
    }
}

/// Decodes an event payload. Never panics; every malformed input is a [`DecodeError`].
pub fn decode_event(payload: &[u8]) -> Result<EventRecord, DecodeError> {
    let mut c = Cursor { rest: payload };
    let event_id = c.string(MAX_ID_BYTES, "event_id")?;
    let trigger_id = c.string(MAX_ID_BYTES, "trigger_id")?;
    let source = c.string(MAX_ID_BYTES, "source")?;
    let received_at_ms = u64::from_le_bytes(c.array("received_at")?);
    let count = c.u16("headers")?;
    if count > MAX_HEADERS {
        return Err(DecodeError::TooLong {
            field: "headers",
            len: count,
            max: MAX_HEADERS,
        });
    }
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let name = c.string(MAX_HEADER_NAME_BYTES, "header name")?;
        let value = c.bytes(2, MAX_HEADER_VALUE_BYTES, "header value")?.to_vec();
        headers.push((name, value));
    }
    let body = c.bytes(4, MAX_BODY_BYTES, "body")?.to_vec();
    if !c.rest.is_empty() {
        return Err(DecodeError::TrailingBytes {
            count: c.rest.len(),
        });
    }
    Ok(EventRecord {
        event_id,
        trigger_id,
        source,
        received_at_ms,
        headers,
        body,
    })
}

/// CRC32C of a record: its `len` field followed by everything after the `crc` field.
pub fn record_crc(len_field: [u8; 4], after_crc: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&len_field), after_crc)
}

/// Appends a complete record (header + payload produced by `payload`) to `out`.
/// Returns the record's length. On error `out` is left as it was.
pub fn append_record<E>(
    out: &mut Vec<u8>,
    lsn: u64,
    kind: RecordKind,
    payload: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<usize, E> {
    let start = out.len();
    out.extend_from_slice(&[0u8; 8]);
    out.extend_from_slice(&lsn.to_le_bytes());
    out.push(kind as u8);
    if let Err(e) = payload(out) {
        out.truncate(start);
        return Err(e);
    }
    let len = out.len() - start;
    // A payload above MAX_RECORD_BYTES is refused by the callers' encoders (all bounded), and
    // u32 covers it many times over; the `min` keeps the cast honest regardless.
    let len_field = (len.min(u32::MAX as usize) as u32).to_le_bytes();
    let crc = record_crc(len_field, &out[start + 8..]);
    out[start..start + 4].copy_from_slice(&len_field);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(len)
}

/// A record found by [`parse_record`], borrowing the segment bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub lsn: u64,
    pub kind: RecordKind,
    pub payload: &'a [u8],
    /// Total record length (header included).
    pub len: usize,
}

/// What lies at an offset of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// A valid record.
    Record(RecordRef<'a>),
    /// The end-of-data marker: a zero `len` field, or fewer than 4 bytes left.
    End,
    /// Not a valid record; the reason is for humans.
    Bad(&'static str),
}

/// Parses the record at the start of `bytes`. Checks length bounds, CRC and kind; the caller
/// checks LSN continuity. Never panics.
pub fn parse_record(bytes: &[u8]) -> Parsed<'_> {
    if bytes.len() < 4 {
        return Parsed::End;
    }
    let len_field = [bytes[0], bytes[1], bytes[2], bytes[3]];
    let len = u32::from_le_bytes(len_field) as usize;
    if len == 0 {
        return Parsed::End;
    }
    if len < RECORD_HEADER_BYTES {
        return Parsed::Bad("record length below the header size");
    }
    if len > MAX_RECORD_BYTES {
        return Parsed::Bad("record length above the maximum record size");
    }
    let Some(rec) = bytes.get(..len) else {
        return Parsed::Bad("record extends past the end of the segment");
    };
    let crc = u32::from_le_bytes([rec[4], rec[5], rec[6], rec[7]]);
    if record_crc(len_field, &rec[8..]) != crc {
        return Parsed::Bad("CRC mismatch");
    }
    let mut lsn = [0u8; 8];
    lsn.copy_from_slice(&rec[8..16]);
    let Some(kind) = RecordKind::from_u8(rec[16]) else {
        return Parsed::Bad("unknown record kind");
    };
    Parsed::Record(RecordRef {
        lsn: u64::from_le_bytes(lsn),
        kind,
        payload: &rec[RECORD_HEADER_BYTES..],
        len,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_event(i: u64, body_len: usize) -> EventRecord {
        EventRecord {
            event_id: format!("evt-{i:08}"),
            trigger_id: "github-push".to_owned(),
            source: "github".to_owned(),
            received_at_ms: 1_700_000_000_000 + i,
            headers: vec![
                ("content-type".to_owned(), b"application/json".to_vec()),
                (
                    "x-github-delivery".to_owned(),
                    format!("d-{i}").into_bytes(),
                ),
            ],
            body: (0..body_len).map(|j| (j as u64 ^ i) as u8).collect(),
        }
    }

    /// xorshift64*: a fixed-seed generator so failures reproduce.
    pub(crate) struct Rng(pub u64);
    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
    }

    #[test]
    fn event_round_trip() {
        for ev in [
            sample_event(7, 1024),
            sample_event(0, 0),
            EventRecord::default(),
        ] {
            let bytes = encode_event(&ev).unwrap();
            assert_eq!(bytes.len(), event_payload_len(&ev).unwrap());
            assert_eq!(decode_event(&bytes).unwrap(), ev);
        }
    }

    #[test]
    fn bounds_are_enforced_on_encode() {
        let mut ev = sample_event(1, 0);
        ev.event_id = "x".repeat(MAX_ID_BYTES + 1);
        assert!(matches!(
            encode_event(&ev),
            Err(EncodeError::TooLong {
                field: "event_id",
                ..
            })
        ));
        let mut ev = sample_event(1, 0);
        ev.headers = vec![("a".into(), vec![]); MAX_HEADERS + 1];
        assert!(encode_event(&ev).is_err());
    }

    #[test]
    fn largest_event_fits_max_record() {
        let ev = EventRecord {
            event_id: "e".repeat(MAX_ID_BYTES),
            trigger_id: "t".repeat(MAX_ID_BYTES),
            source: "s".repeat(MAX_ID_BYTES),
            received_at_ms: u64::MAX,
            headers: vec![
                (
                    "n".repeat(MAX_HEADER_NAME_BYTES),
                    vec![7; MAX_HEADER_VALUE_BYTES]
                );
                MAX_HEADERS
            ],
            body: vec![1; MAX_BODY_BYTES],
        };
        let mut out = Vec::new();
        let len = append_record(&mut out, 9, RecordKind::Event, |o| {
            encode_event_into(&ev, o)
        })
        .unwrap();
        assert_eq!(len, MAX_RECORD_BYTES);
        let Parsed::Record(r) = parse_record(&out) else {
            panic!("not a record")
        };
        assert_eq!(decode_event(r.payload).unwrap(), ev);
    }

    #[test]
    fn record_round_trip_and_end_marker() {
        let ev = sample_event(3, 100);
        let mut out = Vec::new();
        let n = append_record(&mut out, 42, RecordKind::Event, |o| {
            encode_event_into(&ev, o)
        })
        .unwrap();
        out.extend_from_slice(&[0; 64]);
        let Parsed::Record(r) = parse_record(&out) else {
            panic!("not a record")
        };
        assert_eq!((r.lsn, r.kind, r.len), (42, RecordKind::Event, n));
        assert_eq!(decode_event(r.payload).unwrap(), ev);
        assert_eq!(parse_record(&out[n..]), Parsed::End);
        out[n - 1] ^= 1;
        assert_eq!(parse_record(&out), Parsed::Bad("CRC mismatch"));
    }

    #[test]
    fn decode_never_panics_on_truncations_and_mutations() {
        let ev = sample_event(5, 300);
        let payload = encode_event(&ev).unwrap();
        let mut rec = Vec::new();
        append_record(&mut rec, 1, RecordKind::Event, |o| {
            encode_event_into(&ev, o)
        })
        .unwrap();
        for cut in 0..payload.len() {
            assert!(
                decode_event(&payload[..cut]).is_err(),
                "prefix {cut} decoded"
            );
        }
        for cut in 0..rec.len() {
            assert!(!matches!(parse_record(&rec[..cut]), Parsed::Record(_)));
        }
        let mut rng = Rng(0x5EED_1234_ABCD_0001);
        for _ in 0..5000 {
            let mut p = payload.clone();
            let mut r = rec.clone();
            for _ in 0..1 + rng.next() % 4 {
                let i = (rng.next() as usize) % p.len();
                p[i] = rng.next() as u8;
                let j = (rng.next() as usize) % r.len();
                r[j] = rng.next() as u8;
            }
            let cut = (rng.next() as usize) % (p.len() + 1);
            let _ = decode_event(&p[..cut]);
            let _ = decode_event(&p);
            if let Parsed::Record(x) = parse_record(&r) {
                let _ = decode_event(x.payload);
            }
        }
        let mut junk = vec![0u8; 512];
        for _ in 0..2000 {
            let n = (rng.next() as usize) % junk.len();
            for b in &mut junk[..n] {
                *b = rng.next() as u8;
            }
            let _ = decode_event(&junk[..n]);
            let _ = parse_record(&junk[..n]);
        }
    }
}
