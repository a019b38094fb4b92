//! Torn tails counted, named and kept (issue 40, item 2). When recovery truncates a log's final
//! batch as torn (`damage::classify`, rule 4 or 5), it cannot always tell a batch a power cut
//! tore before its sync returned (never acknowledged) from a synced batch damaged afterwards
//! (acknowledged): a whole sector of zeros reads the same. So before the bytes are zeroed it:
//!
//! - copies them to `DIR/quarantine/<ms>-<segment>-<offset>.torn` (at most [`KEEP_BYTES`] of
//!   them; the [`KEEP_FILES`] newest such files are kept, older ones deleted), written durably;
//! - counts what they held ([`census`]): the LSN range from the first LSN the log lacks to the
//!   last one the dropped bytes name — exact when the batch's commit marker survived, else "at
//!   least" — and the events among its readable records;
//! - appends a line to `DIR/quarantine/TORN` (JSON, one [`TornTail`] per truncation, written
//!   durably; at most [`KEEP_LINES`] lines, the oldest folded into one summary line so the totals
//!   stay whole), which `wal verify` reports afterwards and from which the log's counters
//!   `sluice_wal_torn_tail_truncations_total` / `sluice_wal_torn_tail_lsns_total` are loaded
//!   at every start (over the log's life);
//! - logs it at error level: `sluice: wal DIR: ERROR: torn tail truncated: …`.
#![forbid(unsafe_code)]

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::storage::{create_dir_all_durably, replace_file_durably, Storage};
use crate::wal::format::marker::parse_marker;
use crate::wal::format::{parse_record, Parsed, RecordKind, RECORD_HEADER_BYTES};
use crate::wal::Lsn;

/// The log directory's sub-directory holding torn tails' bytes and the `TORN` record.
pub const QUARANTINE_DIR: &str = "quarantine";
/// The record of every truncation, in [`QUARANTINE_DIR`].
pub const TORN_FILE: &str = "TORN";
/// Bytes of one torn tail kept (a final batch is at most 4 MiB plus one record).
pub const KEEP_BYTES: usize = 8 << 20;
/// Quarantined tails kept per log (the newest).
pub const KEEP_FILES: usize = 8;
/// Lines of the `TORN` record kept; older ones are folded into the first.
pub const KEEP_LINES: usize = 1_000;

/// One truncation, as `TORN` records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TornTail {
    /// Unix ms of the recovery that truncated it.
    pub at_ms: u64,
    /// The segment's file name and the byte it was truncated at.
    pub segment: String,
    pub offset: u64,
    /// LSNs dropped: `first_lsn..=last_lsn`; `exact` false: at least these (the batch's
    /// marker was not readable, the range ends at the last LSN a readable record names).
    pub first_lsn: Lsn,
    pub last_lsn: Lsn,
    pub exact: bool,
    /// Readable records among the dropped bytes, and the events among them.
    pub records: u64,
    pub events: u64,
    /// Bytes dropped, and the file under `quarantine/` holding the first `kept_bytes` of them
    /// (empty: not kept, see `kept_error`).
    pub bytes: u64,
    pub kept: String,
    pub kept_bytes: u64,
    /// Truncations folded into this line (the oldest, past `KEEP_LINES`); 0 for one.
    #[serde(default)]
    pub folded: u64,
}

impl TornTail {
    /// LSNs in the dropped range.
    pub fn lsns(&self) -> u64 {
        self.last_lsn.saturating_sub(self.first_lsn) + 1
    }
}

impl std::fmt::Display for TornTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.folded > 0 {
            return write!(
                f,
                "{} earlier torn tails: {} LSNs, {} events dropped",
                self.folded,
                self.lsns(),
                self.events
            );
        }
        let least = if self.exact { "" } else { "at least " };
        write!(
            f,
            "torn tail truncated at unix ms {}: {least}LSNs {}..={} dropped from {} at byte {} \
             ({} bytes; {} of those records readable, {} events among them)",
            self.at_ms,
            self.first_lsn,
            self.last_lsn,
            self.segment,
            self.offset,
            self.bytes,
            self.records,
            self.events
        )?;
        if self.kept.is_empty() {
            write!(f, ", not kept")
        } else {
            write!(
                f,
                ", {} bytes kept in {QUARANTINE_DIR}/{}",
                self.kept_bytes, self.kept
            )
        }
    }
}

