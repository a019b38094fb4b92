use super::*;
use crate::storage::sim::SimFs;
use crate::storage::OpenMode;

fn manifest(logs: &[&str]) -> Manifest {
    Manifest {
        logs: logs.iter().map(|s| s.to_string()).collect(),
        accepted: Vec::new(),
    }
}

/// A log directory with a checkpoint file in it, on `fs`.
fn make_log(fs: &dyn Storage, wal_dir: &Path, name: &str) {
    let dir = log_dir(wal_dir, name);
    storage::create_dir_all_durably(fs, &dir).unwrap();
    let mut f = fs
        .open(&super::super::checkpoint::path(&dir), OpenMode::CREATE)
        .unwrap();
    f.write_at(0, b"x").unwrap();
}

#[test]
fn round_trips_and_any_damage_is_reported() {
    let mut m = manifest(&["core-0", "core-1", "legacy"]);
    m.accepted.push(AcceptedLoss {
        at_ms: 17,
        what: "log core-9 is missing\nsecond line".to_owned(),
    });
    let bytes = encode(&m);
    let back = decode(&bytes).unwrap();
    assert_eq!(back.logs, m.logs);
    assert_eq!(back.accepted[0].what, "log core-9 is missing second line");
    for i in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[i] ^= 0x01;
        assert!(decode(&bad).is_err(), "byte {i} flipped was accepted");
    }
    for cut in 0..bytes.len() {
        assert!(decode(&bytes[..cut]).is_err(), "cut at {cut} accepted");
    }
    // A valid CRC over text that is not a manifest is still refused.
    let body = "sluice wal manifest 1\nlog core-01\n";
    let text = format!("{body}crc {:08x}\n", crc32c::crc32c(body.as_bytes()));
    assert!(decode(text.as_bytes()).unwrap_err().contains("core-01"));
}

#[test]
fn a_missing_log_or_checkpoint_is_named_and_refused_unless_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let wal = tmp.path().join("wal");
    let fs = StdFs;
    // No manifest: adopted as found.
    assert_eq!(check_in(&fs, &wal).unwrap().manifest, None);
    for name in ["core-0", "core-1", "core-2"] {
        make_log(&fs, &wal, name);
    }
    write_in(&fs, &wal, &manifest(&["core-0", "core-1", "core-2"])).unwrap();
    assert!(check_in(&fs, &wal).is_ok());
    std::fs::remove_dir_all(wal.join("core-1")).unwrap();
    std::fs::remove_file(wal.join("core-2/CHECKPOINT")).unwrap();
    let e = check_in(&fs, &wal).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("log core-1 is missing"), "{text}");
    assert!(text.contains("core-2/CHECKPOINT does not exist"), "{text}");
    let e = reconcile_in(&fs, &wal, false, 5).unwrap_err();
    let ManifestError::Missing { missing, .. } = e else {
        panic!("{e}")
    };
    let kinds: Vec<_> = missing.iter().map(|m| (m.log.as_str(), m.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("core-1", MissingKind::LogDir),
            ("core-2", MissingKind::Checkpoint)
        ]
    );
    // Accepted: recorded, and the next start does not ask again.
    let r = reconcile_in(&fs, &wal, true, 5).unwrap();
    assert_eq!(r.accepted_now.len(), 2);
    assert_eq!(r.listed, ["core-0", "core-2"]);
    let written = finish_in(&fs, &wal, r, vec!["core-0".into(), "core-2".into()]).unwrap();
    assert_eq!(written.accepted.len(), 2);
    assert_eq!(written.accepted[0].at_ms, 5);
    make_log(&fs, &wal, "core-2"); // the start that accepted it wrote a new checkpoint
    let r = reconcile_in(&fs, &wal, false, 6).unwrap();
    assert!(r.accepted_now.is_empty());
    assert_eq!(read_in(&fs, &wal).unwrap().unwrap().accepted.len(), 2);
}

#[test]
fn a_damaged_manifest_is_refused_and_rebuilt_only_when_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let wal = tmp.path().join("wal");
    make_log(&StdFs, &wal, "core-0");
    std::fs::write(path(&wal), b"sluice wal manifest 1\nlog core-0\n").unwrap();
    let e = reconcile_in(&StdFs, &wal, false, 1).unwrap_err();
    assert!(e.to_string().contains("no crc line"), "{e}");
    let r = reconcile_in(&StdFs, &wal, true, 1).unwrap();
    assert_eq!(r.before, None);
    let m = finish_in(&StdFs, &wal, r, vec!["core-0".into()]).unwrap();
    assert!(m.accepted[0].what.contains("damaged manifest"), "{m:?}");
    assert_eq!(read_in(&StdFs, &wal).unwrap(), Some(m));
}

#[test]
fn accepted_losses_are_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let wal = tmp.path().join("wal");
    make_log(&StdFs, &wal, "core-0");
    let mut m = manifest(&["core-0", "core-5"]);
    m.accepted = (0..MAX_ACCEPTED as u64)
        .map(|i| AcceptedLoss {
            at_ms: i,
            what: "old".into(),
        })
        .collect();
    write_in(&StdFs, &wal, &m).unwrap();
    let r = reconcile_in(&StdFs, &wal, true, 999).unwrap();
    assert_eq!(r.manifest.accepted.len(), MAX_ACCEPTED);
    assert_eq!(r.manifest.accepted[0].at_ms, 1, "the oldest went");
    assert_eq!(r.manifest.accepted.last().unwrap().at_ms, 999);
}

/// A power cut at every step of a manifest rewrite leaves the old manifest or the new one,
/// never a damaged or missing one; once the write returned, the new one.
#[test]
fn a_rewrite_is_atomic_under_power_loss() {
    let root = Path::new("/sim");
    let wal = root.join("wal");
    let old = manifest(&["core-0"]);
    let new = manifest(&["core-0", "core-1"]);
    for cut_after in 1..=8u64 {
        let fs = SimFs::new(root, cut_after);
        storage::create_dir_all_durably(&fs, &wal).unwrap();
        write_in(&fs, &wal, &old).unwrap();
        fs.power_cut_after(cut_after);
        let done = write_in(&fs, &wal, &new).is_ok();
        fs.power_cut();
        fs.reboot();
        let got = read_in(&fs, &wal).unwrap().unwrap();
        if done {
            assert_eq!(got, new, "cut after {cut_after}");
        } else {
            assert!(got == old || got == new, "cut after {cut_after}: {got:?}");
        }
    }
}
