//! The dispatcher of a destination's owner core: the decisions of delivery. Per-destination
//! queues, flow-control gates, permits, circuits, rate budgets, pauses, retry timers and
//! outcome reporting. Everything here is single-threaded (one [`Dispatcher`] per worker, driven
//! from that worker's loop), so the permit set, circuit, rate budget and pause of a
//! destination need no atomics and no locks. The I/O (connections, keep-alive reuse, writing
//! the request, reading the response) is the [`OutboundPool`]'s
//! ([`crate::net::outbound`]); this file tells it what to send and settles what it reports.
//!
//! Flow: the pump hands a [`Job`] to its destination's owner core → [`Dispatcher::accept`]
//! passes it through its trigger's flow-control gates ([`crate::dispatch::flow`], core-local
//! like everything here: they may skip it, hold it, or merge it into a batch) → queues it (or
//! parks it until its recovered retry time) → `pump_dest` asks the destination's gate: fail
//! fast (circuit open → DLQ `circuit_open`), wait (paused by a downstream `Retry-After`, rate
//! budget, no free permit, or an open circuit with `on_open = "hold"`), or go with a permit → the request is encoded (`encode`: raw
//! body, Standard Webhooks headers and signature) and the pool carries it on an idle keep-alive
//! connection or a new one (never more than `max_in_flight` busy per destination, as each
//! attempt holds a permit) → the pool reports a [`Finished`] attempt, which `settle`
//! classifies: 2xx delivered; connect errors, timeouts, 408, 425, 429, 5xx retryable (backoff
//! with full jitter, the schedule reported to the pump to be made durable); other 4xx permanent
//! (DLQ). A stale keep-alive connection is not an attempt: the job is sent again at no cost.
//!
//! A terminal outcome (delivered, dead-lettered) releases the event's singleton/concurrency
//! holds (a dead letter may stop an `ordering` key: `FlowEngine::dead_lettered`); a batch
//! carrier reports its outcome once per member.
//!
//! Batched deliveries (`batch = { … }` on the destination, [`crate::dispatch::deliver::batch`]): a job
//! that passed its gates and holds its slot joins the destination's batch being filled instead
//! of its queue (`queue_job`); a closed batch is queued as one call (a carrier job), so the
//! gate sees calls: one permit, one rate token, one circuit result per call. The `rate` budget
//! of a batching destination therefore counts calls, not events. A batch closes at
//! `max_events`, at `max_bytes`, or at its linger deadline once its call could start (nothing
//! queued ahead, a permit free, no pause: `close_lingered`): a timer here (`lingers`, at most one
//! entry per batching destination plus one per reload that shortened its linger), never a
//! poll. A retried batch is the same carrier (same id, body and members): it waits in `delayed`
//! as a call and skips the batcher when due.
//!
//! Slots (the gates' side of the dispatcher is `gates.rs`): a job arrives holding one of the
//! pump's `max_outstanding` slots. When a gate holds
//! an event, a `Held` outcome tells the pump to give its slot back; when the gates release it
//! (a batch: its carrier), the dispatcher takes a slot itself ([`Slots::take`]: within the
//! trigger's cap, one of the `max_outstanding`) and says so with a `Resumed` outcome, so that
//! the pump gives both back at the terminal outcome.
//! Released jobs that find no slot wait in `slot_wait` (FIFO per trigger, counted in
//! `sluice_flow_held{gate="dispatch"}`, bounded by `[flow] max_held` per trigger, the pumps
//! admitting none of the trigger's events at the bound); the core is marked in
//! `Outstanding` and woken when a slot is freed.
//!
//! Bounds: jobs holding a slot ≤ `max_outstanding`; jobs held by gates: see
//! [`crate::dispatch::flow`]; connections per
//! destination: see [`crate::net::outbound`]; attempts finished and not yet settled ≤
//! the connections of one tick (a reused buffer); outcomes not yet taken by the core's loop
//! (`take_outcomes`, every turn) ≤ one per held job per attempt.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;

