//! Unit tests of the simulated disk (`sim.rs`).
use super::*;

fn root() -> &'static Path {
    Path::new("/sim")
}

#[test]
fn synced_data_and_entries_survive_and_unsynced_entries_do_not() {
    let fs = SimFs::new(root(), 7);
    let a = root().join("a");
    let mut f = fs.open(&a, OpenMode::CREATE).unwrap();
    f.write_at(0, b"hello").unwrap();
    f.sync_data().unwrap();
    fs.reboot();
    assert!(fs.open(&a, OpenMode::EXISTING).is_err(), "entry not synced");
    let mut f = fs.open(&a, OpenMode::CREATE).unwrap();
    f.write_at(0, b"hello").unwrap();
    f.sync_data().unwrap();
    fs.sync_dir(root()).unwrap();
    fs.rename(&a, &root().join("b")).unwrap();
    fs.reboot();
    assert_eq!(fs.read(&a).unwrap(), b"hello", "rename not synced: lost");
    assert!(fs.read(&root().join("b")).is_err());
}

#[test]
fn unsynced_sectors_are_kept_or_dropped_independently() {
    let mut kept = [0u32; 4];
    for seed in 0..64 {
        let fs = SimFs::new(root(), seed);
        let p = root().join("f");
        let mut f = fs.open(&p, OpenMode::CREATE).unwrap();
        f.allocate(4 * SECTOR).unwrap();
        f.sync_data().unwrap();
        fs.sync_dir(root()).unwrap();
        f.write_at(0, &[0xAB; 4 * SECTOR as usize]).unwrap();
        fs.reboot();
        let got = fs.read(&p).unwrap();
        assert_eq!(got.len(), 4 * SECTOR as usize);
        for (i, k) in kept.iter_mut().enumerate() {
            let sec = &got[i * SECTOR as usize..(i + 1) * SECTOR as usize];
            assert!(sec.iter().all(|&b| b == 0) || sec.iter().all(|&b| b == 0xAB));
            *k += u32::from(sec[0] == 0xAB);
        }
    }
    assert!(kept.iter().all(|&k| (10..=54).contains(&k)), "{kept:?}");
}

#[test]
fn a_cut_fails_the_nth_operation_and_everything_after_it() {
    let fs = SimFs::new(root(), 1);
    let mut f = fs.open(&root().join("f"), OpenMode::CREATE).unwrap();
    fs.power_cut_after(2);
    f.write_at(0, b"x").unwrap();
    assert!(f.sync_data().is_err());
    assert!(fs.is_cut());
    assert!(f.write_at(0, b"y").is_err());
    assert!(fs.list(root()).is_err());
    fs.reboot();
    assert!(!fs.is_cut());
    assert!(fs.list(root()).unwrap().is_empty());
}

#[test]
fn read_at_reads_written_bytes_then_the_zero_tail_then_stops_at_the_size() {
    let fs = SimFs::new(root(), 3);
    let mut f = fs.open(&root().join("f"), OpenMode::CREATE).unwrap();
    f.write_at(0, b"abcdef").unwrap();
    f.allocate(16).unwrap(); // bytes 6..16 are a zero tail, not held in memory
    let mut buf = [0xFFu8; 8];
    assert_eq!(f.read_at(2, &mut buf).unwrap(), 8);
    assert_eq!(&buf, b"cdef\0\0\0\0");
    let mut buf = [0xFFu8; 8];
    assert_eq!(
        f.read_at(10, &mut buf).unwrap(),
        6,
        "past the data, inside the size"
    );
    assert_eq!(buf, [0, 0, 0, 0, 0, 0, 0xFF, 0xFF]);
    assert_eq!(f.read_at(16, &mut buf).unwrap(), 0);
    assert_eq!(f.read_at(u64::MAX, &mut buf).unwrap(), 0);
}

#[test]
fn open_creates_only_when_asked_and_reports_what_is_in_the_way() {
    let fs = SimFs::new(root(), 4);
    let a = root().join("a");
    let err = fs.open(&a, OpenMode::EXISTING).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
    assert!(err.to_string().contains("/sim/a"), "{err}");
    fs.open(&a, OpenMode::CREATE)
        .unwrap()
        .write_at(0, b"x")
        .unwrap();
    assert_eq!(
        fs.read(&a).unwrap(),
        b"x",
        "CREATE of an existing file keeps it"
    );
    let err = fs.open(&a, OpenMode::NEW).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
    let err = fs.open(&root().join("no/b"), OpenMode::CREATE).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound, "missing parent");
    fs.create_dir_all(&root().join("d")).unwrap();
    let err = fs.open(&root().join("d"), OpenMode::CREATE).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "a directory");
    assert_eq!(fs.list(root()).unwrap(), ["a", "d"]);
}

#[test]
fn a_reboot_with_the_same_seed_tears_the_same_sectors() {
    let image = |seed| {
        let fs = SimFs::new(root(), seed);
        for i in 0..8 {
            let p = root().join(format!("f{i}"));
            let mut f = fs.open(&p, OpenMode::CREATE).unwrap();
            f.sync_data().unwrap();
            fs.sync_dir(root()).unwrap();
            f.write_at(0, &[0xAB; 8 * SECTOR as usize]).unwrap();
        }
        fs.reboot();
        (0..8)
            .map(|i| fs.read(&root().join(format!("f{i}"))).unwrap())
            .collect::<Vec<_>>()
    };
    for seed in 0..4 {
        assert_eq!(image(seed), image(seed), "seed {seed}");
    }
}
