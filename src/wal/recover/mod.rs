//! Recovery ([`open`]) and the segment scanner shared with the reader and the offline tools.
//!
//! The rules (torn final batch vs damage to acknowledged data, lost ranges, what
//! `--accept-wal-loss` writes) are stated in the `wal` module header; the decision itself is
//! [`crate::wal::recover::damage::classify`].
#![forbid(unsafe_code)]

use super::{Lsn, WalConfig, WalError};
use crate::storage::{Contents, StdFs, Storage};
use crate::sync::clock::unix_millis;
use crate::wal::append::{Active, Wal};
use crate::wal::checkpoint::{self, Checkpoint, CheckpointFile, Extent, LostRange};
use crate::wal::format::marker::{lost_span, LOST_RECORD_BYTES};
use crate::wal::format::RecordRef;
pub(crate) use crate::wal::recover::damage::last_non_zero;
use crate::wal::recover::damage::{classify, next_valid, Damage, Verdict};
use crate::wal::recover::scanner::{Scanner, Step};
use crate::wal::segment::{list_segments_in, segment_path};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A finding of a directory scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The last segment ends with an incomplete final batch at `offset` (a power cut during its
    /// write or sync: never acknowledged). Recovery zeroes it from `offset`.
    TornTail { segment: PathBuf, offset: u64 },
    /// Damage to data that may have been acknowledged, or that cannot be read past; startup
    /// must stop (with `--accept-wal-loss` the LSN ranges named are given up).
    Corrupt {
        segment: PathBuf,
        offset: u64,
        reason: String,
    },
}

/// LSNs that cannot be read, and how `--accept-wal-loss` records that they were given up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Loss {
    pub(crate) range: LostRange,
    /// The segment file to write the lost-range record into (created if missing), at `offset`;
    /// the bytes up to `resume` (`None`: the segment's end) are zeroed after it.
    pub(crate) segment: PathBuf,
    pub(crate) offset: u64,
    pub(crate) resume: Option<u64>,
    /// No segment holds the LSNs (a file deleted): a small segment of that name holding only
    /// the record is created, or, when that name is the previous segment's (it held none of
    /// them), the record is written in it at `offset`, where its scan ended.
    pub(crate) missing_file: bool,
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
    /// Length of the last segment scanned (a segment file is preallocated whole: one whose
    /// file ends where its records do was cut short).
    pub(crate) last_len: u64,
    /// In the last segment: end of its last non-zero byte (what a torn tail scrub must zero).
    pub(crate) last_dirty_end: u64,
    /// The first finding: a torn tail (the scan ended there), or corruption (the scan ended
    /// there, unless it skipped damage: then it is the first of `losses`).
    pub(crate) finding: Option<Finding>,
    /// Damage skipped ([`ScanOpts::skip_damage`]) and missing segment files, in LSN order.
    pub(crate) losses: Vec<Loss>,
    /// Lost ranges accepted earlier (lost-range records read).
    pub(crate) accepted: Vec<(Lsn, Lsn)>,
    /// The last commit marker's sequence number (0: none).
    pub(crate) last_batch_seq: u64,
    /// The scan stopped before the end of the log (a record `visit` refused, or overlapping
    /// segments): what follows was not read.
    pub(crate) stopped: bool,
    /// The last segment ends with records no commit marker closes (a torn final batch whose
    /// marker did not reach the disk, or records written before markers existed): their
    /// offset and first LSN. Recovery seals them with a marker before writing after them.
    pub(crate) unsealed: Option<(u64, Lsn)>,
}

/// How [`scan_dir`] reads a log.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ScanOpts {
    /// The checkpoint's durable LSN (`None`: no checkpoint).
    pub(crate) promised: Option<Lsn>,
    /// Go on past damage to acknowledged data and past missing segment files, recording each
    /// in [`DirScan::losses`] (a torn tail still ends the scan).
    pub(crate) skip_damage: bool,
}

fn map_segment(storage: &dyn Storage, path: &Path) -> Result<Contents, WalError> {
    storage.map(path).map_err(|e| WalError::io(path, e))
}

