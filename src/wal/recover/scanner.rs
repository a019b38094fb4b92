//! The record-by-record walk of one segment's bytes ([`Scanner`]): LSN continuity, commit
//! markers checked against the batches they close, lost-range records passed. Shared by
//! recovery's directory scan (`crate::wal::recover`), the reader and retention's count
//! (`crate::wal::retire::count`).
#![forbid(unsafe_code)]

use crate::wal::format::marker::{parse_lost, parse_marker, Marker};
use crate::wal::format::{parse_record, Parsed, RecordKind, RecordRef, EXTENDS_PAST_END};
use crate::wal::recover::damage::all_zero;
use crate::wal::Lsn;

/// One step of a segment scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step<'a> {
    /// A valid data record at `offset`, with the expected LSN (commit markers are checked and
    /// passed over inside the step).
    Record(u64, RecordRef<'a>),
    /// A lost-range record at `offset`: LSNs `first..=last` were given up earlier
    /// (`--accept-wal-loss`); the scan continues at `last + 1`.
    Gap { offset: u64, first: Lsn, last: Lsn },
    /// Clean end: only zeros from here on.
    End,
    /// Not a valid continuation at `offset` ([`crate::wal::recover::damage::classify`] decides what it is).
    Bad { offset: u64, reason: String },
}

/// Walks the records of one segment's bytes, checking LSN continuity from `next_lsn` and every
/// commit marker against the batch it closes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scanner {
    /// Offset of the next record.
    pub(crate) pos: usize,
    /// LSN the next record must carry.
    pub(crate) next_lsn: Lsn,
    /// Where the current batch began (the end of the last commit marker in this segment, or
    /// 0); `None` after a lost range, whose batch cannot be checked.
    pub(crate) batch_start: Option<usize>,
    /// LSN of the first record at `batch_start`.
    pub(crate) batch_first: Lsn,
    /// A commit marker was seen in this segment (before it, records of a version without
    /// markers may precede the first batch).
    seen_marker: bool,
    /// The last commit marker passed.
    pub(crate) last_marker: Option<Marker>,
}

impl Scanner {
    pub(crate) fn new(first_lsn: Lsn) -> Self {
        Self::resume_at(0, first_lsn, Some(0))
    }

    /// A scanner continuing at `pos`, expecting `next_lsn` (past damage: `batch_start` None).
    pub(crate) fn resume_at(pos: usize, next_lsn: Lsn, batch_start: Option<usize>) -> Self {
        Scanner {
            pos,
            next_lsn,
            batch_start,
            batch_first: next_lsn,
            seen_marker: false,
            last_marker: None,
        }
    }

    /// The next step; after `End` or `Bad` the scanner stays put.
    pub(crate) fn step<'a>(&mut self, bytes: &'a [u8]) -> Step<'a> {
        loop {
            let rest = bytes.get(self.pos..).unwrap_or(&[]);
            let offset = self.pos as u64;
            let bad = |reason: &str| Step::Bad {
                offset,
                reason: reason.to_owned(),
            };
            let r = match parse_record(rest) {
                Parsed::Record(r) if r.lsn == self.next_lsn => r,
                Parsed::Record(r) => {
                    let reason = format!("LSN gap: expected {}, found {}", self.next_lsn, r.lsn);
                    return Step::Bad { offset, reason };
                }
                Parsed::End if all_zero(rest) => return Step::End,
                // Fewer than 4 bytes left, not all zero: the file ends inside a length field.
                Parsed::End if rest.len() < 4 => {
                    let at = bytes.len();
                    return bad(&format!(
                        "the file ends inside a record's length field: truncated at byte {at}"
                    ));
                }
                Parsed::End => return bad("non-zero bytes after the end-of-data marker"),
                Parsed::Bad(EXTENDS_PAST_END) => {
                    let at = bytes.len();
                    return bad(&format!(
                        "the file ends inside this record: truncated at byte {at}"
                    ));
                }
                Parsed::Bad(reason) => return bad(reason),
            };
            match r.kind {
                RecordKind::Marker => match self.check_marker(bytes, &r) {
                    Ok(()) => continue,
                    Err(reason) => return bad(reason),
                },
                RecordKind::Lost => {
                    let Some(last) = parse_lost(r.lsn, r.payload) else {
                        return bad("lost-range record with an invalid range");
                    };
                    self.pos += r.len;
                    self.next_lsn = last + 1;
                    self.batch_start = None;
                    return Step::Gap {
                        offset,
                        first: r.lsn,
                        last,
                    };
                }
                _ => {
                    self.pos += r.len;
                    self.next_lsn += 1;
                    return Step::Record(offset, r);
                }
            }
        }
    }

    /// Checks the commit marker `r` at `pos` against the batch before it, and passes it.
    fn check_marker(&mut self, bytes: &[u8], r: &RecordRef<'_>) -> Result<(), &'static str> {
        let m = parse_marker(r.lsn, r.payload).ok_or("commit marker with invalid fields")?;
        if let Some(s) = self.batch_start {
            let start = self
                .pos
                .checked_sub(m.batch_bytes as usize)
                .ok_or("commit marker covers more bytes than precede it")?;
            let aligned = if self.seen_marker {
                start == s
            } else {
                start >= s
            };
            if !aligned || crc32c::crc32c(&bytes[start..self.pos]) != m.batch_crc {
                return Err("commit marker does not match the batch before it");
            }
        }
        self.pos += r.len;
        self.batch_start = Some(self.pos);
        self.batch_first = self.next_lsn;
        self.seen_marker = true;
        self.last_marker = Some(m);
        Ok(())
    }
}
