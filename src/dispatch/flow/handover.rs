//! The start-up hand-over of recovered events: throttle and concurrency waiters leave in
//! acceptance order after a restart, although the logs are read back one by one.
//!
//! After a restart each core's pump reads its own logs and hands the pending events to the
//! cores that gate them, so a gate receives them log by log (all of core 0's log, then core
//! 1's, or interleaved by timing), not in acceptance order. The gates order what they *hold* by
//! event id; the danger is an event that would pass at once (its window has room, its
//! concurrency key a free place) while an older one is still being read. So until every pump
//! has handed over its recovered events (`sched::outstanding::Outstanding::handover`, a
//! [`crate::sync::countdown::Countdown`]), `throttle` and `concurrency` let no event through at
//! once and release no waiter: they hold them, in acceptance order. Then every throttle key
//! with waiters is fired and every concurrency key admits its waiters by place.
//!
//! The hand-over is seen in one loop turn and acted on in the next, so that the jobs the last
//! pumps pushed into this core's ring before finishing (published by the countdown's
//! release/acquire) have been taken from it first. Bound: the gates hold at most
//! [`SETTLE_MAX`] for it (a pump can be slow to finish when `max_outstanding` is taken by
//! calls in flight); `debounce`, `batch`, `rate_limit` and `singleton` are not held back.
#![forbid(unsafe_code)]

use super::{FlowEngine, FlowOut, Settle, SHIFT};

/// Longest time the gates wait for the hand-over after their first turn.
pub const SETTLE_MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(2);
/// [`SETTLE_MAX_DURATION`] in clock nanos.
pub const SETTLE_MAX: u64 = SETTLE_MAX_DURATION.as_nanos() as u64;

impl FlowEngine {
    /// The gates hold throttle and concurrency events until the pumps' hand-over is done
    /// (module docs). `waiting`: false when there is nothing to wait for (no pump registered).
    pub fn hold_for_handover(mut self, waiting: bool) -> FlowEngine {
        self.settle = waiting.then(Settle::default);
        self
    }

    /// The loop's reading of the hand-over countdown, before [`FlowEngine::on_tick`].
    pub fn note_handover(&mut self, done: bool) {
        if let Some(s) = &mut self.settle {
            s.done = done;
        }
    }

    /// While waiting for the hand-over: throttle and concurrency hold every event.
    pub(super) fn settling(&self) -> bool {
        self.settle.is_some()
    }

    /// When the hand-over needs the next turn (clock nanos; 0: at once).
    pub(super) fn settle_due(&self) -> Option<u64> {
        let s = self.settle.as_ref()?;
        Some(match s.seen {
            true => 0,
            false if s.until > 0 => s.until.saturating_sub(SHIFT),
            false => 0,
        })
    }

    /// One turn of the hand-over (engine time `now`): releases the held waiters once the
    /// hand-over was seen a turn ago, or at [`SETTLE_MAX`].
    pub(super) fn settle_turn(&mut self, now: u64, out: &mut FlowOut) {
        let Some(s) = &mut self.settle else {
            return;
        };
        if s.until == 0 {
            s.until = now.saturating_add(SETTLE_MAX);
        }
        if !s.seen && s.done && now < s.until {
            s.seen = true;
            return;
        }
        if !s.seen && now < s.until {
            return;
        }
        self.settle = None;
        let mut throttled = Vec::new();
        let mut concurrent = Vec::new();
        for (t, g) in self.gates.iter().enumerate() {
            let busy = g.throttle.iter().filter(|(_, w)| !w.waiters.is_empty());
            throttled.extend(busy.map(|(k, _)| (t, k.clone())));
            concurrent.extend(g.concurrency.keys().map(|k| (t, k.clone())));
        }
        for (t, k) in throttled {
            self.fire_throttle(t, k, now, out);
        }
        for (t, k) in concurrent {
            self.admit_waiters(t, &k, out);
        }
    }
}
