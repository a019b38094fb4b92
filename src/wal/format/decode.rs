//! Payload decoding: the bounds-checked cursor, borrowed event views ([`EventView`],
//! [`parse_event`]) and the owned decoders ([`decode_event`], [`decode_payload`]). The byte
//! layout is the `wal` module header's; the types are in `format::record`, the encoders and the
//! record framing in the parent `format` module. Every length is checked before slicing;
//! malformed input is a typed [`DecodeError`], never a panic.
#![forbid(unsafe_code)]

use super::record::{
    BodyJson, DecodeError, DoneEntry, DoneRecord, DoneStatus, EventRecord, Record, RecordKind,
    RetryRecord, MAX_BODY_BYTES, MAX_DONE_ENTRIES, MAX_ERROR_BYTES, MAX_HEADERS,
    MAX_HEADER_NAME_BYTES, MAX_HEADER_VALUE_BYTES, MAX_ID_BYTES,
};

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
    fn str(&mut self, max: usize, field: &'static str) -> Result<&'a str, DecodeError> {
        let b = self.bytes(2, max, field)?;
        std::str::from_utf8(b).map_err(|_| DecodeError::InvalidUtf8 { field })
    }
    fn string(&mut self, max: usize, field: &'static str) -> Result<String, DecodeError> {
        self.str(max, field).map(str::to_owned)
    }
    fn finish(&self) -> Result<(), DecodeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                count: self.rest.len(),
            })
        }
    }
}

/// An event payload parsed and bounds-checked in place, without copying the body or headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventView<'a> {
    pub replay_of: Option<&'a str>,
    pub event_id: &'a str,
    pub trigger_id: &'a str,
    pub source: &'a str,
    pub received_at_ms: u64,
    /// The flags byte's decision (kinds 9 and 10); `Undecided` for kinds 1 and 5.
    pub body_json: BodyJson,
    header_count: usize,
    /// The encoded headers (already validated).
    headers: &'a [u8],
    pub body: &'a [u8],
}

impl EventView<'_> {
    /// An owned copy.
    pub fn to_record(&self) -> EventRecord {
        let mut c = Cursor { rest: self.headers };
        let headers = (0..self.header_count)
            .filter_map(|_| {
                // Validated when the view was made; `ok()` only to stay panic-free.
                let name = c.string(MAX_HEADER_NAME_BYTES, "header name").ok()?;
                let value = c.bytes(2, MAX_HEADER_VALUE_BYTES, "header value").ok()?;
                Some((name, value.to_vec()))
            })
            .collect();
        EventRecord {
            event_id: self.event_id.to_owned(),
            trigger_id: self.trigger_id.to_owned(),
            source: self.source.to_owned(),
            received_at_ms: self.received_at_ms,
            headers,
            body: self.body.to_vec(),
            replay_of: self.replay_of.map(str::to_owned),
            body_json: self.body_json,
        }
    }
}

/// The fields an event payload of `kind` has before the kind-1 payload: the flags byte (kinds 9
/// and 10) and the `replay_of` prefix (kinds 5 and 10). `Invalid` for a kind that is no event
/// or an undefined flags value.
fn event_prefix<'a>(
    kind: RecordKind,
    c: &mut Cursor<'a>,
) -> Result<(BodyJson, Option<&'a str>), DecodeError> {
    let body_json = match kind {
        RecordKind::FlaggedEvent | RecordKind::FlaggedReplayEvent => {
            let [flags] = c.array("event flags")?;
            BodyJson::from_flags(flags).ok_or(DecodeError::Invalid {
                field: "event flags",
            })?
        }
        _ => BodyJson::Undecided,
    };
    let replay_of = match kind {
        RecordKind::Event | RecordKind::FlaggedEvent => None,
        RecordKind::ReplayEvent | RecordKind::FlaggedReplayEvent => {
            Some(c.str(MAX_ID_BYTES, "replay_of")?)
        }
        _ => return Err(DecodeError::Invalid { field: "kind" }),
    };
    Ok((body_json, replay_of))
}

