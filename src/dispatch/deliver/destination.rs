//! One destination's admission state on its owner core: permits, circuit, rate budget, pause.
//!
//! [`DestinationState::gate`] decides whether the next event may be sent now, checking in this
//! order and stopping at the first "no":
//!
//! 1. **Circuit.** Open (or half-open with the probe out) → [`Gate::FailFast`]: the event goes
//!    to the DLQ (`circuit_open`). This comes first, even while the destination is paused: the
//!    contract says events fail fast while the circuit is open, and holding them for the pause
//!    would only grow the backlog for a destination already known to be failing. With
//!    `circuit.on_open = "hold"` ([`OnOpen::Hold`]) the answer is instead
//!    `Wait { until: when the circuit could let its probe through }`: the events stay queued
//!    (bounded by the pump's `max_outstanding`, then by the backlog bound at the edge) and
//!    the probe decides when delivery resumes.
//! 2. **Pause.** A 429/503 `Retry-After` pauses the whole destination until `paused_until`
//!    → [`Gate::Wait`] `{ until: paused_until }`.
//! 3. **Rate budget** (if configured) → `Wait { until: when a token is available }`. With a
//!    shared budget ([`crate::cluster::budget`]), first its lease (past it: `Wait`), then a free
//!    permit, then a token reserved in the shared GCRA instead of the local one.
//! 4. **Permits.** All `max_in_flight` out → `Wait { until: 0 }`: wait for a
//!    [`DestinationState::complete`] to release one.
//!
//! Nothing is consumed unless the answer is [`Gate::Go`]: the checks peek, then the permit, the
//! rate token and (when the window has passed) the one half-open probe are taken together. A
//! `Go { probe: true }` call is that probe; its result decides the circuit.
//!
//! [`DestinationState::complete`] takes the permit back and feeds the result to the circuit and
//! the pause, returning the transitions for metrics (`opened`, `closed`, `paused`; the gate's
//! answers give `fail_fast` and `half_open_probe`). A permanent failure (4xx) neither counts
//! against the circuit nor resets it (as in Harn), except that it ends a half-open probe as a
//! success: the destination answered, so it is reachable.
//!
//! Pauses are bounded by [`MAX_PAUSE`] (a downstream cannot park a destination for a year), and
//! only ever extend: a shorter `Retry-After` arriving later does not cut an existing pause.
//!
//! Invariant: `in_flight() <= max_in_flight()` at all times (the permit set enforces it).
#![forbid(unsafe_code)]

use std::time::Duration;

use crate::cluster::budget::SharedBudget;
use crate::dispatch::deliver::adaptive::{AdaptiveLimit, Sample};
use crate::dispatch::deliver::circuit::{Circuit, CircuitCheck, CircuitState, Transition};
use crate::dispatch::deliver::classify::Class;
use crate::dispatch::deliver::permits::{Permit, Permits};
use crate::dispatch::deliver::rate::RateBudget;
use crate::dispatch::spec::{DestinationSpec, OnOpen};
use crate::sync::gcra::ParamError;

/// Longest pause a `Retry-After` can impose on a destination.
pub const MAX_PAUSE: Duration = Duration::from_secs(3600);

/// The answer of [`DestinationState::gate`].
#[derive(Debug)]
pub enum Gate {
    /// Send now, holding `permit`; hand it back to [`DestinationState::complete`]. `probe` is
    /// true for the circuit's one half-open probe (metrics action `half_open_probe`).
    Go { permit: Permit, probe: bool },
    /// Not now: paused or rate-limited until `until` (nanoseconds, the clock's scale), or, when
    /// `until == 0`, every permit is out and the next `complete` frees one.
    Wait { until: u64 },
    /// The circuit is open: dead-letter the event (`circuit_open`, metrics `fail_fast`).
    FailFast { retry_after: Duration },
}

/// A state change worth a metric, reported by [`DestinationState::complete`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestinationEvent {
    /// The circuit opened or closed.
    Circuit(Transition),
    /// The destination is paused until `until` (metrics action `paused`).
    Paused { until: u64 },
}

