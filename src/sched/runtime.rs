//! Starting, running and stopping the server.
//!
//! Start-up order matters: signal handlers are installed first (a SIGTERM during start-up must
//! not kill the process with the default action), then the WAL is recovered, then listeners are
//! bound (so a bad address fails before anything runs), then the cores (each with its commit
//! helper) start, and only then is the phase `Ready` and the address printed.
//!
//! The build reads in one screen (`build`'s steps, each its own function): `recover_logs`
//! (open and recover every log, one line each), `shared_state` (the ingest and dispatch
//! contexts from `sched::context`, the routes, the logs' published state, the I/O backend),
//! `bind_listeners`, then `wire_cores` (per core: its poll and waker, its commit helper over
//! the logs it owns, its pump, its links).
//!
//! Shutdown (SIGTERM/SIGINT): phase `Draining` (`/readyz` → 503 `draining`) at once; for
//! `drain_grace` the listeners stay open and requests are served (with `Connection: close`), so
//! a load balancer polling `/readyz` can move traffic away; then each worker takes what its
//! listener has queued and stops accepting, answers what it receives, with
//! `Connection: close`, and half-closes connections silent between requests
//! (`sched::worker::drain`); workers exit when they have nothing in flight, or after
//! `shutdown_timeout`. A core that exits closes its commit helper, which finishes the batches it
//! holds, syncs its logs and exits (`wal::commit::Committer::close`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::Config;
use crate::ingest::router::Router;
use crate::metrics::Metrics;
use crate::net::io::{Backend, Reactor, Waker};
use crate::replication::restore::RestoreError;
use crate::sched::commit::{self, HelperLog};
use crate::sched::context::{DispatchContext, IngestContext, Pending};
use crate::sched::error::io_err;
pub use crate::sched::error::RuntimeError;
use crate::sched::logs::{self, OpenLog, RunLogs};
use crate::sched::pump::{Outstanding, PumpLog};
use crate::sched::readers::Readers;
use crate::sched::state::{NodeParts, Phase, Shared};
use crate::sched::wiring::LogOwners;
use crate::sched::worker::{self, CoreLinks, CoreParts, Worker};
use crate::sync::clock::{unix_millis, Clock, MonotonicClock};
use crate::wal::{self, WalConfig, WalShared};

/// Binds one `SO_REUSEPORT` listener.
pub fn bind_reuseport(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// Runs the server until SIGTERM/SIGINT, then drains. `on_ready` receives the bound address.
/// SIGHUP is ignored (no reload source); see [`serve_reloadable`].
pub fn serve(config: Config, on_ready: &mut dyn FnMut(SocketAddr)) -> Result<(), RuntimeError> {
    serve_reloadable(config, None, on_ready)
}

/// [`serve`], with SIGHUP and `POST /admin/reload` re-reading `source` (`ops::reload`).
pub fn serve_reloadable(
    config: Config,
    source: Option<crate::ops::reload::ReloadSource>,
    on_ready: &mut dyn FnMut(SocketAddr),
) -> Result<(), RuntimeError> {
    if !crate::sched::alloc::tune() {
        eprintln!("sluice: the allocator refused M_MMAP_THRESHOLD; large bodies may stay resident");
    }
    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, term.clone())
            .map_err(io_err("installing signal handlers"))?;
    }
    // SIGHUP never kills: it asks for a reload, run on this thread while it waits.
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone())
        .map_err(io_err("installing signal handlers"))?;
    // A port held by another process fails start-up before the WAL is touched (checked again
    // right before binding).
    let listen = config.server.listen;
    crate::net::listen::ensure_free(listen).map_err(|e| RuntimeError::Io {
        what: crate::net::listen::describe_bind_error(listen, &e),
        source: e,
    })?;
    let run = build(Arc::new(config))?;
    let shared = run.shared.clone();
    if let Some(source) = source {
        shared.reload().set_source(source);
    }
    let (handles, addr) = start(run)?;
    shared.set_phase(Phase::Ready);
    on_ready(addr);
    let mut handles = handles;
    let died = wait_for_signal(&term, &handles, &mut || {
        crate::ops::reload::on_signal(&hup, shared.reload());
    });
    if let Some(a) = handles.adopter.as_mut() {
        a.stop();
    }
    drain(
        &shared,
        handles.threads,
        &handles.wakers,
        &handles.hard_stop,
    );
    // The cores have exited: nothing sends to the readers any more.
    handles.readers.stop();
    eprintln!("sluice: stopped");
    match died {
        Some(name) => Err(RuntimeError::ThreadDied(name.into())),
        None => Ok(()),
    }
}

