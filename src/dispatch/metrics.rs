//! Dispatch metrics: per-destination gauges and counters, delivery latency, the pump's live
//! gauges, and the accepted-to-DLQ histogram. Destination cells are indexed by destination id
//! (`ops::reload::ids`): the start-up destinations', plus
//! [`RELOAD_DESTINATIONS`](crate::dispatch::spec::RELOAD_DESTINATIONS) spare cells that a
//! reload names ([`DispatchMetrics::claim_destinations`], before it publishes) for the
//! destinations it adds, so every label set here has a bound known at start-up. A destination
//! a reload removes stops being rendered (its cells keep counting the events accepted for it
//! before, and it is rendered again, counts included, if a reload names it again). Built from the leaf [`crate::metrics`] toolkit
//! (counters, histogram, Prometheus writer), which knows nothing of dispatch.
//!
//! Writers: a destination's owner core (its gauges and attempt counters), the pump (pump gauges,
//! DLQ histogram). Readers: `/metrics`. All `Relaxed`: each cell is its own message.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::dispatch::deliver::circuit::CircuitState;
use crate::dispatch::deliver::classify::Class;
use crate::dispatch::dlq::DlqReason;
use crate::dispatch::flow::metrics::FlowMetrics;
use crate::dispatch::ledger::LedgerBoard;
use crate::metrics::counter::{Action, CoreMetrics, Dimension};
use crate::metrics::histogram::Histogram;
use crate::metrics::prom::{MetricType, PromWriter};

/// `sluice_dispatch_duration_seconds` buckets (ns; 0.005 s .. 30 s).
pub const DURATION_BOUNDS_NANOS: &[u64] = &[
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    30_000_000_000,
];
/// `harn_trigger_accepted_to_dlq_seconds` buckets (ns; the Harn TRIGGER_LATENCY set, 0.005 s ..
/// 300 s).
pub const TRIGGER_LATENCY_BOUNDS_NANOS: &[u64] = &[
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    30_000_000_000,
    60_000_000_000,
    120_000_000_000,
    300_000_000_000,
];

#[derive(Debug, Default)]
struct PumpCells {
    oldest_pending_ms: AtomicU64,
    done_cursor: AtomicU64,
    /// Terminal outcomes whose record awaits its group commit, and their bound.
    awaiting: AtomicU64,
    max_awaiting: AtomicU64,
}

/// One core's pump gauges, sampled each loop turn ([`DispatchMetrics::set_pump_core`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PumpSample {
    /// Dispatch jobs out, all cores (the process-wide slot counter).
    pub outstanding: u64,
    /// Unix ms of the oldest pending event's receipt on this core.
    pub oldest_received_at_ms: Option<u64>,
    /// The done cursor of the core's own log.
    pub done_cursor: u64,
    /// Terminal outcomes whose `Done`/DLQ record awaits its commit, and the pump's bound on them
    /// (admission pauses there: `dispatch::pump`, "Redeliveries").
    pub awaiting: u64,
    pub max_awaiting: u64,
}

#[derive(Debug, Default)]
struct DestCells {
    /// Set at start, or by the reload that adds the destination (then never changes: an id is
    /// one URI for the run).
    uri: std::sync::OnceLock<Box<str>>,
    /// Rendered (a trigger of the current generation names it); written by reloads.
    exported: std::sync::atomic::AtomicBool,
    /// The current limit: `max_in_flight`, or the adaptive limit.
    permits: AtomicU64,
    in_flight: AtomicU64,
    connections: AtomicU64,
    delivered: AtomicU64,
    retryable: AtomicU64,
    permanent: AtomicU64,
    tls_error: AtomicU64,
    /// [`CircuitState`] as `u8` (the dashboard's `/api/v1/state`; written by the owner core
    /// after every gate decision).
    circuit: AtomicU64,
    /// End of the current pause in clock nanos (not paused when `<= now`).
    paused_until: AtomicU64,
    /// Jobs queued on the owner core waiting for a permit, the circuit or a pause.
    queued: AtomicU64,
}

