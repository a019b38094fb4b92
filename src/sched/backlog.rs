//! The durable-queue bound: committed-but-not-done events, counted in events and bytes.
//!
//! Ingest *reserves* an event's share before offering it to the WAL (so the bound holds for
//! events in flight to the disk too) and gives it back if the append fails; the pump releases it
//! once the event's outcome is durable. Past either bound ingest answers `503 queue_full` with a
//! `Retry-After` estimated from the measured drain rate, and `/readyz` reports `saturated` with
//! hysteresis: on at `high × max_events` (or bytes), off again only below `low ×`.
//!
//! The two counters are separate atomics, so a reservation is "events first, then bytes, undo on
//! failure": concurrent reservers can each see the other's tentative bytes and both refuse when
//! one of them alone would have fit. That errs towards refusing, never past the bound.
//!
//! # Absorbing triggers (senders that never retry)
//!
//! A trigger with `when_backlog_full = "absorb"` ([`WhenFull::Absorb`]; the default for
//! `verify = "github"`: GitHub does not redeliver a failed delivery) reserves as usual while the
//! normal bounds allow; past them ([`Backlog::try_reserve_absorbing`]) its events draw on an
//! *absorb budget* of `absorb_max_bytes`: a reservation is *absorbed* (counted per trigger,
//! `sluice_ingest_absorbed_total{trigger}`) when the budget in use plus its bytes stays within
//! `absorb_max_bytes`, and refused (`queue_full`, as today) past it. Which pending events were
//! absorbed is not tracked: every release drains the budget first (saturating at 0), so the
//! budget in use is at most the absorbed bytes still pending. Both kinds share the event and
//! byte counters, so while absorbing triggers hold the backlog above the normal bounds every
//! `refuse` trigger gets `queue_full`.
//!
//! Bounds: the bytes reserved by normal reservations never pass `max_pending_bytes` (+ one
//! event) and the budget never passes `absorb_max_bytes`, so pending bytes stay within
//! `max_pending_bytes + absorb_max_bytes` (+ one event), and pending events within
//! `max_pending_events + absorb_max_bytes / c`, `c` being the least an event costs (its record
//! header and ids: over 60 bytes). The budget in use is `sluice_ingest_absorb_bytes`.

use std::collections::HashMap;

// Through the shim: the bounds are modelled with loom (`loom-tests/tests/backlog.rs`).
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::metrics::prom::{MetricType, PromWriter};

/// What a trigger's events do when the durable backlog is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// `503 queue_full` with `Retry-After` (the sender retries).
    Refuse,
    /// Keep accepting into the WAL up to `absorb_max_bytes` more (the sender never retries).
    Absorb,
}

impl WhenFull {
    /// Parses the manifest value `"refuse"` | `"absorb"`.
    pub fn parse(text: &str) -> Option<WhenFull> {
        match text {
            "refuse" => Some(WhenFull::Refuse),
            "absorb" => Some(WhenFull::Absorb),
            _ => None,
        }
    }
}

/// `counter -= n`, stopping at 0.
fn sub_saturating(counter: &AtomicU64, n: u64) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
        Some(c.saturating_sub(n))
    });
}

/// Ids of the triggers whose events absorb (for [`Backlog::with_absorb`]).
pub fn absorbing_triggers(triggers: &[crate::config::TriggerConfig]) -> Vec<&str> {
    triggers
        .iter()
        .filter(|t| t.when_backlog_full == WhenFull::Absorb)
        .map(|t| t.id.as_str())
        .collect()
}

/// How a reservation fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    /// Within `max_pending_events` / `max_pending_bytes`.
    Within,
    /// Past them, within the absorbing ceiling.
    Absorbed,
}

