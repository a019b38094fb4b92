//! Simulated power loss of the dead-letter queue (issue 15): the real batch store
//! (`dispatch::dlq_store`: `put_batch`, `remove` with the deletions and compactions it
//! triggers, an offline tool's `remove` through `DlqStore::open_existing_in`, `get`, `list`, and
//! `DlqStore::open_in`, which deletes leftover `.tmp` files and reclaims space at start) runs
//! over `storage::sim::SimFs`. At a seeded point the power is cut (that storage operation and
//! every later one fail); the simulated disk keeps or drops every unsynced 512-byte sector and
//! loses every directory entry not synced. Sometimes a second cut lands inside the reopen.
//! After every reopen that completes, the test checks:
//!
//! * the reopen succeeds (never panics, never refuses the directory), and the listing has no
//!   unreadable entry or damaged batch (a batch is published whole by its rename, so a cut can
//!   leave a `.tmp`, never a torn batch to report);
//! * every dead letter whose put returned `Ok` is present exactly once, at the version the
//!   last acknowledged put wrote (`get` returns exactly that entry, body included);
//! * every entry whose removal returned `Ok` (or whose put was refused) is absent;
//! * an operation the cut interrupted left either the state before it or the state after it;
//! * nothing is listed that no put wrote, and the store's count matches its listing.
//!
//! `SLUICE_POWERLOSS_ITERATIONS=N` sets the number of cuts (default 120), as for the WAL test.
//! It prints one line, `powerloss dlq: N cuts, A acknowledged, L lost; ...` (L: dead letters
//! reported durable and missing after recovery; must be 0).

use sluice::dispatch::dlq::{DlqEntry, DlqError, DlqReason, DlqStore};
use sluice::storage::sim::SimFs;
use sluice::storage::Storage;
use sluice::wal::EventRecord;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Rng;

const GENERATIONS: u64 = 4;
/// Small, so that `Full` refusals happen too.
const MAX_ENTRIES: usize = 150;

/// What the store told its callers about one id (the version is the entry's `attempts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A put of this version returned `Ok`, and nothing was attempted since.
    Durable(u32),
    /// A put of `new` failed (the cut): `old` (or absent, if `None`) or `new`.
    MaybePut { old: Option<u32>, new: u32 },
    /// Absent: its removal returned `Ok`, its put was refused, or an interrupted operation
    /// was found undone. The last version attempted.
    Absent(u32),
    /// A removal of this version failed (the cut): still there, or absent.
    MaybeRemoved(u32),
}

#[derive(Debug, Default)]
struct Totals {
    cuts: u64,
    /// Cuts that landed inside a reopen (its deletions of leftovers, its reclaim).
    recovery_cuts: u64,
    acknowledged: u64,
    removals_acknowledged: u64,
    /// Acknowledged dead letters missing (or at an older version) after a recovery.
    lost: u64,
    /// Acknowledged removals (or refused puts) found present after a recovery.
    back: u64,
}

fn id_of(n: u64) -> String {
    format!("{n:026}")
}

/// Entry `n` at `version`: a body of up to 30 KiB for a third of them, so batch files reach
/// the compaction threshold (64 KiB) and removals trigger rewrites.
fn entry(n: u64, version: u32) -> DlqEntry {
    let h = (n ^ u64::from(version) << 40).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20;
    let body_len = if h % 3 == 0 {
        10 * 1024 + (h % (20 * 1024)) as usize
    } else {
        (h % 700) as usize
    };
    let id = id_of(n);
    DlqEntry {
        event: EventRecord {
            event_id: id.clone(),
            trigger_id: "t".to_owned(),
            source: "s".to_owned(),
            received_at_ms: 1_700_000_000_000 + n,
            headers: vec![("x-v".to_owned(), version.to_string().into_bytes())],
            body: (0..body_len).map(|j| (j as u64 ^ n ^ h) as u8).collect(),
            replay_of: None,
            body_json: Default::default(),
        },
        id,
        event_lsn: n + 1,
        destination: "http:http://127.0.0.1:9/hook".to_owned(),
        reason: DlqReason::RetryExhausted,
        attempts: version,
        last_error: format!("HTTP 503 (version {version})"),
        dead_lettered_at_ms: 1_700_000_100_000 + n,
    }
}

fn parse_n(id: &str) -> u64 {
    id.parse().expect("a test id")
}

