//! The only `unsafe` of storage and the WAL: memory maps of segment files, `fallocate` and `flock`.
//!
//! # Contract for every map created here
//!
//! A memory map hands out `&[u8]` / `&mut [u8]` over file contents, which Rust requires not to
//! change behind the reference's back, and which turn into `SIGBUS` if the file shrinks under
//! them. The WAL upholds this as follows:
//!
//! * A segment file is only ever written by the one owner of its log (the core's commit helper,
//!   or the core itself with `commit = "ring"`), either through `pwrite` or through *the*
//!   `MmapMut` of that file (never both for one file at a time).
//! * Segment files are never truncated or shrunk while open: they are preallocated to their full
//!   size before being mapped for writing; retention only unlinks whole segments (a live map keeps
//!   the inode alive).
//! * Read-only maps are taken by recovery before the writer starts, by the offline tools (`sluice
//!   wal verify|inspect`, documented to run against a stopped server or to tolerate reading bytes
//!   still being appended past the durable LSN), and by readers that only look at bytes below the
//!   published durable LSN, which the writer never rewrites.
//!
//! Anyone else modifying a segment file while sluice runs (an editor, `truncate`) breaks the
//! contract; that is documented in the README as unsupported, as for any database file.
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

use memmap2::{Advice, Mmap, MmapMut, MmapOptions};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Maps all of `file` read-only. An empty file yields `None` (zero-length maps are not allowed).
pub fn map_read(file: &File) -> io::Result<Option<Mmap>> {
    if file.metadata()?.len() == 0 {
        return Ok(None);
    }
    // SAFETY: see the module contract: the file is a WAL segment that is not shrunk while mapped
    // and whose mapped bytes are not rewritten by anyone while the map is read.
    let map = unsafe { MmapOptions::new().map(file)? };
    Ok(Some(map))
}

/// Maps the first `len` bytes of `file` read-write, with `MADV_RANDOM`.
///
/// `MADV_RANDOM` turns off read-ahead / fault-around for the map, so that touching one page of
/// the segment does not pull (and later dirty-track) its neighbours: without it, `msync` of a
/// 1 KiB record was measured writing back 17–978 KiB (see DESIGN.md, "Storage").
pub fn map_write(file: &File, len: usize) -> io::Result<MmapMut> {
    // SAFETY: see the module contract: the file has been preallocated to at least `len` bytes,
    // is never shrunk, and this map is its only writer.
    let map = unsafe { MmapOptions::new().len(len).map_mut(file)? };
    map.advise(Advice::Random)?;
    Ok(map)
}

/// Reserves disk blocks for bytes `[0, len)` of `file` (`fallocate(2)`, mode 0, which also
/// extends the file size), so later writes cannot fail with `ENOSPC` and mmap writes cannot
/// `SIGBUS`. Falls back to `set_len` (a sparse extension) where the filesystem does not support
/// `fallocate`.
pub fn allocate(file: &File, len: u64) -> io::Result<()> {
    let Ok(off_len) = libc::off_t::try_from(len) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "segment size exceeds off_t",
        ));
    };
    loop {
        // SAFETY: `fallocate` only reads its integer arguments; the descriptor is owned by `file`
        // and stays open for the duration of the call.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, off_len) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {
                if file.metadata()?.len() < len {
                    file.set_len(len)?;
                }
                return Ok(());
            }
            _ => return Err(err),
        }
    }
}

/// Takes an exclusive, non-blocking `flock` on `file`. `Ok(false)` if another open file
/// description (another process, or another `open` in this one) holds it. The lock lives as long
/// as `file` stays open and is released by the kernel when the process dies, even by SIGKILL.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: `flock` only reads the descriptor number, which `file` keeps open for the whole
    // call; it touches no memory of ours.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(err)
    }
}
