//! The two framing records that carry no event: the *commit marker* (kind 6) that closes every
//! committed batch, and the *lost-range record* (kind 7) that `--accept-wal-loss` writes where
//! records were given up. Both use the ordinary record header (`len`, `crc`, `lsn`, `kind`), so a
//! scan checks their length and CRC like any record; neither consumes an LSN of its own.
//!
//! ```text
//! commit marker, kind 6: header lsn = the LSN after the batch (last LSN of the batch + 1)
//!   u64  batch_seq    commits of this log, counted from 1 (continues across restarts)
//!   u64  first_lsn    LSN of the batch's first record (< header lsn: a batch holds >= 1)
//!   u32  batch_bytes  bytes of the batch's records, which end where the marker starts
//!   u32  batch_crc    CRC32C of those `batch_bytes` bytes
//!   u8   flags        bit 0 ORDERED: written in `fsync` mode, so nothing after this marker
//!                     is written before the batch's sync returned; other bits 0. The last
//!                     byte of a batch, never 0 in `fsync` mode.
//!   (record: 17 + 25 = 42 bytes, MARKER_RECORD_BYTES)
//!
//! lost range, kind 7: header lsn = first LSN given up
//!   u64  last_lsn     last LSN given up (>= header lsn - 1; = header lsn - 1 when no record
//!                     is lost: only framing bytes were damaged, or a continuation, below)
//!   ...  zeros        padding: the record covers the damaged bytes it replaces
//!   (record: 25 bytes (LOST_RECORD_BYTES) up to LOST_RECORD_MAX_BYTES (1 MiB); a longer
//!   damaged span is covered by a chain, the later ones with an empty range. After it the next
//!   record carries `last_lsn + 1`, in this segment or as the first of the next)
//! ```
#![forbid(unsafe_code)]

use super::{append_record, RecordKind, RECORD_HEADER_BYTES};

/// Bytes of a commit-marker payload.
pub const MARKER_PAYLOAD_BYTES: usize = 8 + 8 + 4 + 4 + 1;
/// Bytes of a whole commit-marker record.
pub const MARKER_RECORD_BYTES: usize = RECORD_HEADER_BYTES + MARKER_PAYLOAD_BYTES;
/// Bytes of a whole lost-range record.
pub const LOST_RECORD_BYTES: usize = RECORD_HEADER_BYTES + 8;
/// Longest lost-range record (a longer span is covered by several: [`lost_span`]).
pub const LOST_RECORD_MAX_BYTES: usize = 1 << 20;
/// `flags` bit: the batch was written in `fsync` mode (see the module header).
pub const FLAG_ORDERED: u8 = 1;

/// A decoded commit marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    pub batch_seq: u64,
    /// LSN of the batch's first record.
    pub first_lsn: u64,
    /// The LSN after the batch (the marker's header LSN).
    pub next_lsn: u64,
    pub batch_bytes: u32,
    pub batch_crc: u32,
    /// Written in `fsync` mode: the batch was synced before anything after it was written.
    pub ordered: bool,
}

/// Appends the commit marker of the batch `out[batch_start..]` (its records, `first_lsn` up to
/// `next_lsn - 1`) to `out`.
pub fn append_marker(
    out: &mut Vec<u8>,
    batch_start: usize,
    batch_seq: u64,
    first_lsn: u64,
    next_lsn: u64,
    ordered: bool,
) {
    let batch = &out[batch_start..];
    // A batch is bounded far below 4 GiB (one segment at most, itself <= 2^40 but a chunk
    // never exceeds `MAX_BATCH_BYTES` plus one record); `min` keeps the cast honest.
    let bytes = batch.len().min(u32::MAX as usize) as u32;
    let crc = crc32c::crc32c(batch);
    let flags = if ordered { FLAG_ORDERED } else { 0 };
    let res: Result<usize, std::convert::Infallible> =
        append_record(out, next_lsn, RecordKind::Marker, |o| {
            o.extend_from_slice(&batch_seq.to_le_bytes());
            o.extend_from_slice(&first_lsn.to_le_bytes());
            o.extend_from_slice(&bytes.to_le_bytes());
            o.extend_from_slice(&crc.to_le_bytes());
            o.push(flags);
            Ok(())
        });
    let Ok(_) = res;
}

