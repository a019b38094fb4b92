//! Simulated power loss (issue 15): the log's own code — `wal::open_in` (recovery), the commit
//! helper's `wal::commit_batch` (group commit, rollover), outcome (done) records, `Wal::tick`
//! (checkpoints), retention below the recovered done cursor, `wal::recover_dispatch_in` (the
//! pump's pending set) — runs over `storage::sim::SimFs`, which keeps unsynced writes in a
//! simulated page cache. At a seeded point the power is cut (that storage operation and every
//! later one fail); the simulated disk then keeps or drops every unsynced 512-byte sector
//! independently and loses every directory entry not synced. Recovery runs on what is left,
//! and the test checks, after every cut:
//!
//! * recovery succeeds (never panics, never refuses a log that only lost unsynced data);
//! * `fsync` mode: every event acknowledged (`Durable`) is in the log exactly once; an event
//!   whose done record was acknowledged is not pending; every other acknowledged one is;
//! * `os` mode: an acknowledged event may be missing only if it was in the active segment at
//!   the cut (the documented window: `os` mode syncs at rollover); otherwise as above;
//! * no event is ever in the log twice.
//!
//! `SLUICE_POWERLOSS_ITERATIONS=N` sets the number of cuts (default 120: a few seconds in a
//! debug build); a release run of 1,000 or more is the bar:
//! `SLUICE_POWERLOSS_ITERATIONS=1000 cargo test --release --all-features --test it powerloss -- --nocapture`.
//! It prints one line, `powerloss: N cuts, A acknowledged, L lost` (L: acknowledged events
//! missing outside the documented window; must be 0); `SLUICE_POWERLOSS_VERBOSE=1` adds a
//! detail line (disks, torn tails truncated, `os` mode's losses inside its window). The DLQ's
//! power-loss test is the child module `dlq` (`powerloss_dlq.rs`), run by the same filter.

#[path = "powerloss_dlq.rs"]
mod dlq;

use sluice::storage::sim::SimFs;
use sluice::storage::Storage;
use sluice::sync::clock::ManualClock;
use sluice::wal::segment::parse_segment_name;
use sluice::wal::{
    self, AppendOutcome, DoneEntry, DoneRecord, DoneStatus, Durability, EventRecord, Lsn, Record,
    Wal, WalConfig, WalReader, WalShared,
};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const GENERATIONS: u64 = 4;

/// xorshift64*: seeded, so a failure names a reproducible seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Acknowledged at this LSN in generation `gen`; no done record acknowledged.
    Pending { lsn: Lsn, gen: u64 },
    /// A done record for it was refused (the cut): it may or may not be in the log, so the
    /// event may or may not be pending; it must still be in the log exactly once.
    MaybeDone { lsn: Lsn, gen: u64 },
    /// Its done record was acknowledged too, at `done_lsn` in generation `gen`.
    Done { lsn: Lsn, done_lsn: Lsn, gen: u64 },
}

/// What the clients were told: each event id's state, and the next id to send.
#[derive(Debug, Default)]
struct Model {
    states: BTreeMap<String, State>,
    next_id: u64,
}

#[derive(Debug, Default)]
struct Totals {
    cuts: u64,
    acknowledged: u64,
    /// Acknowledged events missing outside the documented window.
    lost: u64,
    /// `os` mode: acknowledged events missing inside the window (allowed, counted).
    lost_in_window: u64,
    /// `os` mode: acknowledged done records lost inside the window (the event is pending again:
    /// delivered again, at least once).
    done_lost_in_window: u64,
    recovered_torn_tails: u64,
}

fn cfg(dir: &Path, durability: Durability) -> WalConfig {
    WalConfig {
        segment_bytes: wal::MIN_SEGMENT_BYTES,
        max_body_bytes: 16 * 1024,
        durability,
        ..WalConfig::new(dir)
    }
}

fn event(id: u64, body: usize) -> EventRecord {
    EventRecord {
        event_id: format!("pl-{id:012}"),
        trigger_id: "t".to_owned(),
        source: "s".to_owned(),
        received_at_ms: 1_700_000_000_000 + id,
        headers: vec![("x-n".to_owned(), id.to_string().into_bytes())],
        body: (0..body).map(|j| (j as u64 ^ id) as u8).collect(),
        replay_of: None,
    }
}

