//! What dispatch needs to know, as `config` validated it: each destination ([`DestinationSpec`]:
//! its handler, permits, timeout, rate, circuit, retry schedule, headers, signing key, TLS,
//! shared budget and batching), each trigger's route to it with its flow-control gates ([`TriggerRoute`],
//! gates in [`crate::dispatch::flow::spec`]), and the few server settings the dispatcher reads
//! ([`DispatchSpec`]).
//!
//! `config` parses and validates the manifest into these (`config::dispatch`,
//! `Config::dispatch_spec`); dispatch imports nothing of `config`. A reload hands each core a new
//! [`DispatchSpec`] and the dispatcher diffs it against the running one
//! (`Dispatcher::reconfigure`).
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::Duration;

use crate::dispatch::deliver::rate::RateSpec;
use crate::dispatch::flow::spec::{FlowBounds, FlowSpec};

/// Destination ids a run's reloads may add beyond the start-up destinations: the bound of every
/// per-destination table (each core's states, the metric cells), removed destinations included.
pub const RELOAD_DESTINATIONS: usize = 64;

pub use crate::net::http::client::uri::HandlerUri;

/// Circuit breaker settings of one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitSpec {
    pub failures: u32,
    pub open_for: Duration,
    pub on_open: OnOpen,
}

/// `circuit.on_open`: the fate of events while a destination's circuit is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnOpen {
    /// Dead-letter them as `circuit_open` (Harn `fail_fast`).
    #[default]
    Dlq,
    /// Keep them pending on the owner core until the half-open probe succeeds.
    Hold,
}

/// Retry schedule of one destination (`base <= cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySpec {
    pub max_attempts: u32,
    pub base: Duration,
    pub cap: Duration,
}

/// `max_in_flight = "auto"`: the adaptive limit's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveSpec {
    pub min: usize,
    pub cap: usize,
}

/// The TLS settings of an `https://` destination.
#[derive(Debug, Clone)]
pub struct TlsSpec {
    /// What the outbound pool needs to open connections.
    pub client: crate::net::tls::TlsClient,
    /// The settings as written (for equality and display).
    pub source: TlsSource,
}

/// The settings a [`TlsSpec`] was built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSource {
    pub ca_file: Option<PathBuf>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    pub server_name: String,
}

impl PartialEq for TlsSpec {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}
impl Eq for TlsSpec {}

/// `batch = { max_events, max_bytes, linger }`: the destination takes its events in batched
/// calls ([`crate::dispatch::deliver::batch`]). `config` validated the ranges
/// ([`BatchSpec::MAX_EVENTS`], [`BatchSpec::MIN_BYTES`]..=[`BatchSpec::MAX_BYTES`],
/// linger ≤ [`BatchSpec::MAX_LINGER`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSpec {
    /// Most events in one call, and most events a batch being filled holds in memory.
    pub max_events: usize,
    /// Most bytes of one call's body (the batch JSON), unless a single event alone is larger:
    /// it is then sent alone.
    pub max_bytes: usize,
    /// Longest a batch waits for more members after its first one joined.
    pub linger: Duration,
}

impl BatchSpec {
    /// Largest `max_events`.
    pub const MAX_EVENTS: usize = 10_000;
    /// Smallest `max_bytes` (1 KiB).
    pub const MIN_BYTES: usize = 1024;
    /// Largest `max_bytes` (64 MiB).
    pub const MAX_BYTES: usize = 64 << 20;
    /// Largest `linger` (1 minute).
    pub const MAX_LINGER: Duration = Duration::from_secs(60);
    /// Default `max_events`.
    pub const DEFAULT_EVENTS: usize = 100;
    /// Default `max_bytes` (1 MiB).
    pub const DEFAULT_BYTES: usize = 1 << 20;
    /// Default `linger`.
    pub const DEFAULT_LINGER: Duration = Duration::from_millis(5);
}

/// One destination: everything the owner core needs to deliver to a handler URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationSpec {
    pub handler: HandlerUri,
    /// The fixed limit, or with `adaptive` the cap (the most permits there can ever be).
    pub max_in_flight: usize,
    /// `Some` for `max_in_flight = "auto"`.
    pub adaptive: Option<AdaptiveSpec>,
    pub timeout: Duration,
    pub rate: Option<RateSpec>,
    pub circuit: CircuitSpec,
    /// Extra request headers, names as written, in name order.
    pub headers: Vec<(String, String)>,
    pub retry: RetrySpec,
    /// Decoded Standard Webhooks signing key, when `signing_secret` is set.
    pub signing_key: Option<crate::sign::Secret>,
    /// Where `signing_secret` is read from, as a TOML inline table (`{ env = "NAME" }`, what
    /// `sluice check` prints); never the key.
    pub signing_secret: Option<String>,
    /// TLS client settings; `Some` exactly for `https://` handlers.
    pub tls: Option<TlsSpec>,
    /// `Some` when the budget (`max_in_flight`, `rate`) is shared through Redis.
    pub shared: Option<crate::cluster::SharedSpec>,
    /// `Some`: deliveries go in batched calls (`batch = { … }`); `None`: one event per call.
    pub batch: Option<BatchSpec>,
}

impl DestinationSpec {
    /// The permits at start: `max_in_flight`, or the adaptive limit's starting value.
    pub fn initial_permits(&self) -> usize {
        match self.adaptive {
            Some(a) => crate::dispatch::deliver::adaptive::INITIAL.clamp(a.min, a.cap),
            None => self.max_in_flight,
        }
    }
}

