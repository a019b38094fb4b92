//! The logs of a run: one per core, plus the ones a core adopts, and the keys that name events
//! across them.
//!
//! At start-up [`open_logs`] opens (recovering each) core `k`'s own log `wal/core-k/` for every
//! worker, then every other log on disk (`wal::layout`): `core-K` with `K >= workers`, written
//! by a run with more workers, and the legacy single log of older versions (segments directly in
//! `wal/`). Each of those is *adopted* by core `K % workers` (the legacy log by core 0): the
//! adopting core delivers its pending events and writes their outcomes into it; new events only
//! go to own logs. An upgrade from the single-log layout therefore moves nothing on disk and
//! redelivers nothing beyond the usual at-least-once.
//!
//! Own logs are opened first, core 0's first of all: its `LOCK` is taken before anything else,
//! so a second server on the same data dir fails at once, whatever its worker count.
//!
//! # Logs adopted from another node
//!
//! With `[replication]`, a node also runs the logs of a lost node it adopted
//! (`replication::adopt`): each rebuilt from the stream into `adopted/<node>/wal/core-K/` under
//! the data dir, opened and recovered as any log, and given to core `index % workers`. While the
//! node runs, [`TakeOver`] does that and hands each log to its core through the [`AdoptInbox`]
//! (the core's loop gives it to its pump and its commit helper at the top of a turn); at a
//! restart [`open_adopted`] opens them again after the node's own logs. Nothing is ingested
//! into them; their records are not replicated (README "Several nodes").
//!
//! # Event keys
//!
//! Jobs and outcomes between cores name an event by one `u64` key: the log's index (in
//! [`RunLogs::logs`]) and the LSN in that log ([`event_key`], [`split_key`], defined in
//! `wal::key`).
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::dispatch::placement::LogOwners;
use crate::dispatch::pump::PumpLog;
use crate::metrics::histogram::Histogram;
use crate::replication::catch_up::LocalLog;
use crate::replication::mirror::SubjectOpener;
use crate::replication::ReplicationSpec;
use crate::sched::commit::AdoptedLink;
use crate::storage::{self, StdFs};
use crate::sync::clock::unix_millis;
use crate::wal::WalShared;
use crate::wal::{
    self, layout, manifest, DispatchRecovery, LogDir, RecoveryReport, Wal, WalConfig, WalError,
};

/// Event keys live with the logs they name (`wal::key`); re-exported for the run's users.
pub use crate::wal::key::{event_key, split_key, KEY_LSN_BITS};

/// One open, recovered log and who owns it.
#[derive(Debug)]
pub struct OpenLog {
    /// `core-K` or `legacy`.
    pub name: String,
    pub dir: PathBuf,
    /// The core that appends its outcomes (and, for an own log, its events).
    pub owner: usize,
    pub wal: Wal,
    pub report: RecoveryReport,
    pub recovered: DispatchRecovery,
    /// The node whose log this was, for a log adopted from another node (not replicated).
    pub adopted_from: Option<String>,
}

/// Every log of this run, in key order: own logs first (index = core), then adopted ones.
#[derive(Debug)]
pub struct RunLogs {
    pub logs: Vec<OpenLog>,
}

impl RunLogs {
    /// Owner core of each log, by log index.
    pub fn owners(&self) -> Vec<usize> {
        self.logs.iter().map(|l| l.owner).collect()
    }
}

