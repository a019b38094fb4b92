//! The storage interface itself: [`Storage`] (the file operations on a data directory), the
//! files it opens ([`StorageFile`], and [`SegmentFile`], the seam the WAL writes a segment
//! through, so tests and the storage-fault suite can wrap a real file and inject `ENOSPC`, `EIO`
//! or short writes), and the durable helpers built on it. The contract is the `storage` module
//! header's. A leaf: the implementations (`stdfs`, `sim`, `segment`) import it, never the
//! reverse.
#![forbid(unsafe_code)]

use std::fmt;
use std::io;
use std::ops::Deref;
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::Arc;

/// How records reach a segment file (the WAL module docs give the measured choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WritePath {
    /// `pwrite` + `fdatasync` (default).
    #[default]
    Pwrite,
    /// Copy into a `MmapMut` of the segment + `msync`.
    Mmap,
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

/// One open file of a [`Storage`].
pub trait StorageFile: Send + fmt::Debug {
    /// Writes all of `buf` at byte `offset` (to the page cache; not yet durable).
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Reads up to `buf.len()` bytes at `offset`; returns how many (0 at or past the end).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// `fdatasync(2)`: the file's written bytes and size are durable once this returns `Ok`.
    fn sync_data(&mut self) -> io::Result<()>;
    /// Reserves bytes `[0, len)` (`fallocate`, falling back to `set_len`); never shrinks.
    fn allocate(&mut self, len: u64) -> io::Result<()>;
    /// Sets the size to exactly `len` (truncating or extending with zeros).
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// Current size in bytes.
    fn len(&self) -> io::Result<u64>;
    /// True if the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// The file descriptor for submitting I/O on this file elsewhere (an io_uring `write` +
    /// `fdatasync` on a core's ring); `None` where there is no real descriptor (the simulation).
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
}

/// How [`Storage::open`] opens a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenMode {
    /// Create the file if it does not exist.
    pub create: bool,
    /// Truncate it to zero bytes.
    pub truncate: bool,
    /// Fail with `AlreadyExists` if the file exists (`O_CREAT | O_EXCL`; implies `create`).
    pub exclusive: bool,
}

impl OpenMode {
    /// An existing file, as it is.
    pub const EXISTING: OpenMode = OpenMode {
        create: false,
        truncate: false,
        exclusive: false,
    };
    /// Created if absent, never truncated.
    pub const CREATE: OpenMode = OpenMode {
        create: true,
        truncate: false,
        exclusive: false,
    };
    /// Created if absent, truncated if present.
    pub const REPLACE: OpenMode = OpenMode {
        create: true,
        truncate: true,
        exclusive: false,
    };
    /// Created; `AlreadyExists` if present (a file nobody else may be writing).
    pub const NEW: OpenMode = OpenMode {
        create: true,
        truncate: false,
        exclusive: true,
    };
}

/// A whole file's bytes for scanning: a read-only map ([`StdFs`](crate::storage::StdFs)), or shared in-memory bytes.
///
/// It may end before the file's size ([`Storage::len`]) when the rest is zeros (the simulation
/// keeps a preallocated tail as a hole); a reader treats the missing tail as zeros. The WAL's
/// scans do (a zero `len` field ends the data, zeros after it are what they check for).
#[derive(Debug)]
pub enum Contents {
    Empty,
    Map(memmap2::Mmap),
    /// A map kept for reuse by the reading thread (`storage::map_cache`).
    KeptMap(Arc<memmap2::Mmap>),
    Shared(Arc<Vec<u8>>),
}

impl Deref for Contents {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Contents::Empty => &[],
            Contents::Map(m) => m,
            Contents::KeptMap(m) => m,
            Contents::Shared(v) => v,
        }
    }
}

/// Held while a directory's `LOCK` is taken ([`Storage::try_lock`]); dropping it releases it.
pub trait LockGuard: Send + fmt::Debug {}

