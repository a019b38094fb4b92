//! The durable-queue bound: committed-but-not-done events, counted in events and bytes, in
//! per-trigger shares plus a common pool (the arithmetic is [`crate::ingest::shares`]).
//!
//! Ingest *reserves* an event's room before offering it to the WAL (so the bound holds for
//! events in flight to the disk too), in its trigger's slot ([`Backlog::reserve_for`]): from the
//! trigger's guaranteed share (`[[triggers]] max_pending`, default: an equal part of half the
//! bound) while it has room, else borrowed from the common pool while *it* has room. It gives the
//! room back if the append fails; the pump gives it back once the event's outcome is durable
//! ([`Backlog::release_done`], borrowed first, so the pool frees up for everyone). A trigger past
//! its share with the pool in use is refused `503 queue_full`, its `Retry-After` from its own
//! drain rate; the other triggers keep their shares. Events recovered from the WAL at start-up
//! are counted in their own slot, borrowed from the pool (past its size if need be).
//!
//! `/readyz` reports `saturated` ([`Backlog::is_saturated`]) only when the node as a whole
//! cannot accept: its *fill* is the smaller of (the pool's fill) and (the share fill that more
//! than half of the slots reach — the triggers, plus the default route when it has a share), taking
//! the fuller of events and bytes for each; `saturated` from `fill ≥ high`, off again only
//! below `low` (hysteresis, evaluated when asked).
//!
//! The events and bytes are separate counters, so a reservation is "events first, then bytes,
//! undo on failure": concurrent reservers can each see the other's tentative bytes and both
//! refuse when one of them alone would have fit. That errs towards refusing, never past a bound.
//!
//! # Absorbing triggers (senders that never retry)
//!
//! A trigger with `when_backlog_full = "absorb"` ([`WhenFull::Absorb`]; the default for
//! `verify = "github"`: GitHub does not redeliver a failed delivery) reserves as usual while its
//! share and the pool allow; past them its events draw on an *absorb budget* of
//! `absorb_max_bytes`: a reservation is *absorbed* (counted per trigger,
//! `sluice_ingest_absorbed_total{trigger}`, and in the trigger's own share, past its size) when
//! the budget in use plus its bytes stays within `absorb_max_bytes`, and refused (`queue_full`)
//! past it. Which pending events were absorbed is not tracked: every release drains the budget
//! first (saturating at 0), so the budget in use is at most the absorbed bytes still pending.
//!
//! Bounds: shares + pool = the bound; the bytes of normal reservations never pass
//! `max_pending_bytes` (+ one event: a single event larger than its trigger's share plus the
//! whole pool is admitted while the pool is empty) and the budget never passes `absorb_max_bytes`, so pending bytes stay
//! within `max_pending_bytes + absorb_max_bytes` (+ one event), and pending events within
//! `max_pending_events + absorb_max_bytes / c`, `c` being the least an event costs (its record
//! header and ids: over 60 bytes), plus the events recovered at start-up. The budget in use is
//! `sluice_ingest_absorb_bytes`; per trigger `sluice_backlog_events{trigger}` /
//! `sluice_backlog_bytes{trigger}`; the pool `sluice_backlog_pool_events` / `_bytes`.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64 as StdAtomicU64;

// Through the shim: the bounds are modelled with loom (`loom-tests/tests/backlog.rs`).
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::ingest::respond::Refusal;
use crate::ingest::shares::{split_slots, ShareDim, Split};
pub use crate::ingest::spec::DefaultRoute;
use crate::ingest::spec::TriggerSpec;
pub use crate::ingest::spec::WhenFull;
use crate::sync::CachePadded;

/// `counter -= n`, stopping at 0.
fn sub_saturating(counter: &AtomicU64, n: u64) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
        Some(c.saturating_sub(n))
    });
}

/// Ids of the triggers whose events absorb (for [`Backlog::with_absorb`]).
pub fn absorbing_triggers(triggers: &[TriggerSpec]) -> Vec<&str> {
    triggers
        .iter()
        .filter(|t| t.when_backlog_full == WhenFull::Absorb)
        .map(|t| t.id.as_str())
        .collect()
}

/// One trigger's explicit share (`[[triggers]] max_pending`; `None`: the default share).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TriggerShare<'a> {
    pub id: &'a str,
    pub events: Option<u64>,
    pub bytes: Option<u64>,
}

