//! What one durable write costs on a disk, by method: wall time, CPU of the whole process
//! (io-wq workers included), busy time of the core it is pinned to (the kernel's work outside
//! the process too: a workqueue's cache flush, interrupts; noise from other processes on that
//! core too) and the process's context switches, per 32 KiB group commit written over
//! already-written blocks (as the WAL's `pwrite` path writes, zeros ahead). The numbers behind
//! BENCHMARKS.md row C1 (the earlier runs: benches/LOG.md) and the choice of commit path.
//!
//! ```text
//! cargo run --release --example sync_probe -- [DIR] [COMMITS]     # default: /tmp, 3000
//! taskset -c 1 target/release/examples/sync_probe /var/lib/sluice 3000
//! ```
//!
//! Methods (each writes its own 64 MiB file in DIR, removed after):
//! - `pwrite+fdatasync`: the commit helper today (a blocking write into the page cache, then
//!   a blocking `fdatasync`);
//! - `ring write->fsync`: `[wal] commit = "ring"` (a `WRITE` linked to `FSYNC(DATASYNC)` on
//!   io_uring: both run in io-wq workers);
//! - `O_DIRECT pwrite+fdatasync`, `O_DIRECT pwritev2(RWF_DSYNC)`, `ring O_DIRECT write(RWF_DSYNC)`:
//!   the page cache bypassed (a block-aligned write; the last is issued from the ring's own
//!   `io_uring_enter`, no io-wq worker).
//!
//! Bounded: COMMITS writes per method (at most 100,000), each file 64 MiB.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use io_uring::{opcode, types, IoUring};

const COMMIT: usize = 32 * 1024;
const FILE: u64 = 64 << 20;
const ALIGN: usize = 4096;

#[derive(Clone, Copy, PartialEq)]
enum Method {
    Buffered,
    RingBuffered,
    DirectFdatasync,
    DirectDsync,
    RingDirectDsync,
}

impl Method {
    const ALL: [Method; 5] = [
        Method::Buffered,
        Method::RingBuffered,
        Method::DirectFdatasync,
        Method::DirectDsync,
        Method::RingDirectDsync,
    ];

    fn name(self) -> &'static str {
        match self {
            Method::Buffered => "pwrite+fdatasync",
            Method::RingBuffered => "ring write->fsync",
            Method::DirectFdatasync => "O_DIRECT pwrite+fdatasync",
            Method::DirectDsync => "O_DIRECT pwritev2(RWF_DSYNC)",
            Method::RingDirectDsync => "ring O_DIRECT write(RWF_DSYNC)",
        }
    }

    fn direct(self) -> bool {
        matches!(
            self,
            Method::DirectFdatasync | Method::DirectDsync | Method::RingDirectDsync
        )
    }
}

/// An `ALIGN`-aligned buffer of `COMMIT` bytes of `x` (`O_DIRECT` needs aligned memory).
struct Aligned(*mut u8);

impl Aligned {
    fn layout() -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(COMMIT, ALIGN).expect("a valid layout")
    }

    fn new() -> Aligned {
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc(Self::layout()) };
        assert!(!p.is_null(), "out of memory");
        // SAFETY: `p` points at `COMMIT` bytes this buffer owns (filled before any read).
        unsafe { std::ptr::write_bytes(p, b'x', COMMIT) };
        Aligned(p)
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.0, Self::layout()) }
    }
}

/// (CPU µs of the process, voluntary + involuntary switches of all its threads).
fn usage() -> (f64, u64) {
    // SAFETY: `getrusage` fills the zeroed struct it is given.
    let r = unsafe {
        let mut r: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut r);
        r
    };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    (
        us(r.ru_utime) + us(r.ru_stime),
        (r.ru_nvcsw + r.ru_nivcsw) as u64,
    )
}

/// Busy time (user, nice, system, irq, softirq) in µs of the one CPU this process is pinned
/// to, or of all CPUs if it is not pinned to one: it counts the kernel's work done outside the
/// process (a workqueue's cache flush, interrupts) that the process's own CPU time misses.
fn core_busy() -> f64 {
    // SAFETY: `sched_getaffinity` fills the zeroed set it is given.
    let one_cpu = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let ok = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0;
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect();
        (ok && cpus.len() == 1).then(|| cpus[0])
    };
    let want = one_cpu.map_or("cpu".to_string(), |c| format!("cpu{c}"));
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    // SAFETY: a plain query.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    stat.lines()
        .find(|l| l.split_whitespace().next() == Some(want.as_str()))
        .map_or(0.0, |l| {
            let f: Vec<f64> = l
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq ...
            let busy = [0, 1, 2, 5, 6]
                .iter()
                .filter_map(|&i| f.get(i))
                .sum::<f64>();
            busy * 1e6 / hz
        })
}

