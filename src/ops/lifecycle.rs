//! The node's lifecycle as `/readyz` and the drain see it: the phase (`Starting` → `Ready` →
//! `Draining`), when accepting stops, and when a core last read a client's bytes during the
//! drain. Written by the main thread (phase, drain start) and by the cores (drain input); read
//! by every core per loop turn and by the ops views ([`crate::ops::view::OpsView`]).
//!
//! Every cell is `Relaxed`: none carries data with it. A core that sees `Draining` or the end
//! of the grace one turn late drains one poll timeout later; one that sees the drain input a
//! turn late ends an idle connection a sweep later.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Lifecycle of the server, as `/readyz` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Starting = 0,
    Ready = 1,
    Draining = 2,
}

/// The lifecycle cells (module docs). One per node, owned by the runtime's shared state.
#[derive(Debug)]
pub struct Lifecycle {
    // Written by the main thread at start and at shutdown; read per `/readyz` and per loop turn.
    phase: AtomicU8,
    // When accepting stops (clock nanos): `u64::MAX` until the drain begins, then the signal's
    // time plus `server.drain_grace`. Written once by the main thread ([`Lifecycle::begin_drain`]).
    stop_accepting_at: AtomicU64,
    // When a core last read a client's bytes during the drain (clock nanos; 0: not yet). The
    // drain ends idle connections only once the whole node has been quiet
    // (`sched/worker/drain.rs`). Written by the cores during the drain only.
    drain_input_at: AtomicU64,
}

impl Default for Lifecycle {
    fn default() -> Lifecycle {
        Lifecycle::new()
    }
}

impl Lifecycle {
    /// `Starting`, accepting without end, no drain input.
    pub fn new() -> Lifecycle {
        Lifecycle {
            phase: AtomicU8::new(Phase::Starting as u8),
            stop_accepting_at: AtomicU64::new(u64::MAX),
            drain_input_at: AtomicU64::new(0),
        }
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            0 => Phase::Starting,
            1 => Phase::Ready,
            _ => Phase::Draining,
        }
    }

    pub fn set_phase(&self, p: Phase) {
        self.phase.store(p as u8, Ordering::Relaxed);
    }

    /// SIGTERM/SIGINT: the phase is `Draining` from now on; requests are still accepted and
    /// served until `now + grace`, then [`Lifecycle::accepting_stopped`] turns true.
    pub fn begin_drain(&self, now: u64, grace: std::time::Duration) {
        let grace = u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX);
        self.stop_accepting_at
            .store(now.saturating_add(grace), Ordering::Relaxed);
        self.set_phase(Phase::Draining);
    }

    /// Has the drain grace ended (listeners closed, new work held back)?
    pub fn accepting_stopped(&self, now: u64) -> bool {
        now >= self.stop_accepting_at.load(Ordering::Relaxed)
    }

    /// A core read a client's bytes at `now` during the drain.
    pub fn note_drain_input(&self, now: u64) {
        self.drain_input_at.fetch_max(now, Ordering::Relaxed);
    }

    /// When a core last read a client's bytes during the drain (0: not yet).
    pub fn drain_input_at(&self) -> u64 {
        self.drain_input_at.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_drain_stops_accepting_only_after_its_grace() {
        let l = Lifecycle::new();
        assert_eq!(l.phase(), Phase::Starting);
        assert!(!l.accepting_stopped(u64::MAX - 1));
        l.set_phase(Phase::Ready);
        assert_eq!(l.phase(), Phase::Ready);
        l.begin_drain(1_000, Duration::from_nanos(500));
        assert_eq!(l.phase(), Phase::Draining);
        assert!(!l.accepting_stopped(1_499));
        assert!(l.accepting_stopped(1_500));
    }

    #[test]
    fn a_grace_past_the_clock_never_wraps() {
        let l = Lifecycle::new();
        l.begin_drain(u64::MAX - 10, Duration::from_secs(u64::MAX));
        assert!(!l.accepting_stopped(u64::MAX - 1));
        assert!(l.accepting_stopped(u64::MAX));
    }

    #[test]
    fn the_drain_input_keeps_the_latest_reading() {
        let l = Lifecycle::new();
        assert_eq!(l.drain_input_at(), 0);
        l.note_drain_input(20);
        l.note_drain_input(10);
        assert_eq!(l.drain_input_at(), 20);
    }
}
