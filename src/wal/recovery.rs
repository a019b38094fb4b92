//! Recovery ([`open`]), the segment scanner shared with the offline tools, and [`WalReader`].
//!
//! The rules (torn tail vs corruption) are stated in the `wal` module header.
#![forbid(unsafe_code)]

use super::appender::{Active, Wal};
use super::checkpoint::{self, Checkpoint, CheckpointFile, Extent, LostRange};
use super::format::{
    decode_payload, parse_record, EventRecord, Parsed, Record, RecordKind, RecordRef,
    RECORD_HEADER_BYTES,
};
use super::segment::{list_segments_in, segment_path};
use super::{Lsn, WalConfig, WalError};
use crate::storage::{Contents, StdFs, Storage};
use crate::sync::clock::unix_millis;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One step of a segment scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step<'a> {
    /// A valid record at `offset`, with the expected LSN.
    Record(u64, RecordRef<'a>),
    /// Clean end: only zeros from here on.
    End,
    /// Not a valid continuation at `offset`. `torn` is true when no valid record follows (so, in
    /// the last segment, this is a torn tail rather than corruption).
    Bad {
        offset: u64,
        reason: String,
        torn: bool,
    },
}

/// Walks the records of one segment's bytes, checking LSN continuity from `next_lsn`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scanner {
    /// Offset of the next record.
    pub(crate) pos: usize,
    /// LSN the next record must carry.
    pub(crate) next_lsn: Lsn,
}

impl Scanner {
    pub(crate) fn new(first_lsn: Lsn) -> Self {
        Scanner {
            pos: 0,
            next_lsn: first_lsn,
        }
    }

    /// The next step; after `End` or `Bad` the scanner stays put.
    pub(crate) fn step<'a>(&mut self, bytes: &'a [u8]) -> Step<'a> {
        let rest = bytes.get(self.pos..).unwrap_or(&[]);
        let offset = self.pos as u64;
        let bad = |reason: &str| Step::Bad {
            offset,
            reason: reason.to_owned(),
            torn: !valid_record_after(bytes, self.pos + 1, self.next_lsn),
        };
        match parse_record(rest) {
            Parsed::Record(r) if r.lsn == self.next_lsn => {
                self.pos += r.len;
                self.next_lsn += 1;
                Step::Record(offset, r)
            }
            Parsed::Record(r) => Step::Bad {
                offset,
                reason: format!("LSN gap: expected {}, found {}", self.next_lsn, r.lsn),
                torn: false,
            },
            Parsed::End if all_zero(rest) => Step::End,
            Parsed::End => bad("non-zero bytes after the end-of-data marker"),
            Parsed::Bad(reason) => bad(reason),
        }
    }
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
fn last_non_zero(bytes: &[u8]) -> Option<usize> {
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

/// True if some offset `>= from` holds a CRC-valid record whose LSN is at least `min_lsn` (and
/// plausible: no more records than could fit). Cheap filters first, CRC last.
fn valid_record_after(bytes: &[u8], from: usize, min_lsn: Lsn) -> bool {
    let max_lsn = min_lsn.saturating_add((bytes.len() / RECORD_HEADER_BYTES) as u64);
    // A record's `len` field is not zero, so no record starts after the last non-zero byte:
    // the preallocated zero tail of a segment (most of it, usually) is skipped by block compares
    // instead of being searched offset by offset.
    let Some(last) = last_non_zero(bytes) else {
        return false;
    };
    let stop = (last + 1).min(bytes.len().saturating_sub(RECORD_HEADER_BYTES - 1));
    (from..stop).any(|p| {
        let h = &bytes[p..p + RECORD_HEADER_BYTES];
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let mut lsn = [0u8; 8];
        lsn.copy_from_slice(&h[8..16]);
        let lsn = u64::from_le_bytes(lsn);
        len >= RECORD_HEADER_BYTES
            && len <= bytes.len() - p
            && RecordKind::from_u8(h[16]).is_some()
            && (min_lsn..=max_lsn).contains(&lsn)
            && matches!(parse_record(&bytes[p..]), Parsed::Record(_))
    })
}

/// A finding of a directory scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The last segment ends with an incomplete or damaged record at `offset`, followed by
    /// nothing valid. Recovery zeroes it from `offset`.
    TornTail { segment: PathBuf, offset: u64 },
    /// Damage that is not a torn tail; startup must stop.
    Corrupt {
        segment: PathBuf,
        offset: u64,
        reason: String,
    },
}

