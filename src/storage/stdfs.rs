//! [`StdFs`]: the real [`Storage`], over `std::fs` (maps, `fallocate` and `flock` from `storage::sys`).
#![forbid(unsafe_code)]

use super::interface::{
    Contents, LockGuard, OpenMode, SegmentFile, Storage, StorageFile, WritePath,
};
use super::segment::{MmapFile, PwriteFile};
use super::sys;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdFs;

/// A real file.
#[derive(Debug)]
pub struct StdFile {
    file: File,
}

impl StorageFile for StdFile {
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        // `File::sync_data` is `fdatasync(2)` on Linux.
        self.file.sync_data()
    }
    fn allocate(&mut self, len: u64) -> io::Result<()> {
        sys::allocate(&self.file, len)
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.file.as_raw_fd())
    }
}

#[derive(Debug)]
struct FlockGuard {
    _file: File,
}

impl LockGuard for FlockGuard {}

fn open_std(path: &Path, mode: OpenMode) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(mode.create)
        .truncate(mode.truncate)
        .create_new(mode.exclusive)
        .open(path)
}

impl Storage for StdFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(StdFile {
            file: open_std(path, mode)?,
        }))
    }

    fn open_segment(&self, path: &Path, kind: WritePath) -> io::Result<Box<dyn SegmentFile>> {
        let file = StdFile {
            file: open_std(path, OpenMode::CREATE)?,
        };
        Ok(match kind {
            WritePath::Pwrite => Box::new(PwriteFile::new(Box::new(file))),
            WritePath::Mmap => Box::new(MmapFile::new(file.file)),
        })
    }

    fn map(&self, path: &Path) -> io::Result<Contents> {
        let file = File::open(path)?;
        if let Some(kept) = super::map_cache::map_cached(path, &file, sys::map_read) {
            return Ok(match kept? {
                Some(map) => Contents::KeptMap(map),
                None => Contents::Empty,
            });
        }
        Ok(match sys::map_read(&file)? {
            Some(map) => Contents::Map(map),
            None => Contents::Empty,
        })
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn read_exact_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        File::open(path)?.read_exact_at(&mut out, offset)?;
        Ok(out)
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.len())
    }

    fn modified(&self, path: &Path) -> io::Result<std::time::SystemTime> {
        std::fs::metadata(path)?.modified()
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            // Names that are not UTF-8 are no file of ours.
            if let Ok(name) = entry?.file_name().into_string() {
                out.push(name);
            }
        }
        Ok(out)
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        if sys::try_lock_exclusive(&file)? {
            Ok(Some(Box::new(FlockGuard { _file: file })))
        } else {
            Ok(None)
        }
    }
}
