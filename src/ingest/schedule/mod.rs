//! The return schedule: `Retry-After` handed out like tickets, so refused senders come back
//! spread over the seconds that will have room instead of all together.
//!
//! # Model
//! A refusal caused by a *rate* constraint has a known future room: the durable backlog
//! (`queue_full`) frees about `drain rate` events per second, the global token bucket
//! (`ingest_saturated`) refills `refill_per_sec` tokens per second. A [`SlotRing`] is a ring of
//! [`SLOTS`] one-second slots; the slot of second `s` (seconds on the injected clock's scale)
//! counts the returns promised for `s`. A refusal at second `n` takes the earliest second
//! `s ∈ [n + min, n + MAX_RETURN_SECS]` whose promised count is below the room of one second,
//! and answers `Retry-After: s − n`. When every slot up to the cap is full, the refusal is
//! spread round-robin over the last [`SPREAD_SECS`] seconds before the cap instead of piling on
//! one second (it is still counted there, so the gauges show the over-promise).
//!
//! A per-source bucket refusal is not put on a ring (a ring per source would cost 64 words per
//! source): the source's own [`SourcePromise`] word spaces its returns one emission interval
//! apart, GCRA-style (`next = max(now + wait, last promise + 1/refill)`), so a source's senders
//! are spread at exactly its refill rate. The promise is recorded on the global ring too (for
//! the gauges), since a returning request also takes a global token.
//!
//! What the ring does not see: first-time arrivals also use the room. Under a sustained
//! overload some promised returns are refused again; they then take a later slot (most often
//! one of the last window), so a sender honouring `Retry-After` is refused about once or twice,
//! not on every return.
//!
//! # Fairness
//! Every source has a [`SourcePromise`]: the latest return time promised to it. A refusal of a
//! request that arrives before that time is an *early return* (`sluice_ingest_early_returns_total
//! {source}`: the source ignored `Retry-After`, or sent new events while told to wait), and its
//! new slot is never earlier than the source's promise: ignoring the header buys nothing. The
//! one exception is the cap: no promise is later than `MAX_RETURN_SECS`, so a promise that would
//! be is spread over the last window like any other.
//!
//! # Bounds and cost
//! Memory: two rings of [`SLOTS`] cache-padded words (about 8 KiB each) plus one word and one
//! counter per source entry (bounded by `ingest.max_sources`, see [`crate::ingest::sources`]). The ring
//! never aliases: live seconds span at most `MAX_RETURN_SECS + 1 = 61 < 64` slots. A refusal is
//! a few atomic operations and no allocation: a load of the hint, one load + CAS per slot
//! visited (the hint skips slots known to be full), the source word's `fetch_max`.
//!
//! # Memory ordering
//! All `Relaxed`. Each slot word is its whole state (epoch second and count packed), publishes
//! no other memory, and is only changed by compare-and-swap: a CAS acts on the latest value in
//! the word's modification order, so two threads can never both turn `count = room − 1` into
//! `room` — the bound "promised ≤ room" holds per word without any ordering to other words.
//! The hint word and the spread counter are hints: a stale hint only makes a scan longer (see
//! [`SlotRing::take`] for why it never skips a slot with room). The source word is a
//! `fetch_max`/CAS on one location for the same reason as the slots.
#![forbid(unsafe_code)]

use crate::metrics::{Counter, MetricType, PromWriter};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::CachePadded;

use crate::ingest::bucket::{BucketKind, Exhausted};

const NANOS_PER_SEC: u64 = 1_000_000_000;
/// Slots in a ring: a power of two above `MAX_RETURN_SECS + 1`.
pub const SLOTS: usize = 64;
/// Latest return a refusal is ever told (seconds), as `backlog::MAX_RETRY_AFTER_SECS`.
pub const MAX_RETURN_SECS: u64 = crate::ingest::backlog::MAX_RETRY_AFTER_SECS;
/// Width of the last window refusals are spread over once every slot up to the cap is full.
pub const SPREAD_SECS: u64 = 15;
/// The gauge windows (inclusive upper bound of `s − now` in seconds) and their labels.
pub const WINDOWS: [(u64, &str); 4] = [(1, "0-1s"), (5, "1-5s"), (15, "5-15s"), (60, "15-60s")];

