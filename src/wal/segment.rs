//! Segment files: naming and listing; the write paths behind [`SegmentFile`] are storage's
//! (`crate::storage::segment`, re-exported here).
//!
//! [`SegmentFile`] is the seam between the writer and the disk: the writer only calls
//! `write_at`, `sync` and `allocate`, so tests (and the storage-fault suite) can wrap the real
//! implementation and inject `ENOSPC`, `EIO` or short writes (see [`crate::wal::Wal::set_file_wrapper`]).
//! Segment files are opened through a [`Storage`] (`crate::storage`): the real file system or
//! the power-loss simulation.
#![forbid(unsafe_code)]

use super::{Lsn, WalError};
pub use crate::storage::segment::{MmapFile, PwriteFile};
pub use crate::storage::{SegmentFile, WritePath};
use crate::storage::{StdFs, Storage};
use std::io;
use std::path::{Path, PathBuf};

/// Digits in a segment file name: enough for any `u64`, so lexical order = numeric order.
const NAME_DIGITS: usize = 20;
const SUFFIX: &str = ".seg";

/// `DIR/00000000000000000001.seg` for a segment whose first record has LSN `first_lsn`.
pub fn segment_path(dir: &Path, first_lsn: Lsn) -> PathBuf {
    dir.join(format!("{first_lsn:0NAME_DIGITS$}{SUFFIX}"))
}

/// The first LSN encoded in a segment file name, if `name` is one.
pub fn parse_segment_name(name: &str) -> Option<Lsn> {
    let digits = name.strip_suffix(SUFFIX)?;
    if digits.len() != NAME_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// All segments in `dir`, ordered by first LSN. Other files are ignored.
pub fn list_segments(dir: &Path) -> Result<Vec<(Lsn, PathBuf)>, WalError> {
    list_segments_in(&StdFs, dir)
}

/// [`list_segments`] on `storage`.
pub fn list_segments_in(
    storage: &dyn Storage,
    dir: &Path,
) -> Result<Vec<(Lsn, PathBuf)>, WalError> {
    let names = storage.list(dir).map_err(|e| WalError::io(dir, e))?;
    let mut out: Vec<(Lsn, PathBuf)> = names
        .iter()
        .filter_map(|name| Some((parse_segment_name(name)?, dir.join(name))))
        .collect();
    out.sort_unstable_by_key(|(lsn, _)| *lsn);
    Ok(out)
}

/// Opens (creating if absent, never truncating) the segment at `path` on the real file system.
pub fn open_for_write(path: &Path, path_kind: WritePath) -> io::Result<Box<dyn SegmentFile>> {
    StdFs.open_segment(path, path_kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_numerically() {
        let d = Path::new("/x");
        let p = segment_path(d, 1);
        assert_eq!(p, Path::new("/x/00000000000000000001.seg"));
        assert_eq!(parse_segment_name("00000000000000000001.seg"), Some(1));
        assert_eq!(
            parse_segment_name(&format!("{:020}.seg", u64::MAX)),
            Some(u64::MAX)
        );
        assert_eq!(parse_segment_name("1.seg"), None);
        assert_eq!(parse_segment_name("0000000000000000000a.seg"), None);
        assert!(segment_path(d, 9) < segment_path(d, 10));
    }

    #[test]
    fn both_paths_write_allocate_and_refuse_out_of_range() {
        let dir = tempfile::tempdir().unwrap();
        for (i, kind) in [WritePath::Pwrite, WritePath::Mmap].into_iter().enumerate() {
            let path = segment_path(dir.path(), i as u64 + 1);
            let mut f = open_for_write(&path, kind).unwrap();
            assert!(
                f.raw_fd().is_some(),
                "the real files expose their descriptor"
            );
            f.allocate(8192).unwrap();
            assert_eq!(std::fs::metadata(&path).unwrap().len(), 8192);
            f.write_at(100, b"hello").unwrap();
            f.sync(100, 5).unwrap();
            if kind == WritePath::Mmap {
                assert!(f.write_at(8190, b"abc").is_err());
                assert!(f.sync(u64::MAX, 1).is_err());
            }
            drop(f);
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(&bytes[100..105], b"hello");
        }
    }
}
