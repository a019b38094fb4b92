//! [`SimFs`]: a simulated disk with a page cache, for power-loss tests and fuzzing.
//!
//! Every file (an *inode*) holds two images: `cache`, what the process sees, and `disk`, what
//! survives a power loss; plus the set of 512-byte sectors written since the last `sync_data`.
//! Every directory holds two entry tables, `live` and `durable`; `sync_dir` copies one to the
//! other. Nothing touches the real file system.
//!
//! * [`SimFs::power_cut_after`] arms a cut: the `n`-th mutating operation from now (write,
//!   sync, allocate, create, rename, remove, directory sync) and every operation after it fail
//!   with `EIO` ("power cut"), as if the machine stopped there. [`SimFs::power_cut`] cuts now.
//! * [`SimFs::reboot`] is the power coming back: with a seeded generator, each unsynced sector of
//!   each file is independently kept (written before the cut) or dropped (so a multi-sector
//!   write is torn at sector granularity and pages land in any order); an unsynced size change
//!   is kept or not; every directory reverts to its durable entries (unsynced creations,
//!   renames and removals are lost); locks are released. Then everything works again.
//!
//! * [`SimFs::damage`] is a failing disk after that: a bit flipped, or a whole sector lost, in
//!   data that was synced (the WAL's power-loss test checks that such damage to acknowledged
//!   events is always reported, never silently truncated).
//!
//! Bounds: memory is the sum of the files' sizes, twice (cache and disk); a test keeps its
//! files small (segments of 1 MiB).
#![forbid(unsafe_code)]

use super::interface::{
    Contents, LockGuard, OpenMode, SegmentFile, Storage, StorageFile, WritePath,
};
use super::segment::PwriteFile;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Granularity of tearing: a disk sector.
pub const SECTOR: u64 = 512;

/// What [`SimFs::damage`] does to synced data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskDamage {
    /// One bit of the byte flips (a media or firmware error).
    FlipBit { bit: u8 },
    /// The 512-byte sector holding the byte reads as zeros: a write the disk acknowledged
    /// (its flush returned) and then lost — a "lost synced write".
    LoseSector,
}

type Ino = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    File(Ino),
    Dir,
}

#[derive(Debug, Default)]
struct Dir {
    live: BTreeMap<String, Entry>,
    durable: BTreeMap<String, Entry>,
}

#[derive(Debug, Default)]
struct Inode {
    /// What reads see (the page cache), up to its last written byte: the file is `size` bytes
    /// and reads as zeros past `cache` (a preallocated tail costs no memory). `Arc` so a scan's
    /// [`Contents`] shares it without a copy (a write after that copies once: `Arc::make_mut`).
    cache: Arc<Vec<u8>>,
    size: u64,
    /// What the disk holds, the same way.
    disk: Vec<u8>,
    disk_size: u64,
    /// Sectors written since the last sync.
    dirty: BTreeSet<u64>,
}

/// Ordered maps, not hash maps: a `Path` key is compared by `Path::cmp` (compiled once in std)
/// rather than hashed component by component with SipHash in this crate (in the fuzzer, where
/// this crate is coverage-instrumented, lookups with that hashing took ~9 % of the time); and
/// [`State::reboot`] visits the inodes in a fixed order, so a seed tears the same sectors in
/// every run (a `HashMap` is iterated in a per-instance random order).
#[derive(Debug)]
struct State {
    dirs: BTreeMap<PathBuf, Dir>,
    inodes: BTreeMap<Ino, Inode>,
    next_ino: Ino,
    /// Mutating operations left before the cut (`None`: no cut armed).
    cut_in: Option<u64>,
    cut: bool,
    /// Locked paths, with the generation (reboot count) that took them.
    locks: BTreeMap<PathBuf, u64>,
    generation: u64,
    /// Mutating operations performed so far (to pick cut points).
    ops: u64,
    rng: u64,
}

/// The simulated file system (module docs). Cloning shares it.
#[derive(Debug, Clone)]
pub struct SimFs {
    state: Arc<Mutex<State>>,
}

fn cut_error() -> io::Error {
    io::Error::other("simulated power cut (EIO): the machine is off")
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file or directory", path.display()),
    )
}

/// Parent directory and file name (borrowed: a lookup allocates nothing).
fn split(path: &Path) -> io::Result<(&Path, &str)> {
    match (path.parent(), path.file_name().and_then(|n| n.to_str())) {
        (Some(p), Some(n)) => Ok((p, n)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a file path", path.display()),
        )),
    }
}

