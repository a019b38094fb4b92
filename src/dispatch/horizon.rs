//! The order horizon: how far, in acceptance order, every core has handed its events to their
//! gates — so that `throttle` and `concurrency` let an event pass only once no older event of
//! any core can still be on its way (issue 38, "order through parking").
//!
//! **Why.** Events of one key are accepted on every core; each core's pump hands them, after
//! their group commit, to the gates on the destination's owner core. The gates order what they
//! hold by acceptance order (the event id: its time, then its core, then a per-core counter);
//! the danger is an event that would pass at once (its key has room) while an older one of the
//! same key is still in another core's commit, window or parked line. Measured before this
//! (burst of 4 keys × 60 events over two cores, `concurrency` max 1): 16 inversions a run, the
//! newer event passing up to 120 ms of older ones still in the other core's pipeline.
//!
//! **What.** Each core publishes, every loop turn, its horizon: an *order time* (the id's
//! millisecond × 1024 + microsecond, [`order_time`]) such that every event the core accepted
//! with an earlier order time has been handed to its owner core (pushed into that core's job
//! ring, or kept by the owner itself). A core computes it from what it still holds
//! (`PumpCore::unhanded`): events not yet durable (while appends are in flight, the newest
//! durable event's time bounds them from below; while a connection waits for room in the batch,
//! the horizon does not move), the pump's in-memory window, the part of a log not yet read
//! back, events parked for a gated trigger, and jobs waiting for room in a ring; a core holding
//! none of them publishes the wall clock now. A horizon never goes back while the core works.
//!
//! **Idle cores.** A core that holds nothing at the end of its turn publishes [`IDLE`] (it may
//! sleep long: a stale time would hold every ordered gate back). When it wakes it publishes 0
//! before anything else, then reads the clock: every id it mints after is no older than that
//! reading, which is no older than any gate's reading of `IDLE` (the gate read it before the
//! store of 0, so before the clock read; both `SeqCst`), and no gate can have passed an event
//! newer than its own reading. From then on its horizon starts at that reading.
//!
//! The owner's gates pass an event at once only if its order time is below the least horizon of
//! all cores; otherwise it waits in its key's line, in acceptance order, and is released when
//! the horizon passes it (the owner polls every millisecond while one waits). So a key's events
//! leave the gates in acceptance order across cores, through parking and the window caps.
//!
//! **Bound.** A core that stops turning (a long stall) must not stop every ordered gate: an
//! event waits for the horizon at most [`ORDER_WAIT_MAX`] past its own time, then goes on
//! (best effort: the turns in which events waited and the horizon was raised to that floor are
//! counted in `sluice_flow_order_horizon_floored_total`).
//!
//! Layout and orderings: one cache-padded word per core, written by that core only
//! ([`Horizon::publish`], after the jobs it covers are in their rings) and read by every owner
//! ([`Horizon::least`], before it drains its rings), so a job a horizon covers is in the ring
//! the owner then drains (`SeqCst` both, for the idle hand-off above). Modelled with loom
//! (`loom-tests/tests/horizon.rs`).

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::CachePadded;

/// A core's horizon while it holds nothing and sleeps: it holds back no one.
pub const IDLE: u64 = u64::MAX;
/// Longest an event waits for the horizon past its own order time (1 s).
pub const ORDER_WAIT_MAX_MS: u64 = 1_000;
/// [`ORDER_WAIT_MAX_MS`] in order-time units.
pub const ORDER_WAIT_MAX: u64 = ORDER_WAIT_MAX_MS * 1024;

/// Every core's horizon (module docs). Bound: one word per core.
#[derive(Debug)]
pub struct Horizon {
    cores: Box<[CachePadded<AtomicU64>]>,
}