/// One destination's live cells, read by `/api/v1/state` (each cell `Relaxed`: a snapshot
/// need not be atomic across cells).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestSnapshot {
    pub uri: String,
    pub permits: u64,
    pub in_flight: u64,
    pub delivered: u64,
    pub retryable: u64,
    pub permanent: u64,
    pub tls_error: u64,
    pub circuit: CircuitState,
    pub paused_until: u64,
    pub queued: u64,
}

/// Shared dispatch metrics (one per process).
#[derive(Debug)]
pub struct DispatchMetrics {
    dests: Box<[DestCells]>,
    duration: Histogram,
    dlq: [Histogram; 3],
    pump_outstanding: AtomicU64,
    /// Times a core's in-memory dispatch window was full and its pump switched to reading its
    /// log back (`sluice_pump_window_overflows_total`; `Relaxed`: a counter).
    window_overflows: AtomicU64,
    /// Times opening a log for read-back failed; the events stayed pending and the open was
    /// retried (`sluice_pump_readback_open_failures_total`; `Relaxed`: a counter).
    readback_open_failures: AtomicU64,
    /// Attempt entries a pump could not queue for its log because its attempt queue was at
    /// its bound (`sluice_pump_attempts_unrecorded_total`; `Relaxed`: a counter).
    attempts_unrecorded: AtomicU64,
    /// Every core's event ledger (`dispatch::ledger`): `/api/v1/ledger` and the
    /// `sluice_events_*_total{trigger}` counters.
    pub ledger: LedgerBoard,
    /// Per core (written by that core's pump): unix ms of the oldest pending event's receipt
    /// (0 when none), and the done cursor of the core's own log.
    pumps: Box<[PumpCells]>,
    /// `sluice_flow_control_total` (empty unless [`DispatchMetrics::with_flow`]).
    pub flow: FlowMetrics,
    /// The DLQ store's gauges (`sluice_dlq_*`; none unless [`DispatchMetrics::with_dlq`]).
    dlq_store: Option<std::sync::Arc<crate::dispatch::dlq::DlqGauges>>,
    /// `sluice_dispatch_batch_*` (cells by destination id, as `dests`).
    pub batch: crate::dispatch::deliver::batch::metrics::BatchMetrics,
}

fn reason_index(r: DlqReason) -> usize {
    match r {
        DlqReason::RetryExhausted => 0,
        DlqReason::CircuitOpen => 1,
        DlqReason::PermanentFailure => 2,
    }
}

const REASONS: [DlqReason; 3] = [
    DlqReason::RetryExhausted,
    DlqReason::CircuitOpen,
    DlqReason::PermanentFailure,
];

impl DispatchMetrics {
    /// `destinations`: (uri, initial permits) in config order (their ids), plus
    /// [`RELOAD_DESTINATIONS`](crate::dispatch::spec::RELOAD_DESTINATIONS) spare cells.
    pub fn new(destinations: &[(String, u64)]) -> DispatchMetrics {
        let spare = crate::dispatch::spec::RELOAD_DESTINATIONS;
        let dests: Box<[DestCells]> = (0..destinations.len() + spare)
            .map(|_| DestCells::default())
            .collect();
        for (c, (uri, max)) in dests.iter().zip(destinations) {
            let _ = c.uri.set(uri.as_str().into());
            c.permits.store(*max, Ordering::Relaxed);
            c.exported.store(true, Ordering::Relaxed);
        }
        DispatchMetrics {
            batch: crate::dispatch::deliver::batch::metrics::BatchMetrics::new(dests.len()),
            dests,
            duration: Histogram::new(DURATION_BOUNDS_NANOS),
            dlq: std::array::from_fn(|_| Histogram::new(TRIGGER_LATENCY_BOUNDS_NANOS)),
            pump_outstanding: AtomicU64::new(0),
            window_overflows: AtomicU64::new(0),
            readback_open_failures: AtomicU64::new(0),
            attempts_unrecorded: AtomicU64::new(0),
            ledger: LedgerBoard::new(0),
            pumps: Box::new([]),
            flow: FlowMetrics::default(),
            dlq_store: None,
        }
    }

