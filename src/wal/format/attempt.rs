//! Kind 8 (`Attempts`): the encoder and decoder of [`AttemptsRecord`] payloads. The layout, all
//! integers little-endian, no padding:
//!
//! ```text
//! u16 n                                  entries, n <= MAX_ATTEMPT_ENTRIES (1024)
//! n times:
//!   u64 event_lsn                        the event record this entry is about (same log)
//!   u32 attempt                          attempt number (skip / dead letter: attempts made)
//!   u64 at_ms                            Unix milliseconds at the attempt's end
//!   u32 destination                      destination id
//!   u8  class, u16 code                  AttemptOutcome::to_wire: 1 status (code = HTTP
//!                                        status), 2 connect, 3 timeout, 4 io, 5 tls,
//!                                        6 skipped (code = Done status 5..=7),
//!                                        7 dead-lettered (code = DLQ reason 1..=3)
//!   u32 latency_us                       saturating
//!   u32 retry_after_ms                   0xFFFF_FFFF = none
//!   u16 m, m bytes response_prefix       m <= MAX_RESPONSE_PREFIX_BYTES (512)
//! ```
//!
//! A leaf beside `decode`: it names only the record types.
#![forbid(unsafe_code)]

use super::record::{
    AttemptEntry, AttemptOutcome, AttemptsRecord, DecodeError, EncodeError,
    ATTEMPT_ENTRY_FIXED_BYTES, MAX_ATTEMPT_ENTRIES, MAX_RESPONSE_PREFIX_BYTES, NO_RETRY_AFTER,
};

/// The exact payload length of `rec`, after checking its bounds.
pub fn payload_len(rec: &AttemptsRecord) -> Result<usize, EncodeError> {
    if rec.entries.len() > MAX_ATTEMPT_ENTRIES {
        return Err(EncodeError::TooLong {
            field: "attempt entries",
            len: rec.entries.len(),
            max: MAX_ATTEMPT_ENTRIES,
        });
    }
    let mut n = 2;
    for e in &rec.entries {
        if e.response_prefix.len() > MAX_RESPONSE_PREFIX_BYTES {
            return Err(EncodeError::TooLong {
                field: "response_prefix",
                len: e.response_prefix.len(),
                max: MAX_RESPONSE_PREFIX_BYTES,
            });
        }
        n += e.encoded_len();
    }
    Ok(n)
}

/// Appends `rec`'s payload to `out` (bounds already checked by [`payload_len`]).
pub fn encode_into(rec: &AttemptsRecord, out: &mut Vec<u8>) {
    out.extend_from_slice(&(rec.entries.len() as u16).to_le_bytes());
    for e in &rec.entries {
        let (class, code) = e.outcome.to_wire();
        out.extend_from_slice(&e.event_lsn.to_le_bytes());
        out.extend_from_slice(&e.attempt.to_le_bytes());
        out.extend_from_slice(&e.at_ms.to_le_bytes());
        out.extend_from_slice(&e.destination.to_le_bytes());
        out.push(class);
        out.extend_from_slice(&code.to_le_bytes());
        out.extend_from_slice(&e.latency_us.to_le_bytes());
        out.extend_from_slice(&e.retry_after_ms.unwrap_or(NO_RETRY_AFTER).to_le_bytes());
        out.extend_from_slice(&(e.response_prefix.len() as u16).to_le_bytes());
        out.extend_from_slice(&e.response_prefix);
    }
}

fn take<'a>(rest: &mut &'a [u8], n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
    if rest.len() < n {
        return Err(DecodeError::Truncated { field });
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

fn array<const N: usize>(rest: &mut &[u8], field: &'static str) -> Result<[u8; N], DecodeError> {
    let mut a = [0u8; N];
    a.copy_from_slice(take(rest, N, field)?);
    Ok(a)
}

/// Decodes a kind-8 payload. Never panics; every malformed input is a [`DecodeError`].
pub fn decode(payload: &[u8]) -> Result<AttemptsRecord, DecodeError> {
    let mut rest = payload;
    let n = u16::from_le_bytes(array(&mut rest, "attempt entries")?) as usize;
    if n > MAX_ATTEMPT_ENTRIES {
        return Err(DecodeError::TooLong {
            field: "attempt entries",
            len: n,
            max: MAX_ATTEMPT_ENTRIES,
        });
    }
    // Each entry is at least its fixed part: a count the payload cannot hold is refused before
    // anything is reserved for it.
    if rest.len() < n * ATTEMPT_ENTRY_FIXED_BYTES {
        return Err(DecodeError::Truncated {
            field: "attempt entries",
        });
    }
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        entries.push(decode_entry(&mut rest)?);
    }
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes { count: rest.len() });
    }
    Ok(AttemptsRecord { entries })
}