/// What a directory scan found.
#[derive(Debug)]
pub(crate) struct DirScan {
    pub(crate) segments: Vec<(Lsn, PathBuf)>,
    pub(crate) records: u64,
    pub(crate) first_lsn: Option<Lsn>,
    pub(crate) next_lsn: Lsn,
    /// End of the last valid record in the last segment.
    pub(crate) last_end: u64,
    /// In the last segment: end of its last non-zero byte (what a torn tail scrub must zero).
    pub(crate) last_dirty_end: u64,
    pub(crate) finding: Option<Finding>,
}

fn map_segment(storage: &dyn Storage, path: &Path) -> Result<Contents, WalError> {
    storage.map(path).map_err(|e| WalError::io(path, e))
}

/// Scans every segment of `dir` in order, calling `visit` for each valid record; an `Err(reason)`
/// from `visit` is reported as corruption of that record. Stops at the first finding.
///
/// `promised` is the checkpoint's durable LSN (`Lsn::MAX` without a checkpoint): in the last
/// segment, damage at an LSN above it is a torn tail even when valid records follow, because
/// nothing there was ever synced: a power loss writes the unsynced pages of a file back in any
/// order, so the records of an unsynced batch can survive around a lost one. (Found by the
/// power-loss test, `tests/it/powerloss.rs`: such a log used to be refused as corrupt.)
pub(crate) fn scan_dir(
    storage: &dyn Storage,
    dir: &Path,
    promised: Lsn,
    visit: &mut dyn FnMut(&Path, u64, &RecordRef<'_>) -> Result<(), String>,
) -> Result<DirScan, WalError> {
    let segments = list_segments_in(storage, dir)?;
    let mut scan = DirScan {
        first_lsn: segments.first().map(|s| s.0),
        next_lsn: segments.first().map_or(1, |s| s.0),
        segments: Vec::new(),
        records: 0,
        last_end: 0,
        last_dirty_end: 0,
        finding: None,
    };
    let count = segments.len();
    for (i, (first, path)) in segments.iter().enumerate() {
        if *first != scan.next_lsn {
            let reason = format!(
                "LSN gap: segment starts at {first}, expected {}",
                scan.next_lsn
            );
            scan.finding = Some(Finding::Corrupt {
                segment: path.clone(),
                offset: 0,
                reason,
            });
            break;
        }
        let map = map_segment(storage, path)?;
        let bytes: &[u8] = &map;
        let mut sc = Scanner::new(*first);
        let finding = loop {
            match sc.step(bytes) {
                Step::Record(offset, r) => {
                    scan.records += 1;
                    if let Err(reason) = visit(path, offset, &r) {
                        break Some(Finding::Corrupt {
                            segment: path.clone(),
                            offset,
                            reason,
                        });
                    }
                }
                Step::End => break None,
                Step::Bad { offset, torn, .. }
                    if i + 1 == count && (torn || sc.next_lsn > promised) =>
                {
                    break Some(Finding::TornTail {
                        segment: path.clone(),
                        offset,
                    });
                }
                Step::Bad { offset, reason, .. } => {
                    break Some(Finding::Corrupt {
                        segment: path.clone(),
                        offset,
                        reason,
                    });
                }
            }
        };
        scan.segments.push((*first, path.clone()));
        scan.next_lsn = sc.next_lsn;
        scan.last_end = sc.pos as u64;
        if i + 1 == count {
            scan.last_dirty_end = last_non_zero(bytes).map_or(0, |p| p as u64 + 1);
        }
        if finding.is_some() {
            scan.finding = finding;
            break;
        }
    }
    Ok(scan)
}

/// What recovery found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments scanned.
    pub segments: usize,
    /// Valid records found.
    pub records: u64,
    /// LSN of the last valid record (0 if none ever); appends continue at `last_lsn + 1`.
    pub last_lsn: Lsn,
    /// The torn tail zeroed: segment and offset it was truncated at.
    pub truncated_tail: Option<(PathBuf, u64)>,
    /// LSN ranges the checkpoint promised and the log did not hold, accepted because
    /// [`WalConfig::accept_loss`] was set (empty otherwise: missing ranges fail the open).
    pub lost: Vec<LostRange>,
}