/// Everything built before any thread starts.
struct Run {
    shared: Arc<Shared>,
    listeners: Vec<std::net::TcpListener>,
    addr: SocketAddr,
    cores: Vec<CoreParts>,
    /// With `[replication]`: what the adopter needs to take over a lost node's logs.
    take_over: Option<logs::TakeOverParts>,
}

/// With `[replication]`: the parts of a taking-over while the node runs (`sched::logs`): the
/// next log index, the owners' table, the nodes whose logs this run already runs.
fn take_over_parts(
    config: &Config,
    shared: &Shared,
    run_logs: &RunLogs,
    owners: &LogOwners,
) -> Option<logs::TakeOverParts> {
    config.replication.as_ref()?;
    let histogram = shared.wal().first()?.sync_seconds.clone();
    // The logs adopted in an earlier run count as adopted from the start.
    if let Some(state) = shared.replication() {
        let mut per_node: std::collections::BTreeMap<&str, usize> = Default::default();
        for l in &run_logs.logs {
            if let Some(node) = &l.adopted_from {
                *per_node.entry(node).or_default() += 1;
            }
        }
        for (node, n) in per_node {
            let at = std::sync::atomic::Ordering::Relaxed;
            state.adopted_logs.fetch_add(n, at);
            state.note_adopted(node, n, unix_millis());
        }
    }
    Some(logs::TakeOverParts {
        base: wal_config(config, config.wal_dir()),
        root: logs::adopted_root(&config.server.data_dir),
        workers: config.server.workers,
        owners: owners.clone(),
        next_index: run_logs.logs.len(),
        histogram,
        running: (run_logs.logs.iter())
            .filter_map(|l| l.adopted_from.clone())
            .collect(),
        links: shared_links(config, shared),
    })
}

/// The adopted logs' way to their subjects: the mirror's opener and the spec.
fn shared_links(
    config: &Config,
    shared: &Shared,
) -> Option<(
    crate::replication::mirror::SubjectOpener,
    crate::replication::ReplicationSpec,
)> {
    let opener = shared.mirror()?.opener().clone();
    Some((opener, config.replication.clone()?))
}

/// The WAL settings of `config`, for the log directory `dir`.
pub fn wal_config(config: &Config, dir: std::path::PathBuf) -> WalConfig {
    WalConfig {
        dir,
        segment_bytes: config.wal.segment_bytes,
        max_body_bytes: config.server.max_body_bytes as usize,
        durability: config.wal.durability,
        write_path: config.wal.write_path,
        max_batch: config.wal.max_batch,
        accept_loss: config.wal.accept_loss,
    }
}

/// Recovers every log, builds the shared state, binds the listeners and wires the cores.
fn build(config: Arc<Config>) -> Result<Run, RuntimeError> {
    let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
    restore_empty_data_dir(&config)?;
    let mut run_logs = recover_logs(&config)?;
    let shared = Arc::new(shared_state(config.clone(), clock, &mut run_logs)?);
    if config.wal.commit == wal::CommitPath::Ring {
        match commit_on_ring(&config, shared.io_backend()) {
            true => eprintln!("sluice: wal commit: on each core's io_uring ring"),
            false => eprintln!(
                "sluice: wal commit: \"ring\" needs the io_uring backend; on the commit helpers"
            ),
        }
    }
    // A log's frames never announce a lower retired point than the stream already holds
    // (`replication::retention`: a restore begins each log there).
    if let Some(m) = shared.mirror() {
        for &(k, lsn) in m.retired() {
            let name = wal::layout::core_log_name(usize::from(k));
            for w in shared.wal().iter().filter(|w| w.name == name) {
                w.note_done_below(lsn);
            }
        }
    }
    let (listeners, addr) = bind_listeners(config.server.listen, config.server.workers)?;
    let owners = LogOwners::new(&run_logs.owners());
    let take_over = take_over_parts(&config, &shared, &run_logs, &owners);
    let cores = wire_cores(&shared, run_logs, owners)?;
    Ok(Run {
        shared,
        listeners,
        addr,
        cores,
        take_over,
    })
}