use crate::dispatch::deliver::batch::{batch_id, Batcher};
use crate::dispatch::deliver::circuit::Transition;
use crate::dispatch::deliver::classify::{
    adaptive_sample, classify, describe, recorded, AttemptResult, Class,
};
use crate::dispatch::deliver::destination::{DestinationEvent, DestinationState, Gate};
use crate::dispatch::deliver::permits::Permit;
use crate::dispatch::deliver::request::{encode, template};
use crate::dispatch::deliver::retry::RetryPolicy;
use crate::dispatch::deliver::rng::SmallRng;
use crate::dispatch::dlq::DlqReason;
use crate::dispatch::flow::{FlowEngine, FlowOut};
use crate::dispatch::id_map::IdMap;
use crate::dispatch::job::{AttemptFacts, Job, JobOutcome};
use crate::dispatch::metrics::CoreDispatchMetrics;
use crate::dispatch::spec::{DestinationSpec, DispatchSpec};
use crate::net::http::client::{RequestError, RequestTemplate};
use crate::net::io::event::ConnEvent;
use crate::net::io::{Clients, Reactor};
pub use crate::net::outbound::CLIENT_TOKEN_BASE;
use crate::net::outbound::{Finished, OutboundPool, Started, Target};

// The dispatch window a dispatcher takes slots from for gate-released jobs.
pub use crate::dispatch::trigger_caps::Slots;
use crate::sync::clock::Clock;

/// What an attempt carries through the outbound pool.
#[derive(Debug)]
struct Attempt {
    job: Job,
    permit: Permit,
    started: u64,
}

#[derive(Debug)]
struct Dest {
    state: DestinationState,
    policy: RetryPolicy,
    /// The destination's request line, `host` and configured headers, rendered and validated
    /// once (again at a reload): [`encode`] renders only the per-event fields.
    template: Result<RequestTemplate, RequestError>,
    queue: VecDeque<Job>,
    /// A wake-up timer is already set for this time (avoid piling up duplicates).
    wake_at: u64,
    /// `Some` for a batching destination: the batch being filled.
    batcher: Option<Batcher>,
    /// A linger timer is already set for this time (0: none).
    linger_at: u64,
}

/// A job waiting for its retry time (min-heap on `due`).
#[derive(Debug)]
struct Delayed {
    due: u64,
    seq: u64,
    job: Job,
    /// A batched call being retried (queued as it is, not batched again).
    call: bool,
}
impl PartialEq for Delayed {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Delayed {}
impl PartialOrd for Delayed {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Delayed {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

/// One core's delivery engine.
#[derive(Debug)]
pub struct Dispatcher {
    config: Arc<DispatchSpec>,
    dests: IdMap<Dest>,
    pool: OutboundPool<Attempt>,
    /// Attempts the pool finished in one call, settled right after (capacity reused).
    finished: Vec<Finished<Attempt>>,
    delayed: BinaryHeap<Reverse<Delayed>>,
    wakes: BinaryHeap<Reverse<(u64, usize)>>,
    /// Linger deadlines of batches being filled, by destination (module docs).
    lingers: BinaryHeap<Reverse<(u64, usize)>>,
    seq: u64,
    /// Outcomes for the pumps, taken by the core's loop every turn ([`Dispatcher::
    /// take_outcomes`]); at most one per held job per attempt between two turns.
    outbox: VecDeque<JobOutcome>,
    rng: SmallRng,
    metrics: CoreDispatchMetrics,
    /// Events held (a batch carrier counts its members).
    held: usize,
    flow: FlowEngine,
    core: usize,
    /// The pumps' shared `max_outstanding` window (gate-released jobs take their slot here).
    slots: Slots,
    /// Jobs the gates let go, waiting for a slot, FIFO per trigger (module docs).
    slot_wait: SlotWait,
    /// This turn's reading of the order horizon ([`Dispatcher::note_horizon`]).
    horizon: crate::dispatch::horizon::Reading,
    /// Shared budgets (`crate::cluster`) not yet attached to their destination's state.
    budgets: HashMap<usize, crate::cluster::budget::SharedBudget>,
    /// Destinations of this core with a shared budget (checked for new grants every turn).
    shared_dests: Vec<usize>,
    /// Jobs for a destination id this core's generation does not know yet: a pump on a core
    /// that picked up a reload first admitted them. Accepted when this core picks the
    /// generation up ([`Dispatcher::reconfigure`], at the top of its next turn: the publication
    /// happened before the pump's push). Bounded by the jobs out (`max_outstanding`).
    early: Vec<Job>,
    /// The core's clock; only its wall time is read here (the loop passes `now`).
    clock: Arc<dyn Clock>,
}

impl Dispatcher {
    /// Watches the DLQ for the keys `ordering` gates stop ([`FlowEngine::with_dlq`]).
    pub fn with_dlq(mut self, dlq: Arc<crate::dispatch::dlq::DlqStore>) -> Dispatcher {
        self.flow = self.flow.with_dlq(dlq);
        self
    }

