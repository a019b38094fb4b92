//! Sharded counters: one cache-padded shard of `AtomicU64` cells per worker core.
//!
//! Every counter family this module owns has a label set fixed at compile time, so each
//! (family, labels) pair is a fixed cell index ([`slot`]) and a shard is a flat array. A worker
//! core increments only its own shard ([`CoreMetrics`]); a scrape ([`Metrics`]) sums the shards.
//! Cores therefore never write the same cache line, and the hot path is one uncontended atomic
//! add. Shards are `CachePadded` so neighbouring shards do not share a line either.
//!
//! Memory ordering: every access is `Relaxed`. A counter publishes no other memory; each cell
//! has a single modification order, so per-cell reads are monotonic, and Prometheus does not
//! need a scrape to be an atomic snapshot across cells or shards. The shard cells go through the
//! `crate::sync` shim (std atomics outside loom, the same code) only so that the claims above are
//! checked by a loom model (`loom-tests/tests/metrics.rs`: concurrent increments on two shards
//! and a scrape); the unsharded [`Counter`] (a `const fn`) bypasses it.
//!
//! Bound: `cores × slot::COUNT × 8` bytes (about 1 KiB per core), allocated once.
#![forbid(unsafe_code)]

use super::prom::{MetricType, PromWriter};
use crate::sync::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One shared relaxed counter (not sharded), for counters keyed at run time (per source).
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }
    #[inline]
    pub fn incr(&self) {
        // Relaxed: a count publishes nothing (module docs).
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

macro_rules! label_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum $name { $($variant),+ }

        impl $name {
            /// Every value, in rendering order (`ALL[v as usize] == v`).
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub const COUNT: usize = Self::ALL.len();
            /// The label value.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }
    };
}

label_enum!(
    /// `route` label of `sluice_http_requests_total`.
    Route {
        Webhook => "webhook",
        Healthz => "healthz",
        Readyz => "readyz",
        Metrics => "metrics",
        Admin => "admin",
        Ui => "ui",
        Unmatched => "unmatched",
    }
);

label_enum!(
    /// `dimension` label of `harn_backpressure_events_total`.
    Dimension {
        Ingest => "ingest",
        Circuit => "circuit",
        Destination => "destination",
    }
);

label_enum!(
    /// `action` label of `harn_backpressure_events_total`.
    Action {
        Admit => "admit",
        Reject => "reject",
        Opened => "opened",
        FailFast => "fail_fast",
        HalfOpenProbe => "half_open_probe",
        Closed => "closed",
        Paused => "paused",
        Held => "held",
    }
);

label_enum!(
    /// `kind` label of `sluice_connections_timed_out_total`.
    TimeoutKind {
        Header => "header",
        Body => "body",
        Idle => "idle",
        Write => "write",
    }
);

label_enum!(
    /// `reason` label of `sluice_connections_refused_total`. `fd_limit`: `accept` failed with
    /// EMFILE/ENFILE (or ENOBUFS/ENOMEM); the connection stays in the listen backlog and the
    /// worker retries on a timer. Counted per failed attempt.
    ConnRefusal {
        PerCoreCap => "per_core_cap",
        AcceptError => "accept_error",
        FdLimit => "fd_limit",
    }
);

label_enum!(
    /// `bound` label of `sluice_connections_read_paused_total`.
    PauseBound {
        PipelineDepth => "pipeline_depth",
        ResponseBytes => "response_bytes",
    }
);

/// The (dimension, action) pairs of the Harn contract; always rendered, zeros included. Any
/// other pair is counted and rendered only once non-zero.
const CONTRACT_PAIRS: &[(Dimension, Action)] = &[
    (Dimension::Ingest, Action::Admit),
    (Dimension::Ingest, Action::Reject),
    (Dimension::Circuit, Action::Opened),
    (Dimension::Circuit, Action::FailFast),
    (Dimension::Circuit, Action::HalfOpenProbe),
    (Dimension::Circuit, Action::Closed),
    (Dimension::Destination, Action::Paused),
];

