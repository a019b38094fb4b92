//! The WAL's record types, their field bounds and their errors: what the encoders (the parent
//! `format` module) write and the decoders (`format::decode`) read. A leaf: it names nothing
//! else in the crate, so both sides import it without importing each other.
#![forbid(unsafe_code)]

use std::fmt;

/// Log sequence number (a record header's `lsn`): 1 for the first record ever written,
/// consecutive after that.
pub type Lsn = u64;
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

/// Largest `replay_of` prefix of a kind-5 (`ReplayEvent`) payload: `u16` length + an id.
pub const REPLAY_PREFIX_MAX_BYTES: usize = 2 + MAX_ID_BYTES;

/// The flags byte that opens a kind-9 or kind-10 payload (issue 43: [`BodyJson`]).
pub const EVENT_FLAGS_BYTES: usize = 1;

/// Largest possible record (header + largest payload of any kind: a replayed event with its
/// flags byte and every field at its bound, kind 10) = 33 825 960 bytes. A segment must be at
/// least this big, so that every record fits in an empty segment.
pub const MAX_RECORD_BYTES: usize =
    RECORD_HEADER_BYTES + EVENT_FLAGS_BYTES + REPLAY_PREFIX_MAX_BYTES + MAX_EVENT_PAYLOAD_BYTES;

/// Largest possible record when bodies are at most `max_body` bytes (`<= MAX_BODY_BYTES`).
pub const fn max_record_bytes_for(max_body: usize) -> usize {
    MAX_RECORD_BYTES - MAX_BODY_BYTES + max_body
}

/// Most entries in one [`DoneRecord`]; encoders refuse more.
pub const MAX_DONE_ENTRIES: usize = 4096;
/// Longest [`RetryRecord::last_error`], in bytes (UTF-8); callers truncate with [`truncate_utf8`].
pub const MAX_ERROR_BYTES: usize = 1024;

/// What a record carries. The numbers never change meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RecordKind {
    /// An accepted event ([`EventRecord`] with `replay_of: None`).
    Event = 1,
    /// Outcomes: events that are finished ([`DoneRecord`]).
    Done = 2,
    /// A durable retry schedule for one event ([`RetryRecord`]).
    Retry = 3,
    /// Never in the WAL: the framing of a dead-letter file (`dispatch::dlq`). A WAL record of
    /// this kind does not decode ([`decode_payload`](crate::wal::decode_payload) refuses it; `wal verify` reports it).
    DlqEntry = 4,
    /// A replayed event ([`EventRecord`] with `replay_of: Some(_)`).
    ReplayEvent = 5,
    /// A commit marker closing a batch ([`marker`](super::marker)); consumes no LSN, decodes to no [`Record`].
    Marker = 6,
    /// LSNs given up with `--accept-wal-loss` ([`marker`](super::marker)); decodes to no [`Record`].
    Lost = 7,
    /// Delivery attempts, skips and dead-letterings of events ([`AttemptsRecord`]). Written
    /// since issue 27; a log without them reads unchanged.
    Attempts = 8,
    /// An accepted event whose body was checked for JSON at ingest: a flags byte
    /// ([`BodyJson`]), then the kind-1 payload. Written since issue 43 (only when decided).
    FlaggedEvent = 9,
    /// A replayed event whose body was checked for JSON: a flags byte, then the kind-5 payload.
    FlaggedReplayEvent = 10,
}

impl RecordKind {
    pub fn from_u8(b: u8) -> Option<RecordKind> {
        Some(match b {
            1 => RecordKind::Event,
            2 => RecordKind::Done,
            3 => RecordKind::Retry,
            4 => RecordKind::DlqEntry,
            5 => RecordKind::ReplayEvent,
            6 => RecordKind::Marker,
            7 => RecordKind::Lost,
            8 => RecordKind::Attempts,
            9 => RecordKind::FlaggedEvent,
            10 => RecordKind::FlaggedReplayEvent,
            _ => return None,
        })
    }

    /// True for the four kinds that hold an [`EventRecord`] (1, 5, 9, 10).
    pub fn is_event(self) -> bool {
        matches!(
            self,
            RecordKind::Event
                | RecordKind::ReplayEvent
                | RecordKind::FlaggedEvent
                | RecordKind::FlaggedReplayEvent
        )
    }
}

/// Whether an event's body is one JSON value (issue 43): decided once, at ingest, for events
/// that can reach a batch, and stored with the record so that a batch copies the body without
/// parsing it. Bits 0-1 of the flags byte of kinds 9 and 10; kinds 1 and 5 (every record
/// written before issue 43, and any event nobody decided for) are `Undecided`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BodyJson {
    /// Not decided: a reader that needs to know parses the body (flags value 0).
    #[default]
    Undecided,
    /// The body is one JSON value (flags value 1).
    Json,
    /// The body is not one JSON value (flags value 2).
    NotJson,
}

