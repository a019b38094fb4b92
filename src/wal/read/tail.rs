//! [`WalTail`]: follows the log while the writer appends to it (the pump's reader).
//!
//! Reads with `pread` ([`FileExt::read_at`]), not a map: the active segment is being written
//! while we read, and only bytes below the published durable LSN are looked at. The writer never
//! rewrites those (it scrubs and writes only past the last committed record), so a record at or
//! below the durable LSN is complete and final: the tail never sees a torn or partial record,
//! and any mismatch there (bad length, CRC, LSN) is corruption, not a race.
//!
//! Commit markers are passed over (they carry no LSN of their own); a lost-range record written
//! by `--accept-wal-loss` moves the expected LSN past the range it gave up.
//!
//! Segment rollover: a zero `len` field (or the end of the file) where the record of LSN `n`
//! should start means it is the first record of the segment named `n`. The writer creates,
//! preallocates and writes that segment before it publishes a durable LSN `>= n`.
//!
//! Read-ahead: each `pread` fetches a window of [`READ_AHEAD_MIN`]..=[`READ_AHEAD`] bytes
//! (adapting to how much of the last one was used), and following
//! records are parsed from the window without another system call. The window remembers the
//! durable LSN at the time it was read; a record is taken from it only if its LSN is at or below
//! that mark (its bytes were final when read), otherwise the window is read again. So read-ahead
//! past the durable frontier is harmless: those bytes are never trusted.
//!
//! Memory: the window (at most [`READ_AHEAD`], or one [`MAX_RECORD_BYTES`] record; shrunk
//! back to [`READ_BUF_KEEP`] after a large one) plus the decoded record handed to the caller.
#![forbid(unsafe_code)]

use crate::wal::format::marker::parse_lost;
use crate::wal::format::{
    decode_payload, parse_record, Parsed, Record, RecordKind, RECORD_HEADER_BYTES,
};
use crate::wal::segment::{list_segments, segment_path};
use crate::wal::{Lsn, WalError, MAX_RECORD_BYTES};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Read-buffer capacity kept between records; a larger one is released after use.
pub const READ_BUF_KEEP: usize = 1 << 20;
/// Most bytes fetched per `pread` (while catching up on a backlog).
pub const READ_AHEAD: usize = 256 * 1024;
/// Fewest bytes fetched per `pread` (at the durable frontier, where little is new each time).
pub const READ_AHEAD_MIN: usize = 4 * 1024;

/// The segment being read.
#[derive(Debug)]
struct Segment {
    path: PathBuf,
    file: File,
}

/// A reader that returns records in LSN order up to a durable LSN the caller supplies.
#[derive(Debug)]
pub struct WalTail {
    dir: PathBuf,
    segment: Option<Segment>,
    /// Offset of the record `next_lsn` in `segment`.
    pos: u64,
    /// LSN of the record at `pos`.
    next_lsn: Lsn,
    /// Records below this LSN are skipped (by header, without being read whole).
    from_lsn: Lsn,
    /// Read-ahead window: bytes of the current segment from file offset `win_start`.
    buf: Vec<u8>,
    win_start: u64,
    /// The durable LSN when the window was read: records up to it are final in the window.
    win_durable: Lsn,
    /// Size of the next read: doubles while whole windows are consumed (catching up), shrinks to
    /// twice what was used when reads come back mostly unused (at the frontier, where reading
    /// far ahead would only copy the segment's preallocated zeros).
    ahead: usize,
}

impl WalTail {
    /// A tail of the WAL directory `wal_dir` starting at the first record with LSN `>= from_lsn`.
    /// If the log starts above `from_lsn` (earlier segments were deleted by retention), it starts
    /// at the log's first record.
    pub fn open(wal_dir: &Path, from_lsn: Lsn) -> Result<WalTail, WalError> {
        let mut tail = WalTail {
            dir: wal_dir.to_owned(),
            segment: None,
            pos: 0,
            next_lsn: from_lsn.max(1),
            from_lsn,
            buf: Vec::new(),
            win_start: 0,
            win_durable: 0,
            ahead: READ_AHEAD_MIN,
        };
        tail.locate()?;
        Ok(tail)
    }

    /// LSN of the next record [`WalTail::next`] will return.
    pub fn next_lsn(&self) -> Lsn {
        self.next_lsn
    }

    /// Skips forward: the records below `lsn` are passed over by their headers, as those below
    /// the LSN [`WalTail::open`] was given (never backwards: a tail past `lsn` stays where it
    /// is, and the caller opens a new one).
    pub fn skip_to(&mut self, lsn: Lsn) {
        self.from_lsn = self.from_lsn.max(lsn);
    }

