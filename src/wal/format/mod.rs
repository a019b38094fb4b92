//! Byte layout of WAL records and their payloads (pure functions over bytes).
//!
//! The layout is specified byte by byte in the `wal` module header; this file is its only
//! implementation. Every decoder bounds-checks each length before slicing and returns a typed
//! error: no input, however malformed, makes it panic (see the mutation tests below).
#![forbid(unsafe_code)]

mod attempt;
mod record;
pub use record::{
    max_record_bytes_for, truncate_utf8, AttemptEntry, AttemptOutcome, AttemptsRecord, BodyJson,
    DecodeError, DoneEntry, DoneRecord, DoneStatus, EncodeError, EventRecord, Lsn, Record,
    RecordKind, RetryRecord, DONE_ENTRY_BYTES, EVENT_FLAGS_BYTES, MAX_ATTEMPT_ENTRIES,
    MAX_BODY_BYTES, MAX_DONE_ENTRIES, MAX_ERROR_BYTES, MAX_EVENT_PAYLOAD_BYTES, MAX_HEADERS,
    MAX_HEADER_NAME_BYTES, MAX_HEADER_VALUE_BYTES, MAX_ID_BYTES, MAX_RECORD_BYTES,
    MAX_RESPONSE_PREFIX_BYTES, RECORD_HEADER_BYTES, REPLAY_PREFIX_MAX_BYTES,
};

fn check(field: &'static str, len: usize, max: usize) -> Result<(), EncodeError> {
    if len > max {
        return Err(EncodeError::TooLong { field, len, max });
    }
    Ok(())
}

/// The exact encoded size of `ev`'s payload (for its [`EventRecord::kind`]: with the flags
/// byte when `body_json` is decided, the `replay_of` prefix when set), after checking every
/// bound.
pub fn event_payload_len(ev: &EventRecord) -> Result<usize, EncodeError> {
    let mut prefix = match &ev.replay_of {
        Some(id) => {
            check("replay_of", id.len(), MAX_ID_BYTES)?;
            2 + id.len()
        }
        None => 0,
    };
    if ev.body_json != BodyJson::Undecided {
        prefix += EVENT_FLAGS_BYTES;
    }
    check("event_id", ev.event_id.len(), MAX_ID_BYTES)?;
    check("trigger_id", ev.trigger_id.len(), MAX_ID_BYTES)?;
    check("source", ev.source.len(), MAX_ID_BYTES)?;
    check("headers", ev.headers.len(), MAX_HEADERS)?;
    check("body", ev.body.len(), MAX_BODY_BYTES)?;
    let mut n = prefix + 3 * 2 + ev.event_id.len() + ev.trigger_id.len() + ev.source.len() + 8 + 2;
    for (name, value) in &ev.headers {
        check("header name", name.len(), MAX_HEADER_NAME_BYTES)?;
        check("header value", value.len(), MAX_HEADER_VALUE_BYTES)?;
        n += 2 + name.len() + 2 + value.len();
    }
    Ok(n + 4 + ev.body.len())
}

fn put_str16(out: &mut Vec<u8>, s: &[u8]) {
    // Callers bounds-checked `s` (every bound is far below u16::MAX).
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s);
}

