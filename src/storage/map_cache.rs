//! Maps kept for reuse on one thread (the operator reader, `sched::readers`): a lookup maps a
//! log's segments several times (the segment search, the seeks, the reads), and a fresh map of a
//! 64 MiB segment costs its `mmap`, a page fault per page touched and its `munmap` (a TLB
//! shootdown on every CPU the process runs on). With the cache, [`StdFs::map`] on a thread that
//! turned it on ([`keep_maps_on_this_thread`]) opens and `fstat`s the file, and hands back the
//! map it already holds of that very file (same device, inode and size), else maps it.
//!
//! Bounds: at most [`CAPACITY`] maps per thread (least recently used evicted). A file deleted
//! or replaced since (retention) is dropped at its next lookup, and every entry is checked
//! against its path at most every [`SWEEP_EVERY`], so a deleted segment's blocks are not held
//! for longer than that. A map is only ever of a segment, which is never shrunk while mapped
//! (`storage::sys` contract), so a kept map reads what a fresh one would.
//!
//! [`StdFs::map`]: super::StdFs
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memmap2::Mmap;

/// Maps kept per thread.
pub const CAPACITY: usize = 16;
/// How often the kept maps are checked against their paths.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The identity of a file's contents as far as a map goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    len: u64,
}

fn identity(m: &std::fs::Metadata) -> Identity {
    Identity {
        dev: m.dev(),
        ino: m.ino(),
        len: m.len(),
    }
}

#[derive(Debug)]
struct Cache {
    /// Most recently used last.
    maps: Vec<(PathBuf, Identity, Arc<Mmap>)>,
    swept_at: Instant,
}

thread_local! {
    static CACHE: RefCell<Option<Cache>> = const { RefCell::new(None) };
}

/// Turns the cache on for the calling thread.
pub fn keep_maps_on_this_thread() {
    CACHE.with(|c| {
        *c.borrow_mut() = Some(Cache {
            maps: Vec::new(),
            swept_at: Instant::now(),
        })
    });
}

/// Maps kept by the calling thread now.
pub fn kept() -> usize {
    CACHE.with(|c| c.borrow().as_ref().map_or(0, |c| c.maps.len()))
}

/// The calling thread's kept map of `file` (opened at `path`), or a new one from `map` kept for
/// next time. `None` when the thread keeps no maps: the caller maps as usual.
pub(super) fn map_cached(
    path: &Path,
    file: &File,
    map: impl FnOnce(&File) -> std::io::Result<Option<Mmap>>,
) -> Option<std::io::Result<Option<Arc<Mmap>>>> {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let cache = c.as_mut()?;
        Some(cache.get(path, file, map))
    })
}

impl Cache {
    fn get(
        &mut self,
        path: &Path,
        file: &File,
        map: impl FnOnce(&File) -> std::io::Result<Option<Mmap>>,
    ) -> std::io::Result<Option<Arc<Mmap>>> {
        if self.swept_at.elapsed() >= SWEEP_EVERY {
            self.sweep();
        }
        let id = identity(&file.metadata()?);
        if let Some(i) = self.maps.iter().position(|(p, _, _)| p == path) {
            let entry = self.maps.remove(i);
            if entry.1 == id {
                let m = entry.2.clone();
                self.maps.push(entry);
                return Ok(Some(m));
            }
        }
        let Some(m) = map(file)? else {
            return Ok(None);
        };
        let m = Arc::new(m);
        if self.maps.len() >= CAPACITY {
            self.maps.remove(0);
        }
        self.maps.push((path.to_owned(), id, m.clone()));
        Ok(Some(m))
    }

    /// Drops the maps whose path no longer names the file they map.
    fn sweep(&mut self) {
        self.swept_at = Instant::now();
        self.maps
            .retain(|(p, id, _)| std::fs::metadata(p).is_ok_and(|m| identity(&m) == *id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map_file(f: &File) -> std::io::Result<Option<Mmap>> {
        super::super::sys::map_read(f)
    }

    /// A file mapped twice is mapped once; a file replaced at its path is mapped again; a
    /// deleted one leaves at the sweep; the cache holds at most CAPACITY maps.
    #[test]
    fn maps_are_reused_until_the_file_changes_and_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("a.seg");
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        let mut cache = Cache {
            maps: Vec::new(),
            swept_at: Instant::now(),
        };
        let f = File::open(&path).unwrap();
        let one = cache.get(&path, &f, map_file).unwrap().unwrap();
        let two = cache
            .get(&path, &f, |_| panic!("mapped again"))
            .unwrap()
            .unwrap();
        assert!(Arc::ptr_eq(&one, &two));
        // Replaced (a new inode at the same path): mapped again.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, vec![8u8; 4096]).unwrap();
        let f = File::open(&path).unwrap();
        let three = cache.get(&path, &f, map_file).unwrap().unwrap();
        assert_eq!((three.len(), three[0]), (4096, 8));
        assert_eq!(cache.maps.len(), 1);
        // Deleted: gone at the sweep.
        std::fs::remove_file(&path).unwrap();
        cache.sweep();
        assert!(cache.maps.is_empty());
        for i in 0..CAPACITY + 3 {
            let p = tmp.path().join(format!("{i}.seg"));
            std::fs::write(&p, [1u8]).unwrap();
            let f = File::open(&p).unwrap();
            cache.get(&p, &f, map_file).unwrap();
        }
        assert_eq!(cache.maps.len(), CAPACITY);
    }
}