    /// `slots`: the pumps' `max_outstanding` window; `clock`: the core's (the wall time of
    /// retry schedules and attempt stamps comes from it too, [`Clock::unix_millis`]).
    pub fn new(
        core: usize,
        config: Arc<DispatchSpec>,
        metrics: CoreDispatchMetrics,
        slots: Slots,
        clock: Arc<dyn Clock>,
    ) -> Dispatcher {
        let store = crate::dispatch::flow::persist::Store::open(&config.flow_dir, core, &config);
        Dispatcher {
            flow: FlowEngine::new(config.clone(), metrics.shared.clone(), Some(store))
                .hold_for_handover(!slots.window.handover.done())
                .on_core(core),
            core,
            slots,
            slot_wait: SlotWait::default(),
            horizon: Default::default(),
            pool: OutboundPool::new(config.idle_timeout.as_nanos() as u64),
            config,
            dests: IdMap::default(),
            finished: Vec::new(),
            delayed: BinaryHeap::new(),
            wakes: BinaryHeap::new(),
            lingers: BinaryHeap::new(),
            seq: 0,
            outbox: VecDeque::new(),
            rng: SmallRng::seed_from_u64(
                0x5eed ^ (core as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ clock.unix_millis(),
            ),
            clock,
            metrics,
            held: 0,
            budgets: HashMap::new(),
            shared_dests: Vec::new(),
            early: Vec::new(),
        }
    }

    /// Attaches the shared budgets (`budget(d)` for each destination `d`; `None` when `d` is
    /// not shared). Only the destinations this core owns ever use theirs.
    pub fn with_budgets(
        mut self,
        budget: impl Fn(usize) -> Option<crate::cluster::budget::SharedBudget>,
    ) -> Self {
        self.budgets = (0..self.config.destinations.len())
            .filter_map(|d| Some((d, budget(d)?)))
            .collect();
        self
    }

    /// Jobs this core holds (queued, waiting for a retry, or in flight).
    pub fn held(&self) -> usize {
        self.held
    }

    /// Attempts on the wire.
    pub fn in_flight(&self) -> usize {
        self.pool.in_flight()
    }

    /// Entries in the outbound pool's timer heaps, live and stale (`net::deadlines`: at most
    /// 2 × the open connections + 128), for the core's gauge.
    pub fn timer_entries(&self) -> usize {
        self.pool.timer_entries()
    }

    fn dest(&mut self, d: usize) -> &mut Dest {
        let config = &self.config;
        let budgets = &mut self.budgets;
        let shared_dests = &mut self.shared_dests;
        self.dests.entry(d).or_insert_with(|| {
            let c: &DestinationSpec = &config.destinations[d];
            // Parameters were validated with the config, so this cannot fail; a failure would
            // be a bug, and unlimited permits are not an acceptable fallback.
            let state = DestinationState::from_config(c).expect("validated destination config");
            let state = match budgets.remove(&d) {
                Some(b) => {
                    shared_dests.push(d);
                    state.with_shared(b)
                }
                None => state,
            };
            Dest {
                state,
                policy: RetryPolicy::from(&c.retry),
                template: template(c),
                queue: VecDeque::new(),
                wake_at: 0,
                batcher: c.batch.map(Batcher::new),
                linger_at: 0,
            }
        })
    }

    /// A reload's configuration (`ops::reload`; destinations laid out by their stable id,
    /// `ops::reload::ids`): each destination already in use gets its new limits and retry
    /// schedule, then its queue is pumped (a raised limit starts waiting jobs now); a new one
    /// gets its state at its first job; a removed one keeps its state and its settings and
    /// finishes its jobs. Attempts in flight keep running under the settings they started with;
    /// the next attempts use the new ones.
    pub fn reconfigure(&mut self, config: Arc<DispatchSpec>, now: u64, draining: bool) {
        let old = std::mem::replace(&mut self.config, config);
        let mut touched = Vec::new();
        if old.gated() != self.config.gated() {
            // Gates changed: every waiting event is offered to the new gates (`flow::rekey`).
            let mut out = FlowOut::default();
            self.flow.rekey(Arc::clone(&self.config), now, &mut out);
            touched = self.apply_flow(out, now);
        }
        let mut ds: Vec<usize> = self.dests.keys().copied().collect();
        ds.sort_unstable();
        for d in ds {
            let (Some(c), Some(o)) = (self.config.destinations.get(d), old.destinations.get(d))
            else {
                continue;
            };
            let dest = self.dests.get_mut(&d).expect("listed above");
            // The rate parameters were validated with the config: this fails only for a
            // hand-built one, which then keeps its old budget (and says so).
            if let Err(e) = dest.state.reconfigure(c, o) {
                eprintln!(
                    "sluice: destination {}: rate not changed: {e}",
                    c.handler.uri
                );
            }
            dest.policy = RetryPolicy::from(&c.retry);
            dest.template = template(c);
            if c.batch != o.batch {
                // The batch being filled goes as it is; the next ones follow the new settings.
                if let Some(b) = dest.batcher.as_mut() {
                    let mut closed = Vec::new();
                    b.flush(&mut closed);
                    dest.queue.extend(closed);
                }
                dest.batcher = c.batch.map(Batcher::new);
            }
            let limit = dest.state.limit() as u64;
            self.metrics.set_permits(d, limit);
            touched.push(d);
        }
        touched.sort_unstable();
        touched.dedup();
        for d in touched {
            self.pump_dest(d, now);
        }
        for job in std::mem::take(&mut self.early) {
            self.held -= 1;
            self.accept(job, now, draining);
        }
    }

    /// Takes a job from the pump. While draining, jobs are only held (they stay pending in the
    /// WAL and are evaluated by the gates and delivered after the restart).
    pub fn accept(&mut self, job: Job, now: u64, draining: bool) {
        self.held += 1;
        if job.dest >= self.config.destinations.len() {
            self.early.push(job);
            return;
        }
        let gated = self.flow.gates(&job.event.trigger_id);
        if draining || !gated && !job.capless {
            if let Some(d) = self.enqueue(job, now) {
                if !draining {
                    self.pump_dest(d, now);
                }
            }
            return;
        }
        let mut out = FlowOut::default();
        match gated {
            true => self.flow.offer(job, now, &mut out),
            // A reload removed the gates it was admitted for: it still takes its cap.
            false => out.ready.push(job),
        }
        for d in self.apply_flow(out, now) {
            self.pump_dest(d, now);
        }
    }

    /// Queues a job that passed the gates, or parks it until its recovered retry time. Returns
    /// its destination when it was queued.
    fn enqueue(&mut self, job: Job, now: u64) -> Option<usize> {
        let wait_ms = job.due_at_ms.saturating_sub(self.clock.unix_millis());
        if wait_ms > 0 {
            let due = now + wait_ms * 1_000_000;
            self.delay(job, due, false);
            return None;
        }
        let d = job.dest;
        self.queue_job(d, job, false, now);
        Some(d)
    }

    /// Queues `job` for destination `d`: as one call, or, for a batching destination, into the
    /// batch being filled (unless it is a batched call already, `call`), whose closed batches
    /// are queued as calls; arms the linger timer of a batch left filling.
    fn queue_job(&mut self, d: usize, job: Job, call: bool, now: u64) {
        self.dest(d);
        let Some(dest) = self.dests.get_mut(&d) else {
            return;
        };
        let Some(batcher) = dest.batcher.as_mut().filter(|_| !call) else {
            dest.queue.push_back(job);
            return;
        };
        let (core, rng) = (self.core, &mut self.rng);
        let mut new_id = || batch_id(self.clock.unix_millis(), core, rng.next_u64());
        let mut closed = Vec::new();
        batcher.push(job, now, &mut new_id, &mut closed);
        self.metrics.shared.batch.set_open(d, batcher.held());
        dest.queue.extend(closed);
        self.arm_linger(d);
    }

    /// Closes `d`'s batch if its linger is over and the call could start now, and sets the
    /// timer for the one left filling.
    ///
    /// Linger bounds how long a batch waits for events that have not arrived: it does not cut
    /// short a batch that could not leave anyway. While the destination cannot start the call
    /// (calls queued ahead of it, every permit taken, a `Retry-After` pause) the batch goes on
    /// filling up to `max_events`/`max_bytes`, and closes when the destination has room again
    /// (a completion or the pause's end calls [`Dispatcher::pump_dest`]; a pause with nothing
    /// queued arms its wake-up here). The rate budget and the circuit are left to the gate.
    fn close_lingered(&mut self, d: usize, now: u64) {
        let Some(dest) = self.dests.get_mut(&d) else {
            return;
        };
        let Some(batcher) = dest.batcher.as_mut() else {
            return;
        };
        if !batcher.deadline().is_some_and(|t| t <= now) {
            return self.arm_linger(d);
        }
        let st = &dest.state;
        let paused = st.paused_until() > now;
        if dest.queue.is_empty() && !paused && st.in_flight() < st.max_in_flight() {
            let mut closed = Vec::new();
            batcher.poll(now, &mut closed);
            dest.queue.extend(closed);
            self.metrics.shared.batch.set_open(d, batcher.held());
            return self.arm_linger(d);
        }
        let until = st.paused_until();
        if paused && dest.queue.is_empty() && (dest.wake_at == 0 || until < dest.wake_at) {
            dest.wake_at = until;
            self.wakes.push(Reverse((until, d)));
        }
    }

    /// A timer at the linger deadline of `d`'s batch being filled, unless one as early is set.
    fn arm_linger(&mut self, d: usize) {
        let Some(dest) = self.dests.get_mut(&d) else {
            return;
        };
        let Some(t) = dest.batcher.as_ref().and_then(Batcher::deadline) else {
            return;
        };
        if dest.linger_at == 0 || t < dest.linger_at {
            dest.linger_at = t;
            self.lingers.push(Reverse((t, d)));
        }
    }

    fn delay(&mut self, job: Job, due: u64, call: bool) {
        self.seq += 1;
        self.delayed.push(Reverse(Delayed {
            due,
            seq: self.seq,
            job,
            call,
        }));
    }

    /// Jobs the gates released that wait for a `max_outstanding` slot.
    pub fn slot_waiting(&self) -> usize {
        self.slot_wait.len()
    }

    /// The earliest time something here needs attention (for the poll timeout).
    pub fn next_deadline(&self) -> Option<u64> {
        let mut t = self.delayed.peek().map(|Reverse(d)| d.due);
        if let Some(f) = self.flow.next_deadline() {
            t = Some(t.map_or(f, |x| x.min(f)));
        }
        if let Some(Reverse((w, _))) = self.wakes.peek() {
            t = Some(t.map_or(*w, |x| x.min(*w)));
        }
        if let Some(Reverse((w, _))) = self.lingers.peek() {
            t = Some(t.map_or(*w, |x| x.min(*w)));
        }
        if let Some(a) = self.pool.next_deadline() {
            t = Some(t.map_or(a, |x| x.min(a)));
        }
        t
    }

    /// Timers: due retries, destination wake-ups, attempt timeouts, idle connections; grants
    /// of shared budgets stored since the last turn.
    pub fn on_tick(&mut self, now: u64, draining: bool) {
        let mut touched: Vec<usize> = Vec::new();
        for &d in &self.shared_dests {
            if let Some(dest) = self.dests.get_mut(&d) {
                if dest.state.refresh_shared(now) {
                    touched.push(d);
                }
            }
        }
        while self.delayed.peek().is_some_and(|Reverse(d)| d.due <= now) {
            let Some(Reverse(d)) = self.delayed.pop() else {
                break;
            };
            let dest = d.job.dest;
            self.queue_job(dest, d.job, d.call, now);
            touched.push(dest);
        }
        while self.lingers.peek().is_some_and(|Reverse((t, _))| *t <= now) {
            let Some(Reverse((t, dest))) = self.lingers.pop() else {
                break;
            };
            let state = self.dest(dest);
            if state.linger_at == t {
                state.linger_at = 0;
            }
            touched.push(dest);
        }
        while self.wakes.peek().is_some_and(|Reverse((t, _))| *t <= now) {
            let Some(Reverse((_, dest))) = self.wakes.pop() else {
                break;
            };
            self.dest(dest).wake_at = 0;
            touched.push(dest);
        }
        let mut finished = std::mem::take(&mut self.finished);
        self.pool.on_tick(now, &mut finished);
        for f in finished.drain(..) {
            touched.push(f.dest());
            self.finish(f, now);
        }
        self.finished = finished;
        let mut out = FlowOut::default();
        self.flow.note_handover(self.slots.window.handover.done());
        self.flow.on_tick(now, draining, &mut out);
        if !draining {
            touched.extend(self.apply_flow(out, now));
            touched.sort_unstable();
            touched.dedup();
            for d in touched {
                self.pump_dest(d, now);
            }
        }
    }

    /// Starts as many queued jobs of destination `d` as its gate allows, then tells a shared
    /// budget what the destination wants and publishes its state for `/api/v1/state`.
    fn pump_dest(&mut self, d: usize, now: u64) {
        self.close_lingered(d, now);
        self.start_queued(d, now);
        let dest = self.dest(d);
        let queued = dest.queue.len();
        dest.state.publish_shared(queued);
        let (circuit, paused) = (dest.state.circuit_state(), dest.state.paused_until());
        self.metrics
            .set_dest_state(d, circuit, paused, queued as u64);
    }

    fn start_queued(&mut self, d: usize, now: u64) {
        loop {
            let dest = self.dest(d);
            if dest.queue.is_empty() {
                return;
            }
            match dest.state.gate(now) {
                Gate::FailFast { retry_after } => {
                    let Some(job) = dest.queue.pop_front() else {
                        return;
                    };
                    self.metrics.circuit_fail_fast();
                    let last_error = format!(
                        "destination circuit open for http:{}; retry after {}s",
                        self.config.destinations[d].handler.uri,
                        retry_after.as_secs().max(1)
                    );
                    let attempts = job.attempt - 1;
                    self.dead_letter(job, DlqReason::CircuitOpen, attempts, last_error, None, now);
                }
                Gate::Wait { until } => {
                    if until > 0 && (dest.wake_at == 0 || until < dest.wake_at) {
                        dest.wake_at = until;
                        self.wakes.push(Reverse((until, d)));
                    }
                    return;
                }
                Gate::Go { permit, probe } => {
                    let Some(job) = dest.queue.pop_front() else {
                        return;
                    };
                    if probe {
                        self.metrics.circuit_half_open_probe();
                    }
                    self.start(d, job, permit, now);
                }
            }
        }
    }

    fn start(&mut self, d: usize, job: Job, permit: Permit, now: u64) {
        let cfg = &self.config.destinations[d];
        let deadline = now + cfg.timeout.as_nanos() as u64;
        // A buffer the pool recycles: no allocation per request once the pool is warm.
        let mut request = self.pool.request_buffer();
        // The send time, not the receipt time: receivers check it against a window (Standard
        // Webhooks: 5 minutes), which a retried or replayed event would otherwise fail.
        let encoded = match self.dests.get(&d).map(|x| &x.template) {
            Some(Ok(t)) => encode(cfg, t, &job, self.clock.unix_millis() / 1000, &mut request),
            Some(Err(e)) => Err(*e),
            None => template(cfg)
                .and_then(|t| encode(cfg, &t, &job, self.clock.unix_millis() / 1000, &mut request)),
        };
        if let Err(e) = encoded {
            // Validated config and stored headers cannot produce this; fail the event
            // visibly.
            let msg = format!("cannot encode request: {e}");
            self.dest(d).state.release(permit);
            let attempts = job.attempt;
            self.dead_letter(job, DlqReason::PermanentFailure, attempts, msg, None, now);
            return;
        }
        let cfg = &self.config.destinations[d];
        if cfg.batch.is_some() && !job.batch.is_empty() {
            self.metrics.shared.batch.observe_call(job.batch.len());
        }
        let in_flight = self.dests.get(&d).map_or(0, |x| x.state.in_flight());
        self.metrics.set_in_flight(d, in_flight as u64);
        let h = &cfg.handler;
        let target = Target {
            dest: d,
            host: &h.host,
            port: h.port,
            idle_cap: cfg.max_in_flight,
            tls: cfg.tls.as_ref().map(|t| &t.client),
        };
        let attempt = Attempt {
            job,
            permit,
            started: now,
        };
        match self.pool.start(target, attempt, request, deadline) {
            Ok(Started::Opened) => self.metrics.connection_opened(d),
            Ok(Started::Reused) => {}
            Err(f) => self.finish(f, now),
        }
    }

    /// Opens outbound connections on `clients`: the core's reactor's outbound side
    /// ([`Reactor::clients`]), at construction and again once its loop set up its backend.
    pub fn attach(&mut self, clients: Clients) {
        self.pool.attach(clients);
    }

    /// Submits the outbound connections' ring operations of the turn (io_uring; before the
    /// loop's wait).
    pub fn submit_io(&mut self, reactor: &mut Reactor) {
        self.pool.submit(reactor);
    }

    /// A completion of an outbound connection (io_uring).
    pub fn on_completion(&mut self, ev: ConnEvent, reactor: &mut Reactor, now: u64) {
        let mut finished = std::mem::take(&mut self.finished);
        self.pool.on_completion(ev, reactor, now, &mut finished);
        for f in finished.drain(..) {
            self.finish(f, now);
        }
        self.finished = finished;
    }

    /// Readiness of an outbound connection (mio): `token` is its event's source token.
    pub fn on_ready(&mut self, token: usize, readable: bool, writable: bool, now: u64) {
        let mut finished = std::mem::take(&mut self.finished);
        self.pool
            .on_ready(token, readable, writable, now, &mut finished);
        for f in finished.drain(..) {
            self.finish(f, now);
        }
        self.finished = finished;
    }

    /// An attempt the pool carried ended.
    fn finish(&mut self, f: Finished<Attempt>, now: u64) {
        match f {
            Finished::Done {
                dest,
                payload,
                result,
                body_prefix,
            } => self.settle(dest, payload, (result.into(), body_prefix), now),
            Finished::Stale { dest, payload } => {
                // A kept-alive connection the server had closed: resend on a fresh connection,
                // once, without counting an attempt or feeding the circuit.
                let Attempt { job, permit, .. } = payload;
                self.dest(dest).state.release(permit);
                self.dest(dest).queue.push_front(job);
                self.pump_dest(dest, now);
            }
        }
    }

    /// Feeds the gate and decides the job's fate after one attempt.
    fn settle(
        &mut self,
        d: usize,
        attempt: Attempt,
        (result, response_prefix): (AttemptResult, Vec<u8>),
        now: u64,
    ) {
        let Attempt {
            job,
            permit,
            started,
            ..
        } = attempt;
        let class = classify(&result);
        // A keyed trigger's failures count once per key towards the circuit (looked up only
        // for a failure: nothing on the delivered path).
        let key = match class {
            Class::Retryable { pause: None } if job.batch.is_empty() => {
                self.flow.concurrency_key(job.lsn).map(|(t, k)| {
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    std::hash::Hash::hash(&(t, k), &mut h);
                    std::hash::Hasher::finish(&h)
                })
            }
            _ => None,
        };
        let opened = self.feed_gate(d, permit, (&class, key), &result, started, now);
        let config = Arc::clone(&self.config);
        let uri = config.destinations[d].handler.uri.as_str();
        let (outcome, retry_after_ms) = recorded(&result);
        let facts = AttemptFacts {
            at_ms: self.clock.unix_millis(),
            destination: d as u32,
            outcome,
            latency_us: (now.saturating_sub(started) / 1000).min(u64::from(u32::MAX)) as u32,
            retry_after_ms,
            response_prefix,
        };
        match class {
            Class::Delivered => {
                let attempts = job.attempt;
                self.held -= job.events();
                // Each delivered record goes back to this core's shelf (`wal::shelf`).
                if job.batch.is_empty() {
                    self.delivered(job.lsn, attempts, job.event.received_at_ms, facts, now);
                    crate::wal::shelf::give(job.event);
                } else {
                    for m in job.batch {
                        let facts = facts.clone();
                        self.delivered(m.lsn, attempts, m.event.received_at_ms, facts, now);
                        crate::wal::shelf::give(m.event);
                    }
                }
            }
            Class::Permanent => {
                let attempts = job.attempt;
                let why = describe(&result, uri);
                let reason = DlqReason::PermanentFailure;
                self.dead_letter(job, reason, attempts, why, Some(facts), now);
            }
            Class::Retryable { .. } if self.dest(d).state.holds() => {
                // `on_open = "hold"`: the outage is not the event's failure. Back to the head
                // of the queue, attempt count unchanged; the gate waits for the probe.
                self.metrics.circuit_held();
                self.dest(d).queue.push_front(job);
            }
            Class::Retryable { .. } if opened => {
                let attempts = job.attempt;
                let why = format!(
                    "destination circuit opened for http:{uri} after {} consecutive failures: {}",
                    config.destinations[d].circuit.failures,
                    describe(&result, uri)
                );
                self.dead_letter(job, DlqReason::CircuitOpen, attempts, why, Some(facts), now);
            }
            Class::Retryable { .. } => self.retry(d, job, describe(&result, uri), facts, now),
        }
        self.pump_dest(d, now);
    }

    /// Gives the attempt's permit back and tells the destination's state (circuit, pause,
    /// adaptive limit) and the metrics how it ended. Returns whether the circuit opened.
    fn feed_gate(
        &mut self,
        d: usize,
        permit: Permit,
        (class, key): (&Class, Option<u64>),
        result: &AttemptResult,
        started: u64,
        now: u64,
    ) -> bool {
        let in_flight_at_end = self.dest(d).state.in_flight();
        let events = self.dest(d).state.complete_for(permit, now, class, key);
        if let Some(sample) = adaptive_sample(result, now.saturating_sub(started)) {
            if let Some(limit) = self.dest(d).state.observe(now, in_flight_at_end, sample) {
                self.metrics.set_permits(d, limit as u64);
            }
        }
        let mut opened = false;
        for e in events {
            match e {
                DestinationEvent::Circuit(Transition::Opened) => {
                    opened = true;
                    self.metrics.circuit_opened();
                }
                DestinationEvent::Circuit(Transition::Closed) => self.metrics.circuit_closed(),
                DestinationEvent::Paused { .. } => self.metrics.destination_paused(),
            }
        }
        let in_flight = self.dest(d).state.in_flight() as u64;
        self.metrics.set_in_flight(d, in_flight);
        self.metrics
            .attempt(d, class, result.is_tls_error(), now.saturating_sub(started));
        opened
    }

    /// A retryable failure: the next attempt is scheduled (and reported to the pumps, to be
    /// made durable) or, past the retry schedule, the job is dead-lettered.
    fn retry(
        &mut self,
        d: usize,
        mut job: Job,
        last_error: String,
        attempt: AttemptFacts,
        now: u64,
    ) {
        let next = job.attempt + 1;
        let policy = self.dest(d).policy;
        let Some(delay) = policy.delay_before(next, &mut self.rng) else {
            let (attempts, reason) = (job.attempt, DlqReason::RetryExhausted);
            self.dead_letter(job, reason, attempts, last_error, Some(attempt), now);
            return;
        };
        let due = now + delay.as_nanos() as u64;
        let due_at_ms = self.clock.unix_millis() + delay.as_millis() as u64;
        job.attempt = next;
        for lsn in job.lsns() {
            self.send(JobOutcome::RetryScheduled {
                lsn,
                next_attempt: next,
                due_at_ms,
                last_error: last_error.clone(),
                attempt: attempt.clone(),
            });
        }
        // A batched call is retried whole: the same carrier, id and members.
        let call = self.dest(d).batcher.is_some() && !job.batch.is_empty();
        self.delay(job, due, call);
    }

    fn delivered(
        &mut self,
        lsn: u64,
        attempts: u32,
        received_at_ms: u64,
        attempt: AttemptFacts,
        now: u64,
    ) {
        self.send(JobOutcome::Delivered {
            lsn,
            attempts,
            received_at_ms,
            attempt,
        });
        self.release_flow(lsn, now);
    }

    /// Terminal failure of `job` (every member of a batch gets its own DLQ entry).
    fn dead_letter(
        &mut self,
        job: Job,
        reason: DlqReason,
        attempts: u32,
        last_error: String,
        attempt: Option<AttemptFacts>,
        now: u64,
    ) {
        self.held -= job.events();
        for m in job.into_members() {
            // Its DLQ entry's id is its event id (an `ordering` key may stop on it).
            let mut out = FlowOut::default();
            self.flow.dead_lettered(m.lsn, &m.event.event_id, &mut out);
            self.send(JobOutcome::DeadLetter {
                job: Box::new(m),
                reason,
                attempts,
                last_error: last_error.clone(),
                attempt: attempt.clone(),
            });
            self.apply_flow(out, now);
        }
    }

    fn send(&mut self, o: JobOutcome) {
        self.outbox.push_back(o);
    }

    /// The outcomes reported since the last call, for the core's loop to route to the pumps
    /// (drained in place: the outbox keeps its capacity from turn to turn).
    pub fn take_outcomes(&mut self) -> std::collections::vec_deque::Drain<'_, JobOutcome> {
        self.outbox.drain(..)
    }
}

#[cfg(test)]
mod tests;

mod gates;
mod slot_wait;
use slot_wait::SlotWait;