/// Appends `ev`'s payload to `out`: kind 1, or kind 5 (the `replay_of` prefix, then the kind-1
/// payload) when `replay_of` is set; kinds 9 and 10 (a flags byte, then the kind-1 or kind-5
/// payload) when `body_json` is decided; see the module header. On error nothing is appended.
pub fn encode_event_into(ev: &EventRecord, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let len = event_payload_len(ev)?;
    out.reserve(len);
    if ev.body_json != BodyJson::Undecided {
        out.push(ev.body_json.to_flags());
    }
    // Each length below was bounds-checked by `event_payload_len`, so the casts cannot truncate.
    if let Some(id) = &ev.replay_of {
        put_str16(out, id.as_bytes());
    }
    for s in [&ev.event_id, &ev.trigger_id, &ev.source] {
        put_str16(out, s.as_bytes());
    }
    out.extend_from_slice(&ev.received_at_ms.to_le_bytes());
    out.extend_from_slice(&(ev.headers.len() as u16).to_le_bytes());
    for (name, value) in &ev.headers {
        put_str16(out, name.as_bytes());
        put_str16(out, value);
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

/// The exact encoded size of `rec`'s payload, after checking every bound.
/// The length of `ev`'s WAL record, header included: its share of the `max_pending_bytes`
/// backlog bound. Equal to what recovery reports as `PendingMeta::bytes` for the same event, so
/// reservations at ingest and releases by the pump balance. An event over the WAL's field
/// bounds (refused by the writer anyway) is counted by its body length.
pub fn event_cost(ev: &EventRecord) -> u64 {
    match event_payload_len(ev) {
        Ok(n) => (RECORD_HEADER_BYTES + n) as u64,
        Err(_) => ev.body.len() as u64,
    }
}

pub fn payload_len(rec: &Record) -> Result<usize, EncodeError> {
    match rec {
        Record::Event(ev) => event_payload_len(ev),
        Record::Done(d) => {
            check("done entries", d.entries.len(), MAX_DONE_ENTRIES)?;
            Ok(2 + d.entries.len() * DONE_ENTRY_BYTES)
        }
        Record::Retry(r) => {
            check("last_error", r.last_error.len(), MAX_ERROR_BYTES)?;
            Ok(8 + 4 + 8 + 2 + r.last_error.len())
        }
        Record::Attempts(a) => attempt::payload_len(a),
    }
}

/// Appends `rec`'s payload (for [`Record::kind`]) to `out`. On error nothing is appended.
pub fn encode_payload_into(rec: &Record, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let len = payload_len(rec)?;
    out.reserve(len);
    match rec {
        Record::Event(ev) => return encode_event_into(ev, out),
        Record::Done(d) => {
            out.extend_from_slice(&(d.entries.len() as u16).to_le_bytes());
            for e in &d.entries {
                out.extend_from_slice(&e.event_lsn.to_le_bytes());
                out.push(e.status as u8);
                out.extend_from_slice(&e.attempts.to_le_bytes());
            }
        }
        Record::Retry(r) => {
            out.extend_from_slice(&r.event_lsn.to_le_bytes());
            out.extend_from_slice(&r.next_attempt.to_le_bytes());
            out.extend_from_slice(&r.due_at_ms.to_le_bytes());
            put_str16(out, r.last_error.as_bytes());
        }
        Record::Attempts(a) => attempt::encode_into(a, out),
    }
    Ok(())
}

mod decode;
pub mod json;
pub mod marker;
pub mod shelf;
pub use attempt::entry_lsns;
pub use decode::{decode_event, decode_payload, event_trigger, parse_event, EventView};

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

/// [`Parsed::Bad`]'s reason for a record whose length runs past the end of the bytes: a file
/// cut short inside it (recovery says so, naming the byte it ends at).
pub const EXTENDS_PAST_END: &str = "record extends past the end of the segment";

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
    parse_record_max(bytes, MAX_RECORD_BYTES)
}

/// [`parse_record`] with another bound on the record length (dead-letter files hold a little
/// more than the largest WAL record).
pub fn parse_record_max(bytes: &[u8], max_len: usize) -> Parsed<'_> {
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
    if len > max_len {
        return Parsed::Bad("record length above the maximum record size");
    }
    let Some(rec) = bytes.get(..len) else {
        return Parsed::Bad(EXTENDS_PAST_END);
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
mod body_json_tests;
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
            replay_of: None,
            body_json: Default::default(),
        }
    }

    #[test]
    fn event_trigger_reads_the_trigger_of_both_event_kinds_and_refuses_a_cut_prefix() {
        let mut ev = sample_event(7, 40);
        ev.trigger_id = "stripe-charge".to_owned();
        let plain = encode_event(&ev).unwrap();
        assert_eq!(
            event_trigger(RecordKind::Event, &plain),
            Ok("stripe-charge")
        );
        ev.replay_of = Some("evt-original".to_owned());
        let replay = encode_event(&ev).unwrap();
        assert_eq!(
            event_trigger(RecordKind::ReplayEvent, &replay),
            Ok("stripe-charge")
        );
        // Every cut inside the id or the trigger is an error, never a panic or a wrong name.
        let end = 2 + ev.replay_of.as_ref().unwrap().len() + 2 + ev.event_id.len() + 2 + 13;
        for cut in 0..end {
            assert!(
                event_trigger(RecordKind::ReplayEvent, &replay[..cut]).is_err(),
                "{cut}"
            );
        }
        assert!(event_trigger(RecordKind::Done, &plain).is_err());
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
            replay_of: Some("r".repeat(MAX_ID_BYTES)),
            body_json: BodyJson::NotJson,
        };
        let mut out = Vec::new();
        let len = append_record(&mut out, 9, ev.kind(), |o| encode_event_into(&ev, o)).unwrap();
        assert_eq!(len, MAX_RECORD_BYTES);
        assert_eq!(MAX_RECORD_BYTES, 33_825_960);
        let Parsed::Record(r) = parse_record(&out) else {
            panic!("not a record")
        };
        assert_eq!(r.kind, RecordKind::FlaggedReplayEvent);
        assert_eq!(
            decode_payload(r.kind, r.payload).unwrap(),
            Record::Event(ev)
        );
    }

    pub(crate) fn sample_records(i: u64) -> Vec<Record> {
        let mut replay = sample_event(i, 33);
        replay.replay_of = Some(format!("01HZX3K9V7Q2W8E5R4T6Y1U{i:03}"));
        vec![
            Record::Event(sample_event(i, 10)),
            Record::Event(replay),
            Record::Done(DoneRecord {
                entries: vec![
                    DoneEntry {
                        event_lsn: i + 1,
                        status: DoneStatus::Delivered,
                        attempts: 1,
                    },
                    DoneEntry {
                        event_lsn: u64::MAX,
                        status: DoneStatus::NoHandler,
                        attempts: 0,
                    },
                ],
            }),
            Record::Done(DoneRecord::default()),
            Record::Retry(RetryRecord {
                event_lsn: i,
                next_attempt: 3,
                due_at_ms: 1_700_000_000_123,
                last_error: "503 Service Unavailable \u{e9}".to_owned(),
            }),
        ]
    }

    #[test]
    fn every_kind_round_trips_and_replay_keeps_kind_one_layout() {
        for rec in sample_records(4) {
            let mut out = Vec::new();
            encode_payload_into(&rec, &mut out).unwrap();
            assert_eq!(out.len(), payload_len(&rec).unwrap());
            assert_eq!(decode_payload(rec.kind(), &out).unwrap(), rec);
            assert!(decode_payload(RecordKind::DlqEntry, &out).is_err());
        }
        // Kind 5 = `u16 n + replay_of` then exactly the kind-1 payload.
        let mut ev = sample_event(9, 50);
        let plain = encode_event(&ev).unwrap();
        ev.replay_of = Some("01HZX3K9V7Q2W8E5R4T6Y1U0AB".to_owned());
        let replay = encode_event(&ev).unwrap();
        assert_eq!(&replay[..2], &26u16.to_le_bytes());
        assert_eq!(&replay[2..28], b"01HZX3K9V7Q2W8E5R4T6Y1U0AB");
        assert_eq!(&replay[28..], &plain[..]);
        assert_eq!(ev.kind(), RecordKind::ReplayEvent);
        // The status codes are fixed.
        let done = Record::Done(DoneRecord {
            entries: vec![DoneEntry {
                event_lsn: 0x0102,
                status: DoneStatus::DeadLettered,
                attempts: 7,
            }],
        });
        let mut out = Vec::new();
        encode_payload_into(&done, &mut out).unwrap();
        assert_eq!(out, [1, 0, 2, 1, 0, 0, 0, 0, 0, 0, 2, 7, 0, 0, 0]);
        out[10] = 9;
        assert_eq!(
            decode_payload(RecordKind::Done, &out),
            Err(DecodeError::Invalid {
                field: "done status"
            })
        );
    }

    #[test]
    fn done_and_retry_bounds_are_enforced() {
        let entry = DoneEntry {
            event_lsn: 1,
            status: DoneStatus::Skipped,
            attempts: 0,
        };
        let full = Record::Done(DoneRecord {
            entries: vec![entry; MAX_DONE_ENTRIES],
        });
        assert_eq!(payload_len(&full).unwrap(), 2 + 4096 * 13);
        let over = Record::Done(DoneRecord {
            entries: vec![entry; MAX_DONE_ENTRIES + 1],
        });
        let mut out = vec![7];
        assert!(encode_payload_into(&over, &mut out).is_err());
        assert_eq!(out, [7], "nothing appended on error");
        // A decoder given a count above the bound refuses it before reading entries.
        let mut bad = ((MAX_DONE_ENTRIES + 1) as u16).to_le_bytes().to_vec();
        bad.resize(2 + 13 * (MAX_DONE_ENTRIES + 1), 1);
        assert!(matches!(
            decode_payload(RecordKind::Done, &bad),
            Err(DecodeError::TooLong { .. })
        ));
        let mut retry = RetryRecord {
            last_error: "x".repeat(MAX_ERROR_BYTES + 1),
            ..RetryRecord::default()
        };
        assert!(encode_payload_into(&Record::Retry(retry.clone()), &mut out).is_err());
        retry.last_error = truncate_utf8(&retry.last_error, MAX_ERROR_BYTES).to_owned();
        assert!(encode_payload_into(&Record::Retry(retry), &mut out).is_ok());
        assert_eq!(truncate_utf8("a\u{e9}b", 2), "a");
        assert_eq!(truncate_utf8("a\u{e9}b", 3), "a\u{e9}");
    }

    #[test]
    fn new_kinds_never_panic_on_truncations_and_mutations() {
        let mut rng = Rng(0x0DD_BA11_5EED_0002);
        for rec in sample_records(1) {
            let mut payload = Vec::new();
            encode_payload_into(&rec, &mut payload).unwrap();
            for cut in 0..payload.len() {
                assert!(decode_payload(rec.kind(), &payload[..cut]).is_err());
            }
            for _ in 0..2000 {
                let mut p = payload.clone();
                if !p.is_empty() {
                    let i = (rng.next() as usize) % p.len();
                    p[i] = rng.next() as u8;
                }
                for kind in [1, 2, 3, 4, 5].into_iter().filter_map(RecordKind::from_u8) {
                    let _ = decode_payload(kind, &p);
                }
            }
        }
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