/// Each entry's event LSN and whether it was a call, in order, without decoding the rest (no
/// allocation: the outcome index's fold, `wal::outcomes`). `None` when the payload does not
/// decode (as `decode` would refuse it, up to the outcome's class, which is not checked).
pub fn entry_lsns(payload: &[u8], mut f: impl FnMut(u64, bool)) -> Option<()> {
    let mut rest = payload;
    let n = u16::from_le_bytes(array(&mut rest, "attempt entries").ok()?) as usize;
    if n > MAX_ATTEMPT_ENTRIES {
        return None;
    }
    for _ in 0..n {
        let event_lsn = u64::from_le_bytes(array(&mut rest, "").ok()?);
        // attempt (4), at (8), destination (4), then the class byte.
        take(&mut rest, 16, "").ok()?;
        let [class] = array(&mut rest, "").ok()?;
        // code (2), latency (4), retry_after (4), prefix length (2) and the prefix.
        take(&mut rest, 10, "").ok()?;
        let m = u16::from_le_bytes(array(&mut rest, "").ok()?) as usize;
        if m > MAX_RESPONSE_PREFIX_BYTES {
            return None;
        }
        take(&mut rest, m, "").ok()?;
        // Classes 6 (skipped) and 7 (dead-lettered) are decisions, not calls.
        f(event_lsn, !matches!(class, 6 | 7));
    }
    rest.is_empty().then_some(())
}