/// Scans every segment of `dir` in order, calling `visit` for each valid record; an `Err(reason)`
/// from `visit` is reported as corruption of that record (and always ends the scan).
pub(crate) fn scan_dir(
    storage: &dyn Storage,
    dir: &Path,
    opts: ScanOpts,
    visit: &mut dyn FnMut(&Path, u64, &RecordRef<'_>) -> Result<(), String>,
) -> Result<DirScan, WalError> {
    let segments = list_segments_in(storage, dir)?;
    let mut scan = DirScan {
        first_lsn: segments.first().map(|s| s.0),
        next_lsn: segments.first().map_or(1, |s| s.0),
        segments: Vec::new(),
        records: 0,
        last_end: 0,
        last_len: 0,
        last_dirty_end: 0,
        finding: None,
        losses: Vec::new(),
        accepted: Vec::new(),
        last_batch_seq: 0,
        stopped: false,
        unsealed: None,
    };
    let mut ordered = None;
    let count = segments.len();
    for (i, (first, path)) in segments.iter().enumerate() {
        if *first != scan.next_lsn && !segment_gap(&mut scan, path, *first) {
            break;
        }
        let map = map_segment(storage, path)?;
        let seg = SegmentScan {
            bytes: &map,
            path,
            last: i + 1 == count,
            next_first: segments.get(i + 1).map(|s| s.0),
        };
        let stop = seg.run(&mut scan, opts, &mut ordered, visit);
        scan.last_len = map.len() as u64;
        scan.segments.push((*first, path.clone()));
        if seg.last {
            scan.last_dirty_end = last_non_zero(seg.bytes).map_or(0, |p| p as u64 + 1);
        }
        if stop {
            break;
        }
    }
    Ok(scan)
}

/// The next segment is named `first`, not the expected LSN: segment files are missing (a
/// [`Loss`]) or overlap (corruption). Returns whether the scan goes on.
fn segment_gap(scan: &mut DirScan, path: &Path, first: Lsn) -> bool {
    let expected = scan.next_lsn;
    if first < expected {
        let reason = format!("LSN gap: segment starts at {first}, expected {expected}");
        set_finding(scan, path, 0, reason);
        scan.stopped = true;
        return false;
    }
    let own = segment_path(path.parent().unwrap_or(Path::new("")), expected);
    // The file named for `expected` is the previous segment when it held none of those LSNs
    // (only lost-range records or framing): the record recording the loss goes where its scan
    // ended (zeros from there on), not over its start.
    let (why, segment, offset) = match scan.segments.last() {
        Some((prev, prev_path)) if *prev == expected => (
            format!(
                "no segment holds them ({} ends before LSN {expected}; the next segment starts \
                 at LSN {first})",
                prev_path.display()
            ),
            prev_path.clone(),
            scan.last_end,
        ),
        // The previous segment's file ends where its records do: it was cut short (a segment
        // is preallocated whole), no file is missing.
        Some((_, prev_path)) if scan.last_len == scan.last_end => (
            format!(
                "no segment holds them ({} was truncated: its file ends at byte {} after LSN \
                 {}; the next segment starts at LSN {first})",
                prev_path.display(),
                scan.last_end,
                expected - 1
            ),
            prev_path.clone(),
            scan.last_end,
        ),
        _ => (
            format!(
                "no segment holds them (the segment file {} was deleted; the next segment \
                 starts at LSN {first})",
                own.display()
            ),
            own,
            0,
        ),
    };
    let range = LostRange {
        first: expected,
        last: first - 1,
        why,
    };
    scan.losses.push(Loss {
        range,
        segment,
        offset,
        resume: None,
        missing_file: true,
    });
    scan.next_lsn = first;
    true
}

fn set_finding(scan: &mut DirScan, segment: &Path, offset: u64, reason: String) {
    if scan.finding.is_none() {
        scan.finding = Some(Finding::Corrupt {
            segment: segment.to_owned(),
            offset,
            reason,
        });
    }
}

/// One segment of a [`scan_dir`].
struct SegmentScan<'a> {
    bytes: &'a [u8],
    path: &'a Path,
    last: bool,
    /// First LSN of the next segment, if any.
    next_first: Option<Lsn>,
}

