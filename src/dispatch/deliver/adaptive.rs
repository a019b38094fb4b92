//! Adaptive concurrency limit of one destination (`max_in_flight = "auto"`): a pure state
//! machine on the caller's clock (nanoseconds; it never reads one).
//!
//! The limit follows the downstream's latency against the lowest latency observed, as in
//! Netflix concurrency-limits' Gradient2 and Vector's adaptive request concurrency:
//!
//! * Samples are collected in windows of at least [`WINDOW`] (and at least one sample).
//! * At the end of a window whose calls were not overloaded, the gradient
//!   `g = clamp(TOLERANCE · min_rtt / mean_rtt, 0.5, 1.0)` shrinks the limit when calls take
//!   longer than `TOLERANCE` times the fastest seen (they queue inside the downstream), and a
//!   queue allowance of `√limit` lets it grow while they do not:
//!   `target = limit · g + √limit`, then `limit ← limit + SMOOTHING · (target − limit)`.
//!   Growth needs demand: unless the window had the whole limit in flight at some point, the
//!   limit does not grow (a destination that does not use its permits must not drift to the
//!   cap; as in Vector, which grows only windows that reached the limit).
//! * An overload signal (a timeout, a connect error, a 429 or 503) ends the window with a
//!   multiplicative decrease, `limit ← limit · DECREASE`: at once when the last decrease is at
//!   least [`WINDOW`] old, else at the window's normal end. So there is at most one decrease
//!   per [`WINDOW`]: the burst of 503s or timeouts that the calls already out bring back after
//!   one overload does not collapse the limit to the minimum.
//! * `min_rtt` is the lowest window mean seen. Every [`MIN_RTT_RESET`] it is re-measured, so a
//!   downstream that became slower for good is not held to a stale minimum: the limit is halved
//!   for [`PROBE_WINDOWS`] windows (the first drains the downstream's queue, the last measures),
//!   the last window's mean becomes `min_rtt`, and the limit from before the probe is restored.
//!   (Taking the current mean instead would ratchet: at the equilibrium the mean is
//!   `TOLERANCE · min_rtt`, so each reset would raise the minimum and the limit with it.)
//!
//! The limit is always within `[min, cap]`. The caller applies it to the permit set
//! ([`crate::dispatch::deliver::permits::Permits::set_max`]), which never lets more calls out than the
//! current limit: a decrease takes effect as calls finish.
#![forbid(unsafe_code)]

/// Shortest sampling window.
pub const WINDOW: u64 = 100_000_000;
/// Latency allowed above the minimum before the limit shrinks.
pub const TOLERANCE: f64 = 1.5;
/// Weight of the new target at each window end.
pub const SMOOTHING: f64 = 0.5;
/// Multiplicative decrease on an overload signal.
pub const DECREASE: f64 = 0.75;
/// How long a measured minimum latency is trusted.
pub const MIN_RTT_RESET: u64 = 30_000_000_000;
/// Windows of a minimum-latency probe (module docs).
pub const PROBE_WINDOWS: u8 = 2;
/// The starting limit (within `[min, cap]`).
pub const INITIAL: usize = 16;

/// One finished call, as the controller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    /// The downstream answered (2xx, or a 4xx other than 429) after `rtt` nanoseconds.
    Answered { rtt: u64 },
    /// A timeout, a connect error, a 429 or a 503: the downstream is over its capacity.
    Overload,
}

/// The controller.
#[derive(Debug, Clone)]
pub struct AdaptiveLimit {
    min: f64,
    cap: f64,
    limit: f64,
    min_rtt: Option<f64>,
    min_rtt_since: u64,
    window_start: u64,
    sum_rtt: f64,
    samples: u64,
    peak_in_flight: usize,
    overloaded: bool,
    /// When the limit was last decreased for an overload (`None`: never).
    last_decrease: Option<u64>,
    /// Windows left in a minimum-latency probe, and the limit to restore after it.
    probe: Option<(u8, f64)>,
}

impl AdaptiveLimit {
    /// A limit between `min` and `cap` (`1 <= min <= cap`, validated by the config; a
    /// hand-built inverted pair is treated as `min = cap`), starting at [`INITIAL`], at `now`.
    pub fn new(min: usize, cap: usize, now: u64) -> Self {
        let cap = cap.max(1) as f64;
        let min = (min.max(1) as f64).min(cap);
        AdaptiveLimit {
            min,
            cap,
            limit: (INITIAL as f64).clamp(min, cap),
            min_rtt: None,
            min_rtt_since: now,
            window_start: now,
            sum_rtt: 0.0,
            samples: 0,
            peak_in_flight: 0,
            overloaded: false,
            last_decrease: None,
            probe: None,
        }
    }

    /// The current limit (an integer in `[min, cap]`).
    pub fn limit(&self) -> usize {
        self.limit.floor() as usize
    }

    /// The lowest window mean latency trusted now, in nanoseconds.
    pub fn min_rtt(&self) -> Option<u64> {
        self.min_rtt.map(|m| m as u64)
    }

