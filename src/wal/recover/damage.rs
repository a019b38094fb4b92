//! The recovery decision: is damage found in a log a torn final batch (never acknowledged:
//! truncate it and count it) or damage to data that may have been acknowledged (report it,
//! never truncate it)? A pure function over a segment's bytes ([`classify`]), so the fuzzer
//! and the unit tests drive it directly.
//!
//! # Why it can be decided
//!
//! Every commit writes its records followed by a commit marker (`format::marker`), with the
//! same write. In `fsync` mode (marker flag ORDERED) the next batch is written only after this
//! batch's sync returned (and a later process syncs what it recovers before it writes), so at a
//! power cut only the *last* write of a log can be incomplete, and a power cut leaves it with
//! whole 512-byte sectors that did not reach the disk (they read as zeros: segments are
//! preallocated, and the writer zeroes failed writes before writing past them), in any order.
//!
//! So, at damage at offset `X` of the last segment, expected LSN `L`:
//!
//! 1. Not the last segment: acknowledged (a segment is synced before the next is created).
//! 2. `L` at or below the checkpoint's durable LSN: acknowledged.
//! 3. An ORDERED commit marker after `X` of a *later* batch, or the damaged batch's own
//!    ORDERED marker followed by any non-zero byte: something was written after the damaged
//!    batch, hence after its sync returned: acknowledged.
//! 4. A log not in ORDERED mode at `X` (`os` durability, or written before markers existed): the
//!    earlier rule — above the checkpoint's durable LSN it is a torn tail (nothing there was
//!    ever synced: `os` mode writes batches back in any order); without a checkpoint, torn when
//!    no CRC-valid record with a plausible LSN follows.
//! 5. Otherwise `X` is in the final write. A power cut explains it only if a sector the write
//!    covered, from `X` on, reads as zeros: a whole aligned sector in `[X, E)` (`E` the end of
//!    the batch: its marker's end, else the last non-zero byte), or the partial sector at `X`
//!    when the write began at `X`, or a record at `X` claiming bytes past everything written
//!    (a prefix of the batch). Then torn. Else the damage sits inside sectors that were all
//!    written — a changed byte, not a power cut: acknowledged.
//!
//! Limits, stated: a final batch that legitimately holds 512 aligned zero bytes inside the
//! damaged span is taken for torn (rule 5); a synced final batch that loses a whole sector
//! after its sync (a lost write the disk acknowledged) looks exactly like a power cut during
//! that sync and is truncated as torn (named at error level, its bytes kept in the log's
//! quarantine, recorded in `quarantine/TORN` for `wal verify` and counted in
//! `sluice_wal_torn_tail_*`: `recover::torn`); and damage that
//! also destroys every marker after it falls to rule 5.
#![forbid(unsafe_code)]

use crate::wal::format::marker::{parse_marker, Marker, MARKER_RECORD_BYTES};
use crate::wal::format::{parse_record, Parsed, RecordKind, RecordRef, RECORD_HEADER_BYTES};
use crate::wal::{Lsn, MAX_RECORD_BYTES};

/// Granularity of a power cut's tearing: a disk sector (`storage::sim::SECTOR` simulates it).
pub(crate) const SECTOR: usize = 512;

/// Damage found by a scan, with what the scan knew when it stopped.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Damage<'a> {
    /// The segment's bytes.
    pub(crate) bytes: &'a [u8],
    /// Where the record with LSN `lsn` should have been.
    pub(crate) offset: usize,
    pub(crate) lsn: Lsn,
    /// Start of the batch holding `offset`: the end of the last commit marker before it in
    /// this segment; `None` when unknown (no marker yet, or a lost range before it).
    pub(crate) batch_start: Option<usize>,
    /// The ORDERED flag of the last commit marker before `offset` (any segment); `None`: none.
    pub(crate) ordered: Option<bool>,
    /// The checkpoint's durable LSN; `None` without a checkpoint.
    pub(crate) promised: Option<Lsn>,
    pub(crate) last_segment: bool,
}

/// What [`classify`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// An incomplete final write: truncate from the offset.
    Torn,
    /// Damage to data that may have been acknowledged; why.
    Acked(String),
}

/// The decision of the module header's rules 1–5.
pub(crate) fn classify(d: &Damage<'_>) -> Verdict {
    if !d.last_segment {
        return Verdict::Acked(
            "damage in a segment the log had rolled past (synced before the next was created)"
                .into(),
        );
    }
    if let Some(p) = d.promised.filter(|p| d.lsn <= *p) {
        return Verdict::Acked(format!(
            "the checkpoint records LSNs up to {p} as durable: corruption, not a torn tail"
        ));
    }
    let found = first_marker_after(d.bytes, d.offset + 1, d.lsn);
    let mut own = None;
    if let Some((at, m)) = found {
        let later = m.first_lsn > d.lsn
            || (m.first_lsn == d.lsn && d.batch_start.is_some_and(|s| s < d.offset));
        if later && m.ordered {
            return Verdict::Acked(format!(
                "a later batch (commit {}, LSNs {}..={}, marker at offset {at}) was written \
                 after this one was synced",
                m.batch_seq,
                m.first_lsn,
                m.next_lsn - 1
            ));
        }
        if !later {
            let end = at + MARKER_RECORD_BYTES;
            if m.ordered && last_non_zero(&d.bytes[end..]).is_some() {
                return Verdict::Acked(format!(
                    "bytes follow this batch's commit marker (offset {at}): a later write, made \
                     after this batch was synced"
                ));
            }
            own = Some((end, m));
        }
    }
    let ordered = own.map(|(_, m)| m.ordered).or(d.ordered);
    if ordered != Some(true) {
        return match d.promised {
            Some(_) => Verdict::Torn,
            None if !valid_record_after(d.bytes, d.offset + 1, d.lsn) => Verdict::Torn,
            None => Verdict::Acked("a valid record follows the damaged one".into()),
        };
    }
    if power_cut_shape(d, own.map(|(end, _)| end)) {
        Verdict::Torn
    } else {
        Verdict::Acked(
            "the damaged bytes lie in sectors that were all written (no sector of zeros): a \
             changed byte, not a power cut"
                .into(),
        )
    }
}