/// One put of 1..=12 entries: new ids, new versions of stored ones, removed ones again.
fn put(
    store: &DlqStore,
    fs: &SimFs,
    rng: &mut Rng,
    model: &mut BTreeMap<u64, State>,
    next: &mut u64,
    t: &mut Totals,
) {
    let mut picks: Vec<(u64, Option<u32>, u32)> = Vec::new(); // (n, old, new)
    for _ in 0..1 + rng.below(12) {
        let pick = if rng.below(3) == 0 && !model.is_empty() {
            let n = *model
                .keys()
                .nth(rng.below(model.len() as u64) as usize)
                .unwrap();
            match model[&n] {
                State::Durable(v) => Some((n, Some(v), v + 1)),
                State::Absent(v) => Some((n, None, v + 1)),
                State::MaybePut { .. } | State::MaybeRemoved(_) => None,
            }
        } else {
            None
        };
        let pick = pick.unwrap_or_else(|| {
            *next += 1;
            (*next, None, 1)
        });
        if !picks.iter().any(|p| p.0 == pick.0) {
            picks.push(pick);
        }
    }
    let entries: Vec<DlqEntry> = picks.iter().map(|&(n, _, v)| entry(n, v)).collect();
    let results = store.put_batch(picks.iter().copied().zip(&entries).collect());
    for ((n, old, new), r) in results {
        let state = match r {
            Ok(()) => {
                t.acknowledged += 1;
                State::Durable(new)
            }
            Err(DlqError::Full { .. }) => {
                assert!(old.is_none() && !matches!(model.get(&n), Some(State::Durable(_))));
                State::Absent(new)
            }
            Err(DlqError::Io { .. }) if fs.is_cut() => State::MaybePut { old, new },
            Err(e) => panic!("put of {} refused without a cut: {e}", id_of(n)),
        };
        model.insert(n, state);
    }
}

/// Removes 1..=4 stored entries, through the server's store or (one time in five) an offline
/// tool's, as `sluice dlq discard` does while the server runs.
fn remove(
    store: &DlqStore,
    fs: &SimFs,
    dir: &Path,
    rng: &mut Rng,
    model: &mut BTreeMap<u64, State>,
    t: &mut Totals,
) {
    let durable: Vec<(u64, u32)> = model
        .iter()
        .filter_map(|(&n, s)| match *s {
            State::Durable(v) => Some((n, v)),
            _ => None,
        })
        .collect();
    if durable.is_empty() {
        return;
    }
    let offline = if rng.below(5) == 0 {
        match DlqStore::open_existing_in(Arc::new(fs.clone()), dir) {
            Ok(s) => Some(s),
            Err(_) if fs.is_cut() => return,
            Err(e) => panic!("offline open refused without a cut: {e}"),
        }
    } else {
        None
    };
    let by = offline.as_ref().unwrap_or(store);
    for _ in 0..1 + rng.below(4) {
        let (n, v) = durable[rng.below(durable.len() as u64) as usize];
        if model[&n] != State::Durable(v) {
            continue; // removed in this round already
        }
        let state = match by.remove(&id_of(n)) {
            Ok(()) => {
                t.removals_acknowledged += 1;
                State::Absent(v)
            }
            Err(DlqError::Io { .. }) if fs.is_cut() => State::MaybeRemoved(v),
            Err(e) => panic!("removal of {} failed without a cut: {e}", id_of(n)),
        };
        model.insert(n, state);
    }
}

/// One generation: puts, removals and reads until the armed cut stops the disk.
fn run_until_cut(
    store: &DlqStore,
    fs: &SimFs,
    dir: &Path,
    rng: &mut Rng,
    model: &mut BTreeMap<u64, State>,
    next: &mut u64,
    t: &mut Totals,
) {
    for _ in 0..400 {
        if fs.is_cut() {
            break;
        }
        match rng.below(10) {
            0..=4 => put(store, fs, rng, model, next, t),
            5..=7 => remove(store, fs, dir, rng, model, t),
            8 => {
                // A stored entry reads back as written, until the power goes.
                let durable: Vec<(u64, u32)> = model
                    .iter()
                    .filter_map(|(&n, s)| match *s {
                        State::Durable(v) => Some((n, v)),
                        _ => None,
                    })
                    .collect();
                if let Some(&(n, v)) = durable.get(rng.below(durable.len() as u64) as usize) {
                    match store.get(&id_of(n)) {
                        Ok(e) => assert_eq!(e, entry(n, v), "get of a stored entry"),
                        Err(_) if fs.is_cut() => {}
                        Err(e) => panic!("get of stored {} failed without a cut: {e}", id_of(n)),
                    }
                }
            }
            _ => {
                if let Err(e) = store.list() {
                    assert!(fs.is_cut(), "list failed without a cut: {e}");
                }
            }
        }
    }
    fs.power_cut();
}

