use super::*;
use crate::storage::StdFs;
use crate::wal::format::tests::{sample_event, Rng};
use crate::wal::segment::list_segments;
use crate::wal::{
    min_segment_bytes_for, open, recover_dispatch, DoneEntry, DoneRecord, DoneStatus, Durability,
    Record, WalConfig,
};

fn tally(accepted: u64, done: &[(DoneStatus, u64)]) -> TriggerTally {
    let mut t = TriggerTally {
        accepted,
        ..TriggerTally::default()
    };
    for &(s, n) in done {
        t.done[s as usize] += n;
    }
    t
}

fn sample() -> Retired {
    let mut r = Retired {
        covered: 500,
        ..Retired::default()
    };
    r.tallies
        .insert("a".into(), tally(10, &[(DoneStatus::Delivered, 9)]));
    let b = tally(
        4,
        &[(DoneStatus::DeadLettered, 1), (DoneStatus::Skipped, 1)],
    );
    r.tallies.insert("ü-b".into(), b);
    r.owed.insert(7, "a".into());
    r.owed.insert(400, "ü-b".into());
    r.owed.insert(499, "ü-b".into());
    // An empty trigger id is a trigger id the log can hold.
    r.tallies
        .insert(String::new(), tally(1, &[(DoneStatus::NoHandler, 1)]));
    r
}

#[test]
fn the_file_round_trips() {
    let r = sample();
    assert_eq!(Retired::decode(&r.encode()), Ok(r.clone()));
    let empty = Retired::default();
    assert_eq!(Retired::decode(&empty.encode()), Ok(empty));
    let counts = r.counts();
    let want = [
        (String::new(), 1),
        ("a".to_owned(), 10),
        ("ü-b".to_owned(), 4),
    ];
    assert_eq!(counts, want);
}