/// Status codes with their own `status` label value; anything else is `status="other"`.
pub const STATUS_CODES: [u16; 18] = [
    100, 200, 202, 400, 401, 404, 405, 408, 411, 413, 414, 417, 429, 431, 500, 501, 503, 505,
];
const STATUS_LABELS: [&str; STATUS_SLOTS] = [
    "100", "200", "202", "400", "401", "404", "405", "408", "411", "413", "414", "417", "429",
    "431", "500", "501", "503", "505", "other",
];
const STATUS_SLOTS: usize = STATUS_CODES.len() + 1;

/// The `status` slot of a code: its index in [`STATUS_CODES`], or the last slot ("other").
/// A `match` (a jump table), checked against the table by a test.
#[inline]
pub const fn status_slot(code: u16) -> usize {
    match code {
        100 => 0,
        200 => 1,
        202 => 2,
        400 => 3,
        401 => 4,
        404 => 5,
        405 => 6,
        408 => 7,
        411 => 8,
        413 => 9,
        414 => 10,
        417 => 11,
        429 => 12,
        431 => 13,
        500 => 14,
        501 => 15,
        503 => 16,
        505 => 17,
        _ => STATUS_CODES.len(),
    }
}

/// Cell indices in a shard. Families are laid out one after another.
pub mod slot {
    use super::*;
    pub const BACKPRESSURE: usize = 0;
    pub const HTTP: usize = BACKPRESSURE + Dimension::COUNT * Action::COUNT;
    pub const CONN_ACCEPTED: usize = HTTP + Route::COUNT * STATUS_SLOTS;
    pub const CONN_REFUSED: usize = CONN_ACCEPTED + 1;
    pub const CONN_TIMED_OUT: usize = CONN_REFUSED + ConnRefusal::COUNT;
    /// Gauge: open connections of this core (stored by its worker).
    pub const CONN_OPEN: usize = CONN_TIMED_OUT + TimeoutKind::COUNT;
    pub const READ_PAUSED: usize = CONN_OPEN + 1;
    pub const BODY_BUDGET_REFUSED: usize = READ_PAUSED + PauseBound::COUNT;
    /// Gauge: records in this core's next group commit and with its commit helper.
    pub const COMMIT_QUEUED: usize = BODY_BUDGET_REFUSED + 1;
    /// Gauge: jobs and outcomes waiting for room in another core's ring.
    pub const LINK_WAITING: usize = COMMIT_QUEUED + 1;
    /// Gauge (io_uring): closed connections whose last bytes are still being sent.
    pub const IO_RETIRED: usize = LINK_WAITING + 1;
    /// Counter (io_uring): receives that found the core's buffer pool empty (re-armed).
    pub const IO_POOL_EMPTY: usize = IO_RETIRED + 1;
    /// Gauge: sockets in the core's io_uring file table.
    pub const IO_FIXED_FILES: usize = IO_POOL_EMPTY + 1;
    /// Gauge: finished event records on the core's shelf for ingest to reuse (`wal::shelf`).
    pub const EVENT_SHELF: usize = IO_FIXED_FILES + 1;
    /// Gauge: entries in the core's outbound timer heaps (`net::deadlines`).
    pub const OUTBOUND_TIMERS: usize = EVENT_SHELF + 1;
    pub const COUNT: usize = OUTBOUND_TIMERS + 1;

    #[inline]
    pub const fn backpressure(d: Dimension, a: Action) -> usize {
        BACKPRESSURE + d as usize * Action::COUNT + a as usize
    }
    #[inline]
    pub fn http(route: Route, status: u16) -> usize {
        HTTP + route as usize * STATUS_SLOTS + status_slot(status)
    }
}

/// One core's cells. Written by that core only (by convention; `fetch_add` keeps counts exact
/// even if a handle is misused), read by scrapes.
#[derive(Debug)]
struct Shard {
    cells: [crate::sync::atomic::AtomicU64; slot::COUNT],
}

impl Shard {
    fn new() -> Self {
        Shard {
            cells: std::array::from_fn(|_| crate::sync::atomic::AtomicU64::new(0)),
        }
    }
    #[inline]
    fn add(&self, cell: usize, n: u64) {
        self.cells[cell].fetch_add(n, Ordering::Relaxed);
    }
    #[inline]
    fn get(&self, cell: usize) -> u64 {
        self.cells[cell].load(Ordering::Relaxed)
    }
}

