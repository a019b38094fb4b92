//! A node whose disk is 100% full restarts and drains: every file the WAL writes later (segments,
//! both `CHECKPOINT` slots) has its blocks when it is created, so nothing a restart or a
//! delivery writes needs free space. The data dir is a 16 MiB tmpfs this test mounts (root
//! only), filled to the last byte while the server holds undelivered events; the server is
//! killed, restarted on the full disk, and delivers every event once the destination answers.

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::downstream::{Behavior, Downstream};
use crate::support::*;

/// A tmpfs of `size` mounted at `dir` until dropped, with the `mount` found on `PATH` (and the
/// `umount` beside it).
struct Tmpfs {
    dir: PathBuf,
    umount: PathBuf,
}

impl Tmpfs {
    /// `None` (a named skip; a failure under `--require-all`) without `mount`.
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        let mount = require_tool("mount", "mount")?;
        fs::create_dir_all(dir).unwrap();
        let st = Command::new(&mount)
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("mount");
        assert!(st.success(), "mount -t tmpfs failed: {st:?}");
        Some(Tmpfs {
            dir: dir.to_owned(),
            umount: mount.with_file_name("umount"),
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new(&self.umount).arg("-l").arg(&self.dir).status();
    }
}

/// Token buckets out of the way: the fills post ~2,000 requests as fast as the server answers,
/// past the default buckets (1,024 plus 1,024/s) on a fast run, and a refusal must then be the
/// disk's (`wal_unavailable`), not `ingest_saturated`.
fn wide_buckets(o: Opts) -> Opts {
    o.env(ENV_GLOBAL_CAPACITY, "1000000")
        .env(ENV_PER_SOURCE_CAPACITY, "1000000")
        .env(ENV_REFILL_PER_SEC, "1000000")
}

/// Fills the file system holding `dir` to the last byte; returns the bytes written.
fn fill(dir: &Path) -> u64 {
    let mut f = fs::File::create(dir.join("filler")).unwrap();
    let mut written = 0u64;
    let mut chunk = 1 << 16;
    while chunk > 0 {
        match f.write(&vec![0xA5u8; chunk]) {
            Ok(0) => chunk /= 2,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => chunk /= 2,
            Err(e) => panic!("filling: {e}"),
        }
    }
    let probe = fs::write(dir.join("probe"), b"x");
    assert!(
        matches!(&probe, Err(e) if e.raw_os_error() == Some(libc::ENOSPC)),
        "the disk is not full: {probe:?}"
    );
    written
}

#[test]
fn a_node_whose_disk_is_full_restarts_and_drains() {
    let Some(()) = require_root("it mounts a 16 MiB tmpfs") else {
        return;
    };
    let root = temp_root();
    let data = root.path().join("data");
    let Some(_mount) = Tmpfs::mount(&data, "16m") else {
        return;
    };
    let ds = Downstream::start(Behavior {
        status: 503,
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let config = format!(
        "[server]\nmax_body_bytes = 65536\n[wal]\nsegment_bytes = 1048576\n\n\
         [[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n\n\
         [[destinations]]\nuri = \"{uri}\"\n\
         retry = {{ max_attempts = 100, base = \"200ms\", cap = \"1s\" }}\n\
         circuit = {{ failures = 3, open_for = \"1s\", on_open = \"hold\" }}\n"
    );
    let opts = wide_buckets(Opts::config(&config).workers(2));
    let mut server =
        Server::start_in(root.clone(), opts).unwrap_or_else(|f| panic!("{}", f.stderr));
    let mut ids = HashSet::new();
    for i in 0..40 {
        ids.insert(server.ingest("/hooks/t", format!("{{\"n\":{i}}}").as_bytes()));
    }
    assert!(fill(&data) > 0);
    // Still acknowledged: the segments are preallocated.
    for i in 40..50 {
        ids.insert(server.ingest("/hooks/t", format!("{{\"n\":{i}}}").as_bytes()));
    }
    // Checkpoints fall due (once a second) and are written on the full disk.
    std::thread::sleep(Duration::from_millis(1500));
    let (_, samples) = scrape(&server);
    assert_eq!(
        sample_value(&samples, "sluice_wal_checkpoint_failures_total", &[]),
        0.0,
        "{}",
        server.stderr()
    );
    server.sigkill();

    server
        .try_restart()
        .unwrap_or_else(|f| panic!("no restart on a full disk: {}", f.stderr));
    ds.set(Behavior::default());
    let delivered = |seen: &[crate::downstream::Seen]| {
        seen.iter()
            .filter(|s| s.status == 200)
            .map(|s| s.webhook_id.clone())
            .collect::<HashSet<_>>()
    };
    let all = ds.wait(Duration::from_secs(90), |seen| delivered(seen) == ids);
    assert!(
        all,
        "{} of {} delivered after the restart on a full disk; stderr:\n{}",
        delivered(&ds.seen()).len(),
        ids.len(),
        server.stderr()
    );
    let (_, samples) = scrape(&server);
    assert_eq!(
        sample_value(&samples, "sluice_wal_checkpoint_failures_total", &[]),
        0.0
    );
    server.stop();
}

/// CPU seconds (user + system) process `pid` used so far, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: i32) -> f64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf reads a constant of the system; no memory is shared.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

/// Issue 40 item 1: a full disk does not spin a core. 32 MiB tmpfs, 2 MiB segments, a trigger
/// with a handler whose calls are held: events are posted until the logs refuse `503
/// wal_unavailable` (large ones, then small ones into the last bytes), then the handler
/// answers, so the deliveries' `Done` records find no room, and nothing else comes for 10 s:
/// the process uses under 5% of a core (only the logs' probes write, once a second). Then space
/// is freed: every acknowledged event is delivered once.
#[test]
fn a_full_disk_does_not_spin_and_loses_nothing_when_space_returns() {
    let Some(()) = require_root("it mounts a 32 MiB tmpfs") else {
        return;
    };
    let root = temp_root();
    let data = root.path().join("data");
    let Some(_mount) = Tmpfs::mount(&data, "32m") else {
        return;
    };
    // Ballast, freed at the end to give the logs room again.
    fs::write(data.join("ballast"), vec![0x5Au8; 6 << 20]).unwrap();
    let ds = Downstream::start(Behavior::default());
    ds.hold(true);
    let uri = ds.uri("/sink");
    let config = format!(
        "[server]\nmax_body_bytes = 65536\n[wal]\nsegment_bytes = 2097152\n\n\
         [[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n\n\
         [[destinations]]\nuri = \"{uri}\"\n\
         retry = {{ max_attempts = 100, base = \"200ms\", cap = \"1s\" }}\n"
    );
    let opts = wide_buckets(Opts::config(&config).workers(2));
    let mut server =
        Server::start_in(root.clone(), opts).unwrap_or_else(|f| panic!("{}", f.stderr));
    let mut ids = HashSet::new();
    // Four connections, so both cores' logs fill: 16-KiB events until 40 refusals in a row,
    // then small ones for the last bytes, until 40 refusals in a row again (at most 4,000
    // posts each).
    let mut clients: Vec<Client> = (0..4)
        .map(|_| Client::connect(server.addr()).expect("connect"))
        .collect();
    for size in [16 << 10, 0] {
        let body = "x".repeat(size);
        let mut refused = 0;
        for i in 0..4_000 {
            let r = clients[i % 4].post("/hooks/t", format!("{i}{body}").as_bytes(), &[]);
            match r.status {
                202 => {
                    ids.insert(accepted(&r).0);
                    refused = 0;
                }
                503 => {
                    assert_eq!(r.json()["reason"], "wal_unavailable", "{}", r.text());
                    refused += 1;
                    if refused == 40 {
                        break;
                    }
                }
                s => panic!("unexpected {s}: {}", r.text()),
            }
        }
        assert_eq!(refused, 40, "the disk never filled: {} accepted", ids.len());
    }
    drop(clients);
    // The held calls are answered: their `Done` records find the logs full.
    ds.hold(false);
    let pid = server.pid().expect("running");
    let before = cpu_seconds(pid);
    std::thread::sleep(Duration::from_secs(10));
    let used = cpu_seconds(pid) - before;
    let (_, samples) = scrape(&server);
    let failures: f64 = ["enospc", "eio", "other"]
        .iter()
        .map(|r| {
            samples
                .iter()
                .filter(|s| {
                    s.name == "sluice_wal_commit_failures_total" && s.label("reason") == Some(*r)
                })
                .map(|s| s.value)
                .sum::<f64>()
        })
        .sum();
    eprintln!(
        "{} accepted; idle on the full disk for 10 s: {used:.2} CPU s ({:.1}% of a core), \
         {failures} commit failures counted",
        ids.len(),
        used * 10.0
    );
    assert!(used < 0.5, "{used:.2} CPU s in 10 s on a full disk");
    assert!(failures > 0.0, "the failures are counted");
    fs::remove_file(data.join("ballast")).unwrap();
    let delivered = |seen: &[crate::downstream::Seen]| {
        seen.iter()
            .filter(|s| s.status == 200)
            .map(|s| s.webhook_id.clone())
            .collect::<Vec<_>>()
    };
    let all = ds.wait(Duration::from_secs(60), |seen| {
        let d = delivered(seen);
        ids.iter().all(|id| d.contains(id))
    });
    let d = delivered(&ds.seen());
    assert!(
        all,
        "{} of {} delivered after space returned; stderr:\n{}",
        ids.iter().filter(|id| d.contains(id)).count(),
        ids.len(),
        server.stderr()
    );
    let unique: HashSet<&String> = d.iter().collect();
    assert_eq!(unique.len(), d.len(), "an event delivered twice");
    assert!(wait_until(Duration::from_secs(10), || server
        .get("/readyz")
        .status
        == 200));
    server.stop();
}