/// splitmix64: a small seeded generator (no dependency; the sequence is the seed's).
fn next_u64(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl State {
    /// Counts one mutating operation; fails it (and arms the permanent cut) when it is the one.
    fn op(&mut self) -> io::Result<()> {
        if self.cut {
            return Err(cut_error());
        }
        self.ops += 1;
        if let Some(n) = self.cut_in.as_mut() {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.cut = true;
                self.cut_in = None;
                return Err(cut_error());
            }
        }
        Ok(())
    }

    fn alive(&self) -> io::Result<()> {
        if self.cut {
            Err(cut_error())
        } else {
            Ok(())
        }
    }

    fn lookup(&self, path: &Path) -> io::Result<Entry> {
        self.find(path)?.ok_or_else(|| not_found(path))
    }

    /// [`State::lookup`] without building the `NotFound` error (a creation looks up first).
    fn find(&self, path: &Path) -> io::Result<Option<Entry>> {
        if path.parent().is_none() && self.dirs.contains_key(path) {
            return Ok(Some(Entry::Dir));
        }
        let (parent, name) = split(path)?;
        Ok(self
            .dirs
            .get(parent)
            .and_then(|d| d.live.get(name).copied()))
    }

    fn ino(&self, path: &Path) -> io::Result<Ino> {
        match self.lookup(path)? {
            Entry::File(ino) => Ok(ino),
            Entry::Dir => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: is a directory", path.display()),
            )),
        }
    }

    fn inode(&mut self, ino: Ino) -> io::Result<&mut Inode> {
        self.inodes
            .get_mut(&ino)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "stale file handle"))
    }

    fn reboot(&mut self) {
        let mut rng = self.rng;
        // Directories: back to their durable entries; those no longer reachable disappear.
        for d in self.dirs.values_mut() {
            d.live = d.durable.clone();
        }
        let mut paths: Vec<PathBuf> = self.dirs.keys().cloned().collect();
        paths.sort_by_key(|p| p.components().count());
        for p in paths {
            let reachable = match (p.parent(), p.file_name().and_then(|n| n.to_str())) {
                (Some(parent), Some(name)) => self
                    .dirs
                    .get(parent)
                    .is_some_and(|d| d.live.get(name) == Some(&Entry::Dir)),
                _ => true, // the root
            };
            if !reachable {
                self.dirs.remove(&p);
            }
        }
        // Files: each unsynced sector written or not; an unsynced size change kept or not.
        for inode in self.inodes.values_mut() {
            let cache = &inode.cache;
            let mut disk = std::mem::take(&mut inode.disk);
            let size = if inode.size != inode.disk_size && next_u64(&mut rng) & 1 == 1 {
                inode.size
            } else {
                inode.disk_size
            };
            for &s in &inode.dirty {
                if next_u64(&mut rng) & 1 == 0 {
                    continue;
                }
                let start = (s * SECTOR) as usize;
                let end = (start + SECTOR as usize).min(cache.len());
                if start >= end {
                    continue;
                }
                if disk.len() < end {
                    disk.resize(end, 0);
                }
                disk[start..end].copy_from_slice(&cache[start..end]);
            }
            disk.truncate(size as usize);
            inode.cache = Arc::new(disk.clone());
            inode.disk = disk;
            inode.size = size;
            inode.disk_size = size;
            inode.dirty.clear();
        }
        // Inodes no directory names any more are gone.
        let live: BTreeSet<Ino> = self
            .dirs
            .values()
            .flat_map(|d| d.live.values())
            .filter_map(|e| match e {
                Entry::File(i) => Some(*i),
                Entry::Dir => None,
            })
            .collect();
        self.inodes.retain(|i, _| live.contains(i));
        self.rng = rng;
        self.cut = false;
        self.cut_in = None;
        self.locks.clear();
        self.generation += 1;
    }
}