/// The configured triggers' shares (for [`Backlog::with_triggers`]).
pub fn trigger_shares(triggers: &[TriggerSpec]) -> Vec<TriggerShare<'_>> {
    triggers
        .iter()
        .map(|t| TriggerShare {
            id: &t.id,
            events: t.max_pending.events,
            bytes: t.max_pending.bytes,
        })
        .collect()
}

/// Label of the default route's slot (the built-in trigger id).
const DEFAULT_SLOT: &str = crate::ingest::router::DEFAULT_TRIGGER_ID;
/// Label of the slot of the events recovered at start-up.
const RECOVERED_SLOT: &str = "_recovered";

/// How a reservation fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    /// Within the trigger's share or the pool.
    Within,
    /// Past them, within the absorb budget.
    Absorbed,
}

/// Per-slot counters that are metrics, not bounds (`std` atomics, bypassing the loom shim as
/// `crate::metrics` does; `Relaxed`). Padded per slot: each is written by that slot's refusals
/// and releases only.
#[derive(Debug, Default)]
struct SlotStats {
    absorbed: StdAtomicU64,
    /// Events made done (released by the pump), since start.
    drained: StdAtomicU64,
    /// `drained` at the last drain-rate update (core 0's pump only).
    drained_at_update: StdAtomicU64,
    /// Events made done per second (EWMA) × 1000.
    rate_milli: StdAtomicU64,
    refusals: [StdAtomicU64; Refusal::COUNT],
}

/// The totals over all slots (gauges; the bounds are the shares' and the pool's). Written by
/// every reservation (any core's ingest) and every release (any core's pump).
#[derive(Debug)]
struct Totals {
    events: AtomicU64,
    bytes: AtomicU64,
}

/// Written by the pumps (once per batch or per measurement), read by ingest (`wal_full`,
/// `Retry-After`). `Relaxed`: each is its own message.
#[derive(Debug)]
struct PumpShared {
    /// Bytes of WAL segments on disk (measured by the pumps every few seconds).
    wal_bytes: AtomicU64,
    /// Events made done per second (EWMA), × 1000; written by core 0's pump once per second.
    drain_rate_milli: AtomicU64,
    /// Events made done since start, summed over the cores' pumps (a counter), and its value
    /// at the last drain-rate update (written by core 0's pump only).
    drained_total: AtomicU64,
    drained_at_update: AtomicU64,
}

/// Metrics-like counters of the pumps (`std` atomics, `Relaxed`).
#[derive(Debug, Default)]
struct PumpStats {
    /// Events given back to the pool by done releases, since start, and the pool's drain rate
    /// (written by the pumps / core 0's pump).
    pool_drained: StdAtomicU64,
    pool_drained_at_update: StdAtomicU64,
    pool_rate_milli: StdAtomicU64,
}

/// Shared by all workers (reserve) and the pumps (release, drain rate).
///
/// Layout: the fields set at construction (bounds, slot names and map) are read on every
/// reservation and never written after; every group of atomics written at run time sits on
/// cache lines of its own ([`CachePadded`]), grouped by who writes it: the totals (every
/// reservation and release), the absorb budget, readiness, the pumps' measurements, the
/// pumps' counters, each slot's statistics — and, in [`ShareDim`], each slot's share
/// counters and the pool. So no write invalidates the line a reservation only reads.
#[derive(Debug)]
pub struct Backlog {
    max_events: u64,
    max_bytes: u64,
    high: f64,
    low: f64,
    max_wal_bytes: u64,
    /// The absorb budget: bytes absorbing triggers may reserve past the normal bounds.
    absorb_max_bytes: u64,
    // All `Relaxed`: each counter is its own message (no other memory is published through it),
    // and each bound is enforced by the CAS / fetch_add on its own counter.
    totals: CachePadded<Totals>,
    share_events: ShareDim,
    share_bytes: ShareDim,
    /// Trigger id → slot; slots `0..triggers` are the configured triggers, then the default
    /// route's, then the recovered events'.
    slot_of: HashMap<String, usize>,
    names: Vec<String>,
    /// Slots counted in the readiness median (the triggers, and the default route when it has a share).
    ready_slots: usize,
    absorbing: Vec<bool>,
    stats: Vec<CachePadded<SlotStats>>,
    /// `/readyz`'s hysteresis state (written by whoever asks).
    saturated: CachePadded<AtomicBool>,
    /// The pumps' measurements (ingest reads them).
    pumps: CachePadded<PumpShared>,
    pump_stats: CachePadded<PumpStats>,
    /// The absorb budget in use (`Relaxed`, like the other counters).
    absorb_bytes: CachePadded<AtomicU64>,
    /// What the split was computed from (a reload's [`Backlog::resize_shares`] recomputes it):
    /// each trigger slot's explicit `max_pending` (events, bytes), the default route's state
    /// and the reserved fraction. Cold: read and written by reloads only (serialized).
    plan: std::sync::Mutex<SharePlan>,
}