impl BodyJson {
    /// The decision for `body`: one JSON text a batch can carry verbatim (`wal::format::json`:
    /// RFC 8259's grammar, valid UTF-8, nested at most `json::MAX_DEPTH` deep) or not. The one
    /// rule ingest and the batch writers share.
    pub fn decide(body: &[u8]) -> BodyJson {
        if super::json::is_one_json_text(body) {
            BodyJson::Json
        } else {
            BodyJson::NotJson
        }
    }

    /// Whether `body` (the body this flag was stored with) is one JSON value: the stored
    /// decision, or [`BodyJson::decide`] when there is none.
    pub fn is_json(self, body: &[u8]) -> bool {
        match self {
            BodyJson::Json => true,
            BodyJson::NotJson => false,
            BodyJson::Undecided => BodyJson::decide(body) == BodyJson::Json,
        }
    }

    /// The flags byte of a kind-9 or kind-10 payload.
    pub fn to_flags(self) -> u8 {
        match self {
            BodyJson::Undecided => 0,
            BodyJson::Json => 1,
            BodyJson::NotJson => 2,
        }
    }

    /// The decision a flags byte holds; `None` for an undefined value (3, or any of bits 2-7).
    pub fn from_flags(flags: u8) -> Option<BodyJson> {
        Some(match flags {
            0 => BodyJson::Undecided,
            1 => BodyJson::Json,
            2 => BodyJson::NotJson,
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
    /// For a replay from the dead-letter queue: the DLQ entry id (the original event id) this
    /// event re-delivers. Stored as kind 5 (or 10) when set, kind 1 (or 9) when not.
    pub replay_of: Option<String>,
    /// Whether `body` is one JSON value, when ingest decided it. Stored as kind 9 (or 10) when
    /// decided; an undecided event is stored as kind 1 (or 5), byte for byte as before issue 43.
    pub body_json: BodyJson,
}

impl EventRecord {
    /// `Event`, or `ReplayEvent` when `replay_of` is set; `FlaggedEvent` or
    /// `FlaggedReplayEvent` instead when `body_json` is decided.
    pub fn kind(&self) -> RecordKind {
        match (&self.replay_of, self.body_json) {
            (None, BodyJson::Undecided) => RecordKind::Event,
            (Some(_), BodyJson::Undecided) => RecordKind::ReplayEvent,
            (None, _) => RecordKind::FlaggedEvent,
            (Some(_), _) => RecordKind::FlaggedReplayEvent,
        }
    }
}

/// Outcome of one finished event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DoneStatus {
    Delivered = 1,
    /// Moved to the dead-letter queue (the DLQ file is written before this record).
    DeadLettered = 2,
    /// Dropped by a flow-control gate, reason not recorded (written before status 5..=7).
    Skipped = 3,
    /// The trigger has no handler: nothing to deliver.
    NoHandler = 4,
    /// Skipped by `rate_limit`: the window was full.
    SkippedRateLimited = 5,
    /// Skipped by `debounce`: a later event of the key superseded it.
    SkippedDebounced = 6,
    /// Skipped by `singleton`: a delivery of the key was in progress.
    SkippedSingletonActive = 7,
}

impl DoneStatus {
    /// `(outcome, gate, reason)` as `wal inspect` shows it.
    pub fn describe(self) -> (&'static str, Option<&'static str>, Option<&'static str>) {
        match self {
            DoneStatus::Delivered => ("delivered", None, None),
            DoneStatus::DeadLettered => ("dead_lettered", None, None),
            DoneStatus::Skipped => ("skipped", None, None),
            DoneStatus::NoHandler => ("no_handler", None, None),
            DoneStatus::SkippedRateLimited => ("skipped", Some("rate_limit"), Some("rate_limited")),
            DoneStatus::SkippedDebounced => ("skipped", Some("debounce"), Some("debounced")),
            DoneStatus::SkippedSingletonActive => {
                ("skipped", Some("singleton"), Some("singleton_active"))
            }
        }
    }

    pub fn from_u8(b: u8) -> Option<DoneStatus> {
        Some(match b {
            1 => DoneStatus::Delivered,
            2 => DoneStatus::DeadLettered,
            3 => DoneStatus::Skipped,
            4 => DoneStatus::NoHandler,
            5 => DoneStatus::SkippedRateLimited,
            6 => DoneStatus::SkippedDebounced,
            7 => DoneStatus::SkippedSingletonActive,
            _ => return None,
        })
    }
}

/// One finished event inside a [`DoneRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoneEntry {
    /// LSN of the event record (kind 1, 5, 9 or 10) this outcome finishes.
    pub event_lsn: u64,
    pub status: DoneStatus,
    /// Delivery attempts made (0 if none).
    pub attempts: u32,
}

/// Outcomes of up to [`MAX_DONE_ENTRIES`] events, recorded together (kind 2).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DoneRecord {
    pub entries: Vec<DoneEntry>,
}

