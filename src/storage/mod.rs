//! The storage interface: every file operation of the WAL and of the DLQ's batch store
//! (`dispatch::dlq::store`) goes through [`Storage`], so durability can be tested against a
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
//! The memory-mapped write path ([`WritePath::Mmap`]) exists in [`StdFs`] only; the
//! simulation gives every segment `pwrite` semantics (a map's `msync` of a range is modelled
//! by `sync_data` of the whole file, which makes at least as much durable).
//!
//! A leaf below the WAL: it names no WAL type. The segment-file seam the WAL writes through
//! ([`SegmentFile`], [`WritePath`]) is defined here (`interface.rs`, with [`Storage`]), and the
//! one `unsafe` of both (memory maps, `fallocate`, `flock`) is confined to `sys.rs`, which alone
//! opts back in. This file only declares and re-exports (and builds [`std_fs`]).
#![deny(unsafe_code)]

mod interface;
pub mod map_cache;
pub mod segment;
pub mod sim;
mod stdfs;
mod sys;

pub use interface::{
    create_dir_all_durably, replace_file_durably, Contents, LockGuard, OpenMode, SegmentFile,
    Storage, StorageFile, WritePath,
};
use std::sync::Arc;
pub use stdfs::StdFs;

/// The real file system, shared.
pub fn std_fs() -> Arc<dyn Storage> {
    Arc::new(StdFs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::path::Path;

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