/// With `[replication]` and a data dir whose `wal/` holds nothing (a replaced disk): this node's
/// logs are restored from the stream first (`ops::restore`), one line per log on stderr; a
/// stream with no message of the node, or no stream yet, leaves the data dir empty (a new
/// node). Any other failure (JetStream unreachable, a gap) fails the start: a node must not
/// come up empty under a name whose acknowledged events the stream holds. Before the logs
/// are opened, so before the mirror starts and long before anything listens.
fn restore_empty_data_dir(config: &Config) -> Result<(), RuntimeError> {
    let Some(spec) = &config.replication else {
        return Ok(());
    };
    let data_dir = &config.server.data_dir;
    let used = crate::replication::restore::write::holds(&config.wal_dir());
    if !matches!(used, Ok(None)) {
        return Ok(());
    }
    // Logs another node adopted are never served here again, nor restored (README).
    match crate::replication::lease::adopted_blocking(spec) {
        Ok(None) => {}
        Ok(Some(adopted)) => {
            let e = crate::replication::mirror::StartError::Adopted(adopted);
            return Err(RuntimeError::Replication(e));
        }
        Err(error) => {
            let servers = spec.servers.clone();
            let e = crate::replication::mirror::StartError::Unreachable { servers, error };
            return Err(RuntimeError::Replication(e));
        }
    }
    let wal = wal_config(config, config.wal_dir());
    let max_dlq = config.dispatch.max_dlq_entries as usize;
    match crate::ops::restore::restore(spec, &spec.node, data_dir, &wal, max_dlq) {
        Ok(Some(r)) => {
            for line in crate::ops::restore::report(&spec.node, &r) {
                eprintln!("sluice: {line}");
            }
        }
        // No stream yet (the mirror creates it), or none of this node's messages in it.
        Ok(None) | Err(RestoreError::NoStream { .. }) => eprintln!(
            "sluice: replication: the stream {} holds no log of node {}: starting with empty logs",
            spec.stream, spec.node
        ),
        Err(e) => return Err(RuntimeError::Restore(e)),
    }
    Ok(())
}

/// Opens and recovers every log of `config`'s data dir, one line per log on stderr.
fn recover_logs(config: &Config) -> Result<RunLogs, RuntimeError> {
    let base = wal_config(config, config.wal_dir());
    let workers = config.server.workers;
    let mut run_logs = logs::open_logs(&base, workers).map_err(RuntimeError::Wal)?;
    if config.replication.is_some() {
        // The logs this node adopted from lost nodes in an earlier run (`sched::logs`).
        let root = logs::adopted_root(&config.server.data_dir);
        logs::open_adopted(&base, &root, workers, &mut run_logs).map_err(RuntimeError::Wal)?;
    }
    for log in &run_logs.logs {
        eprintln!("sluice: {}", recovery_line(log));
    }
    Ok(run_logs)
}

/// What the recovery of `log` found.
fn recovery_line(log: &OpenLog) -> String {
    let r = &log.report;
    let torn = match (&r.torn, &r.truncated_tail) {
        (Some(t), _) => format!(", {t}"),
        (None, Some((seg, off))) => format!(", torn tail truncated at {}:{}", seg.display(), off),
        (None, None) => String::new(),
    };
    format!(
        "wal {} recovered: {} segments, {} records, last lsn {}, {} pending{torn}",
        log.name,
        r.segments,
        r.records,
        r.last_lsn,
        log.recovered.pending.len(),
    )
}

/// The dead letters whose replays are pending in a recovered log and still in the DLQ leave it
/// now, before anything is served: a crash came between a replay's commit and its entry's
/// removal (the next commit, `wal::group::Item::Release`). One group removal; a failure is
/// logged (such an entry may be replayed again: at least once).
fn release_replayed(dlq: &crate::dispatch::dlq::DlqStore, run_logs: &RunLogs) {
    let ids: Vec<((), &str)> = (run_logs.logs.iter())
        .flat_map(|l| l.recovered.pending.values())
        .filter_map(|m| Some(((), m.replay_of.as_deref()?)))
        .collect();
    if ids.is_empty() {
        return;
    }
    let out = dlq.remove_batch(ids);
    let removed = out.iter().filter(|(_, r)| r.is_ok()).count();
    if removed > 0 {
        eprintln!(
            "sluice: {removed} replayed dead letters left the DLQ at start (their replays are in \
             the WAL; the crash came before their removal)"
        );
    }
    for (_, r) in out {
        match r {
            Ok(()) | Err(crate::dispatch::dlq::DlqError::NotFound { .. }) => {}
            Err(e) => eprintln!("sluice: a replayed dead letter stays in the DLQ: {e}"),
        }
    }
}