/// Opens and recovers every log under `base.dir` (the `wal/` directory) for `workers` cores.
/// `base` carries everything but the directory. `Locked` if another process holds a log.
///
/// The data dir's manifest (`wal::manifest`) is checked first: a listed log or checkpoint that
/// is gone fails the start naming it (`WalError::Manifest`), unless `base.accept_loss`. Once
/// every log is open, the manifest is rewritten if the set of logs changed.
pub fn open_logs(base: &WalConfig, workers: usize) -> Result<RunLogs, WalError> {
    let wal_dir = base.dir.clone();
    let fs = StdFs;
    // `wal/` and any missing parent: their entries are durable before a log is made in them.
    storage::create_dir_all_durably(&fs, &wal_dir).map_err(|e| WalError::io(&wal_dir, e))?;
    let reconciled = manifest::reconcile_in(&fs, &wal_dir, base.accept_loss, unix_millis())
        .map_err(WalError::Manifest)?;
    let mut logs = Vec::new();
    for core in 0..workers {
        let dir = layout::core_log_dir(&wal_dir, core);
        logs.push(open_one(base, layout::core_log_name(core), dir, core)?);
    }
    // A gone log that had a high-water record is opened again (empty, recreated): recovery
    // names and counts what it lost from the record, and it continues above its LSNs.
    let mut listed = reconciled.listed.clone();
    for m in &reconciled.accepted_now {
        let dir = manifest::log_dir(&wal_dir, &m.log);
        let recorded = wal::high_water::path_of(&dir).is_some_and(|p| p.exists());
        if recorded && !listed.contains(&m.log) {
            listed.push(m.log.clone());
        }
    }
    for found in others(&wal_dir, workers, &listed)? {
        let owner = found.core.map_or(0, |k| k % workers);
        logs.push(open_one(base, found.name, found.dir, owner)?);
    }
    // A listed log or checkpoint accepted as gone is ranged by recovery from the log's
    // high-water record; one from before the records were kept is counted all the same.
    for missing in &reconciled.accepted_now {
        let log = logs.iter_mut().find(|l| l.name == missing.log);
        if let Some(l) = log.filter(|l| l.report.lost.is_empty() && l.report.skipped.is_none()) {
            eprintln!(
                "sluice: wal {}: no high-water record: the LSNs lost with it cannot be named",
                l.dir.display()
            );
            l.wal.count_unranged_loss();
        }
    }
    let names = logs.iter().map(|l| l.name.clone()).collect();
    manifest::finish_in(&fs, &wal_dir, reconciled, names).map_err(WalError::Manifest)?;
    Ok(RunLogs { logs })
}

/// The logs to adopt: those on disk that no core owns, and the listed ones whose directory is
/// there even if no segment is (their checkpoint says what they must hold), in key order.
fn others(wal_dir: &Path, workers: usize, listed: &[String]) -> Result<Vec<LogDir>, WalError> {
    let mut found = layout::log_dirs(wal_dir)?;
    for name in listed {
        if found.iter().any(|f| &f.name == name) {
            continue;
        }
        let core = layout::core_of(name);
        found.push(LogDir {
            name: name.clone(),
            dir: manifest::log_dir(wal_dir, name),
            core,
        });
    }
    // Core logs in order of K, then the legacy log (`layout::log_dirs`' order).
    found.sort_by_key(|l| (l.core.is_none(), l.core));
    found.retain(|l| !l.core.is_some_and(|k| k < workers));
    Ok(found)
}

fn open_one(
    base: &WalConfig,
    name: String,
    dir: PathBuf,
    owner: usize,
) -> Result<OpenLog, WalError> {
    let cfg = WalConfig {
        dir: dir.clone(),
        ..base.clone()
    };
    let (wal, report) = wal::open(&cfg)?;
    let recovered = wal::recover_dispatch(&dir)?;
    Ok(OpenLog {
        name,
        dir,
        owner,
        wal,
        report,
        recovered,
        adopted_from: None,
    })
}

/// Where the logs adopted from other nodes live: `adopted/` under the data dir.
pub fn adopted_root(data_dir: &Path) -> PathBuf {
    data_dir.join("adopted")
}

