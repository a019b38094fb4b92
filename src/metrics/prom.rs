//! A small Prometheus text-format (0.0.4) writer.
//!
//! Conventions, matching the Harn orchestrator's exposition (reference §8): every family gets
//! `# HELP` and `# TYPE` lines even when it has no samples; labels are written sorted by name;
//! label values are escaped (`\` → `\\`, `"` → `\"`, newline → `\n`); floats are trimmed
//! (`1` not `1.0`, `0.25`, exponent form only for very large or very small magnitudes,
//! `NaN`, `+Inf`, `-Inf`).
//!
//! A family is written as [`PromWriter::header`] followed by any number of samples. Histograms
//! are written from per-bucket (non-cumulative) counts by [`PromWriter::histogram`].
#![forbid(unsafe_code)]

use std::fmt::Write as _;

/// The `# TYPE` of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
}

impl MetricType {
    pub const fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
        }
    }
}

/// Accumulates exposition text. Cheap to create; reuse a buffer with [`PromWriter::with_buffer`].
#[derive(Debug, Default)]
pub struct PromWriter {
    out: String,
}

/// A sample value; keeps integer counters exact beyond 2^53.
#[derive(Debug, Clone, Copy)]
enum Value {
    U64(u64),
    I64(i64),
    F64(f64),
}