/// One generation: appends batches (events, sometimes with a done record) until the armed cut
/// stops the disk; returns the first LSN of the active segment at the cut.
fn run_until_cut(
    wal: &mut Wal,
    fs: &SimFs,
    clock: &ManualClock,
    rng: &mut Rng,
    m: &mut Model,
    gen: u64,
    totals: &mut Totals,
) -> Lsn {
    let Model {
        states: model,
        next_id,
    } = m;
    let shared = Arc::new(WalShared::new());
    wal.attach_shared(shared.clone());
    let mut outcomes = Vec::new();
    for _ in 0..400 {
        if fs.is_cut() {
            break;
        }
        let mut records = Vec::new();
        for _ in 0..1 + rng.below(8) {
            let body = if rng.below(6) == 0 {
                8 * 1024 + rng.below(8 * 1024) as usize
            } else {
                rng.below(600) as usize
            };
            records.push(Record::Event(event(*next_id, body)));
            *next_id += 1;
        }
        if rng.below(3) == 0 {
            // The pump's outcome records: a few acknowledged, unfinished events are done.
            let entries: Vec<DoneEntry> = model
                .values()
                .filter_map(|s| match s {
                    State::Pending { lsn, .. } => Some(*lsn),
                    State::Done { .. } | State::MaybeDone { .. } => None,
                })
                .filter(|_| rng.below(3) == 0)
                .take(20)
                .map(|event_lsn| DoneEntry {
                    event_lsn,
                    status: DoneStatus::Delivered,
                    attempts: 1,
                })
                .collect();
            if !entries.is_empty() {
                records.push(Record::Done(DoneRecord { entries }));
            }
        }
        wal::commit_batch(wal, &shared, records.iter(), &mut outcomes);
        for (record, outcome) in records.iter().zip(&outcomes) {
            let AppendOutcome::Durable { lsn } = *outcome else {
                if let Record::Done(done) = record {
                    for s in model.values_mut() {
                        if let State::Pending { lsn: l, gen: g } = *s {
                            if done.entries.iter().any(|e| e.event_lsn == l) {
                                *s = State::MaybeDone { lsn: l, gen: g };
                            }
                        }
                    }
                }
                continue;
            };
            match record {
                Record::Event(ev) => {
                    totals.acknowledged += 1;
                    model.insert(ev.event_id.clone(), State::Pending { lsn, gen });
                }
                Record::Done(done) => {
                    for s in model.values_mut() {
                        if let State::Pending { lsn: l, .. } = *s {
                            if done.entries.iter().any(|e| e.event_lsn == l) {
                                *s = State::Done {
                                    lsn: l,
                                    done_lsn: lsn,
                                    gen,
                                };
                            }
                        }
                    }
                }
                Record::Retry(_) => {}
            }
        }
        if rng.below(4) == 0 {
            clock.advance(Duration::from_millis(700));
            wal.tick(wal.now_nanos());
        }
    }
    fs.power_cut();
    wal.active_segment()
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_segment_name)
        .expect("active segment name")
}

/// Recovers the log after a cut and checks it against the model (module docs).
fn recover_and_check(
    fs: &SimFs,
    cfg: &WalConfig,
    model: &mut BTreeMap<String, State>,
    gen: u64,
    window_from: Lsn,
    seed: u64,
    totals: &mut Totals,
) -> (Wal, wal::DispatchRecovery) {
    let storage: Arc<dyn Storage> = Arc::new(fs.clone());
    let ctx = format!("seed {seed:#x}, generation {gen}, {:?}", cfg.durability);
    let (wal, report) = match wal::open_in(storage.clone(), cfg) {
        Ok(x) => x,
        Err(e) => panic!("{ctx}: recovery refused the log after a power cut: {e}"),
    };
    totals.recovered_torn_tails += u64::from(report.truncated_tail.is_some());
    let recovered = wal::recover_dispatch_in(&*storage, &cfg.dir)
        .unwrap_or_else(|e| panic!("{ctx}: dispatch recovery failed: {e}"));
    // Segments wholly below the done cursor may have been retired: events below the first
    // segment left are finished ones.
    let first_segment = wal::segment::list_segments_in(&*storage, &cfg.dir)
        .expect("list")
        .first()
        .map_or(Lsn::MAX, |s| s.0);
    let mut found: HashMap<String, Vec<Lsn>> = HashMap::new();
    let mut reader = WalReader::open_in(storage, &cfg.dir, 0).expect("reader");
    while let Some(r) = reader.next_event() {
        let (lsn, ev) = r.unwrap_or_else(|e| panic!("{ctx}: reading the recovered log: {e}"));
        found.entry(ev.event_id).or_default().push(lsn);
    }
    for (id, lsns) in &found {
        assert!(
            lsns.len() == 1,
            "{ctx}: {id} is in the log {} times",
            lsns.len()
        );
    }
    let first_lsn = recovered
        .pending
        .keys()
        .next()
        .copied()
        .unwrap_or(recovered.next_lsn);
    let mut gone = Vec::new();
    let os_window =
        |g: u64, lsn: Lsn| cfg.durability == Durability::Os && g == gen && lsn >= window_from;
    for (id, state) in model.iter_mut() {
        let at = found.get(id).map(|l| l[0]);
        match *state {
            State::Done {
                lsn,
                done_lsn,
                gen: g,
            } => {
                assert!(
                    at.is_none() || at == Some(lsn),
                    "{ctx}: done event {id} moved"
                );
                if at.is_some() && recovered.pending.contains_key(&lsn) {
                    assert!(
                        os_window(g, done_lsn),
                        "{ctx}: {id}'s done record (LSN {done_lsn}) was acknowledged, yet it is \
                         pending again"
                    );
                    totals.done_lost_in_window += 1;
                    *state = State::Pending { lsn, gen: g };
                    continue;
                }
                if at.is_none() {
                    if lsn >= first_segment && !os_window(g, lsn) {
                        totals.lost += 1;
                        eprintln!(
                            "{ctx}: LOST finished event {id} (LSN {lsn}) above the first segment"
                        );
                    }
                    gone.push(id.clone()); // retired with its segment: finished
                }
            }
            State::MaybeDone { lsn, gen: g } => {
                if at.is_none() {
                    if lsn >= first_segment && !os_window(g, lsn) {
                        totals.lost += 1;
                        eprintln!("{ctx}: LOST acknowledged event {id} (LSN {lsn})");
                    }
                    gone.push(id.clone());
                }
            }
            State::Pending { lsn, gen: g } => match at {
                Some(l) => {
                    assert_eq!(l, lsn, "{ctx}: {id} acknowledged at {lsn}, found at {l}");
                    assert!(
                        recovered.pending.contains_key(&lsn),
                        "{ctx}: {id} (LSN {lsn}) is not pending after recovery (done cursor {first_lsn})"
                    );
                }
                None if os_window(g, lsn) => {
                    totals.lost_in_window += 1;
                    gone.push(id.clone());
                }
                None => {
                    totals.lost += 1;
                    eprintln!(
                        "{ctx}: LOST acknowledged event {id} (LSN {lsn}, generation {g}; window from {window_from})"
                    );
                    gone.push(id.clone());
                }
            },
        }
    }
    for id in gone {
        model.remove(&id);
    }
    (wal, recovered)
}