/// The logs adopted from node `node` (rebuilt into `root/<node>/wal/core-K/`), opened and
/// recovered, in order of `K`; the first gets log index `first`, each owned by core
/// `index % workers`.
fn open_node(
    base: &WalConfig,
    root: &Path,
    node: &str,
    first: usize,
    workers: usize,
) -> Result<Vec<OpenLog>, WalError> {
    let wal_dir = root.join(node).join("wal");
    let mut logs = Vec::new();
    for (i, found) in layout::log_dirs(&wal_dir)?.into_iter().enumerate() {
        let index = first + i;
        let name = format!("adopted/{node}/{}", found.name);
        let mut log = open_one(base, name, found.dir, index % workers.max(1))?;
        log.adopted_from = Some(node.to_owned());
        logs.push(log);
    }
    Ok(logs)
}

/// The nodes whose logs are under `root` (`adopted/<node>/wal/`), sorted.
pub fn adopted_nodes(root: &Path) -> Result<Vec<String>, WalError> {
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(WalError::io(root, e)),
    };
    let mut nodes = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| WalError::io(root, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if entry.path().join("wal").is_dir() && !name.starts_with('.') {
            nodes.push(name);
        }
    }
    nodes.sort();
    Ok(nodes)
}

/// At start-up, after the node's own logs: the logs it adopted from other nodes in an earlier
/// run (module docs), appended to `run`.
pub fn open_adopted(
    base: &WalConfig,
    root: &Path,
    workers: usize,
    run: &mut RunLogs,
) -> Result<(), WalError> {
    for node in adopted_nodes(root)? {
        let first = run.logs.len();
        run.logs
            .extend(open_node(base, root, &node, first, workers)?);
    }
    Ok(())
}

/// A log's published state, starting at its recovered durable LSN and outcome index (moved
/// out of the recovery); its sync latencies go to `histogram`, shared by every log.
pub fn published_state(l: &mut OpenLog, histogram: &Arc<Histogram>) -> Arc<WalShared> {
    let mut s = WalShared::sharing(histogram.clone());
    s.name = l.name.clone();
    s.durable_lsn.store(l.report.last_lsn, Ordering::Release);
    let mut index = std::mem::take(&mut l.recovered.outcomes);
    // Where the writer appends next (after a log lost whole and accepted, past the
    // checkpoint's promise: the LSNs between are given up).
    index.continue_at(l.report.last_lsn + 1);
    s.outcomes.seed(index);
    Arc::new(s)
}

/// A log adopted while the node runs, on its way to its core: what its pump reads and what its
/// commit helper writes (the same slot in both).
#[derive(Debug)]
pub struct AdoptedLog {
    pub pump: PumpLog,
    pub helper: crate::wal::group::Log,
    /// With `[replication]`: where its records are published (its node's subject).
    pub link: Option<AdoptedLink>,
}

/// The link of the adopted log in `dir` (`adopted/<node>/wal/core-K/`): its records published
/// on `<stream>.<node>.core-K`, after those it holds beyond the stream (`catch_up`, from the
/// node's subjects' last frames: nothing for a log just rebuilt from the stream). `core`
/// commits it; `last_lsn` is its durable LSN.
pub fn adopted_link(
    opener: &SubjectOpener,
    spec: &ReplicationSpec,
    dir: &Path,
    core: usize,
    last_lsn: wal::Lsn,
) -> Result<AdoptedLink, String> {
    fn name(p: Option<&Path>) -> Option<&str> {
        p.and_then(Path::file_name).and_then(|n| n.to_str())
    }
    let index = name(Some(dir))
        .and_then(layout::core_of)
        .and_then(|k| u16::try_from(k).ok());
    let node = name(dir.parent().and_then(Path::parent));
    let (Some(index), Some(node)) = (index, node) else {
        return Err(format!("{}: not an adopted log's directory", dir.display()));
    };
    let log = LocalLog {
        core,
        index,
        dir: dir.to_owned(),
        last_lsn,
    };
    let subject = spec.subject_of(node, usize::from(index));
    let link = opener.open(subject, spec.node_filter(node), log, true)?;
    Ok((index, link))
}