/// Events and bytes committed but not done over every recovered log.
fn pending(run_logs: &RunLogs) -> Pending {
    let mut p = Pending::default();
    for log in &run_logs.logs {
        p.events += log.recovered.pending.len() as u64;
        p.bytes += log.recovered.pending.values().map(|m| m.bytes).sum::<u64>();
    }
    p
}

/// The shared state: the ingest and dispatch contexts, the routes, the logs' published state,
/// the metric shards and the I/O backend (`server.io` resolved).
fn shared_state(
    config: Arc<Config>,
    clock: Arc<dyn Clock>,
    run_logs: &mut RunLogs,
) -> Result<Shared, RuntimeError> {
    let dirs: Vec<PathBuf> = run_logs.logs.iter().map(|l| l.dir.clone()).collect();
    let now_secs = unix_millis() / 1000;
    let pending = pending(run_logs);
    let ingest = IngestContext::build(&config, clock.now_nanos(), pending, &dirs, now_secs)?;
    let dispatch = DispatchContext::build(&config, Arc::clone(&ingest.backlog))?;
    release_replayed(&dispatch.dlq, run_logs);
    let router = Router::new(&config.ingest_triggers(), config.ingest.default_route)
        .with_admin(config.admin_token.is_some());
    for line in crate::config::render::routes_summary(&config) {
        eprintln!("sluice: {line}");
    }
    let (io_backend, why) =
        crate::net::io::select(config.server.io).map_err(|what| RuntimeError::Io {
            what,
            source: std::io::Error::from(std::io::ErrorKind::Unsupported),
        })?;
    eprintln!("sluice: io backend: {why}");
    let mirror = match &config.replication {
        Some(spec) => Some(
            crate::replication::mirror::Mirror::start(
                spec,
                config.server.workers,
                wal::max_record_bytes_for(config.server.max_body_bytes as usize),
                &local_logs(run_logs)?,
                crate::ops::restore::carry(dispatch.dlq.clone()),
            )
            .map_err(RuntimeError::Replication)?,
        ),
        None => None,
    };
    let node = NodeParts {
        router,
        wal: wal_states(run_logs),
        metrics: Arc::new(Metrics::new(config.server.workers)),
        io_backend,
        mirror,
    };
    Ok(Shared::new(config, clock, ingest, dispatch, node))
}

/// Each log's published state, starting at its recovered durable LSN and outcome index (moved
/// out of the recovery); one sync-latency histogram for all.
fn wal_states(run_logs: &mut RunLogs) -> Vec<Arc<WalShared>> {
    let histogram = Arc::new(crate::metrics::histogram::Histogram::new(
        wal::SYNC_BOUNDS_NANOS,
    ));
    let state = |l: &mut OpenLog| logs::published_state(l, &histogram);
    run_logs.logs.iter_mut().map(state).collect()
}

/// One listener per core on `listen`: the first resolves the port (it may be 0), the others
/// share it. No other process may hold the address (`net::listen`): `SO_REUSEPORT` would let
/// it share silently.
fn bind_listeners(
    listen: SocketAddr,
    workers: usize,
) -> Result<(Vec<std::net::TcpListener>, SocketAddr), RuntimeError> {
    let first = crate::net::listen::ensure_free(listen)
        .and_then(|()| bind_reuseport(listen))
        .map_err(|e| RuntimeError::Io {
            what: crate::net::listen::describe_bind_error(listen, &e),
            source: e,
        })?;
    let addr = first
        .local_addr()
        .map_err(io_err("reading the bound address"))?;
    let mut listeners = vec![first];
    for _ in 1..workers {
        listeners.push(bind_reuseport(addr).map_err(io_err(format!("binding {addr}")))?);
    }
    Ok((listeners, addr))
}

/// True if the cores commit their own logs on their io_uring rings (`wal.commit = "ring"`, and
/// the backend is io_uring; config checks ensured durability and write path).
fn commit_on_ring(config: &Config, backend: Backend) -> bool {
    config.wal.commit == wal::CommitPath::Ring && backend == Backend::Uring
}

