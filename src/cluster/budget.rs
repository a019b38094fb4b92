//! A shared destination's budget as its owner core sees it: a local cache of what Redis granted,
//! so the per-event decision stays local (no round trip, no lock on the way to `Go`).
//!
//! - **Permits.** The grant's `target` is the bound of the destination's permits
//!   ([`PermitBound::set_max`]: up at once, down as calls finish). The lease is valid until
//!   `valid_until` (the sync's send time + `lease` − a margin, on this node's clock); past it
//!   the node starts no call under it. Redis never counts this node below its `ceiling` (the
//!   permits' bound when the sync left), so a lowered target is reported only after the local
//!   bound came down: every call this node may start is counted in Redis.
//! - **Rate.** Tokens come in batches reserved in the shared GCRA: token `k` is usable from
//!   `first_at + k·interval` for `horizon`, then dropped unused (the cluster never sees a burst
//!   of tokens saved up). When none is left the next batch is asked for.
//! - **Modes.** `Shared` while the lease is valid; past it `Closed` (no dispatch; events stay
//!   queued) or, with `on_unavailable = "local"` while the last call to Redis failed, `Local`
//!   (the configured `max_in_flight` and this node's own rate budget). A lease that merely ran
//!   out (an idle node stops renewing) is `Closed` until the next grant, never `Local`.
//!
//! What the core wants is published to the [`Slot`] (`want`: calls in flight + a small batch
//! of queued events; `ceiling`; rate requests) and the client thread is nudged through a
//! bounded channel of one (a full channel means a nudge is already pending).
#![forbid(unsafe_code)]

use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use super::slot::{Desire, Health, Slot, Tokens};
use super::spec::OnUnavailable;

/// Most rate tokens asked for at once.
pub const MAX_TOKEN_ASK: u32 = 256;

/// Which budget bounds dispatch now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The lease from Redis.
    Shared,
    /// No valid lease: dispatch waits.
    Closed,
    /// No valid lease and `on_unavailable = "local"`: this node's own budget.
    Local,
}

/// The permit set a shared budget bounds: the destination's (`dispatch::permits::Permits`
/// implements it). The budget raises or lowers the bound as leases come and go, and asks
/// whether a permit is free before it reserves a shared rate token.
pub trait PermitBound {
    /// Sets the bound of calls in flight (up at once; down as calls finish).
    fn set_max(&mut self, max: usize);
    /// Whether a call could take a permit now.
    fn available(&self) -> bool;
}

/// The owner core's cache of one shared destination's grants.
#[derive(Debug)]
pub struct SharedBudget {
    slot: Arc<Slot>,
    kick: SyncSender<()>,
    on_unavailable: OnUnavailable,
    /// `max_in_flight`: the cluster budget, and this node's own in `Local` mode.
    limit: usize,
    /// Most queued events asked for beyond the calls in flight.
    batch: usize,
    /// `rate` is configured (and so shared).
    has_rate: bool,
    mode: Mode,
    grant_seq: u64,
    target: usize,
    valid_until: u64,
    health: Health,
    tokens: Tokens,
    /// Index of the next unused token of `tokens`.
    next_token: u32,
    /// Ask for tokens again no earlier than this (after a batch of none).
    rate_retry_at: u64,
    /// The rate generation last asked for, and the last answered.
    rate_asked: u64,
    rate_served: u64,
    published: Desire,
    waiting_since: Option<u64>,
}

impl SharedBudget {
    pub fn new(
        slot: Arc<Slot>,
        kick: SyncSender<()>,
        on_unavailable: OnUnavailable,
        limit: usize,
        has_rate: bool,
    ) -> SharedBudget {
        SharedBudget {
            slot,
            kick,
            on_unavailable,
            limit,
            batch: (limit / 4).clamp(1, 64),
            has_rate,
            mode: Mode::Closed,
            grant_seq: 0,
            target: 0,
            valid_until: 0,
            health: Health::Unknown,
            tokens: Tokens::default(),
            next_token: 0,
            rate_retry_at: 0,
            rate_asked: 0,
            rate_served: 0,
            published: Desire::default(),
            waiting_since: None,
        }
    }

    /// Whether the client thread stored something new (one atomic load when nothing is new).
    pub fn take_fresh(&self) -> bool {
        self.slot.take_fresh()
    }