    /// The next record if its LSN is `<= durable_lsn`; `Ok(None)` when caught up (call again
    /// once the durable LSN moved). `Err(Corrupt)` on damage below the durable LSN.
    pub fn next(&mut self, durable_lsn: Lsn) -> Result<Option<(Lsn, Record)>, WalError> {
        loop {
            if self.next_lsn > durable_lsn {
                return Ok(None);
            }
            if self.segment.is_none() {
                self.locate()?;
            }
            let Some((len, kind)) = self.header(durable_lsn)? else {
                self.roll()?;
                continue;
            };
            if kind == RecordKind::Marker as u8 {
                // A commit marker: framing, no LSN of its own (its batch's CRCs were checked
                // record by record).
                self.pos += len as u64;
                continue;
            }
            if kind == RecordKind::Lost as u8 {
                self.next_lsn = self.lost_range_end(len, durable_lsn)? + 1;
                self.pos += len as u64;
                continue;
            }
            if self.next_lsn < self.from_lsn {
                self.pos += len as u64;
                self.next_lsn += 1;
                continue;
            }
            let rec = self.read_record(len, durable_lsn)?;
            self.pos += len as u64;
            self.next_lsn += 1;
            return Ok(Some(rec));
        }
    }

    /// Opens the segment holding `next_lsn` (the last one whose first LSN is `<=` it), at its
    /// start; with no segment yet, stays unopened.
    fn locate(&mut self) -> Result<(), WalError> {
        let segments = list_segments(&self.dir)?;
        let found = segments
            .iter()
            .rev()
            .find(|(first, _)| *first <= self.next_lsn)
            .or(segments.first());
        if let Some((first, path)) = found {
            self.segment = Some(open_segment(path)?);
            self.pos = 0;
            self.next_lsn = *first;
            self.buf.clear();
        }
        Ok(())
    }

    /// Moves to the segment named `next_lsn`, which must exist (the record is durable).
    fn roll(&mut self) -> Result<(), WalError> {
        let path = segment_path(&self.dir, self.next_lsn);
        if !path.exists() {
            let reason = format!(
                "durable record {} is neither here nor in a segment {}",
                self.next_lsn,
                path.display()
            );
            return Err(self.corrupt(reason));
        }
        self.segment = Some(open_segment(&path)?);
        self.pos = 0;
        self.buf.clear();
        Ok(())
    }

    /// The last LSN given up by the lost-range record of `len` bytes at `pos`.
    fn lost_range_end(&mut self, len: usize, durable: Lsn) -> Result<Lsn, WalError> {
        let n = self.window(len, durable)?.len();
        if n < len {
            return Err(self.corrupt("record extends past the end of the segment"));
        }
        let off = (self.pos - self.win_start) as usize;
        match parse_record(&self.buf[off..off + len]) {
            Parsed::Record(r) => parse_lost(r.lsn, r.payload)
                .ok_or_else(|| self.corrupt("invalid lost-range record")),
            Parsed::Bad(reason) => Err(self.corrupt(reason)),
            Parsed::End => Err(self.corrupt("record vanished")),
        }
    }

    /// Reads and checks the header at `pos`: `Some((len, kind))` for a record, `None` at the
    /// end of the segment's data.
    fn header(&mut self, durable: Lsn) -> Result<Option<(usize, u8)>, WalError> {
        let view = self.window(RECORD_HEADER_BYTES, durable)?;
        let n = view.len();
        let mut h = [0u8; RECORD_HEADER_BYTES];
        h[..n].copy_from_slice(view);
        let len = if n >= 4 {
            u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize
        } else {
            0
        };
        if len == 0 {
            return Ok(None);
        }
        if n < RECORD_HEADER_BYTES || !(RECORD_HEADER_BYTES..=MAX_RECORD_BYTES).contains(&len) {
            return Err(self.corrupt(format!("bad record length {len}")));
        }
        let mut lsn = [0u8; 8];
        lsn.copy_from_slice(&h[8..16]);
        let lsn = u64::from_le_bytes(lsn);
        if lsn != self.next_lsn {
            let reason = format!("LSN gap: expected {}, found {lsn}", self.next_lsn);
            return Err(self.corrupt(reason));
        }
        Ok(Some((len, h[16])))
    }

    fn read_record(&mut self, len: usize, durable: Lsn) -> Result<(Lsn, Record), WalError> {
        let n = self.window(len, durable)?.len();
        if n < len {
            return Err(self.corrupt("record extends past the end of the segment"));
        }
        let off = (self.pos - self.win_start) as usize;
        let result = match parse_record(&self.buf[off..off + len]) {
            Parsed::Record(r) => decode_payload(r.kind, r.payload)
                .map(|rec| (r.lsn, rec))
                .map_err(|e| format!("{:?} payload: {e}", r.kind)),
            Parsed::Bad(reason) => Err(reason.to_string()),
            Parsed::End => Err("record vanished".to_string()),
        };
        result.map_err(|reason| self.corrupt(reason))
    }

