//! A log-linear latency histogram in the style of HdrHistogram (Gil Tene): fixed memory, two
//! significant decimal digits, values in microseconds from 1 µs to 60 s.
//!
//! # Layout
//!
//! Values below `SUB_BUCKETS` (128) have one bucket each (exact). Above that, each power of two
//! `[2^k, 2^(k+1))` is split into `HALF` (64) equal buckets, so a bucket's width is at most
//! 1/64 of its lower bound: every reported value is within 1.6 % of a recorded one (better than
//! two significant digits). 60 s = 6·10^7 µs < 2^26 needs 1331 buckets of `u64`: 10.4 KiB per
//! histogram, whatever the number of samples.
//!
//! Values above [`MAX_MICROS`] are recorded as `MAX_MICROS` (and counted in `saturated`); 0 is
//! recorded as 0. Quantiles report the highest value equivalent to the bucket (as HdrHistogram
//! does), capped by the largest recorded value, so `p100 == max` exactly.
//!
//! # Why not `crate::metrics::histogram`
//!
//! That is the server's one Prometheus histogram: a dozen fixed buckets of shared atomics whose
//! cumulative counts a scrape exposes; it cannot give a p99.9 within 2 %. This one answers the
//! loadgen's question (percentiles of a run, to two significant digits): ~1,300 plain `u64`
//! buckets per client thread, merged at the end, never scraped. The two share no code; the
//! server never uses this one.
#![forbid(unsafe_code)]

/// Largest value recorded as itself: 60 s in microseconds.
pub const MAX_MICROS: u64 = 60_000_000;
/// Buckets of width 1 at the bottom.
const SUB_BUCKETS: u64 = 128;
/// Buckets per power of two above `SUB_BUCKETS`.
const HALF: u64 = SUB_BUCKETS / 2;
/// log2(HALF).
const HALF_BITS: u32 = 6;
/// Number of buckets: enough for `MAX_MICROS`.
const BUCKETS: usize = bucket_index(MAX_MICROS) + 1;

/// Index of the bucket holding `v` (v ≤ MAX_MICROS).
const fn bucket_index(v: u64) -> usize {
    if v < SUB_BUCKETS {
        return v as usize;
    }
    // v in [2^m, 2^(m+1)) with m ≥ 7; shift so that v >> shift lies in [HALF, 2·HALF).
    let m = 63 - v.leading_zeros();
    let shift = m - HALF_BITS;
    (SUB_BUCKETS + (shift as u64 - 1) * HALF + ((v >> shift) - HALF)) as usize
}

/// The highest value that lands in bucket `i`.
fn bucket_high(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB_BUCKETS {
        return i;
    }
    let shift = (i - SUB_BUCKETS) / HALF + 1;
    let sub = (i - SUB_BUCKETS) % HALF + HALF;
    ((sub + 1) << shift) - 1
}