    /// Reads the slot: a newer grant, a token batch, the health.
    pub fn refresh(&mut self, now: u64, permits: &mut dyn PermitBound) {
        let (grant, tokens, health) = self.slot.read();
        if grant.seq > self.grant_seq {
            self.grant_seq = grant.seq;
            self.target = grant.target as usize;
            self.valid_until = grant.valid_until;
            if self.mode == Mode::Shared {
                permits.set_max(self.target);
            }
        }
        if let Some(t) = tokens {
            self.rate_served = self.rate_served.max(t.gen);
            self.tokens = t;
            self.next_token = 0;
            if t.count == 0 {
                self.rate_retry_at = t.first_at;
            }
        }
        self.health = health;
        self.mode(now, permits);
    }

    /// The mode at `now`, applying a change to the permits' bound.
    pub fn mode(&mut self, now: u64, permits: &mut dyn PermitBound) -> Mode {
        let m = if now < self.valid_until {
            Mode::Shared
        } else if self.on_unavailable == OnUnavailable::Local
            && matches!(self.health, Health::Down(_))
        {
            Mode::Local
        } else {
            Mode::Closed
        };
        if m != self.mode {
            match m {
                Mode::Shared => permits.set_max(self.target),
                Mode::Local => permits.set_max(self.limit),
                // The bound stays: the gate refuses before it is consulted.
                Mode::Closed => {}
            }
            self.mode = m;
        }
        m
    }

    /// May a call start under the lease at `now`? `Err(until)` as in `Gate::Wait` (0: a grant
    /// or a finishing call will wake the destination).
    pub fn admit(&mut self, now: u64, permits: &mut dyn PermitBound) -> Result<(), u64> {
        match self.mode(now, permits) {
            Mode::Closed => Err(self.wake_hint()),
            Mode::Shared | Mode::Local => Ok(()),
        }
    }

    /// When a destination this budget holds back should look again (`Gate::Wait`'s `until`).
    /// With Redis down and `on_unavailable = "local"`, the lease's end is when the mode changes
    /// to `Local` without any message: wake then, whatever held the event back (the lease's
    /// permits all out, its target 0 or its rate tokens used up). Otherwise 0: a reply or a
    /// finishing call wakes the destination.
    pub fn wake_hint(&self) -> u64 {
        let down = matches!(self.health, Health::Down(_));
        if down && self.on_unavailable == OnUnavailable::Local && self.valid_until > 0 {
            self.valid_until
        } else {
            0
        }
    }

    /// The shared rate's answer at `now`, or `None` when the local rate budget decides (no
    /// rate configured, or not in `Shared` mode).
    pub fn rate_peek(&mut self, now: u64) -> Option<Result<(), u64>> {
        if !self.has_rate || self.mode != Mode::Shared {
            return None;
        }
        let t = self.tokens;
        while self.next_token < t.count {
            let at = t.first_at + u64::from(self.next_token) * t.interval;
            if now <= at.saturating_add(t.horizon) {
                return Some(if now >= at { Ok(()) } else { Err(at.max(1)) });
            }
            self.next_token += 1; // expired unused: dropped
        }
        if now < self.rate_retry_at {
            return Some(Err(self.rate_retry_at));
        }
        if self.rate_served >= self.rate_asked {
            // Sent by `publish`, with the queue's length.
            self.rate_asked += 1;
        }
        Some(Err(self.wake_hint()))
    }

    /// The gate's shared checks at `now`: the lease, a free permit, then the rate tokens.
    /// `Ok(true)` when a shared token was found (take it with [`SharedBudget::went`]),
    /// `Ok(false)` when the local rate budget decides, `Err(until)` as in `Gate::Wait`.
    ///
    /// A free permit is required before a token is asked for: tokens are reserved in Redis for
    /// the whole cluster, and a node that cannot use them (all its permits out) would only take
    /// them from a node that can.
    pub fn check(&mut self, now: u64, permits: &mut dyn PermitBound) -> Result<bool, u64> {
        let answer = self.admit(now, permits).and_then(|()| {
            if !permits.available() {
                return Err(self.wake_hint());
            }
            match self.rate_peek(now) {
                None => Ok(false),
                Some(r) => r.map(|()| true),
            }
        });
        if answer.is_err() {
            self.held_back(now);
        }
        answer
    }

    /// The shared budget held a queued event back at `now`.
    pub fn held_back(&mut self, now: u64) {
        self.waiting_since.get_or_insert(now);
    }

    /// A call started at `now` (using a shared token when `token`).
    pub fn went(&mut self, now: u64, token: bool) {
        if token {
            self.next_token += 1;
        }
        if let Some(since) = self.waiting_since.take() {
            let waited = now.saturating_sub(since);
            self.slot.metrics.wait_nanos.fetch_add(waited, Relaxed);
        }
    }

