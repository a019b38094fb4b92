//! The DLQ's batch files: one immutable file per group commit of dead letters.
//!
//! # Names in `DATA_DIR/dlq/`
//!
//! | name | what |
//! |---|---|
//! | `B-<seq>.dlq` | a batch file; `seq` 16 lowercase hex digits, from one counter per directory (the next is one above the highest found at open) |
//! | `B-<seq>.dlq.tmp` | a batch being written (deleted at the server's start) |
//! | `<ID>.gone` | a tombstone, empty: every version of entry `ID` in the batch files is removed |
//! | `<ID>` | an entry file of the one-file-per-entry layout written before this format (read, listed, replayed and removed as before; never written) |
//! | `<ID>.tmp` | a legacy entry being written (deleted at the server's start) |
//!
//! # Batch file format
//!
//! ```text
//! offset  size  field
//!      0     8  magic  "SLDLQB01"
//!      8     4  count  u32 LE: entry records that follow
//!     12     4  crc    u32 LE: CRC32C over [0,12)
//!     16        count entry records, back to back, each exactly the legacy entry file's bytes
//!               (one WAL-framed record of kind DlqEntry: len, CRC32C, event LSN, kind, fields;
//!               `dispatch::dlq` module header); the file ends after the last one
//! ```
//!
//! A batch is written whole to `B-<seq>.dlq.tmp`, `fdatasync`ed, renamed to `B-<seq>.dlq`, and
//! the directory is `fsync`ed once for every file of the commit: two syncs per commit however
//! many entries it holds. A crash leaves either no batch or the whole batch (plus at most a
//! `.tmp`), so a torn batch is never read; damage found later is reported, never skipped.
//!
//! # Versions and tombstones
//!
//! An entry id may be stored more than once (the same event dead-lettered again after a crash
//! lost its `Done` record): the newest version counts — the highest `seq`, then the highest
//! offset; a legacy file is older than any batch. `<ID>.gone` removes every version, so a
//! tombstone needs no ordering against the batches; a later put of the same id deletes the
//! tombstone (after its batch is durable, before its outcome is reported).
#![forbid(unsafe_code)]

use crate::dispatch::dlq::entry::{valid_id, ID_LEN, MAX_DLQ_RECORD_BYTES};
use crate::wal::format::{record_crc, RECORD_HEADER_BYTES};

/// First bytes of every batch file.
pub const MAGIC: &[u8; 8] = b"SLDLQB01";
/// Bytes before the first record.
pub const HEADER_BYTES: usize = 16;
/// A commit's dead letters are split into files of at most this many bytes (a file holds at
/// least one entry, so one larger entry makes a file of its own size).
pub const MAX_BATCH_FILE_BYTES: usize = 4 * 1024 * 1024;
/// The largest batch file a reader accepts.
pub const MAX_FILE_BYTES: usize = HEADER_BYTES + MAX_BATCH_FILE_BYTES + MAX_DLQ_RECORD_BYTES;

const BATCH_PREFIX: &str = "B-";
const BATCH_SUFFIX: &str = ".dlq";
/// Suffix of a file being written (batch or legacy entry).
pub const TMP_SUFFIX: &str = ".tmp";
/// Suffix of a tombstone.
pub const GONE_SUFFIX: &str = ".gone";

/// `B-<seq>.dlq`.
pub fn batch_name(seq: u64) -> String {
    format!("{BATCH_PREFIX}{seq:016x}{BATCH_SUFFIX}")
}

/// `<ID>.gone`.
pub fn gone_name(id: &str) -> String {
    format!("{id}{GONE_SUFFIX}")
}

/// What a file name in the DLQ directory is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Name {
    Batch(u64),
    Legacy(String),
    Gone(String),
    Tmp,
    Other,
}