/// One trigger as dispatch sees it: its id, its destination and its gates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerRoute {
    pub id: String,
    /// Index into [`DispatchSpec::destinations`] of the trigger's handler, if it has one.
    pub dest: Option<usize>,
    /// Flow-control gates (none by default).
    pub flow: FlowSpec,
}

/// Everything one core's dispatcher reads, built by `config` (`Config::dispatch_spec`) at start
/// and at each reload. Destinations are laid out by their stable id (`ops::reload::ids`).
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchSpec {
    /// One per destination id (at most the start-up ones plus [`RELOAD_DESTINATIONS`]).
    pub destinations: Vec<DestinationSpec>,
    /// In manifest order.
    pub triggers: Vec<TriggerRoute>,
    /// `[flow]`: bounds of the per-core flow-control state.
    pub flow: FlowBounds,
    /// Worker cores (a destination's owner core is `placement::owner_core(uri, workers)`).
    pub workers: usize,
    /// Where the gates' window state is saved (`<data_dir>/flow`).
    pub flow_dir: PathBuf,
    /// How long an idle outbound keep-alive connection is kept.
    pub idle_timeout: Duration,
}

impl DispatchSpec {
    /// Per destination id: true when a trigger names the destination (false: removed by a
    /// reload, kept only to finish the events accepted for it).
    pub fn in_use(&self) -> Vec<bool> {
        let mut used = vec![false; self.destinations.len()];
        for d in self.triggers.iter().filter_map(|t| t.dest) {
            used[d] = true;
        }
        used
    }

    /// The triggers with at least one gate, by id (what a reload compares to decide whether
    /// the gates must be re-keyed).
    pub fn gated(&self) -> Vec<(&str, &FlowSpec)> {
        let mut v: Vec<_> = self
            .triggers
            .iter()
            .filter(|t| !t.flow.is_empty())
            .map(|t| (t.id.as_str(), &t.flow))
            .collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::flow::spec::{KeySelector, SingletonGate};

    fn route(id: &str, dest: Option<usize>, gated: bool) -> TriggerRoute {
        let flow = FlowSpec {
            singleton: gated.then_some(SingletonGate {
                key: KeySelector::Global,
            }),
            ..FlowSpec::default()
        };
        TriggerRoute {
            id: id.into(),
            dest,
            flow,
        }
    }

    fn spec(destinations: usize, triggers: Vec<TriggerRoute>) -> DispatchSpec {
        let handler = |i: usize| HandlerUri {
            kind: "http",
            tls: false,
            host: "h".into(),
            port: 80,
            authority: "h".into(),
            path_and_query: format!("/{i}"),
            uri: format!("http://h/{i}"),
        };
        let dest = |i| DestinationSpec {
            handler: handler(i),
            max_in_flight: 4,
            adaptive: None,
            timeout: Duration::from_secs(1),
            rate: None,
            circuit: CircuitSpec {
                failures: 5,
                open_for: Duration::from_secs(60),
                on_open: OnOpen::Dlq,
            },
            headers: Vec::new(),
            retry: RetrySpec {
                max_attempts: 3,
                base: Duration::from_secs(1),
                cap: Duration::from_secs(10),
            },
            signing_key: None,
            signing_secret: None,
            tls: None,
            shared: None,
            batch: None,
        };
        DispatchSpec {
            destinations: (0..destinations).map(dest).collect(),
            triggers,
            flow: FlowBounds {
                max_gate_keys: 10,
                max_held: 10,
                max_held_per_key: 10,
                max_held_bytes: 0,
            },
            workers: 1,
            flow_dir: PathBuf::from("flow"),
            idle_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_pump_routes_each_trigger_to_its_destination_and_each_destination_to_its_owner() {
        use crate::dispatch::placement::owner_core;
        use crate::dispatch::pump::{Route, Routes};
        let mut s = spec(2, vec![route("a", Some(1), false), route("b", None, false)]);
        s.workers = 4;
        let r = Routes::from_spec(&s, "default");
        assert_eq!(r.handlers, [("a".into(), Some(1)), ("b".into(), None)]);
        let want: Vec<Route> = (0..2)
            .map(|i| Route {
                owner: owner_core(&format!("http://h/{i}"), 4),
                uri: format!("http://h/{i}"),
            })
            .collect();
        assert_eq!(r.destinations, want);
        assert_eq!(r.default_trigger, "default");
    }

    #[test]
    fn a_destination_no_trigger_names_is_not_in_use() {
        let s = spec(3, vec![route("a", Some(2), false), route("b", None, false)]);
        assert_eq!(s.in_use(), vec![false, false, true]);
    }

    #[test]
    fn gated_lists_triggers_with_gates_by_id() {
        let s = spec(
            1,
            vec![
                route("z", Some(0), true),
                route("plain", Some(0), false),
                route("a", None, true),
            ],
        );
        let ids: Vec<&str> = s.gated().into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, vec!["a", "z"]);
        let mut other = s.clone();
        other.triggers.reverse();
        assert_eq!(s.gated(), other.gated(), "manifest order does not matter");
        other.triggers[0].flow = FlowSpec::default();
        assert_ne!(s.gated(), other.gated(), "a gate removed is a change");
    }
}
