//! `sluice loadgen`: an open-loop HTTP/1.1 load generator.
//!
//! Requests arrive on a schedule (a fixed `--rate` or a piecewise `--schedule`) whatever the
//! server does; each has an intended send time and its latency is measured from it, so a slow
//! server cannot slow the generator down and hide its own queueing (coordinated omission, Gil
//! Tene, "How NOT to measure latency"). The arrivals are split over a few threads, each with a
//! `mio` poll and its share of keep-alive connections (`client`).
//!
//! Refusals (429/503) are dropped, re-sent after `Retry-After` × uniform [1, 1.5) (`honor`) or at
//! once (`immediate`, a retry storm); re-sends are new arrivals counted as `retries`, at most
//! `--max-retries` per request.
//!
//! SIGINT/SIGTERM end the run at once (requests still in flight are not counted); otherwise a
//! thread ends when its arrivals are issued and answered, timed out or dropped, and at the latest
//! `--timeout` + 1 s after the arrival window.
//!
//! Output: a per-second timeline (`--timeline-out`, CSV or JSON, see `timeline`) and a JSON
//! summary on stdout with latency percentiles from fixed-memory histograms.
//!
//! Bounds: every run ends (`--requests` and/or `--duration` is required; at most
//! [`MAX_REQUESTS`] and [`MAX_DURATION`]); connections ≤ [`MAX_CONNECTIONS`]; in flight ≤
//! connections; queued arrivals and scheduled retries ≤ `--queue-limit` per thread.
#![forbid(unsafe_code)]

mod client;
mod response;
mod timeline;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

pub use self::client::OnRefusal;
use self::client::Plan;
use self::timeline::Aggregator;
use super::histogram::Histogram;
use super::spec::{parse_span, Schedule, Targets};
use super::ToolError;

pub use self::timeline::{Counts, Row};

/// Hard cap on `--connections`.
pub const MAX_CONNECTIONS: usize = 10_000;
/// Hard cap on `--requests`.
pub const MAX_REQUESTS: u64 = 100_000_000;
/// Hard cap on `--duration` (and the run length when only `--requests` is given).
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
/// Largest body.
const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;
/// Delay between starting the threads and the first arrival, so connections are open.
const WARMUP: Duration = Duration::from_millis(100);

/// Timeline file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Csv,
    Json,
}

/// `sluice loadgen` arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct LoadgenArgs {
    /// Base URL: `http://HOST:PORT` (no TLS).
    #[arg(long)]
    pub url: String,
    /// Constant arrival rate (requests per second).
    #[arg(long, conflicts_with = "schedule")]
    pub rate: Option<f64>,
    /// Piecewise rate: `START:RATE,...` from `0s`, e.g. `0s:200,10s:1200,40s:200`.
    #[arg(long)]
    pub schedule: Option<String>,
    /// Stop issuing arrivals after this many (retries not included).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Stop issuing arrivals after this long (e.g. `30s`).
    #[arg(long)]
    pub duration: Option<String>,
    /// Keep-alive connections (≤ 10000).
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Generator threads (default: min(2, cores)).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Weighted paths: `/webhooks/a=3,/webhooks/b=1`.
    #[arg(long, default_value = "/")]
    pub target: String,
    /// Body size in bytes (a JSON object padded to this size).
    #[arg(long, default_value_t = 256, conflicts_with = "body_file")]
    pub body_size: usize,
    /// Body read from a file (sent as is).
    #[arg(long)]
    pub body_file: Option<std::path::PathBuf>,
    /// Content-Type of the body.
    #[arg(long, default_value = "application/json")]
    pub content_type: String,
    /// Client timeout, counted from the intended send time.
    #[arg(long, default_value = "5s")]
    pub timeout: String,
    /// What to do with 429/503: drop, honor (Retry-After with jitter) or immediate.
    #[arg(long, value_enum, default_value = "drop")]
    pub on_refusal: OnRefusal,
    /// Most re-sends of one request.
    #[arg(long, default_value_t = 10)]
    pub max_retries: u32,
    /// Queued-but-unsent arrivals per thread; past it: `dropped_client`.
    #[arg(long, default_value_t = 100_000)]
    pub queue_limit: usize,
    /// Per-second timeline file.
    #[arg(long)]
    pub timeline_out: Option<std::path::PathBuf>,
    /// Timeline format.
    #[arg(long, value_enum, default_value = "csv")]
    pub format: Format,
    /// PRNG seed (target choice, jitter).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Latency percentiles of one class of responses, in milliseconds.
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    fn of(h: &Histogram) -> Latency {
        let ms = |us: u64| us as f64 / 1000.0;
        Latency {
            count: h.count(),
            mean_ms: h.mean().round() / 1000.0,
            p50_ms: ms(h.quantile(0.5)),
            p90_ms: ms(h.quantile(0.9)),
            p99_ms: ms(h.quantile(0.99)),
            p999_ms: ms(h.quantile(0.999)),
            max_ms: ms(h.max()),
        }
    }
}