/// The logs adopted while the node runs, waiting for their cores' loops; each loop takes its
/// own at the top of a turn (`sync::inbox`: one flag load when there are none). Bound: at most
/// `ADOPTED_LOGS_MAX` logs in all (`dispatch::placement`).
pub type AdoptInbox = crate::sync::inbox::Inbox<AdoptedLog>;

/// What a taking-over needs from the running node: where the logs go, who owns what, and the
/// published state and backlog they join.
#[derive(Debug)]
pub struct TakeOverParts {
    /// The node's WAL settings (`dir` is replaced per log).
    pub base: WalConfig,
    /// `adopted/` under the data dir.
    pub root: PathBuf,
    pub workers: usize,
    pub owners: LogOwners,
    /// The first log index free for an adopted log (the run's logs at start-up).
    pub next_index: usize,
    pub histogram: Arc<Histogram>,
    /// The nodes whose logs this run already runs (opened at start-up).
    pub running: HashSet<String>,
    /// With a mirror: where the adopted logs' records are published.
    pub links: Option<(SubjectOpener, ReplicationSpec)>,
}

/// Takes over another node's logs while this node runs (module docs).
#[derive(Debug)]
pub struct TakeOver {
    parts: TakeOverParts,
}

/// What one taking-over gave each core: the logs, with their pending events and bytes.
#[derive(Debug, Default)]
pub struct TakenOver {
    pub logs: Vec<(String, usize)>,
    pub events: u64,
    pub bytes: u64,
}

impl TakeOver {
    pub fn new(parts: TakeOverParts) -> TakeOver {
        TakeOver { parts }
    }

    /// Whether node `node`'s logs already run here.
    pub fn runs(&self, node: &str) -> bool {
        self.parts.running.contains(node)
    }

    /// Opens the logs rebuilt into `adopted/<node>/wal/` and hands each to its core
    /// (`inbox.put`, then `wake(core)`), its owner set first; their pending events are added to
    /// the backlog by `preload`. Refused past `ADOPTED_LOGS_MAX` adopted logs.
    pub fn open_and_hand(
        &mut self,
        node: &str,
        inbox: &AdoptInbox,
        preload: &dyn Fn(u64, u64),
        wake: &dyn Fn(usize),
    ) -> Result<TakenOver, String> {
        let p = &mut self.parts;
        let wal_dir = p.root.join(node).join("wal");
        let count = layout::log_dirs(&wal_dir).map_err(|e| e.to_string())?.len();
        if p.next_index + count > p.owners.capacity() {
            return Err(format!(
                "adopting node {node}'s {count} logs would pass the {} logs a node runs",
                p.owners.capacity()
            ));
        }
        let first = p.next_index;
        let logs =
            open_node(&p.base, &p.root, node, first, p.workers).map_err(|e| e.to_string())?;
        p.next_index += logs.len();
        p.running.insert(node.to_owned());
        let mut taken = TakenOver::default();
        let mut handed = Vec::new();
        for (i, mut log) in logs.into_iter().enumerate() {
            let index = first + i;
            let shared = published_state(&mut log, &p.histogram);
            let mut wal = log.wal;
            wal.attach_shared(shared.clone());
            let pending = &log.recovered.pending;
            taken.events += pending.len() as u64;
            taken.bytes += pending.values().map(|m| m.bytes).sum::<u64>();
            taken.logs.push((log.name.clone(), log.owner));
            let link = match &p.links {
                Some((opener, spec)) => {
                    let last = log.report.last_lsn;
                    Some(adopted_link(opener, spec, &log.dir, log.owner, last)?)
                }
                None => None,
            };
            p.owners.set(index, log.owner);
            let adopted = AdoptedLog {
                pump: PumpLog {
                    index,
                    name: log.name,
                    dir: log.dir,
                    own: false,
                    durable: log.report.last_lsn,
                    recovered: log.recovered,
                },
                helper: crate::wal::group::Log { wal, shared },
                link,
            };
            handed.push((log.owner, adopted));
        }
        // Counted before any core can make one of them done and give its room back.
        preload(taken.events, taken.bytes);
        for (core, adopted) in handed {
            // `core < workers`: every log's owner is `index % workers`.
            if let Err(log) = inbox.put(core, adopted) {
                return Err(format!("{}: no core {core} to run it", log.pump.name));
            }
            wake(core);
        }
        Ok(taken)
    }
}