impl SegmentScan<'_> {
    /// Scans the segment into `scan`; `ordered` is the last commit marker's flag, carried from
    /// segment to segment. Returns whether the directory scan stops here.
    fn run(
        &self,
        scan: &mut DirScan,
        opts: ScanOpts,
        ordered: &mut Option<bool>,
        visit: &mut dyn FnMut(&Path, u64, &RecordRef<'_>) -> Result<(), String>,
    ) -> bool {
        let mut sc = Scanner::new(scan.next_lsn);
        let stop = loop {
            let step = sc.step(self.bytes);
            if let Some(m) = sc.last_marker {
                *ordered = Some(m.ordered);
                scan.last_batch_seq = m.batch_seq;
            }
            match step {
                Step::Record(offset, r) => {
                    scan.records += 1;
                    if let Err(reason) = visit(self.path, offset, &r) {
                        set_finding(scan, self.path, offset, reason);
                        scan.stopped = true;
                        break true;
                    }
                }
                Step::Gap { first, last, .. } => scan.accepted.push((first, last)),
                Step::End => break false,
                Step::Bad { offset, reason } => {
                    match self.damaged(scan, opts, *ordered, &sc, offset, reason) {
                        Some(resumed) => sc = resumed,
                        None => break true,
                    }
                    if sc.pos >= self.bytes.len() {
                        break false;
                    }
                }
            }
        };
        scan.next_lsn = sc.next_lsn;
        scan.last_end = sc.pos as u64;
        scan.unsealed = match sc.batch_start {
            Some(s) if self.last && s < sc.pos && sc.batch_first < sc.next_lsn => {
                Some((s as u64, sc.batch_first))
            }
            _ => None,
        };
        stop
    }

    /// Damage at `offset`: a torn tail (the scan ends), or damage to acknowledged data —
    /// recorded, and, when skipping damage, the scanner to continue with.
    fn damaged(
        &self,
        scan: &mut DirScan,
        opts: ScanOpts,
        ordered: Option<bool>,
        sc: &Scanner,
        offset: u64,
        reason: String,
    ) -> Option<Scanner> {
        let damage = Damage {
            bytes: self.bytes,
            offset: offset as usize,
            lsn: sc.next_lsn,
            batch_start: sc.batch_start,
            ordered,
            promised: opts.promised,
            last_segment: self.last,
        };
        let why = match classify(&damage) {
            Verdict::Torn => {
                scan.finding.get_or_insert(Finding::TornTail {
                    segment: self.path.to_owned(),
                    offset,
                });
                return None;
            }
            Verdict::Acked(why) => why,
        };
        let (resume, last) = self.resume_after(offset as usize, sc.next_lsn, opts.promised);
        let range = LostRange {
            first: sc.next_lsn,
            last,
            why: format!(
                "the record with LSN {} at offset {offset} of {} is damaged ({reason}): {why}",
                sc.next_lsn,
                self.path.display()
            ),
        };
        let message = format!("{reason}; {why}; {}", range_words(&range));
        set_finding(scan, self.path, offset, message);
        scan.losses.push(Loss {
            range,
            segment: self.path.to_owned(),
            offset,
            resume: resume.map(|(p, _)| p as u64),
            missing_file: false,
        });
        if !opts.skip_damage {
            return None;
        }
        let next = match resume {
            Some((p, lsn)) => Scanner::resume_at(p, lsn, None),
            None => Scanner::resume_at(self.bytes.len(), last + 1, None),
        };
        Some(next)
    }

    /// Where a scan may continue past damage at `offset` (expected LSN `lsn`): the first valid
    /// record at least a lost-range record's length further on (so one can be written over the
    /// damage) and its LSN, and the last LSN given up. Without one, the rest of the segment is
    /// given up: up to the next segment's first LSN, or (last segment) the checkpoint's durable
    /// LSN or at least `lsn`.
    fn resume_after(
        &self,
        offset: usize,
        lsn: Lsn,
        promised: Option<Lsn>,
    ) -> (Option<(usize, Lsn)>, Lsn) {
        match next_valid(self.bytes, offset + LOST_RECORD_BYTES, lsn) {
            Some((p, r)) => (Some((p, r.lsn)), r.lsn - 1),
            None => {
                let last = match self.next_first {
                    // Up to the next segment's first LSN; nothing when it is `lsn` itself (the
                    // damage is in framing only, say a rolled segment's last commit marker).
                    Some(f) => f.saturating_sub(1).max(lsn - 1),
                    None => promised.unwrap_or(0).max(lsn),
                };
                (None, last)
            }
        }
    }
}

