//! The two real [`SegmentFile`]s, one per [`WritePath`]: [`PwriteFile`] over any
//! [`StorageFile`], [`MmapFile`] over a map of the preallocated file. The WAL names segments
//! and decides what to write (`wal::segment`); this is the storage side of the seam.
#![forbid(unsafe_code)]

use super::interface::StorageFile;
pub use super::interface::{SegmentFile, WritePath};
use super::sys;
use memmap2::MmapMut;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

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