/// All shards; owned by the runtime, read by `/metrics`.
#[derive(Debug)]
pub struct Metrics {
    shards: Box<[Arc<CachePadded<Shard>>]>,
}

/// The handle a worker core holds to count into its own shard. Not `Clone`: one per core.
#[derive(Debug)]
pub struct CoreMetrics {
    shard: Arc<CachePadded<Shard>>,
}

impl CoreMetrics {
    #[inline]
    pub fn incr_http(&self, route: Route, status: u16) {
        self.shard.add(slot::http(route, status), 1);
    }
    #[inline]
    pub fn incr_backpressure(&self, dimension: Dimension, action: Action) {
        self.shard.add(slot::backpressure(dimension, action), 1);
    }
    /// `harn_backpressure_events_total{dimension="ingest",action="admit"|"reject"}`.
    #[inline]
    pub fn incr_ingest(&self, admitted: bool) {
        let action = if admitted {
            Action::Admit
        } else {
            Action::Reject
        };
        self.incr_backpressure(Dimension::Ingest, action);
    }
    #[inline]
    pub fn incr_connections_accepted(&self) {
        self.shard.add(slot::CONN_ACCEPTED, 1);
    }
    #[inline]
    pub fn incr_connections_refused(&self, reason: ConnRefusal) {
        self.shard.add(slot::CONN_REFUSED + reason as usize, 1);
    }
    #[inline]
    pub fn incr_timeout(&self, kind: TimeoutKind) {
        self.shard.add(slot::CONN_TIMED_OUT + kind as usize, 1);
    }
    /// A connection stopped being read because its queued responses reached `bound`.
    #[inline]
    pub fn incr_read_paused(&self, bound: PauseBound) {
        self.shard.add(slot::READ_PAUSED + bound as usize, 1);
    }

    /// A request body refused by the in-flight body budget.
    #[inline]
    pub fn incr_body_budget_refused(&self) {
        self.shard.add(slot::BODY_BUDGET_REFUSED, 1);
    }

    /// Set this core's `sluice_connections_open`. Only the owning worker stores it, so a plain
    /// `Relaxed` store is exact.
    #[inline]
    pub fn set_connections_open(&self, open: u64) {
        self.shard.cells[slot::CONN_OPEN].store(open, Ordering::Relaxed);
    }

    /// Set this core's `sluice_commit_queued_records` (the owning worker only, like
    /// `set_connections_open`).
    #[inline]
    pub fn set_commit_queued(&self, records: u64) {
        self.shard.cells[slot::COMMIT_QUEUED].store(records, Ordering::Relaxed);
    }

    /// Set this core's `sluice_link_waiting_items` (the owning worker only).
    #[inline]
    pub fn set_link_waiting(&self, items: u64) {
        self.shard.cells[slot::LINK_WAITING].store(items, Ordering::Relaxed);
    }

    /// Set this core's `sluice_event_shelf_records` (the owning worker only).
    #[inline]
    pub fn set_event_shelf(&self, records: u64) {
        self.shard.cells[slot::EVENT_SHELF].store(records, Ordering::Relaxed);
    }

    /// This core's `sluice_event_shelf_records` as last set.
    pub fn event_shelf(&self) -> u64 {
        self.shard.get(slot::EVENT_SHELF)
    }

    /// Set this core's `sluice_outbound_timer_entries` (the owning worker only).
    #[inline]
    pub fn set_outbound_timers(&self, entries: u64) {
        self.shard.cells[slot::OUTBOUND_TIMERS].store(entries, Ordering::Relaxed);
    }

    /// Set this core's `sluice_io_retired_connections` (the owning worker only).
    #[inline]
    pub fn set_io_retired(&self, conns: u64) {
        self.shard.cells[slot::IO_RETIRED].store(conns, Ordering::Relaxed);
    }

    /// Set this core's `sluice_io_registered_files` (the owning worker only).
    #[inline]
    pub fn set_io_fixed_files(&self, files: u64) {
        self.shard.cells[slot::IO_FIXED_FILES].store(files, Ordering::Relaxed);
    }