/// Name of the lock file in the WAL directory; held (`flock`) by the process that has the log
/// open for writing.
pub const LOCK_FILE: &str = "LOCK";

/// Opens the WAL in `cfg.dir` (creating it if absent): validates `cfg`, scans and verifies every
/// segment, zeroes a torn tail, and returns the log positioned after the last valid record.
pub fn open(cfg: &WalConfig) -> Result<(Wal, RecoveryReport), WalError> {
    open_in(Arc::new(StdFs), cfg)
}

/// [`open`] on `storage` (the power-loss tests and the fuzzer use the simulation).
pub fn open_in(
    storage: Arc<dyn Storage>,
    cfg: &WalConfig,
) -> Result<(Wal, RecoveryReport), WalError> {
    cfg.validate()?;
    let fs = &*storage;
    let dir = &cfg.dir;
    if !fs.is_dir(dir) {
        // The directories created here (the log's, and missing parents): each one's entry must
        // survive a power loss before the log promises anything in it, in either durability
        // mode (`Os` mode promises the records of a rolled segment).
        let mut created = Vec::new();
        let mut p = Some(dir.as_path());
        while let Some(d) = p.filter(|d| !d.as_os_str().is_empty() && !fs.is_dir(d)) {
            created.push(d);
            p = d.parent();
        }
        fs.create_dir_all(dir).map_err(|e| WalError::io(dir, e))?;
        for d in created.iter().rev() {
            if let Some(parent) = d.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs.sync_dir(parent).map_err(|e| WalError::io(parent, e))?;
            }
        }
    }
    let lock_path = dir.join(LOCK_FILE);
    let Some(lock) = fs
        .try_lock(&lock_path)
        .map_err(|e| WalError::io(&lock_path, e))?
    else {
        return Err(WalError::Locked { path: lock_path });
    };
    let promised = promised(fs, dir, cfg.accept_loss)?;
    let durable = promised.map_or(Lsn::MAX, |c| c.durable_lsn);
    let scan = scan_dir(fs, dir, durable, &mut |_, _, _| Ok(()))?;
    let mut truncated_tail = None;
    match &scan.finding {
        Some(Finding::Corrupt {
            segment,
            offset,
            reason,
        }) => {
            return Err(WalError::Corrupt {
                segment: segment.clone(),
                offset: *offset,
                reason: reason.clone(),
            })
        }
        Some(Finding::TornTail { segment, offset }) => {
            truncated_tail = Some((segment.clone(), *offset))
        }
        None => {}
    }
    let lost = match &promised {
        Some(c) => check_promise(dir, c, &scan, &truncated_tail, cfg.accept_loss)?,
        None => Vec::new(),
    };
    let next_lsn = match (scan.segments.is_empty(), &promised) {
        // Every segment is gone (loss accepted): LSNs continue after the promised ones.
        (true, Some(c)) => scan.next_lsn.max(c.durable_lsn + 1).max(c.first_live_lsn),
        _ => scan.next_lsn,
    };
    let (path, first_lsn, end, dirty_end) = match scan.segments.last() {
        Some((first, path)) => (path.clone(), *first, scan.last_end, scan.last_dirty_end),
        None => (segment_path(dir, next_lsn), next_lsn, 0, 0),
    };
    let io_err = |e| WalError::io(&path, e);
    let mut file = fs.open_segment(&path, cfg.write_path).map_err(io_err)?;
    let len = fs.len(&path).map_err(io_err)?;
    let capacity = len.max(cfg.segment_bytes);
    file.allocate(capacity).map_err(io_err)?;
    let active = Active {
        path: path.clone(),
        first_lsn,
        file,
        capacity,
        end,
        dirty_end,
        // Unknown: the tail may be unwritten extents (reads as zeros); written again from `end`.
        zeroed_end: end,
    };
    let mut wal = Wal::new(cfg, storage.clone(), active, next_lsn);
    wal.lock = Some(lock);
    if dirty_end > end {
        // A torn tail (or stray bytes): zero it now, so the report's promise holds on disk.
        wal.scrub().map_err(io_err)?;
    }
    // What the scan read may be in the page cache only (a crash before a sync, `Os` mode):
    // make it durable before the checkpoint promises it.
    wal.active.file.sync(0, end).map_err(io_err)?;
    fs.sync_dir(dir).map_err(|e| WalError::io(dir, e))?;
    let first_live_lsn = scan.segments.first().map_or(next_lsn, |s| s.0);
    let c = Checkpoint {
        first_live_lsn,
        durable_lsn: next_lsn - 1,
    };
    wal.checkpoint = Some(CheckpointFile::open_or_create(fs, dir, c, unix_millis())?);
    wal.lost_accepted = lost.clone();
    let report = RecoveryReport {
        segments: scan.segments.len(),
        records: scan.records,
        last_lsn: next_lsn - 1,
        truncated_tail,
        lost,
    };
    Ok((wal, report))
}

