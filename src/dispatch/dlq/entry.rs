//! A dead-letter entry ([`DlqEntry`]) and its one-record format: the codec the DLQ's store
//! ([`crate::dispatch::dlq::store`]), its batch files ([`crate::dispatch::dlq::batch`]) and the offline tools share. A
//! leaf of the DLQ: it names no other DLQ file. The DLQ as a whole is described in
//! [`crate::dispatch::dlq`], which re-exports this file's API.
//!
//! # Entry format
//!
//! One WAL-framed record (see the `wal` module header), so damage is detected by the CRC. A
//! batch file holds these back to back; a legacy entry file is exactly one:
//!
//! ```text
//! offset  size  field
//!      0     4  len    u32  record length (= 17 + payload)
//!      4     4  crc    u32  CRC32C over [0,4) then [8,len), as in the WAL
//!      8     8  lsn    u64  event_lsn: the LSN of the event in the WAL
//!     16     1  kind   u8   4 (DlqEntry; never found in the WAL itself)
//!     17        payload, all integers little-endian:
//!   u16 n, n bytes   id           26 bytes [0-9A-Z]
//!   u16 n, n bytes   destination  UTF-8, n <= 2048
//!   u8               reason       1 retry_exhausted, 2 circuit_open, 3 permanent_failure
//!   u32              attempts
//!   u64              dead_lettered_at  Unix milliseconds
//!   u16 n, n bytes   last_error   UTF-8, n <= 1024 (MAX_ERROR_BYTES)
//!   u8               event kind   1 (event) or 5 (replayed event)
//!   rest             the event payload of that kind, exactly as in the WAL
//! ```
//!
#![forbid(unsafe_code)]

use crate::wal::format::{
    append_record, encode_event_into, parse_event, parse_record_max, EncodeError, EventView,
    Parsed, RecordKind, MAX_ERROR_BYTES,
};
use crate::wal::{EventRecord, Lsn, MAX_RECORD_BYTES};
use std::fmt;
use std::io;
use std::path::PathBuf;

/// Length of an entry id (an event id).
pub const ID_LEN: usize = 26;
/// Longest destination (`kind:uri`), in bytes.
pub const MAX_DESTINATION_BYTES: usize = 2048;
/// Largest entry file: the largest WAL record plus the entry fields.
pub const MAX_DLQ_RECORD_BYTES: usize = MAX_RECORD_BYTES
    + (2 + ID_LEN)
    + (2 + MAX_DESTINATION_BYTES)
    + 1
    + 4
    + 8
    + (2 + MAX_ERROR_BYTES)
    + 1;

/// True for a well-formed entry id: exactly 26 characters `[0-9A-Z]`.
pub fn valid_id(id: &str) -> bool {
    id.len() == ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
}

/// Why an event was dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DlqReason {
    RetryExhausted = 1,
    CircuitOpen = 2,
    PermanentFailure = 3,
}

impl DlqReason {
    pub fn from_u8(b: u8) -> Option<DlqReason> {
        Some(match b {
            1 => DlqReason::RetryExhausted,
            2 => DlqReason::CircuitOpen,
            3 => DlqReason::PermanentFailure,
            _ => return None,
        })
    }

    /// `retry_exhausted`, `circuit_open` or `permanent_failure`.
    pub fn as_str(self) -> &'static str {
        match self {
            DlqReason::RetryExhausted => "retry_exhausted",
            DlqReason::CircuitOpen => "circuit_open",
            DlqReason::PermanentFailure => "permanent_failure",
        }
    }
}

/// One dead-lettered event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DlqEntry {
    /// The event's `event_id` (26 characters `[0-9A-Z]`); names the file.
    pub id: String,
    pub event: EventRecord,
    /// Where the event is in the WAL.
    pub event_lsn: Lsn,
    /// The destination that failed (`kind:uri`), at most [`MAX_DESTINATION_BYTES`].
    pub destination: String,
    pub reason: DlqReason,
    pub attempts: u32,
    /// At most [`MAX_ERROR_BYTES`] (truncate with [`crate::wal::truncate_utf8`]).
    pub last_error: String,
    /// Unix milliseconds.
    pub dead_lettered_at_ms: u64,
}

/// An entry without its headers and body, for listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DlqSummary {
    pub id: String,
    pub event_lsn: Lsn,
    pub trigger_id: String,
    pub source: String,
    pub destination: String,
    pub reason: DlqReason,
    pub attempts: u32,
    pub last_error: String,
    pub dead_lettered_at_ms: u64,
    pub received_at_ms: u64,
    pub body_len: usize,
    pub replay_of: Option<String>,
}

/// Errors of the DLQ store.
#[derive(Debug)]
pub enum DlqError {
    Io {
        path: PathBuf,
        source: io::Error,
    },
    /// The entry file at `path` is damaged (bad length, CRC, or fields).
    Corrupt {
        path: PathBuf,
        reason: String,
    },
    /// `id` is not 26 characters `[0-9A-Z]`.
    InvalidId {
        id: String,
    },
    NotFound {
        id: String,
    },
    /// The store holds `max_entries` entries; the caller keeps the event pending.
    Full {
        max_entries: usize,
    },
    /// A field exceeds its bound.
    Encode(EncodeError),
}