/// The inputs of the split: each trigger slot's explicit `max_pending` (events, bytes), the
/// default route's state and the reserved fraction (a reload's `resize_shares` changes them).
#[derive(Debug, Clone, Default, PartialEq)]
struct SharePlan {
    events: Vec<Option<u64>>,
    bytes: Vec<Option<u64>>,
    default_route: DefaultRoute,
    reserved: f64,
}

/// Most seconds a `queue_full` refusal asks the client to wait.
pub const MAX_RETRY_AFTER_SECS: u64 = 60;

/// `ceil(excess / rate)` seconds, 1..=[`MAX_RETRY_AFTER_SECS`] (the maximum when nothing drains).
fn retry_after(excess: u64, rate: f64) -> u64 {
    if rate <= 0.0 {
        return MAX_RETRY_AFTER_SECS;
    }
    ((excess.max(1) as f64 / rate).ceil() as u64).clamp(1, MAX_RETRY_AFTER_SECS)
}

fn ewma(old_milli: u64, sample: f64) -> u64 {
    let old = old_milli as f64 / 1000.0;
    let v = if old == 0.0 {
        sample
    } else {
        0.7 * old + 0.3 * sample
    };
    (v * 1000.0) as u64
}

impl Backlog {
    /// A backlog without configured triggers (the default route without a share: the whole bound is the pool).
    pub fn new(max_events: u64, max_bytes: u64, high: f64, low: f64) -> Backlog {
        Backlog::with_wal_limit(max_events, max_bytes, high, low, u64::MAX)
    }

    /// As [`Backlog::new`], with the disk bound: ingest refuses (`wal_full`) once the segments
    /// on disk plus one more segment (`headroom`) would pass `max_wal_bytes`.
    pub fn with_wal_limit(
        max_events: u64,
        max_bytes: u64,
        high: f64,
        low: f64,
        max_wal_bytes: u64,
    ) -> Backlog {
        let max_events = max_events.max(1);
        let max_bytes = max_bytes.max(1);
        let mut b = Backlog {
            max_wal_bytes,
            max_events,
            max_bytes,
            high,
            low,
            absorb_max_bytes: 0,
            totals: CachePadded::new(Totals {
                events: AtomicU64::new(0),
                bytes: AtomicU64::new(0),
            }),
            share_events: ShareDim::new(Split {
                shares: vec![],
                pool: 0,
            }),
            share_bytes: ShareDim::new(Split {
                shares: vec![],
                pool: 0,
            }),
            slot_of: HashMap::new(),
            names: Vec::new(),
            ready_slots: 0,
            absorbing: Vec::new(),
            stats: Vec::new(),
            saturated: CachePadded::new(AtomicBool::new(false)),
            pumps: CachePadded::new(PumpShared {
                wal_bytes: AtomicU64::new(0),
                drain_rate_milli: AtomicU64::new(0),
                drained_total: AtomicU64::new(0),
                drained_at_update: AtomicU64::new(0),
            }),
            pump_stats: CachePadded::default(),
            absorb_bytes: CachePadded::new(AtomicU64::new(0)),
            plan: Default::default(),
        };
        b.set_slots(&[], true.into(), crate::ingest::shares::DEFAULT_RESERVED)
            .expect("no explicit share cannot pass the bound");
        b
    }