impl Horizon {
    /// A horizon for `cores` cores, each at 0 (nothing known handed). With no core there is no
    /// horizon: [`Horizon::least`] is `u64::MAX`, every event passes (unit tests).
    pub fn new(cores: usize) -> Horizon {
        Horizon {
            cores: (0..cores)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }

    /// Core `core` has handed every event older than `at` (order time), or holds none and
    /// mints none until it publishes again ([`IDLE`]). `SeqCst`: a core waking from idle
    /// publishes 0 *before* it reads the clock for new ids (module docs, "Idle cores").
    pub fn publish(&self, core: usize, at: u64) {
        if let Some(c) = self.cores.get(core) {
            c.store(at, Ordering::SeqCst);
        }
    }

    /// Core `core`'s horizon as last published, `u64::MAX` for a core there is not.
    pub fn of_or_max(&self, core: usize) -> u64 {
        self.cores
            .get(core)
            .map_or(u64::MAX, |c| c.load(Ordering::SeqCst))
    }

    /// Core `core`'s horizon as last published.
    pub fn of(&self, core: usize) -> u64 {
        self.cores.get(core).map_or(0, |c| c.load(Ordering::SeqCst))
    }

    /// The least horizon of the cores other than `core` (`u64::MAX` when there is none).
    pub fn least_except(&self, core: usize) -> u64 {
        (self.cores.iter().enumerate())
            .filter(|(k, _)| *k != core)
            .map(|(_, c)| c.load(Ordering::SeqCst))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// The least horizon of all cores: every event older than it has been handed over.
    pub fn least(&self) -> u64 {
        (self.cores.iter())
            .map(|c| c.load(Ordering::SeqCst))
            .min()
            .unwrap_or(u64::MAX)
    }
}

/// How one owner core reads the horizon in a turn (module docs, "Layout and orderings"): once
/// before it drains its rings ([`Reading::before_drain`]: every job that reading covers is
/// then in the rings), and again at the end of the turn after its own publication
/// ([`Reading::after_turn`]: its own value new, the others' as read before the drain). Each
/// reading is kept within [`ORDER_WAIT_MAX`] of the wall clock.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    /// The least horizon of the other cores as read before the drain.
    others: u64,
    /// The last reading was raised to its floor ([`ORDER_WAIT_MAX`] behind the wall clock).
    floored: bool,
}

impl Default for Reading {
    fn default() -> Self {
        Reading {
            others: u64::MAX,
            floored: false,
        }
    }
}

impl Reading {
    /// Before the rings are drained: the horizon to judge this turn's jobs by.
    pub fn before_drain(&mut self, order: &Horizon, core: usize, wall_ms: u64) -> u64 {
        self.others = order.least_except(core);
        self.bounded(self.others.min(order.of_or_max(core)), wall_ms)
    }

    /// At the end of the turn, after this core published its own horizon.
    pub fn after_turn(&mut self, order: &Horizon, core: usize, wall_ms: u64) -> u64 {
        self.bounded(self.others.min(order.of_or_max(core)), wall_ms)
    }

    /// Was the last reading raised to the floor (some core more than [`ORDER_WAIT_MAX`] behind
    /// the wall clock)?
    pub fn floored(&self) -> bool {
        self.floored
    }

    fn bounded(&mut self, least: u64, wall_ms: u64) -> u64 {
        let h = bounded(least, wall_ms);
        self.floored = h != least;
        h
    }
}

/// `least` raised to [`ORDER_WAIT_MAX`] behind the wall clock `wall_ms` (a core that stopped
/// turning delays an ordered event by at most that); `u64::MAX` (no horizon) stays.
fn bounded(least: u64, wall_ms: u64) -> u64 {
    match least {
        u64::MAX => u64::MAX,
        least => least.max(wall_ms.saturating_mul(1024).saturating_sub(ORDER_WAIT_MAX)),
    }
}

/// The order time of event id `id`: its millisecond × 1024 + its microsecond (the id's top 58
/// bits, `wal::event_id`), or `None` for an id of another shape.
pub fn order_time(id: &str) -> Option<u64> {
    let b = id.as_bytes();
    if b.len() != 26 || b[0] > b'7' {
        return None;
    }
    // The first 13 characters carry the top 65 bits (2 of them padding): enough for 58.
    let mut v: u64 = 0;
    for &c in &b[..13] {
        v = (v << 5) | u64::from(digit(c)?);
    }
    // 13 × 5 = 65 bits read from bit 127 + 2 down: the top 58 value bits are v >> 5 (after the
    // 2 padding bits, dropped by the u64 shift).
    Some(v >> 5)
}

/// The order time of Unix microsecond `unix_us` (what an id minted then carries).
pub fn order_time_of_us(unix_us: u64) -> u64 {
    (unix_us / 1000) * 1024 + unix_us % 1000
}

fn digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'A'..=b'H' => Some(c - b'A' + 10),
        b'J' | b'K' => Some(c - b'J' + 18),
        b'M' | b'N' => Some(c - b'M' + 20),
        b'P'..=b'T' => Some(c - b'P' + 22),
        b'V'..=b'Z' => Some(c - b'V' + 27),
        _ => None,
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;
    use crate::wal::event_id::EventIdGen;

