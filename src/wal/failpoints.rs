//! Storage failpoints for the fault-injection suite (`--features failpoints`; off by default).
//!
//! `SLUICE_FAILPOINTS=<path>` (read once, when the server opens its WAL) names a *control file*.
//! Every segment file operation reads it and injects the fault it names, so a test can switch
//! faults on and off while the server runs:
//!
//! | control file | effect |
//! |---|---|
//! | empty, missing, `off` | none |
//! | `enospc` | `write_at` and `allocate` fail with `ENOSPC`; nothing is written |
//! | `eio-write` | `write_at` writes the first half of the buffer, then fails with `EIO` |
//! | `eio-sync` | `sync` fails with `EIO` (the write itself reached the page cache) |
//! | `short-write` | `write_at` writes the first half and reports `WriteZero` (a short `pwrite`) |
//! | `emfile-readback` | the pump's read-back of a log (`WalTail` opened when its in-memory window overflows) fails with `EMFILE`, as at the descriptor limit; segment files are unaffected |
//! | `eio-sync-once` | the next `sync` fails with `EIO`, and every later one succeeds (until the file says something else and then `eio-sync-once` again). The failed sync also *drops the range it was asked to make durable* (overwrites it with zeros in the page cache), as Linux may after a failed writeback ("fsyncgate": the dirty pages are marked clean and lost, and the next `fdatasync` reports success) |
//!
//! Each injected fault is counted ([`injected`]) and logged to stderr as
//! `sluice: failpoint <mode> injected (#N)`. This module only wraps [`SegmentFile`] through the
//! existing seam ([`Wal::set_file_wrapper`]); the writer's handling of the errors is the code
//! under test.
#![forbid(unsafe_code)]

use super::segment::SegmentFile;
use super::Wal;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The environment variable naming the control file.
pub const ENV: &str = "SLUICE_FAILPOINTS";

/// Faults injected so far (`Relaxed`: a counter).
static INJECTED: AtomicU64 = AtomicU64::new(0);
/// True once `eio-sync-once` has failed a sync; false again when the control file says anything
/// else. `Relaxed`: the flag is the whole message (each log has one owner; a test uses one log).
static SYNC_ONCE_FIRED: AtomicBool = AtomicBool::new(false);

/// Faults injected so far in this process.
pub fn injected() -> u64 {
    INJECTED.load(Ordering::Relaxed)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    Enospc,
    EioWrite,
    EioSync,
    ShortWrite,
    EioSyncOnce,
    EmfileReadback,
}

impl Mode {
    fn parse(text: &str) -> Mode {
        match text.trim() {
            "enospc" => Mode::Enospc,
            "eio-write" => Mode::EioWrite,
            "eio-sync" => Mode::EioSync,
            "short-write" => Mode::ShortWrite,
            "eio-sync-once" => Mode::EioSyncOnce,
            "emfile-readback" => Mode::EmfileReadback,
            _ => Mode::Off,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Enospc => "enospc",
            Mode::EioWrite => "eio-write",
            Mode::EioSync => "eio-sync",
            Mode::ShortWrite => "short-write",
            Mode::EioSyncOnce => "eio-sync-once",
            Mode::EmfileReadback => "emfile-readback",
        }
    }
}

/// Installs the failpoint wrapper on `wal` if [`ENV`] is set; returns the control file path.
pub fn install_from_env(wal: &mut Wal) -> Option<PathBuf> {
    let control = PathBuf::from(std::env::var_os(ENV)?);
    eprintln!(
        "sluice: failpoints enabled, control file {}",
        control.display()
    );
    let path = control.clone();
    wal.set_file_wrapper(Box::new(move |inner| {
        Box::new(Failpoints {
            inner,
            control: path.clone(),
        })
    }));
    Some(control)
}

/// `Some(EMFILE)` while the control file named by [`ENV`] says `emfile-readback` (counted and
/// logged as every injected fault); `None` otherwise or without [`ENV`].
pub fn readback_open_fault() -> Option<io::Error> {
    let control = PathBuf::from(std::env::var_os(ENV)?);
    let mode = std::fs::read_to_string(control)
        .map(|t| Mode::parse(&t))
        .unwrap_or(Mode::Off);
    (mode == Mode::EmfileReadback)
        .then(|| Failpoints::inject(mode, io::Error::from_raw_os_error(libc::EMFILE)))
}