fn decode_entry(rest: &mut &[u8]) -> Result<AttemptEntry, DecodeError> {
    let event_lsn = u64::from_le_bytes(array(rest, "attempt event_lsn")?);
    let attempt = u32::from_le_bytes(array(rest, "attempt number")?);
    let at_ms = u64::from_le_bytes(array(rest, "attempt at")?);
    let destination = u32::from_le_bytes(array(rest, "attempt destination")?);
    let [class] = array(rest, "attempt class")?;
    let code = u16::from_le_bytes(array(rest, "attempt code")?);
    let outcome = AttemptOutcome::from_wire(class, code).ok_or(DecodeError::Invalid {
        field: "attempt class",
    })?;
    let latency_us = u32::from_le_bytes(array(rest, "attempt latency")?);
    let retry_after = u32::from_le_bytes(array(rest, "attempt retry_after")?);
    let m = u16::from_le_bytes(array(rest, "response_prefix")?) as usize;
    if m > MAX_RESPONSE_PREFIX_BYTES {
        return Err(DecodeError::TooLong {
            field: "response_prefix",
            len: m,
            max: MAX_RESPONSE_PREFIX_BYTES,
        });
    }
    let response_prefix = take(rest, m, "response_prefix")?.to_vec();
    Ok(AttemptEntry {
        event_lsn,
        attempt,
        at_ms,
        destination,
        outcome,
        latency_us,
        retry_after_ms: (retry_after != NO_RETRY_AFTER).then_some(retry_after),
        response_prefix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::format::record::DoneStatus;

    /// The light walk gives what a full decode gives, and refuses what it refuses.
    #[test]
    fn entry_lsns_walks_what_decode_reads() {
        let outcomes = [
            AttemptOutcome::Status(503),
            AttemptOutcome::Timeout,
            AttemptOutcome::Skipped(DoneStatus::SkippedDebounced),
            AttemptOutcome::DeadLettered(2),
            AttemptOutcome::Status(200),
        ];
        let rec = AttemptsRecord {
            entries: (0..5)
                .map(|i| entry(i, outcomes[i as usize], &b"ok\x00"[..(i as usize % 4)]))
                .collect(),
        };
        let mut payload = Vec::new();
        encode_into(&rec, &mut payload);
        let mut seen = Vec::new();
        assert_eq!(
            entry_lsns(&payload, |l, call| seen.push((l, call))),
            Some(())
        );
        let want: Vec<_> = (rec.entries.iter())
            .map(|e| (e.event_lsn, e.outcome.is_call()))
            .collect();
        assert_eq!(seen, want);
        for cut in 0..payload.len() {
            assert_eq!(entry_lsns(&payload[..cut], |_, _| ()), None, "cut at {cut}");
        }
        payload.push(0);
        assert_eq!(entry_lsns(&payload, |_, _| ()), None, "trailing byte");
    }

    fn entry(i: u64, outcome: AttemptOutcome, prefix: &[u8]) -> AttemptEntry {
        AttemptEntry {
            event_lsn: 10 + i,
            attempt: 1 + i as u32,
            at_ms: 1_700_000_000_000 + i,
            destination: 3,
            outcome,
            latency_us: 1234,
            retry_after_ms: (i % 2 == 0).then_some(5000),
            response_prefix: prefix.to_vec(),
        }
    }

    fn sample() -> AttemptsRecord {
        AttemptsRecord {
            entries: vec![
                entry(0, AttemptOutcome::Status(500), b"oops"),
                entry(1, AttemptOutcome::Connect, b""),
                entry(2, AttemptOutcome::Timeout, b""),
                entry(3, AttemptOutcome::Io, b""),
                entry(4, AttemptOutcome::Tls, b""),
                entry(
                    5,
                    AttemptOutcome::Skipped(DoneStatus::SkippedDebounced),
                    b"",
                ),
                entry(6, AttemptOutcome::DeadLettered(3), b""),
                entry(
                    7,
                    AttemptOutcome::Status(200),
                    &[7u8; MAX_RESPONSE_PREFIX_BYTES],
                ),
            ],
        }
    }

    #[test]
    fn every_outcome_round_trips_with_its_exact_length() {
        let rec = sample();
        let mut out = Vec::new();
        encode_into(&rec, &mut out);
        assert_eq!(out.len(), payload_len(&rec).unwrap());
        assert_eq!(decode(&out).unwrap(), rec);
    }

    #[test]
    fn bounds_are_refused_on_both_sides() {
        let mut rec = sample();
        rec.entries[0].response_prefix = vec![0; MAX_RESPONSE_PREFIX_BYTES + 1];
        assert!(matches!(
            payload_len(&rec),
            Err(EncodeError::TooLong {
                field: "response_prefix",
                ..
            })
        ));
        let mut out = Vec::new();
        encode_into(&rec, &mut out);
        assert!(matches!(
            decode(&out),
            Err(DecodeError::TooLong {
                field: "response_prefix",
                ..
            })
        ));
        let many = AttemptsRecord {
            entries: vec![entry(0, AttemptOutcome::Io, b""); MAX_ATTEMPT_ENTRIES + 1],
        };
        assert!(payload_len(&many).is_err());
        assert!(matches!(
            decode(&(MAX_ATTEMPT_ENTRIES as u16 + 1).to_le_bytes()),
            Err(DecodeError::TooLong { .. })
        ));
    }

    #[test]
    fn undefined_classes_and_every_prefix_and_flip_are_errors_never_panics() {
        let rec = sample();
        let mut out = Vec::new();
        encode_into(&rec, &mut out);
        for cut in 0..out.len() {
            assert!(decode(&out[..cut]).is_err(), "prefix {cut} decoded");
        }
        for i in 0..out.len() {
            let mut m = out.clone();
            m[i] ^= 0xA5;
            let _ = decode(&m);
        }
        for (class, code) in [(0u8, 0u16), (9, 0), (6, 1), (6, 300), (7, 0), (7, 4)] {
            assert_eq!(
                AttemptOutcome::from_wire(class, code),
                None,
                "{class}/{code}"
            );
        }
        let mut extra = out.clone();
        extra.push(0);
        assert_eq!(decode(&extra), Err(DecodeError::TrailingBytes { count: 1 }));
    }
}
