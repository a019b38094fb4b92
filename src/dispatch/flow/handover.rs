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
//!
//! [`Handover`] is that wait as one engine sees it; the engine releases the held waiters when
//! [`Handover::turn`] says the wait is over (`FlowEngine::hold_for_handover`, `on_tick`).
#![forbid(unsafe_code)]

use super::agenda::SHIFT;

/// Longest time the gates wait for the hand-over after their first turn.
pub const SETTLE_MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(2);
/// [`SETTLE_MAX_DURATION`] in clock nanos.
pub const SETTLE_MAX: u64 = SETTLE_MAX_DURATION.as_nanos() as u64;

/// The start-up hand-over as one engine sees it (`None` inside: not waiting, or over).
#[derive(Debug, Default)]
pub struct Handover(Option<Settle>);

#[derive(Debug, Default)]
struct Settle {
    /// Engine time at which the gates stop waiting (set at the first turn; 0: not yet).
    until: u64,
    /// Every pump finished (seen in an earlier turn: act in this one).
    seen: bool,
    /// The loop's latest reading of the countdown.
    done: bool,
}

impl Handover {
    /// Waiting for the hand-over when `waiting` (false: no pump registered, nothing to wait for).
    pub fn new(waiting: bool) -> Handover {
        Handover(waiting.then(Settle::default))
    }

    /// The loop's reading of the hand-over countdown.
    pub fn note(&mut self, done: bool) {
        if let Some(s) = &mut self.0 {
            s.done = done;
        }
    }

    /// Still waiting: throttle and concurrency hold every event.
    pub fn settling(&self) -> bool {
        self.0.is_some()
    }

    /// When the hand-over needs the next turn (clock nanos; 0: at once).
    pub fn due(&self) -> Option<u64> {
        let s = self.0.as_ref()?;
        Some(match s.seen {
            true => 0,
            false if s.until > 0 => s.until.saturating_sub(SHIFT),
            false => 0,
        })
    }

    /// One turn (engine time `now`): true when the wait ends now, the hand-over having been seen
    /// a turn ago or [`SETTLE_MAX`] after the first turn (the held waiters are released then).
    pub fn turn(&mut self, now: u64) -> bool {
        let Some(s) = &mut self.0 else {
            return false;
        };
        if s.until == 0 {
            s.until = now.saturating_add(SETTLE_MAX);
        }
        if !s.seen && s.done && now < s.until {
            s.seen = true;
            return false;
        }
        if !s.seen && now < s.until {
            return false;
        }
        self.0 = None;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handover_is_seen_in_one_turn_and_acted_on_in_the_next() {
        let mut h = Handover::new(true);
        assert!(h.settling());
        assert_eq!(h.due(), Some(0), "the first turn at once");
        assert!(!h.turn(SHIFT + 10));
        assert_eq!(h.due(), Some(10 + SETTLE_MAX));
        h.note(true);
        assert!(!h.turn(SHIFT + 20), "seen");
        assert_eq!(h.due(), Some(0));
        assert!(h.turn(SHIFT + 30), "acted on");
        assert!(!h.settling() && h.due().is_none());
        assert!(!h.turn(SHIFT + 40), "once");
    }

    #[test]
    fn the_gates_wait_at_most_settle_max() {
        let mut h = Handover::new(true);
        assert!(!h.turn(SHIFT));
        assert!(!h.turn(SHIFT + SETTLE_MAX - 1));
        assert!(
            h.turn(SHIFT + SETTLE_MAX),
            "no hand-over seen: released anyway"
        );
        assert!(!Handover::new(false).settling());
    }
}