/// Checks the reopened store against the model (module docs) and settles the uncertain states.
fn check(store: &DlqStore, model: &mut BTreeMap<u64, State>, ctx: &str, t: &mut Totals) {
    let listing = store
        .list()
        .unwrap_or_else(|e| panic!("{ctx}: listing after recovery: {e}"));
    assert!(
        listing.unreadable.is_empty(),
        "{ctx}: unreadable after a power cut: {:?}",
        listing.unreadable
    );
    let mut listed: HashMap<u64, usize> = HashMap::new();
    for s in &listing.entries {
        *listed.entry(parse_n(&s.id)).or_default() += 1;
    }
    for (n, count) in &listed {
        assert_eq!(*count, 1, "{ctx}: {} listed {count} times", id_of(*n));
        assert!(
            model.contains_key(n),
            "{ctx}: {} listed, never put",
            id_of(*n)
        );
    }
    assert_eq!(
        store.len(),
        listing.entries.len(),
        "{ctx}: count vs listing"
    );
    for (&n, state) in model.iter_mut() {
        let id = id_of(n);
        let version = if listed.contains_key(&n) {
            let e = store
                .get(&id)
                .unwrap_or_else(|e| panic!("{ctx}: {id} listed but not read: {e}"));
            assert_eq!(e, entry(n, e.attempts), "{ctx}: {id} read back different");
            Some(e.attempts)
        } else {
            None
        };
        *state = match (*state, version) {
            (State::Durable(v), Some(got)) if got == v => State::Durable(v),
            (State::Durable(v), got) => {
                t.lost += 1;
                eprintln!("{ctx}: LOST dead letter {id} version {v} (found {got:?})");
                got.map_or(State::Absent(v), State::Durable)
            }
            (State::MaybePut { old, new }, Some(got)) => {
                assert!(
                    got == new || Some(got) == old,
                    "{ctx}: {id} at version {got}, put {old:?} -> {new}"
                );
                State::Durable(got)
            }
            (State::MaybePut { old: Some(v), .. }, None) => {
                t.lost += 1;
                eprintln!(
                    "{ctx}: LOST dead letter {id} version {v} (an interrupted put of a newer one)"
                );
                State::Absent(v)
            }
            (State::MaybePut { old: None, new }, None) => State::Absent(new),
            (State::Absent(v), None) => State::Absent(v),
            (State::Absent(v), Some(got)) => {
                t.back += 1;
                eprintln!(
                    "{ctx}: BACK: {id} (removed or refused at version {v}) is present at {got}"
                );
                State::Durable(got)
            }
            (State::MaybeRemoved(v), Some(got)) => {
                assert_eq!(got, v, "{ctx}: {id} half removed at another version");
                State::Durable(v)
            }
            (State::MaybeRemoved(v), None) => State::Absent(v),
        };
    }
}

fn one_disk(seed: u64, cuts: u64, t: &mut Totals) {
    let root = PathBuf::from("/sim/data");
    let dir = root.join("dlq");
    let fs = SimFs::new(&root, seed);
    let storage: Arc<dyn Storage> = Arc::new(fs.clone());
    let mut rng = Rng(seed | 1);
    let mut model = BTreeMap::new();
    let mut next = 0;
    let mut store = DlqStore::open_in(storage.clone(), &dir, MAX_ENTRIES).expect("fresh store");
    for gen in 0..cuts {
        fs.power_cut_after(1 + rng.below(300));
        run_until_cut(&store, &fs, &dir, &mut rng, &mut model, &mut next, t);
        drop(store);
        t.cuts += 1;
        let ctx = format!("seed {seed:#x}, generation {gen}");
        store = loop {
            fs.reboot();
            // One reopen in three meets a second cut within its first few operations.
            let armed = rng.below(3) == 0;
            fs.power_cut_after(if armed { 1 + rng.below(6) } else { u64::MAX });
            match DlqStore::open_in(storage.clone(), &dir, MAX_ENTRIES) {
                Ok(s) if !fs.is_cut() => {
                    fs.power_cut_after(u64::MAX); // disarm
                    break s;
                }
                Ok(_) => {} // the cut hit its reclaim (logged, not an error)
                Err(e) => assert!(fs.is_cut(), "{ctx}: recovery refused the DLQ: {e}"),
            }
            t.recovery_cuts += 1;
        };
        check(&store, &mut model, &ctx, t);
    }
}

#[test]
fn powerloss_dlq() {
    let cuts: u64 = std::env::var("SLUICE_POWERLOSS_ITERATIONS")
        .ok()
        .map(|v| v.parse().expect("SLUICE_POWERLOSS_ITERATIONS: a number"))
        .unwrap_or(120);
    let mut t = Totals::default();
    let mut disk = 0u64;
    while t.cuts < cuts {
        let seed = 0xD1_0000_0000_0000 ^ disk.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        one_disk(seed, GENERATIONS.min(cuts - t.cuts), &mut t);
        disk += 1;
    }
    println!(
        "powerloss dlq: {} cuts, {} acknowledged, {} lost; {} removals acknowledged, {} back; \
         {} more cuts inside recovery",
        t.cuts, t.acknowledged, t.lost, t.removals_acknowledged, t.back, t.recovery_cuts
    );
    assert_eq!(t.lost, 0, "acknowledged dead letters lost");
    assert_eq!(t.back, 0, "acknowledged removals undone");
    assert!(t.acknowledged > 0 && t.removals_acknowledged > 0);
}