/// Each core's reactor and the waker of its loop.
fn reactors(workers: usize) -> Result<(Vec<Reactor>, Vec<Arc<Waker>>), RuntimeError> {
    let mut reactors = Vec::new();
    let mut wakers = Vec::new();
    for _ in 0..workers {
        let reactor = Reactor::open().map_err(io_err("creating a poll"))?;
        let waker = (reactor.waker(worker::WAKER_TOKEN)).map_err(io_err("creating a waker"))?;
        reactors.push(reactor);
        wakers.push(Arc::new(waker));
    }
    Ok((reactors, wakers))
}

/// The logs by owner core: what its commit helper writes and what its pump reads.
fn logs_per_core(
    run_logs: RunLogs,
    wal_states: &[Arc<WalShared>],
    workers: usize,
) -> Vec<(Vec<HelperLog>, Vec<PumpLog>)> {
    let mut per_core: Vec<(Vec<HelperLog>, Vec<PumpLog>)> =
        (0..workers).map(|_| (Vec::new(), Vec::new())).collect();
    for (index, log) in run_logs.logs.into_iter().enumerate() {
        let mut wal = log.wal;
        wal.attach_shared(wal_states[index].clone());
        // Test builds only: storage faults switched by a control file (`wal::failpoints`).
        #[cfg(feature = "failpoints")]
        wal::failpoints::install_from_env(&mut wal);
        let (helper_logs, pump_logs) = &mut per_core[log.owner];
        pump_logs.push(PumpLog {
            index,
            name: log.name,
            dir: log.dir,
            own: index < workers,
            durable: log.report.last_lsn,
            recovered: log.recovered,
        });
        helper_logs.push(HelperLog {
            wal,
            shared: wal_states[index].clone(),
        });
    }
    per_core
}

/// The logs of this run as replication's start-up sees them (`replication::catch_up`).
fn local_logs(
    run_logs: &RunLogs,
) -> Result<Vec<crate::replication::catch_up::LocalLog>, RuntimeError> {
    let one = |l: &OpenLog| {
        let index = replication_index(&l.name).ok_or_else(|| legacy_log(&l.dir))?;
        Ok(crate::replication::catch_up::LocalLog {
            core: l.owner,
            index,
            dir: l.dir.clone(),
            last_lsn: l.report.last_lsn,
        })
    };
    // Logs adopted from another node are not replicated (README "Several nodes").
    let own = run_logs.logs.iter().filter(|l| l.adopted_from.is_none());
    own.map(one).collect()
}

/// The index a log named `name` has in replication frames: its `K` (`wal::layout::core_of`).
fn replication_index(name: &str) -> Option<u16> {
    wal::layout::core_of(name).and_then(|k| u16::try_from(k).ok())
}

/// Replication refuses the legacy log (segments directly in `wal/`): it has no index.
fn legacy_log(dir: &std::path::Path) -> RuntimeError {
    RuntimeError::Config(format!(
        "replication mirrors core-K logs only; {} is a legacy log: drain it with replication \
         off first",
        dir.display()
    ))
}

/// The index of each log (`wal/core-<index>`) a core commits, by slot, for its replication
/// frames. The legacy log (segments directly in `wal/`) has no index: replication refuses it.
fn replicated_logs(
    logs: &[HelperLog],
    wal_dir: &std::path::Path,
) -> Result<Vec<u16>, RuntimeError> {
    let index = |log: &HelperLog| replication_index(log.wal.dir().file_name()?.to_str()?);
    // A core's logs adopted from another node come after its own (`sched::logs`): outside
    // `wal/`, and not replicated.
    let own = logs.iter().take_while(|l| l.wal.dir().starts_with(wal_dir));
    own.map(|l| index(l).ok_or_else(|| legacy_log(l.wal.dir())))
        .collect()
}