/// The commit marker in the payload of a kind-6 record with header LSN `lsn`; `None` if the
/// payload is not one (wrong size, undefined flag bits, an empty or backwards batch).
pub fn parse_marker(lsn: u64, payload: &[u8]) -> Option<Marker> {
    if payload.len() != MARKER_PAYLOAD_BYTES {
        return None;
    }
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&payload[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let u32_at = |at: usize| {
        u32::from_le_bytes([
            payload[at],
            payload[at + 1],
            payload[at + 2],
            payload[at + 3],
        ])
    };
    let flags = payload[24];
    let m = Marker {
        batch_seq: u64_at(0),
        first_lsn: u64_at(8),
        next_lsn: lsn,
        batch_bytes: u32_at(16),
        batch_crc: u32_at(20),
        ordered: flags & FLAG_ORDERED != 0,
    };
    (flags & !FLAG_ORDERED == 0
        && m.first_lsn < lsn
        && m.batch_bytes as usize >= RECORD_HEADER_BYTES)
        .then_some(m)
}

/// Appends lost-range records giving up LSNs `first..=last` (`last = first - 1`: none) that
/// cover exactly `span` bytes (`>= LOST_RECORD_BYTES`): one record, or a chain of records of at
/// most [`LOST_RECORD_MAX_BYTES`], the later ones with an empty range.
pub fn lost_span(out: &mut Vec<u8>, first: u64, last: u64, span: usize) {
    let mut remaining = span.max(LOST_RECORD_BYTES);
    let mut lsn = first;
    while remaining > 0 {
        let n = if remaining <= LOST_RECORD_MAX_BYTES {
            remaining
        } else {
            LOST_RECORD_MAX_BYTES.min(remaining - LOST_RECORD_BYTES)
        };
        let res: Result<usize, std::convert::Infallible> =
            append_record(out, lsn, RecordKind::Lost, |o| {
                o.extend_from_slice(&last.to_le_bytes());
                o.resize(o.len() + n - LOST_RECORD_BYTES, 0);
                Ok(())
            });
        let Ok(_) = res;
        remaining -= n;
        lsn = last + 1;
    }
}

/// The last LSN given up by a kind-7 record with header LSN `lsn`; `None` if the payload is
/// not one (shorter than 8 bytes, non-zero padding, a range ending before `lsn - 1`).
pub fn parse_lost(lsn: u64, payload: &[u8]) -> Option<u64> {
    let b: [u8; 8] = payload.get(..8)?.try_into().ok()?;
    let last = u64::from_le_bytes(b);
    let padding_zero = payload[8..].iter().all(|&x| x == 0);
    (padding_zero && last.checked_add(1)? >= lsn).then_some(last)
}

#[cfg(test)]
mod tests {
    use super::super::{parse_record, Parsed};
    use super::*;

    #[test]
    fn marker_layout_is_byte_exact_and_round_trips() {
        let mut out = vec![9u8; 100];
        append_marker(&mut out, 40, 7, 3, 5, true);
        assert_eq!(out.len(), 100 + MARKER_RECORD_BYTES);
        let Parsed::Record(r) = parse_record(&out[100..]) else {
            panic!("not a record")
        };
        assert_eq!((r.lsn, r.kind, r.len), (5, RecordKind::Marker, 42));
        let p = r.payload;
        assert_eq!(&p[0..8], &7u64.to_le_bytes());
        assert_eq!(&p[8..16], &3u64.to_le_bytes());
        assert_eq!(&p[16..20], &60u32.to_le_bytes());
        assert_eq!(&p[20..24], &crc32c::crc32c(&[9u8; 60]).to_le_bytes());
        assert_eq!(p[24], 1, "ORDERED is the batch's last byte");
        let m = parse_marker(r.lsn, p).unwrap();
        assert_eq!(
            m,
            Marker {
                batch_seq: 7,
                first_lsn: 3,
                next_lsn: 5,
                batch_bytes: 60,
                batch_crc: crc32c::crc32c(&[9u8; 60]),
                ordered: true
            }
        );
        // Undefined flags, an empty batch, a wrong size: not a marker.
        let mut bad = p.to_vec();
        bad[24] = 3;
        assert_eq!(parse_marker(5, &bad), None);
        assert_eq!(parse_marker(3, p), None);
        assert_eq!(parse_marker(5, &p[..24]), None);
    }

    #[test]
    fn lost_record_names_its_range() {
        let mut out = Vec::new();
        lost_span(&mut out, 5, 8, LOST_RECORD_BYTES);
        assert_eq!(out.len(), LOST_RECORD_BYTES);
        let Parsed::Record(r) = parse_record(&out) else {
            panic!("not a record")
        };
        assert_eq!((r.lsn, r.kind), (5, RecordKind::Lost));
        assert_eq!(parse_lost(r.lsn, r.payload), Some(8));
        assert_eq!(parse_lost(5, &4u64.to_le_bytes()), Some(4), "empty range");
        assert_eq!(parse_lost(5, &3u64.to_le_bytes()), None);
        assert_eq!(parse_lost(5, &[0; 7]), None);
        // A long span: a chain whose later records give up nothing more.
        let mut out = Vec::new();
        let span = 2 * LOST_RECORD_MAX_BYTES + 10;
        lost_span(&mut out, 5, 8, span);
        assert_eq!(out.len(), span);
        let mut at = 0;
        let mut seen = Vec::new();
        while at < out.len() {
            let Parsed::Record(r) = parse_record(&out[at..]) else {
                panic!("not a record at {at}")
            };
            seen.push((r.lsn, parse_lost(r.lsn, r.payload).unwrap()));
            at += r.len;
        }
        assert_eq!(seen, [(5, 8), (9, 8), (9, 8)]);
        let mut padded = 8u64.to_le_bytes().to_vec();
        padded.extend_from_slice(&[0, 0, 1]);
        assert_eq!(parse_lost(5, &padded), None, "padding must be zeros");
    }
}