/// Parses an event payload of kind `Event` (1), `ReplayEvent` (5), `FlaggedEvent` (9) or
/// `FlaggedReplayEvent` (10) in place. Never panics; an undefined flags value is `Invalid`.
pub fn parse_event(kind: RecordKind, payload: &[u8]) -> Result<EventView<'_>, DecodeError> {
    let mut c = Cursor { rest: payload };
    let (body_json, replay_of) = event_prefix(kind, &mut c)?;
    let event_id = c.str(MAX_ID_BYTES, "event_id")?;
    let trigger_id = c.str(MAX_ID_BYTES, "trigger_id")?;
    let source = c.str(MAX_ID_BYTES, "source")?;
    let received_at_ms = u64::from_le_bytes(c.array("received_at")?);
    let header_count = c.u16("headers")?;
    if header_count > MAX_HEADERS {
        return Err(DecodeError::TooLong {
            field: "headers",
            len: header_count,
            max: MAX_HEADERS,
        });
    }
    let headers_start = c.rest;
    for _ in 0..header_count {
        c.str(MAX_HEADER_NAME_BYTES, "header name")?;
        c.bytes(2, MAX_HEADER_VALUE_BYTES, "header value")?;
    }
    let headers = &headers_start[..headers_start.len() - c.rest.len()];
    let body = c.bytes(4, MAX_BODY_BYTES, "body")?;
    c.finish()?;
    Ok(EventView {
        replay_of,
        event_id,
        trigger_id,
        source,
        received_at_ms,
        body_json,
        header_count,
        headers,
        body,
    })
}

/// The trigger of an event payload of kind 1, 5, 9 or 10, read without parsing the rest: for
/// the outcome index on the commit path (`wal::outcomes`), which keeps only the trigger. The
/// fields before it are bounds-checked (and the flags byte and `replay_of` checked) and the
/// trigger is checked as UTF-8; what follows it is not looked at. Never panics.
pub fn event_trigger(kind: RecordKind, payload: &[u8]) -> Result<&str, DecodeError> {
    let mut c = Cursor { rest: payload };
    event_prefix(kind, &mut c)?;
    c.bytes(2, MAX_ID_BYTES, "event_id")?;
    c.str(MAX_ID_BYTES, "trigger_id")
}

/// Decodes a kind-1 event payload. Never panics; every malformed input is a [`DecodeError`].
pub fn decode_event(payload: &[u8]) -> Result<EventRecord, DecodeError> {
    parse_event(RecordKind::Event, payload).map(|v| v.to_record())
}

/// Decodes the payload of a record of `kind`. Never panics. `DlqEntry` is `Invalid` (it never
/// belongs in the WAL), and so are `Marker` and `Lost` (framing, not records: the scanner
/// consumes them, `format::marker` parses them).
pub fn decode_payload(kind: RecordKind, payload: &[u8]) -> Result<Record, DecodeError> {
    let mut c = Cursor { rest: payload };
    let rec = match kind {
        RecordKind::Event
        | RecordKind::ReplayEvent
        | RecordKind::FlaggedEvent
        | RecordKind::FlaggedReplayEvent => {
            return parse_event(kind, payload).map(|v| Record::Event(v.to_record()))
        }
        RecordKind::DlqEntry | RecordKind::Marker | RecordKind::Lost => {
            return Err(DecodeError::Invalid { field: "kind" })
        }
        RecordKind::Done => {
            let n = c.u16("done entries")?;
            if n > MAX_DONE_ENTRIES {
                return Err(DecodeError::TooLong {
                    field: "done entries",
                    len: n,
                    max: MAX_DONE_ENTRIES,
                });
            }
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                let event_lsn = u64::from_le_bytes(c.array("done event_lsn")?);
                let [code] = c.array("done status")?;
                let status = DoneStatus::from_u8(code).ok_or(DecodeError::Invalid {
                    field: "done status",
                })?;
                let attempts = u32::from_le_bytes(c.array("done attempts")?);
                entries.push(DoneEntry {
                    event_lsn,
                    status,
                    attempts,
                });
            }
            Record::Done(DoneRecord { entries })
        }
        RecordKind::Attempts => return super::attempt::decode(payload).map(Record::Attempts),
        RecordKind::Retry => Record::Retry(RetryRecord {
            event_lsn: u64::from_le_bytes(c.array("retry event_lsn")?),
            next_attempt: u32::from_le_bytes(c.array("retry next_attempt")?),
            due_at_ms: u64::from_le_bytes(c.array("retry due_at")?),
            last_error: c.str(MAX_ERROR_BYTES, "retry last_error")?.to_owned(),
        }),
    };
    c.finish()?;
    Ok(rec)
}
