//! Where in a segment a lookup's forward scan starts: a bisection over the segment's bytes on
//! event ids, so that finding one event in a 64 MiB segment reads a few KiB per probe instead of
//! every record up to the event (`events::show`).
//!
//! It rests on the order `events::show` already relies on: the event ids of one log increase
//! with its LSNs (one generator per worker). A probe at byte `mid` resyncs on the first batch
//! boundary after it (the end of a CRC-valid commit marker with a plausible LSN: a fixed length
//! and kind rule out nearly every offset before a CRC is computed), then reads records from
//! there to the first event and compares its id. A boundary found this way is one a forward
//! scan from the segment's start also reaches: the marker and every record after it are
//! CRC-checked and their LSNs must continue, so a false boundary would have to forge both.
//!
//! Cost: about `log2(segment bytes / WINDOW)` probes, each a resync (the bytes up to the next
//! batch boundary, header checks only) plus the records up to the next event, then a forward
//! scan from the last boundary at or before the event: at most `WINDOW` bytes plus one batch.
//! Memory: none beyond the segment's read-only map.
#![forbid(unsafe_code)]

use std::path::Path;

use crate::storage::{StdFs, Storage};
use crate::wal::format::marker::{parse_marker, MARKER_RECORD_BYTES};
use crate::wal::format::{parse_event, parse_record, Parsed, RecordKind, RECORD_HEADER_BYTES};
use crate::wal::recover::scanner::{Scanner, Step};
use crate::wal::{Lsn, WalError};

/// The bisection stops when the range left is at most this many bytes, and the caller's
/// forward scan takes over from its start.
pub(crate) const WINDOW: usize = 64 * 1024;

/// A record boundary of the segment at `path` (first LSN `first`): `(byte offset, its LSN)`,
/// such that the event `id`, if the segment holds it, lies at or after it and at most about
/// [`WINDOW`] bytes later. `(0, first)` when nothing better is known.
pub(crate) fn seek(path: &Path, first: Lsn, id: &str) -> Result<(usize, Lsn), WalError> {
    let map = StdFs.map(path).map_err(|e| WalError::io(path, e))?;
    Ok(seek_in(&map, first, id))
}

/// [`seek`] over a segment's bytes.
pub(crate) fn seek_in(bytes: &[u8], first: Lsn, id: &str) -> (usize, Lsn) {
    // The preallocated zero tail cut off once (each probe would otherwise look for its start).
    let bytes = &bytes[..data_end(bytes)];
    // No more records than could fit: the LSNs a marker of this segment can carry.
    let max_lsn = first.saturating_add((bytes.len() / RECORD_HEADER_BYTES) as u64);
    // Invariant: the event lies at or after the record at `lo` (LSN `lo_lsn`), and if it is in
    // this segment it most likely starts before `hi` (a probe that finds no batch boundary
    // between `mid` and `hi` lowers `hi` anyway: only `lo` must hold, for correctness).
    let (mut lo, mut lo_lsn, mut hi) = (0usize, first, bytes.len());
    while hi - lo > WINDOW {
        let mid = lo + (hi - lo) / 2;
        let Some((p, lsn)) = batch_after(&bytes[..hi], mid, lo_lsn, max_lsn) else {
            hi = mid;
            continue;
        };
        match first_event_id(bytes, p, lsn) {
            // The event is not before this one (ids increase with LSNs).
            Some(next) if next.as_str() <= id => (lo, lo_lsn) = (p, lsn),
            // Past it, or no event from here to the end: it starts before the batch at `p`,
            // which is the first to start after `mid`.
            _ => hi = mid,
        }
    }
    (lo, lo_lsn)
}

/// A record boundary of the segment at `path` (first LSN `first`): `(byte offset, its LSN)`,
/// at or before the record at LSN `lsn` and most likely within about [`WINDOW`] bytes of it
/// (the same bisection as [`seek`], on the LSNs the commit markers carry).
pub(crate) fn seek_lsn(path: &Path, first: Lsn, lsn: Lsn) -> Result<(usize, Lsn), WalError> {
    let map = StdFs.map(path).map_err(|e| WalError::io(path, e))?;
    Ok(seek_lsn_in(&map, first, lsn))
}