/// A durable retry schedule (kind 3): attempt `next_attempt` of the event at `event_lsn` is due
/// at `due_at_ms`. The latest one for an event wins.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RetryRecord {
    pub event_lsn: u64,
    /// Number of the attempt to make next (the first attempt is 1).
    pub next_attempt: u32,
    /// Unix milliseconds.
    pub due_at_ms: u64,
    /// At most [`MAX_ERROR_BYTES`]; the caller truncates ([`truncate_utf8`]).
    pub last_error: String,
}

/// Anything the writer appends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Kind 1, 5, 9 or 10 ([`EventRecord::kind`]).
    Event(EventRecord),
    Done(DoneRecord),
    Retry(RetryRecord),
    Attempts(AttemptsRecord),
}

impl Record {
    pub fn kind(&self) -> RecordKind {
        match self {
            Record::Event(ev) => ev.kind(),
            Record::Done(_) => RecordKind::Done,
            Record::Retry(_) => RecordKind::Retry,
            Record::Attempts(_) => RecordKind::Attempts,
        }
    }

    /// Bytes this record contributes to a batch's size bound (its body, or its entries).
    pub fn batch_weight(&self) -> usize {
        match self {
            Record::Event(ev) => ev.body.len(),
            Record::Done(d) => d.entries.len() * DONE_ENTRY_BYTES,
            Record::Retry(r) => r.last_error.len(),
            Record::Attempts(a) => a.entries.iter().map(AttemptEntry::encoded_len).sum(),
        }
    }
}

/// Longest [`AttemptEntry::response_prefix`]: the first bytes of a response body kept with an
/// attempt, so that one record of [`MAX_ATTEMPT_ENTRIES`] stays under 1 MiB.
pub const MAX_RESPONSE_PREFIX_BYTES: usize = 512;
/// Most entries in one [`AttemptsRecord`]; encoders refuse more.
pub const MAX_ATTEMPT_ENTRIES: usize = 1024;
/// Bytes of an [`AttemptEntry`] in a kind-8 payload before its response prefix.
pub const ATTEMPT_ENTRY_FIXED_BYTES: usize = 8 + 4 + 8 + 4 + 1 + 2 + 4 + 4 + 2;
/// `retry_after_ms` on disk when the response named none.
pub const NO_RETRY_AFTER: u32 = u32::MAX;

/// How one attempt (or a decision that ended the event without one) came out. On disk a class
/// byte and a `u16` code; the numbers never change meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// Class 1: a complete response with this HTTP status.
    Status(u16),
    /// Class 2: the connection could not be established.
    Connect,
    /// Class 3: no complete response within the destination's timeout.
    Timeout,
    /// Class 4: the connection broke mid-exchange.
    Io,
    /// Class 5: the TLS handshake failed.
    Tls,
    /// Class 6: a flow gate skipped the event; the code is its `Done` status (5..=7).
    Skipped(DoneStatus),
    /// Class 7: the event was dead-lettered; the code is `dispatch::dlq::DlqReason`'s number
    /// (1 retry_exhausted, 2 circuit_open, 3 permanent_failure).
    DeadLettered(u8),
}

impl AttemptOutcome {
    /// `(class, code)` as stored.
    pub fn to_wire(self) -> (u8, u16) {
        match self {
            AttemptOutcome::Status(code) => (1, code),
            AttemptOutcome::Connect => (2, 0),
            AttemptOutcome::Timeout => (3, 0),
            AttemptOutcome::Io => (4, 0),
            AttemptOutcome::Tls => (5, 0),
            AttemptOutcome::Skipped(s) => (6, s as u16),
            AttemptOutcome::DeadLettered(r) => (7, u16::from(r)),
        }
    }

    /// The outcome stored as `(class, code)`; `None` for an undefined pair.
    pub fn from_wire(class: u8, code: u16) -> Option<AttemptOutcome> {
        Some(match class {
            1 => AttemptOutcome::Status(code),
            2 => AttemptOutcome::Connect,
            3 => AttemptOutcome::Timeout,
            4 => AttemptOutcome::Io,
            5 => AttemptOutcome::Tls,
            6 => match u8::try_from(code).ok().and_then(DoneStatus::from_u8)? {
                s @ (DoneStatus::SkippedRateLimited
                | DoneStatus::SkippedDebounced
                | DoneStatus::SkippedSingletonActive) => AttemptOutcome::Skipped(s),
                _ => return None,
            },
            7 => match code {
                1..=3 => AttemptOutcome::DeadLettered(code as u8),
                _ => return None,
            },
            _ => return None,
        })
    }