    /// Renders the DLQ store's size and write counters.
    pub fn with_dlq(
        mut self,
        gauges: std::sync::Arc<crate::dispatch::dlq::DlqGauges>,
    ) -> DispatchMetrics {
        self.dlq_store = Some(gauges);
        self
    }

    /// Adds the flow-control families for `triggers`; `max_held` is `[flow] max_held`.
    pub fn with_flow(
        mut self,
        triggers: &[crate::dispatch::spec::TriggerRoute],
        max_held: usize,
    ) -> DispatchMetrics {
        self.flow = FlowMetrics::new(triggers, max_held);
        self
    }

    /// One pump gauge cell per core.
    pub fn with_cores(mut self, cores: usize) -> DispatchMetrics {
        self.pumps = (0..cores).map(|_| PumpCells::default()).collect();
        self.ledger = LedgerBoard::new(cores);
        self
    }

    /// Core `core`'s pump gauges (`Relaxed`: gauges, each read on its own at scrape).
    pub fn set_pump_core(&self, core: usize, s: PumpSample) {
        self.pump_outstanding
            .store(s.outstanding, Ordering::Relaxed);
        if let Some(c) = self.pumps.get(core) {
            let oldest = s.oldest_received_at_ms.unwrap_or(0);
            c.oldest_pending_ms.store(oldest, Ordering::Relaxed);
            c.done_cursor.store(s.done_cursor, Ordering::Relaxed);
            c.awaiting.store(s.awaiting, Ordering::Relaxed);
            c.max_awaiting.store(s.max_awaiting, Ordering::Relaxed);
        }
    }

    pub fn observe_accepted_to_dlq(&self, reason: DlqReason, millis: u64) {
        self.dlq[reason_index(reason)].observe_nanos(millis.saturating_mul(1_000_000));
    }

    pub fn set_in_flight(&self, dest: usize, n: u64) {
        if let Some(d) = self.dests.get(dest) {
            d.in_flight.store(n, Ordering::Relaxed);
        }
    }