struct Failpoints {
    inner: Box<dyn SegmentFile>,
    control: PathBuf,
}

impl Failpoints {
    fn mode(&self) -> Mode {
        std::fs::read_to_string(&self.control)
            .map(|t| Mode::parse(&t))
            .unwrap_or(Mode::Off)
    }

    fn inject(mode: Mode, err: io::Error) -> io::Error {
        let n = INJECTED.fetch_add(1, Ordering::Relaxed) + 1;
        eprintln!("sluice: failpoint {} injected (#{n})", mode.name());
        err
    }
}

impl SegmentFile for Failpoints {
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        match self.mode() {
            Mode::Enospc => Err(Self::inject(
                Mode::Enospc,
                io::Error::from_raw_os_error(libc::ENOSPC),
            )),
            m @ (Mode::EioWrite | Mode::ShortWrite) => {
                self.inner.write_at(offset, &buf[..buf.len() / 2])?;
                let err = if m == Mode::EioWrite {
                    io::Error::from_raw_os_error(libc::EIO)
                } else {
                    io::Error::new(io::ErrorKind::WriteZero, "short write")
                };
                Err(Self::inject(m, err))
            }
            Mode::Off | Mode::EioSync | Mode::EioSyncOnce | Mode::EmfileReadback => {
                self.inner.write_at(offset, buf)
            }
        }
    }

    fn sync(&mut self, offset: u64, len: u64) -> io::Result<()> {
        let mode = self.mode();
        if mode != Mode::EioSyncOnce {
            SYNC_ONCE_FIRED.store(false, Ordering::Relaxed);
        }
        match mode {
            Mode::EioSync => Err(Self::inject(
                Mode::EioSync,
                io::Error::from_raw_os_error(libc::EIO),
            )),
            Mode::EioSyncOnce if !SYNC_ONCE_FIRED.swap(true, Ordering::Relaxed) => {
                // The kernel lost the pages of the failed writeback: what the range held is gone
                // from the cache (zeros, as preallocated space reads), and nobody is told again.
                let zeros = vec![0u8; 64 * 1024];
                let mut off = offset;
                while off < offset + len {
                    let n = (offset + len - off).min(zeros.len() as u64) as usize;
                    self.inner.write_at(off, &zeros[..n])?;
                    off += n as u64;
                }
                Err(Self::inject(
                    Mode::EioSyncOnce,
                    io::Error::from_raw_os_error(libc::EIO),
                ))
            }
            _ => self.inner.sync(offset, len),
        }
    }

    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.raw_fd()
    }

    /// A ring commit meets the same faults: a write fault is done here instead of the ring's
    /// write, and a sync fault replaces the ring's successful sync.
    fn injected_write(&mut self, offset: u64, buf: &[u8]) -> Option<io::Result<()>> {
        match self.mode() {
            Mode::Enospc | Mode::EioWrite | Mode::ShortWrite => Some(self.write_at(offset, buf)),
            Mode::Off | Mode::EioSync | Mode::EioSyncOnce | Mode::EmfileReadback => None,
        }
    }

    fn injected_sync(&mut self, offset: u64, len: u64) -> io::Result<()> {
        match self.mode() {
            // `sync` injects the fault (a second, real sync is harmless once it has fired).
            Mode::EioSync | Mode::EioSyncOnce => self.sync(offset, len),
            _ => {
                SYNC_ONCE_FIRED.store(false, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    fn allocate(&mut self, len: u64) -> io::Result<()> {
        match self.mode() {
            Mode::Enospc => Err(Self::inject(
                Mode::Enospc,
                io::Error::from_raw_os_error(libc::ENOSPC),
            )),
            _ => self.inner.allocate(len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Mode;

    #[test]
    fn modes_parse_and_unknown_is_off() {
        for m in [
            Mode::Off,
            Mode::Enospc,
            Mode::EioWrite,
            Mode::EioSync,
            Mode::ShortWrite,
            Mode::EioSyncOnce,
            Mode::EmfileReadback,
        ] {
            assert_eq!(Mode::parse(&format!("{}\n", m.name())), m);
        }
        assert_eq!(Mode::parse("bogus"), Mode::Off);
        assert_eq!(Mode::parse(""), Mode::Off);
    }
}
