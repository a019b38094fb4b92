//! [`WalReader`]: iterates a log's records in LSN order, offline (through read-only maps),
//! verifying as it goes with the recovery scanner and the recovery decision.
#![forbid(unsafe_code)]

use crate::storage::{Contents, StdFs, Storage};
use crate::wal::checkpoint::{self, LostRange};
use crate::wal::format::marker::LOST_RECORD_BYTES;
use crate::wal::format::{decode_payload, EventRecord, Record, RecordKind};
use crate::wal::recover::damage::{classify, next_valid, Damage, Verdict};
use crate::wal::recover::scanner::{Scanner, Step};
use crate::wal::segment::list_segments_in;
use crate::wal::{Lsn, WalError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn map_segment(storage: &dyn Storage, path: &Path) -> Result<Contents, WalError> {
    storage.map(path).map_err(|e| WalError::io(path, e))
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
/// Yields `Err(WalError::Corrupt)` (and then ends) on damage to acknowledged data (the recovery
/// decision, `wal::damage`, with the log's checkpoint); a torn final batch simply ends the
/// iteration; ranges given up earlier (lost-range records) are passed over. A reader made
/// [`WalReader::skipping`] goes on past damage and missing segment files instead, collecting
/// what it passed ([`WalReader::skipped`]). Reads through read-only maps, one segment at a time. A reader
/// running beside the writer must stop at [`crate::wal::WalShared::durable_lsn`].
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
    /// The checkpoint's durable LSN, for the recovery decision.
    promised: Option<Lsn>,
    /// The last commit marker's ORDERED flag (carried across segments).
    ordered: Option<bool>,
    /// Go on past damage ([`WalReader::skipping`]), collecting it here.
    skip: bool,
    skipped: Vec<LostRange>,
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
            promised: match checkpoint::read_in(&*storage, dir)? {
                Some(Ok(c)) => Some(c.durable_lsn),
                _ => None,
            },
            ordered: None,
            skip: false,
            skipped: Vec::new(),
            storage,
        };
        if !r.segments.is_empty() {
            r.map = map_segment(&*r.storage, &r.segments[0].1)?;
        }
        Ok(r)
    }

    /// A reader starting at the record at byte `pos` of the segment whose first LSN is
    /// `segment`, a record boundary that carries LSN `lsn` (found by a seek:
    /// `events_seek`). The batch that record is in is not checked against its commit marker, as
    /// after skipped damage; every record from there on is. If `dir` holds no segment starting
    /// at `segment`, this is [`WalReader::open_from`]`(dir, lsn)`.
    pub(crate) fn open_at(
        dir: &Path,
        segment: Lsn,
        pos: usize,
        lsn: Lsn,
    ) -> Result<WalReader, WalError> {
        let mut r = Self::open_from(dir, lsn)?;
        if pos > 0 && r.segments.first().map(|s| s.0) == Some(segment) {
            r.scanner = Scanner::resume_at(pos, lsn, None);
        }
        Ok(r)
    }

    /// The next event record (kind 1, 5, 9 or 10; other kinds are skipped), decoded; an
    /// undecodable payload is `Err(Corrupt)` at that record.
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
        if self.skip && first > self.scanner.next_lsn {
            self.skipped.push(LostRange {
                first: self.scanner.next_lsn,
                last: first - 1,
                why: format!(
                    "no segment holds them (the next segment is {})",
                    path.display()
                ),
            });
        } else if first != self.scanner.next_lsn {
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

impl WalReader {
    /// This reader, going on past damage to acknowledged data and missing segment files (for
    /// `wal inspect`: list what is readable); what it passed is in [`WalReader::skipped`].
    pub fn skipping(mut self) -> Self {
        self.skip = true;
        self
    }

    /// The ranges a [`WalReader::skipping`] reader passed over.
    pub fn skipped(&self) -> &[LostRange] {
        &self.skipped
    }

    /// Damage at `offset` of the current segment: `Ok(true)` to go on (skipping past it),
    /// `Ok(false)` at a torn tail, `Err` when it is damage to acknowledged data.
    fn damaged(&mut self, offset: u64, reason: String) -> Result<bool, WalError> {
        let last = self.current + 1 == self.segments.len();
        let bytes: &[u8] = &self.map;
        let damage = Damage {
            bytes,
            offset: offset as usize,
            lsn: self.scanner.next_lsn,
            batch_start: self.scanner.batch_start,
            ordered: self.ordered,
            promised: self.promised,
            last_segment: last,
        };
        let why = match classify(&damage) {
            Verdict::Torn => return Ok(false),
            Verdict::Acked(why) => why,
        };
        if !self.skip {
            return Err(self.corrupt_error(offset, format!("{reason}; {why}")));
        }
        let lsn = self.scanner.next_lsn;
        let resume = next_valid(bytes, offset as usize + LOST_RECORD_BYTES, lsn);
        let (next, last_lsn) = match resume {
            Some((p, r)) => (Scanner::resume_at(p, r.lsn, None), r.lsn - 1),
            None => (Scanner::resume_at(bytes.len(), lsn, None), lsn),
        };
        self.skipped.push(LostRange {
            first: lsn,
            last: last_lsn,
            why: format!("damaged at offset {offset} ({reason}): {why}"),
        });
        self.scanner = next;
        Ok(true)
    }
}

impl Iterator for WalReader {
    type Item = Result<RawRecord, WalError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done && self.current < self.segments.len() {
            let bytes: &[u8] = &self.map;
            let step = self.scanner.step(bytes);
            if let Some(m) = self.scanner.last_marker {
                self.ordered = Some(m.ordered);
            }
            match step {
                Step::Record(offset, r) if r.lsn >= self.start_lsn => {
                    let rec = RawRecord {
                        lsn: r.lsn,
                        kind: r.kind,
                        payload: r.payload.to_vec(),
                        offset,
                    };
                    return Some(Ok(rec));
                }
                Step::Record(..) | Step::Gap { .. } => {}
                Step::Bad { offset, reason } => match self.damaged(offset, reason) {
                    Ok(true) => {}
                    Ok(false) => self.done = true,
                    Err(e) => return Some(Err(e)),
                },
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
