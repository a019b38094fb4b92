//! The node's Redis client thread: it turns the owner cores' published desires into pipelined
//! script calls and stores the answers in the slots, then wakes the cores' loops.
//!
//! One thread per node for every shared destination, one connection per distinct Redis.
//! Each turn: for every slot, a permit sync is due when its desire changed (no more often than
//! every [`SYNC_GAP`]), when it is starved (wants more than granted: every [`STARVED_RETRY`],
//! since another node may have released), or when its lease needs renewing (every `lease / 3`
//! while anything is held or wanted); a rate call is due when a new token request was
//! published. The due calls of one Redis go out as one pipeline (one round trip). Between
//! turns the thread sleeps on the nudge channel (bounded: capacity 1) with a timeout of the
//! next due time, at most [`MAX_SLEEP`].
//!
//! Failure: any error drops the connection; every slot of that Redis is marked down (the owner
//! cores see `Health::Down` and `/readyz` reports it), and reconnects back off from
//! [`BACKOFF_MIN`] to [`BACKOFF_MAX`]. Leases already granted stay usable until their
//! `valid_until`, which is computed from the send time of the sync that granted them, minus a
//! margin, so a node that cannot renew stops before Redis forgets it.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use mio::Waker;

use super::dest::SharedDest;
use super::redis::{Call, Conn, RedisError};
use super::slot::{Grant, Health, Tokens};
use super::spec::{RedisAddr, SharedRate};
use crate::sync::clock::Clock;

/// Least time between two syncs of one destination whose desire keeps changing.
pub const SYNC_GAP: Duration = Duration::from_millis(2);
/// How often a starved destination asks again.
pub const STARVED_RETRY: Duration = Duration::from_millis(5);
/// Longest sleep between turns (bounds how late a stop is seen).
pub const MAX_SLEEP: Duration = Duration::from_millis(100);
pub const BACKOFF_MIN: Duration = Duration::from_millis(50);
pub const BACKOFF_MAX: Duration = Duration::from_millis(1000);

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// The part of `lease` a granted lease is not used for: `max(lease / 10, 50 ms)`, covering the
/// clock rates of two machines and the thread's scheduling.
pub fn margin(lease: Duration) -> Duration {
    (lease / 10).max(Duration::from_millis(50))
}

/// The rate reservation horizon: `clamp(4·T, 20 ms, 250 ms)` for the emission interval `T`.
pub fn horizon(interval_ns: f64) -> u64 {
    (4.0 * interval_ns).clamp(20e6, 250e6) as u64
}

/// What the thread remembers per destination.
#[derive(Debug, Default)]
struct Track {
    /// `(ceiling, want)` of the last successful sync.
    last_sent: Option<(u32, u32)>,
    last_attempt: u64,
    renew_at: u64,
    seq: u64,
    target: u32,
    recorded: u32,
    rate_served: u64,
    down: bool,
}

/// One Redis and its connection.
#[derive(Debug)]
struct Endpoint {
    addr: RedisAddr,
    conn: Option<Conn>,
    retry_at: u64,
    backoff: Duration,
}

/// Everything the thread owns.
#[derive(Debug)]
pub struct Client {
    pub node: String,
    pub dests: Vec<Arc<SharedDest>>,
    pub clock: Arc<dyn Clock>,
    pub wakers: Vec<Arc<Waker>>,
    pub kick: Receiver<()>,
    pub stop: Arc<AtomicBool>,
}

/// A due call, before it is sent.
enum Due {
    Lease { i: usize, ceiling: u32, want: u32 },
    Rate { i: usize, gen: u64, need: u32 },
}

