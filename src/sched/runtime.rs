//! Starting, running and stopping the server.
//!
//! Start-up order matters: signal handlers are installed first (a SIGTERM during start-up must
//! not kill the process with the default action), then the WAL is recovered, then listeners are
//! bound (so a bad address fails before anything runs), then the writer and workers start, and
//! only then is the phase `Ready` and the address printed.
//!
//! Shutdown (SIGTERM/SIGINT): phase `Draining` (`/readyz` → 503 `draining`); each worker stops
//! accepting, closes idle connections and answers what it has already received, with
//! `Connection: close`; workers exit when they have nothing in flight, or after
//! `shutdown_timeout`. Then the WAL ring is closed, the writer drains it, syncs and exits.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_utils::sync::Parker;
use mio::Waker;
use socket2::{Domain, Protocol, Socket, Type};

use crate::config::{Config, DurabilityMode, WritePathMode};
use crate::dispatch::dlq::DlqStore;
use crate::ingest::bucket::{Admission, BucketParams};
use crate::ingest::router::Router;
use crate::ingest::sources::SourceTable;
use crate::ingest::Guards;
use crate::metrics::dispatch::DispatchMetrics;
use crate::metrics::Metrics;
use crate::ring;
use crate::sched::backlog::Backlog;
use crate::sched::pump::{Pump, PumpLinks, PumpSink};
use crate::sched::state::{Phase, Shared};
use crate::sched::worker::{DispatchLinks, Worker};
use crate::sync::clock::{unix_millis, Clock, MonotonicClock};
use crate::wal::WalTail;
use crate::wal::{self, CompletionSink, Durability, WalConfig, WalShared, WritePath};

/// Why the server could not start or stopped abnormally.
#[derive(Debug)]
pub enum RuntimeError {
    /// The WAL could not be opened or recovered.
    Wal(wal::WalError),
    /// Binding, thread spawning or another OS call failed.
    Io {
        what: String,
        source: std::io::Error,
    },
    /// A value the config validation let through but a component refused.
    Config(String),
    /// A worker or the writer died.
    ThreadDied(String),
}

impl std::fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuntimeError::Wal(e) => write!(f, "write-ahead log: {e}"),
            RuntimeError::Io { what, source } => write!(f, "{what}: {source}"),
            RuntimeError::Config(msg) => f.write_str(msg),
            RuntimeError::ThreadDied(name) => write!(f, "thread {name} died"),
        }
    }
}

