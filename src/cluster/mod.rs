//! Several nodes, one downstream budget: a destination's `max_in_flight` and `rate` shared
//! through Redis (`[[destinations]] shared = { … }`, README "Several nodes").
//!
//! ```text
//!  owner core (its loop)                      client thread (one per node)           Redis
//!  gate: circuit, pause,                      per turn: the due syncs and rate       LEASE script:
//!   shared lease valid? ── local cache ──┐     calls of every shared destination      held/want/expiry
//!   rate token? permit? ─┘               │     as one pipeline per Redis ───────────► RATE script:
//!  after a pump: publish want/ceiling ──►│ Slot (latest value, bounded)               shared GCRA TAT
//!                   ◄── mio::Waker ──────┘ ◄── grants, tokens, health
//! ```
//!
//! - [`budget`]: the owner core's cache of one destination's grants; the per-event decision is
//!   local (a comparison with the lease's end, a token's time, the permit count).
//! - [`slot`]: the bounded hand-off between the owner core and the thread.
//! - [`client`]: the thread; [`redis`]: its blocking connection and the Lua scripts; [`resp`]:
//!   the wire codec (sans-IO).
//!
//! **Why a thread and not the loop.** Redis calls run on a dedicated thread with blocking
//! sockets and timeouts, so a slow, partitioned or restarting Redis stalls that thread only;
//! the event loops exchange values with it through the slots (a nudge channel of capacity 1
//! one way, the loop's `mio::Waker` the other). A RESP client on each loop's poll would save
//! the thread but needs a connection per core, a reconnect state machine inside the loop and
//! registration in code the io_uring work is rewriting; round trips are already batched (one
//! pipeline per turn), so the thread costs a context switch per batch, not per event. The
//! protocol is a small in-tree RESP2 codec rather than the `redis` crate: sluice sends four
//! commands (`SELECT`, `SCRIPT LOAD`, `EVALSHA`), and the crate would add `url`/`idna` and
//! their Unicode tables to the build for none of its features (see DESIGN.md).

#![forbid(unsafe_code)]

pub mod budget;
pub mod client;
mod dest;
pub mod redis;
pub mod resp;
pub mod slot;
mod spec;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use mio::Waker;
use parking_lot::Mutex;

use crate::metrics::{MetricType, PromWriter};
use crate::sync::clock::Clock;
use budget::SharedBudget;
pub use dest::SharedDest;
use slot::Health;
pub use spec::{OnUnavailable, RedisAddr, SharedDestSpec, SharedRate, SharedSpec};

/// A node's shared budgets: the slots and the client thread.
#[derive(Debug)]
pub struct Cluster {
    node: String,
    dests: Vec<Arc<SharedDest>>,
    kick_tx: SyncSender<()>,
    kick_rx: Mutex<Option<Receiver<()>>>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Cluster {
    /// The node's shared destinations (none: an inert value, no thread).
    pub fn new(specs: Vec<SharedDestSpec>) -> Cluster {
        let dests = specs
            .into_iter()
            .map(|spec| Arc::new(SharedDest::new(spec)))
            .collect();
        let (kick_tx, kick_rx) = sync_channel(1);
        Cluster {
            node: node_id(),
            dests,
            kick_tx,
            kick_rx: Mutex::new(Some(kick_rx)),
            stop: Arc::new(AtomicBool::new(false)),
            thread: Mutex::new(None),
        }
    }

    /// This node's name in Redis.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Starts the client thread (nothing when no destination is shared; once).
    pub fn start(&self, clock: Arc<dyn Clock>, wakers: Vec<Arc<Waker>>) -> std::io::Result<()> {
        let Some(kick) = self.kick_rx.lock().take() else {
            return Ok(());
        };
        if self.dests.is_empty() {
            return Ok(());
        }
        let client = client::Client {
            node: self.node.clone(),
            dests: self.dests.clone(),
            clock,
            wakers,
            kick,
            stop: self.stop.clone(),
        };
        let h = std::thread::Builder::new()
            .name("sluice-redis".into())
            .spawn(move || client.run())?;
        *self.thread.lock() = Some(h);
        Ok(())
    }

    /// The owner core's budget of destination `d`, when it is shared.
    pub fn budget_for(&self, d: usize) -> Option<SharedBudget> {
        let s = self.dests.iter().find(|s| s.slot.dest == d)?;
        Some(SharedBudget::new(
            s.slot.clone(),
            self.kick_tx.clone(),
            s.cfg.on_unavailable,
            s.limit,
            s.rate.is_some(),
        ))
    }

    /// `/readyz`: `Some` while a destination with `on_unavailable = "closed"` cannot reach its
    /// Redis (dispatch to it has stopped or will at its lease's end).
    pub fn not_ready_reason(&self) -> Option<&'static str> {
        self.dests
            .iter()
            .any(|d| {
                d.cfg.on_unavailable == OnUnavailable::Closed
                    && matches!(d.slot.health(), Health::Down(_))
            })
            .then_some("shared_budget_unavailable")
    }