/// The directory of core `core`'s own log under the data dir's `wal/`.
pub fn own_log_dir(wal_dir: &Path, core: usize) -> PathBuf {
    layout::core_log_dir(wal_dir, core)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::format::tests::sample_event;

    fn small(dir: &Path) -> WalConfig {
        WalConfig {
            segment_bytes: 1 << 20,
            max_body_bytes: 4096,
            ..WalConfig::new(dir)
        }
    }

    #[test]
    fn orphaned_and_legacy_logs_are_adopted_after_the_own_logs() {
        let tmp = tempfile::tempdir().unwrap();
        let wal_dir = tmp.path().join("wal");
        // The old single-log layout, and a run with three workers.
        let (mut legacy, _) = wal::open(&small(&wal_dir)).unwrap();
        legacy.append_events(&[sample_event(1, 10)]).unwrap();
        drop(legacy);
        {
            let run = open_logs(&small(&wal_dir), 3).unwrap();
            let names: Vec<_> = run.logs.iter().map(|l| l.name.as_str()).collect();
            assert_eq!(names, ["core-0", "core-1", "core-2", "legacy"]);
            assert_eq!(run.owners(), [0, 1, 2, 0]);
            assert_eq!(run.logs[3].recovered.pending.len(), 1);
        }
        // Fewer workers later: core-2 is adopted by core 0 (2 % 2), the legacy log too.
        let run = open_logs(&small(&wal_dir), 2).unwrap();
        let names: Vec<_> = run.logs.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["core-0", "core-1", "core-2", "legacy"]);
        assert_eq!(run.owners(), [0, 1, 0, 0]);
        // A second run on the same data dir is refused.
        assert!(matches!(
            open_logs(&small(&wal_dir), 1),
            Err(WalError::Locked { .. })
        ));
    }

    fn undelivered_in_core_1(wal_dir: &Path) {
        let run = open_logs(&small(wal_dir), 2).unwrap();
        drop(run);
        let (mut w, _) = wal::open(&small(&own_log_dir(wal_dir, 1))).unwrap();
        w.append_events(&[sample_event(1, 10), sample_event(2, 10)])
            .unwrap();
        w.sync().unwrap();
    }

    #[test]
    fn a_deleted_log_is_refused_by_name_until_its_loss_is_accepted() {
        let tmp = tempfile::tempdir().unwrap();
        let wal_dir = tmp.path().join("wal");
        undelivered_in_core_1(&wal_dir);
        std::fs::remove_dir_all(wal_dir.join("core-1")).unwrap();
        let e = open_logs(&small(&wal_dir), 2).unwrap_err();
        assert!(matches!(e, WalError::Manifest(_)), "{e}");
        assert!(e.to_string().contains("log core-1 is missing"), "{e}");
        assert!(!wal_dir.join("core-1").exists(), "nothing was recreated");
        let accept = WalConfig {
            accept_loss: true,
            ..small(&wal_dir)
        };
        let run = open_logs(&accept, 2).unwrap();
        assert!(run.logs[1].recovered.pending.is_empty());
        drop(run);
        // Recorded: the next start does not ask again.
        let run = open_logs(&small(&wal_dir), 2).unwrap();
        assert_eq!(run.logs.len(), 2);
        let m = manifest::read_in(&StdFs, &wal_dir).unwrap().unwrap();
        assert_eq!(m.accepted.len(), 1, "{m:?}");
    }

    /// Issue 40 item 3: a gone log is ranged and counted from its high-water record (an
    /// adopted one is opened again for it), or counted without a range when it has none.
    #[test]
    fn an_accepted_lost_log_is_ranged_from_its_high_water_record_or_counted_without() {
        use std::sync::atomic::Ordering::Relaxed;
        let tmp = tempfile::tempdir().unwrap();
        let wal_dir = tmp.path().join("wal");
        drop(open_logs(&small(&wal_dir), 3).unwrap());
        let (mut w, _) = wal::open(&small(&own_log_dir(&wal_dir, 2))).unwrap();
        w.append_events(&[sample_event(1, 10), sample_event(2, 10)])
            .unwrap();
        w.sync().unwrap();
        drop(w);
        let accept = WalConfig {
            accept_loss: true,
            ..small(&wal_dir)
        };
        // Adopted (2 workers now) and gone: opened again, the two LSNs named and counted.
        std::fs::remove_dir_all(wal_dir.join("core-2")).unwrap();
        let mut run = open_logs(&accept, 2).unwrap();
        let names: Vec<_> = run.logs.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["core-0", "core-1", "core-2"]);
        let lost = &run.logs[2].report.lost;
        assert_eq!(
            (lost.len(), lost[0].first, lost[0].last),
            (1, 1, 2),
            "{lost:?}"
        );
        assert!(run.logs[2].report.skipped.is_some());
        let shared = std::sync::Arc::new(wal::WalShared::new());
        run.logs[2].wal.attach_shared(shared.clone());
        assert_eq!(shared.loss_accepted_total.load(Relaxed), 1);
        assert_eq!(shared.lost_lsns_accepted.load(Relaxed), 2);
        drop(run);
        // Gone with its high-water record: nothing to range it by, counted all the same.
        std::fs::remove_dir_all(wal_dir.join("core-1")).unwrap();
        std::fs::remove_file(wal_dir.join("core-1.hw")).unwrap();
        let mut run = open_logs(&accept, 2).unwrap();
        assert!(run.logs[1].report.lost.is_empty());
        let shared = std::sync::Arc::new(wal::WalShared::new());
        run.logs[1].wal.attach_shared(shared.clone());
        assert_eq!(shared.loss_accepted_total.load(Relaxed), 1);
        assert_eq!(shared.lost_lsns_accepted.load(Relaxed), 0);
    }

    #[test]
    fn deleted_checkpoints_with_a_truncated_segment_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let wal_dir = tmp.path().join("wal");
        undelivered_in_core_1(&wal_dir);
        let core1 = own_log_dir(&wal_dir, 1);
        for core in 0..2 {
            std::fs::remove_file(own_log_dir(&wal_dir, core).join("CHECKPOINT")).unwrap();
        }
        let seg = wal::segment::list_segments(&core1).unwrap()[0].1.clone();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&seg)
            .unwrap()
            .set_len(0)
            .unwrap();
        let e = open_logs(&small(&wal_dir), 2).unwrap_err().to_string();
        assert!(e.contains("log core-0 has lost its checkpoint"), "{e}");
        assert!(e.contains("core-1/CHECKPOINT does not exist"), "{e}");
        assert!(manifest::check(&wal_dir).is_err());
    }

    /// A lost node's log as a restore leaves it: `adopted/<node>/wal/core-K/`, 2 events pending.
    fn rebuilt(data: &Path, node: &str, k: usize) {
        let dir = adopted_root(data).join(node).join("wal");
        let (mut w, _) = wal::open(&small(&own_log_dir(&dir, k))).unwrap();
        w.append_events(&[sample_event(1, 10), sample_event(2, 10)])
            .unwrap();
        w.sync().unwrap();
    }

    #[test]
    fn a_lost_nodes_rebuilt_logs_are_handed_to_their_cores_counted_and_owned() {
        use std::cell::{Cell, RefCell};
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        rebuilt(data, "node-a", 0);
        rebuilt(data, "node-a", 1);
        let owners = LogOwners::new(&[0, 1]);
        let mut take = TakeOver::new(TakeOverParts {
            base: small(&data.join("wal")),
            root: adopted_root(data),
            workers: 2,
            owners: owners.clone(),
            next_index: 2,
            histogram: Arc::new(Histogram::new(wal::SYNC_BOUNDS_NANOS)),
            running: HashSet::new(),
            links: None,
        });
        let inbox = AdoptInbox::new(2);
        assert!(inbox.take(0).is_none(), "nothing handed yet");
        let preloaded = Cell::new((0, 0));
        let woken = RefCell::new(Vec::new());
        let taken = take
            .open_and_hand("node-a", &inbox, &|e, b| preloaded.set((e, b)), &|c| {
                woken.borrow_mut().push(c)
            })
            .unwrap();
        assert!(take.runs("node-a"));
        assert_eq!(taken.events, 4);
        assert_eq!(preloaded.get(), (taken.events, taken.bytes));
        let names: Vec<_> = taken.logs.iter().map(|(n, c)| (n.as_str(), *c)).collect();
        assert_eq!(
            names,
            [("adopted/node-a/core-0", 0), ("adopted/node-a/core-1", 1)]
        );
        assert_eq!(*woken.borrow(), [0, 1]);
        // Indexes 2 and 3, each owned by index % workers, in each core's inbox once.
        let got = inbox.take(1).unwrap();
        assert_eq!(
            (got.len(), got[0].pump.index, got[0].pump.own),
            (1, 3, false)
        );
        assert_eq!(got[0].pump.recovered.pending.len(), 2);
        assert_eq!(got[0].helper.shared.durable_lsn(), 2);
        assert!(inbox.take(1).is_none(), "taken once");
        assert_eq!(inbox.take(0).unwrap()[0].pump.index, 2);
        assert_eq!(
            owners.capacity(),
            2 + crate::dispatch::placement::ADOPTED_LOGS_MAX
        );
    }

    #[test]
    fn an_adoption_past_the_owners_room_is_refused_and_hands_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        rebuilt(data, "node-a", 0);
        rebuilt(data, "node-a", 1);
        let owners = LogOwners::new(&[0, 1]);
        // One slot left: node-a's two logs do not fit.
        let next_index = owners.capacity() - 1;
        let mut take = TakeOver::new(TakeOverParts {
            base: small(&data.join("wal")),
            root: adopted_root(data),
            workers: 2,
            owners,
            next_index,
            histogram: Arc::new(Histogram::new(wal::SYNC_BOUNDS_NANOS)),
            running: HashSet::new(),
            links: None,
        });
        let inbox = AdoptInbox::new(2);
        let e = take
            .open_and_hand("node-a", &inbox, &|_, _| panic!("counted"), &|_| {
                panic!("woken")
            })
            .unwrap_err();
        assert!(e.contains("would pass the"), "{e}");
        assert!(!take.runs("node-a"), "retried at the next scan");
        assert!(inbox.take(0).is_none() && inbox.take(1).is_none());
    }

    #[test]
    fn logs_adopted_in_an_earlier_run_open_after_the_own_logs() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        rebuilt(data, "node-b", 0);
        rebuilt(data, "node-a", 0);
        std::fs::create_dir_all(adopted_root(data).join(".restoring").join("wal")).unwrap();
        let base = small(&data.join("wal"));
        let mut run = open_logs(&base, 2).unwrap();
        open_adopted(&base, &adopted_root(data), 2, &mut run).unwrap();
        let names: Vec<_> = run.logs.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "core-0",
                "core-1",
                "adopted/node-a/core-0",
                "adopted/node-b/core-0"
            ]
        );
        assert_eq!(run.owners(), [0, 1, 0, 1]);
        assert_eq!(run.logs[3].adopted_from.as_deref(), Some("node-b"));
        assert_eq!(run.logs[2].recovered.pending.len(), 2);
        assert!(run.logs[0].adopted_from.is_none());
    }

    #[test]
    fn an_unlisted_adopted_log_is_listed_and_a_listed_one_without_segments_is_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let wal_dir = tmp.path().join("wal");
        drop(open_logs(&small(&wal_dir), 3).unwrap());
        let m = manifest::read_in(&StdFs, &wal_dir).unwrap().unwrap();
        assert_eq!(m.logs, ["core-0", "core-1", "core-2"]);
        // core-2 holds no segment with an event, but it is listed: it is still opened (its
        // checkpoint is checked) by a run with fewer workers.
        let run = open_logs(&small(&wal_dir), 2).unwrap();
        let names: Vec<_> = run.logs.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["core-0", "core-1", "core-2"]);
    }
}

