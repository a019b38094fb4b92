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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
        }
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
            // is empty (the body limit is the real bound on it); otherwise refuse.
            self.release(bytes);
            return Err(self.retry_after_secs());
        }
        self.update_saturation();
        Ok(())
    }

    /// Gives back one event's reservation (append failed, or the event is done).
    pub fn release(&self, bytes: u64) {
        self.release_many(1, bytes);
    }

    /// Gives back `events` reservations totalling `bytes`.
    pub fn release_many(&self, events: u64, bytes: u64) {
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