/// Rule 5: could a power cut during the write that holds `d.offset` have left these bytes?
/// `own_end`: the end of the batch's own commit marker, if it was found.
fn power_cut_shape(d: &Damage<'_>, own_end: Option<usize>) -> bool {
    let (bytes, x) = (d.bytes, d.offset);
    let written_end = last_non_zero(bytes).map_or(0, |p| p + 1);
    let end = own_end.unwrap_or(written_end).min(bytes.len());
    if own_end.is_none() {
        if let Some(h) = bytes.get(x..x + 4) {
            let claimed = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
            if (RECORD_HEADER_BYTES..=MAX_RECORD_BYTES).contains(&claimed)
                && x + claimed > written_end
            {
                return true; // a prefix of the batch reached the disk
            }
        }
    }
    let next_sector = x.div_ceil(SECTOR) * SECTOR;
    let write_began_here = d.batch_start.map_or(true, |s| s == x);
    if x < next_sector && write_began_here && all_zero(&bytes[x..next_sector.min(end)]) {
        return true;
    }
    (next_sector..end)
        .step_by(SECTOR)
        .any(|s| all_zero(&bytes[s..(s + SECTOR).min(end)]))
}

/// The first CRC-valid commit marker at an offset `>= from` whose LSN is plausible (at least
/// `min_lsn`, and no more records than could fit).
fn first_marker_after(bytes: &[u8], from: usize, min_lsn: Lsn) -> Option<(usize, Marker)> {
    let kind = RecordKind::Marker as u8;
    candidates(bytes, from, min_lsn).find_map(|(p, r)| {
        (bytes[p + 16] == kind)
            .then(|| parse_marker(r.lsn, r.payload))
            .flatten()
            .map(|m| (p, m))
    })
}

/// The first valid record of any kind (commit markers and lost ranges included) at an offset
/// `>= from` with a plausible LSN (see [`first_marker_after`]): where a scan may resume past
/// damage.
pub(crate) fn next_valid(
    bytes: &[u8],
    from: usize,
    min_lsn: Lsn,
) -> Option<(usize, RecordRef<'_>)> {
    candidates(bytes, from, min_lsn).next()
}

/// True if some offset `>= from` holds a CRC-valid record whose LSN is plausible.
pub(crate) fn valid_record_after(bytes: &[u8], from: usize, min_lsn: Lsn) -> bool {
    next_valid(bytes, from, min_lsn).is_some()
}

/// Every offset `>= from` holding a CRC-valid record of a known kind whose LSN is at least
/// `min_lsn` and plausible (no more records than could fit). Cheap filters first, CRC last; the
/// zero tail after the last non-zero byte is skipped (a record's `len` field is not zero).
fn candidates(
    bytes: &[u8],
    from: usize,
    min_lsn: Lsn,
) -> impl Iterator<Item = (usize, RecordRef<'_>)> {
    let max_lsn = min_lsn.saturating_add((bytes.len() / RECORD_HEADER_BYTES) as u64);
    let stop = last_non_zero(bytes).map_or(0, |last| {
        (last + 1).min(bytes.len().saturating_sub(RECORD_HEADER_BYTES - 1))
    });
    (from..stop).filter_map(move |p| {
        let h = &bytes[p..p + RECORD_HEADER_BYTES];
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let mut lsn = [0u8; 8];
        lsn.copy_from_slice(&h[8..16]);
        let lsn = u64::from_le_bytes(lsn);
        if len < RECORD_HEADER_BYTES
            || len > bytes.len() - p
            || RecordKind::from_u8(h[16]).is_none()
            || !(min_lsn..=max_lsn).contains(&lsn)
        {
            return None;
        }
        match parse_record(&bytes[p..]) {
            Parsed::Record(r) => Some((p, r)),
            _ => None,
        }
    })
}

/// True if `bytes` are all zero. Compares 64 KiB pieces against a static zero block (`memcmp`):
/// a 64 MiB preallocated segment tail is checked at every open, so this must be fast even in
/// unoptimised builds.
pub(crate) fn all_zero(bytes: &[u8]) -> bool {
    static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
    bytes.chunks(ZEROS.len()).all(|c| c == &ZEROS[..c.len()])
}

/// Offset of the last non-zero byte: skips all-zero 64 KiB blocks from the end with
/// [`all_zero`] (the preallocated tail of a segment), then looks inside the last other block.
pub(crate) fn last_non_zero(bytes: &[u8]) -> Option<usize> {
    const BLOCK: usize = 64 * 1024;
    let mut end = bytes.len();
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        if !all_zero(&bytes[start..end]) {
            return bytes[start..end]
                .iter()
                .rposition(|&b| b != 0)
                .map(|p| start + p);
        }
        end = start;
    }
    None
}

#[cfg(test)]
#[path = "damage_tests.rs"]
mod tests;