/// What the dropped bytes held: `(last LSN, exact, readable records, events)`. Every offset is
/// tried as a record start (the bytes are damaged: records may be unreadable anywhere), so a
/// record is counted when its header and CRC hold and its LSN is in range.
pub(crate) fn census(bytes: &[u8], first_lsn: Lsn) -> (Lsn, bool, u64, u64) {
    let (mut last, mut records, mut events) = (first_lsn, 0u64, 0u64);
    let mut pos = 0;
    while pos + RECORD_HEADER_BYTES <= bytes.len() {
        let Parsed::Record(r) = parse_record(&bytes[pos..]) else {
            pos += 1;
            continue;
        };
        if r.kind == RecordKind::Marker {
            if let Some(m) = parse_marker(r.lsn, r.payload) {
                // The batch's marker (the truncation may keep the batch's valid prefix).
                if m.first_lsn <= first_lsn && m.next_lsn > first_lsn {
                    return (m.next_lsn - 1, true, records, events);
                }
            }
        } else if r.lsn >= first_lsn && r.lsn < first_lsn.saturating_add(1 << 32) {
            records += 1;
            events += u64::from(r.kind.is_event());
            last = last.max(r.lsn);
        }
        pos += r.len;
    }
    (last, false, records, events)
}

/// Keeps the torn tail `dropped` of the segment `segment` (truncated at `offset`, first missing
/// LSN `first_lsn`) in `dir`'s quarantine and records it (module docs). A failure to keep the
/// bytes is logged and recorded (`kept` empty), not fatal: the truncation goes on, counted.
pub(crate) fn quarantine(
    fs: &dyn Storage,
    dir: &Path,
    segment: &Path,
    offset: u64,
    dropped: &[u8],
    first_lsn: Lsn,
    at_ms: u64,
) -> io::Result<TornTail> {
    let (last_lsn, exact, records, events) = census(dropped, first_lsn);
    let name = segment
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut torn = TornTail {
        at_ms,
        segment: name.clone(),
        offset,
        first_lsn,
        last_lsn,
        exact,
        records,
        events,
        bytes: dropped.len() as u64,
        kept: String::new(),
        kept_bytes: 0,
        folded: 0,
    };
    let qdir = dir.join(QUARANTINE_DIR);
    create_dir_all_durably(fs, &qdir)?;
    let kept = &dropped[..dropped.len().min(KEEP_BYTES)];
    let file = format!("{at_ms:020}-{name}-{offset}.torn");
    match replace_file_durably(fs, &qdir.join(&file), kept) {
        Ok(()) => {
            torn.kept = file;
            torn.kept_bytes = kept.len() as u64;
            prune(fs, &qdir)?;
        }
        Err(e) => eprintln!(
            "sluice: wal {}: the torn tail's bytes could not be kept: {e}",
            dir.display()
        ),
    }
    let mut all = load(fs, dir)?;
    all.push(torn.clone());
    fold(&mut all);
    let mut text = String::new();
    for t in &all {
        text.push_str(&serde_json::to_string(t).map_err(io::Error::other)?);
        text.push('\n');
    }
    replace_file_durably(fs, &qdir.join(TORN_FILE), text.as_bytes())?;
    Ok(torn)
}

/// Deletes all but the [`KEEP_FILES`] newest quarantined tails (names start with their time).
fn prune(fs: &dyn Storage, qdir: &Path) -> io::Result<()> {
    let mut files: Vec<String> = (fs.list(qdir)?.into_iter())
        .filter(|n| n.ends_with(".torn"))
        .collect();
    files.sort();
    let extra = files.len().saturating_sub(KEEP_FILES);
    for f in &files[..extra] {
        fs.remove(&qdir.join(f))?;
    }
    if extra > 0 {
        fs.sync_dir(qdir)?;
    }
    Ok(())
}

/// Folds the oldest lines of `all` into its first, past [`KEEP_LINES`].
fn fold(all: &mut Vec<TornTail>) {
    if all.len() <= KEEP_LINES {
        return;
    }
    let n = all.len() - KEEP_LINES + 1;
    let old: Vec<TornTail> = all.drain(..n).collect();
    let lsns: u64 = old.iter().map(TornTail::lsns).sum();
    let summary = TornTail {
        at_ms: old.last().map_or(0, |t| t.at_ms),
        segment: String::new(),
        offset: 0,
        first_lsn: 1,
        last_lsn: lsns,
        exact: false,
        records: old.iter().map(|t| t.records).sum(),
        events: old.iter().map(|t| t.events).sum(),
        bytes: old.iter().map(|t| t.bytes).sum(),
        kept: String::new(),
        kept_bytes: 0,
        folded: old.iter().map(|t| t.folded.max(1)).sum(),
    };
    all.insert(0, summary);
}