impl Client {
    /// Runs until `stop`; then releases this node's leases (best effort).
    pub fn run(self) {
        let mut eps: Vec<Endpoint> = Vec::new();
        let mut ep_of = Vec::with_capacity(self.dests.len());
        for d in &self.dests {
            let i = match eps.iter().position(|e| e.addr == d.cfg.redis) {
                Some(i) => i,
                None => {
                    eps.push(Endpoint {
                        addr: d.cfg.redis.clone(),
                        conn: None,
                        retry_at: 0,
                        backoff: BACKOFF_MIN,
                    });
                    eps.len() - 1
                }
            };
            ep_of.push(i);
        }
        let mut tracks: Vec<Track> = self.dests.iter().map(|_| Track::default()).collect();
        while !self.stop.load(Relaxed) {
            let now = self.clock.now_nanos();
            let mut woke = false;
            for (e, ep) in eps.iter_mut().enumerate() {
                let due = self.due(now, &tracks, &ep_of, e);
                if !due.is_empty() && now >= ep.retry_at {
                    woke |= self.serve(now, ep, &due, &mut tracks);
                }
            }
            if woke {
                for w in &self.wakers {
                    let _ = w.wake();
                }
            }
            let next = self.next_due(&tracks, &eps, &ep_of);
            let now = self.clock.now_nanos();
            let sleep = Duration::from_nanos(next.saturating_sub(now)).min(MAX_SLEEP);
            if !sleep.is_zero() {
                match self.kick.recv_timeout(sleep) {
                    Ok(()) | Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => std::thread::sleep(sleep),
                }
            }
        }
        self.release_all(&mut eps, &ep_of);
    }

    /// The calls due now for endpoint `e`.
    fn due(&self, now: u64, tracks: &[Track], ep_of: &[usize], e: usize) -> Vec<Due> {
        let mut out = Vec::new();
        for (i, d) in self.dests.iter().enumerate() {
            if ep_of[i] != e {
                continue;
            }
            let t = &tracks[i];
            let want = d.slot.desire();
            let changed = t.last_sent != Some((want.ceiling, want.want));
            let holding = t.recorded > 0 || want.want > 0;
            let starved = want.want > t.target;
            let since = now.saturating_sub(t.last_attempt);
            // While down, every turn past the endpoint's backoff tries again, so health comes
            // back (and `/readyz` with it) even for an idle destination.
            if (changed && since >= ns(SYNC_GAP))
                || (starved && since >= ns(STARVED_RETRY))
                || (holding && now >= t.renew_at)
                || t.down
            {
                out.push(Due::Lease {
                    i,
                    ceiling: want.ceiling,
                    want: want.want,
                });
            }
            if d.rate.is_some() && want.rate_gen > t.rate_served && want.rate_need > 0 {
                out.push(Due::Rate {
                    i,
                    gen: want.rate_gen,
                    need: want.rate_need,
                });
            }
        }
        out
    }

    /// The earliest time anything may be due (a nudge wakes the thread earlier).
    fn next_due(&self, tracks: &[Track], eps: &[Endpoint], ep_of: &[usize]) -> u64 {
        let mut next = u64::MAX;
        for (i, d) in self.dests.iter().enumerate() {
            let t = &tracks[i];
            let want = d.slot.desire();
            let mut at = u64::MAX;
            if t.last_sent != Some((want.ceiling, want.want)) {
                at = at.min(t.last_attempt + ns(SYNC_GAP));
            }
            if want.want > t.target {
                at = at.min(t.last_attempt + ns(STARVED_RETRY));
            }
            if t.recorded > 0 || want.want > 0 {
                at = at.min(t.renew_at);
            }
            if t.down {
                at = 0;
            }
            if d.rate.is_some() && want.rate_gen > t.rate_served && want.rate_need > 0 {
                at = 0;
            }
            next = next.min(at.max(eps[ep_of[i]].retry_at));
        }
        next
    }