fn one_disk(seed: u64, durability: Durability, cuts: u64, totals: &mut Totals) {
    let root = PathBuf::from("/sim");
    let fs = SimFs::new(&root, seed);
    let cfg = cfg(&root.join("data/wal/core-0"), durability);
    let mut rng = Rng(seed | 1);
    let mut model = Model::default();
    let storage: Arc<dyn Storage> = Arc::new(fs.clone());
    let (mut wal, _) = wal::open_in(storage, &cfg).expect("fresh log");
    for gen in 0..cuts {
        let clock = Arc::new(ManualClock::new(0));
        wal = wal.with_clock(clock.clone());
        // Cut somewhere within the next few hundred storage operations (a generation does
        // about 2 per batch, ~10 more per segment roll).
        fs.power_cut_after(1 + rng.below(500));
        let window_from = run_until_cut(&mut wal, &fs, &clock, &mut rng, &mut model, gen, totals);
        drop(wal);
        fs.reboot();
        totals.cuts += 1;
        let (w, recovered) =
            recover_and_check(&fs, &cfg, &mut model.states, gen, window_from, seed, totals);
        wal = w;
        // Retention, as the runtime requests it: segments wholly below the done cursor. A
        // failure here is the cut of the next generation arriving early; that is fine.
        if rng.below(2) == 0 {
            let _ = wal.retire_below(recovered.done_cursor);
        }
    }
}

#[test]
fn powerloss() {
    let cuts: u64 = std::env::var("SLUICE_POWERLOSS_ITERATIONS")
        .ok()
        .map(|v| v.parse().expect("SLUICE_POWERLOSS_ITERATIONS: a number"))
        .unwrap_or(120);
    let mut totals = Totals::default();
    let mut disk = 0u64;
    while totals.cuts < cuts {
        let seed = 0x5EED_0000_0000_0000 ^ disk.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mode = if disk % 2 == 0 {
            Durability::Fsync
        } else {
            Durability::Os
        };
        one_disk(seed, mode, GENERATIONS.min(cuts - totals.cuts), &mut totals);
        disk += 1;
    }
    println!(
        "powerloss: {} cuts, {} acknowledged, {} lost",
        totals.cuts, totals.acknowledged, totals.lost
    );
    // The detail, on request only: the acceptance reads the one line above.
    if std::env::var("SLUICE_POWERLOSS_VERBOSE").as_deref() == Ok("1") {
        println!(
            "powerloss detail: {} simulated disks (fsync and os mode alternating), {} torn \
             tails truncated; os mode, inside the documented window (the active segment): {} \
             acknowledged events and {} acknowledged done records lost",
            disk, totals.recovered_torn_tails, totals.lost_in_window, totals.done_lost_in_window
        );
    }
    assert_eq!(totals.lost, 0, "acknowledged events lost");
    assert!(totals.acknowledged > 0);
    // `os` mode (every second disk) loses only inside its window (`recover_and_check` asserts
    // each case), and it does lose there: the simulation really drops unsynced writes, so
    // fsync mode's 0 lost means something. Torn tails are met and truncated.
    if disk >= 2 {
        assert!(
            totals.lost_in_window > 0,
            "os mode lost nothing unsynced in {} cuts: the simulation dropped no write",
            totals.cuts
        );
    }
    if totals.cuts >= 20 {
        assert!(
            totals.recovered_torn_tails > 0,
            "no torn tail in {} cuts",
            totals.cuts
        );
    }
}