    /// Gives each trigger its slot and share (module docs, [`crate::ingest::shares`]); the
    /// default route's slot has a share, and counts for readiness, only when it is on and given
    /// one ([`DefaultRoute`]; else it borrows from the pool only). Call before
    /// [`Backlog::with_absorb`] and before any reservation. `Err` names the dimension whose
    /// explicit shares pass the bound (the config validates this first).
    pub fn with_triggers(
        mut self,
        triggers: &[TriggerShare<'_>],
        default_route: impl Into<DefaultRoute>,
        reserved_fraction: f64,
    ) -> Result<Backlog, String> {
        self.set_slots(triggers, default_route.into(), reserved_fraction)?;
        Ok(self)
    }

    fn set_slots(
        &mut self,
        triggers: &[TriggerShare<'_>],
        default_route: DefaultRoute,
        reserved: f64,
    ) -> Result<(), String> {
        // Off, it has no share whatever it was given (the config refuses that combination).
        let default_route = DefaultRoute {
            share: default_route.share.filter(|_| default_route.on),
            ..default_route
        };
        let plan = SharePlan {
            events: triggers.iter().map(|t| t.events).collect(),
            bytes: triggers.iter().map(|t| t.bytes).collect(),
            default_route,
            reserved,
        };
        let (events, bytes) = self.split_plan(&plan)?;
        self.share_events = ShareDim::new(events);
        self.share_bytes = ShareDim::new(bytes);
        *self.plan.get_mut().unwrap_or_else(|p| p.into_inner()) = plan;
        self.names = triggers.iter().map(|t| t.id.to_owned()).collect();
        self.names.push(DEFAULT_SLOT.to_owned());
        self.names.push(RECOVERED_SLOT.to_owned());
        self.slot_of = triggers
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id.to_owned(), i))
            .collect();
        self.ready_slots = triggers.len() + usize::from(default_route.share.is_some());
        self.absorbing = vec![false; self.names.len()];
        self.stats = (0..self.names.len())
            .map(|_| CachePadded::new(SlotStats::default()))
            .collect();
        Ok(())
    }

    /// The (events, bytes) splits of `plan`: one share per trigger slot, the default route's,
    /// 0 for the recovered slot (borrowed only), and the pool.
    fn split_plan(&self, plan: &SharePlan) -> Result<(Split, Split), String> {
        let d = plan.default_route;
        let split_of = |max: u64, explicit: &[Option<u64>], default, what: &str| {
            split_slots(max, explicit, default, plan.reserved).map_err(|sum| {
                format!("the triggers' max_pending.{what} sum to {sum}, past max_pending_{what} = {max}")
            })
        };
        Ok((
            split_of(
                self.max_events,
                &plan.events,
                d.share.map(|s| s.0),
                "events",
            )?,
            split_of(self.max_bytes, &plan.bytes, d.share.map(|s| s.1), "bytes")?,
        ))
    }

    /// Lets the triggers `absorbing` fill `absorb_max_bytes` past their share and the pool
    /// (module docs). Ids without a slot (not given to [`Backlog::with_triggers`]) are ignored.
    pub fn with_absorb(mut self, absorb_max_bytes: u64, absorbing: &[&str]) -> Backlog {
        self.absorb_max_bytes = absorb_max_bytes;
        for id in absorbing {
            if let Some(&s) = self.slot_of.get(*id) {
                self.absorbing[s] = true;
            }
        }
        self
    }

    /// The slot of trigger `id`: its own, or the default route's for an id the config does not
    /// name (the default route, a replay of a trigger since removed).
    pub fn slot(&self, id: &str) -> usize {
        self.slot_of
            .get(id)
            .copied()
            .unwrap_or(self.names.len() - 2)
    }

    /// The slot of the events recovered at start-up.
    pub fn recovered_slot(&self) -> usize {
        self.names.len() - 1
    }

    /// Reserves room for one event of `bytes` of trigger `trigger_id`, by that trigger's
    /// [`WhenFull`] policy. `Err(retry_after_secs)` past its share with the pool in use.
    pub fn reserve_for(&self, trigger_id: &str, bytes: u64) -> Result<Reserved, u64> {
        self.reserve_slot(self.slot(trigger_id), bytes)
    }