impl std::error::Error for RuntimeError {}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RuntimeError {
    let what = what.into();
    move |source| RuntimeError::Io { what, source }
}

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
pub fn serve(config: Config, on_ready: &mut dyn FnMut(SocketAddr)) -> Result<(), RuntimeError> {
    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, term.clone())
            .map_err(io_err("installing signal handlers"))?;
    }
    let config = Arc::new(config);
    let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());

    std::fs::create_dir_all(config.wal_dir())
        .map_err(io_err(format!("creating {}", config.wal_dir().display())))?;
    let wal_cfg = WalConfig {
        dir: config.wal_dir(),
        segment_bytes: config.wal.segment_bytes,
        max_body_bytes: config.server.max_body_bytes as usize,
        durability: match config.wal.durability {
            DurabilityMode::Fsync => Durability::Fsync,
            DurabilityMode::Os => Durability::Os,
        },
        write_path: match config.wal.write_path {
            WritePathMode::Pwrite => WritePath::Pwrite,
            WritePathMode::Mmap => WritePath::Mmap,
        },
        max_batch: config.wal.max_batch,
        accept_loss: config.wal.accept_loss,
    };
    #[cfg_attr(not(feature = "failpoints"), allow(unused_mut))]
    let (mut log, report) = wal::open(&wal_cfg).map_err(RuntimeError::Wal)?;
    // Test builds only: storage faults switched by a control file (`wal::failpoints`).
    #[cfg(feature = "failpoints")]
    wal::failpoints::install_from_env(&mut log);
    eprintln!(
        "sluice: wal recovered: {} segments, {} records, last lsn {}{}",
        report.segments,
        report.records,
        report.last_lsn,
        match &report.truncated_tail {
            Some((seg, off)) => format!(", torn tail truncated at {}:{}", seg.display(), off),
            None => String::new(),
        }
    );

    let recovered = wal::recover_dispatch(&config.wal_dir()).map_err(RuntimeError::Wal)?;
    eprintln!(
        "sluice: {} events pending delivery, done cursor at lsn {}",
        recovered.pending.len(),
        recovered.done_cursor
    );
    let backlog = Arc::new(
        Backlog::with_wal_limit(
            config.dispatch.max_pending_events,
            config.dispatch.max_pending_bytes,
            config.dispatch.saturated_high,
            config.dispatch.saturated_low,
            config.dispatch.max_wal_bytes,
        )
        .with_absorb(
            config.dispatch.absorb_max_bytes,
            &crate::sched::backlog::absorbing_triggers(&config.triggers),
        ),
    );
    backlog.preload(
        recovered.pending.len() as u64,
        recovered.pending.values().map(|m| m.bytes).sum(),
    );
    let dlq = DlqStore::open(
        &config.server.data_dir.join("dlq"),
        config.dispatch.max_dlq_entries as usize,
    )
    .map_err(|e| RuntimeError::Config(format!("dead-letter queue: {e}")))?;
    let tail =
        WalTail::open(&config.wal_dir(), recovered.done_cursor).map_err(RuntimeError::Wal)?;
    let metrics_dispatch = Arc::new(
        DispatchMetrics::new(
            &config
                .destinations
                .iter()
                .map(|d| (d.handler.uri.clone(), d.max_in_flight as u64))
                .collect::<Vec<_>>(),
        )
        .with_flow(&config.triggers),
    );

    let (ring_tx, ring_rx) = ring::channel(config.wal.ring_capacity);
    let parker = Parker::new();
    let unparker = parker.unparker().clone();
    let wal_shared = Arc::new(WalShared::new());
    let bucket = |capacity| {
        BucketParams::new(capacity, config.ingest.refill_per_sec)
            .map_err(|e| RuntimeError::Config(format!("ingest bucket: {e}")))
    };
    let sources = Arc::new(SourceTable::new(
        config.ingest.max_sources,
        bucket(config.ingest.per_source_capacity)?,
    ));
    let admission = Admission::new(bucket(config.ingest.global_capacity)?, clock.now_nanos());
    // Before the writer starts: the dedupe index is rebuilt from what is already durable.
    let guards = Guards::new(&config.triggers, config.ingest.dedupe_max_keys);
    let rebuilt = guards
        .rebuild_dedupe(&config.wal_dir(), unix_millis() / 1000)
        .map_err(RuntimeError::Wal)?;
    if rebuilt > 0 {
        eprintln!("sluice: dedupe index rebuilt from the wal: {rebuilt} keys");
    }
    let router = Router::new(&config.triggers, config.ingest.default_route)
        .with_admin(config.admin_token.is_some());
    let shared = Arc::new(Shared::new(
        config.clone(),
        clock.clone(),
        router,
        admission,
        sources,
        guards,
        wal_shared.clone(),
        Arc::new(Metrics::new(config.server.workers)),
        backlog,
        metrics_dispatch,
    ));

    // Pump links: a job ring per worker (never full: the pump has at most max_outstanding
    // jobs out), one outcome ring, and the pump's own completion ring for its records.
    let max_outstanding = config.pump.max_outstanding;
    let pump_parker = Parker::new();
    let pump_unparker = pump_parker.unparker().clone();
    let (outcome_tx, outcome_rx) = ring::channel(2 * max_outstanding + 64);
    let pump_records = 64;
    let (pump_ctx, pump_crx) = ring::channel(pump_records);
    let mut job_txs = Vec::new();

    // Listeners: the first resolves the port (it may be 0), the others share it.
    let first = bind_reuseport(config.server.listen)
        .map_err(io_err(format!("binding {}", config.server.listen)))?;
    let addr = first
        .local_addr()
        .map_err(io_err("reading the bound address"))?;
    let hard_stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    let mut sinks: Vec<Box<dyn CompletionSink>> = Vec::new();
    let mut wakers: Vec<Arc<Waker>> = Vec::new();
    for id in 0..config.server.workers {
        let listener = if id == 0 {
            first.try_clone().map_err(io_err("cloning the listener"))?
        } else {
            bind_reuseport(addr).map_err(io_err(format!("binding {addr}")))?
        };
        let (job_tx, job_rx) = ring::channel(max_outstanding);
        job_txs.push(job_tx);
        let links = DispatchLinks {
            jobs: job_rx,
            outcomes: outcome_tx.clone(),
            pump: pump_unparker.clone(),
        };
        let (w, sink, waker) = Worker::new(
            id,
            listener,
            shared.clone(),
            ring_tx.clone(),
            unparker.clone(),
            hard_stop.clone(),
            links,
        )
        .map_err(io_err("creating a worker"))?;
        workers.push(w);
        sinks.push(Box::new(sink));
        wakers.push(waker);
    }
    drop(first);
    drop(outcome_tx);
    let pump_producer = sinks.len();
    sinks.push(Box::new(PumpSink {
        tx: pump_ctx,
        unparker: pump_unparker.clone(),
    }));

    let writer = wal::spawn_writer(log, ring_rx, parker, sinks, wal_shared)
        .map_err(io_err("starting the WAL writer"))?;
    let workers_done = Arc::new(AtomicBool::new(false));
    let pump = Pump::new(
        shared.clone(),
        PumpLinks {
            job_txs,
            worker_wakers: wakers.clone(),
            outcomes: outcome_rx,
            wal_tx: ring_tx.clone(),
            wal_unparker: unparker.clone(),
            completions: pump_crx,
            parker: pump_parker,
            workers_done: workers_done.clone(),
            producer: pump_producer,
            max_records_in_flight: pump_records,
        },
        tail,
        dlq,
        recovered,
    );
    let pump = std::thread::Builder::new()
        .name("sluice-pump".into())
        .spawn(move || pump.run())
        .map_err(io_err("starting the pump"))?;
    let mut handles: Vec<JoinHandle<()>> = Vec::new();
    for w in workers {
        let h = std::thread::Builder::new()
            .name("sluice-worker".into())
            .spawn(move || w.run())
            .map_err(io_err("starting a worker"))?;
        handles.push(h);
    }

    shared.set_phase(Phase::Ready);
    on_ready(addr);

    // Wait for a signal, watching that every thread stays alive.
    let mut died = None;
    while !term.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        if handles.iter().any(|h| h.is_finished()) {
            died = Some("sluice-worker");
            break;
        }
        if writer.is_finished() {
            died = Some("sluice-wal-writer");
            break;
        }
        if pump.is_finished() {
            died = Some("sluice-pump");
            break;
        }
    }

    shared.set_phase(Phase::Draining);
    eprintln!(
        "sluice: draining (up to {:?})",
        config.server.shutdown_timeout
    );
    for w in &wakers {
        let _ = w.wake();
    }
    let grace = config.server.shutdown_timeout + Duration::from_secs(1);
    let deadline = clock.now_nanos() + grace.as_nanos() as u64;
    while handles.iter().any(|h| !h.is_finished()) && clock.now_nanos() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    hard_stop.store(true, Ordering::Relaxed);
    for w in &wakers {
        let _ = w.wake();
    }
    for h in handles {
        let _ = h.join();
    }
    // The pump writes the outcomes the workers reported, waits for them to be durable, exits.
    workers_done.store(true, Ordering::Release);
    pump_unparker.unpark();
    let pump_deadline = clock.now_nanos() + Duration::from_secs(5).as_nanos() as u64;
    while !pump.is_finished() && clock.now_nanos() < pump_deadline {
        std::thread::sleep(Duration::from_millis(5));
        pump_unparker.unpark();
    }
    if pump.is_finished() {
        let _ = pump.join();
    } else {
        eprintln!("sluice: the pump did not finish flushing outcomes; those events stay pending");
    }
    ring_tx.close();
    unparker.unpark();
    drop(ring_tx);
    if writer.join().is_err() {
        return Err(RuntimeError::ThreadDied("sluice-wal-writer".into()));
    }
    eprintln!("sluice: stopped");
    match died {
        Some(name) => Err(RuntimeError::ThreadDied(name.into())),
        None => Ok(()),
    }
}

/// Renders `/metrics`: the merged per-core counters plus the WAL's and the sources' families.
pub fn render_metrics(shared: &Shared, ring_depth: usize) -> String {
    shared.metrics.render(&mut |w| {
        w.gauge(
            "sluice_wal_ring_depth",
            "Events waiting in the WAL ring.",
            ring_depth as f64,
        );
        w.counter(
            "sluice_wal_appends_total",
            "Events appended to the WAL and reported durable.",
            shared
                .wal
                .appends_total
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        w.gauge(
            "sluice_wal_durable_lsn",
            "Highest LSN known durable.",
            shared.wal.durable_lsn() as f64,
        );
        w.gauge(
            "sluice_wal_healthy",
            "1 when the WAL accepts writes, 0 after a write or sync error.",
            if shared.wal.is_healthy() { 1.0 } else { 0.0 },
        );
        shared.wal.render_prometheus(w.buffer_mut());
        shared.sources.render_prometheus(w);
        shared
            .metrics_dispatch
            .render(w, unix_millis(), shared.backlog.pending_events());
        shared.guards.render_prometheus(w);
        shared.backlog.render_prometheus(w);
    })
}
