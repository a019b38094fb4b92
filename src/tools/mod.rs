//! Load tools shipped with the binary: an open-loop load generator (`sluice loadgen`)
//! and a capacity-modelled third-party server (`sluice mock-downstream`). They exist so that
//! performance claims and tuning advice are reproducible with the project's own code.
//!
//! - `histogram`: fixed-memory log-linear latency histogram (HdrHistogram style) for the
//!   loadgen's percentiles; not the server's Prometheus histogram (`crate::metrics::histogram`).
//! - `spec`: parsers for spans, rate schedules, weighted targets, service times; a PRNG.
//! - `loadgen`: the load generator (arrivals, connections, timeline, summary).
//! - `mock_downstream`: the mock third party.
#![forbid(unsafe_code)]

pub mod histogram;
pub mod loadgen;
pub mod mock_downstream;
pub mod progress;
pub mod spec;

use std::fmt;

/// Why a tool could not run. `Usage` maps to exit code 2, `Io` to 1.
#[derive(Debug)]
pub enum ToolError {
    /// Invalid arguments.
    Usage(String),
    /// An OS call failed.
    Io {
        what: &'static str,
        source: std::io::Error,
    },
}

impl ToolError {
    fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> ToolError {
        move |source| ToolError::Io { what, source }
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            ToolError::Usage(_) => 2,
            ToolError::Io { .. } => 1,
        }
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::Usage(msg) => f.write_str(msg),
            ToolError::Io { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for ToolError {}
