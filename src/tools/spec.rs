//! Parsers for the tools' command-line values: spans (`250ms`, `1.5s`, `0s`), rate schedules
//! (`0s:200,10s:1200`), weighted targets (`/a=3,/b=1`), service-time ranges (`10ms..30ms`),
//! and a small deterministic PRNG (SplitMix64) for jitter, target choice and failure injection.
#![forbid(unsafe_code)]

use std::time::Duration;

/// Parses a non-negative span: a decimal number (fractions allowed) and a unit `us`, `ms`, `s`
/// or `m`. `0s` is valid (a schedule starts at it).
pub fn parse_span(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{text:?} has no unit (use us, ms, s or m)"))?;
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{text:?}: {num:?} is not a number"))?;
    let secs = match unit {
        "us" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        other => {
            return Err(format!(
                "{text:?}: unknown unit {other:?} (use us, ms, s or m)"
            ))
        }
    };
    if !secs.is_finite() || secs > 1e9 {
        return Err(format!("{text:?} is too large"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A piecewise-constant arrival rate: from each step's start, `rate` requests per second.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// (start, rate per second), starts strictly increasing, the first at 0.
    steps: Vec<(Duration, f64)>,
}

impl Schedule {
    /// A constant rate from time 0.
    pub fn constant(rate: f64) -> Result<Schedule, String> {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(format!("rate {rate} must be a positive number"));
        }
        Ok(Schedule {
            steps: vec![(Duration::ZERO, rate)],
        })
    }

    /// Parses `0s:200,10s:1200,40s:200`: starts strictly increasing from `0s`, rates ≥ 0, at
    /// least one positive.
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let mut steps: Vec<(Duration, f64)> = Vec::new();
        for part in text.split(',') {
            let (at, rate) = part
                .trim()
                .split_once(':')
                .ok_or_else(|| format!("schedule step {part:?} is not START:RATE"))?;
            let at = parse_span(at).map_err(|e| format!("schedule step {part:?}: {e}"))?;
            let rate: f64 = rate
                .trim()
                .parse()
                .map_err(|_| format!("schedule step {part:?}: rate is not a number"))?;
            if !(rate.is_finite() && rate >= 0.0) {
                return Err(format!("schedule step {part:?}: rate must be ≥ 0"));
            }
            match steps.last() {
                None if !at.is_zero() => {
                    return Err(format!("schedule must start at 0s, not {part:?}"))
                }
                Some((prev, _)) if at <= *prev => {
                    return Err(format!(
                        "schedule step {part:?} does not come after the previous one"
                    ))
                }
                _ => {}
            }
            steps.push((at, rate));
        }
        if !steps.iter().any(|(_, r)| *r > 0.0) {
            return Err("schedule has no positive rate".into());
        }
        Ok(Schedule { steps })
    }

    /// When the rate drops to 0 for good (`None` if it never does).
    pub fn end(&self) -> Option<Duration> {
        match self.steps.last() {
            Some((at, r)) if *r == 0.0 => Some(*at),
            _ => None,
        }
    }

    /// The rate in force at `t`.
    pub fn rate_at(&self, t: Duration) -> f64 {
        self.steps
            .iter()
            .rev()
            .find(|(at, _)| *at <= t)
            .map_or(0.0, |(_, r)| *r)
    }

    /// The intended time of arrival number `k` (0-based): the `t` at which the integral of the
    /// rate from 0 reaches `k`. `None` if the schedule ends before it.
    pub fn arrival_time(&self, k: u64) -> Option<Duration> {
        let k = k as f64;
        let mut cumulative = 0.0;
        for (i, &(start, rate)) in self.steps.iter().enumerate() {
            let next = self.steps.get(i + 1).map(|s| s.0);
            let span = next.map(|n| (n - start).as_secs_f64());
            let here = span.map_or(f64::INFINITY, |s| s * rate);
            if rate > 0.0 && k < cumulative + here {
                return Some(start + Duration::from_secs_f64((k - cumulative) / rate));
            }
            cumulative += here;
        }
        None
    }
}

/// A weighted choice of request paths.
#[derive(Clone, Debug, PartialEq)]
pub struct Targets {
    /// (path, cumulative weight).
    entries: Vec<(String, u64)>,
}

impl Targets {
    /// Parses `/webhooks/a=3,/webhooks/b=1` (a path without `=w` weighs 1). Paths must start
    /// with `/` and contain only visible ASCII; weights are positive integers.
    pub fn parse(text: &str) -> Result<Targets, String> {
        let mut entries = Vec::new();
        let mut total: u64 = 0;
        for part in text.split(',') {
            let part = part.trim();
            let (path, weight) = match part.rsplit_once('=') {
                Some((p, w)) => {
                    let w: u64 = w
                        .trim()
                        .parse()
                        .map_err(|_| format!("target {part:?}: weight is not an integer"))?;
                    (p.trim(), w)
                }
                None => (part, 1),
            };
            if !path.starts_with('/') || !path.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(format!(
                    "target {part:?}: path must start with / (visible ASCII)"
                ));
            }
            if weight == 0 || weight > 1_000_000 {
                return Err(format!("target {part:?}: weight must be in 1..=1000000"));
            }
            total += weight;
            entries.push((path.to_string(), total));
        }
        Ok(Targets { entries })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn path(&self, i: usize) -> &str {
        &self.entries[i].0
    }

    /// Index of the target that `draw` (uniform in `0..u64::MAX`) picks, in proportion to weight.
    pub fn pick(&self, draw: u64) -> usize {
        let total = self.entries.last().map_or(1, |e| e.1);
        let x = draw % total;
        self.entries.partition_point(|e| e.1 <= x)
    }
}

/// Service time: fixed or uniform in a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceTime {
    pub low: Duration,
    pub high: Duration,
}