/// The checkpoint of `dir`, if it has one. A damaged one fails the open unless `accept_loss`
/// (then it is rebuilt from the segments, which is all that can be done).
fn promised(
    fs: &dyn Storage,
    dir: &Path,
    accept_loss: bool,
) -> Result<Option<Checkpoint>, WalError> {
    match checkpoint::read_in(fs, dir)? {
        None => Ok(None),
        Some(Ok(c)) => Ok(Some(c)),
        Some(Err(damaged)) if accept_loss => {
            eprintln!(
                "sluice: wal: {damaged}; rebuilding it from the segments (--accept-wal-loss)"
            );
            Ok(None)
        }
        Some(Err(damaged)) => Err(WalError::CheckpointDamaged(damaged)),
    }
}

/// Compares the scan with the checkpoint `c`: the missing ranges, accepted (logged, returned)
/// if `accept_loss`, else an error: [`WalError::Corrupt`] for a damaged record at or below the
/// checkpointed durable LSN (it is not a torn tail), [`WalError::Lost`] for missing files.
fn check_promise(
    dir: &Path,
    c: &Checkpoint,
    scan: &DirScan,
    torn: &Option<(PathBuf, u64)>,
    accept_loss: bool,
) -> Result<Vec<LostRange>, WalError> {
    let extent = Extent {
        first_segment_lsn: scan.segments.first().map(|s| s.0),
        next_lsn: scan.next_lsn,
        damaged_tail: torn.clone(),
    };
    let lost = checkpoint::missing(c, &extent);
    if lost.is_empty() {
        return Ok(lost);
    }
    if accept_loss {
        for r in &lost {
            eprintln!(
                "sluice: wal {}: ACCEPTING LOSS (--accept-wal-loss): {r}",
                dir.display()
            );
        }
        return Ok(lost);
    }
    match torn {
        Some((segment, offset)) if scan.next_lsn <= c.durable_lsn => Err(WalError::Corrupt {
            segment: segment.clone(),
            offset: *offset,
            reason: format!(
                "the record with LSN {} is damaged or incomplete, but the checkpoint records \
                 LSNs up to {} as durable: corruption, not a torn tail (LSNs {}..={} would be \
                 lost; --accept-wal-loss truncates there)",
                scan.next_lsn, c.durable_lsn, scan.next_lsn, c.durable_lsn
            ),
        }),
        _ => Err(WalError::Lost {
            dir: dir.to_owned(),
            ranges: lost,
        }),
    }
}

/// One record read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    pub lsn: Lsn,
    pub kind: RecordKind,
    pub payload: Vec<u8>,
    /// Byte offset of the record in its segment.
    pub offset: u64,
}

/// Iterates every record of a WAL directory in LSN order, verifying as it goes.
///
/// Yields `Err(WalError::Corrupt)` (and then ends) on damage; a torn tail of the last segment
/// simply ends the iteration. Reads through read-only maps, one segment at a time. A reader
/// running beside the writer must stop at [`super::WalShared::durable_lsn`].
#[derive(Debug)]
pub struct WalReader {
    storage: Arc<dyn Storage>,
    segments: Vec<(Lsn, PathBuf)>,
    /// Index of the mapped segment in `segments`.
    current: usize,
    map: Contents,
    scanner: Scanner,
    /// Records below this LSN are skipped.
    start_lsn: Lsn,
    done: bool,
}

impl WalReader {
    /// A reader over all records in the WAL directory `dir`.
    pub fn open(dir: &Path) -> Result<WalReader, WalError> {
        Self::open_from(dir, 0)
    }