    /// A call finished at `now` with `in_flight` calls out when it started (itself included).
    /// Returns the new limit when it changed.
    pub fn on_sample(&mut self, now: u64, in_flight: usize, sample: Sample) -> Option<usize> {
        self.peak_in_flight = self.peak_in_flight.max(in_flight);
        match sample {
            Sample::Answered { rtt } => {
                self.sum_rtt += rtt as f64;
                self.samples += 1;
            }
            Sample::Overload => self.overloaded = true,
        }
        let window_done = now.saturating_sub(self.window_start) >= WINDOW;
        let cooled = self
            .last_decrease
            .map_or(true, |t| now.saturating_sub(t) >= WINDOW);
        if !(window_done || (self.overloaded && cooled)) {
            return None;
        }
        if !self.overloaded && self.samples == 0 {
            return None;
        }
        let before = self.limit();
        self.end_window(now);
        let after = self.limit();
        (after != before).then_some(after)
    }

    fn end_window(&mut self, now: u64) {
        let probe = self.probe.take();
        if self.overloaded {
            // An overload ends a probe too: the restored limit is decreased instead.
            let base = probe.map_or(self.limit, |(_, before)| before);
            self.limit = (base * DECREASE).max(self.min);
            self.last_decrease = Some(now);
        } else if let Some((left, before)) = probe {
            if left > 1 {
                self.probe = Some((left - 1, before));
            } else {
                self.min_rtt = Some(self.sum_rtt / self.samples as f64);
                self.min_rtt_since = now;
                self.limit = before;
            }
        } else if self.min_rtt.is_some() && now.saturating_sub(self.min_rtt_since) >= MIN_RTT_RESET
        {
            self.probe = Some((PROBE_WINDOWS, self.limit));
            self.limit = (self.limit / 2.0).max(self.min);
        } else {
            let mean = self.sum_rtt / self.samples as f64;
            let min_rtt = match self.min_rtt {
                Some(m) => m.min(mean),
                None => {
                    self.min_rtt_since = now;
                    mean
                }
            };
            self.min_rtt = Some(min_rtt);
            let gradient = if mean > 0.0 {
                (TOLERANCE * min_rtt / mean).clamp(0.5, 1.0)
            } else {
                1.0
            };
            let mut target = self.limit * gradient + self.limit.sqrt();
            if (self.peak_in_flight as f64) < self.limit.floor() {
                target = target.min(self.limit); // no demand: do not grow
            }
            self.limit = (self.limit + SMOOTHING * (target - self.limit)).clamp(self.min, self.cap);
        }
        self.window_start = now;
        self.sum_rtt = 0.0;
        self.samples = 0;
        self.peak_in_flight = 0;
        self.overloaded = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A simulated downstream: `servers` calls in service at once, `service` each, FIFO beyond,
    /// calls timing out after `timeout`. Drives the controller with a closed loop (always as
    /// many calls out as the limit allows) for `secs`; returns (limit per second, mean latency
    /// of the last half, overloads).
    fn simulate(servers: usize, service: u64, timeout: u64, secs: u64) -> (Vec<usize>, f64, u64) {
        let mut c = AdaptiveLimit::new(1, 500, 0);
        let mut now = 0;
        let mut limits = Vec::new();
        let (mut lat_sum, mut lat_n, mut overloads) = (0.0, 0.0, 0);
        let step = MS;
        while now < secs * 1_000_000_000 {
            // In steady state a closed loop with `limit` calls out sees Little's law latency:
            // max(service, limit / servers · service).
            let limit = c.limit();
            let latency = (service as f64 * (limit as f64 / servers as f64)).max(service as f64);
            let rate_per_ms = (limit as f64 / (latency / MS as f64)).max(0.001);
            let calls = rate_per_ms.round().max(1.0) as usize;
            for _ in 0..calls {
                let s = if latency as u64 >= timeout {
                    overloads += 1;
                    Sample::Overload
                } else {
                    Sample::Answered {
                        rtt: latency as u64,
                    }
                };
                c.on_sample(now, limit, s);
            }
            if now >= secs * 500_000_000 {
                lat_sum += latency * calls as f64;
                lat_n += calls as f64;
            }
            if now % 1_000_000_000 == 0 {
                limits.push(c.limit());
            }
            now += step;
        }
        (limits, lat_sum / lat_n / MS as f64, overloads)
    }

    #[test]
    fn settles_near_the_downstream_capacity() {
        // 40 at once, 40 ms each: capacity 1000/s; the knee is at 40 in flight.
        let (limits, mean_ms, _) = simulate(40, 40 * MS, 500 * MS, 30);
        let last = *limits.last().unwrap();
        assert!(
            (40..=70).contains(&last),
            "limit {last}, history {limits:?}"
        );
        // The equilibrium: mean ≈ TOLERANCE · min_rtt (60 ms), under the 80 ms acceptance.
        assert!(mean_ms <= 75.0, "mean latency {mean_ms} ms");
    }

    #[test]
    fn follows_a_bigger_downstream() {
        let (limits, _, _) = simulate(200, 20 * MS, 500 * MS, 60);
        let last = *limits.last().unwrap();
        assert!(
            (200..=320).contains(&last),
            "limit {last}, history {limits:?}"
        );
    }

    #[test]
    fn overload_decreases_multiplicatively_once_per_window() {
        let mut c = AdaptiveLimit::new(1, 500, 0);
        assert_eq!(c.limit(), INITIAL);
        assert_eq!(c.on_sample(1, 16, Sample::Overload), Some(12));
        // The burst that follows (the other calls out) changes nothing until WINDOW has passed.
        for t in 2..=WINDOW {
            assert_eq!(c.on_sample(t, 16, Sample::Overload), None, "at {t}");
        }
        // Then one more decrease, and so on: at most one per WINDOW, never below min.
        assert_eq!(c.on_sample(WINDOW + 1, 16, Sample::Overload), Some(9));
        let mut now = WINDOW + 1;
        for _ in 0..40 {
            now += WINDOW;
            c.on_sample(now, 16, Sample::Overload);
        }
        assert_eq!(c.limit(), 1);
        let mut m = AdaptiveLimit::new(5, 500, 0);
        for i in 0..40 {
            m.on_sample(i * WINDOW, 16, Sample::Overload);
        }
        assert_eq!(m.limit(), 5);
    }

    #[test]
    fn grows_only_with_demand_and_stays_under_cap() {
        let mut c = AdaptiveLimit::new(1, 20, 0);
        let mut now = 0;
        // Two calls out at a time against a limit of 16: no growth.
        for _ in 0..100 {
            now += 10 * MS;
            c.on_sample(now, 2, Sample::Answered { rtt: 10 * MS });
        }
        assert_eq!(c.limit(), INITIAL);
        // Saturated at constant latency: grows, but never past the cap.
        for _ in 0..1000 {
            now += 10 * MS;
            c.on_sample(now, c.limit(), Sample::Answered { rtt: 10 * MS });
        }
        assert_eq!(c.limit(), 20);
    }

    #[test]
    fn latency_above_tolerance_shrinks_the_limit() {
        let mut c = AdaptiveLimit::new(1, 500, 0);
        let mut now = 0;
        for _ in 0..20 {
            now += 10 * MS;
            c.on_sample(now, 16, Sample::Answered { rtt: 10 * MS });
        }
        let before = c.limit();
        assert_eq!(c.min_rtt(), Some(10 * MS));
        for _ in 0..200 {
            now += 10 * MS;
            c.on_sample(now, c.limit(), Sample::Answered { rtt: 40 * MS });
        }
        assert!(c.limit() < before, "{} !< {before}", c.limit());
    }

    #[test]
    fn a_stale_minimum_is_re_measured() {
        let mut c = AdaptiveLimit::new(1, 500, 0);
        let mut now = 0;
        for _ in 0..20 {
            now += 10 * MS;
            c.on_sample(now, 16, Sample::Answered { rtt: MS });
        }
        assert_eq!(c.min_rtt(), Some(MS));
        while now < MIN_RTT_RESET + WINDOW * 3 {
            now += 10 * MS;
            c.on_sample(now, c.limit(), Sample::Answered { rtt: 50 * MS });
        }
        assert_eq!(c.min_rtt(), Some(50 * MS));
        assert!(c.limit() >= 1);
    }

    #[test]
    fn the_probe_halves_then_restores_the_limit() {
        let mut c = AdaptiveLimit::new(1, 500, 0);
        let mut now = 0;
        while now < MIN_RTT_RESET - WINDOW {
            now += 10 * MS;
            c.on_sample(now, c.limit(), Sample::Answered { rtt: 10 * MS });
        }
        let before = c.limit();
        while c.limit() == before {
            now += 10 * MS;
            c.on_sample(now, c.limit(), Sample::Answered { rtt: 10 * MS });
        }
        assert_eq!(c.limit(), before / 2, "probe halves");
        for _ in 0..(PROBE_WINDOWS as u64 * (WINDOW / (10 * MS)) + 1) {
            now += 10 * MS;
            c.on_sample(now, c.limit(), Sample::Answered { rtt: 12 * MS });
        }
        assert_eq!(c.min_rtt(), Some(12 * MS));
        assert!(c.limit() >= before, "{} < {before}", c.limit());
    }

    #[test]
    fn windows_need_time_and_a_sample() {
        let mut c = AdaptiveLimit::new(1, 500, 0);
        assert_eq!(
            c.on_sample(WINDOW - 1, 16, Sample::Answered { rtt: MS }),
            None
        );
        assert!(c
            .on_sample(WINDOW, 16, Sample::Answered { rtt: MS })
            .is_some());
        let mut inverted = AdaptiveLimit::new(9, 3, 0);
        assert_eq!(inverted.limit(), 3);
        inverted.on_sample(1, 3, Sample::Overload);
        assert_eq!(inverted.limit(), 3);
    }
}