/// Permits + circuit + optional rate budget + pause of one destination. Core-local.
#[derive(Debug)]
pub struct DestinationState {
    permits: Permits,
    circuit: Circuit,
    rate: Option<RateBudget>,
    /// No call starts before this instant (nanoseconds); 0 = not paused.
    paused_until: u64,
    on_open: OnOpen,
    /// `max_in_flight = "auto"`: the controller that sets the permit bound.
    adaptive: Option<AdaptiveLimit>,
    /// `shared = { … }`: the cluster budget's local cache (`crate::cluster::budget`); the
    /// permit bound follows its lease and its tokens replace the local rate budget.
    shared: Option<SharedBudget>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl DestinationState {
    pub fn new(permits: Permits, circuit: Circuit, rate: Option<RateBudget>) -> Self {
        DestinationState {
            permits,
            circuit,
            rate,
            paused_until: 0,
            on_open: OnOpen::Dlq,
            adaptive: None,
            shared: None,
        }
    }

    /// The same state under a shared budget: no permit until the first lease arrives.
    pub fn with_shared(mut self, budget: SharedBudget) -> Self {
        self.permits.set_max(0);
        self.shared = Some(budget);
        self
    }

    /// After the client thread stored a grant: reads it into the cache. False (and nothing
    /// read) when the destination is not shared or nothing new arrived.
    pub fn refresh_shared(&mut self, now: u64) -> bool {
        match &mut self.shared {
            Some(s) if s.take_fresh() => {
                s.refresh(now, &mut self.permits);
                true
            }
            _ => false,
        }
    }

    /// After a pump: tells the shared budget what the destination wants (`queued` events).
    pub fn publish_shared(&mut self, queued: usize) {
        if let Some(s) = &mut self.shared {
            s.publish(self.permits.in_flight(), self.permits.max(), queued);
        }
    }

    /// The same state with an adaptive limit (`max_in_flight = "auto"`): the permit bound
    /// starts at the controller's limit and follows it.
    pub fn with_adaptive(mut self, limit: AdaptiveLimit) -> Self {
        self.permits.set_max(limit.limit());
        self.adaptive = Some(limit);
        self
    }

    /// Feeds a finished call to the adaptive limit (nothing for a fixed one); `in_flight` is
    /// the calls out when it started. Returns the new limit when it changed; the permits follow
    /// it exactly ([`Permits::set_max`]).
    pub fn observe(&mut self, now: u64, in_flight: usize, sample: Sample) -> Option<usize> {
        let changed = self.adaptive.as_mut()?.on_sample(now, in_flight, sample)?;
        self.permits.set_max(changed);
        Some(changed)
    }

    /// The limit: the adaptive controller's, or the fixed `max_in_flight` (a shared budget's:
    /// its lease's target). After a cut it is the new limit at once, while the calls above it
    /// return (what `sluice_destination_permits` reports).
    pub fn limit(&self) -> usize {
        self.adaptive
            .as_ref()
            .map_or(self.permits.target(), AdaptiveLimit::limit)
    }

    /// A reload's new limits (`ops::reload`): a fixed `max_in_flight` (a raise applies at once,
    /// a cut as calls return: [`Permits::set_max`]; an adaptive limit keeps its controller, a
    /// shared budget its lease) and the rate budget when it changed (a new budget starts full).
    pub fn reconfigure(
        &mut self,
        c: &DestinationSpec,
        old: &DestinationSpec,
    ) -> Result<(), ParamError> {
        // A shared budget's permits follow its lease (and a reload cannot change its limits,
        // `ops::reload_diff`): set here, they would let this node past the cluster's budget
        // until the next grant.
        if self.adaptive.is_none() && self.shared.is_none() {
            self.permits.set_max(c.max_in_flight);
        }
        if c.rate != old.rate {
            self.rate = match c.rate {
                Some(r) => Some(RateBudget::new(r.per_sec, r.burst)?),
                None => None,
            };
        }
        Ok(())
    }

    /// The same state with `circuit.on_open = mode`.
    pub fn with_on_open(mut self, mode: OnOpen) -> Self {
        self.on_open = mode;
        self
    }

    /// Whether a retryable failure reported now is an outage to wait out rather than an
    /// attempt to charge: `on_open = "hold"` and the circuit is not closed. The dispatcher then
    /// puts the job back at the head of its queue with its attempt count unchanged, so an
    /// outage can neither dead-letter nor exhaust the retries of the events it catches.
    pub fn holds(&self) -> bool {
        self.on_open == OnOpen::Hold && self.circuit.state() != CircuitState::Closed
    }

    /// From a validated destination config. The rate parameters were validated by the config
    /// with the same [`crate::sync::gcra::BucketParams`] rules, so this fails only for a
    /// hand-built config.
    pub fn from_config(c: &DestinationSpec) -> Result<Self, ParamError> {
        let rate = match c.rate {
            Some(r) => Some(RateBudget::new(r.per_sec, r.burst)?),
            None => None,
        };
        let state = Self::new(
            Permits::new(c.max_in_flight),
            Circuit::new(c.circuit.failures, c.circuit.open_for),
            rate,
        )
        .with_on_open(c.circuit.on_open);
        Ok(match c.adaptive {
            Some(a) => state.with_adaptive(AdaptiveLimit::new(a.min, a.cap, 0)),
            None => state,
        })
    }

    /// May the next event be sent at `now`? See the module docs for the order of the checks.
    pub fn gate(&mut self, now: u64) -> Gate {
        if let CircuitCheck::FailFast { retry_after } = self.circuit.peek(now) {
            return match self.on_open {
                OnOpen::Dlq => Gate::FailFast { retry_after },
                OnOpen::Hold => Gate::Wait {
                    until: now.saturating_add(nanos(retry_after)).max(1),
                },
            };
        }
        if now < self.paused_until {
            return Gate::Wait {
                until: self.paused_until,
            };
        }
        // A shared budget (`crate::cluster::budget`): its lease, a free permit, then its rate
        // tokens, which replace the local rate budget while it is in `Shared` mode.
        let shared_rate = match &mut self.shared {
            Some(s) => match s.check(now, &mut self.permits) {
                Ok(uses_tokens) => uses_tokens,
                Err(until) => return Gate::Wait { until },
            },
            None => false,
        };
        if !shared_rate {
            if let Some(rate) = &self.rate {
                if let Err(wait) = rate.peek(now) {
                    return Gate::Wait {
                        until: now.saturating_add(wait).max(1),
                    };
                }
            }
        }
        let Some(permit) = self.permits.try_acquire() else {
            let until = match &mut self.shared {
                Some(s) => {
                    s.held_back(now);
                    s.wake_hint()
                }
                None => 0,
            };
            return Gate::Wait { until };
        };
        if let Some(s) = &mut self.shared {
            s.went(now, shared_rate);
        }
        if let (false, Some(rate)) = (shared_rate, &mut self.rate) {
            // Peeked at the same `now` on the same state just above: cannot refuse.
            let taken = rate.try_take(now);
            debug_assert!(taken.is_ok());
        }
        let probe = self.circuit.check(now) == CircuitCheck::Probe;
        Gate::Go { permit, probe }
    }

    /// The call made with `permit` finished at `now` with `class`. Releases the permit, feeds
    /// the circuit, applies a pause; returns what changed (usually nothing: an empty `Vec`
    /// does not allocate).
    pub fn complete(&mut self, permit: Permit, now: u64, class: &Class) -> Vec<DestinationEvent> {
        self.complete_for(permit, now, class, None)
    }

    /// [`DestinationState::complete`] of a call for `key` (a keyed trigger's concurrency key,
    /// hashed): one key's failures count once towards the circuit
    /// ([`Circuit::on_keyed_failure`]).
    pub fn complete_for(
        &mut self,
        permit: Permit,
        now: u64,
        class: &Class,
        key: Option<u64>,
    ) -> Vec<DestinationEvent> {
        self.permits.release(permit);
        let mut events = Vec::new();
        let transition = match class {
            Class::Delivered => self.circuit.on_success(now),
            // A 429/503 *with* `Retry-After` is the destination's own backpressure signal: it is
            // obeyed through the pause below and is not a failure of the destination, so it
            // does not count towards opening the circuit (a wave of them from a busy but
            // healthy destination must not dead-letter everything behind it). A half-open probe
            // answered that way still reopens the circuit: the destination is not ready.
            Class::Retryable { pause: Some(_) }
                if self.circuit.state() != CircuitState::HalfOpen =>
            {
                None
            }
            Class::Retryable { .. } => self.circuit.on_keyed_failure(now, key),
            Class::Permanent if self.circuit.state() == CircuitState::HalfOpen => {
                self.circuit.on_success(now)
            }
            Class::Permanent => None,
        };
        if let Some(t) = transition {
            events.push(DestinationEvent::Circuit(t));
        }
        if let Class::Retryable { pause: Some(p) } = class {
            let until = now.saturating_add(nanos((*p).min(MAX_PAUSE)));
            if until > self.paused_until && until > now {
                self.paused_until = until;
                events.push(DestinationEvent::Paused { until });
            }
        }
        events
    }

    /// Gives a permit back without an outcome: the attempt never reached the destination (a
    /// kept-alive connection the server had already closed). Feeds neither the circuit nor a
    /// pause.
    pub fn release(&mut self, permit: Permit) {
        self.permits.release(permit);
    }

    /// Permits out now.
    pub fn in_flight(&self) -> usize {
        self.permits.in_flight()
    }

    pub fn max_in_flight(&self) -> usize {
        self.permits.max()
    }

    pub fn circuit_state(&self) -> CircuitState {
        self.circuit.state()
    }

    /// The end of the current (or last) pause; not paused when `<= now`.
    pub fn paused_until(&self) -> u64 {
        self.paused_until
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::deliver::rng::SmallRng;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;
    const FAIL: Class = Class::Retryable { pause: None };

    fn dest(max: usize, failures: u32, rate: Option<(u64, u64)>) -> DestinationState {
        DestinationState::new(
            Permits::new(max),
            Circuit::new(failures, Duration::from_secs(60)),
            rate.map(|(p, b)| RateBudget::new(p, b).unwrap()),
        )
    }

    /// The validated configuration of manifest `text` (no environment).
    fn built(text: &str) -> crate::config::Config {
        let raw = crate::config::Config::parse_manifest(text).unwrap();
        crate::config::Config::build(raw, &|_| None, &crate::config::Overrides::default()).unwrap()
    }

    fn go(d: &mut DestinationState, now: u64) -> (Permit, bool) {
        match d.gate(now) {
            Gate::Go { permit, probe } => (permit, probe),
            other => panic!("expected Go at {now}, got {other:?}"),
        }
    }

    #[test]
    fn permits_bound_in_flight_under_any_sequence() {
        let mut rng = SmallRng::seed_from_u64(11);
        let mut d = dest(4, 1000, None);
        let mut held = Vec::new();
        let mut now = 0;
        for _ in 0..5000 {
            now += rng.up_to(MS);
            if rng.up_to(2) > 0 {
                match d.gate(now) {
                    Gate::Go { permit, .. } => held.push(permit),
                    Gate::Wait { until } => {
                        assert_eq!(until, 0);
                        assert_eq!(held.len(), 4);
                    }
                    Gate::FailFast { .. } => panic!("circuit cannot open here"),
                }
            } else if !held.is_empty() {
                let i = rng.up_to(held.len() as u64 - 1) as usize;
                let class = if rng.up_to(1) == 0 {
                    Class::Delivered
                } else {
                    FAIL
                };
                d.complete(held.swap_remove(i), now, &class);
            }
            assert!(d.in_flight() <= d.max_in_flight());
            assert_eq!(d.in_flight(), held.len());
        }
    }

    #[test]
    fn retry_after_backpressure_pauses_but_does_not_open_the_circuit() {
        let busy = Class::Retryable {
            pause: Some(Duration::from_millis(10)),
        };
        let mut d = dest(10, 3, None);
        let mut now = 0;
        for _ in 0..10 {
            now += 20 * MS; // past the previous pause
            let (p, _) = go(&mut d, now);
            let ev = d.complete(p, now, &busy);
            assert!(
                ev.iter()
                    .all(|e| matches!(e, DestinationEvent::Paused { .. })),
                "{ev:?}"
            );
        }
        assert_eq!(d.circuit_state(), CircuitState::Closed);
        // The same status without Retry-After is a failure like any other.
        for _ in 0..3 {
            now += 20 * MS;
            let (p, _) = go(&mut d, now);
            d.complete(p, now, &FAIL);
        }
        assert_eq!(d.circuit_state(), CircuitState::Open);
    }

    #[test]
    fn circuit_opens_fails_fast_probes_once_and_closes() {
        let mut d = dest(10, 3, None);
        for i in 0..3 {
            let (p, probe) = go(&mut d, 0);
            assert!(!probe);
            let ev = d.complete(p, S, &FAIL);
            let opened = vec![DestinationEvent::Circuit(Transition::Opened)];
            assert_eq!(ev, if i == 2 { opened } else { vec![] });
        }
        assert_eq!(d.circuit_state(), CircuitState::Open);
        match d.gate(2 * S) {
            Gate::FailFast { retry_after } => assert_eq!(retry_after, Duration::from_secs(59)),
            other => panic!("{other:?}"),
        }
        let (probe, is_probe) = go(&mut d, 61 * S);
        assert!(is_probe);
        assert!(matches!(d.gate(61 * S), Gate::FailFast { .. }));
        assert!(matches!(d.gate(100 * S), Gate::FailFast { .. }));
        let ev = d.complete(probe, 62 * S, &Class::Delivered);
        assert_eq!(ev, vec![DestinationEvent::Circuit(Transition::Closed)]);
        let (p, probe) = go(&mut d, 62 * S);
        assert!(!probe);
        d.complete(p, 62 * S, &Class::Delivered);
    }

    #[test]
    fn probe_failure_reopens_and_a_permanent_answer_closes() {
        let mut d = dest(10, 1, None);
        let (p, _) = go(&mut d, 0);
        d.complete(p, 0, &FAIL);
        let (probe, _) = go(&mut d, 60 * S);
        let ev = d.complete(probe, 61 * S, &FAIL);
        assert_eq!(ev, vec![DestinationEvent::Circuit(Transition::Opened)]);
        assert!(matches!(d.gate(120 * S), Gate::FailFast { .. }));
        let (probe, is_probe) = go(&mut d, 121 * S);
        assert!(is_probe);
        let ev = d.complete(probe, 121 * S, &Class::Permanent);
        assert_eq!(ev, vec![DestinationEvent::Circuit(Transition::Closed)]);
        // Closed: a permanent failure neither counts nor resets.
        let (p, _) = go(&mut d, 122 * S);
        assert_eq!(d.complete(p, 122 * S, &Class::Permanent), vec![]);
        assert_eq!(d.circuit_state(), CircuitState::Closed);
    }

    #[test]
    fn pause_is_honoured() {
        let mut d = dest(10, 100, None);
        let (p, _) = go(&mut d, S);
        let class = Class::Retryable {
            pause: Some(Duration::from_secs(5)),
        };
        let ev = d.complete(p, S, &class);
        assert_eq!(ev, vec![DestinationEvent::Paused { until: 6 * S }]);
        for t in [S, 3 * S, 6 * S - 1] {
            match d.gate(t) {
                Gate::Wait { until } => assert_eq!(until, 6 * S),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(d.in_flight(), 0);
        // A shorter pause does not cut the current one; a longer one extends it.
        let (a, _) = go(&mut d, 6 * S);
        let (b, _) = go(&mut d, 6 * S);
        let short = Class::Retryable {
            pause: Some(Duration::from_secs(1)),
        };
        assert_eq!(d.complete(a, 6 * S, &class).len(), 1); // until 11 s
        assert_eq!(d.complete(b, 7 * S, &short), vec![]);
        assert_eq!(d.paused_until(), 11 * S);
        assert!(matches!(d.gate(11 * S), Gate::Go { .. }));
    }

    #[test]
    fn pause_is_bounded() {
        let mut d = dest(1, 100, None);
        let (p, _) = go(&mut d, 0);
        let year = Class::Retryable {
            pause: Some(Duration::from_secs(365 * 86_400)),
        };
        d.complete(p, 0, &year);
        assert_eq!(d.paused_until(), nanos(MAX_PAUSE));
    }

    #[test]
    fn open_circuit_fails_fast_even_while_paused() {
        let mut d = dest(10, 1, None);
        let (p1, _) = go(&mut d, 0);
        let (p2, _) = go(&mut d, 0);
        let ev = d.complete(p1, 0, &FAIL);
        assert_eq!(ev, vec![DestinationEvent::Circuit(Transition::Opened)]);
        let class = Class::Retryable {
            pause: Some(Duration::from_secs(30)),
        };
        let ev = d.complete(p2, 0, &class);
        assert_eq!(ev, vec![DestinationEvent::Paused { until: 30 * S }]);
        assert!(matches!(d.gate(S), Gate::FailFast { .. }));
    }

    #[test]
    fn rate_budget_spaces_calls_and_consumes_nothing_on_wait() {
        // 10/s, burst 2, 1 permit.
        let mut d = dest(1, 100, Some((10, 2)));
        let (p, _) = go(&mut d, 0);
        // No permit: wait for a release, and the rate token is not spent.
        assert!(matches!(d.gate(0), Gate::Wait { until: 0 }));
        d.complete(p, 0, &Class::Delivered);
        let (p, _) = go(&mut d, 0);
        d.complete(p, 0, &Class::Delivered);
        match d.gate(0) {
            Gate::Wait { until } => assert_eq!(until, 100 * MS),
            other => panic!("{other:?}"),
        }
        assert!(matches!(d.gate(100 * MS - 1), Gate::Wait { .. }));
        let (p, _) = go(&mut d, 100 * MS);
        d.complete(p, 100 * MS, &Class::Delivered);
        assert!(matches!(d.gate(150 * MS), Gate::Wait { until } if until == 200 * MS));
    }

    #[test]
    fn probe_is_not_spent_on_a_wait() {
        // Open circuit, window passed, but paused: the probe stays available.
        let mut d = dest(2, 1, None);
        let (p1, _) = go(&mut d, 0);
        let (p2, _) = go(&mut d, 0);
        d.complete(p1, 0, &FAIL);
        let class = Class::Retryable {
            pause: Some(Duration::from_secs(90)),
        };
        d.complete(p2, 0, &class);
        assert!(matches!(d.gate(70 * S), Gate::Wait { until } if until == 90 * S));
        assert_eq!(d.circuit_state(), CircuitState::Open);
        let (probe, is_probe) = go(&mut d, 90 * S);
        assert!(is_probe);
        assert!(d.complete(probe, 91 * S, &Class::Delivered).len() == 1);
    }

    #[test]
    fn hold_mode_waits_for_the_probe_instead_of_failing_fast() {
        let mut d = dest(4, 2, None).with_on_open(OnOpen::Hold);
        let (a, _) = go(&mut d, 0);
        let (b, _) = go(&mut d, 0);
        assert!(!d.holds());
        d.complete(a, S, &FAIL);
        assert!(!d.holds()); // one failure: closed, an ordinary retry
        let ev = d.complete(b, S, &FAIL);
        assert_eq!(ev, vec![DestinationEvent::Circuit(Transition::Opened)]);
        assert!(d.holds());
        // Open: wait until the window ends, never fail fast.
        for t in [S, 30 * S, 61 * S - 1] {
            match d.gate(t) {
                Gate::Wait { until } => assert_eq!(until, 61 * S, "at {t}"),
                other => panic!("{other:?}"),
            }
        }
        let (probe, is_probe) = go(&mut d, 61 * S);
        assert!(is_probe);
        // Half-open with the probe out: wait for it (or for its reissue time).
        assert!(matches!(d.gate(62 * S), Gate::Wait { until } if until == 121 * S));
        assert!(d.holds());
        d.complete(probe, 62 * S, &FAIL); // reopens
        assert!(matches!(d.gate(62 * S), Gate::Wait { until } if until == 122 * S));
        let (probe, _) = go(&mut d, 122 * S);
        let ev = d.complete(probe, 122 * S, &Class::Delivered);
        assert_eq!(ev, vec![DestinationEvent::Circuit(Transition::Closed)]);
        assert!(!d.holds());
        assert!(matches!(d.gate(122 * S), Gate::Go { probe: false, .. }));
    }

    #[test]
    fn adaptive_limit_drives_the_permits_exactly() {
        let mut d = dest(500, 1000, None).with_adaptive(AdaptiveLimit::new(1, 500, 0));
        assert_eq!(
            d.max_in_flight(),
            crate::dispatch::deliver::adaptive::INITIAL
        );
        let mut held: Vec<Permit> = (0..16).map(|_| go(&mut d, 0).0).collect();
        assert!(matches!(d.gate(0), Gate::Wait { until: 0 }));
        // An overload: the limit drops to 12 while 16 are out; no new call until 5 return.
        assert_eq!(d.observe(1, 16, Sample::Overload), Some(12));
        assert_eq!(d.limit(), 12);
        for i in 0..4 {
            d.complete(held.pop().unwrap(), 2, &Class::Delivered);
            assert!(matches!(d.gate(2), Gate::Wait { until: 0 }), "release {i}");
            assert!(d.in_flight() <= d.max_in_flight());
        }
        assert_eq!(d.max_in_flight(), 12);
        d.complete(held.pop().unwrap(), 2, &Class::Delivered);
        held.push(go(&mut d, 2).0);
        assert!(matches!(d.gate(2), Gate::Wait { until: 0 }));
        for p in held {
            d.complete(p, 3, &Class::Delivered);
        }
        // A fixed limit ignores samples.
        let mut f = dest(4, 1000, None);
        assert_eq!(f.observe(1, 4, Sample::Overload), None);
        assert_eq!(f.limit(), 4);
    }

    #[test]
    fn from_config_uses_every_field() {
        let cfg = built(
            "[[triggers]]\nid = \"a\"\nprovider = \"p\"\npath = \"/a\"\nhandler = \"http://h/\"\n\
             [[destinations]]\nuri = \"http://h/\"\nmax_in_flight = 2\nrate = { per_sec = 1, burst = 1 }\n\
             circuit = { failures = 1, open_for = \"1s\" }\n",
        );
        let mut d = DestinationState::from_config(&cfg.destinations[0]).unwrap();
        assert_eq!(d.max_in_flight(), 2);
        let (p, _) = go(&mut d, 0);
        assert!(matches!(d.gate(0), Gate::Wait { until } if until == S));
        d.complete(p, 0, &FAIL);
        assert!(matches!(d.gate(S / 2), Gate::FailFast { .. }));
    }
    /// A reload cutting a fixed limit below the calls in flight: the limit (the permits
    /// metric) is the new one at once; the permits come down as the calls return.
    #[test]
    fn a_cut_limit_is_reported_at_once_while_calls_return() {
        let mut d = dest(10, 1000, None);
        let held: Vec<_> = (0..8).map(|_| go(&mut d, 0).0).collect();
        let cfg = built(
            "[[triggers]]\nid = \"a\"\nprovider = \"p\"\npath = \"/a\"\nhandler = \"http://h/\"\n\
             [[destinations]]\nuri = \"http://h/\"\nmax_in_flight = 5\n",
        );
        let c = &cfg.destinations[0];
        d.reconfigure(c, c).unwrap();
        assert_eq!(d.limit(), 5, "the new limit, not the 8 still out");
        assert_eq!(d.max_in_flight(), 8);
        for p in held {
            d.complete(p, 1, &Class::Delivered);
        }
        assert_eq!((d.limit(), d.max_in_flight()), (5, 5));
    }

    /// A reload re-applies every destination's settings: a shared destination's permits stay
    /// at its lease's target (here 3 of the cluster's 20), they do not jump to the cluster-wide
    /// `max_in_flight`. And with Redis down in `local` mode, a destination held back by the
    /// lease wakes at the lease's end.
    #[test]
    fn a_reload_leaves_a_shared_destinations_lease_alone() {
        use crate::cluster::slot::{Grant, Health, Slot};
        use crate::cluster::OnUnavailable;
        use std::sync::Arc;
        let cfg = built(
            "[[triggers]]\nid = \"a\"\nprovider = \"p\"\npath = \"/a\"\nhandler = \"http://h/\"\n\
             [[destinations]]\nuri = \"http://h/\"\nmax_in_flight = 20\n",
        );
        let c = &cfg.destinations[0];
        let slot = Arc::new(Slot::new(0));
        let (kick, rx) = std::sync::mpsc::sync_channel(1);
        let budget = SharedBudget::new(slot.clone(), kick, OnUnavailable::Local, 20, false);
        let mut d = DestinationState::from_config(c)
            .unwrap()
            .with_shared(budget);
        slot.store_grant(Grant {
            seq: 1,
            target: 3,
            valid_until: 100 * MS,
            cluster_in_use: 3,
        });
        slot.mark_fresh();
        assert!(d.refresh_shared(0));
        assert_eq!(d.max_in_flight(), 3);
        d.reconfigure(c, c).unwrap();
        assert_eq!(d.max_in_flight(), 3, "the lease, not max_in_flight");
        let held: Vec<_> = (0..3).map(|_| go(&mut d, MS).0).collect();
        assert!(matches!(d.gate(MS), Gate::Wait { until: 0 }));
        slot.store_health(Health::Down("refused".into()));
        slot.mark_fresh();
        assert!(d.refresh_shared(2 * MS));
        assert!(matches!(d.gate(2 * MS), Gate::Wait { until } if until == 100 * MS));
        assert_eq!(d.max_in_flight(), 3);
        let _ = go(&mut d, 100 * MS);
        assert_eq!(d.max_in_flight(), 20, "local: the node's own budget");
        drop((held, rx));
    }
}