    /// The bytes `[pos, pos + len)` of the segment (shorter at its end), from the window if it
    /// holds them *and* was read when the record at `pos` was already durable; otherwise the
    /// window is read again from `pos` (its size adapts, see `ahead`).
    fn window(&mut self, len: usize, durable: Lsn) -> Result<&[u8], WalError> {
        let end = self.win_start + self.buf.len() as u64;
        let fresh = self.next_lsn <= self.win_durable;
        if !(fresh && self.pos >= self.win_start && self.pos + len as u64 <= end) {
            if !self.buf.is_empty() {
                let used = self.pos.saturating_sub(self.win_start) as usize;
                self.ahead = if used * 2 >= self.ahead {
                    (self.ahead * 2).min(READ_AHEAD)
                } else {
                    (used * 2).clamp(READ_AHEAD_MIN, READ_AHEAD)
                };
            }
            let want = len.max(self.ahead);
            if self.buf.capacity() > READ_BUF_KEEP.max(want) {
                self.buf = Vec::new();
            }
            let mut buf = std::mem::take(&mut self.buf);
            buf.clear();
            buf.resize(want, 0);
            let read = self.read_at(&mut buf);
            let n = match read {
                Ok(n) => n,
                Err(e) => {
                    self.buf = Vec::new();
                    return Err(e);
                }
            };
            buf.truncate(n);
            self.buf = buf;
            self.win_start = self.pos;
            self.win_durable = durable;
        }
        let off = (self.pos - self.win_start) as usize;
        let avail = self.buf.len() - off;
        Ok(&self.buf[off..off + len.min(avail)])
    }

    /// Fills `buf` from `pos` as far as the file goes; returns the bytes read.
    fn read_at(&self, buf: &mut [u8]) -> Result<usize, WalError> {
        let Some(seg) = &self.segment else {
            return Ok(0);
        };
        let mut done = 0;
        while done < buf.len() {
            match seg.file.read_at(&mut buf[done..], self.pos + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(WalError::io(&seg.path, e)),
            }
        }
        Ok(done)
    }

    fn corrupt(&self, reason: impl Into<String>) -> WalError {
        WalError::Corrupt {
            segment: self
                .segment
                .as_ref()
                .map(|s| s.path.clone())
                .unwrap_or_else(|| self.dir.clone()),
            offset: self.pos,
            reason: reason.into(),
        }
    }
}