/// Gives each core its reactor, its commit helper over the logs it owns, its pump and its links.
fn wire_cores(
    shared: &Arc<Shared>,
    run_logs: RunLogs,
    owners: LogOwners,
) -> Result<Vec<CoreParts>, RuntimeError> {
    let config = &shared.config;
    let workers = config.server.workers;
    let (reactors, wakers) = reactors(workers)?;
    let max_outstanding = config.pump.max_outstanding;
    let outstanding = Arc::new(Outstanding::with_cores(max_outstanding, workers));
    let mut links = CoreLinks::wire(workers, max_outstanding, wakers.clone(), owners);
    let per_core = logs_per_core(run_logs, shared.wal(), workers);
    let on_ring = commit_on_ring(config, shared.io_backend());
    let now = shared.clock.now_nanos();
    let mut cores = Vec::new();
    for (core, ((mut helper_logs, pump_logs), reactor)) in
        per_core.into_iter().zip(reactors).enumerate()
    {
        // Only with `[replication]`: a node without it may still run a legacy log.
        let replicate = match shared.replication() {
            Some(_) => {
                let indexes = replicated_logs(&helper_logs, &config.wal_dir())?;
                shared.replicate(core, indexes)
            }
            None => None,
        };
        // Logs adopted from other nodes in an earlier run come last (`sched::logs`): given
        // to the helper with their subjects' links, after the catch-up of each.
        let own = (helper_logs.iter())
            .position(|l| !l.wal.dir().starts_with(config.wal_dir()))
            .unwrap_or(helper_logs.len());
        let adopted = helper_logs.split_off(own);
        let mut committer = commit::start(
            core,
            helper_logs,
            shared.dispatch().dlq.clone(),
            wakers[core].clone(),
            config.wal.max_batch,
            on_ring,
            replicate,
        )
        .map_err(io_err("starting a commit helper"))?;
        for log in adopted {
            let link = match shared_links(config, shared) {
                Some((opener, spec)) => {
                    let last = log.shared.durable_lsn();
                    let link = logs::adopted_link(&opener, &spec, log.wal.dir(), core, last);
                    Some(link.map_err(|e| RuntimeError::Config(format!("replication: {e}")))?)
                }
                None => None,
            };
            committer.adopt(log, link);
        }
        let pump = crate::sched::pump::build(
            core,
            shared.clone(),
            pump_logs,
            outstanding.clone(),
            wakers.clone(),
            now,
        )
        .map_err(RuntimeError::Wal)?;
        cores.push(CoreParts {
            reactor,
            committer,
            pump,
            links: links.remove(0),
        });
    }
    Ok(cores)
}

/// The running threads.
struct Handles {
    threads: Vec<JoinHandle<()>>,
    wakers: Vec<Arc<Waker>>,
    hard_stop: Arc<AtomicBool>,
    readers: Readers,
    /// With `[replication]`: the adopter thread, stopped first at shutdown (a node that is
    /// leaving adopts nothing).
    adopter: Option<crate::replication::adopt::Adopter>,
}

/// Starts one worker thread per core.
fn start(run: Run) -> Result<(Handles, SocketAddr), RuntimeError> {
    let hard_stop = Arc::new(AtomicBool::new(false));
    let wakers = run
        .cores
        .first()
        .map(|c| c.links.wakers.clone())
        .unwrap_or_default();
    // Shared destination budgets: the Redis client thread wakes the cores' loops.
    run.shared
        .dispatch()
        .cluster
        .start(run.shared.clock.clone(), wakers.clone())
        .map_err(io_err("starting the Redis client thread"))?;
    // Operator reads (event lookups and lists, ledger, dashboard state) off the core loops.
    let (readers, read_links) = Readers::start(run.shared.clone(), wakers.clone())
        .map_err(io_err("starting the reader threads"))?;
    // With `[replication]`: the watch on the other nodes' leases (`replication::adopt`).
    let adopter = match (run.take_over, &run.shared.config.replication) {
        (Some(parts), Some(spec)) => {
            let state = run.shared.replication().cloned();
            let shared = &run.shared;
            let take = logs::NodeTakeOver::new(
                shared.config.clone(),
                shared.ingest().backlog.clone(),
                shared.adoptions().clone(),
                parts,
                wakers.clone(),
            );
            let state = state.ok_or_else(|| RuntimeError::Config("no mirror".into()))?;
            let a = crate::replication::adopt::Adopter::start(spec.clone(), state, Box::new(take))
                .map_err(io_err("starting the adopter thread"))?;
            Some(a)
        }
        _ => None,
    };
    let mut threads = Vec::new();
    let cores = run.listeners.into_iter().zip(run.cores).zip(read_links);
    for (id, ((listener, parts), reads)) in cores.enumerate() {
        let shared = run.shared.clone();
        let w = Worker::new(id, listener, shared, hard_stop.clone(), parts, reads)
            .map_err(io_err("creating a worker"))?;
        let h = std::thread::Builder::new()
            .name(format!("sluice-core-{id}"))
            .spawn(move || w.run())
            .map_err(io_err("starting a worker"))?;
        threads.push(h);
    }
    Ok((
        Handles {
            threads,
            wakers,
            hard_stop,
            readers,
            adopter,
        },
        run.addr,
    ))
}