/// Shared by all workers (reserve) and the pump (release, drain rate).
#[derive(Debug)]
pub struct Backlog {
    max_events: u64,
    max_bytes: u64,
    high: f64,
    low: f64,
    // All `Relaxed`: each counter is its own message (no other memory is published through it),
    // and the bound is enforced by the CAS / fetch_add on the counter itself.
    events: AtomicU64,
    bytes: AtomicU64,
    saturated: AtomicBool,
    /// Events made done per second (EWMA), × 1000; written by the pump once per second.
    drain_rate_milli: AtomicU64,
    /// Bytes of WAL segments on disk (measured by the pump every few seconds) and the bound
    /// past which ingest refuses with `wal_full`.
    wal_bytes: AtomicU64,
    max_wal_bytes: u64,
    /// Events made done since start, summed over the cores' pumps (`Relaxed`: a counter), and
    /// its value at the last drain-rate update (written by core 0's pump only).
    drained_total: AtomicU64,
    drained_at_update: AtomicU64,
    /// The absorb budget: bytes absorbing triggers may reserve past the normal bounds.
    absorb_max_bytes: u64,
    /// The budget in use (`Relaxed`, like the other counters).
    absorb_bytes: AtomicU64,
    /// Absorbing trigger id → its index in `absorbed` (empty: no absorbing trigger).
    absorbing: HashMap<String, usize>,
    /// Events absorbed, per absorbing trigger (`Relaxed`; metrics counters, `std` atomics
    /// bypassing the shim as `crate::metrics` does).
    absorbed: Vec<(String, std::sync::atomic::AtomicU64)>,
}

/// Most seconds a `queue_full` refusal asks the client to wait.
pub const MAX_RETRY_AFTER_SECS: u64 = 60;

