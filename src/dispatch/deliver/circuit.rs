//! Destination circuit breaker: closed → open → half-open (one probe) → closed or open again.
//!
//! The contract (DESIGN.md "Contract"; Harn reference §7) with one deliberate tightening:
//!
//! ```text
//!            N consecutive retryable failures                 open_for elapsed: check() = Probe
//! Closed ─────────────────────────────────────► Open{until} ──────────────────────────────► HalfOpen
//!   ▲  success resets the count                  │ check() = FailFast{until - now}               │
//!   │                                            ▲                                               │
//!   └──────────── success (Closed) ──────────────┼───────────── failure (Opened, new window) ────┘
//! ```
//!
//! * **Exactly one probe per open window.** Harn lets *every* request through once the window has
//!   passed; here the first [`Circuit::check`] after the window returns [`CircuitCheck::Probe`]
//!   and every other check fails fast until the probe's result is reported.
//! * **A probe whose result never comes** (a lost completion, a bug in a caller) must not wedge
//!   the destination: once a probe has been out for `open_for`, the next check issues a new one.
//!   A late result of the old probe is then simply the first result to arrive.
//! * **Results while open are ignored.** A success or failure reported while the circuit is open
//!   (not half-open) belongs to a call that started before it opened; it neither closes the
//!   circuit nor extends the window. Only the probe decides.
//! * While half-open, the first result reported decides (the probe is normally the only call
//!   out, since calls that started before the opening finish long before `open_for` passes).
//! * Only retryable failures are reported (callers filter with `dispatch::classify`); a
//!   permanent failure neither counts nor resets, as in Harn.
//!
//! Pure and core-local: time is the caller's `now` in nanoseconds on the injected clock's scale
//! ([`crate::sync::clock::Clock`]); the circuit never reads a clock. Arithmetic saturates.
#![forbid(unsafe_code)]

use std::time::Duration;

/// What [`Circuit::check`] allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitCheck {
    /// Closed: go.
    Allow,
    /// The one half-open probe of this window: go, and report its result. Metrics action
    /// `half_open_probe`.
    Probe,
    /// Open (or half-open with the probe out): fail fast into the DLQ (`circuit_open`).
    /// `retry_after` is the time until the circuit could next let a call through (≥ 1 ns).
    FailFast { retry_after: Duration },
}

/// A state change reported by [`Circuit::on_success`] / [`Circuit::on_failure`], for metrics
/// (`opened`, `closed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Opened,
    Closed,
}

/// The gauge value of a circuit: closed 0, open 1, half-open 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CircuitState {
    Closed = 0,
    Open = 1,
    HalfOpen = 2,
}

