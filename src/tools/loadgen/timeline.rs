//! The per-second timeline: counters and two latency histograms per second, merged across the
//! generator's threads and turned into fixed-size rows as soon as every thread has moved past
//! that second (so only a few seconds of histograms are alive at once).

use std::collections::BTreeMap;
use std::io::{self, Write};

use parking_lot::Mutex;
use serde::Serialize;

use crate::tools::histogram::Histogram;

/// Event counts of one second (or of a whole run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// New arrivals that became due (retries not included).
    pub offered: u64,
    /// Requests whose first byte was written (retries included).
    pub sent: u64,
    #[serde(rename = "2xx")]
    pub ok: u64,
    #[serde(rename = "429")]
    pub too_many: u64,
    #[serde(rename = "503")]
    pub unavailable: u64,
    /// Any other status.
    pub other: u64,
    /// No response within `--timeout` of the intended time (sent or still queued).
    pub timeouts: u64,
    /// Re-sends after a refusal that became due.
    pub retries: u64,
    /// Connection failures, resets and malformed responses.
    pub errors: u64,
    /// Arrivals dropped because the client-side queue was full.
    pub dropped_client: u64,
}

impl Counts {
    pub fn add(&mut self, o: &Counts) {
        self.offered += o.offered;
        self.sent += o.sent;
        self.ok += o.ok;
        self.too_many += o.too_many;
        self.unavailable += o.unavailable;
        self.other += o.other;
        self.timeouts += o.timeouts;
        self.retries += o.retries;
        self.errors += o.errors;
        self.dropped_client += o.dropped_client;
    }
}

/// One thread's (or the merged) data for one second.
#[derive(Clone, Debug, Default)]
pub struct Slot {
    pub counts: Counts,
    /// Latency (µs from the intended send time) of 2xx responses.
    pub accepted: Histogram,
    /// Latency of 429 and 503 responses.
    pub refused: Histogram,
}

impl Slot {
    pub fn merge(&mut self, o: &Slot) {
        self.counts.add(&o.counts);
        self.accepted.merge(&o.accepted);
        self.refused.merge(&o.refused);
    }

    pub fn reset(&mut self) {
        self.counts = Counts::default();
        self.accepted.reset();
        self.refused.reset();
    }
}

/// A finished timeline row; latencies in milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub second: u64,
    #[serde(flatten)]
    pub counts: Counts,
    pub accepted_p50_ms: f64,
    pub accepted_p99_ms: f64,
    pub accepted_max_ms: f64,
    pub refused_p50_ms: f64,
    pub refused_p99_ms: f64,
    pub refused_max_ms: f64,
}

fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

impl Row {
    fn new(second: u64, slot: &Slot) -> Row {
        Row {
            second,
            counts: slot.counts,
            accepted_p50_ms: ms(slot.accepted.quantile(0.5)),
            accepted_p99_ms: ms(slot.accepted.quantile(0.99)),
            accepted_max_ms: ms(slot.accepted.max()),
            refused_p50_ms: ms(slot.refused.quantile(0.5)),
            refused_p99_ms: ms(slot.refused.quantile(0.99)),
            refused_max_ms: ms(slot.refused.max()),
        }
    }
}

/// Collects the threads' seconds. Bounded: pending seconds ≤ the spread between the slowest
/// and the fastest thread (a second or two); rows ≤ the run's hard duration cap.
#[derive(Debug)]
pub struct Aggregator {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    pending: BTreeMap<u64, Slot>,
    /// Per thread: every second below this has been submitted.
    watermarks: Vec<u64>,
    rows: Vec<Row>,
}

impl Aggregator {
    pub fn new(threads: usize) -> Aggregator {
        Aggregator {
            inner: Mutex::new(Inner {
                pending: BTreeMap::new(),
                watermarks: vec![0; threads],
                rows: Vec::new(),
            }),
        }
    }

    /// Thread `thread` hands in its data for `second` and promises nothing below `watermark`
    /// will follow (pass `u64::MAX` at the end).
    pub fn submit(&self, thread: usize, second: u64, slot: &Slot, watermark: u64) {
        let mut inner = self.inner.lock();
        inner.pending.entry(second).or_default().merge(slot);
        inner.watermarks[thread] = watermark;
        let low = inner.watermarks.iter().copied().min().unwrap_or(0);
        while let Some(entry) = inner.pending.first_entry() {
            if *entry.key() >= low {
                break;
            }
            let (sec, slot) = entry.remove_entry();
            // Seconds nobody reported are zero rows.
            let from = inner.rows.last().map_or(0, |r| r.second + 1);
            for gap in from..sec {
                inner.rows.push(Row::new(gap, &Slot::default()));
            }
            inner.rows.push(Row::new(sec, &slot));
        }
    }

    /// The finished rows (call after every thread submitted with `u64::MAX`).
    pub fn rows(&self) -> Vec<Row> {
        self.inner.lock().rows.clone()
    }
}

const CSV_HEADER: &str = "second,offered,sent,2xx,429,503,other,timeouts,retries,errors,dropped_client,accepted_p50_ms,accepted_p99_ms,accepted_max_ms,refused_p50_ms,refused_p99_ms,refused_max_ms";

/// Writes rows as CSV with a header line.
pub fn write_csv(out: &mut dyn Write, rows: &[Row]) -> io::Result<()> {
    writeln!(out, "{CSV_HEADER}")?;
    for r in rows {
        let c = &r.counts;
        writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3}",
            r.second,
            c.offered,
            c.sent,
            c.ok,
            c.too_many,
            c.unavailable,
            c.other,
            c.timeouts,
            c.retries,
            c.errors,
            c.dropped_client,
            r.accepted_p50_ms,
            r.accepted_p99_ms,
            r.accepted_max_ms,
            r.refused_p50_ms,
            r.refused_p99_ms,
            r.refused_max_ms
        )?;
    }
    Ok(())
}

/// Writes rows as a JSON array of objects (same field names as the CSV header).
pub fn write_json(out: &mut dyn Write, rows: &[Row]) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, rows)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(sent: u64, latency: u64) -> Slot {
        let mut s = Slot::default();
        s.counts.sent = sent;
        s.accepted.record(latency);
        s
    }

    #[test]
    fn rows_wait_for_every_thread_and_fill_gaps() {
        let agg = Aggregator::new(2);
        agg.submit(0, 0, &slot(3, 1000), 1);
        assert!(agg.rows().is_empty(), "thread 1 has not passed second 0");
        agg.submit(1, 0, &slot(4, 3000), 3);
        assert_eq!(agg.rows().len(), 1);
        agg.submit(0, 3, &slot(1, 500), u64::MAX);
        agg.submit(1, 3, &slot(1, 500), u64::MAX);
        let rows = agg.rows();
        assert_eq!(
            rows.iter().map(|r| r.second).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(rows[0].counts.sent, 7);
        assert_eq!(rows[0].accepted_max_ms, 3.0);
        assert_eq!(rows[1].counts, Counts::default());
        assert_eq!(rows[3].counts.sent, 2);
    }

    #[test]
    fn csv_and_json_share_names() {
        let rows = vec![Row::new(0, &slot(5, 2500))];
        let mut csv = Vec::new();
        write_csv(&mut csv, &rows).unwrap();
        let csv = String::from_utf8(csv).unwrap();
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(lines.next().unwrap().split(',').nth(2), Some("5"));
        let mut json = Vec::new();
        write_json(&mut json, &rows).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let obj = v[0].as_object().unwrap();
        for name in header {
            assert!(obj.contains_key(name), "{name} missing in JSON");
        }
    }
}