    /// [`Backlog::reserve_for`] with the policy of the configuration generation the caller
    /// runs (`absorbs`: its `when_backlog_full` is `"absorb"`), which a reload may have changed
    /// or given to a trigger it added (whose events use the default route's slot, where they
    /// are counted, absorbed ones included).
    pub fn reserve_as(&self, trigger_id: &str, bytes: u64, absorbs: bool) -> Result<Reserved, u64> {
        self.reserve_in(self.slot(trigger_id), bytes, absorbs)
    }

    /// [`Backlog::reserve_for`] by slot.
    pub fn reserve_slot(&self, slot: usize, bytes: u64) -> Result<Reserved, u64> {
        self.reserve_in(
            slot,
            bytes,
            self.absorbing.get(slot).copied().unwrap_or(false),
        )
    }

    fn reserve_in(&self, slot: usize, bytes: u64, absorbs: bool) -> Result<Reserved, u64> {
        if self.try_take(slot, bytes) {
            return Ok(Reserved::Within);
        }
        if !absorbs {
            return Err(self.retry_after_secs_for(slot));
        }
        let before = self.absorb_bytes.fetch_add(bytes, Ordering::Relaxed);
        if before + bytes > self.absorb_max_bytes {
            sub_saturating(&self.absorb_bytes, bytes);
            return Err(self.retry_after_secs_for(slot));
        }
        self.share_events.force_own(slot, 1);
        self.share_bytes.force_own(slot, bytes);
        self.totals.events.fetch_add(1, Ordering::Relaxed);
        self.totals.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.stats[slot]
            .absorbed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Reserved::Absorbed)
    }

    /// One event of `bytes` into `slot`'s share or the pool; false (nothing left behind) if
    /// neither has room.
    fn try_take(&self, slot: usize, bytes: u64) -> bool {
        if self.share_events.take(slot, 1).is_none() {
            return false;
        }
        let could_never_fit =
            || bytes > self.share_bytes.share(slot) + self.share_bytes.pool_size();
        if self.share_bytes.take(slot, bytes).is_some()
            // A single event larger than its trigger's share and the whole pool is still
            // admitted while the pool is empty, one at a time (the body limit is the real bound
            // on it): without this it could never be accepted.
            || (could_never_fit() && self.share_bytes.force_if_pool_empty(slot, bytes))
        {
            self.totals.bytes.fetch_add(bytes, Ordering::Relaxed);
        } else {
            self.share_events.give(slot, 1);
            return false;
        }
        self.totals.events.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The absorb budget in use, bytes.
    pub fn absorb_bytes(&self) -> u64 {
        self.absorb_bytes.load(Ordering::Relaxed)
    }

    /// Events absorbed so far by trigger `id` (0 for a trigger that does not absorb).
    pub fn absorbed(&self, id: &str) -> u64 {
        self.slot_of.get(id).map_or(0, |&s| {
            self.stats[s]
                .absorbed
                .load(std::sync::atomic::Ordering::Relaxed)
        })
    }

    /// Counts events that were pending at start-up (recovered from the WAL) in the recovered
    /// slot, borrowed from the pool past its size if need be: the triggers keep their shares
    /// and borrow again once these drain. The pump releases them from that slot.
    pub fn preload(&self, events: u64, bytes: u64) {
        let slot = self.recovered_slot();
        self.share_events.force_pool(slot, events);
        self.share_bytes.force_pool(slot, bytes);
        self.totals.events.fetch_add(events, Ordering::Relaxed);
        self.totals.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Gives back one event's reservation of trigger `trigger_id` (its append failed).
    pub fn release_for(&self, trigger_id: &str, bytes: u64) {
        self.release_slot(self.slot(trigger_id), 1, bytes);
    }

    /// Gives back `events` reservations of `slot` totalling `bytes` that are now done (the
    /// pump): counted in the slot's drain rate.
    pub fn release_done(&self, slot: usize, events: u64, bytes: u64) {
        let to_pool = self.release_slot(slot, events, bytes);
        use std::sync::atomic::Ordering::Relaxed;
        self.stats[slot].drained.fetch_add(events, Relaxed);
        self.pump_stats.pool_drained.fetch_add(to_pool, Relaxed);
    }

    /// Gives back `events` reservations of `slot` totalling `bytes` (draining the absorb budget
    /// first, then the slot's borrowed, then its own share). Returns the events given back
    /// to the pool.
    pub fn release_slot(&self, slot: usize, events: u64, bytes: u64) -> u64 {
        if self.absorb_max_bytes > 0 {
            sub_saturating(&self.absorb_bytes, bytes);
        }
        let to_pool = self.share_events.give(slot, events);
        self.share_bytes.give(slot, bytes);
        sub_saturating(&self.totals.events, events);
        sub_saturating(&self.totals.bytes, bytes);
        to_pool
    }

    /// Counts a refusal of trigger `trigger_id`'s event for `reason`
    /// (`sluice_ingest_trigger_refusals_total`).
    pub fn count_refusal(&self, trigger_id: &str, reason: Refusal) {
        self.stats[self.slot(trigger_id)].refusals[reason as usize]
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Refusals of trigger `trigger_id`'s events for `reason` so far.
    pub fn refusals(&self, trigger_id: &str, reason: Refusal) -> u64 {
        self.stats[self.slot(trigger_id)].refusals[reason as usize]
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The node's fill (module docs): min(pool fill, the share fill more than half of the
    /// readiness slots reach), each the fuller of events and bytes.
    pub fn node_fill(&self) -> f64 {
        let pool = self
            .share_events
            .pool_fill()
            .max(self.share_bytes.pool_fill());
        if self.ready_slots == 0 {
            return pool;
        }
        let mut fills: Vec<f64> = (0..self.ready_slots)
            .map(|s| {
                self.share_events
                    .share_fill(s)
                    .max(self.share_bytes.share_fill(s))
            })
            .collect();
        fills.sort_by(|a, b| b.total_cmp(a));
        pool.min(fills[self.ready_slots / 2])
    }

    /// `/readyz` reports `saturated` while true: on at a node fill ≥ `high`, off below `low`.
    pub fn is_saturated(&self) -> bool {
        let fill = self.node_fill();
        if fill >= self.high {
            self.saturated.store(true, Ordering::Relaxed);
        } else if fill < self.low {
            self.saturated.store(false, Ordering::Relaxed);
        }
        self.saturated.load(Ordering::Relaxed)
    }

    /// True when trigger `id` has filled its own share (events or bytes).
    pub fn trigger_at_share(&self, id: &str) -> bool {
        let s = self.slot(id);
        self.share_events.share_fill(s) >= 1.0 || self.share_bytes.share_fill(s) >= 1.0
    }

    /// Events and bytes trigger `id` holds (its share and what it borrowed).
    pub fn trigger_pending(&self, id: &str) -> (u64, u64) {
        let s = self.slot(id);
        (self.share_events.used(s), self.share_bytes.used(s))
    }

    /// The pool in use: (events, bytes).
    pub fn pool_used(&self) -> (u64, u64) {
        (self.share_events.pool_used(), self.share_bytes.pool_used())
    }

    /// The pool's size: (events, bytes).
    pub fn pool_size(&self) -> (u64, u64) {
        (self.share_events.pool_size(), self.share_bytes.pool_size())
    }

    /// Trigger `id`'s guaranteed share: (events, bytes).
    pub fn share_of(&self, id: &str) -> (u64, u64) {
        let s = self.slot(id);
        (self.share_events.share(s), self.share_bytes.share(s))
    }

    /// The pump's latest measurement of the WAL's size on disk.
    pub fn set_wal_bytes(&self, bytes: u64) {
        self.pumps.wal_bytes.store(bytes, Ordering::Relaxed);
    }

    pub fn wal_bytes(&self) -> u64 {
        self.pumps.wal_bytes.load(Ordering::Relaxed)
    }

    /// True when one more segment of `segment_bytes` would pass `max_wal_bytes`.
    pub fn wal_full(&self, segment_bytes: u64) -> bool {
        self.wal_bytes().saturating_add(segment_bytes) > self.max_wal_bytes
    }

    pub fn pending_events(&self) -> u64 {
        self.totals.events.load(Ordering::Relaxed)
    }

    pub fn pending_bytes(&self) -> u64 {
        self.totals.bytes.load(Ordering::Relaxed)
    }

    /// The pump reports how many events it made done over the last `elapsed_secs`.
    pub fn record_drained(&self, done: u64, elapsed_secs: f64) {
        if elapsed_secs <= 0.0 {
            return;
        }
        let old = self.pumps.drain_rate_milli.load(Ordering::Relaxed);
        self.pumps
            .drain_rate_milli
            .store(ewma(old, done as f64 / elapsed_secs), Ordering::Relaxed);
    }

    /// A core's pump made `n` more events done.
    pub fn note_drained(&self, n: u64) {
        self.pumps.drained_total.fetch_add(n, Ordering::Relaxed);
    }

    /// Folds the events made done since the last call, over `elapsed_secs`, into the drain
    /// rates (the node's and each trigger's). Called once a second by one pump (core 0's).
    pub fn update_drain_rate(&self, elapsed_secs: f64) {
        let total = self.pumps.drained_total.load(Ordering::Relaxed);
        let last = self.pumps.drained_at_update.swap(total, Ordering::Relaxed);
        self.record_drained(total.saturating_sub(last), elapsed_secs);
        if elapsed_secs <= 0.0 {
            return;
        }
        use std::sync::atomic::Ordering::Relaxed;
        let total = self.pump_stats.pool_drained.load(Relaxed);
        let last = self.pump_stats.pool_drained_at_update.swap(total, Relaxed);
        let sample = total.saturating_sub(last) as f64 / elapsed_secs;
        let old = self.pump_stats.pool_rate_milli.load(Relaxed);
        self.pump_stats
            .pool_rate_milli
            .store(ewma(old, sample), Relaxed);
        for st in &self.stats {
            let total = st.drained.load(Relaxed);
            let last = st.drained_at_update.swap(total, Relaxed);
            let sample = total.saturating_sub(last) as f64 / elapsed_secs;
            st.rate_milli
                .store(ewma(st.rate_milli.load(Relaxed), sample), Relaxed);
        }
    }

    /// A pump measured one of its logs at `new` bytes on disk, `old` at its last measurement.
    pub fn adjust_wal_bytes(&self, old: u64, new: u64) {
        if new >= old {
            self.pumps.wal_bytes.fetch_add(new - old, Ordering::Relaxed);
        } else {
            self.pumps.wal_bytes.fetch_sub(old - new, Ordering::Relaxed);
        }
    }

    /// Events per second the pumps have been making done (EWMA).
    pub fn drain_rate(&self) -> f64 {
        self.pumps.drain_rate_milli.load(Ordering::Relaxed) as f64 / 1000.0
    }

    /// The room per second that comes back to trigger `id` (EWMAs): its own events made done
    /// (its share frees up) plus the events given back to the common pool by every trigger
    /// (the pool frees up). What its `queue_full` refusals are promised
    /// (`ReturnSchedule::queue_full`).
    pub fn drain_rate_of(&self, id: &str) -> f64 {
        self.room_rate(self.slot(id))
    }

    fn room_rate(&self, slot: usize) -> f64 {
        use std::sync::atomic::Ordering::Relaxed;
        let own = self.stats[slot].rate_milli.load(Relaxed);
        (own + self.pump_stats.pool_rate_milli.load(Relaxed)) as f64 / 1000.0
    }

    /// Seconds until the node's backlog should have drained below the low-water mark at the
    /// measured rate (`wal_full` refusals): `ceil(excess / rate)`, 1..=[`MAX_RETRY_AFTER_SECS`].
    pub fn retry_after_secs(&self) -> u64 {
        let target = (self.max_events as f64 * self.low).floor() as u64;
        let excess = self.pending_events().saturating_sub(target);
        retry_after(excess, self.drain_rate())
    }

    /// As [`Backlog::retry_after_secs`] for one slot: until it holds less than `low ×` its share,
    /// at the rate room comes back to it ([`Backlog::drain_rate_of`]).
    fn retry_after_secs_for(&self, slot: usize) -> u64 {
        let target = (self.share_events.share(slot) as f64 * self.low).floor() as u64;
        let excess = self.share_events.used(slot).saturating_sub(target);
        retry_after(excess, self.room_rate(slot))
    }
}

// The files below add methods to `Backlog` and import this one; this one imports none of
// them (one way: `.ci/structure.py`).
mod resize;

mod render;

/// The dashboard's read-only view of each slot ([`view::SlotView`]).
pub mod view;

#[cfg(all(test, not(sluice_loom)))]
mod tests;