impl SimFs {
    /// An empty disk holding only the directory `root` (durable), with generator seed `seed`.
    pub fn new(root: &Path, seed: u64) -> SimFs {
        let mut dirs = BTreeMap::new();
        let mut p = Some(root);
        while let Some(dir) = p {
            dirs.entry(dir.to_path_buf()).or_insert_with(Dir::default);
            if let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) {
                let name = name.to_string_lossy().into_owned();
                let d = dirs
                    .entry(parent.to_path_buf())
                    .or_insert_with(Dir::default);
                d.live.insert(name.clone(), Entry::Dir);
                d.durable.insert(name, Entry::Dir);
            }
            p = dir.parent();
        }
        SimFs {
            state: Arc::new(Mutex::new(State {
                dirs,
                inodes: BTreeMap::new(),
                next_ino: 1,
                cut_in: None,
                cut: false,
                locks: BTreeMap::new(),
                generation: 0,
                ops: 0,
                rng: seed,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Arms a power cut: the `n`-th mutating operation from now fails, and everything after it.
    /// `n == 0` cuts now.
    pub fn power_cut_after(&self, n: u64) {
        let mut s = self.lock();
        if n == 0 {
            s.cut = true;
        } else {
            s.cut_in = Some(n);
        }
    }

    /// Cuts the power now.
    pub fn power_cut(&self) {
        self.power_cut_after(0);
    }

    /// True once the power is cut (until [`SimFs::reboot`]).
    pub fn is_cut(&self) -> bool {
        self.lock().cut
    }

    /// Mutating operations performed so far.
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// The power comes back (module docs): the disk is what survived; caches start from it.
    pub fn reboot(&self) {
        self.lock().reboot();
    }

    /// A failing disk's damage to data already on it (synced, or left by [`SimFs::reboot`]):
    /// applied to the disk image and the cache alike, at `offset` of the file at `path`.
    /// Returns whether anything changed (`false`: the offset is past the file's data, which
    /// reads as zeros already, or the file is not there).
    pub fn damage(&self, path: &Path, offset: u64, how: DiskDamage) -> bool {
        let mut st = self.lock();
        let Ok(Entry::File(ino)) = st.lookup(path) else {
            return false;
        };
        let Some(inode) = st.inodes.get_mut(&ino) else {
            return false;
        };
        let at = offset as usize;
        if at >= inode.disk.len() || !inode.dirty.is_empty() {
            return false; // past the data, or unsynced sectors: damage synced state only
        }
        let cache = Arc::make_mut(&mut inode.cache);
        for image in [&mut inode.disk, cache] {
            match how {
                DiskDamage::FlipBit { bit } => image[at] ^= 1 << (bit % 8),
                DiskDamage::LoseSector => {
                    let start = at - at % SECTOR as usize;
                    let end = (start + SECTOR as usize).min(image.len());
                    image[start..end].fill(0);
                }
            }
        }
        true
    }

    /// Bytes in the page cache not yet on disk (dirty sectors), over all files.
    pub fn unsynced_bytes(&self) -> u64 {
        self.lock()
            .inodes
            .values()
            .map(|i| i.dirty.len() as u64 * SECTOR)
            .sum()
    }
}

/// An open simulated file.
#[derive(Debug)]
struct SimFile {
    fs: SimFs,
    ino: Ino,
}

impl StorageFile for SimFile {
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut s = self.fs.lock();
        s.op()?;
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|e| *e <= 1 << 40)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
        let inode = s.inode(self.ino)?;
        let data = Arc::make_mut(&mut inode.cache);
        if data.len() < end as usize {
            data.resize(end as usize, 0);
        }
        data[offset as usize..end as usize].copy_from_slice(buf);
        inode.size = inode.size.max(end);
        if end > offset {
            inode.dirty.extend(offset / SECTOR..=(end - 1) / SECTOR);
        }
        Ok(())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut s = self.fs.lock();
        s.alive()?;
        let inode = s.inode(self.ino)?;
        let (data, size) = (&inode.cache, inode.size as usize);
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(size);
        let n = buf.len().min(size - start);
        // Bytes past `cache` (up to `size`) are the zero tail.
        let have = data.len().saturating_sub(start).min(n);
        if have > 0 {
            buf[..have].copy_from_slice(&data[start..start + have]);
        }
        buf[have..n].fill(0);
        Ok(n)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        let mut s = self.fs.lock();
        s.op()?;
        let inode = s.inode(self.ino)?;
        let cache = &inode.cache;
        inode.disk.resize(cache.len(), 0);
        inode.disk_size = inode.size;
        for &sec in &inode.dirty {
            let start = (sec * SECTOR) as usize;
            let end = (start + SECTOR as usize).min(cache.len());
            if start < end {
                inode.disk[start..end].copy_from_slice(&cache[start..end]);
            }
        }
        inode.dirty.clear();
        Ok(())
    }

    fn allocate(&mut self, len: u64) -> io::Result<()> {
        if len > 1 << 40 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "too large"));
        }
        let mut s = self.fs.lock();
        s.op()?;
        let inode = s.inode(self.ino)?;
        inode.size = inode.size.max(len);
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        if len > 1 << 40 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "too large"));
        }
        let mut s = self.fs.lock();
        s.op()?;
        let inode = s.inode(self.ino)?;
        if inode.cache.len() as u64 > len {
            Arc::make_mut(&mut inode.cache).truncate(len as usize);
        }
        inode.size = len;
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let mut s = self.fs.lock();
        s.alive()?;
        Ok(s.inode(self.ino)?.size)
    }
}

#[derive(Debug)]
struct SimLock {
    fs: SimFs,
    path: PathBuf,
    generation: u64,
}

impl LockGuard for SimLock {}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut s = self.fs.lock();
        if s.locks.get(&self.path) == Some(&self.generation) {
            s.locks.remove(&self.path);
        }
    }
}