const _: () = assert!(SLOTS as u64 > MAX_RETURN_SECS + 1 && SPREAD_SECS <= MAX_RETURN_SECS);

const COUNT_BITS: u32 = 32;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// `epoch second << 32 | count`. Seconds since the clock's origin fit 32 bits for 136 years.
#[inline]
const fn pack(second: u64, count: u64) -> u64 {
    (second << COUNT_BITS) | (count & COUNT_MASK)
}

#[inline]
const fn unpack(word: u64) -> (u64, u64) {
    (word >> COUNT_BITS, word & COUNT_MASK)
}

/// A ring of future one-second slots counting promised returns (see the module docs).
pub struct SlotRing {
    /// Slot of second `s` is `slots[s % SLOTS]`: `pack(s, promised)`. A word holding an older
    /// second is stale (0 promised for `s`); a newer one means `s` is long past. Written by CAS
    /// from any worker, read by workers and the metrics scrape. `Relaxed`: module docs.
    slots: [CachePadded<AtomicU64>; SLOTS],
    /// `pack(s, room)`: every second from the earliest askable one (`now + 1`) up to `s − 1`
    /// was full for a room of `room` or less. A hint (plain stores, may regress).
    hint: CachePadded<AtomicU64>,
    /// Round-robin position in the last window; a hint for an even spread.
    spread: CachePadded<AtomicU64>,
}

impl std::fmt::Debug for SlotRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotRing").finish_non_exhaustive()
    }
}

impl Default for SlotRing {
    fn default() -> Self {
        SlotRing::new()
    }
}