/// Classifies a directory entry's name.
pub fn classify(name: &str) -> Name {
    if name.ends_with(TMP_SUFFIX) {
        return Name::Tmp;
    }
    if let Some(id) = name.strip_suffix(GONE_SUFFIX) {
        return if valid_id(id) {
            Name::Gone(id.to_owned())
        } else {
            Name::Other
        };
    }
    if valid_id(name) {
        return Name::Legacy(name.to_owned());
    }
    let seq = name
        .strip_prefix(BATCH_PREFIX)
        .and_then(|s| s.strip_suffix(BATCH_SUFFIX))
        .filter(|h| h.len() == 16 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .and_then(|h| u64::from_str_radix(h, 16).ok());
    match seq {
        Some(seq) => Name::Batch(seq),
        None => Name::Other,
    }
}

/// The file header for `count` records.
pub fn header(count: u32) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&count.to_le_bytes());
    let crc = crc32c::crc32c(&h[..12]);
    h[12..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// One record found in a batch file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub id: String,
    pub offset: u64,
    pub len: u32,
    /// `Some(why)` when the record's frame is intact enough to name its entry but its CRC or
    /// fields are wrong: listed as unreadable under `id`.
    pub damage: Option<String>,
}

/// What [`scan`] found in one batch file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Scanned {
    pub records: Vec<Found>,
    /// Damage that names no entry (bad header, a record frame that cannot be followed, fewer
    /// records than the header says): its offset and what is wrong. Everything from there on
    /// is unreadable; the file is kept until an operator deletes it.
    pub tail: Option<(u64, String)>,
}

/// The id at its fixed place in an entry record (`u16` 26, then 26 bytes), if well formed.
fn peek_id(rec: &[u8]) -> Option<&str> {
    let at = RECORD_HEADER_BYTES;
    let n = rec.get(at..at + 2)?;
    if u16::from_le_bytes([n[0], n[1]]) as usize != ID_LEN {
        return None;
    }
    let id = std::str::from_utf8(rec.get(at + 2..at + 2 + ID_LEN)?).ok()?;
    valid_id(id).then_some(id)
}

/// Reads the records of a batch file's bytes. Never panics; damage is reported in the result.
/// `check` parses one whole record and returns its entry id, or why it is damaged.
pub fn scan(bytes: &[u8], check: impl Fn(&[u8]) -> Result<String, String>) -> Scanned {
    let mut out = Scanned::default();
    if bytes.len() < HEADER_BYTES || &bytes[..8] != MAGIC {
        out.tail = Some((0, "not a DLQ batch file (bad magic)".to_owned()));
        return out;
    }
    let crc = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
    if crc32c::crc32c(&bytes[..12]) != crc {
        out.tail = Some((0, "batch header CRC mismatch".to_owned()));
        return out;
    }
    let count = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
    let mut at = HEADER_BYTES;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let len = rest
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .filter(|&l| (RECORD_HEADER_BYTES..=MAX_DLQ_RECORD_BYTES).contains(&l))
            .filter(|&l| l <= rest.len());
        let Some(len) = len else {
            out.tail = Some((at as u64, "record frame length is not valid".to_owned()));
            return out;
        };
        let rec = &rest[..len];
        let (id, damage) = match check(rec) {
            Ok(id) => (id, None),
            Err(why) => match peek_id(rec) {
                Some(id) => (id.to_owned(), Some(why)),
                None => {
                    out.tail = Some((at as u64, format!("record names no entry: {why}")));
                    return out;
                }
            },
        };
        out.records.push(Found {
            id,
            offset: at as u64,
            len: len as u32,
            damage,
        });
        at += len;
    }
    if out.records.len() != count {
        let why = format!(
            "the header says {count} records, the file holds {}",
            out.records.len()
        );
        out.tail = Some((at as u64, why));
    }
    out
}

/// CRC check of a header built by [`header`] (used by tests to re-seal a file).
pub fn header_crc_ok(h: &[u8]) -> bool {
    h.len() >= HEADER_BYTES
        && crc32c::crc32c(&h[..12]) == u32::from_le_bytes([h[12], h[13], h[14], h[15]])
}

