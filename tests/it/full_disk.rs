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

/// A tmpfs of `size` mounted at `dir` until dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        fs::create_dir_all(dir).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("mount");
        assert!(st.success(), "mount -t tmpfs failed: {st:?}");
        Tmpfs(dir.to_owned())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
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
    let _mount = Tmpfs::mount(&data, "16m");
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
    let opts = Opts::config(&config).workers(2);
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
