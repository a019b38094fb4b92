//! The DLQ store's directory functions: the scan that builds the index from the file names
//! and batch files, listing, existence, and reading a legacy entry file. Free functions over a
//! [`Storage`], so both the store ([`super`]) and its reading side (`dlq_store_read.rs`) call
//! them without importing each other.
#![forbid(unsafe_code)]

use std::io;
use std::path::Path;

use crate::dispatch::dlq_batch::{self as batch, Name};
use crate::dispatch::dlq_entry::{check_record, io_err, DlqError, MAX_DLQ_RECORD_BYTES};
use crate::dispatch::dlq_index::Index;
use crate::storage::Storage;
use crate::wal::format::RECORD_HEADER_BYTES;

/// Indexes every file in `dir` (`names`). Never fails: a batch file that cannot be read is a
/// damaged tail at offset 0 (listed as unreadable), never skipped.
pub(super) fn scan_dir(fs: &dyn Storage, dir: &Path, names: &[String]) -> Index {
    let mut ix = Index::default();
    for name in names {
        match batch::classify(name) {
            Name::Batch(seq) => {
                let path = dir.join(name);
                let (bytes, scanned) = match read_batch(fs, &path) {
                    Ok(bytes) => (bytes.len() as u64, batch::scan(&bytes, check_record)),
                    Err((len, why)) => (
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
    ix
}

/// A batch file's bytes, or its size and why it cannot be read.
fn read_batch(fs: &dyn Storage, path: &Path) -> Result<Vec<u8>, (u64, String)> {
    let len = fs.len(path).map_err(|e| (0, e.to_string()))?;
    if len > batch::MAX_FILE_BYTES as u64 {
        return Err((len, format!("file of {len} bytes is larger than any batch")));
    }
    fs.read(path).map_err(|e| (len, e.to_string()))
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