/// Waits for SIGTERM/SIGINT, watching that every core stays alive; names a core that died.
fn wait_for_signal(
    term: &AtomicBool,
    handles: &Handles,
    tick: &mut dyn FnMut(),
) -> Option<&'static str> {
    while !term.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        tick();
        if handles.threads.iter().any(|h| h.is_finished()) {
            return Some("sluice-core");
        }
    }
    None
}

/// The drain: phase `Draining`, every core finishes what it has (bounded by
/// `shutdown_timeout`), then a hard stop for any core still running.
fn drain(
    shared: &Shared,
    threads: Vec<JoinHandle<()>>,
    wakers: &[Arc<Waker>],
    hard_stop: &AtomicBool,
) {
    let config = &shared.config;
    let clock = &shared.clock;
    shared.begin_drain(clock.now_nanos(), config.server.drain_grace);
    eprintln!(
        "sluice: draining: serving for drain_grace {:?}, then up to shutdown_timeout {:?}",
        config.server.drain_grace, config.server.shutdown_timeout
    );
    for w in wakers {
        let _ = w.wake();
    }
    let grace = config.server.drain_grace + config.server.shutdown_timeout + Duration::from_secs(1);
    let deadline = clock.now_nanos() + grace.as_nanos() as u64;
    while threads.iter().any(|h| !h.is_finished()) && clock.now_nanos() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    hard_stop.store(true, Ordering::Relaxed);
    for w in wakers {
        let _ = w.wake();
    }
    for h in threads {
        let _ = h.join();
    }
}