    /// Whether a call was made (a response or a transport failure), as opposed to a gate's skip
    /// or a dead-lettering, which are recorded the same way but are not attempts.
    pub fn is_call(self) -> bool {
        !matches!(
            self,
            AttemptOutcome::Skipped(_) | AttemptOutcome::DeadLettered(_)
        )
    }

    /// The error class of a failed call (`connect`, `timeout`, `io`, `tls`), or the reason of a
    /// skip or dead-lettering; `None` for a response.
    pub fn error(self) -> Option<&'static str> {
        Some(match self {
            AttemptOutcome::Status(_) => return None,
            AttemptOutcome::Connect => "connect",
            AttemptOutcome::Timeout => "timeout",
            AttemptOutcome::Io => "io",
            AttemptOutcome::Tls => "tls",
            AttemptOutcome::Skipped(s) => s.describe().2.unwrap_or("skipped"),
            AttemptOutcome::DeadLettered(1) => "retry_exhausted",
            AttemptOutcome::DeadLettered(2) => "circuit_open",
            AttemptOutcome::DeadLettered(_) => "permanent_failure",
        })
    }
}

/// One attempt of one event (or a skip or dead-lettering of it) inside an [`AttemptsRecord`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptEntry {
    /// LSN of the event record (kind 1, 5, 9 or 10) in the same log.
    pub event_lsn: Lsn,
    /// The attempt's number (1 = first); for a skip or dead-lettering, the attempts made.
    pub attempt: u32,
    /// Wall-clock end of the attempt (or time of the decision), Unix milliseconds.
    pub at_ms: u64,
    /// The destination's id (its index in the configuration's destinations).
    pub destination: u32,
    pub outcome: AttemptOutcome,
    /// From the request's start to its end, microseconds (saturating); 0 without a call.
    pub latency_us: u32,
    /// The `Retry-After` the response carried (and the destination honours), milliseconds.
    pub retry_after_ms: Option<u32>,
    /// The first bytes of the response body, at most [`MAX_RESPONSE_PREFIX_BYTES`].
    pub response_prefix: Vec<u8>,
}

impl AttemptEntry {
    /// Its bytes in a kind-8 payload.
    pub fn encoded_len(&self) -> usize {
        ATTEMPT_ENTRY_FIXED_BYTES + self.response_prefix.len()
    }
}

/// Attempts of up to [`MAX_ATTEMPT_ENTRIES`] events, recorded together (kind 8). Rides the
/// pump's next group commit with the `Done` and `Retry` records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AttemptsRecord {
    pub entries: Vec<AttemptEntry>,
}

/// Bytes per [`DoneEntry`] in a kind-2 payload.
pub const DONE_ENTRY_BYTES: usize = 8 + 1 + 4;

/// The longest prefix of `s` that is at most `max` bytes and ends on a character boundary.
pub fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
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
                    "record field `{field}` is {len}, above the WAL bound {max}"
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
    /// Bytes remain after the last field.
    TrailingBytes { count: usize },
    /// `field` holds a value outside its defined set (an unknown status code, or a record kind
    /// that has no place in the WAL).
    Invalid { field: &'static str },
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
            DecodeError::Invalid { field } => write!(f, "`{field}` has an undefined value"),
        }
    }
}

impl std::error::Error for DecodeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_outcomes_round_trip_their_wire_pair_and_name_their_error() {
        let all = [
            (AttemptOutcome::Status(503), None, true),
            (AttemptOutcome::Connect, Some("connect"), true),
            (AttemptOutcome::Timeout, Some("timeout"), true),
            (AttemptOutcome::Io, Some("io"), true),
            (AttemptOutcome::Tls, Some("tls"), true),
            (
                AttemptOutcome::Skipped(DoneStatus::SkippedRateLimited),
                Some("rate_limited"),
                false,
            ),
            (
                AttemptOutcome::DeadLettered(1),
                Some("retry_exhausted"),
                false,
            ),
            (AttemptOutcome::DeadLettered(2), Some("circuit_open"), false),
            (
                AttemptOutcome::DeadLettered(3),
                Some("permanent_failure"),
                false,
            ),
        ];
        for (o, error, call) in all {
            let (class, code) = o.to_wire();
            assert_eq!(AttemptOutcome::from_wire(class, code), Some(o));
            assert_eq!((o.error(), o.is_call()), (error, call), "{o:?}");
        }
        assert_eq!(RecordKind::from_u8(8), Some(RecordKind::Attempts));
        assert_eq!(
            RecordKind::from_u8(10),
            Some(RecordKind::FlaggedReplayEvent)
        );
        assert_eq!(RecordKind::from_u8(11), None);
    }
}