impl SimFs {
    fn open_ino(&self, path: &Path, mode: OpenMode) -> io::Result<Ino> {
        let mut s = self.lock();
        s.alive()?;
        match s.find(path)? {
            Some(Entry::File(_)) if mode.exclusive => Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}: file exists", path.display()),
            )),
            Some(Entry::File(ino)) => {
                if mode.truncate {
                    s.op()?;
                    let inode = s.inode(ino)?;
                    Arc::make_mut(&mut inode.cache).clear();
                    inode.size = 0;
                }
                Ok(ino)
            }
            Some(Entry::Dir) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: is a directory", path.display()),
            )),
            None if mode.create || mode.exclusive => {
                let (parent, name) = split(path)?;
                if !s.dirs.contains_key(parent) {
                    return Err(not_found(parent));
                }
                s.op()?;
                let ino = s.next_ino;
                s.next_ino += 1;
                s.inodes.insert(ino, Inode::default());
                if let Some(d) = s.dirs.get_mut(parent) {
                    d.live.insert(name.to_owned(), Entry::File(ino));
                }
                Ok(ino)
            }
            None => Err(not_found(path)),
        }
    }
}

impl Storage for SimFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let ino = self.open_ino(path, mode)?;
        Ok(Box::new(SimFile {
            fs: self.clone(),
            ino,
        }))
    }

    fn open_segment(&self, path: &Path, _kind: WritePath) -> io::Result<Box<dyn SegmentFile>> {
        let file = self.open(path, OpenMode::CREATE)?;
        Ok(Box::new(PwriteFile::new(file)))
    }

    /// The file's bytes up to its last written byte (the zero tail is left out: see
    /// [`Contents`]).
    fn map(&self, path: &Path) -> io::Result<Contents> {
        let s = self.lock();
        s.alive()?;
        let ino = s.ino(path)?;
        let inode = s.inodes.get(&ino).ok_or_else(|| not_found(path))?;
        Ok(if inode.cache.is_empty() {
            Contents::Empty
        } else {
            Contents::Shared(inode.cache.clone())
        })
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        let s = self.lock();
        s.alive()?;
        let ino = s.ino(path)?;
        Ok(s.inodes.get(&ino).map_or(0, |i| i.size))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let s = self.lock();
        s.alive()?;
        let d = s.dirs.get(dir).ok_or_else(|| not_found(dir))?;
        Ok(d.live.keys().cloned().collect())
    }

    fn is_dir(&self, path: &Path) -> bool {
        let s = self.lock();
        !s.cut && s.dirs.contains_key(path)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.lock();
        s.alive()?;
        let mut missing = Vec::new();
        let mut p = Some(dir);
        while let Some(d) = p {
            if s.dirs.contains_key(d) {
                break;
            }
            missing.push(d.to_path_buf());
            p = d.parent();
        }
        for d in missing.into_iter().rev() {
            let (parent, name) = split(&d)?;
            s.op()?;
            if let Some(pd) = s.dirs.get_mut(parent) {
                if pd.live.contains_key(name) {
                    return Err(io::Error::new(io::ErrorKind::AlreadyExists, "a file"));
                }
                pd.live.insert(name.to_owned(), Entry::Dir);
            }
            s.dirs.insert(d, Dir::default());
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.lock();
        s.alive()?;
        let ino = s.ino(from)?;
        let (fp, fname) = split(from)?;
        let (tp, tname) = split(to)?;
        if !s.dirs.contains_key(tp) {
            return Err(not_found(tp));
        }
        s.op()?;
        if let Some(d) = s.dirs.get_mut(fp) {
            d.live.remove(fname);
        }
        if let Some(d) = s.dirs.get_mut(tp) {
            d.live.insert(tname.to_owned(), Entry::File(ino));
        }
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut s = self.lock();
        s.alive()?;
        s.ino(path)?;
        let (parent, name) = split(path)?;
        s.op()?;
        if let Some(d) = s.dirs.get_mut(parent) {
            d.live.remove(name);
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.lock();
        s.alive()?;
        if !s.dirs.contains_key(dir) {
            return Err(not_found(dir));
        }
        s.op()?;
        if let Some(d) = s.dirs.get_mut(dir) {
            d.durable = d.live.clone();
        }
        Ok(())
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        self.open_ino(path, OpenMode::CREATE)?;
        let mut s = self.lock();
        if s.locks.contains_key(path) {
            return Ok(None);
        }
        let generation = s.generation;
        s.locks.insert(path.to_path_buf(), generation);
        Ok(Some(Box::new(SimLock {
            fs: self.clone(),
            path: path.to_path_buf(),
            generation,
        })))
    }
}

#[cfg(test)]
#[path = "sim_tests.rs"]
mod tests;
