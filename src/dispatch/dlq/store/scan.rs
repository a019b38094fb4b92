//! The DLQ store's directory functions: the scan that builds the index from the file names
//! and batch files, listing, existence, and reading a legacy entry file. Free functions over a
//! [`Storage`], so both the store ([`super`]) and its reading side (`read.rs`) call
//! them without importing each other.
#![forbid(unsafe_code)]

use std::io;
use std::path::Path;

use crate::dispatch::dlq::batch::{self as batch, Name};
use crate::dispatch::dlq::entry::{check_record, io_err, DlqError, MAX_DLQ_RECORD_BYTES};
use crate::dispatch::dlq::index::Index;
use crate::storage::Storage;
use crate::wal::format::RECORD_HEADER_BYTES;

/// How often [`scan_listed`] lists the directory again when a batch file vanished between its
/// listing and its read (another process compacted or deleted it meanwhile).
const RESCANS: usize = 4;

/// Indexes every file in `dir` (`names`). Never fails: a batch file that cannot be read is a
/// damaged tail at offset 0 (listed as unreadable), never skipped — except one that no longer
/// exists, which is gone, not damaged (a running server removed it after the listing).
pub(super) fn scan_dir(fs: &dyn Storage, dir: &Path, names: &[String]) -> Index {
    scan_names(fs, dir, names).0
}

/// Lists `dir` and indexes it, listing again (at most [`RESCANS`] more times) while a batch
/// file vanished between the listing and its read: the server writes a compacted batch before
/// it deletes the old one, so a fresh listing holds the entries the vanished file held. For
/// readers beside a running server (`sluice dlq list`).
pub(super) fn scan_listed(fs: &dyn Storage, dir: &Path) -> Result<Index, DlqError> {
    let mut attempt = 0;
    loop {
        let names = read_names(fs, dir)?;
        let (ix, vanished) = scan_names(fs, dir, &names);
        if !vanished || attempt == RESCANS {
            return Ok(ix);
        }
        attempt += 1;
    }
}

/// The index of `names`, and whether a batch file among them no longer exists.
fn scan_names(fs: &dyn Storage, dir: &Path, names: &[String]) -> (Index, bool) {
    let mut ix = Index::default();
    let mut vanished = false;
    for name in names {
        match batch::classify(name) {
            Name::Batch(seq) => {
                let path = dir.join(name);
                let (bytes, scanned) = match read_batch(fs, &path) {
                    Ok(bytes) => (bytes.len() as u64, batch::scan(&bytes, check_record)),
                    Err(Unread::Vanished) => {
                        vanished = true;
                        continue;
                    }
                    Err(Unread::Damaged(len, why)) => (
                        len,
                        batch::Scanned {
                            records: Vec::new(),
                            tail: Some((0, why)),
                        },
                    ),
                };
                ix.add_batch(seq, bytes, scanned.records, scanned.tail);
            }
            Name::Legacy(id) => {
                let len = fs.len(&dir.join(name)).unwrap_or(0);
                ix.add_legacy(id, len);
            }
            Name::Gone(id) => ix.add_gone(id),
            Name::Tmp | Name::Other => {}
        }
    }
    (ix, vanished)
}

/// Why a batch file's bytes were not read.
enum Unread {
    /// It no longer exists.
    Vanished,
    /// Its size, and why it cannot be read.
    Damaged(u64, String),
}

/// A batch file's bytes.
fn read_batch(fs: &dyn Storage, path: &Path) -> Result<Vec<u8>, Unread> {
    let fail = |len| {
        move |e: io::Error| match e.kind() {
            io::ErrorKind::NotFound => Unread::Vanished,
            _ => Unread::Damaged(len, e.to_string()),
        }
    };
    let len = fs.len(path).map_err(fail(0))?;
    if len > batch::MAX_FILE_BYTES as u64 {
        let why = format!("file of {len} bytes is larger than any batch");
        return Err(Unread::Damaged(len, why));
    }
    fs.read(path).map_err(fail(len))
}

/// The names in `dir` (names that are not UTF-8 are no file of ours and are left out).
pub(super) fn read_names(fs: &dyn Storage, dir: &Path) -> Result<Vec<String>, DlqError> {
    fs.list(dir).map_err(io_err(dir))
}

/// True if `path` names a file or directory (`Path::exists`: an error reads as absent).
pub(super) fn exists(fs: &dyn Storage, path: &Path) -> bool {
    fs.is_dir(path) || fs.len(path).is_ok()
}

/// A legacy entry file's bytes (length checked before reading).
pub(super) fn read_legacy(fs: &dyn Storage, path: &Path, id: &str) -> Result<Vec<u8>, DlqError> {
    let not_found = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => DlqError::NotFound { id: id.to_owned() },
        _ => io_err(path)(e),
    };
    let len = fs.len(path).map_err(not_found)?;
    if len > MAX_DLQ_RECORD_BYTES as u64 || len < RECORD_HEADER_BYTES as u64 {
        return Err(DlqError::Corrupt {
            path: path.to_owned(),
            reason: format!("file length {len} outside a valid entry's"),
        });
    }
    fs.read(path).map_err(not_found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_file_that_vanished_after_the_listing_is_gone_not_damaged() {
        let tmp = tempfile::tempdir().unwrap();
        let fs = crate::storage::std_fs();
        // One batch file that is there and unreadable as a batch, one the listing names and
        // another process deleted before it was read.
        std::fs::write(tmp.path().join(batch::batch_name(1)), b"not a batch").unwrap();
        let names = [batch::batch_name(1), batch::batch_name(2)];
        let (ix, vanished) = scan_names(&*fs, tmp.path(), &names);
        assert!(vanished);
        let tails = ix.tails();
        assert_eq!(tails.len(), 1, "{tails:?}");
        assert_eq!(
            tails[0].0, 1,
            "only the damaged file is reported: {tails:?}"
        );
        assert!(ix.batch(2).is_none());
        // A fresh listing no longer names it: nothing vanished, the damage is still reported.
        let ix = scan_listed(&*fs, tmp.path()).unwrap();
        assert_eq!(ix.tails().len(), 1);
        assert!(ix.is_empty());
    }
}