/// The summary printed on stdout.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub elapsed_s: f64,
    pub target_rate: Option<f64>,
    /// Sent requests per second over the arrival window.
    pub achieved_rate: f64,
    pub on_refusal: OnRefusal,
    pub totals: Counts,
    /// 2xx latency, from the intended send time.
    pub accepted: Latency,
    /// 429/503 latency.
    pub refused: Latency,
    /// Shortest and longest wait between a refusal and its re-send (ms).
    pub retry_delay_min_ms: Option<f64>,
    pub retry_delay_max_ms: Option<f64>,
    /// Timeline rows (seconds).
    pub seconds: usize,
}

fn usage(msg: impl Into<String>) -> ToolError {
    ToolError::Usage(msg.into())
}

fn body_of(args: &LoadgenArgs) -> Result<Vec<u8>, ToolError> {
    if let Some(path) = &args.body_file {
        let body = std::fs::read(path)
            .map_err(|e| usage(format!("--body-file {}: {e}", path.display())))?;
        if body.len() > MAX_BODY_BYTES {
            return Err(usage("--body-file is over 10 MiB"));
        }
        return Ok(body);
    }
    let n = args.body_size;
    if n > MAX_BODY_BYTES {
        return Err(usage("--body-size is over 10 MiB"));
    }
    // `{"p":"xxx…"}` of exactly n bytes when there is room for it.
    if n >= 8 {
        let mut b = br#"{"p":""#.to_vec();
        b.resize(n - 2, b'x');
        b.extend_from_slice(br#""}"#);
        return Ok(b);
    }
    Ok(vec![b'x'; n])
}

/// Parses `http://host:port[/]` into a socket address and the `Host` header value.
fn parse_url(url: &str) -> Result<(SocketAddr, String), ToolError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| usage(format!("--url {url:?} must start with http://")))?;
    let authority = rest.trim_end_matches('/');
    if authority.contains('/') || authority.is_empty() {
        return Err(usage(format!(
            "--url {url:?}: give only scheme, host and port (paths go in --target)"
        )));
    }
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let addr = with_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| usage(format!("--url {url:?}: cannot resolve {with_port}")))?;
    Ok((addr, authority.to_string()))
}