/// "LSNs a..=b cannot be read" (or "no record is lost" for damaged framing only).
fn range_words(r: &LostRange) -> String {
    if r.last < r.first {
        "no record is lost (only framing bytes are damaged)".to_owned()
    } else {
        format!(
            "LSNs {}..={} cannot be read; --accept-wal-loss gives them up and keeps every record \
             after them",
            r.first, r.last
        )
    }
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
    /// The torn final batch zeroed: segment and offset it was truncated at.
    pub truncated_tail: Option<(PathBuf, u64)>,
    /// What that truncation dropped, counted and kept (`torn`).
    pub torn: Option<torn::TornTail>,
    /// LSN ranges given up at this start because [`WalConfig::accept_loss`] was set: damaged
    /// records, missing segment files, ranges the checkpoint promised (empty otherwise: each
    /// of those fails the open).
    pub lost: Vec<LostRange>,
    /// With a loss accepted: the LSNs above the recovered end (and above [`Self::lost`]) up to
    /// the high-water reservation, skipped so that none that may have been handed out is
    /// handed out again (`wal::high_water`). They may never have been.
    pub skipped: Option<LostRange>,
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
    create_dirs(fs, dir)?;
    let lock_path = dir.join(LOCK_FILE);
    let Some(lock) = fs
        .try_lock(&lock_path)
        .map_err(|e| WalError::io(&lock_path, e))?
    else {
        return Err(WalError::Locked { path: lock_path });
    };
    let found = high_water::read(fs, dir, cfg.accept_loss)?;
    let checkpoint = promised(fs, dir, cfg.accept_loss)?;
    let (promised, from_copy) = high_water::promise(dir, checkpoint, &found, cfg.accept_loss)?;
    let retired = crate::wal::retire::retired::load_at_open(fs, dir, cfg.accept_loss)?;
    let (scan, mut lost) = scan_accepting(fs, dir, promised, cfg.accept_loss)?;
    let truncated_tail = match &scan.finding {
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
        Some(Finding::TornTail { segment, offset }) => Some((segment.clone(), *offset)),
        None => None,
    };
    if let Some(c) = &promised {
        lost.extend(check_promise(
            dir,
            c,
            &scan,
            &truncated_tail,
            cfg.accept_loss,
        )?);
    }
    let next_lsn = match (scan.segments.is_empty(), &promised) {
        // Every segment is gone (loss accepted): LSNs continue after the promised ones.
        (true, Some(c)) => scan.next_lsn.max(c.durable_lsn + 1).max(c.first_live_lsn),
        _ => scan.next_lsn,
    };
    let torn = match &truncated_tail {
        Some((segment, offset)) => Some(keep_torn(fs, dir, &scan, segment, *offset)?),
        None => None,
    };
    let mut wal = attach(storage.clone(), cfg, &scan, next_lsn)?;
    wal.lock = Some(lock);
    // A loss accepted: the log continues above every LSN it may have handed out. (A torn
    // final batch is a power cut's: never acknowledged, its LSNs continue; `damage`.)
    let accepted = !lost.is_empty() || from_copy || found.damaged_given_up;
    let skipped = high_water::continue_above(fs, &mut wal, &found, accepted, &lost)?;
    wal.torn = torn::load(fs, dir).map_err(|e| WalError::io(dir, e))?;
    wal.lost_accepted = lost.clone();
    wal.lost_beyond = skipped.clone();
    wal.unranged_losses = u64::from(found.damaged_given_up);
    wal.retired = retired;
    let report = RecoveryReport {
        segments: scan.segments.len(),
        records: scan.records,
        last_lsn: wal.last_lsn(),
        truncated_tail,
        torn,
        lost,
        skipped,
    };
    Ok((wal, report))
}