impl fmt::Display for DlqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DlqError::Io { path, source } => {
                write!(f, "DLQ I/O error on {}: {source}", path.display())
            }
            DlqError::Corrupt { path, reason } => {
                write!(f, "DLQ entry {} is corrupt: {reason}", path.display())
            }
            DlqError::InvalidId { id } => {
                write!(f, "invalid DLQ id {id:?} (expected 26 characters [0-9A-Z])")
            }
            DlqError::NotFound { id } => write!(f, "no DLQ entry {id}"),
            DlqError::Full { max_entries } => {
                write!(f, "the DLQ is full ({max_entries} entries)")
            }
            DlqError::Encode(e) => write!(f, "cannot store DLQ entry: {e}"),
        }
    }
}

impl std::error::Error for DlqError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DlqError::Io { source, .. } => Some(source),
            DlqError::Encode(e) => Some(e),
            _ => None,
        }
    }
}

pub(in crate::dispatch) fn io_err(
    path: &std::path::Path,
) -> impl FnOnce(io::Error) -> DlqError + '_ {
    move |source| DlqError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Encodes `e` as a complete entry record (see the module header).
pub fn encode_entry(e: &DlqEntry) -> Result<Vec<u8>, DlqError> {
    let mut out = Vec::new();
    encode_entry_into(e, &mut out)?;
    Ok(out)
}

/// Appends `e`'s entry record to `out`; on error `out` is left as it was.
pub fn encode_entry_into(e: &DlqEntry, out: &mut Vec<u8>) -> Result<(), DlqError> {
    if !valid_id(&e.id) {
        return Err(DlqError::InvalidId { id: e.id.clone() });
    }
    let too_long = |field, len, max| DlqError::Encode(EncodeError::TooLong { field, len, max });
    if e.destination.len() > MAX_DESTINATION_BYTES {
        return Err(too_long(
            "destination",
            e.destination.len(),
            MAX_DESTINATION_BYTES,
        ));
    }
    if e.last_error.len() > MAX_ERROR_BYTES {
        return Err(too_long("last_error", e.last_error.len(), MAX_ERROR_BYTES));
    }
    append_record(out, e.event_lsn, RecordKind::DlqEntry, |o| {
        for s in [&e.id, &e.destination] {
            o.extend_from_slice(&(s.len() as u16).to_le_bytes());
            o.extend_from_slice(s.as_bytes());
        }
        o.push(e.reason as u8);
        o.extend_from_slice(&e.attempts.to_le_bytes());
        o.extend_from_slice(&e.dead_lettered_at_ms.to_le_bytes());
        o.extend_from_slice(&(e.last_error.len() as u16).to_le_bytes());
        o.extend_from_slice(e.last_error.as_bytes());
        o.push(e.event.kind() as u8);
        encode_event_into(&e.event, o)
    })
    .map_err(DlqError::Encode)?;
    Ok(())
}

/// An entry parsed in place from its file bytes.
pub(in crate::dispatch) struct EntryView<'a> {
    id: &'a str,
    event_lsn: Lsn,
    destination: &'a str,
    reason: DlqReason,
    attempts: u32,
    dead_lettered_at_ms: u64,
    last_error: &'a str,
    event: EventView<'a>,
}

/// Little-endian field reader for the entry payload; every failure is a reason string.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!("truncated in `{field}`"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn int<const N: usize>(&mut self, field: &str) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }
    fn str(&mut self, max: usize, field: &str) -> Result<&'a str, String> {
        let n = u16::from_le_bytes(self.int(field)?) as usize;
        if n > max {
            return Err(format!("`{field}` length {n} above bound {max}"));
        }
        std::str::from_utf8(self.take(n, field)?).map_err(|_| format!("`{field}` is not UTF-8"))
    }
}

/// Parses a whole entry file. Never panics.
pub(in crate::dispatch) fn parse_entry(bytes: &[u8]) -> Result<EntryView<'_>, String> {
    let r = match parse_record_max(bytes, MAX_DLQ_RECORD_BYTES) {
        Parsed::Record(r) => r,
        Parsed::End => return Err("empty entry record".to_owned()),
        Parsed::Bad(reason) => return Err(reason.to_owned()),
    };
    if r.len != bytes.len() {
        return Err(format!(
            "{} bytes after the entry record",
            bytes.len() - r.len
        ));
    }
    if r.kind != RecordKind::DlqEntry {
        return Err(format!("record kind {:?}, expected DlqEntry", r.kind));
    }
    let mut f = Fields(r.payload);
    let id = f.str(ID_LEN, "id")?;
    if !valid_id(id) {
        return Err(format!("invalid id {id:?}"));
    }
    let destination = f.str(MAX_DESTINATION_BYTES, "destination")?;
    let [code] = f.int("reason")?;
    let reason = DlqReason::from_u8(code).ok_or_else(|| format!("unknown reason code {code}"))?;
    let attempts = u32::from_le_bytes(f.int("attempts")?);
    let dead_lettered_at_ms = u64::from_le_bytes(f.int("dead_lettered_at")?);
    let last_error = f.str(MAX_ERROR_BYTES, "last_error")?;
    let [kind] = f.int("event kind")?;
    let kind = RecordKind::from_u8(kind)
        .filter(|k| k.is_event())
        .ok_or_else(|| format!("event kind {kind} is not an event"))?;
    let event = parse_event(kind, f.0).map_err(|e| format!("event: {e}"))?;
    Ok(EntryView {
        id,
        event_lsn: r.lsn,
        destination,
        reason,
        attempts,
        dead_lettered_at_ms,
        last_error,
        event,
    })
}