/// [`seek_lsn`] over a segment's bytes.
pub(crate) fn seek_lsn_in(bytes: &[u8], first: Lsn, lsn: Lsn) -> (usize, Lsn) {
    let bytes = &bytes[..data_end(bytes)];
    let max_lsn = first.saturating_add((bytes.len() / RECORD_HEADER_BYTES) as u64);
    // Invariant: the record at `lo` (LSN `lo_lsn`) is at or before the one sought.
    let (mut lo, mut lo_lsn, mut hi) = (0usize, first, bytes.len());
    while hi - lo > WINDOW {
        let mid = lo + (hi - lo) / 2;
        match batch_after(&bytes[..hi], mid, lo_lsn, max_lsn) {
            Some((p, at)) if at <= lsn => (lo, lo_lsn) = (p, at),
            _ => hi = mid,
        }
    }
    (lo, lo_lsn)
}

/// Where a segment's records most likely end: past the last non-zero byte of the last 64 KiB
/// block that is not all zeros, found by a binary search over blocks that takes the
/// preallocated zero tail as one run (`O(log blocks)` blocks read, where `last_non_zero` reads
/// the whole tail: ~54 MiB on a fresh 64 MiB segment, ~10 ms per lookup). A run of zero blocks
/// inside the records (a body of zeros) may make it stop early: the bisections only use it as
/// their upper bound, so they then start their forward scan further back, never past a record.
fn data_end(bytes: &[u8]) -> usize {
    const BLOCK: usize = 64 * 1024;
    let blocks = bytes.len().div_ceil(BLOCK);
    let zero = |b: usize| {
        let block = &bytes[b * BLOCK..((b + 1) * BLOCK).min(bytes.len())];
        block.iter().all(|&x| x == 0)
    };
    // Invariant: blocks before `lo` are taken as data; from `hi` on, as the zero tail.
    let (mut lo, mut hi) = (0usize, blocks);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if zero(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let Some(last) = lo.checked_sub(1) else {
        return 0;
    };
    let block = &bytes[last * BLOCK..((last + 1) * BLOCK).min(bytes.len())];
    last * BLOCK + block.iter().rposition(|&x| x != 0).map_or(0, |p| p + 1)
}

/// The first batch boundary after `from`: the end of the first CRC-valid commit marker at an
/// offset `>= from` with an LSN in `min_lsn..=max_lsn`, and the LSN of the record after it (a
/// marker carries the LSN after its batch). Markers have one length and one kind byte, so nearly
/// every offset is ruled out by its header before any CRC is computed (a resync on any kind of
/// record would CRC whatever length a payload's bytes happen to claim).
fn batch_after(bytes: &[u8], from: usize, min_lsn: Lsn, max_lsn: Lsn) -> Option<(usize, Lsn)> {
    let last = bytes.len().checked_sub(MARKER_RECORD_BYTES)?;
    // A marker starts with its length field: found with a vectorised search (`memmem`), then
    // each hit checked as before.
    let needle = (MARKER_RECORD_BYTES as u32).to_le_bytes();
    let finder = memchr::memmem::Finder::new(&needle);
    let mut p = from;
    while p <= last {
        let q = p + finder.find(&bytes[p..last + needle.len()])?;
        p = q + 1;
        let h = &bytes[q..q + MARKER_RECORD_BYTES];
        if h[16] != RecordKind::Marker as u8 {
            continue;
        }
        let lsn = u64::from_le_bytes(h[8..16].try_into().ok()?);
        if !(min_lsn..=max_lsn).contains(&lsn) {
            continue;
        }
        if let Parsed::Record(r) = parse_record(h) {
            if parse_marker(r.lsn, r.payload).is_some() {
                return Some((q + MARKER_RECORD_BYTES, lsn));
            }
        }
    }
    None
}

/// The id of the first event record at or after the record at `pos` (LSN `lsn`), if one follows
/// before the end of the segment's valid records.
fn first_event_id(bytes: &[u8], pos: usize, lsn: Lsn) -> Option<String> {
    let mut scanner = Scanner::resume_at(pos, lsn, Some(pos));
    loop {
        match scanner.step(bytes) {
            Step::Record(_, r) if r.kind.is_event() => {
                return parse_event(r.kind, r.payload)
                    .ok()
                    .map(|ev| ev.event_id.to_owned());
            }
            Step::Record(..) | Step::Gap { .. } => {}
            Step::End | Step::Bad { .. } => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::event_id::EventIdGen;
    use crate::wal::recover::damage::{last_non_zero, next_valid};
    use crate::wal::segment::list_segments;
    use crate::wal::{
        open, DoneEntry, DoneRecord, DoneStatus, Durability, EventRecord, Record, WalConfig,
    };

    /// Bytes of one of [`log`]'s batches, at most.
    const BATCH: usize = 11 * 1024;

    /// A log of `n` events with `body`-byte bodies in batches of 10, a `Done` record after each
    /// batch; returns the dir and the ids in order.
    fn log(n: u64, body: usize) -> (tempfile::TempDir, std::path::PathBuf, Vec<String>) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("core-0");
        let cfg = WalConfig {
            durability: Durability::Os,
            ..WalConfig::new(dir.clone())
        };
        let (mut wal, _) = open(&cfg).unwrap();
        let mut gen = EventIdGen::new(0);
        let (mut ids, mut lsn) = (Vec::new(), 1u64);
        for b in 0..n / 10 {
            let mut batch = Vec::new();
            for i in 0..10 {
                let id = gen.next(1_800_000_000_000 + b * 10 + i);
                ids.push(id.clone());
                batch.push(Record::Event(EventRecord {
                    event_id: id,
                    trigger_id: "t".into(),
                    source: "s".into(),
                    received_at_ms: 1_800_000_000_000,
                    headers: Vec::new(),
                    body: vec![b'x'; body],
                    replay_of: None,
                    body_json: Default::default(),
                }));
            }
            let entries = (lsn..lsn + 10).map(|l| DoneEntry {
                event_lsn: l,
                status: DoneStatus::Delivered,
                attempts: 1,
            });
            batch.push(Record::Done(DoneRecord {
                entries: entries.collect(),
            }));
            lsn += 11;
            wal.append(&batch).unwrap();
        }
        wal.sync().unwrap();
        (tmp, dir, ids)
    }

    /// For every probed id: the seek lands at or before the event, within the window, on a
    /// boundary a forward scan from there reads without a gap.
    #[test]
    fn the_seek_lands_on_a_record_at_or_before_the_event_within_the_window() {
        let (_tmp, dir, ids) = log(3_000, 900);
        let segs = list_segments(&dir).unwrap();
        assert!(!segs.is_empty());
        let map = StdFs.map(&segs[0].1).unwrap();
        // Where each event of the first segment is, by a full forward scan.
        let mut at = std::collections::HashMap::new();
        let mut scanner = Scanner::new(segs[0].0);
        while let Step::Record(off, r) = scanner.step(&map) {
            if r.kind == RecordKind::Event {
                let ev = parse_event(r.kind, r.payload).unwrap();
                at.insert(ev.event_id.to_owned(), (off as usize, r.lsn));
            }
        }
        assert!(at.len() > 1_000, "a segment of many windows: {}", at.len());
        let mut moved = 0;
        for id in ids.iter().filter(|id| at.contains_key(*id)).step_by(37) {
            let (pos, lsn) = seek_in(&map, segs[0].0, id);
            let (event_at, event_lsn) = at[id];
            assert!(
                pos <= event_at && lsn <= event_lsn,
                "{id}: {pos} > {event_at}"
            );
            assert!(event_at - pos <= WINDOW + BATCH, "{id}: {pos}..{event_at}");
            // The boundary is real: a scanner resumed there reaches the event.
            let mut s = Scanner::resume_at(pos, lsn, None);
            let found = std::iter::from_fn(|| match s.step(&map) {
                Step::Record(off, _) => Some(off as usize),
                _ => None,
            })
            .any(|off| off == event_at);
            assert!(found, "{id}");
            moved += usize::from(pos > 0);
        }
        assert!(moved > 10, "the bisection moved past the start: {moved}");
    }

    /// For every probed LSN: the seek by LSN lands at or before the record, within the window,
    /// on a boundary a forward scan from there reads.
    #[test]
    fn the_seek_by_lsn_lands_at_or_before_the_record_within_the_window() {
        let (_tmp, dir, _ids) = log(3_000, 900);
        let segs = list_segments(&dir).unwrap();
        let map = StdFs.map(&segs[0].1).unwrap();
        let mut at = Vec::new();
        let mut scanner = Scanner::new(segs[0].0);
        while let Step::Record(off, r) = scanner.step(&map) {
            at.push((r.lsn, off as usize));
        }
        assert!(at.len() > 1_000, "a segment of many windows: {}", at.len());
        let mut moved = 0;
        for &(lsn, off) in at.iter().step_by(41) {
            let (pos, from) = seek_lsn_in(&map, segs[0].0, lsn);
            assert!(pos <= off && from <= lsn, "{lsn}: {pos} > {off}");
            assert!(off - pos <= WINDOW + BATCH, "{lsn}: {pos}..{off}");
            let mut s = Scanner::resume_at(pos, from, None);
            let found = std::iter::from_fn(|| match s.step(&map) {
                Step::Record(_, r) => Some(r.lsn),
                _ => None,
            })
            .any(|l| l == lsn);
            assert!(found, "{lsn}");
            moved += usize::from(pos > 0);
        }
        assert!(moved > 10, "the bisection moved past the start: {moved}");
    }

    /// The end of the data is found without reading the zero tail, and a run of zeros inside
    /// the data only makes it stop early.
    #[test]
    fn data_end_finds_the_last_non_zero_byte_before_the_zero_tail() {
        let mut bytes = vec![0u8; 10 * 64 * 1024 + 100];
        assert_eq!(data_end(&bytes), 0);
        bytes[..300_000].fill(7);
        assert_eq!(data_end(&bytes), 300_000);
        bytes[0] = 1;
        bytes[1..300_000].fill(0);
        bytes[299_999] = 9;
        let end = data_end(&bytes);
        assert!(end == 1 || end == 300_000, "{end}");
        let mut last = vec![5u8; 64 * 1024 + 3];
        assert_eq!(data_end(&last), last.len());
        last[64 * 1024..].fill(0);
        assert_eq!(data_end(&last), 64 * 1024);
    }

    /// An id below the segment's first event seeks to the start; one above its last, near the end.
    #[test]
    fn ids_outside_the_segment_seek_to_its_ends() {
        let (_tmp, dir, _ids) = log(1_000, 900);
        let segs = list_segments(&dir).unwrap();
        let map = StdFs.map(&segs[0].1).unwrap();
        assert_eq!(seek_in(&map, segs[0].0, "0"), (0, segs[0].0));
        let (pos, _) = seek_in(&map, segs[0].0, "~");
        let used = map.iter().rposition(|&b| b != 0).unwrap();
        assert!(pos + WINDOW + BATCH >= used, "{pos} vs {used}");
    }

    /// Garbage between records (damage) only costs the probe: the seek still lands before the
    /// event.
    #[test]
    fn a_damaged_stretch_does_not_mislead_the_seek() {
        let (_tmp, dir, ids) = log(3_000, 900);
        let segs = list_segments(&dir).unwrap();
        let mut bytes = StdFs.map(&segs[0].1).unwrap().to_vec();
        let used = last_non_zero(&bytes).unwrap();
        let mid = used / 3;
        bytes[mid..mid + 8 * 1024].fill(0xA5);
        let target = &ids[ids.len() / 2];
        let mut scanner = Scanner::resume_at(0, segs[0].0, None);
        let mut event_at = None;
        loop {
            match scanner.step(&bytes) {
                Step::Record(off, r) if r.kind == RecordKind::Event => {
                    if parse_event(r.kind, r.payload).unwrap().event_id == target.as_str() {
                        event_at = Some(off as usize);
                        break;
                    }
                }
                Step::Record(..) | Step::Gap { .. } => {}
                Step::Bad { offset, .. } => {
                    let (p, r) = next_valid(&bytes, offset as usize + 1, 0).unwrap();
                    scanner = Scanner::resume_at(p, r.lsn, None);
                }
                Step::End => break,
            }
        }
        let event_at = event_at.expect("the event after the damage is readable");
        let (pos, _) = seek_in(&bytes, segs[0].0, target);
        assert!(pos <= event_at && event_at - pos <= WINDOW + BATCH);
        // And an id before the damage still seeks at or before its event.
        let (pos, _) = seek_in(&bytes, segs[0].0, &ids[ids.len() / 10]);
        assert!(pos < mid);
    }
}
