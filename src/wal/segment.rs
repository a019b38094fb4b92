//! Segment files: naming, listing, and the two write paths behind [`SegmentFile`].
//!
//! [`SegmentFile`] is the seam between the writer and the disk: the writer only calls
//! `write_at`, `sync` and `allocate`, so tests (and the storage-fault suite) can wrap the real
//! implementation and inject `ENOSPC`, `EIO` or short writes (see [`crate::wal::Wal::set_file_wrapper`]).
//! Segment files are opened through a [`Storage`] (`crate::storage`): the real file system or
//! the power-loss simulation.
#![forbid(unsafe_code)]

use super::{sys, Lsn, WalError, WritePath};
use crate::storage::{StdFs, Storage, StorageFile};
use memmap2::MmapMut;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
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

/// The file operations the writer needs; one implementation per [`WritePath`].
///
/// Implementations must not panic on any argument: out-of-range offsets are `InvalidInput`.
pub trait SegmentFile: Send {
    /// Writes all of `buf` at byte `offset` (to the page cache; not yet durable).
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Makes bytes `[offset, offset + len)` durable (`fdatasync`, or `msync` of that range).
    fn sync(&mut self, offset: u64, len: u64) -> io::Result<()>;
    /// Preallocates the file to `len` bytes (`fallocate`, falling back to `set_len`). Called once per segment
    /// before the first `write_at`.
    fn allocate(&mut self, len: u64) -> io::Result<()>;
    /// The descriptor of the segment file, for a commit path that submits `write` + `fdatasync`
    /// itself (io_uring on the core's ring); `None` in the simulation.
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
    /// For a commit submitted to a ring: the fault this file injects instead of the write of
    /// `buf` at `offset`, if any (having done what the fault does, as [`SegmentFile::write_at`]
    /// would); `None`: the ring writes.
    fn injected_write(&mut self, _offset: u64, _buf: &[u8]) -> Option<io::Result<()>> {
        None
    }
    /// For a commit submitted to a ring, after its `fdatasync` succeeded: the fault this file
    /// injects instead, if any (as [`SegmentFile::sync`] would).
    fn injected_sync(&mut self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
}

/// Write path 1: `pwrite` + `fdatasync`, on any [`StorageFile`].
#[derive(Debug)]
pub struct PwriteFile {
    file: Box<dyn StorageFile>,
}

impl PwriteFile {
    pub fn new(file: Box<dyn StorageFile>) -> Self {
        PwriteFile { file }
    }
}

impl SegmentFile for PwriteFile {
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.file.write_at(offset, buf)
    }
    fn sync(&mut self, _offset: u64, _len: u64) -> io::Result<()> {
        self.file.sync_data()
    }
    fn allocate(&mut self, len: u64) -> io::Result<()> {
        self.file.allocate(len)
    }
    fn raw_fd(&self) -> Option<RawFd> {
        self.file.raw_fd()
    }
}

/// Write path 2: copy into a `MmapMut` of the preallocated segment + `msync` of the range.
#[derive(Debug)]
pub struct MmapFile {
    file: File,
    map: Option<MmapMut>,
}

fn out_of_range() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "range outside the mapped segment",
    )
}

impl MmapFile {
    pub fn new(file: File) -> Self {
        MmapFile { file, map: None }
    }

    fn range(&self, offset: u64, len: usize) -> io::Result<(usize, usize)> {
        let map_len = self.map.as_ref().map_or(0, |m| m.len());
        let start = usize::try_from(offset).map_err(|_| out_of_range())?;
        match start.checked_add(len) {
            Some(end) if end <= map_len => Ok((start, end)),
            _ => Err(out_of_range()),
        }
    }
}

impl SegmentFile for MmapFile {
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let (start, end) = self.range(offset, buf.len())?;
        match &mut self.map {
            Some(map) => map[start..end].copy_from_slice(buf),
            None if buf.is_empty() => {}
            None => return Err(out_of_range()),
        }
        Ok(())
    }
    fn sync(&mut self, offset: u64, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(|_| out_of_range())?;
        let (start, _) = self.range(offset, len)?;
        match &self.map {
            Some(map) if len > 0 => map.flush_range(start, len),
            _ => Ok(()),
        }
    }
    fn allocate(&mut self, len: u64) -> io::Result<()> {
        sys::allocate(&self.file, len)?;
        let len = usize::try_from(len).map_err(|_| out_of_range())?;
        if len > 0 && self.map.as_ref().map_or(true, |m| m.len() < len) {
            self.map = None;
            self.map = Some(sys::map_write(&self.file, len)?);
        }
        Ok(())
    }
    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.file.as_raw_fd())
    }
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