impl PromWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Append to `buf` (cleared first).
    pub fn with_buffer(mut buf: String) -> Self {
        buf.clear();
        PromWriter { out: buf }
    }

    /// Append to `buf`, keeping what it holds (whole lines).
    pub fn appending(buf: String) -> Self {
        PromWriter { out: buf }
    }

    pub fn as_str(&self) -> &str {
        &self.out
    }

    /// The text buffer, for modules that format their families themselves (e.g. the WAL's
    /// `render_prometheus(&mut String)`). They must append whole lines.
    pub fn buffer_mut(&mut self) -> &mut String {
        &mut self.out
    }

    pub fn finish(self) -> String {
        self.out
    }

    /// `# HELP` and `# TYPE` lines of a family.
    pub fn header(&mut self, name: &str, help: &str, kind: MetricType) {
        debug_assert!(valid_metric_name(name), "bad metric name {name:?}");
        self.out.push_str("# HELP ");
        self.out.push_str(name);
        self.out.push(' ');
        for c in help.chars() {
            match c {
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                c => self.out.push(c),
            }
        }
        self.out.push_str("\n# TYPE ");
        self.out.push_str(name);
        self.out.push(' ');
        self.out.push_str(kind.as_str());
        self.out.push('\n');
    }

    /// One sample line. `labels` may be in any order; they are written sorted by name.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.line(name, labels, Value::F64(value));
    }

    pub fn sample_u64(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.line(name, labels, Value::U64(value));
    }

    pub fn sample_i64(&mut self, name: &str, labels: &[(&str, &str)], value: i64) {
        self.line(name, labels, Value::I64(value));
    }

    /// A whole unlabeled counter family.
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.header(name, help, MetricType::Counter);
        self.sample_u64(name, &[], value);
    }

    /// A whole unlabeled gauge family (e.g. `sluice_wal_pending_events`).
    pub fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.header(name, help, MetricType::Gauge);
        self.sample(name, &[], value);
    }

    /// The samples of one histogram series (call [`header`](Self::header) with
    /// `MetricType::Histogram` once per family first).
    ///
    /// `counts[i]` is the number of observations in `(bounds[i-1], bounds[i]]`, and
    /// `counts[bounds.len()]` (if present) the number above the last bound; `bounds` ascending.
    /// Writes cumulative `name_bucket{le=...}` lines ending with `le="+Inf"`, then `name_sum` and
    /// `name_count`.
    pub fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        bounds: &[f64],
        counts: &[u64],
        sum: f64,
    ) {
        debug_assert!(counts.len() == bounds.len() || counts.len() == bounds.len() + 1);
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "bounds must ascend");
        let bucket = format!("{name}_bucket");
        let mut le = String::new();
        let mut cumulative = 0u64;
        for (i, bound) in bounds.iter().enumerate() {
            cumulative = cumulative.wrapping_add(counts.get(i).copied().unwrap_or(0));
            le.clear();
            push_float(&mut le, *bound);
            self.line_with(&bucket, labels, Some(("le", &le)), Value::U64(cumulative));
        }
        let total = cumulative.wrapping_add(counts.get(bounds.len()).copied().unwrap_or(0));
        self.line_with(&bucket, labels, Some(("le", "+Inf")), Value::U64(total));
        self.line(&format!("{name}_sum"), labels, Value::F64(sum));
        self.line(&format!("{name}_count"), labels, Value::U64(total));
    }

    fn line(&mut self, name: &str, labels: &[(&str, &str)], value: Value) {
        self.line_with(name, labels, None, value);
    }

    fn line_with(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        extra: Option<(&str, &str)>,
        value: Value,
    ) {
        debug_assert!(valid_metric_name(name), "bad metric name {name:?}");
        self.out.push_str(name);
        if !labels.is_empty() || extra.is_some() {
            let mut sorted: Vec<(&str, &str)> = labels.iter().copied().chain(extra).collect();
            sorted.sort_unstable_by_key(|(k, _)| *k);
            debug_assert!(
                sorted.windows(2).all(|w| w[0].0 != w[1].0),
                "duplicate label"
            );
            self.out.push('{');
            for (i, (k, v)) in sorted.into_iter().enumerate() {
                debug_assert!(valid_label_name(k), "bad label name {k:?}");
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                push_escaped(&mut self.out, v);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        match value {
            Value::U64(v) => write!(self.out, "{v}").expect("String write"),
            Value::I64(v) => write!(self.out, "{v}").expect("String write"),
            Value::F64(v) => push_float(&mut self.out, v),
        }
        self.out.push('\n');
    }
}

/// A label value with `\`, `"` and newline escaped.
fn push_escaped(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Shortest round-trip decimal, without a trailing `.0`; exponent form outside [1e-6, 1e16).
pub fn push_float(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else if v != 0.0 && !(1e-6..1e16).contains(&v.abs()) {
        write!(out, "{v:e}").expect("String write");
    } else {
        write!(out, "{v}").expect("String write");
    }
}

fn valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Action, ConnRefusal, Dimension, Metrics, Route, TimeoutKind};

    fn float(v: f64) -> String {
        let mut s = String::new();
        push_float(&mut s, v);
        s
    }

    #[test]
    fn floats_are_trimmed() {
        assert_eq!(float(1.0), "1");
        assert_eq!(float(0.0), "0");
        assert_eq!(float(0.25), "0.25");
        assert_eq!(float(-3.5), "-3.5");
        assert_eq!(float(0.005), "0.005");
        assert_eq!(float(10485760.0), "10485760");
        assert_eq!(float(1e21), "1e21");
        assert_eq!(float(1.5e-9), "1.5e-9");
        assert_eq!(float(f64::NAN), "NaN");
        assert_eq!(float(f64::INFINITY), "+Inf");
        assert_eq!(float(f64::NEG_INFINITY), "-Inf");
    }

    #[test]
    fn labels_are_sorted_and_escaped() {
        let mut w = PromWriter::new();
        w.header("x_total", "Help with \\ and\nnewline.", MetricType::Counter);
        w.sample_u64(
            "x_total",
            &[("source", "a\"b\\c\nd"), ("reason", "wal_busy")],
            3,
        );
        w.sample("x_total", &[], 0.5);
        assert_eq!(
            w.as_str(),
            "# HELP x_total Help with \\\\ and\\nnewline.\n\
             # TYPE x_total counter\n\
             x_total{reason=\"wal_busy\",source=\"a\\\"b\\\\c\\nd\"} 3\n\
             x_total 0.5\n"
        );
    }

    #[test]
    fn histogram_is_cumulative_with_inf_sum_and_count() {
        let mut w = PromWriter::new();
        w.header("d_seconds", "Durations.", MetricType::Histogram);
        w.histogram(
            "d_seconds",
            &[("topic", "t")],
            &[0.005, 0.1, 1.0],
            &[2, 0, 3, 1],
            2.75,
        );
        assert_eq!(
            w.as_str(),
            "# HELP d_seconds Durations.\n\
             # TYPE d_seconds histogram\n\
             d_seconds_bucket{le=\"0.005\",topic=\"t\"} 2\n\
             d_seconds_bucket{le=\"0.1\",topic=\"t\"} 2\n\
             d_seconds_bucket{le=\"1\",topic=\"t\"} 5\n\
             d_seconds_bucket{le=\"+Inf\",topic=\"t\"} 6\n\
             d_seconds_sum{topic=\"t\"} 2.75\n\
             d_seconds_count{topic=\"t\"} 6\n"
        );
    }

    #[test]
    fn renders_exact_text_for_core_families_and_extras() {
        let m = Metrics::new(2);
        let c0 = m.core(0);
        let c1 = m.core(1);
        c0.incr_http(Route::Webhook, 202);
        c1.incr_http(Route::Webhook, 202);
        c1.incr_http(Route::Webhook, 503);
        c0.incr_http(Route::Unmatched, 418);
        c0.incr_ingest(true);
        c1.incr_backpressure(Dimension::Ingest, Action::Reject);
        c0.incr_backpressure(Dimension::Ingest, Action::Closed); // off-contract: shown once > 0
        c0.incr_connections_accepted();
        c1.incr_connections_accepted();
        c1.incr_connections_refused(ConnRefusal::PerCoreCap);
        c0.incr_timeout(TimeoutKind::Idle);
        c0.set_connections_open(2);

        let mut extra = |w: &mut PromWriter| {
            w.gauge(
                "sluice_wal_pending_events",
                "Committed events not yet done.",
                7.0,
            );
            w.header("sluice_empty_total", "Nothing yet.", MetricType::Counter);
            w.buffer_mut()
                .push_str("# TYPE preformatted gauge\npreformatted 1\n");
        };
        let text = m.render(&mut extra);
        assert_eq!(text, crate::metrics::render(&m, &mut extra));
        let expected = "\
# HELP harn_backpressure_events_total Backpressure decisions by dimension and action.
# TYPE harn_backpressure_events_total counter
harn_backpressure_events_total{action=\"admit\",dimension=\"ingest\"} 1
harn_backpressure_events_total{action=\"reject\",dimension=\"ingest\"} 1
harn_backpressure_events_total{action=\"closed\",dimension=\"ingest\"} 1
harn_backpressure_events_total{action=\"opened\",dimension=\"circuit\"} 0
harn_backpressure_events_total{action=\"fail_fast\",dimension=\"circuit\"} 0
harn_backpressure_events_total{action=\"half_open_probe\",dimension=\"circuit\"} 0
harn_backpressure_events_total{action=\"closed\",dimension=\"circuit\"} 0
harn_backpressure_events_total{action=\"paused\",dimension=\"destination\"} 0
# HELP sluice_http_requests_total HTTP requests answered, by route and status.
# TYPE sluice_http_requests_total counter
sluice_http_requests_total{route=\"webhook\",status=\"202\"} 2
sluice_http_requests_total{route=\"webhook\",status=\"503\"} 1
sluice_http_requests_total{route=\"unmatched\",status=\"other\"} 1
# HELP sluice_connections_accepted_total Connections accepted.
# TYPE sluice_connections_accepted_total counter
sluice_connections_accepted_total 2
# HELP sluice_connections_refused_total Connections refused at accept, by reason.
# TYPE sluice_connections_refused_total counter
sluice_connections_refused_total{reason=\"per_core_cap\"} 1
sluice_connections_refused_total{reason=\"accept_error\"} 0
sluice_connections_refused_total{reason=\"fd_limit\"} 0
# HELP sluice_connections_timed_out_total Connections closed by a timeout, by kind.
# TYPE sluice_connections_timed_out_total counter
sluice_connections_timed_out_total{kind=\"header\"} 0
sluice_connections_timed_out_total{kind=\"body\"} 0
sluice_connections_timed_out_total{kind=\"idle\"} 1
sluice_connections_timed_out_total{kind=\"write\"} 0
# HELP sluice_connections_open Open connections, per worker core.
# TYPE sluice_connections_open gauge
sluice_connections_open{core=\"0\"} 2
sluice_connections_open{core=\"1\"} 0
# HELP sluice_commit_queued_records Records in a core's next group commit and with its commit helper (bound: 2 x wal.max_batch ingest records plus the pump's).
# TYPE sluice_commit_queued_records gauge
sluice_commit_queued_records{core=\"0\"} 0
sluice_commit_queued_records{core=\"1\"} 0
# HELP sluice_link_waiting_items Jobs and outcomes a core holds because another core's inbound ring is full (bound: the jobs the core holds; offered again every loop turn).
# TYPE sluice_link_waiting_items gauge
sluice_link_waiting_items{core=\"0\"} 0
sluice_link_waiting_items{core=\"1\"} 0
# HELP sluice_event_shelf_records Finished event records a core keeps for its ingest to build the next ones in, so an accepted event allocates only its body (bound: 256 per core, each at most 3 x 256 bytes of ids and 8 KiB of headers).
# TYPE sluice_event_shelf_records gauge
sluice_event_shelf_records{core=\"0\"} 0
sluice_event_shelf_records{core=\"1\"} 0
# HELP sluice_outbound_timer_entries Entries in a core's outbound timer heaps (attempt deadlines and idle expiry), live and not yet dropped (bound: 2 x the core's open outbound connections + 128).
# TYPE sluice_outbound_timer_entries gauge
sluice_outbound_timer_entries{core=\"0\"} 0
sluice_outbound_timer_entries{core=\"1\"} 0
# HELP sluice_io_retired_connections io_uring: closed connections whose last response bytes are still being sent (bound: 4096 per core, 2 s each; 0 on mio).
# TYPE sluice_io_retired_connections gauge
sluice_io_retired_connections{core=\"0\"} 0
sluice_io_retired_connections{core=\"1\"} 0
# HELP sluice_io_registered_files io_uring: sockets in a core's registered file table, whose operations skip the kernel's descriptor lookup (bound: 4096 per core, at most RLIMIT_NOFILE; 0 on mio).
# TYPE sluice_io_registered_files gauge
sluice_io_registered_files{core=\"0\"} 0
sluice_io_registered_files{core=\"1\"} 0
# HELP sluice_io_receive_pool_empty_total io_uring: receives that found the core's receive-buffer pool (128 x 32 KiB) empty and were re-armed.
# TYPE sluice_io_receive_pool_empty_total counter
sluice_io_receive_pool_empty_total 0
# HELP sluice_connections_read_paused_total Times a connection stopped being read because its queued responses reached a bound.
# TYPE sluice_connections_read_paused_total counter
sluice_connections_read_paused_total{bound=\"pipeline_depth\"} 0
sluice_connections_read_paused_total{bound=\"response_bytes\"} 0
# HELP sluice_body_budget_refusals_total Request bodies refused (503 body_budget) because max_inflight_body_bytes could not cover them.
# TYPE sluice_body_budget_refusals_total counter
sluice_body_budget_refusals_total 0
# HELP sluice_wal_pending_events Committed events not yet done.
# TYPE sluice_wal_pending_events gauge
sluice_wal_pending_events 7
# HELP sluice_empty_total Nothing yet.
# TYPE sluice_empty_total counter
# TYPE preformatted gauge
preformatted 1
";
        assert_eq!(text, expected);
    }
}