#[test]
fn a_torn_or_hostile_file_is_an_error_never_a_panic() {
    let good = sample().encode();
    for n in 0..good.len() {
        assert!(Retired::decode(&good[..n]).is_err(), "torn at {n}");
    }
    let mut longer = good.clone();
    longer.push(0);
    assert!(Retired::decode(&longer).is_err());
    // Any one flipped bit: the CRC (or the magic, version) says so.
    for i in 0..good.len() {
        let mut b = good.clone();
        b[i] ^= 0x10;
        assert!(Retired::decode(&b).is_err(), "bit flipped at {i}");
    }
    // Well-framed (CRC right) but breaking the rules.
    let reframe = |mut b: Vec<u8>| {
        let n = b.len() - 4;
        let crc = crc32c::crc32c(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
        b
    };
    let mut owed_mismatch = sample();
    owed_mismatch.owed.remove(&7);
    let e = Retired::decode(&owed_mismatch.encode()).unwrap_err();
    assert!(e.contains("disagree"), "{e}");
    let mut too_many = good.clone();
    too_many[12..16].copy_from_slice(&(MAX_TRIGGERS as u32 + 1).to_le_bytes());
    assert!(Retired::decode(&reframe(too_many)).is_err());
    let mut owed_above = sample();
    owed_above.covered = 499;
    owed_above.tallies.get_mut("ü-b").unwrap().accepted = 4;
    assert!(
        Retired::decode(&owed_above.encode()).is_err(),
        "owed >= covered"
    );
    let mut version = good.clone();
    version[8] = 2;
    let e = Retired::decode(&reframe(version)).unwrap_err();
    assert!(e.contains("version 2"), "{e}");
    // Random garbage with a right CRC.
    let mut rng = Rng(0x5E71);
    for _ in 0..2000 {
        let len = 36 + (rng.next() % 200) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        b[..8].copy_from_slice(b"SLUICERT");
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        let _ = Retired::decode(&reframe(b));
    }
}

/// 1 MiB segments (bodies up to 64 KiB): a 60 KB event takes about a sixteenth of one.
fn small_cfg(dir: &Path) -> WalConfig {
    WalConfig {
        max_body_bytes: 65_536,
        segment_bytes: min_segment_bytes_for(65_536),
        durability: Durability::Os,
        ..WalConfig::new(dir.join("wal"))
    }
}

fn event(i: u64) -> Record {
    let mut e = sample_event(i, 60_000);
    e.trigger_id = if i % 2 == 0 { "even" } else { "odd" }.to_owned();
    Record::Event(e)
}

fn done(lsns: impl Iterator<Item = Lsn>) -> Record {
    let entries = lsns
        .map(|event_lsn| DoneEntry {
            event_lsn,
            // LSN 1 is event 0 ("even"): even events are delivered, odd ones dead-lettered.
            status: if event_lsn % 2 == 1 {
                DoneStatus::Delivered
            } else {
                DoneStatus::DeadLettered
            },
            attempts: 1,
        })
        .collect();
    Record::Done(DoneRecord { entries })
}

/// 40 events (LSNs 1..=40, about three segments) and then their `Done` entries (LSN 41): every
/// outcome lies in a later segment than its event.
fn written(cfg: &WalConfig) -> Vec<Lsn> {
    let (mut wal, _) = open(cfg).unwrap();
    let events: Vec<Record> = (0..40).map(event).collect();
    wal.append(&events).unwrap();
    wal.append(&[done(1..=40)]).unwrap();
    wal.sync().unwrap();
    let firsts: Vec<Lsn> = list_segments(&cfg.dir)
        .unwrap()
        .iter()
        .map(|s| s.0)
        .collect();
    assert!(firsts.len() >= 3, "{firsts:?}");
    firsts
}

fn row(l: &BTreeMap<String, TriggerTally>, t: &str) -> (u64, u64, u64, u64, u64) {
    let x = l[t];
    let (d, dl) = (x.done[1], x.done[2]);
    (x.accepted, d, dl, x.pending(), x.retired)
}

/// The offline ledger's row of `t` (`sluice events ledger`), as [`row`] gives recovery's.
fn offline(data_dir: &Path, t: &str) -> (u64, u64, u64, u64, u64) {
    let l = crate::wal::read::events::ledger(data_dir).unwrap();
    let r = l.triggers[t];
    assert!(r.balances(), "{r:?}");
    (
        r.accepted,
        r.delivered,
        r.dead_lettered,
        r.pending,
        r.retired,
    )
}

#[test]
fn retired_events_are_counted_with_outcomes_read_from_later_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = small_cfg(tmp.path());
    let firsts = written(&cfg);
    let (mut wal, _) = open(&cfg).unwrap();
    assert_eq!(wal.retire_below(firsts[2]).unwrap(), 2);
    let gone = firsts[2] - 1; // events 1..gone retired
    let r = load(&StdFs, &cfg.dir).unwrap();
    assert_eq!(r.covered, firsts[2]);
    assert!(r.owed.is_empty(), "outcomes found by the forward read");
    let (odd, even) = (gone / 2, gone - gone / 2);
    assert_eq!(r.tallies["even"].accepted, even);
    assert_eq!(r.tallies["even"].done[DoneStatus::Delivered as usize], even);
    assert_eq!(
        r.tallies["odd"].done[DoneStatus::DeadLettered as usize],
        odd
    );
    drop(wal);
    // Recovery: the file's tallies plus the retained log's, balanced, `retired` per trigger.
    let rec = recover_dispatch(&cfg.dir).unwrap();
    assert_eq!(row(&rec.ledger, "even"), (20, 20, 0, 0, even));
    assert_eq!(row(&rec.ledger, "odd"), (20, 0, 20, 0, odd));
    assert!(rec.pending.is_empty());
    assert_eq!(offline(tmp.path(), "even"), (20, 20, 0, 0, even));
    assert_eq!(offline(tmp.path(), "odd"), (20, 0, 20, 0, odd));
}