    /// A receive found the core's io_uring buffer pool empty.
    #[inline]
    pub fn incr_io_pool_empty(&self) {
        self.shard.add(slot::IO_POOL_EMPTY, 1);
    }
}

impl Metrics {
    /// Shards for `cores` worker cores (at least one).
    pub fn new(cores: usize) -> Self {
        let shards = (0..cores.max(1))
            .map(|_| Arc::new(CachePadded::new(Shard::new())))
            .collect();
        Metrics { shards }
    }

    pub fn cores(&self) -> usize {
        self.shards.len()
    }

    /// The counting handle of core `i`.
    ///
    /// # Panics
    /// If `i >= self.cores()`.
    pub fn core(&self, i: usize) -> CoreMetrics {
        CoreMetrics {
            shard: Arc::clone(&self.shards[i]),
        }
    }

    fn sum(&self, cell: usize) -> u64 {
        self.shards
            .iter()
            .fold(0u64, |acc, s| acc.wrapping_add(s.get(cell)))
    }

    pub fn http_requests(&self, route: Route, status: u16) -> u64 {
        self.sum(slot::http(route, status))
    }
    pub fn backpressure_events(&self, dimension: Dimension, action: Action) -> u64 {
        self.sum(slot::backpressure(dimension, action))
    }
    pub fn connections_accepted(&self) -> u64 {
        self.sum(slot::CONN_ACCEPTED)
    }
    pub fn connections_refused(&self, reason: ConnRefusal) -> u64 {
        self.sum(slot::CONN_REFUSED + reason as usize)
    }
    pub fn connections_timed_out(&self, kind: TimeoutKind) -> u64 {
        self.sum(slot::CONN_TIMED_OUT + kind as usize)
    }
    pub fn read_paused(&self, bound: PauseBound) -> u64 {
        self.sum(slot::READ_PAUSED + bound as usize)
    }

    pub fn body_budget_refused(&self) -> u64 {
        self.sum(slot::BODY_BUDGET_REFUSED)
    }

    /// Open connections of core `core` (a gauge).
    pub fn connections_open(&self, core: usize) -> u64 {
        self.shards[core].get(slot::CONN_OPEN)
    }

    /// Records of core `core` staged for or with its commit helper (a gauge).
    pub fn commit_queued(&self, core: usize) -> u64 {
        self.shards[core].get(slot::COMMIT_QUEUED)
    }

    /// Jobs and outcomes core `core` holds for full rings of other cores (a gauge).
    pub fn link_waiting(&self, core: usize) -> u64 {
        self.shards[core].get(slot::LINK_WAITING)
    }

    /// Finished event records on core `core`'s shelf (a gauge).
    pub fn event_shelf(&self, core: usize) -> u64 {
        self.shards[core].get(slot::EVENT_SHELF)
    }

    /// Entries in core `core`'s outbound timer heaps (a gauge).
    pub fn outbound_timers(&self, core: usize) -> u64 {
        self.shards[core].get(slot::OUTBOUND_TIMERS)
    }

    /// Closed connections of core `core` still sending their last bytes (io_uring; a gauge).
    pub fn io_retired(&self, core: usize) -> u64 {
        self.shards[core].get(slot::IO_RETIRED)
    }

    /// Sockets in core `core`'s io_uring file table (a gauge).
    pub fn io_fixed_files(&self, core: usize) -> u64 {
        self.shards[core].get(slot::IO_FIXED_FILES)
    }

    /// The whole `/metrics` body: this module's families, then whatever `extra` appends (WAL
    /// histograms, per-source refusal counters, ...).
    pub fn render(&self, extra: &mut dyn FnMut(&mut PromWriter)) -> String {
        let mut w = PromWriter::new();
        self.render_prometheus(&mut w);
        extra(&mut w);
        w.finish()
    }

    /// Append every family this module owns, in a fixed order.
    pub fn render_prometheus(&self, w: &mut PromWriter) {
        self.render_requests(w);
        self.render_connections(w);
        self.render_core_gauges(w);
        self.render_read_pauses(w);
    }