impl ServiceTime {
    /// Parses `20ms` or `10ms..30ms`.
    pub fn parse(text: &str) -> Result<ServiceTime, String> {
        let (low, high) = match text.split_once("..") {
            Some((a, b)) => (parse_span(a)?, parse_span(b)?),
            None => {
                let d = parse_span(text)?;
                (d, d)
            }
        };
        if high < low {
            return Err(format!("service time {text:?}: range goes down"));
        }
        if high > Duration::from_secs(3600) {
            return Err(format!("service time {text:?}: over one hour"));
        }
        Ok(ServiceTime { low, high })
    }

    /// A draw from the distribution given a uniform `u` in [0, 1).
    pub fn sample(&self, u: f64) -> Duration {
        self.low + (self.high - self.low).mul_f64(u)
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, good enough for jitter and sampling.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn spans() {
        assert_eq!(parse_span("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_span("250ms").unwrap(), ms(250));
        assert_eq!(parse_span("1.5s").unwrap(), ms(1500));
        assert_eq!(parse_span("2m").unwrap(), ms(120_000));
        assert_eq!(parse_span("500us").unwrap(), Duration::from_micros(500));
        for bad in ["", "10", "s", "1..2s", "-1s", "3h", "1 s"] {
            assert!(parse_span(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn schedule_parse_and_arrivals() {
        let s = Schedule::parse("0s:200,10s:1200,40s:200").unwrap();
        assert_eq!(s.rate_at(ms(5_000)), 200.0);
        assert_eq!(s.rate_at(ms(10_000)), 1200.0);
        assert_eq!(s.rate_at(ms(100_000)), 200.0);
        assert_eq!(s.end(), None);
        assert_eq!(s.arrival_time(0), Some(Duration::ZERO));
        assert_eq!(s.arrival_time(100), Some(ms(500)));
        // 2000 arrivals in the first 10 s, then 1200/s.
        assert_eq!(s.arrival_time(2000), Some(ms(10_000)));
        assert_eq!(s.arrival_time(2600), Some(ms(10_500)));
        // 2000 + 36000 by 40 s.
        assert_eq!(s.arrival_time(38_000), Some(ms(40_000)));

        let bounded = Schedule::parse("0s:10, 1s:0, 2s:10, 3s:0").unwrap();
        assert_eq!(bounded.end(), Some(ms(3000)));
        assert_eq!(bounded.arrival_time(9), Some(ms(900)));
        assert_eq!(bounded.arrival_time(10), Some(ms(2000)));
        assert_eq!(bounded.arrival_time(20), None);

        for bad in [
            "",
            "1s:10",
            "0s:10,0s:20",
            "0s:10,5s:1,2s:3",
            "0s:-1",
            "0s:0",
            "0s",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Schedule::constant(0.0).is_err());
        assert_eq!(
            Schedule::constant(4.0).unwrap().arrival_time(2),
            Some(ms(500))
        );
    }

    #[test]
    fn weighted_targets() {
        let t = Targets::parse("/webhooks/a=3,/webhooks/b=1").unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.path(1), "/webhooks/b");
        let picks: Vec<usize> = (0..8).map(|d| t.pick(d)).collect();
        assert_eq!(picks, [0, 0, 0, 1, 0, 0, 0, 1]);
        let mut rng = Rng::new(7);
        let mut counts = [0u32; 2];
        for _ in 0..40_000 {
            counts[t.pick(rng.next_u64())] += 1;
        }
        assert!((29_000..31_000).contains(&counts[0]), "{counts:?}");
        assert_eq!(Targets::parse("/x").unwrap().pick(12345), 0);
        for bad in ["", "x=1", "/a=0", "/a=b", "/a b=1", "/a=1,"] {
            assert!(Targets::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn service_times() {
        let fixed = ServiceTime::parse("20ms").unwrap();
        assert_eq!(fixed.sample(0.7), ms(20));
        let range = ServiceTime::parse("10ms..30ms").unwrap();
        assert_eq!(range.sample(0.0), ms(10));
        assert_eq!(range.sample(0.5), ms(20));
        assert!(ServiceTime::parse("30ms..10ms").is_err());
        assert!(ServiceTime::parse("2h").is_err());
    }

    #[test]
    fn rng_is_uniform_enough() {
        let mut r = Rng::new(1);
        let mean: f64 = (0..100_000).map(|_| r.next_f64()).sum::<f64>() / 100_000.0;
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
    }
}