#[test]
fn a_crash_between_the_file_and_the_deletion_counts_each_event_once() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = small_cfg(tmp.path());
    let firsts = written(&cfg);
    let before = list_segments(&cfg.dir).unwrap();
    let saved: Vec<(PathBuf, Vec<u8>)> = before
        .iter()
        .take(2)
        .map(|(_, p)| (p.clone(), std::fs::read(p).unwrap()))
        .collect();
    let checkpoint = std::fs::read(crate::wal::checkpoint::path(&cfg.dir)).unwrap();
    let (mut wal, _) = open(&cfg).unwrap();
    wal.retire_below(firsts[2]).unwrap();
    drop(wal);
    let file = std::fs::read(path(&cfg.dir)).unwrap();
    // As if the process died once the file was renamed in: old checkpoint, every segment.
    for (p, bytes) in &saved {
        std::fs::write(p, bytes).unwrap();
    }
    std::fs::write(crate::wal::checkpoint::path(&cfg.dir), checkpoint).unwrap();
    let rec = recover_dispatch(&cfg.dir).unwrap();
    let gone = firsts[2] - 1;
    assert_eq!(row(&rec.ledger, "even"), (20, 20, 0, 0, gone - gone / 2));
    assert_eq!(row(&rec.ledger, "odd"), (20, 0, 20, 0, gone / 2));
    assert_eq!(offline(tmp.path(), "odd"), (20, 0, 20, 0, gone / 2));
    // The restarted helper deletes the leftovers without counting them again.
    let (mut wal, _) = open(&cfg).unwrap();
    assert_eq!(wal.retire_below(firsts[2]).unwrap(), 2);
    assert_eq!(std::fs::read(path(&cfg.dir)).unwrap(), file, "unchanged");
    drop(wal);
    let rec = recover_dispatch(&cfg.dir).unwrap();
    assert_eq!(row(&rec.ledger, "even"), (20, 20, 0, 0, gone - gone / 2));
}

#[test]
fn owed_outcomes_are_found_by_recovery_and_by_the_next_retirement() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = small_cfg(tmp.path());
    let firsts = written(&cfg);
    let (mut wal, _) = open(&cfg).unwrap();
    wal.retired_forward = 0; // no forward read: every retired event is owed
    wal.retire_below(firsts[1]).unwrap();
    let r = load(&StdFs, &cfg.dir).unwrap();
    assert_eq!(r.owed.len() as u64, firsts[1] - 1);
    assert_eq!(
        r.tallies["even"].pending() + r.tallies["odd"].pending(),
        firsts[1] - 1
    );
    // Recovery finds their `Done` entries in the retained log.
    let rec = recover_dispatch(&cfg.dir).unwrap();
    let gone = firsts[1] - 1;
    assert_eq!(row(&rec.ledger, "even"), (20, 20, 0, 0, gone - gone / 2));
    assert_eq!(row(&rec.ledger, "odd"), (20, 0, 20, 0, gone / 2));
    assert_eq!(offline(tmp.path(), "even"), (20, 20, 0, 0, gone - gone / 2));
    // More events and their outcomes, then events without any, past the active segment: the
    // retirement of every segment but the last reads the `Done` records among the deleted
    // segments (no forward read), which settles every owed event but the newest.
    let more: Vec<Record> = (41..61).map(event).collect();
    assert_eq!(wal.append(&more).unwrap(), 61);
    assert_eq!(wal.append(&[done(42..=61)]).unwrap(), 62);
    let newest: Vec<Record> = (61..81).map(event).collect();
    wal.append(&newest).unwrap();
    wal.sync().unwrap();
    let last = list_segments(&cfg.dir).unwrap().last().unwrap().0;
    assert!(
        last > 62,
        "the Done records are in deleted segments: {last}"
    );
    wal.retire_below(last).unwrap();
    let r = load(&StdFs, &cfg.dir).unwrap();
    assert!(r.owed.keys().all(|&l| l > 62), "{:?}", r.owed);
    assert_eq!(r.owed.len() as u64, last - 63);
    for t in ["even", "odd"] {
        let x = r.tallies[t];
        let owed = r.owed.values().filter(|v| *v == t).count() as u64;
        assert_eq!(x.done.iter().sum::<u64>() + owed, x.accepted, "{t}");
    }
    drop(wal);
    let rec = recover_dispatch(&cfg.dir).unwrap();
    // Events 0..=60 have outcomes (odd ones dead-lettered), 61..=80 none.
    assert_eq!(rec.ledger["odd"].accepted, 40);
    assert_eq!(rec.ledger["odd"].done[2], 30);
    assert_eq!(rec.ledger["odd"].pending(), 10);
    // Every LSN below `last` but the two `Done` records is a retired event.
    assert_eq!(
        rec.ledger["odd"].retired + rec.ledger["even"].retired,
        last - 3
    );
}