    /// Sends `due` to `ep` as one pipeline and stores the answers. True when a slot changed.
    fn serve(&self, now: u64, ep: &mut Endpoint, due: &[Due], tracks: &mut [Track]) -> bool {
        let calls: Vec<Call<'_>> = due.iter().map(|d| self.call(d)).collect();
        for d in due {
            if let Due::Lease { i, .. } = d {
                tracks[*i].last_attempt = now;
            }
        }
        let result = match ep.conn.as_mut() {
            Some(c) => c.pipeline(&calls),
            None => Conn::open(&ep.addr).and_then(|c| {
                let c = ep.conn.insert(c);
                c.pipeline(&calls)
            }),
        };
        let replies = match result {
            Ok(r) => r,
            Err(e) => return self.failed(now, ep, due, tracks, &e),
        };
        if let Some(e) = replies.iter().find_map(|r| r.as_ref().err()) {
            // An error reply (NOSCRIPT after a SCRIPT FLUSH, OOM, a wrong type…): reconnect,
            // which reloads the scripts.
            let e = RedisError::Reply(e.to_string());
            return self.failed(now, ep, due, tracks, &e);
        }
        ep.backoff = BACKOFF_MIN;
        let recv = self.clock.now_nanos();
        for (d, r) in due.iter().zip(replies) {
            let Ok(values) = r else { continue };
            match *d {
                Due::Lease { i, ceiling, want } => {
                    self.granted(now, i, ceiling, want, &values, &mut tracks[i])
                }
                Due::Rate { i, gen, .. } => self.tokens(recv, i, gen, &values, &mut tracks[i]),
            }
        }
        true
    }