/// Core 0 of a one-core node built from `config`, its worker not running, with the address it
/// listens on and the readers it talks to (stop them after): for the worker's turn test, which
/// hands each turn its events itself.
#[cfg(all(test, not(sluice_loom)))]
pub(crate) fn test_worker(config: Config) -> (Worker, SocketAddr, Readers) {
    let run = build(Arc::new(config)).expect("the node builds");
    let wakers = (run.cores.iter())
        .map(|c| c.links.wakers[c.links.core].clone())
        .collect();
    let (readers, mut read_links) = Readers::start(run.shared.clone(), wakers).expect("readers");
    let listener = run.listeners.into_iter().next().expect("a listener");
    let parts = run.cores.into_iter().next().expect("a core");
    let stop = Arc::new(AtomicBool::new(false));
    let shared = run.shared.clone();
    let w = Worker::new(0, listener, shared, stop, parts, read_links.remove(0)).expect("worker");
    run.shared.set_phase(Phase::Ready);
    (w, run.addr, readers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Overrides;
    use crate::ops::lifecycle::Phase as P;

    /// A configuration from manifest `text` (no environment) with its data dir in `dir`.
    fn cfg(text: &str, dir: &std::path::Path, overrides: Overrides) -> Config {
        let overrides = Overrides {
            data_dir: Some(dir.to_path_buf()),
            ..overrides
        };
        let raw = Config::parse_manifest(text).unwrap();
        Config::build(raw, &|_| None, &overrides).unwrap()
    }

    const TWO_CORES: &str = "[server]\nworkers = 2\nio = \"mio\"\nlisten = \"127.0.0.1:0\"\n\
        [[triggers]]\nid = \"a\"\nprovider = \"p\"\npath = \"/a\"\nhandler = \"http://127.0.0.1:9/a\"\n";

    #[test]
    fn wal_config_carries_every_wal_setting() {
        let dir = tempfile::tempdir().unwrap();
        let text = "[server]\nmax_body_bytes = 65536\n[wal]\ndurability = \"os\"\n\
                    write_path = \"mmap\"\nsegment_bytes = 3145728\nmax_batch = 7\n";
        let accept = Overrides {
            accept_wal_loss: true,
            ..Overrides::default()
        };
        let config = cfg(text, dir.path(), accept);
        let w = wal_config(&config, dir.path().join("x"));
        assert_eq!(w.dir, dir.path().join("x"));
        assert_eq!(w.segment_bytes, 3_145_728);
        assert_eq!(w.max_body_bytes, 65_536);
        assert_eq!(w.durability, wal::Durability::Os);
        assert_eq!(w.write_path, wal::WritePath::Mmap);
        assert_eq!(w.max_batch, 7);
        assert!(w.accept_loss);
        let plain = cfg("", dir.path(), Overrides::default());
        assert!(!wal_config(&plain, dir.path().into()).accept_loss);
    }

    #[test]
    fn the_ring_commits_only_on_the_io_uring_backend() {
        let dir = tempfile::tempdir().unwrap();
        let ring = cfg(
            "[wal]\ncommit = \"ring\"\n",
            dir.path(),
            Overrides::default(),
        );
        let helper = cfg("", dir.path(), Overrides::default());
        assert!(commit_on_ring(&ring, Backend::Uring));
        assert!(!commit_on_ring(&ring, Backend::Mio));
        assert!(!commit_on_ring(&helper, Backend::Uring));
        assert!(!commit_on_ring(&helper, Backend::Mio));
    }

    #[test]
    fn reuseport_listeners_share_a_port_and_refuse_a_plain_holder() {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let (listeners, addr) = bind_listeners(any, 3).unwrap();
        assert_eq!(listeners.len(), 3);
        assert_ne!(addr.port(), 0);
        for l in &listeners {
            assert_eq!(l.local_addr().unwrap(), addr);
        }
        // A socket without SO_REUSEPORT holds this port: joining it fails.
        let plain = std::net::TcpListener::bind(any).unwrap();
        let held = plain.local_addr().unwrap();
        let e = bind_reuseport(held).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
        // And the checked path names the address.
        match bind_listeners(held, 1) {
            Err(RuntimeError::Io { what, .. }) => {
                assert!(what.contains(&held.to_string()), "{what}")
            }
            other => panic!("expected an Io error, got {other:?}"),
        }
        // An address no interface has (TEST-NET-1).
        let e = bind_reuseport("192.0.2.1:0".parse().unwrap()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AddrNotAvailable, "{e}");
    }

    #[test]
    fn the_contexts_are_built_from_a_config_in_a_temp_dir() {
        let dir = tempfile::tempdir().unwrap();
        let config = Arc::new(cfg(TWO_CORES, dir.path(), Overrides::default()));
        let mut run_logs = recover_logs(&config).unwrap();
        assert_eq!(run_logs.logs.len(), 2, "one own log per core");
        assert_eq!(pending(&run_logs), Pending::default());
        assert!(recovery_line(&run_logs.logs[0]).starts_with("wal core-0 recovered: "));
        let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
        let shared = shared_state(config.clone(), clock, &mut run_logs).unwrap();
        // One durable-queue bound for both roles.
        assert!(Arc::ptr_eq(
            &shared.ingest().backlog,
            &shared.dispatch().backlog
        ));
        assert_eq!(shared.ingest().segment_bytes, config.wal.segment_bytes);
        assert_eq!(shared.io_backend(), Backend::Mio);
        assert_eq!(shared.wal().len(), 2);
        assert_eq!(shared.reload().number(), 1);
        assert!(
            dir.path().join("dlq").is_dir(),
            "the dead-letter queue is opened"
        );
        // The ops view reads the same cells: the lifecycle, the backlog, the logs.
        let view = shared.ops_view();
        assert_eq!(view.not_ready_reason(), Some("starting"));
        shared.set_phase(P::Ready);
        assert_eq!(shared.ops_view().not_ready_reason(), None);
        shared.ingest().backlog.reserve_for("a", 100).unwrap();
        assert_eq!(shared.ops_view().backlog.pending_events(), 1);
        shared.begin_drain(shared.clock.now_nanos(), Duration::ZERO);
        assert_eq!(shared.not_ready_reason(), Some("draining"));
        let owners = LogOwners::new(&run_logs.owners());
        let cores = wire_cores(&Arc::new(shared), run_logs, owners).unwrap();
        assert_eq!(cores.len(), 2);
    }

    #[test]
    fn a_dead_letter_dir_that_cannot_be_made_fails_the_build_by_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("dlq"), b"not a directory").unwrap();
        let config = Arc::new(cfg(TWO_CORES, dir.path(), Overrides::default()));
        let mut run_logs = recover_logs(&config).unwrap();
        let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
        match shared_state(config, clock, &mut run_logs) {
            Err(RuntimeError::Config(msg)) => {
                assert!(msg.starts_with("dead-letter queue: "), "{msg}")
            }
            other => panic!("expected a config error, got {other:?}"),
        }
    }
}
