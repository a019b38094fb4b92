//! The storage interface: every file operation of the WAL and of the DLQ's batch store
//! (`dispatch::dlq_store`) goes through [`Storage`], so durability can be tested against a
//! simulated power loss, not only against a process crash.
//!
//! Two implementations:
//!
//! * [`StdFs`] — the real one: `std::fs`, `pwrite` + `fdatasync`, read-only maps for scans, `flock`.
//!   Its files expose their raw descriptor ([`StorageFile::raw_fd`]), so a core's io_uring
//!   commit path can submit `write` + `fdatasync` on its own ring for the same file.
//! * [`sim::SimFs`] — the simulated one: all data in memory, with the page cache and the disk
//!   kept apart. Writes and directory changes are only in the "page cache" until `sync_data` /
//!   `sync_dir`; [`sim::SimFs::power_cut`] makes every later operation fail, and
//!   [`sim::SimFs::reboot`] rebuilds the disk as a power loss would leave it: each unsynced
//!   512-byte sector of a file independently written or not (so pages land in any order and a
//!   write can be torn at sector granularity), unsynced size changes kept or not, and directory
//!   entries not synced lost (creations, renames and removals alike).
//!
//! # Contract (what the WAL relies on, and the simulation models)
//!
//! * `write_at` reaches the page cache: readable at once, durable only after `sync_data` of that
//!   file returned `Ok`.
//! * A new, renamed or removed directory entry is durable only after `sync_dir` of its parent
//!   returned `Ok`; `sync_data` of a file does not make its name durable.
//! * `read` / `map` see the page cache (what this process wrote), not only the disk.
//! * No operation panics on any argument; errors are `io::Error`s with the OS's kinds
//!   (`NotFound`, `AlreadyExists`, ...).
//!
//! The memory-mapped write path ([`crate::wal::WritePath::Mmap`]) exists in [`StdFs`] only; the
//! simulation gives every segment `pwrite` semantics (a map's `msync` of a range is modelled
//! by `sync_data` of the whole file, which makes at least as much durable).
#![forbid(unsafe_code)]

pub mod sim;
mod stdfs;

pub use stdfs::StdFs;

use crate::wal::segment::SegmentFile;
use crate::wal::WritePath;
use std::fmt;
use std::io;
use std::ops::Deref;
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::Arc;

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

/// A whole file's bytes for scanning: a read-only map ([`StdFs`]), or shared in-memory bytes.
///
/// It may end before the file's size ([`Storage::len`]) when the rest is zeros (the simulation
/// keeps a preallocated tail as a hole); a reader treats the missing tail as zeros. The WAL's
/// scans do (a zero `len` field ends the data, zeros after it are what they check for).
#[derive(Debug)]
pub enum Contents {
    Empty,
    Map(memmap2::Mmap),
    Shared(Arc<Vec<u8>>),
}

impl Deref for Contents {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Contents::Empty => &[],
            Contents::Map(m) => m,
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

/// The real file system, shared.
pub fn std_fs() -> Arc<dyn Storage> {
    Arc::new(StdFs)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Directories made with `create_dir_all_durably` and a file replaced with
    /// `replace_file_durably` survive a power cut right after: the real file system keeps
    /// them, and the simulation's reboot (which drops every unsynced directory entry) too.
    #[test]
    fn durable_dirs_and_replaced_files_survive_a_power_cut() {
        let sim_root = Path::new("/sim");
        let sim = sim::SimFs::new(sim_root, 11);
        let dir = sim_root.join("data/wal/core-0");
        create_dir_all_durably(&sim, &dir).unwrap();
        let f = sim_root.join("data/wal/MANIFEST");
        replace_file_durably(&sim, &f, b"one").unwrap();
        replace_file_durably(&sim, &f, b"two").unwrap();
        // Not durable: a directory made the plain way.
        sim.create_dir_all(&sim_root.join("data/wal/core-1"))
            .unwrap();
        sim.power_cut();
        sim.reboot();
        assert!(sim.is_dir(&dir));
        assert!(!sim.is_dir(&sim_root.join("data/wal/core-1")));
        assert_eq!(sim.read(&f).unwrap(), b"two");
        let names = sim.list(&sim_root.join("data/wal")).unwrap();
        assert!(!names.contains(&"MANIFEST.tmp".to_owned()), "{names:?}");
        // The real file system: the same calls, the same results (no power cut to simulate).
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("a/b/c");
        create_dir_all_durably(&StdFs, &real).unwrap();
        create_dir_all_durably(&StdFs, &real).unwrap();
        replace_file_durably(&StdFs, &real.join("m"), b"x").unwrap();
        assert_eq!(std::fs::read(real.join("m")).unwrap(), b"x");
        assert!(!real.join("m.tmp").exists());
    }

    /// `OpenMode::NEW` and `read_exact_at`, the two operations the DLQ's batch store added,
    /// behave the same on the real file system and the simulation.
    #[test]
    fn exclusive_create_and_exact_reads_agree_on_both_storages() {
        let tmp = tempfile::tempdir().unwrap();
        let sim_root = Path::new("/sim");
        let storages: [(Arc<dyn Storage>, &Path); 2] = [
            (std_fs(), tmp.path()),
            (Arc::new(sim::SimFs::new(sim_root, 3)), sim_root),
        ];
        for (fs, root) in storages {
            let path = root.join("f");
            let mut f = fs.open(&path, OpenMode::NEW).unwrap();
            f.write_at(0, b"0123456789").unwrap();
            let again = fs.open(&path, OpenMode::NEW).unwrap_err();
            assert_eq!(again.kind(), io::ErrorKind::AlreadyExists, "{fs:?}");
            assert_eq!(fs.read_exact_at(&path, 3, 4).unwrap(), b"3456", "{fs:?}");
            assert_eq!(fs.read_exact_at(&path, 10, 0).unwrap(), b"", "{fs:?}");
            for (offset, len) in [(8, 3), (10, 1)] {
                let e = fs.read_exact_at(&path, offset, len).unwrap_err();
                assert_eq!(
                    e.kind(),
                    io::ErrorKind::UnexpectedEof,
                    "{fs:?} {offset}+{len}"
                );
            }
            // A zero tail (allocated, never written) reads as zeros.
            f.allocate(16).unwrap();
            assert_eq!(fs.read_exact_at(&path, 9, 3).unwrap(), b"9\0\0", "{fs:?}");
            let missing = fs.read_exact_at(&root.join("g"), 0, 1).unwrap_err();
            assert_eq!(missing.kind(), io::ErrorKind::NotFound, "{fs:?}");
        }
    }
}