    /// `harn_backpressure_events_total` and `sluice_http_requests_total`.
    fn render_requests(&self, w: &mut PromWriter) {
        const BP: &str = "harn_backpressure_events_total";
        w.header(
            BP,
            "Backpressure decisions by dimension and action.",
            MetricType::Counter,
        );
        for &d in Dimension::ALL {
            for &a in Action::ALL {
                let v = self.backpressure_events(d, a);
                if v != 0 || CONTRACT_PAIRS.contains(&(d, a)) {
                    w.sample_u64(BP, &[("dimension", d.as_str()), ("action", a.as_str())], v);
                }
            }
        }

        // 114 cells, most never used: only observed combinations are rendered.
        const HTTP: &str = "sluice_http_requests_total";
        w.header(
            HTTP,
            "HTTP requests answered, by route and status.",
            MetricType::Counter,
        );
        for &r in Route::ALL {
            for (s, status) in STATUS_LABELS.iter().enumerate() {
                let v = self.sum(slot::HTTP + r as usize * STATUS_SLOTS + s);
                if v != 0 {
                    w.sample_u64(HTTP, &[("route", r.as_str()), ("status", status)], v);
                }
            }
        }
    }

    /// Connections accepted, refused (by reason), timed out (by kind) and open (per core).
    fn render_connections(&self, w: &mut PromWriter) {
        w.counter(
            "sluice_connections_accepted_total",
            "Connections accepted.",
            self.connections_accepted(),
        );
        let refused = ConnRefusal::ALL
            .iter()
            .map(|&r| (r.as_str(), self.connections_refused(r)));
        labelled(
            w,
            ("sluice_connections_refused_total", "reason"),
            "Connections refused at accept, by reason.",
            refused,
        );
        let timed_out = TimeoutKind::ALL
            .iter()
            .map(|&k| (k.as_str(), self.connections_timed_out(k)));
        labelled(
            w,
            ("sluice_connections_timed_out_total", "kind"),
            "Connections closed by a timeout, by kind.",
            timed_out,
        );
        self.per_core_gauge(
            w,
            "sluice_connections_open",
            "Open connections, per worker core.",
            Metrics::connections_open,
        );
    }

    /// The per-core gauges of the commit, the links and io_uring's retired connections, and
    /// the receive pool's empty count.
    fn render_core_gauges(&self, w: &mut PromWriter) {
        self.per_core_gauge(
            w,
            "sluice_commit_queued_records",
            "Records in a core's next group commit and with its commit helper (bound: 2 x wal.max_batch ingest records plus the pump's).",
            Metrics::commit_queued,
        );
        self.per_core_gauge(
            w,
            "sluice_link_waiting_items",
            "Jobs and outcomes a core holds because another core's inbound ring is full (bound: the jobs the core holds; offered again every loop turn).",
            Metrics::link_waiting,
        );
        self.per_core_gauge(
            w,
            "sluice_event_shelf_records",
            "Finished event records a core keeps for its ingest to build the next ones in, so an accepted event allocates only its body (bound: 256 per core, each at most 3 x 256 bytes of ids and 8 KiB of headers).",
            Metrics::event_shelf,
        );
        self.per_core_gauge(
            w,
            "sluice_outbound_timer_entries",
            "Entries in a core's outbound timer heaps (attempt deadlines and idle expiry), live and not yet dropped (bound: 2 x the core's open outbound connections + 128).",
            Metrics::outbound_timers,
        );
        self.per_core_gauge(
            w,
            "sluice_io_retired_connections",
            "io_uring: closed connections whose last response bytes are still being sent (bound: 4096 per core, 2 s each; 0 on mio).",
            Metrics::io_retired,
        );
        self.per_core_gauge(
            w,
            "sluice_io_registered_files",
            "io_uring: sockets in a core's registered file table, whose operations skip the kernel's descriptor lookup (bound: 4096 per core, at most RLIMIT_NOFILE; 0 on mio).",
            Metrics::io_fixed_files,
        );
        w.counter(
            "sluice_io_receive_pool_empty_total",
            "io_uring: receives that found the core's receive-buffer pool (128 x 32 KiB) empty and were re-armed.",
            self.sum(slot::IO_POOL_EMPTY),
        );
    }