#[test]
fn a_damaged_file_refuses_the_start_unless_the_loss_is_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = small_cfg(tmp.path());
    let firsts = written(&cfg);
    let (mut wal, _) = open(&cfg).unwrap();
    wal.retire_below(firsts[1]).unwrap();
    drop(wal);
    let mut bytes = std::fs::read(path(&cfg.dir)).unwrap();
    bytes[30] ^= 1;
    std::fs::write(path(&cfg.dir), &bytes).unwrap();
    let e = open(&cfg).unwrap_err();
    assert!(matches!(e, WalError::Retired { .. }), "{e}");
    assert!(e.to_string().contains("--accept-wal-loss"), "{e}");
    assert!(matches!(
        recover_dispatch(&cfg.dir),
        Err(WalError::Retired { .. })
    ));
    cfg.accept_loss = true;
    drop(open(&cfg).unwrap());
    assert_eq!(load(&StdFs, &cfg.dir).unwrap(), Retired::default());
    // Forgotten: the ledger covers the retained log again.
    let rec = recover_dispatch(&cfg.dir).unwrap();
    assert_eq!(rec.ledger["even"].retired, 0);
}

#[test]
fn a_count_read_a_slice_at_a_time_matches_one_read_at_once() {
    use crate::wal::retire::count::{Counting, FORWARD_BYTES};
    let tmp = tempfile::tempdir().unwrap();
    let cfg = small_cfg(tmp.path());
    let firsts = written(&cfg);
    let (wal, _) = open(&cfg).unwrap();
    let segments = list_segments(&cfg.dir).unwrap();
    let active = (wal.active.path.as_path(), wal.active.end);
    let mut at_once = Counting::start(segments.clone(), 2, FORWARD_BYTES, &Retired::default());
    assert!(at_once.advance(&StdFs, active, u64::MAX).unwrap());
    let whole = at_once.finish().unwrap();
    let mut c = Counting::start(segments.clone(), 2, FORWARD_BYTES, &Retired::default());
    let mut slices = 1;
    while !c.advance(&StdFs, active, 64 << 10).unwrap() {
        slices += 1;
    }
    // Two deleted segments of 1 MiB and the outcomes' read into the third: many slices.
    assert!(slices >= 10, "{slices} slices");
    let sliced = c.finish().unwrap();
    assert_eq!(sliced.retired, whole.retired);
    assert_eq!(sliced.events, whole.events);
    assert_eq!(sliced.retired.covered, firsts[2]);
}

#[test]
fn the_helper_deletes_only_once_its_count_is_complete() {
    use crate::sync::clock::ManualClock;
    use crate::wal::WalShared;
    use std::sync::Arc;
    use std::time::Duration;
    let tmp = tempfile::tempdir().unwrap();
    let cfg = small_cfg(tmp.path());
    let firsts = written(&cfg);
    let (mut wal, _) = open(&cfg).unwrap();
    let shared = Arc::new(WalShared::new());
    wal.attach_shared(shared.clone());
    let clock = Arc::new(ManualClock::new(0));
    let mut wal = wal.with_clock(clock.clone());
    wal.retire_slice = 256 << 10;
    shared.request_retire(firsts[2]);
    clock.advance(Duration::from_secs(2));
    // 256 KiB a turn: the segments, the old checkpoint and no file while the count reads.
    let mut turns = 0;
    while turns == 0 || wal.retiring.is_some() {
        assert_eq!(list_segments(&cfg.dir).unwrap().len(), firsts.len());
        assert!(
            !path(&cfg.dir).exists(),
            "no RETIRED file before the count ends"
        );
        assert_eq!(wal.checkpoint().unwrap().first_live_lsn, 1);
        wal.tick(wal.now_nanos());
        turns += 1;
        assert!(turns < 100, "the count ends");
    }
    assert!(turns >= 4, "read over {turns} turns");
    assert_eq!(list_segments(&cfg.dir).unwrap()[0].0, firsts[2]);
    assert_eq!(wal.checkpoint().unwrap().first_live_lsn, firsts[2]);
    assert_eq!(load(&StdFs, &cfg.dir).unwrap().covered, firsts[2]);
    let counts = shared.retired.newer(&mut 0).expect("published");
    let gone = firsts[2] - 1;
    assert_eq!(counts.iter().map(|c| c.1).sum::<u64>(), gone, "{counts:?}");
}