    /// The `sluice_shared_*` families (nothing when no destination is shared).
    pub fn render_prometheus(&self, w: &mut PromWriter) {
        if self.dests.is_empty() {
            return;
        }
        use MetricType::{Counter, Gauge};
        type Get = fn(&SharedDest) -> f64;
        let families: [(&str, &str, MetricType, Get); 9] = [
            (
                "sluice_shared_lease_acquisitions_total",
                "Lease syncs that raised this node's permit count in Redis.",
                Counter,
                |d| d.slot.metrics.acquisitions.load(Relaxed) as f64,
            ),
            (
                "sluice_shared_lease_renewals_total",
                "Successful lease syncs (renewals, acquisitions and releases).",
                Counter,
                |d| d.slot.metrics.renewals.load(Relaxed) as f64,
            ),
            (
                "sluice_shared_failures_total",
                "Lease syncs and rate calls that failed (Redis unreachable or an error reply).",
                Counter,
                |d| d.slot.metrics.failures.load(Relaxed) as f64,
            ),
            (
                "sluice_shared_wait_seconds_total",
                "Time queued events waited for the shared budget (lease, permit or rate token).",
                Counter,
                |d| d.slot.metrics.wait_nanos.load(Relaxed) as f64 / 1e9,
            ),
            (
                "sluice_shared_rate_tokens_total",
                "Rate tokens this node reserved in the shared GCRA.",
                Counter,
                |d| d.slot.metrics.rate_tokens.load(Relaxed) as f64,
            ),
            (
                "sluice_shared_permits_held",
                "Permits Redis counts for this node after its last sync.",
                Gauge,
                |d| d.slot.metrics.held.load(Relaxed) as f64,
            ),
            (
                "sluice_shared_budget_in_use",
                "Permits Redis counts for all nodes together after this node's last sync.",
                Gauge,
                |d| d.slot.metrics.cluster_in_use.load(Relaxed) as f64,
            ),
            (
                "sluice_shared_budget_limit",
                "The shared max_in_flight.",
                Gauge,
                |d| d.limit as f64,
            ),
            (
                "sluice_shared_redis_up",
                "1 while the last call to this destination's Redis succeeded.",
                Gauge,
                |d| d.slot.metrics.up.load(Relaxed) as f64,
            ),
        ];
        for (name, help, kind, get) in families {
            w.header(name, help, kind);
            for d in &self.dests {
                w.sample(name, &[("destination", &d.uri)], get(d));
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        let _ = self.kick_tx.try_send(());
        if let Some(h) = self.thread.lock().take() {
            let _ = h.join();
        }
    }
}

/// `host:pid:random`: unique per process, readable in Redis (`HGETALL sluice:budget:…:held`).
fn node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".to_string());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{host}:{}:{nanos:08x}", std::process::id())
}