/// Recomputes a record's CRC in place (tests damage fields behind a valid CRC).
pub fn reseal_record(rec: &mut [u8]) {
    let crc = record_crc([rec[0], rec[1], rec[2], rec[3]], &rec[8..]);
    rec[4..8].copy_from_slice(&crc.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::dlq::entry::tests::sample_entry;
    use crate::dispatch::dlq::{check_record, encode_entry};

    fn file(n: u64) -> (Vec<u8>, Vec<String>) {
        let mut bytes = header(n as u32).to_vec();
        let mut ids = Vec::new();
        for i in 0..n {
            let e = sample_entry(i);
            bytes.extend(encode_entry(&e).unwrap());
            ids.push(e.id);
        }
        (bytes, ids)
    }

    #[test]
    fn names_round_trip_and_others_are_not_taken() {
        assert_eq!(batch_name(0xab), "B-00000000000000ab.dlq");
        assert_eq!(classify(&batch_name(u64::MAX)), Name::Batch(u64::MAX));
        let id = sample_entry(1).id;
        assert_eq!(classify(&id), Name::Legacy(id.clone()));
        assert_eq!(classify(&gone_name(&id)), Name::Gone(id.clone()));
        for other in [
            "B-00AB.dlq",
            "B-00000000000000AB.dlq",
            "x.gone",
            "README",
            "B-.dlq",
        ] {
            assert_eq!(classify(other), Name::Other, "{other}");
        }
        assert_eq!(classify("B-00000000000000ab.dlq.tmp"), Name::Tmp);
        assert_eq!(classify(&format!("{id}.tmp")), Name::Tmp);
    }

    #[test]
    fn a_whole_file_scans_clean() {
        let (bytes, ids) = file(3);
        let s = scan(&bytes, check_record);
        assert_eq!(s.tail, None);
        assert_eq!(
            s.records.iter().map(|f| &f.id).collect::<Vec<_>>(),
            ids.iter().collect::<Vec<_>>()
        );
        assert!(s.records.iter().all(|f| f.damage.is_none()));
        assert_eq!(s.records[0].offset, HEADER_BYTES as u64);
    }

    #[test]
    fn a_damaged_record_is_named_and_the_rest_still_read() {
        let (mut bytes, ids) = file(3);
        let second = scan(&bytes, check_record).records[1].clone();
        bytes[second.offset as usize + 60] ^= 1; // inside the body: CRC mismatch
        let s = scan(&bytes, check_record);
        assert_eq!(s.tail, None);
        assert_eq!(s.records.len(), 3);
        assert_eq!(s.records[1].id, ids[1]);
        assert!(
            s.records[1].damage.as_deref().unwrap().contains("CRC"),
            "{s:?}"
        );
        assert!(s.records[2].damage.is_none());
    }

    #[test]
    fn truncation_and_bad_headers_are_tails_never_panics() {
        let (bytes, _) = file(2);
        let s = scan(&bytes[..bytes.len() - 5], check_record);
        assert_eq!(s.records.len(), 1);
        assert!(s.tail.is_some());
        let s = scan(&bytes[..HEADER_BYTES], check_record);
        assert!(s.tail.unwrap().1.contains("header says 2"));
        let mut b = bytes.clone();
        b[9] ^= 1;
        assert_eq!(scan(&b, check_record).tail.unwrap().0, 0);
        assert_eq!(scan(b"", check_record).tail.unwrap().0, 0);
        let mut rng = crate::wal::format::tests::Rng(0xB47C);
        for _ in 0..2000 {
            let mut b = bytes.clone();
            let i = (rng.next() as usize) % b.len();
            b[i] = rng.next() as u8;
            let cut = (rng.next() as usize) % (b.len() + 1);
            let _ = scan(&b[..cut], check_record);
        }
        assert!(header_crc_ok(&header(7)));
    }
}