    fn call(&self, d: &Due) -> Call<'_> {
        match *d {
            Due::Lease { i, ceiling, want } => {
                let s = &self.dests[i];
                Call::Lease {
                    keys: [&s.keys[0], &s.keys[1], &s.keys[2], &s.keys[4]],
                    node: &self.node,
                    ceiling,
                    want,
                    limit: s.limit as u32,
                    lease_ms: s.cfg.lease.as_millis() as u64,
                }
            }
            Due::Rate { i, need, .. } => {
                let s = &self.dests[i];
                let r = s.rate.unwrap_or(SharedRate {
                    per_sec: 1,
                    burst: 1,
                });
                let interval_ns = 1e9 / r.per_sec as f64;
                Call::Rate {
                    key: &s.keys[3],
                    want: need,
                    interval_us: interval_ns / 1e3,
                    tau_us: ((r.burst - 1) as f64 * interval_ns / 1e3) as u64,
                    horizon_us: horizon(interval_ns) / 1_000,
                }
            }
        }
    }

    fn granted(&self, sent: u64, i: usize, ceiling: u32, want: u32, v: &[i64], t: &mut Track) {
        let d = &self.dests[i];
        let [target, recorded, total] = [0, 1, 2].map(|k| v.get(k).copied().unwrap_or(0));
        let (target, recorded) = (target.max(0) as u32, recorded.max(0) as u32);
        let m = &d.slot.metrics;
        if recorded > t.recorded {
            m.acquisitions.fetch_add(1, Relaxed);
        }
        m.renewals.fetch_add(1, Relaxed);
        m.held.store(u64::from(recorded), Relaxed);
        m.cluster_in_use.store(total.max(0) as u64, Relaxed);
        t.seq += 1;
        t.target = target;
        t.recorded = recorded;
        t.last_sent = Some((ceiling, want));
        t.renew_at = sent + ns(d.cfg.lease) / 3;
        t.down = false;
        let lease = ns(d.cfg.lease) - ns(margin(d.cfg.lease));
        d.slot.store_grant(Grant {
            seq: t.seq,
            target,
            valid_until: sent + lease,
            cluster_in_use: total.max(0) as u32,
        });
        d.slot.metrics.up.store(1, Relaxed);
        d.slot.mark_fresh();
    }

    fn tokens(&self, recv: u64, i: usize, gen: u64, v: &[i64], t: &mut Track) {
        let d = &self.dests[i];
        let Some(r) = d.rate else { return };
        let count = v.first().copied().unwrap_or(0).max(0) as u32;
        let offset_us = v.get(1).copied().unwrap_or(0);
        let interval = 1e9 / r.per_sec as f64;
        let h = horizon(interval);
        let first_at = if count > 0 {
            recv + (offset_us.max(0) as u64) * 1_000
        } else {
            // None before token 0 enters the horizon: ask again then (at least 1 ms later).
            recv + ((offset_us.max(0) as u64) * 1_000)
                .saturating_sub(h)
                .max(1_000_000)
        };
        t.rate_served = gen;
        d.slot
            .metrics
            .rate_tokens
            .fetch_add(u64::from(count), Relaxed);
        d.slot.store_tokens(Tokens {
            gen,
            first_at,
            interval: interval.ceil() as u64,
            horizon: h,
            count,
        });
        d.slot.mark_fresh();
    }

    fn failed(
        &self,
        now: u64,
        ep: &mut Endpoint,
        due: &[Due],
        tracks: &mut [Track],
        e: &RedisError,
    ) -> bool {
        ep.conn = None;
        ep.retry_at = now + ns(ep.backoff);
        ep.backoff = (ep.backoff * 2).min(BACKOFF_MAX);
        let mut changed = false;
        for d in due {
            let (Due::Lease { i, .. } | Due::Rate { i, .. }) = *d;
            let dest = &self.dests[i];
            dest.slot.metrics.failures.fetch_add(1, Relaxed);
            if !tracks[i].down {
                tracks[i].down = true;
                eprintln!(
                    "sluice: shared budget {:?}: {} unreachable: {e}",
                    dest.cfg.key, ep.addr
                );
                dest.slot
                    .store_health(Health::Down(format!("{}: {e}", ep.addr)));
                dest.slot.mark_fresh();
                changed = true;
            }
        }
        changed
    }

    /// At stop: tells Redis this node wants nothing more (one pipeline per Redis, best effort);
    /// it stays counted for the calls it may still have out (its last published ceiling).
    fn release_all(&self, eps: &mut [Endpoint], ep_of: &[usize]) {
        for (e, ep) in eps.iter_mut().enumerate() {
            let calls: Vec<Call<'_>> = (0..self.dests.len())
                .filter(|&i| ep_of[i] == e)
                .map(|i| {
                    self.call(&Due::Lease {
                        i,
                        ceiling: self.dests[i].slot.desire().ceiling,
                        want: 0,
                    })
                })
                .collect();
            if let Some(c) = ep.conn.as_mut() {
                let _ = c.pipeline(&calls);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::slot::Desire;
    use crate::cluster::spec::{OnUnavailable, SharedDestSpec, SharedSpec};
    use crate::sync::clock::ManualClock;
    use std::sync::mpsc::sync_channel;

    const MS: u64 = 1_000_000;

    fn client(rates: &[Option<SharedRate>]) -> Client {
        let dests = rates
            .iter()
            .enumerate()
            .map(|(dest, &rate)| {
                Arc::new(SharedDest::new(SharedDestSpec {
                    dest,
                    shared: SharedSpec {
                        redis: RedisAddr {
                            host: "127.0.0.1".into(),
                            port: 6379,
                            db: 0,
                        },
                        key: format!("k{dest}"),
                        lease: Duration::from_secs(5),
                        on_unavailable: OnUnavailable::Closed,
                    },
                    limit: 10,
                    rate,
                    uri: format!("http://d{dest}/"),
                }))
            })
            .collect();
        let (_tx, kick) = sync_channel(1);
        Client {
            node: "n".into(),
            dests,
            clock: Arc::new(ManualClock::new(0)),
            wakers: Vec::new(),
            kick,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    fn want(c: &Client, i: usize, want: u32, rate_need: u32, rate_gen: u64) {
        c.dests[i].slot.publish(Desire {
            want,
            ceiling: want,
            rate_need,
            rate_gen,
        });
    }

    #[test]
    fn margin_and_horizon_keep_their_bounds() {
        assert_eq!(margin(Duration::from_secs(5)), Duration::from_millis(500));
        assert_eq!(
            margin(Duration::from_millis(200)),
            Duration::from_millis(50)
        );
        assert_eq!(horizon(1e6), 20 * MS, "1 ms interval: the 20 ms floor");
        assert_eq!(horizon(10.0 * MS as f64), 40 * MS, "4 intervals");
        assert_eq!(horizon(1e9), 250 * MS, "1 s interval: the 250 ms cap");
    }

    #[test]
    fn a_new_desire_is_due_once_the_sync_gap_passed_and_not_again_while_unchanged() {
        let c = client(&[None]);
        let mut tracks = vec![Track::default()];
        assert!(c.due(0, &tracks, &[0], 0).is_empty(), "nothing wanted");
        want(&c, 0, 3, 0, 0);
        let due = c.due(ns(SYNC_GAP), &tracks, &[0], 0);
        assert!(matches!(due[..], [Due::Lease { i: 0, want: 3, .. }]));
        // Sent, granted in full, lease renewal far away: nothing is due.
        tracks[0].last_sent = Some((3, 3));
        tracks[0].last_attempt = ns(SYNC_GAP);
        tracks[0].target = 3;
        tracks[0].recorded = 3;
        tracks[0].renew_at = 1_000 * MS;
        assert!(c.due(10 * MS, &tracks, &[0], 0).is_empty());
        assert_eq!(c.next_due(&tracks, &[endpoint()], &[0]), 1_000 * MS);
        // The renewal comes due at its time.
        assert_eq!(c.due(1_000 * MS, &tracks, &[0], 0).len(), 1);
    }

    #[test]
    fn a_starved_or_down_destination_asks_again_and_other_endpoints_are_left_out() {
        let c = client(&[None, None]);
        let mut tracks = vec![Track::default(), Track::default()];
        want(&c, 0, 5, 0, 0);
        tracks[0].last_sent = Some((5, 5));
        tracks[0].target = 2; // starved: wants 5, granted 2
        tracks[0].last_attempt = 10 * MS;
        tracks[0].renew_at = u64::MAX;
        assert!(c.due(10 * MS + 1, &tracks, &[0, 1], 0).is_empty());
        assert_eq!(
            c.due(10 * MS + ns(STARVED_RETRY), &tracks, &[0, 1], 0)
                .len(),
            1
        );
        tracks[1].down = true;
        assert_eq!(c.due(0, &tracks, &[0, 1], 1).len(), 1, "down: every turn");
        assert!(
            c.due(0, &tracks, &[0, 1], 0).is_empty(),
            "endpoint 0 serves only destination 0"
        );
    }

    #[test]
    fn a_rate_request_is_served_once_per_generation_with_its_gcra_parameters() {
        let c = client(&[Some(SharedRate {
            per_sec: 100,
            burst: 5,
        })]);
        let mut tracks = vec![Track::default()];
        want(&c, 0, 0, 7, 1);
        let due = c.due(0, &tracks, &[0], 0);
        let rate = due.iter().find(|d| matches!(d, Due::Rate { .. })).unwrap();
        match c.call(rate) {
            Call::Rate {
                want,
                interval_us,
                tau_us,
                horizon_us,
                ..
            } => {
                assert_eq!(want, 7);
                assert_eq!(interval_us, 10_000.0, "100/s: one token per 10 ms");
                assert_eq!(tau_us, 40_000, "burst 5: four intervals of tolerance");
                assert_eq!(horizon_us, 40_000, "4 intervals, inside 20..=250 ms");
            }
            Call::Lease { .. } => panic!("a rate call was due"),
        }
        tracks[0].rate_served = 1;
        let again = c.due(0, &tracks, &[0], 0);
        assert!(again.iter().all(|d| !matches!(d, Due::Rate { .. })));
    }

    fn endpoint() -> Endpoint {
        Endpoint {
            addr: RedisAddr {
                host: "127.0.0.1".into(),
                port: 6379,
                db: 0,
            },
            conn: None,
            retry_at: 0,
            backoff: BACKOFF_MIN,
        }
    }
}