    #[test]
    fn order_time_reads_the_ids_time_and_orders_like_the_ids() {
        let mut g = EventIdGen::new(3);
        let us = 1_750_000_000_123_456u64;
        let id = g.next_us(us);
        assert_eq!(order_time(&id), Some(order_time_of_us(us)));
        assert_eq!(order_time_of_us(us), 1_750_000_000_123 * 1024 + 456);
        let later = g.next_us(us + 1);
        assert!(order_time(&later).unwrap() > order_time(&id).unwrap());
        let mut other = EventIdGen::new(200);
        let same_us = other.next_us(us);
        assert_eq!(
            order_time(&same_us),
            order_time(&id),
            "the core is not part of it"
        );
        for bad in ["", "01HZX", "8ZZZZZZZZZZZZZZZZZZZZZZZZZ"] {
            assert_eq!(order_time(bad), None, "{bad}");
        }
        assert_eq!(
            order_time("0I000000000000000000000000"),
            None,
            "not Crockford"
        );
        assert_eq!(order_time("00000000000000000000000000"), Some(0));
    }

    #[test]
    fn the_least_horizon_over_the_cores() {
        let h = Horizon::new(2);
        assert_eq!(h.least(), 0);
        h.publish(0, 10);
        h.publish(1, 7);
        assert_eq!((h.of(0), h.of(1), h.least()), (10, 7, 7));
        h.publish(9, 100);
        assert_eq!(h.least(), 7, "no such core");
        assert_eq!((h.least_except(0), h.least_except(1)), (7, 10));
        h.publish(1, IDLE);
        assert_eq!(h.least(), 10, "an idle core holds no one back");
        assert_eq!(Horizon::new(1).least_except(0), u64::MAX);
    }

    #[test]
    fn a_reading_keeps_the_others_from_before_the_drain_and_the_wall_clock_bound() {
        let h = Horizon::new(2);
        h.publish(0, 5_000);
        h.publish(1, 9_000);
        let mut r = Reading::default();
        assert_eq!(r.before_drain(&h, 0, 0), 5_000);
        h.publish(1, 7_000);
        h.publish(0, 8_000);
        assert_eq!(
            r.after_turn(&h, 0, 0),
            8_000,
            "own new, the others' as before"
        );
        h.publish(0, 1_000_000);
        assert_eq!(r.after_turn(&h, 0, 0), 9_000);
        let wall_ms = 100;
        let floor = wall_ms * 1024 - ORDER_WAIT_MAX.min(wall_ms * 1024);
        assert_eq!(r.before_drain(&h, 0, wall_ms), 7_000.max(floor));
        let late = 10_000;
        assert!(!r.floored());
        assert_eq!(
            r.before_drain(&h, 0, late),
            late * 1024 - ORDER_WAIT_MAX,
            "never more than ORDER_WAIT_MAX behind"
        );
        assert!(r.floored(), "the floor is reported");
        assert_eq!(
            Reading::default().before_drain(&Horizon::new(0), 0, late),
            u64::MAX
        );
        assert_eq!(
            Horizon::new(0).least(),
            u64::MAX,
            "none: every event passes"
        );
    }
}