/// Every truncation `dir`'s `TORN` record holds (none without one). A line that does not parse
/// is an error naming the file and the line.
pub fn load(fs: &dyn Storage, dir: &Path) -> io::Result<Vec<TornTail>> {
    let path = dir.join(QUARANTINE_DIR).join(TORN_FILE);
    if !fs.is_dir(&dir.join(QUARANTINE_DIR)) || fs.len(&path).is_err() {
        return Ok(Vec::new());
    }
    let bytes = fs.read(&path)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\0');
        if line.trim().is_empty() {
            continue;
        }
        let t = serde_json::from_str(line).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} line {}: {e}", path.display(), i + 1),
            )
        })?;
        out.push(t);
    }
    Ok(out)
}

/// `(truncations, LSNs)` over `torn`, folded lines counted as what they fold.
pub fn totals(torn: &[TornTail]) -> (u64, u64) {
    let n = torn.iter().map(|t| t.folded.max(1)).sum();
    (n, torn.iter().map(TornTail::lsns).sum())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StdFs;
    use crate::wal::format::marker::append_marker;
    use crate::wal::format::tests::sample_event;
    use crate::wal::format::{append_record, encode_event_into};

    /// A batch of `n` events from LSN `first`, with its marker.
    fn batch(first: Lsn, n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            let ev = sample_event(i, 100);
            append_record(&mut out, first + i, RecordKind::Event, |o| {
                encode_event_into(&ev, o)
            })
            .unwrap();
        }
        append_marker(&mut out, 0, 7, first, first + n, true);
        out
    }

    #[test]
    fn the_census_is_exact_with_the_marker_and_a_lower_bound_without() {
        let b = batch(40, 5);
        assert_eq!(census(&b, 40), (44, true, 5, 5));
        // A zeroed sector in the middle: the marker still names the range.
        let mut torn = b.clone();
        torn[100..100 + 200].fill(0);
        let (last, exact, records, events) = census(&torn, 40);
        assert_eq!((last, exact), (44, true));
        assert!(records < 5 && events < 5);
        // The marker gone too: what the readable records name.
        let marker_at = b.len() - crate::wal::format::marker::MARKER_RECORD_BYTES;
        let mut cut = torn.clone();
        cut[marker_at..].fill(0);
        let (last, exact, _, _) = census(&cut, 40);
        assert!(!exact && (40..=44).contains(&last), "{last}");
        assert_eq!(census(&[0u8; 64], 9), (9, false, 0, 0));
    }

    #[test]
    fn a_quarantined_tail_is_kept_recorded_and_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let seg = dir.join("00000000000000000040.seg");
        for i in 0..KEEP_FILES as u64 + 2 {
            let t = quarantine(&StdFs, dir, &seg, 512, &batch(40, 3), 40, 1_000 + i).unwrap();
            assert_eq!(
                (t.first_lsn, t.last_lsn, t.exact, t.events),
                (40, 42, true, 3)
            );
            assert!(t.to_string().contains("LSNs 40..=42 dropped"), "{t}");
            assert!(
                t.to_string()
                    .contains("3 of those records readable, 3 events"),
                "{t}"
            );
        }
        let torn = load(&StdFs, dir).unwrap();
        assert_eq!(torn.len(), KEEP_FILES + 2);
        assert_eq!(
            totals(&torn),
            (KEEP_FILES as u64 + 2, 3 * (KEEP_FILES as u64 + 2))
        );
        let files = StdFs.list(&dir.join(QUARANTINE_DIR)).unwrap();
        assert_eq!(
            files.iter().filter(|f| f.ends_with(".torn")).count(),
            KEEP_FILES
        );
        let last = &torn[torn.len() - 1];
        let kept = std::fs::read(dir.join(QUARANTINE_DIR).join(&last.kept)).unwrap();
        assert_eq!(kept, batch(40, 3));
        // A damaged record line is an error naming it.
        std::fs::write(dir.join(QUARANTINE_DIR).join(TORN_FILE), b"{\"at_ms\":1}\n").unwrap();
        let e = load(&StdFs, dir).unwrap_err().to_string();
        assert!(e.contains("TORN line 1"), "{e}");
    }

    #[test]
    fn past_the_line_bound_the_oldest_fold_and_the_totals_stay_whole() {
        let one = |i: u64| TornTail {
            at_ms: i,
            segment: "s".into(),
            offset: 0,
            first_lsn: 10,
            last_lsn: 11,
            exact: true,
            records: 2,
            events: 2,
            bytes: 9,
            kept: String::new(),
            kept_bytes: 0,
            folded: 0,
        };
        let mut all: Vec<TornTail> = (0..KEEP_LINES as u64 + 5).map(one).collect();
        let before = totals(&all);
        fold(&mut all);
        assert_eq!(all.len(), KEEP_LINES);
        assert_eq!(totals(&all), before);
        assert_eq!(all[0].folded, 6);
        fold(&mut all);
        assert_eq!(totals(&all), before);
    }
}