    /// A reader starting at the first record with LSN `>= start_lsn` (earlier segments are not
    /// read).
    pub fn open_from(dir: &Path, start_lsn: Lsn) -> Result<WalReader, WalError> {
        Self::open_in(Arc::new(StdFs), dir, start_lsn)
    }

    /// [`WalReader::open_from`] on `storage`.
    pub fn open_in(
        storage: Arc<dyn Storage>,
        dir: &Path,
        start_lsn: Lsn,
    ) -> Result<WalReader, WalError> {
        let mut segments = list_segments_in(&*storage, dir)?;
        // Keep the last segment starting at or below start_lsn, and all after it.
        let skip = segments
            .iter()
            .rposition(|(first, _)| *first <= start_lsn)
            .unwrap_or(0);
        segments.drain(..skip);
        let mut r = WalReader {
            scanner: Scanner::new(segments.first().map_or(1, |s| s.0)),
            segments,
            current: 0,
            map: Contents::Empty,
            start_lsn,
            done: false,
            storage,
        };
        if !r.segments.is_empty() {
            r.map = map_segment(&*r.storage, &r.segments[0].1)?;
        }
        Ok(r)
    }

    /// The next event record (kind 1 or 5; other kinds are skipped), decoded; an undecodable
    /// payload is `Err(Corrupt)` at that record.
    pub fn next_event(&mut self) -> Option<Result<(Lsn, EventRecord), WalError>> {
        loop {
            match self.next_record()? {
                Ok((lsn, Record::Event(ev))) => return Some(Ok((lsn, ev))),
                Ok(_) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// The next record of any kind, decoded; an undecodable payload is `Err(Corrupt)` at that
    /// record.
    pub fn next_record(&mut self) -> Option<Result<(Lsn, Record), WalError>> {
        let rec = match self.next()? {
            Ok(rec) => rec,
            Err(e) => return Some(Err(e)),
        };
        match decode_payload(rec.kind, &rec.payload) {
            Ok(r) => Some(Ok((rec.lsn, r))),
            Err(e) => Some(Err(
                self.corrupt_error(rec.offset, format!("{:?} payload: {e}", rec.kind))
            )),
        }
    }

    /// The segment being read.
    pub fn current_segment(&self) -> Option<&Path> {
        self.segments.get(self.current).map(|s| s.1.as_path())
    }

    /// Ends the iteration with corruption at `offset` of the current segment.
    fn corrupt_error(&mut self, offset: u64, reason: String) -> WalError {
        self.done = true;
        let segment = self
            .current_segment()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        WalError::Corrupt {
            segment,
            offset,
            reason,
        }
    }

    /// Moves to the next segment; `None` when there is none.
    fn advance(&mut self) -> Option<Result<(), WalError>> {
        self.current += 1;
        let (first, path) = self.segments.get(self.current)?.clone();
        if first != self.scanner.next_lsn {
            let reason = format!(
                "LSN gap: segment starts at {first}, expected {}",
                self.scanner.next_lsn
            );
            return Some(Err(WalError::Corrupt {
                segment: path,
                offset: 0,
                reason,
            }));
        }
        self.scanner = Scanner::new(first);
        match map_segment(&*self.storage, &path) {
            Ok(map) => {
                self.map = map;
                Some(Ok(()))
            }
            Err(e) => Some(Err(e)),
        }
    }
}

impl Iterator for WalReader {
    type Item = Result<RawRecord, WalError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done && self.current < self.segments.len() {
            let last = self.current + 1 == self.segments.len();
            let bytes: &[u8] = &self.map;
            match self.scanner.step(bytes) {
                Step::Record(offset, r) if r.lsn >= self.start_lsn => {
                    let rec = RawRecord {
                        lsn: r.lsn,
                        kind: r.kind,
                        payload: r.payload.to_vec(),
                        offset,
                    };
                    return Some(Ok(rec));
                }
                Step::Record(..) => {}
                Step::Bad { torn: true, .. } if last => self.done = true,
                Step::Bad { offset, reason, .. } => {
                    return Some(Err(self.corrupt_error(offset, reason)))
                }
                Step::End => match self.advance() {
                    None => self.done = true,
                    Some(Ok(())) => {}
                    Some(Err(e)) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                },
            }
        }
        None
    }
}

#[cfg(test)]
#[path = "recovery_tests.rs"]
pub(crate) mod tests;