fn check(what: &str, res: isize) -> std::io::Result<()> {
    if res == COMMIT as isize {
        Ok(())
    } else if res < 0 {
        Err(std::io::Error::other(format!(
            "{what}: {}",
            std::io::Error::last_os_error()
        )))
    } else {
        Err(std::io::Error::other(format!(
            "{what}: short write {res} of {COMMIT}"
        )))
    }
}

fn prepare(path: &Path) -> std::io::Result<()> {
    // Written (not only allocated) and synced: the commits overwrite written blocks.
    let mut f = File::create(path)?;
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..FILE >> 20 {
        f.write_all(&zeros)?;
    }
    f.sync_all()
}

/// Per commit: (wall µs, process CPU µs, core busy µs, switches).
fn run(method: Method, path: &Path, commits: usize) -> std::io::Result<(f64, f64, f64, f64)> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true);
    if method.direct() {
        opts.custom_flags(libc::O_DIRECT);
    }
    let file = opts.open(path)?;
    let fd = file.as_raw_fd();
    let buf = Aligned::new();
    let mut ring: IoUring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(8)?;
    let (cpu0, sw0) = usage();
    let busy0 = core_busy();
    let t0 = Instant::now();
    let mut off = 0u64;
    for _ in 0..commits {
        match method {
            Method::Buffered | Method::DirectFdatasync => {
                // SAFETY: `buf` holds `COMMIT` bytes and outlives the call.
                let n = unsafe { libc::pwrite(fd, buf.0.cast(), COMMIT, off as i64) };
                check("pwrite", n)?;
                // SAFETY: a plain syscall on an open descriptor.
                if unsafe { libc::fdatasync(fd) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Method::DirectDsync => {
                let iov = libc::iovec {
                    iov_base: buf.0.cast(),
                    iov_len: COMMIT,
                };
                // SAFETY: `iov` points at `COMMIT` bytes that outlive the call.
                let n = unsafe { libc::pwritev2(fd, &iov, 1, off as i64, libc::RWF_DSYNC) };
                check("pwritev2", n as isize)?;
            }
            Method::RingBuffered | Method::RingDirectDsync => {
                let write = opcode::Write::new(types::Fd(fd), buf.0, COMMIT as u32).offset(off);
                let entries = if method == Method::RingBuffered {
                    let w = write
                        .build()
                        .flags(io_uring::squeue::Flags::IO_LINK)
                        .user_data(1);
                    let s = opcode::Fsync::new(types::Fd(fd))
                        .flags(types::FsyncFlags::DATASYNC)
                        .build()
                        .user_data(2);
                    vec![w, s]
                } else {
                    vec![write.rw_flags(libc::RWF_DSYNC).build().user_data(1)]
                };
                for e in &entries {
                    // SAFETY: the entries point at `buf`, which outlives their completions
                    // (waited for below before the next turn or the buffer's drop).
                    unsafe { ring.submission().push(e) }
                        .map_err(|_| std::io::Error::other("submission queue full"))?;
                }
                ring.submit_and_wait(entries.len())?;
                for c in ring.completion() {
                    if c.result() < 0 {
                        let e = std::io::Error::from_raw_os_error(-c.result());
                        return Err(std::io::Error::other(format!("ring: {e}")));
                    }
                    if c.user_data() == 1 {
                        check("ring write", c.result() as isize)?;
                    }
                }
            }
        }
        off = (off + COMMIT as u64) % FILE;
    }
    let wall = t0.elapsed().as_secs_f64() * 1e6 / commits as f64;
    let (cpu1, sw1) = usage();
    let busy1 = core_busy();
    let n = commits as f64;
    Ok((
        wall,
        (cpu1 - cpu0) / n,
        (busy1 - busy0) / n,
        (sw1 - sw0) as f64 / n,
    ))
}

fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "/tmp".into()));
    let commits = match args.next().map(|s| s.parse::<usize>()) {
        None => 3000,
        Some(Ok(n)) if (1..=100_000).contains(&n) => n,
        Some(_) => {
            eprintln!("sync_probe: COMMITS must be a number from 1 to 100000");
            return std::process::ExitCode::from(2);
        }
    };
    println!(
        "{} commits of {} KiB per method in {} (overwriting written blocks)",
        commits,
        COMMIT / 1024,
        dir.display()
    );
    println!(
        "{:32} {:>9} {:>9} {:>10} {:>9}",
        "method", "wall us", "cpu us", "core us", "switches"
    );
    let mut failed = false;
    for method in Method::ALL {
        let path = dir.join(format!("sluice-sync-probe-{}.bin", std::process::id()));
        let res = prepare(&path).and_then(|()| run(method, &path, commits));
        let _ = std::fs::remove_file(&path);
        match res {
            Ok((wall, cpu, busy, sw)) => println!(
                "{:32} {wall:>9.0} {cpu:>9.1} {busy:>10.1} {sw:>9.2}",
                method.name()
            ),
            Err(e) => {
                failed = true;
                println!("{:32} failed: {e}", method.name());
            }
        }
    }
    if failed {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    }
}