    /// Publishes what the core wants after a pump of the destination: `in_flight` calls,
    /// `queued` events waiting, the permits' bound `ceiling`. Nudges the client thread when it
    /// changed.
    pub fn publish(&mut self, in_flight: usize, ceiling: usize, queued: usize) {
        let want = (in_flight + queued.min(self.batch)).min(self.limit);
        let rate_need = if self.rate_served < self.rate_asked {
            (queued as u32).clamp(1, MAX_TOKEN_ASK)
        } else {
            0
        };
        let d = Desire {
            want: want as u32,
            ceiling: ceiling as u32,
            rate_need,
            rate_gen: self.rate_asked,
        };
        if d != self.published {
            self.published = d;
            self.slot.publish(d);
            let _ = self.kick.try_send(());
        }
        if queued == 0 {
            self.waiting_since = None;
        }
    }

    /// This node's lease target (for tests and metrics).
    pub fn target(&self) -> usize {
        self.target
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::slot::Grant;
    use crate::dispatch::deliver::permits::Permits;

    const MS: u64 = 1_000_000;

    fn budget(on: OnUnavailable, rate: bool) -> (SharedBudget, Arc<Slot>) {
        let slot = Arc::new(Slot::new(0));
        let (tx, _rx) = std::sync::mpsc::sync_channel(1);
        std::mem::forget(_rx);
        (SharedBudget::new(slot.clone(), tx, on, 20, rate), slot)
    }

    fn grant(slot: &Slot, seq: u64, target: u32, valid_until: u64) {
        slot.store_grant(Grant {
            seq,
            target,
            valid_until,
            cluster_in_use: target,
        });
        slot.mark_fresh();
    }

    #[test]
    fn closed_until_a_grant_then_bounded_by_it_until_the_lease_ends() {
        let (mut b, slot) = budget(OnUnavailable::Closed, false);
        let mut p = Permits::new(0);
        assert_eq!(b.admit(0, &mut p), Err(0));
        b.publish(0, p.max(), 100);
        assert_eq!(slot.desire().want, 5, "in flight + a batch of limit/4");
        grant(&slot, 1, 3, 1000 * MS);
        assert!(b.take_fresh());
        b.refresh(MS, &mut p);
        assert_eq!(b.admit(MS, &mut p), Ok(()));
        assert_eq!(p.max(), 3);
        let held: Vec<_> = (0..3).map(|_| p.try_acquire().unwrap()).collect();
        assert!(p.try_acquire().is_none());
        // Past the lease: nothing starts, whatever the permits say.
        assert_eq!(b.admit(1000 * MS, &mut p), Err(0));
        for h in held {
            p.release(h);
        }
        assert_eq!(b.admit(1000 * MS, &mut p), Err(0));
    }

    #[test]
    fn a_lower_target_drains_the_permits_and_the_ceiling_follows() {
        let (mut b, slot) = budget(OnUnavailable::Closed, false);
        let mut p = Permits::new(0);
        grant(&slot, 1, 6, 1000 * MS);
        b.refresh(0, &mut p);
        let mut held: Vec<_> = (0..6).map(|_| p.try_acquire().unwrap()).collect();
        grant(&slot, 2, 2, 1000 * MS);
        b.refresh(MS, &mut p);
        assert_eq!(p.max(), 6, "never below the calls in flight");
        p.release(held.pop().unwrap());
        b.publish(p.in_flight(), p.max(), 50);
        assert_eq!(slot.desire().ceiling, 5);
        for h in held {
            p.release(h);
        }
        b.publish(p.in_flight(), p.max(), 50);
        assert_eq!(slot.desire().ceiling, 2);
    }

    #[test]
    fn local_fallback_only_after_redis_was_found_down() {
        let (mut b, slot) = budget(OnUnavailable::Local, false);
        let mut p = Permits::new(0);
        assert_eq!(b.admit(0, &mut p), Err(0), "unknown at start: wait");
        grant(&slot, 1, 4, 100 * MS);
        b.refresh(0, &mut p);
        slot.store_health(Health::Down("refused".into()));
        b.refresh(MS, &mut p);
        assert_eq!(b.admit(MS, &mut p), Ok(()));
        assert_eq!(p.max(), 4, "the lease still holds");
        assert_eq!(b.mode(100 * MS, &mut p), Mode::Local);
        assert_eq!(p.max(), 20, "the node's own max_in_flight");
        grant(&slot, 2, 3, 300 * MS);
        b.refresh(200 * MS, &mut p);
        assert_eq!(b.mode(200 * MS, &mut p), Mode::Shared);
        assert_eq!(p.max(), 3);
    }

    /// Regression (CI): a node whose last grant was 0 permits (it was idle) gets events just as
    /// Redis dies. Its lease is still valid, so it is `Shared` with no permit; nothing will
    /// arrive from Redis again, so the wait must end at the lease's end, where `Local` begins.
    /// It used to be `Err(0)` (wait for a message), and the events waited for ever.
    #[test]
    fn a_lease_with_no_permit_wakes_at_its_end_when_redis_is_down_in_local_mode() {
        let (mut b, slot) = budget(OnUnavailable::Local, false);
        let mut p = Permits::new(0);
        grant(&slot, 1, 0, 100 * MS);
        b.refresh(0, &mut p);
        assert_eq!(b.check(MS, &mut p), Err(0), "Redis is up: its reply wakes");
        slot.store_health(Health::Down("refused".into()));
        b.refresh(2 * MS, &mut p);
        assert_eq!(
            b.mode(2 * MS, &mut p),
            Mode::Shared,
            "the lease still holds"
        );
        assert_eq!(
            b.check(2 * MS, &mut p),
            Err(100 * MS),
            "wake at the lease's end"
        );
        assert_eq!(
            b.check(100 * MS, &mut p),
            Ok(false),
            "then the node's own budget"
        );
        assert_eq!(p.max(), 20);
    }

    #[test]
    fn an_idle_lease_that_ran_out_waits_for_redis_even_in_local_mode() {
        let (mut b, slot) = budget(OnUnavailable::Local, false);
        let mut p = Permits::new(0);
        grant(&slot, 1, 2, 100 * MS);
        b.refresh(0, &mut p);
        assert_eq!(
            b.mode(200 * MS, &mut p),
            Mode::Closed,
            "Redis is up: ask it"
        );
        assert_eq!(b.admit(200 * MS, &mut p), Err(0));
        slot.store_health(Health::Down("refused".into()));
        b.refresh(300 * MS, &mut p);
        assert_eq!(b.mode(300 * MS, &mut p), Mode::Local);
    }

    #[test]
    fn no_token_is_asked_for_without_a_free_permit() {
        let (mut b, slot) = budget(OnUnavailable::Closed, true);
        let mut p = Permits::new(0);
        grant(&slot, 1, 1, 10_000 * MS);
        b.refresh(0, &mut p);
        let held = p.try_acquire().unwrap();
        assert_eq!(b.check(MS, &mut p), Err(0));
        b.publish(1, p.max(), 5);
        assert_eq!(
            slot.desire().rate_gen,
            0,
            "no rate request while every permit is out"
        );
        p.release(held);
        assert_eq!(b.check(MS, &mut p), Err(0));
        b.publish(0, p.max(), 5);
        assert_eq!(slot.desire().rate_gen, 1);
    }

    #[test]
    fn rate_tokens_are_spaced_expire_and_are_asked_for_when_used_up() {
        let (mut b, slot) = budget(OnUnavailable::Closed, true);
        let mut p = Permits::new(0);
        grant(&slot, 1, 4, 10_000 * MS);
        b.refresh(0, &mut p);
        assert_eq!(b.rate_peek(0), Some(Err(0)), "no tokens: ask");
        b.publish(0, p.max(), 7);
        let d = slot.desire();
        assert_eq!((d.rate_need, d.rate_gen), (7, 1));
        slot.store_tokens(Tokens {
            gen: 1,
            first_at: 10 * MS,
            interval: 20 * MS,
            horizon: 50 * MS,
            count: 3,
        });
        b.refresh(MS, &mut p);
        assert_eq!(b.rate_peek(MS), Some(Err(10 * MS)));
        assert_eq!(b.rate_peek(10 * MS), Some(Ok(())));
        b.went(0, true);
        assert_eq!(b.rate_peek(10 * MS), Some(Err(30 * MS)));
        // Token 1 (30 ms) expires at 80 ms; token 2 (50 ms) is still good at 81 ms.
        assert_eq!(b.rate_peek(81 * MS), Some(Ok(())));
        b.went(0, true);
        assert_eq!(b.rate_peek(200 * MS), Some(Err(0)), "used up: ask again");
        b.publish(0, p.max(), 1);
        assert_eq!(slot.desire().rate_gen, 2);
        // A batch of none says when to ask again.
        slot.store_tokens(Tokens {
            gen: 2,
            first_at: 300 * MS,
            ..Tokens::default()
        });
        b.refresh(201 * MS, &mut p);
        assert_eq!(b.rate_peek(201 * MS), Some(Err(300 * MS)));
    }
}