impl Backlog {
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
        Backlog {
            wal_bytes: AtomicU64::new(0),
            max_wal_bytes,
            max_events: max_events.max(1),
            max_bytes: max_bytes.max(1),
            high,
            low,
            events: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            saturated: AtomicBool::new(false),
            drain_rate_milli: AtomicU64::new(0),
            drained_total: AtomicU64::new(0),
            drained_at_update: AtomicU64::new(0),
            absorb_max_bytes: 0,
            absorb_bytes: AtomicU64::new(0),
            absorbing: HashMap::new(),
            absorbed: Vec::new(),
        }
    }

    /// Lets the triggers `absorbing` fill `absorb_max_bytes` past the byte bound (and past the
    /// event bound while bytes allow); see the module docs.
    pub fn with_absorb(mut self, absorb_max_bytes: u64, absorbing: &[&str]) -> Backlog {
        self.absorb_max_bytes = absorb_max_bytes;
        for id in absorbing {
            let i = self.absorbed.len();
            self.absorbing.insert((*id).to_owned(), i);
            self.absorbed
                .push(((*id).to_owned(), std::sync::atomic::AtomicU64::new(0)));
        }
        self
    }

    /// Reserves room for one event of `bytes` of trigger `trigger_id`, by that trigger's
    /// [`WhenFull`] policy. `Err(retry_after_secs)` past its bound.
    pub fn reserve_for(&self, trigger_id: &str, bytes: u64) -> Result<Reserved, u64> {
        let slot = match self.absorbing.is_empty() {
            true => None,
            false => self.absorbing.get(trigger_id).copied(),
        };
        let Some(slot) = slot else {
            return self.try_reserve(bytes).map(|()| Reserved::Within);
        };
        let r = self.try_reserve_absorbing(bytes)?;
        if r == Reserved::Absorbed {
            self.absorbed[slot]
                .1
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(r)
    }

    /// A reservation for an absorbing trigger: within the normal bounds if they allow, else
    /// from the absorb budget (module docs). `Err(retry_after_secs)` past both.
    pub fn try_reserve_absorbing(&self, bytes: u64) -> Result<Reserved, u64> {
        if self.try_reserve(bytes).is_ok() {
            return Ok(Reserved::Within);
        }
        let before = self.absorb_bytes.fetch_add(bytes, Ordering::Relaxed);
        if before + bytes > self.absorb_max_bytes {
            sub_saturating(&self.absorb_bytes, bytes);
            return Err(self.retry_after_secs());
        }
        self.events.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.update_saturation();
        Ok(Reserved::Absorbed)
    }

    /// The absorb budget in use, bytes.
    pub fn absorb_bytes(&self) -> u64 {
        self.absorb_bytes.load(Ordering::Relaxed)
    }

    /// Events absorbed so far by trigger `id` (0 for a trigger that does not absorb).
    pub fn absorbed(&self, id: &str) -> u64 {
        self.absorbing.get(id).map_or(0, |&i| {
            self.absorbed[i]
                .1
                .load(std::sync::atomic::Ordering::Relaxed)
        })
    }

    /// `sluice_ingest_absorbed_total{trigger}`, one sample per absorbing trigger.
    pub fn render_prometheus(&self, w: &mut PromWriter) {
        const NAME: &str = "sluice_ingest_absorbed_total";
        w.header(
            NAME,
            "Events accepted past max_pending_events/max_pending_bytes by triggers with \
             when_backlog_full = \"absorb\", by trigger.",
            MetricType::Counter,
        );
        for (id, n) in &self.absorbed {
            let n = n.load(std::sync::atomic::Ordering::Relaxed);
            w.sample_u64(NAME, &[("trigger", id)], n);
        }
        const BUDGET: &str = "sluice_ingest_absorb_bytes";
        w.header(
            BUDGET,
            "Bytes of the absorb budget (dispatch.absorb_max_bytes) in use.",
            MetricType::Gauge,
        );
        w.sample_u64(BUDGET, &[], self.absorb_bytes());
    }

    /// Counts events that were pending at start-up (recovered from the WAL). They may exceed
    /// the bound (a smaller bound than before a restart); ingest then refuses until they drain.
    pub fn preload(&self, events: u64, bytes: u64) {
        self.events.fetch_add(events, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.update_saturation();
    }

    /// Reserves room for one event of `bytes`. `Err(retry_after_secs)` past either bound.
    pub fn try_reserve(&self, bytes: u64) -> Result<(), u64> {
        let mut cur = self.events.load(Ordering::Relaxed);
        loop {
            if cur >= self.max_events {
                return Err(self.retry_after_secs());
            }
            match self.events.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        let before = self.bytes.fetch_add(bytes, Ordering::Relaxed);
        if before + bytes > self.max_bytes && before > 0 {
            // A single event larger than the whole byte bound is still admitted when the queue
            // is empty (the body limit is the real bound on it); otherwise refuse. Undone
            // without touching the absorb budget: nothing pending was released.
            self.undo(bytes);
            return Err(self.retry_after_secs());
        }
        self.update_saturation();
        Ok(())
    }

    /// Gives back one event's reservation (append failed, or the event is done).
    pub fn release(&self, bytes: u64) {
        self.release_many(1, bytes);
    }

    /// Gives back `events` reservations totalling `bytes` (draining the absorb budget first).
    pub fn release_many(&self, events: u64, bytes: u64) {
        if self.absorb_max_bytes > 0 {
            sub_saturating(&self.absorb_bytes, bytes);
        }
        self.take_back(events, bytes);
    }

    /// Undoes this thread's own tentative reservation of one event of `bytes`.
    fn undo(&self, bytes: u64) {
        self.take_back(1, bytes);
    }

    fn take_back(&self, events: u64, bytes: u64) {
        let _ = self
            .events
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |e| {
                Some(e.saturating_sub(events))
            });
        let _ = self
            .bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some(b.saturating_sub(bytes))
            });
        self.update_saturation();
    }

    fn update_saturation(&self) {
        let e = self.events.load(Ordering::Relaxed) as f64 / self.max_events as f64;
        let b = self.bytes.load(Ordering::Relaxed) as f64 / self.max_bytes as f64;
        let fill = e.max(b);
        if fill >= self.high {
            self.saturated.store(true, Ordering::Relaxed);
        } else if fill < self.low {
            self.saturated.store(false, Ordering::Relaxed);
        }
    }

    /// The pump's latest measurement of the WAL's size on disk.
    pub fn set_wal_bytes(&self, bytes: u64) {
        self.wal_bytes.store(bytes, Ordering::Relaxed);
    }

    pub fn wal_bytes(&self) -> u64 {
        self.wal_bytes.load(Ordering::Relaxed)
    }

    /// True when one more segment of `segment_bytes` would pass `max_wal_bytes`.
    pub fn wal_full(&self, segment_bytes: u64) -> bool {
        self.wal_bytes().saturating_add(segment_bytes) > self.max_wal_bytes
    }

    /// `/readyz` reports `saturated` while true.
    pub fn is_saturated(&self) -> bool {
        self.saturated.load(Ordering::Relaxed)
    }

    pub fn pending_events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    pub fn pending_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The pump reports how many events it made done over the last `elapsed_secs`.
    pub fn record_drained(&self, done: u64, elapsed_secs: f64) {
        if elapsed_secs <= 0.0 {
            return;
        }
        let sample = done as f64 / elapsed_secs;
        let old = self.drain_rate_milli.load(Ordering::Relaxed) as f64 / 1000.0;
        let ewma = if old == 0.0 {
            sample
        } else {
            0.7 * old + 0.3 * sample
        };
        self.drain_rate_milli
            .store((ewma * 1000.0) as u64, Ordering::Relaxed);
    }

    /// A core's pump made `n` more events done.
    pub fn note_drained(&self, n: u64) {
        self.drained_total.fetch_add(n, Ordering::Relaxed);
    }

    /// Folds the events made done since the last call, over `elapsed_secs`, into the drain
    /// rate. Called once a second by one pump (core 0's) for all of them.
    pub fn update_drain_rate(&self, elapsed_secs: f64) {
        let total = self.drained_total.load(Ordering::Relaxed);
        let last = self.drained_at_update.swap(total, Ordering::Relaxed);
        self.record_drained(total.saturating_sub(last), elapsed_secs);
    }

    /// A pump measured one of its logs at `new` bytes on disk, `old` at its last measurement.
    pub fn adjust_wal_bytes(&self, old: u64, new: u64) {
        if new >= old {
            self.wal_bytes.fetch_add(new - old, Ordering::Relaxed);
        } else {
            self.wal_bytes.fetch_sub(old - new, Ordering::Relaxed);
        }
    }

    /// Events per second the pump has been making done (EWMA).
    pub fn drain_rate(&self) -> f64 {
        self.drain_rate_milli.load(Ordering::Relaxed) as f64 / 1000.0
    }

    /// Seconds until the backlog should have drained below the low-water mark at the measured
    /// rate: `ceil(excess / rate)`, at least 1, at most [`MAX_RETRY_AFTER_SECS`] (also when
    /// nothing drains at all).
    pub fn retry_after_secs(&self) -> u64 {
        let target = (self.max_events as f64 * self.low).floor() as u64;
        let excess = self
            .events
            .load(Ordering::Relaxed)
            .saturating_sub(target)
            .max(1);
        let rate = self.drain_rate();
        if rate <= 0.0 {
            return MAX_RETRY_AFTER_SECS;
        }
        ((excess as f64 / rate).ceil() as u64).clamp(1, MAX_RETRY_AFTER_SECS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_on_events_and_release() {
        let b = Backlog::new(3, 1 << 30, 0.9, 0.5);
        for _ in 0..3 {
            b.try_reserve(10).unwrap();
        }
        assert!(b.try_reserve(10).is_err());
        assert_eq!(b.pending_events(), 3);
        b.release(10);
        b.try_reserve(10).unwrap();
        assert_eq!(b.pending_bytes(), 30);
    }

    #[test]
    fn bound_on_bytes_undoes_the_event() {
        let b = Backlog::new(100, 100, 0.9, 0.5);
        b.try_reserve(60).unwrap();
        assert!(b.try_reserve(60).is_err());
        assert_eq!((b.pending_events(), b.pending_bytes()), (1, 60));
        // An oversized event alone is admitted on an empty queue.
        let empty = Backlog::new(100, 100, 0.9, 0.5);
        empty.try_reserve(500).unwrap();
    }

    #[test]
    fn saturation_has_hysteresis() {
        let b = Backlog::new(10, 1 << 30, 0.8, 0.5);
        for _ in 0..7 {
            b.try_reserve(1).unwrap();
        }
        assert!(!b.is_saturated());
        b.try_reserve(1).unwrap();
        assert!(b.is_saturated()); // 8/10 >= 0.8
        b.release_many(2, 2);
        assert!(b.is_saturated()); // 6/10: still above low
        b.release_many(2, 2);
        assert!(!b.is_saturated()); // 4/10 < 0.5
    }

    #[test]
    fn wal_full_leaves_room_for_one_segment() {
        let b = Backlog::with_wal_limit(10, 1 << 30, 0.9, 0.5, 100);
        b.set_wal_bytes(60);
        assert!(!b.wal_full(40));
        assert!(b.wal_full(41));
    }

    #[test]
    fn absorbing_triggers_fill_past_the_bounds_up_to_the_absorb_budget() {
        let b = Backlog::new(3, 1000, 0.9, 0.5).with_absorb(100, &["gh"]);
        for _ in 0..3 {
            assert_eq!(b.reserve_for("gh", 10), Ok(Reserved::Within));
        }
        // Past max_events: a refusing trigger is refused, the absorbing one absorbed.
        assert!(b.reserve_for("generic", 10).is_err());
        assert_eq!(b.reserve_for("gh", 10), Ok(Reserved::Absorbed));
        assert_eq!((b.absorbed("gh"), b.absorbed("generic")), (1, 0));
        // The budget: 100 bytes.
        for _ in 0..9 {
            assert_eq!(b.reserve_for("gh", 10), Ok(Reserved::Absorbed));
        }
        assert_eq!(b.absorb_bytes(), 100);
        assert_eq!((b.pending_events(), b.pending_bytes()), (13, 130));
        assert!(b.reserve_for("gh", 1).is_err(), "past the absorb budget");
        assert_eq!((b.pending_events(), b.pending_bytes()), (13, 130), "undone");
        assert_eq!(b.absorb_bytes(), 100);
        assert!(b.reserve_for("generic", 1).is_err());
        assert_eq!(b.absorbed("gh"), 10);
        assert!(b.is_saturated());
        // Releases drain the budget first.
        b.release_many(2, 20);
        assert_eq!(b.absorb_bytes(), 80);
        assert_eq!(b.reserve_for("gh", 20), Ok(Reserved::Absorbed));
        // Drained below the normal bounds: everyone is in again, the budget is free.
        b.release_many(12, 130);
        assert_eq!(b.absorb_bytes(), 0);
        assert_eq!(b.reserve_for("generic", 10), Ok(Reserved::Within));
        // The byte bound (events within theirs) absorbs the same way.
        let b = Backlog::new(100, 100, 0.9, 0.5).with_absorb(50, &["gh"]);
        assert_eq!(b.reserve_for("gh", 90), Ok(Reserved::Within));
        assert_eq!(b.reserve_for("gh", 20), Ok(Reserved::Absorbed));
        assert!(b.reserve_for("gh", 31).is_err());
        let mut w = PromWriter::new();
        b.render_prometheus(&mut w);
        for line in [
            "sluice_ingest_absorbed_total{trigger=\"gh\"} 1\n",
            "sluice_ingest_absorb_bytes 20\n",
        ] {
            assert!(w.as_str().contains(line), "{}", w.as_str());
        }
    }

    #[test]
    fn retry_after_follows_the_drain_rate() {
        let b = Backlog::new(100, 1 << 30, 0.9, 0.5);
        assert_eq!(b.retry_after_secs(), MAX_RETRY_AFTER_SECS); // nothing drains yet
        b.preload(100, 100);
        b.record_drained(10, 1.0);
        assert_eq!(b.retry_after_secs(), 5); // 50 over the low mark at 10/s
        b.record_drained(1000, 1.0);
        assert_eq!(b.retry_after_secs(), 1);
    }
}