impl CircuitState {
    pub const fn as_u8(self) -> u8 {
        self as u8
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// `failures` consecutive retryable failures so far (< threshold).
    Closed { failures: u32 },
    /// Failing fast until `until`.
    Open { until: u64 },
    /// The probe was issued at `since`.
    HalfOpen { since: u64 },
}

/// One destination's circuit.
#[derive(Debug, Clone)]
pub struct Circuit {
    state: State,
    threshold: u32,
    open_for: u64,
    /// The keys whose failures the current closed streak counted
    /// ([`Circuit::on_keyed_failure`]); at most `threshold` (the circuit opens at that count).
    streak_keys: Vec<u64>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Circuit {
    /// Opens after `failures` consecutive retryable failures (0 behaves as 1), for `open_for`
    /// (a zero window is treated as 1 ns, so there is always a distinct open state).
    pub fn new(failures: u32, open_for: Duration) -> Self {
        Circuit {
            state: State::Closed { failures: 0 },
            threshold: failures.max(1),
            open_for: nanos(open_for).max(1),
            streak_keys: Vec::new(),
        }
    }

    /// The decision `check(now)` would make, without issuing a probe.
    pub fn peek(&self, now: u64) -> CircuitCheck {
        match self.state {
            State::Closed { .. } => CircuitCheck::Allow,
            State::Open { until } if now < until => fail_fast(until - now),
            State::Open { .. } => CircuitCheck::Probe,
            State::HalfOpen { since } => {
                let reissue_at = since.saturating_add(self.open_for);
                if now < reissue_at {
                    fail_fast(reissue_at - now)
                } else {
                    CircuitCheck::Probe
                }
            }
        }
    }

    /// Whether a call may go now. A [`CircuitCheck::Probe`] answer moves the circuit to
    /// half-open: the caller must make that call and report its result.
    pub fn check(&mut self, now: u64) -> CircuitCheck {
        let decision = self.peek(now);
        if decision == CircuitCheck::Probe {
            self.state = State::HalfOpen { since: now };
        }
        decision
    }

    /// A call succeeded. Closes a half-open circuit (`Some(Closed)`); resets the failure count
    /// of a closed one; ignored while open.
    pub fn on_success(&mut self, _now: u64) -> Option<Transition> {
        self.streak_keys.clear();
        match self.state {
            State::Closed { .. } => {
                self.state = State::Closed { failures: 0 };
                None
            }
            State::HalfOpen { .. } => {
                self.state = State::Closed { failures: 0 };
                Some(Transition::Closed)
            }
            State::Open { .. } => None,
        }
    }

    /// A call failed with a retryable error. Opens the circuit at the threshold, or reopens a
    /// half-open one for a new window from `now` (`Some(Opened)`); ignored while open.
    /// A retryable failure of a call for `key` (a keyed trigger's concurrency key, hashed;
    /// `None`: an unkeyed call, counted as [`Circuit::on_failure`]). While closed, one key's
    /// failures count once per streak: a key whose handler keeps failing holds only itself
    /// (its retries and its later events wait behind it) and never opens the circuit on the
    /// other keys; failures of `threshold` distinct keys (or unkeyed calls) in a row do.
    pub fn on_keyed_failure(&mut self, now: u64, key: Option<u64>) -> Option<Transition> {
        if let (State::Closed { .. }, Some(k)) = (self.state, key) {
            if self.streak_keys.contains(&k) {
                return None;
            }
            self.streak_keys.push(k);
        }
        self.on_failure(now)
    }

    pub fn on_failure(&mut self, now: u64) -> Option<Transition> {
        match self.state {
            State::Closed { failures } => {
                let failures = failures.saturating_add(1);
                if failures >= self.threshold {
                    self.open(now)
                } else {
                    self.state = State::Closed { failures };
                    None
                }
            }
            State::HalfOpen { .. } => self.open(now),
            State::Open { .. } => None,
        }
    }

    fn open(&mut self, now: u64) -> Option<Transition> {
        self.streak_keys.clear();
        self.state = State::Open {
            until: now.saturating_add(self.open_for),
        };
        Some(Transition::Opened)
    }

    /// For the circuit-state gauge. An open circuit whose window has passed still reads open
    /// until the next `check` issues its probe.
    pub fn state(&self) -> CircuitState {
        match self.state {
            State::Closed { .. } => CircuitState::Closed,
            State::Open { .. } => CircuitState::Open,
            State::HalfOpen { .. } => CircuitState::HalfOpen,
        }
    }

    /// Consecutive retryable failures counted while closed (0 when open or half-open).
    pub fn consecutive_failures(&self) -> u32 {
        match self.state {
            State::Closed { failures } => failures,
            _ => 0,
        }
    }
}

fn fail_fast(nanos: u64) -> CircuitCheck {
    CircuitCheck::FailFast {
        retry_after: Duration::from_nanos(nanos.max(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn one_keys_failures_count_once_distinct_keys_open_it() {
        let mut c = Circuit::new(3, Duration::from_secs(1));
        for _ in 0..10 {
            assert_eq!(c.on_keyed_failure(0, Some(7)), None);
        }
        assert_eq!(c.consecutive_failures(), 1, "key 7 counted once");
        assert_eq!(c.on_keyed_failure(0, Some(8)), None);
        assert_eq!(c.on_keyed_failure(0, Some(8)), None);
        assert_eq!(c.consecutive_failures(), 2);
        assert_eq!(
            c.on_keyed_failure(0, None),
            Some(Transition::Opened),
            "an unkeyed call counts"
        );
        // A success ends the streak: the same key counts again afterwards.
        let mut c = Circuit::new(2, Duration::from_secs(1));
        assert_eq!(c.on_keyed_failure(0, Some(1)), None);
        c.on_success(0);
        assert_eq!(c.on_keyed_failure(0, Some(1)), None);
        assert_eq!(c.on_keyed_failure(0, Some(2)), Some(Transition::Opened));
        assert!(c.streak_keys.is_empty(), "cleared when it opens");
    }

    fn opened(n: u32, at: u64) -> Circuit {
        let mut c = Circuit::new(n, Duration::from_secs(60));
        for i in 0..n {
            let t = c.on_failure(at);
            assert_eq!(t, (i + 1 == n).then_some(Transition::Opened));
        }
        c
    }

    #[test]
    fn opens_after_n_consecutive_failures() {
        let mut c = Circuit::new(5, Duration::from_secs(60));
        for _ in 0..4 {
            assert_eq!(c.on_failure(0), None);
            assert_eq!(c.check(0), CircuitCheck::Allow);
        }
        assert_eq!(c.consecutive_failures(), 4);
        assert_eq!(c.on_failure(0), Some(Transition::Opened));
        assert_eq!(c.state(), CircuitState::Open);
        assert_eq!(c.state().as_u8(), 1);
    }

    #[test]
    fn success_resets_the_count() {
        let mut c = Circuit::new(3, Duration::from_secs(60));
        c.on_failure(0);
        c.on_failure(0);
        assert_eq!(c.on_success(0), None);
        c.on_failure(0);
        c.on_failure(0);
        assert_eq!(c.state(), CircuitState::Closed);
        assert_eq!(c.on_failure(0), Some(Transition::Opened));
    }

    #[test]
    fn fails_fast_while_open_with_the_remaining_time() {
        let mut c = opened(5, 10 * S);
        assert_eq!(
            c.check(10 * S),
            CircuitCheck::FailFast {
                retry_after: Duration::from_secs(60)
            }
        );
        assert_eq!(
            c.check(69 * S),
            CircuitCheck::FailFast {
                retry_after: Duration::from_secs(1)
            }
        );
        assert_eq!(
            c.check(70 * S - 1),
            CircuitCheck::FailFast {
                retry_after: Duration::from_nanos(1)
            }
        );
        // Late results of calls started before the opening change nothing.
        assert_eq!(c.on_success(20 * S), None);
        assert_eq!(c.on_failure(20 * S), None);
        assert_eq!(c.state(), CircuitState::Open);
        assert!(matches!(c.check(69 * S), CircuitCheck::FailFast { .. }));
    }

    #[test]
    fn exactly_one_probe_after_the_window() {
        let mut c = opened(1, 0);
        assert_eq!(c.peek(60 * S), CircuitCheck::Probe);
        assert_eq!(c.state(), CircuitState::Open); // peek issues nothing
        assert_eq!(c.check(60 * S), CircuitCheck::Probe);
        assert_eq!(c.state(), CircuitState::HalfOpen);
        assert_eq!(c.state().as_u8(), 2);
        for t in [60 * S, 61 * S, 119 * S] {
            assert!(matches!(c.check(t), CircuitCheck::FailFast { .. }), "{t}");
        }
    }

    #[test]
    fn probe_success_closes() {
        let mut c = opened(2, 0);
        assert_eq!(c.check(61 * S), CircuitCheck::Probe);
        assert_eq!(c.on_success(62 * S), Some(Transition::Closed));
        assert_eq!(c.state(), CircuitState::Closed);
        assert_eq!(c.state().as_u8(), 0);
        assert_eq!(c.check(62 * S), CircuitCheck::Allow);
        // The count starts over.
        assert_eq!(c.on_failure(63 * S), None);
        assert_eq!(c.on_failure(63 * S), Some(Transition::Opened));
    }

    #[test]
    fn probe_failure_reopens_for_a_new_window() {
        let mut c = opened(5, 0);
        assert_eq!(c.check(60 * S), CircuitCheck::Probe);
        assert_eq!(c.on_failure(65 * S), Some(Transition::Opened));
        assert_eq!(c.state(), CircuitState::Open);
        assert_eq!(
            c.check(65 * S),
            CircuitCheck::FailFast {
                retry_after: Duration::from_secs(60)
            }
        );
        assert!(matches!(c.check(124 * S), CircuitCheck::FailFast { .. }));
        assert_eq!(c.check(125 * S), CircuitCheck::Probe);
        assert!(matches!(c.check(125 * S), CircuitCheck::FailFast { .. }));
    }

    #[test]
    fn a_lost_probe_is_reissued_after_open_for() {
        let mut c = opened(1, 0);
        assert_eq!(c.check(60 * S), CircuitCheck::Probe);
        assert_eq!(
            c.check(100 * S),
            CircuitCheck::FailFast {
                retry_after: Duration::from_secs(20)
            }
        );
        assert_eq!(c.check(120 * S), CircuitCheck::Probe);
        assert!(matches!(c.check(120 * S), CircuitCheck::FailFast { .. }));
        assert_eq!(c.on_success(121 * S), Some(Transition::Closed));
    }

    #[test]
    fn saturates_near_the_end_of_time() {
        let mut c = Circuit::new(1, Duration::MAX);
        assert_eq!(c.on_failure(u64::MAX - 5), Some(Transition::Opened));
        assert!(matches!(c.check(u64::MAX), CircuitCheck::Probe));
        let mut z = Circuit::new(0, Duration::ZERO);
        assert_eq!(z.on_failure(7), Some(Transition::Opened));
        assert!(matches!(z.check(7), CircuitCheck::FailFast { .. }));
        assert_eq!(z.check(8), CircuitCheck::Probe);
    }
}