/// Fixed-size latency histogram (microseconds). Not thread-safe: one per thread, then [`merge`].
///
/// [`merge`]: Histogram::merge
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
    saturated: u64,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.count)
            .field("min", &self.min)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    pub fn new() -> Self {
        Histogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
            saturated: 0,
        }
    }

    /// Records one value in microseconds (values over 60 s count as 60 s).
    pub fn record(&mut self, micros: u64) {
        let v = if micros > MAX_MICROS {
            self.saturated += 1;
            MAX_MICROS
        } else {
            micros
        };
        self.counts[bucket_index(v)] += 1;
        self.count += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.saturated += other.saturated;
    }

    /// Forgets every sample (keeps the memory).
    pub fn reset(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.count = 0;
        self.sum = 0;
        self.min = u64::MAX;
        self.max = 0;
        self.saturated = 0;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Largest recorded value (exact); 0 when empty.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Smallest recorded value (exact); 0 when empty.
    pub fn min(&self) -> u64 {
        if self.count == 0 {
            0
        } else {
            self.min
        }
    }

    /// Mean of the recorded values (exact, after saturation); 0 when empty.
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// Samples recorded above 60 s.
    pub fn saturated(&self) -> u64 {
        self.saturated
    }

    /// The value at quantile `q` in [0, 1]: the smallest bucket whose cumulative count reaches
    /// `ceil(q · count)` (at least 1), reported as its highest equivalent value, capped by
    /// [`max`](Self::max). 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let q = q.clamp(0.0, 1.0);
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_high(i).min(self.max).max(self.min);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact quantile with the same rank rule.
    fn exact(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    fn check(values: &[u64]) {
        let mut h = Histogram::new();
        for &v in values {
            h.record(v);
        }
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0] {
            let want = exact(&sorted, q);
            let got = h.quantile(q);
            let tolerance = want / 64 + 1;
            assert!(
                got >= want && got <= want + tolerance,
                "q={q}: got {got}, exact {want}"
            );
        }
        assert_eq!(h.max(), *sorted.last().unwrap());
        assert_eq!(h.min(), sorted[0]);
        assert_eq!(h.count(), values.len() as u64);
    }

    #[test]
    fn buckets_cover_the_range_monotonically() {
        assert_eq!(BUCKETS, 1331);
        let mut last = 0;
        for v in (0..1000).chain((1000..MAX_MICROS).step_by(997)) {
            let i = bucket_index(v);
            assert!(i >= last, "index went down at {v}");
            assert!(
                bucket_high(i) >= v,
                "bucket {i} high {} < {v}",
                bucket_high(i)
            );
            assert!(i == 0 || bucket_high(i - 1) < v);
            last = i;
        }
        assert_eq!(bucket_index(MAX_MICROS), BUCKETS - 1);
    }

    #[test]
    fn small_values_are_exact() {
        let values: Vec<u64> = (0..128).collect();
        let mut h = Histogram::new();
        values.iter().for_each(|&v| h.record(v));
        assert_eq!(h.quantile(0.5), 63);
        assert_eq!(h.quantile(1.0), 127);
    }

    #[test]
    fn uniform_and_skewed_data_match_exact_percentiles() {
        check(&(1..=100_000).collect::<Vec<_>>());
        // Heavy tail: mostly ~1 ms, a few seconds-long outliers.
        let mut v: Vec<u64> = (0..10_000).map(|i| 900 + (i * 37) % 300).collect();
        v.extend([2_000_000, 5_000_000, 59_000_000]);
        check(&v);
        // Pseudo-random spread over the whole range.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let v: Vec<u64> = (0..50_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                1 + x % MAX_MICROS
            })
            .collect();
        check(&v);
    }

    #[test]
    fn merge_equals_recording_everything() {
        let (mut a, mut b, mut all) = (Histogram::new(), Histogram::new(), Histogram::new());
        for v in 1..5000u64 {
            let v = v * 13;
            if v % 3 == 0 {
                a.record(v);
            } else {
                b.record(v);
            }
            all.record(v);
        }
        a.merge(&b);
        for q in [0.25, 0.5, 0.99, 1.0] {
            assert_eq!(a.quantile(q), all.quantile(q));
        }
        assert_eq!(a.count(), all.count());
        assert_eq!(a.max(), all.max());
        assert_eq!(a.mean(), all.mean());
    }

    #[test]
    fn saturation_empty_and_reset() {
        let mut h = Histogram::new();
        assert_eq!(
            (h.quantile(0.5), h.max(), h.min(), h.mean()),
            (0, 0, 0, 0.0)
        );
        h.record(MAX_MICROS * 10);
        assert_eq!(h.saturated(), 1);
        assert_eq!(h.max(), MAX_MICROS);
        assert_eq!(h.quantile(0.99), MAX_MICROS);
        h.reset();
        assert_eq!(h.count(), 0);
        assert_eq!(h.quantile(0.5), 0);
    }
}