fn encode(path: &str, host: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// Validates the arguments into a plan (minus the start time) and the thread count.
fn plan(args: &LoadgenArgs) -> Result<(Plan, usize), ToolError> {
    let schedule = match (&args.rate, &args.schedule) {
        (Some(r), None) => Schedule::constant(*r).map_err(usage)?,
        (None, Some(s)) => Schedule::parse(s).map_err(usage)?,
        _ => return Err(usage("give exactly one of --rate and --schedule")),
    };
    if args.requests.is_none() && args.duration.is_none() && schedule.end().is_none() {
        return Err(usage(
            "give --requests and/or --duration: every run is bounded",
        ));
    }
    let requests = args.requests.unwrap_or(MAX_REQUESTS);
    if requests == 0 || requests > MAX_REQUESTS {
        return Err(usage(format!("--requests must be in 1..={MAX_REQUESTS}")));
    }
    let duration = match &args.duration {
        Some(d) => parse_span(d).map_err(usage)?,
        None => schedule.end().unwrap_or(MAX_DURATION).min(MAX_DURATION),
    };
    if duration.is_zero() || duration > MAX_DURATION {
        return Err(usage("--duration must be in (0s, 3600s]"));
    }
    let timeout = parse_span(&args.timeout).map_err(usage)?;
    if timeout.is_zero() || timeout > Duration::from_secs(600) {
        return Err(usage("--timeout must be in (0s, 600s]"));
    }
    if args.connections == 0 || args.connections > MAX_CONNECTIONS {
        return Err(usage(format!(
            "--connections must be in 1..={MAX_CONNECTIONS}"
        )));
    }
    if args.queue_limit == 0 || args.queue_limit > 10_000_000 {
        return Err(usage("--queue-limit must be in 1..=10000000"));
    }
    if args.max_retries > 1000 {
        return Err(usage("--max-retries must be ≤ 1000"));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = args.threads.unwrap_or(cores.min(2));
    if threads == 0 || threads > 64 {
        return Err(usage("--threads must be in 1..=64"));
    }
    let threads = threads.min(args.connections);
    let targets = Targets::parse(&args.target).map_err(usage)?;
    let (addr, host) = parse_url(&args.url)?;
    if args.content_type.bytes().any(|b| b.is_ascii_control()) {
        return Err(usage("--content-type has control characters"));
    }
    let body = body_of(args)?;
    let requests_bytes = (0..targets.len())
        .map(|i| encode(targets.path(i), &host, &args.content_type, &body))
        .collect();
    let plan = Plan {
        addr,
        requests: requests_bytes,
        targets,
        schedule,
        max_arrivals: requests,
        end: duration,
        timeout,
        on_refusal: args.on_refusal,
        max_retries: args.max_retries,
        queue_cap: args.queue_limit,
        threads,
        seed: args.seed,
        start: Instant::now(),
    };
    Ok((plan, threads))
}

/// Runs the load, writes the timeline file, and returns the summary (the caller prints it).
pub fn run(args: &LoadgenArgs) -> Result<Summary, ToolError> {
    let (mut plan, threads) = plan(args)?;
    let mut timeline_file = match &args.timeline_out {
        Some(path) => Some(BufWriter::new(File::create(path).map_err(|e| {
            ToolError::Io {
                what: "creating the timeline file",
                source: e,
            }
        })?)),
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).map_err(ToolError::io("signals"))?;
    }
    plan.start = Instant::now() + WARMUP;
    let plan = Arc::new(plan);
    let agg = Arc::new(Aggregator::new(threads));
    let mut handles = Vec::new();
    for id in 0..threads {
        let share = args.connections / threads + usize::from(id < args.connections % threads);
        let (plan, agg, stop) = (plan.clone(), agg.clone(), stop.clone());
        let h = std::thread::Builder::new()
            .name(format!("loadgen-{id}"))
            .spawn(move || client::run(id, share, &plan, &agg, &stop))
            .map_err(ToolError::io("starting a thread"))?;
        handles.push(h);
    }
    let mut totals = client::Totals::default();
    let mut failure = None;
    for h in handles {
        match h.join() {
            Ok(Ok(t)) => {
                totals.counts.add(&t.counts);
                totals.accepted.merge(&t.accepted);
                totals.refused.merge(&t.refused);
                totals.retry_delay = match (totals.retry_delay, t.retry_delay) {
                    (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
                    (x, y) => x.or(y),
                };
            }
            Ok(Err(e)) => failure = Some(ToolError::io("generator thread")(e)),
            Err(_) => {
                failure = Some(ToolError::io("generator thread")(std::io::Error::other(
                    "panicked",
                )))
            }
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let elapsed = plan.start.elapsed();
    let rows: Vec<Row> = agg.rows();
    if let Some(out) = timeline_file.as_mut() {
        let written = match args.format {
            Format::Csv => timeline::write_csv(out, &rows),
            Format::Json => timeline::write_json(out, &rows),
        };
        written
            .and_then(|()| out.flush())
            .map_err(ToolError::io("writing the timeline"))?;
    }
    let window = plan.end.min(elapsed).as_secs_f64().max(1e-9);
    let ms = |d: Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
    Ok(Summary {
        elapsed_s: (elapsed.as_secs_f64() * 1e3).round() / 1e3,
        target_rate: args.rate,
        achieved_rate: ((totals.counts.sent as f64 / window) * 10.0).round() / 10.0,
        on_refusal: args.on_refusal,
        totals: totals.counts,
        accepted: Latency::of(&totals.accepted),
        refused: Latency::of(&totals.refused),
        retry_delay_min_ms: totals.retry_delay.map(|d| ms(d.0)),
        retry_delay_max_ms: totals.retry_delay.map(|d| ms(d.1)),
        seconds: rows.len(),
    })
}

/// The summary as pretty JSON.
pub fn summary_json(s: &Summary) -> String {
    serde_json::to_string_pretty(s).unwrap_or_else(|_| "{}".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: LoadgenArgs,
    }

    fn args(extra: &[&str]) -> LoadgenArgs {
        let mut v = vec!["loadgen", "--url", "http://127.0.0.1:9"];
        v.extend_from_slice(extra);
        Cli::try_parse_from(v).expect("parse").args
    }

    #[test]
    fn runs_must_be_bounded_and_valid() {
        assert!(plan(&args(&["--rate", "10"])).is_err(), "unbounded");
        assert!(plan(&args(&["--rate", "10", "--requests", "5"])).is_ok());
        assert!(plan(&args(&["--rate", "10", "--duration", "2h"])).is_err());
        assert!(
            plan(&args(&["--schedule", "0s:10,5s:0"])).is_ok(),
            "schedule ends"
        );
        assert!(plan(&args(&[
            "--rate",
            "10",
            "--requests",
            "5",
            "--connections",
            "10001"
        ]))
        .is_err());
        assert!(plan(&args(&["--requests", "5"])).is_err(), "no rate");
        let (p, threads) = plan(&args(&[
            "--rate",
            "10",
            "--requests",
            "5",
            "--connections",
            "1",
        ]))
        .unwrap();
        assert_eq!(threads, 1);
        assert_eq!(p.end, MAX_DURATION);
    }

    #[test]
    fn bodies_and_urls() {
        let a = args(&["--body-size", "100"]);
        let b = body_of(&a).unwrap();
        assert_eq!(b.len(), 100);
        assert!(serde_json::from_slice::<serde_json::Value>(&b).is_ok());
        assert_eq!(body_of(&args(&["--body-size", "3"])).unwrap(), b"xxx");
        let (addr, host) = parse_url("http://127.0.0.1:8080/").unwrap();
        assert_eq!((addr.port(), host.as_str()), (8080, "127.0.0.1:8080"));
        assert!(parse_url("https://x:1").is_err());
        assert!(parse_url("http://127.0.0.1:1/webhooks").is_err());
    }
}