/// The runtime's side of an adoption (`replication::adopt::TakeOverNode`): the lost node's
/// logs rebuilt from the stream into `adopted/<node>/` (`ops::restore`, skipped when a
/// previous run rebuilt them already), then opened and handed to the cores ([`TakeOver`]).
#[derive(Debug)]
pub struct NodeTakeOver {
    config: Arc<crate::config::Config>,
    backlog: Arc<crate::ingest::backlog::Backlog>,
    inbox: Arc<AdoptInbox>,
    take: TakeOver,
    wakers: Vec<Arc<mio::Waker>>,
}

impl NodeTakeOver {
    /// Over the node's start-up `config`, ingest's `backlog` (which counts the adopted pending
    /// events) and the cores' `inbox` and `wakers`.
    pub fn new(
        config: Arc<crate::config::Config>,
        backlog: Arc<crate::ingest::backlog::Backlog>,
        inbox: Arc<AdoptInbox>,
        parts: TakeOverParts,
        wakers: Vec<Arc<mio::Waker>>,
    ) -> NodeTakeOver {
        NodeTakeOver {
            config,
            backlog,
            inbox,
            take: TakeOver::new(parts),
            wakers,
        }
    }
}

impl crate::replication::adopt::TakeOverNode for NodeTakeOver {
    fn runs(&self, node: &str) -> bool {
        self.take.runs(node)
    }