/// Copies the torn tail of `segment` (from `offset` to its last non-zero byte) to the log's
/// quarantine and records it, before `attach` zeroes it (`torn`); logs it at error level.
fn keep_torn(
    fs: &dyn Storage,
    dir: &Path,
    scan: &DirScan,
    segment: &Path,
    offset: u64,
) -> Result<torn::TornTail, WalError> {
    let io_err = |e| WalError::io(segment, e);
    let bytes = fs.map(segment).map_err(io_err)?;
    let from = (offset as usize).min(bytes.len());
    let end = (scan.last_dirty_end as usize).clamp(from, bytes.len());
    let t = torn::quarantine(
        fs,
        dir,
        segment,
        offset,
        &bytes[from..end],
        scan.next_lsn,
        unix_millis(),
    )
    .map_err(|e| WalError::io(&dir.join(torn::QUARANTINE_DIR), e))?;
    eprintln!("sluice: wal {}: ERROR: {t}", dir.display());
    Ok(t)
}

/// Prepares the empty log directory `dir` (created if missing) to begin at LSN `first`: its
/// checkpoint promises nothing below it (`first_live_lsn = first`, `durable_lsn = first - 1`),
/// so [`open`] continues there, as after retention retired every segment below `first`. For a
/// log rebuilt from a replication stream that dropped its retired records
/// (`replication::restore`). `first <= 1` only creates the directory.
pub fn begin_at(dir: &Path, first: Lsn) -> Result<(), WalError> {
    let fs = StdFs;
    create_dirs(&fs, dir)?;
    if first > 1 {
        let c = Checkpoint {
            first_live_lsn: first,
            durable_lsn: first - 1,
        };
        drop(CheckpointFile::open_or_create(&fs, dir, c, unix_millis())?);
    }
    Ok(())
}

/// Creates `dir` and missing parents, each one's entry synced before the log promises anything
/// in it (in either durability mode: `Os` mode promises the records of a rolled segment). An
/// error names `dir` (the entry that failed may be one of its parents).
fn create_dirs(fs: &dyn Storage, dir: &Path) -> Result<(), WalError> {
    crate::storage::create_dir_all_durably(fs, dir).map_err(|e| WalError::io(dir, e))
}

/// Scans `dir`; damage to acknowledged data and missing segment files fail the open unless
/// `accept_loss`, which gives them up ([`give_up`]) and scans again. Returns the scan and the
/// ranges given up.
fn scan_accepting(
    fs: &dyn Storage,
    dir: &Path,
    promised: Option<Checkpoint>,
    accept_loss: bool,
) -> Result<(DirScan, Vec<LostRange>), WalError> {
    let opts = ScanOpts {
        promised: promised.map(|c| c.durable_lsn),
        skip_damage: true,
    };
    let scan = scan_dir(fs, dir, opts, &mut |_, _, _| Ok(()))?;
    if scan.losses.is_empty() {
        return Ok((scan, Vec::new()));
    }
    if !accept_loss {
        return Err(loss_error(dir, &scan));
    }
    let mut lost = Vec::new();
    for loss in &scan.losses {
        eprintln!(
            "sluice: wal {}: ACCEPTING LOSS (--accept-wal-loss): {}",
            dir.display(),
            loss.range
        );
        give_up(fs, loss)?;
        lost.push(loss.range.clone());
    }
    fs.sync_dir(dir).map_err(|e| WalError::io(dir, e))?;
    let scan = scan_dir(fs, dir, opts, &mut |_, _, _| Ok(()))?;
    if !scan.losses.is_empty() {
        return Err(loss_error(dir, &scan));
    }
    Ok((scan, lost))
}