/// Decodes a whole entry file. Never panics; damage is `Err(reason)`.
pub fn decode_entry(bytes: &[u8]) -> Result<DlqEntry, String> {
    let v = parse_entry(bytes)?;
    Ok(DlqEntry {
        id: v.id.to_owned(),
        event: v.event.to_record(),
        event_lsn: v.event_lsn,
        destination: v.destination.to_owned(),
        reason: v.reason,
        attempts: v.attempts,
        last_error: v.last_error.to_owned(),
        dead_lettered_at_ms: v.dead_lettered_at_ms,
    })
}

/// Checks one whole entry record: its id, or why it is damaged (for [`crate::dispatch::dlq::batch::scan`]).
pub fn check_record(bytes: &[u8]) -> Result<String, String> {
    parse_entry(bytes).map(|v| v.id.to_owned())
}

/// The listing summary of a parsed entry.
pub(in crate::dispatch) fn summary_of(v: &EntryView<'_>) -> DlqSummary {
    DlqSummary {
        id: v.id.to_owned(),
        event_lsn: v.event_lsn,
        trigger_id: v.event.trigger_id.to_owned(),
        source: v.event.source.to_owned(),
        destination: v.destination.to_owned(),
        reason: v.reason,
        attempts: v.attempts,
        last_error: v.last_error.to_owned(),
        dead_lettered_at_ms: v.dead_lettered_at_ms,
        received_at_ms: v.event.received_at_ms,
        body_len: v.event.body.len(),
        replay_of: v.event.replay_of.map(str::to_owned),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wal::format::RECORD_HEADER_BYTES;

    pub(crate) fn sample_entry(n: u64) -> DlqEntry {
        let id =
            crate::wal::event_id::encode(0x0123_4567_89AB_CDEF_0000_0000_0000_0000 + n as u128);
        DlqEntry {
            event: EventRecord {
                event_id: id.clone(),
                trigger_id: "github-push".to_owned(),
                source: "github".to_owned(),
                received_at_ms: 1_700_000_000_000 + n,
                headers: vec![("content-type".to_owned(), b"application/json".to_vec())],
                body: format!("{{\"n\":{n}}}").into_bytes(),
                replay_of: None,
                body_json: Default::default(),
            },
            id,
            event_lsn: 10 + n,
            destination: "http:https://example.com/hook".to_owned(),
            reason: DlqReason::RetryExhausted,
            attempts: 5,
            last_error: "HTTP 500 Internal Server Error".to_owned(),
            dead_lettered_at_ms: 1_700_000_100_000 - n,
        }
    }

    #[test]
    fn decode_never_panics_on_mutations() {
        let bytes = encode_entry(&sample_entry(1)).unwrap();
        let mut rng = crate::wal::format::tests::Rng(0xD1_0D1_0D1);
        for cut in 0..bytes.len() {
            assert!(decode_entry(&bytes[..cut]).is_err());
        }
        for round in 0..3000 {
            let mut b = bytes.clone();
            let i = (rng.next() as usize) % b.len();
            b[i] = rng.next() as u8;
            if round % 2 == 0 && i >= RECORD_HEADER_BYTES {
                // Re-seal the CRC so the field parser, not the CRC, meets the damage.
                let crc = crate::wal::format::record_crc([b[0], b[1], b[2], b[3]], &b[8..]);
                b[4..8].copy_from_slice(&crc.to_le_bytes());
            }
            let _ = decode_entry(&b);
        }
    }

    #[test]
    fn an_entry_keeps_its_event_s_json_decision_and_old_kinds_still_decode() {
        use crate::wal::BodyJson;
        for body_json in [BodyJson::Undecided, BodyJson::Json, BodyJson::NotJson] {
            for replay_of in [None, Some("r".to_owned())] {
                let mut e = sample_entry(2);
                e.event.body_json = body_json;
                e.event.replay_of = replay_of.clone();
                let back = decode_entry(&encode_entry(&e).unwrap()).unwrap();
                assert_eq!(back.event, e.event);
                assert_eq!(back.event.kind(), e.event.kind());
            }
        }
    }
}