    /// Names the cells of a reload's `destinations` (laid out by id) that have none. Called before the generation is published (reloads are serialized), so a core
    /// counting for a new destination finds its cell. `Err` when an id has no cell (the bound
    /// of `ops::reload::ids` prevents it).
    pub fn claim_destinations(
        &self,
        destinations: &[crate::dispatch::spec::DestinationSpec],
    ) -> Result<(), String> {
        for (id, d) in destinations.iter().enumerate() {
            let Some(c) = self.dests.get(id) else {
                return Err(format!(
                    "destination {} has no metric cell (id {id} of {})",
                    d.handler.uri,
                    self.dests.len()
                ));
            };
            // A fixed limit is the configured one, also for a destination no core has started
            // a call to yet (its owner core sets it only from its own state); an adaptive or
            // shared one starts at its initial value and is then its owner core's to set.
            let fixed = d.adaptive.is_none() && d.shared.is_none();
            if c.uri.set(d.handler.uri.as_str().into()).is_ok() || fixed {
                c.permits
                    .store(d.initial_permits() as u64, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Renders the destinations a trigger of the published configuration names (`used`, per
    /// id: `DispatchSpec::in_use`), and no other (once the reload has published it; `Relaxed`:
    /// a flag read at render time).
    pub fn export_destinations(&self, used: &[bool]) {
        for (c, u) in self
            .dests
            .iter()
            .zip(used.iter().chain(std::iter::repeat(&false)))
        {
            c.exported.store(*u, Ordering::Relaxed);
        }
    }

    /// `sluice_destinations{state}`: destination ids in use and removed (not rendered, kept
    /// for the run; `ops::reload::ids`).
    fn render_ids(&self, w: &mut PromWriter) {
        let named = self.dests.iter().filter(|d| d.uri.get().is_some());
        let (mut active, mut removed) = (0u64, 0u64);
        for d in named {
            match d.exported.load(Ordering::Relaxed) {
                true => active += 1,
                false => removed += 1,
            }
        }
        w.header(
            "sluice_destinations",
            "Destination ids of this run: named by a trigger (active) or removed by a reload (kept until restart; at most the start-up destinations + 64).",
            MetricType::Gauge,
        );
        w.sample_u64("sluice_destinations", &[("state", "active")], active);
        w.sample_u64("sluice_destinations", &[("state", "removed")], removed);
    }

    /// The cells rendered: named and in use.
    fn exported(&self) -> impl Iterator<Item = (&str, &DestCells)> {
        self.dests.iter().filter_map(|d| {
            let uri = d.uri.get()?;
            d.exported.load(Ordering::Relaxed).then_some((&**uri, d))
        })
    }

    pub fn pump_outstanding(&self) -> u64 {
        self.pump_outstanding.load(Ordering::Relaxed)
    }

    /// The live cells of every destination id named so far, in id order (removed ones
    /// included: the caller knows which its generation uses).
    pub fn destinations(&self) -> Vec<DestSnapshot> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        self.dests
            .iter()
            .map_while(|d| Some((d.uri.get()?, d)))
            .map(|(uri, d)| DestSnapshot {
                uri: uri.to_string(),
                permits: get(&d.permits),
                in_flight: get(&d.in_flight),
                delivered: get(&d.delivered),
                retryable: get(&d.retryable),
                permanent: get(&d.permanent),
                tls_error: get(&d.tls_error),
                circuit: match get(&d.circuit) {
                    1 => CircuitState::Open,
                    2 => CircuitState::HalfOpen,
                    _ => CircuitState::Closed,
                },
                paused_until: get(&d.paused_until),
                queued: get(&d.queued),
            })
            .collect()
    }

    /// Unix ms of the oldest pending event's receipt over all cores; `None` when none.
    pub fn oldest_pending_ms(&self) -> Option<u64> {
        self.pumps
            .iter()
            .map(|c| c.oldest_pending_ms.load(Ordering::Relaxed))
            .filter(|&ms| ms != 0)
            .min()
    }

    /// Events dead-lettered for `reason` since start.
    pub fn dead_lettered(&self, reason: DlqReason) -> u64 {
        self.dlq[reason_index(reason)].count()
    }

    /// A core's pump found its in-memory window full and reads its log back.
    pub fn window_overflowed(&self) {
        self.window_overflows.fetch_add(1, Ordering::Relaxed);
    }

    /// A core's pump could not open its log for read-back (retried with backoff).
    pub fn readback_open_failed(&self) {
        self.readback_open_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` attempt entries were not recorded (a pump's attempt queue was full, or their
    /// record could not be made durable).
    pub fn attempts_unrecorded_by(&self, n: u64) {
        self.attempts_unrecorded.fetch_add(n, Ordering::Relaxed);
    }

    pub fn attempts_unrecorded(&self) -> u64 {
        self.attempts_unrecorded.load(Ordering::Relaxed)
    }

    pub fn window_overflows(&self) -> u64 {
        self.window_overflows.load(Ordering::Relaxed)
    }

    /// Renders every dispatch family. `now_ms` makes the oldest-pending age live at scrape time.
    pub fn render(&self, w: &mut PromWriter, now_ms: u64, pending_events: u64) {
        self.render_dlq_store(w);
        self.render_pump(w, now_ms, pending_events);
        self.ledger.render(w);
        self.render_ids(w);
        self.render_destinations(w);
        self.render_attempts(w);
        let ids = self.dests.iter().enumerate();
        let exported = ids.filter_map(|(id, d)| {
            let uri = d.uri.get()?;
            d.exported.load(Ordering::Relaxed).then_some((&**uri, id))
        });
        self.batch.render(w, exported);
        self.flow.render_prometheus(w);
    }

    /// The DLQ store's gauges and counters (nothing before the store is open).
    fn render_dlq_store(&self, w: &mut PromWriter) {
        let Some(g) = &self.dlq_store else {
            return;
        };
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        w.gauge(
            "sluice_dlq_entries",
            "Live dead-letter entries (bound: dispatch.max_dlq_entries).",
            get(&g.entries) as f64,
        );
        w.gauge(
            "sluice_dlq_bytes",
            "Bytes of the DLQ's files (batch files and legacy entry files).",
            get(&g.bytes) as f64,
        );
        w.counter(
            "sluice_dlq_batch_files_written_total",
            "DLQ batch files written (one per commit of dead letters, plus compactions).",
            get(&g.files_written),
        );
        w.counter(
            "sluice_dlq_entries_written_total",
            "Dead-letter entries written durably.",
            get(&g.entries_written),
        );
        w.gauge(
            "sluice_dlq_replays_in_flight",
            "DLQ entries a replay has handed to the WAL and not yet removed (shared by every core; bound: dispatch.max_dlq_entries).",
            get(&g.replays_in_flight) as f64,
        );
    }

    /// The pumps' window, outstanding jobs, oldest pending age, backlog and done cursors.
    fn render_pump(&self, w: &mut PromWriter, now_ms: u64, pending_events: u64) {
        w.counter(
            "sluice_pump_window_overflows_total",
            "Times a core's in-memory dispatch window (4096 events, 64 MiB) was full, so its pump read the log back.",
            self.window_overflows(),
        );
        w.counter(
            "sluice_pump_readback_open_failures_total",
            "Times a pump could not open its log to read it back (e.g. at the descriptor limit); \
             the events stay pending and the open is retried with backoff (10 ms doubling to 1 s).",
            self.readback_open_failures.load(Ordering::Relaxed),
        );
        w.counter(
            "sluice_pump_attempts_unrecorded_total",
            "Attempt entries (kind 8) not written because a pump's attempt queue for a log was at \
             its bound (4096 entries): the log could not keep up; the events' outcomes are kept.",
            self.attempts_unrecorded(),
        );
        w.header(
            "harn_orchestrator_pump_outstanding",
            "Dispatch jobs admitted by the pump and not finished.",
            MetricType::Gauge,
        );
        let outstanding = self.pump_outstanding();
        w.sample_u64("harn_orchestrator_pump_outstanding", &[], outstanding);
        w.header(
            "harn_trigger_oldest_pending_age_seconds",
            "Age of the oldest accepted event without an outcome (computed at scrape).",
            MetricType::Gauge,
        );
        let age = self.oldest_pending_age(now_ms);
        w.sample("harn_trigger_oldest_pending_age_seconds", &[], age);
        w.header(
            "sluice_wal_pending_events",
            "Committed events not yet done (the durable backlog).",
            MetricType::Gauge,
        );
        w.sample_u64("sluice_wal_pending_events", &[], pending_events);
        w.header(
            "sluice_pump_done_cursor",
            "Lowest LSN without a durable outcome, in each core's own log.",
            MetricType::Gauge,
        );
        for (core, c) in self.pumps.iter().enumerate() {
            let core = core.to_string();
            let cursor = c.done_cursor.load(Ordering::Relaxed);
            w.sample_u64("sluice_pump_done_cursor", &[("core", &core)], cursor);
        }
        self.render_awaiting(w);
    }

    /// Each core's terminal outcomes awaiting their commit, beside their bound.
    fn render_awaiting(&self, w: &mut PromWriter) {
        const AWAITING: &str = "sluice_pump_outcomes_awaiting_commit";
        const MAX: &str = "sluice_pump_outcomes_awaiting_commit_max";
        w.header(
            AWAITING,
            "Terminal outcomes (delivered, dead-lettered) whose record awaits its group commit, \
             per core; the core's pump stops admitting at sluice_pump_outcomes_awaiting_commit_max.",
            MetricType::Gauge,
        );
        for (core, c) in self.pumps.iter().enumerate() {
            let v = c.awaiting.load(Ordering::Relaxed);
            w.sample_u64(AWAITING, &[("core", &core.to_string())], v);
        }
        w.header(
            MAX,
            "The bound on a core's outcomes awaiting their commit: max(dispatch slots, 64).",
            MetricType::Gauge,
        );
        for (core, c) in self.pumps.iter().enumerate() {
            let v = c.max_awaiting.load(Ordering::Relaxed);
            w.sample_u64(MAX, &[("core", &core.to_string())], v);
        }
    }

    /// Seconds since the oldest event without an outcome was accepted (0 when none).
    fn oldest_pending_age(&self, now_ms: u64) -> f64 {
        let oldest = self
            .pumps
            .iter()
            .map(|c| c.oldest_pending_ms.load(Ordering::Relaxed))
            .filter(|&ms| ms != 0)
            .min()
            .unwrap_or(0);
        if oldest == 0 {
            0.0
        } else {
            now_ms.saturating_sub(oldest) as f64 / 1000.0
        }
    }

    /// Per destination: calls in flight, permits, connections opened.
    fn render_destinations(&self, w: &mut PromWriter) {
        type Cell = fn(&DestCells) -> &AtomicU64;
        let families: [(&str, &str, MetricType, Cell); 3] = [
            (
                "sluice_destination_in_flight",
                "Calls in flight per destination.",
                MetricType::Gauge,
                |d| &d.in_flight,
            ),
            (
                "sluice_destination_permits",
                "Permits per destination: max_in_flight, or the current adaptive limit.",
                MetricType::Gauge,
                |d| &d.permits,
            ),
            (
                "sluice_destination_connections_opened_total",
                "Outbound connections opened.",
                MetricType::Counter,
                |d| &d.connections,
            ),
        ];
        for (name, help, kind, cell) in families {
            w.header(name, help, kind);
            for (uri, d) in self.exported() {
                let v = cell(d).load(Ordering::Relaxed);
                w.sample_u64(name, &[("destination", uri)], v);
            }
        }
    }

    /// Attempts by outcome, their durations, and the time from acceptance to the DLQ.
    fn render_attempts(&self, w: &mut PromWriter) {
        w.header(
            "sluice_dispatch_attempts_total",
            "Delivery attempts by destination and outcome.",
            MetricType::Counter,
        );
        for (uri, d) in self.exported() {
            for (outcome, cell) in [
                ("delivered", &d.delivered),
                ("retryable", &d.retryable),
                ("permanent", &d.permanent),
                ("tls_error", &d.tls_error),
            ] {
                w.sample_u64(
                    "sluice_dispatch_attempts_total",
                    &[("destination", uri), ("outcome", outcome)],
                    cell.load(Ordering::Relaxed),
                );
            }
        }
        w.header(
            "sluice_dispatch_duration_seconds",
            "Duration of delivery attempts.",
            MetricType::Histogram,
        );
        self.duration
            .render(w, "sluice_dispatch_duration_seconds", &[]);
        w.header(
            "harn_trigger_accepted_to_dlq_seconds",
            "Time from acceptance to the dead-letter queue, by reason.",
            MetricType::Histogram,
        );
        for r in REASONS {
            self.dlq[reason_index(r)].render(
                w,
                "harn_trigger_accepted_to_dlq_seconds",
                &[("status", r.as_str())],
            );
        }
    }
}

/// A core's handle: backpressure counters into its own shard, the rest into the shared cells.
#[derive(Debug)]
pub struct CoreDispatchMetrics {
    pub core: CoreMetrics,
    pub shared: Arc<DispatchMetrics>,
}

impl CoreDispatchMetrics {
    pub fn circuit_opened(&self) {
        self.core
            .incr_backpressure(Dimension::Circuit, Action::Opened);
    }
    pub fn circuit_closed(&self) {
        self.core
            .incr_backpressure(Dimension::Circuit, Action::Closed);
    }
    pub fn circuit_fail_fast(&self) {
        self.core
            .incr_backpressure(Dimension::Circuit, Action::FailFast);
    }
    pub fn circuit_half_open_probe(&self) {
        self.core
            .incr_backpressure(Dimension::Circuit, Action::HalfOpenProbe);
    }
    /// An attempt's failure under `circuit.on_open = "hold"`: the job went back to its queue
    /// uncharged (`harn_backpressure_events_total{dimension="circuit",action="held"}`).
    pub fn circuit_held(&self) {
        self.core
            .incr_backpressure(Dimension::Circuit, Action::Held);
    }
    pub fn destination_paused(&self) {
        self.core
            .incr_backpressure(Dimension::Destination, Action::Paused);
    }
    pub fn connection_opened(&self, dest: usize) {
        if let Some(d) = self.shared.dests.get(dest) {
            d.connections.fetch_add(1, Ordering::Relaxed);
        }
    }
    pub fn set_in_flight(&self, dest: usize, n: u64) {
        self.shared.set_in_flight(dest, n);
    }
    /// The owner core's view of destination `dest` after a gate decision: circuit, pause end
    /// (clock nanos) and queued jobs, for `/api/v1/state`.
    pub fn set_dest_state(
        &self,
        dest: usize,
        circuit: CircuitState,
        paused_until: u64,
        queued: u64,
    ) {
        if let Some(d) = self.shared.dests.get(dest) {
            d.circuit.store(circuit.as_u8() as u64, Ordering::Relaxed);
            d.paused_until.store(paused_until, Ordering::Relaxed);
            d.queued.store(queued, Ordering::Relaxed);
        }
    }
    /// `sluice_destination_permits`: the destination's current limit.
    pub fn set_permits(&self, dest: usize, n: u64) {
        if let Some(d) = self.shared.dests.get(dest) {
            d.permits.store(n, Ordering::Relaxed);
        }
    }
    /// One finished attempt of `nanos`. A TLS failure (`tls`) is counted as `tls_error`, not
    /// under its class, so the outcomes add up to the attempts.
    pub fn attempt(&self, dest: usize, class: &Class, tls: bool, nanos: u64) {
        self.shared.duration.observe_nanos(nanos);
        if let Some(d) = self.shared.dests.get(dest) {
            let cell = match class {
                _ if tls => &d.tls_error,
                Class::Delivered => &d.delivered,
                Class::Retryable { .. } => &d.retryable,
                Class::Permanent => &d.permanent,
            };
            cell.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn les(text: &str, family: &str) -> Vec<String> {
        let prefix = format!("{family}_bucket{{");
        text.lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .filter_map(|l| l.split("le=\"").nth(1))
            .map(|l| l.split('"').next().unwrap().to_string())
            .collect()
    }

    #[test]
    fn histograms_keep_their_names_and_bucket_bounds() {
        let m = DispatchMetrics::new(&[("http://h/".into(), 4)]);
        m.duration.observe_nanos(7_000_000);
        m.observe_accepted_to_dlq(DlqReason::CircuitOpen, 90_000);
        let mut w = PromWriter::new();
        m.render(&mut w, 0, 0);
        let text = w.finish();
        let duration = les(&text, "sluice_dispatch_duration_seconds");
        assert_eq!(
            duration,
            [
                "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10",
                "30", "+Inf"
            ]
        );
        assert!(text.contains("sluice_dispatch_duration_seconds_bucket{le=\"0.01\"} 1\n"));
        assert!(text.contains("sluice_dispatch_duration_seconds_count 1\n"));
        let dlq = les(&text, "harn_trigger_accepted_to_dlq_seconds");
        let per_reason = [
            "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30",
            "60", "120", "300", "+Inf",
        ];
        assert_eq!(dlq.len(), 3 * per_reason.len());
        assert_eq!(dlq[..per_reason.len()], per_reason);
        assert!(text.contains(
            "harn_trigger_accepted_to_dlq_seconds_bucket{le=\"120\",status=\"circuit_open\"} 1\n"
        ));
    }

    #[test]
    fn each_core_shows_its_outcomes_awaiting_their_commit_beside_the_bound() {
        let m = DispatchMetrics::new(&[("http://h/".into(), 4)]).with_cores(2);
        let sample = |awaiting| PumpSample {
            outstanding: 3,
            oldest_received_at_ms: None,
            done_cursor: 9,
            awaiting,
            max_awaiting: 64,
        };
        m.set_pump_core(0, sample(5));
        m.set_pump_core(1, sample(0));
        // A core past the table (never built) is ignored, not a panic.
        m.set_pump_core(7, sample(1));
        let mut w = PromWriter::new();
        m.render(&mut w, 0, 0);
        let text = w.finish();
        for line in [
            "# TYPE sluice_pump_outcomes_awaiting_commit gauge",
            "sluice_pump_outcomes_awaiting_commit{core=\"0\"} 5",
            "sluice_pump_outcomes_awaiting_commit{core=\"1\"} 0",
            "sluice_pump_outcomes_awaiting_commit_max{core=\"0\"} 64",
            "sluice_pump_done_cursor{core=\"1\"} 9",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(!text.contains("core=\"7\""));
    }
}