fn open_segment(path: &Path) -> Result<Segment, WalError> {
    let file = File::open(path).map_err(|e| WalError::io(path, e))?;
    Ok(Segment {
        path: path.to_owned(),
        file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::append::writer::tests::Harness;
    use crate::wal::format::tests::{sample_event, sample_records};
    use crate::wal::recover::tests::test_cfg;
    use crate::wal::{open, AppendOutcome, Durability, EventRecord, WalConfig, WritePath};
    use std::time::{Duration, Instant};

    /// 1 MiB segments, bodies up to 64 KiB: a few dozen events per segment.
    fn small_cfg(dir: &Path) -> WalConfig {
        WalConfig {
            segment_bytes: 1 << 20,
            max_body_bytes: 64 * 1024,
            ..test_cfg(dir, WritePath::Pwrite)
        }
    }

    fn event(i: u64) -> EventRecord {
        sample_event(i, 1000 + (i as usize * 7919) % 60_000)
    }

    fn drain(tail: &mut WalTail, durable: Lsn) -> Vec<(Lsn, Record)> {
        std::iter::from_fn(|| tail.next(durable).unwrap()).collect()
    }

    #[test]
    fn tail_follows_a_writer_thread_across_rollovers() {
        for path in [WritePath::Pwrite, WritePath::Mmap] {
            let tmp = tempfile::tempdir().unwrap();
            let cfg = WalConfig {
                write_path: path,
                durability: Durability::Fsync,
                ..small_cfg(tmp.path())
            };
            let (wal, _) = open(&cfg).unwrap();
            let mut h = Harness::start(wal, 1);
            let shared = h.shared.clone();
            let dir = cfg.dir.clone();
            const N: u64 = 300;
            let reader = std::thread::spawn(move || {
                let mut tail = WalTail::open(&dir, 1).unwrap();
                let mut got = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(60);
                while (got.len() as u64) < N {
                    assert!(Instant::now() < deadline, "tail stalled at {}", got.len());
                    let durable = shared.durable_lsn();
                    match tail.next(durable).unwrap() {
                        Some((lsn, rec)) => {
                            assert!(lsn <= durable);
                            got.push((lsn, rec));
                        }
                        None => std::thread::sleep(Duration::from_micros(200)),
                    }
                }
                assert_eq!(tail.next(shared.durable_lsn()).unwrap(), None, "caught up");
                got
            });
            for i in 0..N {
                h.push_record(0, i, Record::Event(event(i)));
                if i % 16 == 15 || i == N - 1 {
                    h.flush();
                }
                if i % 16 == 0 {
                    std::thread::sleep(Duration::from_millis(1)); // let the tail catch up now and then
                }
            }
            let got = reader.join().unwrap();
            assert!(h
                .wait_for(N as usize)
                .iter()
                .all(|c| matches!(c.2, AppendOutcome::Durable { .. })));
            h.finish();
            let segments = list_segments(&cfg.dir).unwrap().len();
            assert!(segments >= 5, "{segments} segments: no rollover exercised");
            for (i, (lsn, rec)) in got.into_iter().enumerate() {
                assert_eq!(lsn, i as Lsn + 1, "{path:?}");
                assert_eq!(rec, Record::Event(event(i as u64)), "{path:?}");
            }
        }
    }

    #[test]
    fn tail_from_a_middle_lsn_of_every_kind_and_bounded_by_durable() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = small_cfg(tmp.path());
        let (mut wal, _) = open(&cfg).unwrap();
        let mut all = Vec::new();
        for i in 0..60 {
            all.push(Record::Event(event(i)));
            all.extend(sample_records(i));
        }
        let last = wal.append(&all).unwrap();
        assert_eq!(last, all.len() as Lsn);
        assert!(list_segments(&cfg.dir).unwrap().len() >= 2);
        for from in [0, 1, 2, 37, 150, last - 1, last, last + 1] {
            let mut tail = WalTail::open(&cfg.dir, from).unwrap();
            let got = drain(&mut tail, last);
            let start = from.max(1);
            assert_eq!(
                got.len() as u64,
                (last + 1).saturating_sub(start),
                "from {from}"
            );
            for (lsn, rec) in got {
                assert_eq!(rec, all[lsn as usize - 1], "from {from} lsn {lsn}");
            }
        }
        // Only up to the durable LSN given; then resumes.
        let mut tail = WalTail::open(&cfg.dir, 1).unwrap();
        assert_eq!(drain(&mut tail, 10).len(), 10);
        assert_eq!(tail.next(10).unwrap(), None);
        assert_eq!(tail.next_lsn(), 11);
        assert_eq!(drain(&mut tail, last).len() as u64, last - 10);
        // Appends after the tail caught up are picked up, in a new segment too.
        let more: Vec<_> = (0..40).map(|i| Record::Event(event(1000 + i))).collect();
        let new_last = wal.append(&more).unwrap();
        let got = drain(&mut tail, new_last);
        assert_eq!(got.len(), 40);
        assert_eq!(got[39], (new_last, more[39].clone()));
    }

    #[test]
    fn damage_below_the_durable_lsn_is_corruption() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = small_cfg(tmp.path());
        let (mut wal, _) = open(&cfg).unwrap();
        let evs: Vec<_> = (0..5).map(event).collect();
        wal.append_events(&evs).unwrap();
        drop(wal);
        let seg = segment_path(&cfg.dir, 1);
        let mut tail = WalTail::open(&cfg.dir, 1).unwrap();
        let (_, first) = tail.next(5).unwrap().unwrap();
        assert_eq!(first, Record::Event(evs[0].clone()));
        let off = tail.pos;
        let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        f.write_all_at(&[0xAB], off + 40).unwrap();
        // Bytes below the durable LSN are final, so a tail trusts what it already read ahead;
        // a fresh tail reads the damage.
        let mut tail = WalTail::open(&cfg.dir, 1).unwrap();
        assert_eq!(
            tail.next(5).unwrap().unwrap().1,
            Record::Event(evs[0].clone())
        );
        match tail.next(5) {
            Err(WalError::Corrupt {
                segment, offset, ..
            }) => {
                assert_eq!((segment, offset), (seg.clone(), off))
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
        // A durable LSN past the log's end: the missing segment is reported, not waited for.
        let mut tail = WalTail::open(&cfg.dir, 1).unwrap();
        tail.next(1).unwrap();
        f.write_all_at(&[0; 17], tail.pos).unwrap();
        let mut tail = WalTail::open(&cfg.dir, 1).unwrap();
        tail.next(1).unwrap();
        assert!(matches!(tail.next(2), Err(WalError::Corrupt { .. })));
    }
}