impl SlotRing {
    pub fn new() -> Self {
        SlotRing {
            slots: std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
            hint: CachePadded::new(AtomicU64::new(0)),
            spread: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Promises one return at the earliest second in `[first, now_sec + MAX_RETURN_SECS]` with
    /// fewer than `room` promises; `None` when there is none (or `room` is 0).
    ///
    /// The hint (`s_h`, `r_h`) lets a scan start at `s_h` when it would start at or before it
    /// and `room ≤ r_h`: those seconds were full for `r_h`, counts of a second only grow while
    /// it is live, and a slot is only recycled for a second 64 s later, once the old second is
    /// past and no longer asked for. So the hint never skips a slot with room.
    pub fn take(&self, now_sec: u64, first: u64, room: u64) -> Option<u64> {
        let last = now_sec + MAX_RETURN_SECS;
        let room = room.min(COUNT_MASK);
        if room == 0 || first > last {
            return None;
        }
        // Relaxed: a hint, validated below against `room` and `now_sec`; pairs with no store.
        let (h_sec, h_room) = unpack(self.hint.load(Ordering::Relaxed));
        let base = if room <= h_room && h_sec > now_sec {
            h_sec
        } else {
            now_sec + 1
        };
        // Only a scan that starts at the known-full prefix's end may extend the prefix.
        let extends = first <= base;
        let mut s = first.max(base);
        while s <= last {
            if self.try_add(s, Some(room)) {
                if extends && s > base {
                    // Relaxed: publishes nothing but itself; a racing store may regress it,
                    // which only lengthens a later scan.
                    self.hint.store(pack(s, room), Ordering::Relaxed);
                }
                return Some(s);
            }
            s += 1;
        }
        if extends {
            self.hint.store(pack(last + 1, room), Ordering::Relaxed);
        }
        None
    }

    /// A second of the last window (round-robin), counted there regardless of room.
    pub fn spread(&self, now_sec: u64) -> u64 {
        // Relaxed: only spreads; the count itself is kept by the slot's CAS.
        let k = self.spread.fetch_add(1, Ordering::Relaxed) % SPREAD_SECS;
        let s = now_sec + MAX_RETURN_SECS - k;
        self.try_add(s, None);
        s
    }

    /// Counts one promise for second `s` (regardless of room).
    pub fn record(&self, s: u64) {
        self.try_add(s, None);
    }

    /// Adds one promise to second `s` if it has fewer than `room` (`None`: no limit; the count
    /// saturates). False when full, or when the slot already serves a later second.
    #[inline]
    fn try_add(&self, s: u64, room: Option<u64>) -> bool {
        let slot = &self.slots[(s % SLOTS as u64) as usize];
        let mut word = slot.load(Ordering::Relaxed);
        loop {
            let (epoch, count) = unpack(word);
            let count = match epoch.cmp(&s) {
                std::cmp::Ordering::Equal => count,
                std::cmp::Ordering::Less => 0,
                std::cmp::Ordering::Greater => return false,
            };
            if room.is_some_and(|r| count >= r) || count == COUNT_MASK {
                return room.is_none();
            }
            // Pairs with nothing: the word is its own message (module docs).
            match slot.compare_exchange_weak(
                word,
                pack(s, count + 1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(current) => word = current,
            }
        }
    }

    /// Returns promised for second `s` (0 if the slot serves another second).
    pub fn promised(&self, s: u64) -> u64 {
        let (epoch, count) =
            unpack(self.slots[(s % SLOTS as u64) as usize].load(Ordering::Relaxed));
        if epoch == s {
            count
        } else {
            0
        }
    }

    /// Promised returns in each of [`WINDOWS`] as seen at `now_sec`.
    pub fn windows(&self, now_sec: u64) -> [u64; WINDOWS.len()] {
        let mut out = [0; WINDOWS.len()];
        for d in 0..=MAX_RETURN_SECS {
            let w = WINDOWS
                .iter()
                .position(|(hi, _)| d <= *hi)
                .unwrap_or(WINDOWS.len() - 1);
            out[w] += self.promised(now_sec + d);
        }
        out
    }
}

/// One source's part of the schedule, kept in its [`crate::ingest::sources::SourceEntry`].
#[derive(Debug, Default)]
pub struct SourcePromise {
    /// The latest return time promised to the source (nanoseconds on the clock's scale; 0:
    /// none). Raised by `fetch_max` (ring promises) or CAS (per-source bucket spacing) from any
    /// worker; `Relaxed`: a single location, no other memory published through it.
    until: AtomicU64,
    /// Refusals of requests that arrived before `until` (metrics: `Relaxed`, outside the shim).
    early: Counter,
}

impl SourcePromise {
    pub fn new() -> Self {
        SourcePromise::default()
    }

    /// `sluice_ingest_early_returns_total{source}`.
    pub fn early_returns(&self) -> u64 {
        self.early.get()
    }

    /// The latest promised return (nanoseconds), 0 when none.
    pub fn until(&self) -> u64 {
        self.until.load(Ordering::Relaxed)
    }

    /// Counts an early return; returns the promised second the next slot may not precede.
    #[inline]
    fn check(&self, now: u64) -> u64 {
        let until = self.until.load(Ordering::Relaxed);
        if now < until {
            self.early.incr();
        }
        until / NANOS_PER_SEC
    }
}

/// Which ring a refusal draws on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Constraint {
    /// `queue_full`: the durable backlog's room is its drain rate.
    Backlog,
    /// `ingest_saturated`: the global bucket's room is its refill rate.
    Buckets,
}

/// The return schedule shared by all workers: one ring per constraint.
#[derive(Debug)]
pub struct ReturnSchedule {
    backlog: SlotRing,
    buckets: SlotRing,
    /// Room per second of the global bucket (its refill).
    bucket_room: u64,
}

impl ReturnSchedule {
    /// `bucket_refill_per_sec`: the global bucket's refill (`ingest.refill_per_sec`).
    pub fn new(bucket_refill_per_sec: u64) -> Self {
        ReturnSchedule {
            backlog: SlotRing::new(),
            buckets: SlotRing::new(),
            bucket_room: bucket_refill_per_sec,
        }
    }

    pub fn ring(&self, c: Constraint) -> &SlotRing {
        match c {
            Constraint::Backlog => &self.backlog,
            Constraint::Buckets => &self.buckets,
        }
    }

    /// `Retry-After` (seconds, 1..=60) for a `queue_full` refusal at `now` (nanoseconds) while
    /// the backlog drains `drain_per_sec` events per second.
    pub fn queue_full(&self, now: u64, source: &SourcePromise, drain_per_sec: f64) -> u64 {
        let room = if drain_per_sec.is_finite() && drain_per_sec > 0.0 {
            drain_per_sec as u64
        } else {
            0
        };
        assign(&self.backlog, now, source, room, 1)
    }

    /// `Retry-After` (seconds, 1..=60) for an `ingest_saturated` refusal at `now`.
    /// `source_emission_nanos` is the source bucket's `1/refill` (its return spacing).
    pub fn bucket(
        &self,
        now: u64,
        source: &SourcePromise,
        exhausted: &Exhausted,
        source_emission_nanos: u64,
    ) -> u64 {
        let wait = exhausted.retry_after_secs();
        match exhausted.bucket {
            BucketKind::Global => assign(&self.buckets, now, source, self.bucket_room, wait),
            BucketKind::Source => {
                let wait = exhausted.retry_after.as_nanos();
                let now_sec = now / NANOS_PER_SEC;
                match space_source(now, source, wait, source_emission_nanos) {
                    Some(secs) => {
                        self.buckets.record(now_sec + secs);
                        secs
                    }
                    None => self.buckets.spread(now_sec) - now_sec,
                }
            }
        }
    }

    /// `sluice_ingest_promised_returns{reason,window}` at `now` (nanoseconds).
    pub fn render_prometheus(&self, w: &mut PromWriter, now: u64) {
        const NAME: &str = "sluice_ingest_promised_returns";
        w.header(
            NAME,
            "Returns promised by Retry-After for the coming seconds, by refusal reason and window.",
            MetricType::Gauge,
        );
        let now_sec = now / NANOS_PER_SEC;
        for (reason, ring) in [
            ("ingest_saturated", &self.buckets),
            ("queue_full", &self.backlog),
        ] {
            let counts = ring.windows(now_sec);
            for ((_, window), n) in WINDOWS.iter().zip(counts) {
                w.sample_u64(NAME, &[("reason", reason), ("window", window)], n);
            }
        }
    }
}

/// A ring promise for `source` at `now`, no earlier than `now + min_secs` nor than the source's
/// promise (unless that is past the cap). Returns `Retry-After` in seconds.
fn assign(ring: &SlotRing, now: u64, source: &SourcePromise, room: u64, min_secs: u64) -> u64 {
    let now_sec = now / NANOS_PER_SEC;
    let floor = source.check(now);
    let mut first = now_sec + min_secs.clamp(1, MAX_RETURN_SECS);
    if floor <= now_sec + MAX_RETURN_SECS {
        first = first.max(floor);
    }
    let s = match ring.take(now_sec, first, room) {
        Some(s) => s,
        None => ring.spread(now_sec),
    };
    // Relaxed: one location, read by the next refusal of this source (`check`); no other
    // memory is published through it.
    source.until.fetch_max(s * NANOS_PER_SEC, Ordering::Relaxed);
    s - now_sec
}

/// A per-source bucket refusal: the source's returns spaced `emission` apart, the first one
/// after `wait_nanos` (GCRA on the source's promise word). `Retry-After` is the ceiling of the
/// seconds to that time (at least 1), so a sender that honours it finds a token. `None` when the
/// spacing would pass the cap: the caller spreads the refusal over the last window and the
/// promise stays where it is.
fn space_source(now: u64, source: &SourcePromise, wait_nanos: u64, emission: u64) -> Option<u64> {
    let cap = now + MAX_RETURN_SECS * NANOS_PER_SEC;
    let mut until = source.until.load(Ordering::Relaxed);
    if now < until {
        source.early.incr();
    }
    loop {
        let next = (now + wait_nanos).max(until.saturating_add(emission));
        if next > cap {
            return None;
        }
        let secs = (next - now).div_ceil(NANOS_PER_SEC).max(1);
        // Pairs with nothing: a single location (see `SourcePromise::until`).
        match source
            .until
            .compare_exchange_weak(until, next, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => return Some(secs),
            Err(current) => until = current,
        }
    }
}

#[cfg(test)]
mod tests;