/// The open's refusal for `scan.losses`: [`WalError::Corrupt`] naming the first damaged record
/// (and every range), or [`WalError::Lost`] when only segment files are missing.
fn loss_error(dir: &Path, scan: &DirScan) -> WalError {
    let ranges: Vec<LostRange> = scan.losses.iter().map(|l| l.range.clone()).collect();
    match scan.losses.iter().find(|l| !l.missing_file) {
        Some(first) => {
            let mut reason = match &scan.finding {
                Some(Finding::Corrupt { reason, .. }) => reason.clone(),
                _ => first.range.why.clone(),
            };
            for r in ranges.iter().filter(|r| **r != first.range) {
                reason.push_str(&format!("; also {r}"));
            }
            WalError::Corrupt {
                segment: first.segment.clone(),
                offset: first.offset,
                reason,
            }
        }
        None => WalError::Lost {
            dir: dir.to_owned(),
            ranges,
        },
    }
}

/// Records that `loss` is given up, in the log itself: lost-range records written over the
/// damaged bytes (up to where the scan resumes; to the end of the written bytes when nothing
/// follows), or, for a missing segment file, a small segment of that name holding only one.
/// Synced before returning.
fn give_up(fs: &dyn Storage, loss: &Loss) -> Result<(), WalError> {
    let path = &loss.segment;
    let io_err = |e| WalError::io(path, e);
    let end = match (loss.resume, loss.missing_file) {
        (Some(r), _) => r,
        (None, true) => loss.offset + LOST_RECORD_BYTES as u64,
        (None, false) => {
            let map = map_segment(fs, path)?;
            let written = last_non_zero(&map).map_or(0, |p| p as u64 + 1);
            written.max(loss.offset + LOST_RECORD_BYTES as u64)
        }
    };
    let span = (end - loss.offset) as usize;
    let mut buf = Vec::with_capacity(span);
    match loss.resume {
        Some(_) => lost_span(&mut buf, loss.range.first, loss.range.last, span),
        None => {
            lost_span(
                &mut buf,
                loss.range.first,
                loss.range.last,
                LOST_RECORD_BYTES,
            );
            buf.resize(span, 0);
        }
    }
    let mut file = fs
        .open_segment(path, crate::storage::WritePath::Pwrite)
        .map_err(io_err)?;
    file.write_at(loss.offset, &buf).map_err(io_err)?;
    file.sync(loss.offset, span as u64).map_err(io_err)
}

/// The appender positioned after the scan: the last segment (or a new one) opened and
/// preallocated, a torn tail zeroed, what the scan read synced, the checkpoint written.
fn attach(
    storage: Arc<dyn Storage>,
    cfg: &WalConfig,
    scan: &DirScan,
    next_lsn: Lsn,
) -> Result<Wal, WalError> {
    let (fs, dir) = (&*storage, &cfg.dir);
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
    wal.batch_seq = scan.last_batch_seq + 1;
    if dirty_end > end {
        // A torn tail (or stray bytes): zero it now, so the report's promise holds on disk.
        wal.scrub().map_err(io_err)?;
    }
    if let Some((from, first)) = scan.unsealed {
        wal.seal_recovered(from, first).map_err(io_err)?;
    }
    // What the scan read may be in the page cache only (a crash before a sync, `Os` mode):
    // make it durable before the checkpoint promises it.
    let end = wal.active.end;
    wal.active.file.sync(0, end).map_err(io_err)?;
    fs.sync_dir(dir).map_err(|e| WalError::io(dir, e))?;
    let first_live_lsn = scan.segments.first().map_or(next_lsn, |s| s.0);
    let c = Checkpoint {
        first_live_lsn,
        durable_lsn: next_lsn - 1,
    };
    wal.checkpoint = Some(CheckpointFile::open_or_create(fs, dir, c, unix_millis())?);
    Ok(wal)
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

/// Compares the scan with the checkpoint `c`: the ranges it promises that no segment holds
/// (the oldest segments deleted, the newest truncated or deleted), accepted (logged, returned)
/// if `accept_loss`, else [`WalError::Lost`].
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
    Err(WalError::Lost {
        dir: dir.to_owned(),
        ranges: lost,
    })
}

pub(crate) mod damage;
mod high_water;
pub(super) mod scanner;
pub mod state;
#[cfg(test)]
pub(crate) mod tests;
pub mod torn;