/// The file operations sluice performs on its data directory (module docs: the contract).
pub trait Storage: Send + Sync + fmt::Debug {
    /// Opens `path` for reading and writing per `mode`.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>>;
    /// Opens (creating if absent, never truncating) a WAL segment for writing with `kind`.
    fn open_segment(&self, path: &Path, kind: WritePath) -> io::Result<Box<dyn SegmentFile>>;
    /// The whole file, for reading (a map for the real file system).
    fn map(&self, path: &Path) -> io::Result<Contents>;
    /// The whole file, copied (a zero tail [`Storage::map`] left out is filled in).
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut bytes = self.map(path)?.to_vec();
        let len = usize::try_from(self.len(path)?).unwrap_or(usize::MAX);
        if bytes.len() < len {
            bytes.resize(len, 0);
        }
        Ok(bytes)
    }
    /// Exactly `len` bytes of the file at `path` from `offset`, opened for reading only
    /// (`UnexpectedEof` if the file ends before). The default reads through [`Storage::map`]
    /// (a zero tail it left out reads as zeros).
    fn read_exact_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let contents = self.map(path)?;
        if len == 0 {
            return Ok(Vec::new()); // as `pread` of nothing: no bounds to check
        }
        let size = self.len(path)?;
        if !matches!(offset.checked_add(len as u64), Some(end) if end <= size) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: {len} bytes at {offset} are past its end",
                    path.display()
                ),
            ));
        }
        let mut out = vec![0u8; len];
        let have = usize::try_from(offset)
            .ok()
            .and_then(|o| contents.get(o..))
            .unwrap_or(&[]);
        let n = have.len().min(len);
        out[..n].copy_from_slice(&have[..n]);
        Ok(out)
    }
    /// Size of the file at `path`.
    fn len(&self, path: &Path) -> io::Result<u64>;
    /// When the file at `path` was last written (its modification time). The default, for a
    /// storage that keeps none (the simulation), is `Unsupported`: WAL retention then keeps
    /// every segment (`wal::retention`).
    fn modified(&self, path: &Path) -> io::Result<std::time::SystemTime> {
        let _ = path;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this storage keeps no modification times",
        ))
    }
    /// Names of the entries of directory `dir` (any order); `NotFound` if it does not exist.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// True if `path` is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// Creates `dir` and its missing parents (their entries are not synced).
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Renames `from` to `to`, replacing `to` (durable after `sync_dir` of the directory).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes the file at `path` (durable after `sync_dir` of its directory).
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// `fsync` of directory `dir`: its entries as they are now become durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Takes the exclusive lock of `path` (created if absent); `Ok(None)` if someone holds it.
    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>>;
}

/// Creates `dir` and its missing parents, and makes each created entry durable: every parent
/// of a created directory is `sync_dir`ed after the creation, so a power loss after this
/// returns `Ok` leaves the whole path in place. A directory that already exists is left as it
/// is (its entry was made durable by whoever created it).
pub fn create_dir_all_durably(fs: &dyn Storage, dir: &Path) -> io::Result<()> {
    if fs.is_dir(dir) {
        return Ok(());
    }
    let mut created = Vec::new();
    let mut p = Some(dir);
    while let Some(d) = p.filter(|d| !d.as_os_str().is_empty() && !fs.is_dir(d)) {
        created.push(d);
        p = d.parent();
    }
    fs.create_dir_all(dir)?;
    for d in created.iter().rev() {
        if let Some(parent) = d.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs.sync_dir(parent)?;
        }
    }
    Ok(())
}

/// Writes `bytes` as the whole file `path` atomically and durably: a temporary file beside it
/// (`<name>.tmp`) is written and `fdatasync`ed, renamed over `path`, and the directory synced.
/// A power loss at any point leaves either the old file or the new one, never a mix; once this
/// returns `Ok` the new one survives.
pub fn replace_file_durably(fs: &dyn Storage, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = dir.join(name);
    let mut f = fs.open(&tmp, OpenMode::REPLACE)?;
    f.write_at(0, bytes)?;
    f.sync_data()?;
    drop(f);
    fs.rename(&tmp, path)?;
    fs.sync_dir(dir)
}