    fn take_over(&mut self, node: &str) -> Result<usize, String> {
        use crate::replication::restore::{write, RestoreError};
        let config = &self.config;
        let spec = (config.replication.as_ref()).ok_or("replication is off")?;
        let dir = self.take.parts.root.join(node);
        let rebuilt = write::holds(&dir.join("wal")).map_err(|e| e.to_string())?;
        if rebuilt.is_none() {
            let max_dlq = config.dispatch.max_dlq_entries as usize;
            let base = &self.take.parts.base;
            match crate::ops::restore::restore(spec, node, &dir, base, max_dlq) {
                Ok(Some(r)) => {
                    for line in crate::ops::restore::report(node, &r) {
                        eprintln!("sluice: replication: {line}");
                    }
                }
                Ok(None) | Err(RestoreError::NoStream { .. }) => {
                    eprintln!("sluice: replication: the stream holds no log of node {node}");
                    self.take.parts.running.insert(node.to_owned());
                    return Ok(0);
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        let backlog = &self.backlog;
        let taken = self.take.open_and_hand(
            node,
            &self.inbox,
            &|events, bytes| backlog.preload(events, bytes),
            &|core| {
                if let Some(w) = self.wakers.get(core) {
                    let _ = w.wake();
                }
            },
        )?;
        for (name, core) in &taken.logs {
            eprintln!("sluice: replication: {name} runs on core {core}");
        }
        eprintln!(
            "sluice: replication: node {node}: {} events pending ({} bytes) in its logs",
            taken.events, taken.bytes
        );
        Ok(taken.logs.len())
    }
}