    /// Reads paused by a bound, and bodies refused by the body budget.
    fn render_read_pauses(&self, w: &mut PromWriter) {
        let paused = PauseBound::ALL
            .iter()
            .map(|&b| (b.as_str(), self.read_paused(b)));
        labelled(
            w,
            ("sluice_connections_read_paused_total", "bound"),
            "Times a connection stopped being read because its queued responses reached a bound.",
            paused,
        );
        w.counter(
            "sluice_body_budget_refusals_total",
            "Request bodies refused (503 body_budget) because max_inflight_body_bytes could not cover them.",
            self.body_budget_refused(),
        );
    }

    /// A gauge family with one sample per core (`core` label), read by `get(self, core)`.
    fn per_core_gauge(&self, w: &mut PromWriter, name: &str, help: &str, get: CoreGauge) {
        w.header(name, help, MetricType::Gauge);
        for core in 0..self.cores() {
            let label = core.to_string();
            w.sample_u64(name, &[("core", &label)], get(self, core));
        }
    }
}

/// A per-core gauge reader of [`Metrics`].
type CoreGauge = fn(&Metrics, usize) -> u64;

/// A counter family `(name, label)` with one sample per label value.
fn labelled<'a>(
    w: &mut PromWriter,
    (name, label): (&str, &str),
    help: &str,
    samples: impl Iterator<Item = (&'a str, u64)>,
) {
    w.header(name, help, MetricType::Counter);
    for (value, v) in samples {
        w.sample_u64(name, &[(label, value)], v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_index_their_all_tables() {
        for (i, r) in Route::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
        for (i, a) in Action::ALL.iter().enumerate() {
            assert_eq!(*a as usize, i);
        }
        assert_eq!(STATUS_LABELS.len(), STATUS_SLOTS);
        for (i, c) in STATUS_CODES.iter().enumerate() {
            assert_eq!(STATUS_LABELS[i], c.to_string());
            assert_eq!(status_slot(*c), i);
        }
        for code in 0..=u16::MAX {
            let expected = STATUS_CODES.iter().position(|&c| c == code);
            assert_eq!(status_slot(code), expected.unwrap_or(STATUS_CODES.len()));
        }
        assert_eq!(slot::http(Route::Unmatched, 999), slot::CONN_ACCEPTED - 1);
    }

    #[test]
    fn shards_are_cache_padded() {
        let m = Metrics::new(2);
        let a = &**m.shards[0] as *const Shard as usize;
        let b = &**m.shards[1] as *const Shard as usize;
        assert_eq!(a % std::mem::align_of::<CachePadded<u8>>(), 0);
        assert_eq!(b % std::mem::align_of::<CachePadded<u8>>(), 0);
        assert!(std::mem::size_of::<CachePadded<Shard>>() >= slot::COUNT * 8);
    }

    #[test]
    fn shards_sum_across_threads() {
        const CORES: usize = 4;
        const PER_CORE: u64 = 25_000;
        let m = Metrics::new(CORES);
        std::thread::scope(|s| {
            for i in 0..CORES {
                let core = m.core(i);
                s.spawn(move || {
                    for n in 0..PER_CORE {
                        core.incr_http(Route::Webhook, 202);
                        core.incr_ingest(n % 2 == 0);
                        core.set_connections_open(n);
                    }
                    core.incr_http(Route::Webhook, 418);
                    core.incr_timeout(TimeoutKind::Write);
                });
            }
        });
        let all = CORES as u64 * PER_CORE;
        assert_eq!(m.http_requests(Route::Webhook, 202), all);
        assert_eq!(m.http_requests(Route::Webhook, 999), CORES as u64);
        assert_eq!(m.http_requests(Route::Healthz, 202), 0);
        assert_eq!(
            m.backpressure_events(Dimension::Ingest, Action::Admit),
            all / 2
        );
        assert_eq!(
            m.backpressure_events(Dimension::Ingest, Action::Reject),
            all / 2
        );
        assert_eq!(m.connections_timed_out(TimeoutKind::Write), CORES as u64);
        for i in 0..CORES {
            assert_eq!(m.connections_open(i), PER_CORE - 1);
        }
    }
}
