//! Configuration: the TOML manifest plus environment, validated once into an immutable [`Config`].
//!
//! Two stages, as in ripgrep and raft-engine: [`RawManifest`] is the serde image of the file, with
//! every field documented (default, range); [`Config::build`] validates it, overlays the
//! environment and command-line overrides, and produces the immutable config the runtime reads.
//! Invalid input fails startup with a message naming the key; nothing is silently clamped.
//!
//! Precedence, highest first: command-line flag, environment variable, manifest, embedded default.
//! The server runs on embedded defaults with no manifest at all.
//!
//! Environment variables (the Harn orchestrator's contract):
//!
//! | variable | manifest key | default |
//! |---|---|---|
//! | `HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY` | `[ingest] global_capacity` | 4096 |
//! | `HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY` | `[ingest] per_source_capacity` | 1024 |
//! | `HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC` | `[ingest] refill_per_sec` | 1024 |
//! | `HARN_ORCHESTRATOR_PUMP_MAX_OUTSTANDING` | `[orchestrator] pumps.max_outstanding` | 64 |
//! | `SLUICE_ADMIN_TOKEN` | (environment only; see [`auth`]) | unset: admin routes off |
//! | `SLUICE_IO` | `[server] io` | `auto` |
//!
//! Sections: `[server]` in `server.rs`, `[ingest]` (and its environment variables) in
//! `ingest.rs`, both re-exported here. Destinations, the pump and the backlog bounds are in [`dispatch`]. Per-trigger signature
//! verification and dedupe keys (`verify`, `secrets`, `tolerance`, `hmac`, `dedupe`) are
//! validated in [`auth`]. `[replication]` (off when absent) is validated in `replication.rs`
//! into replication's own `ReplicationSpec` ([`Config::replication`]).
//!
//! Layering inside `config`: this file assembles the sections; the sections import only each
//! other and the leaves (`error.rs`: [`ConfigError`] and the range/duration validators;
//! `overrides.rs`: [`Overrides`]; [`duration`]), never this file, so no section depends on the
//! whole. A check across sections takes the parts it compares (`flow::check_batch_sizes` the
//! triggers' gates, `shares::check_sums` their shares), not the config.

pub mod auth;
mod budgets;
pub mod dispatch;
pub mod duration;
mod error;
pub mod flow;
mod ingest;
mod overrides;
pub mod render;
mod replication;
mod server;
pub mod shared;
pub mod shares;
pub mod tls;
pub mod ui;

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// `[A-Za-z0-9._-]{1,64}`, the shape of a trigger id, a provider and a source (ingest's rule).
pub use crate::ingest::router::is_valid_id;
use crate::ingest::spec::{IngestSpec, MaxPending, TriggerSpec, WhenFull};
pub use auth::{TriggerAuth, ENV_ADMIN_TOKEN};
pub use dispatch::{
    AdaptiveSpec, CircuitSpec, DestinationSpec, DispatchConfig, HandlerUri, OnOpen, PumpConfig,
    RateSpec, RetrySpec, ENV_PUMP_MAX_OUTSTANDING,
};
pub use duration::parse_duration;
pub use error::ConfigError;
pub(crate) use error::{duration_or, err, ranged};
pub use flow::{FlowBounds, FlowSpec};
use ingest::build_ingest;
pub use ingest::{
    RawIngest, DEFAULT_STORED_HEADERS, ENV_GLOBAL_CAPACITY, ENV_PER_SOURCE_CAPACITY,
    ENV_REFILL_PER_SEC, MAX_STORED_HEADERS,
};
pub use overrides::Overrides;
use replication::build_replication;
pub use replication::{host_name, node_from_host, RawReplication};
use server::build_server;
pub use server::{RawServer, ServerConfig, ENV_IO};

/// `wal.commit`, for running one build's suites with either commit path.
pub const ENV_WAL_COMMIT: &str = "SLUICE_WAL_COMMIT";

/// `wal.commit = "ring"` only where a ring can commit: `fsync` durability on the `pwrite` path,
/// and a backend that may be io_uring (`auto` falls back to the helper on mio, with a log line).
fn check_commit_path(wal: &WalSettings, io: crate::net::io::IoMode) -> Result<(), ConfigError> {
    use crate::wal::{CommitPath, Durability, WritePath};
    if wal.commit != CommitPath::Ring {
        return Ok(());
    }
    if wal.durability != Durability::Fsync || wal.write_path != WritePath::Pwrite {
        return err(
            "wal.commit = \"ring\" needs wal.durability = \"fsync\" and wal.write_path = \"pwrite\" \
             (the ring submits a write linked to an fdatasync)"
                .to_string(),
        );
    }
    if io == crate::net::io::IoMode::Mio {
        return err(
            "wal.commit = \"ring\" needs the io_uring backend, but server.io is \"mio\""
                .to_string(),
        );
    }
    Ok(())
}

/// Replication is built on the commit helper's path: with `[replication]`, `wal.commit =
/// "ring"` (from the manifest or `SLUICE_WAL_COMMIT`) is a start-up error.
fn check_replication_commit(
    replication: Option<&crate::replication::ReplicationSpec>,
    wal: &WalSettings,
) -> Result<(), ConfigError> {
    if replication.is_some() && wal.commit == crate::wal::CommitPath::Ring {
        return err(
            "replication needs wal.commit = \"helper\" ([replication] is set, and wal.commit is \
             \"ring\", from the manifest or SLUICE_WAL_COMMIT)"
                .to_string(),
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Stage 1: the raw manifest.
// ---------------------------------------------------------------------------------------------

/// The manifest file as written. Unknown keys are errors (a typo must not silently become a
/// default).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawManifest {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub ingest: RawIngest,
    #[serde(default)]
    pub wal: RawWal,
    #[serde(default)]
    pub triggers: Vec<RawTrigger>,
    #[serde(default)]
    pub destinations: Vec<dispatch::RawDestination>,
    #[serde(default)]
    pub orchestrator: dispatch::RawOrchestrator,
    #[serde(default)]
    pub dispatch: dispatch::RawDispatch,
    #[serde(default)]
    pub flow: flow::RawFlowSection,
    /// `[replication]`: absent, replication is off (see [`RawReplication`]).
    #[serde(default)]
    pub replication: Option<RawReplication>,
}

/// `[wal]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWal {
    /// `fsync` (202 after fdatasync) or `os` (202 after the write reaches the page cache).
    /// Default: `fsync`.
    pub durability: Option<String>,
    /// Segment size in bytes. Default: 64 MiB. Range: the largest record for
    /// `server.max_body_bytes` (that body plus ≤ 265 KiB of ids and headers), at least 1 MiB,
    /// ..= 1 GiB.
    pub segment_bytes: Option<u64>,
    /// `pwrite` or `mmap`. Default: `pwrite` (see BENCHMARKS.md).
    pub write_path: Option<String>,
    /// Sized the ring to the single WAL writer of the layout before per-core logs; it sizes
    /// nothing now (each core commits its own log, bounded by `max_batch`) and is accepted only
    /// so old manifests still load, with a warning. Range: 2..=1_048_576.
    pub ring_capacity: Option<usize>,
    /// Most records in one group commit. Default: 1024. Range: 1..=65536.
    pub max_batch: Option<usize>,
    /// Who writes and syncs a core's own log: `"helper"` (the core's commit helper thread) or
    /// `"ring"` (the core's io_uring ring; needs `durability = "fsync"`, `write_path =
    /// "pwrite"` and the io_uring backend). Env `SLUICE_WAL_COMMIT`. Default: `"helper"`
    /// (BENCHMARKS.md says why).
    pub commit: Option<String>,
}

/// `[[triggers]]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTrigger {
    /// Unique trigger id, `[A-Za-z0-9._-]{1,64}`.
    pub id: String,
    /// Provider id; it is the event's source (and names its per-source bucket).
    pub provider: String,
    /// Exact request path, starting with `/`.
    pub path: String,
    /// Where the trigger's events are delivered: `http://host[:port][/path]`. Default: none
    /// (events are stored and marked done). See [`dispatch::parse_handler`].
    pub handler: Option<String>,
    /// Signature scheme; see [`auth`] for this and the four keys below.
    pub verify: Option<String>,
    pub secrets: Option<Vec<auth::RawSecretRef>>,
    pub tolerance: Option<String>,
    pub hmac: Option<auth::RawHmac>,
    pub dedupe: Option<auth::RawDedupe>,
    /// Flow-control gates; see [`flow`] for these eight keys.
    pub concurrency: Option<flow::RawConcurrency>,
    pub ordering: Option<flow::RawOrdering>,
    pub priority: Option<flow::RawPriority>,
    pub throttle: Option<flow::RawWindow>,
    pub rate_limit: Option<flow::RawWindow>,
    pub debounce: Option<flow::RawDebounce>,
    pub singleton: Option<flow::RawSingleton>,
    pub batch: Option<flow::RawBatch>,
    /// `"refuse"` (503 `queue_full`, the sender retries) or `"absorb"` (keep accepting into
    /// the WAL up to `dispatch.absorb_max_bytes` more, for senders that never retry). Default:
    /// `"absorb"` with `verify = "github"` (GitHub does not redeliver), `"refuse"` otherwise.
    pub when_backlog_full: Option<String>,
    /// Guaranteed share of the durable backlog, `{ events = N, bytes = B }`; see [`shares`].
    pub max_pending: Option<shares::RawMaxPending>,
}

// ---------------------------------------------------------------------------------------------
// Stage 2: the validated, immutable config.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct WalSettings {
    pub durability: crate::wal::Durability,
    pub segment_bytes: u64,
    pub write_path: crate::wal::WritePath,
    /// `wal.ring_capacity` as given (validated `2..=1048576`), or `None`. It sized the ring to
    /// the single WAL writer, which per-core logs replaced: it has no effect, and a start-up
    /// warning says so ([`Config::warnings`]) instead of ignoring it silently.
    pub ring_capacity: Option<usize>,
    pub max_batch: usize,
    /// `wal.commit`: the helper thread or the core's io_uring ring.
    pub commit: crate::wal::CommitPath,
    /// `serve --accept-wal-loss`: start although the WAL checkpoint says records are missing.
    pub accept_loss: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerConfig {
    pub id: String,
    pub provider: String,
    pub path: String,
    /// Index into [`Config::destinations`] of this trigger's handler, if it has one.
    pub handler: Option<usize>,
    /// Signature verification and dedupe (both off by default).
    pub auth: TriggerAuth,
    /// Flow-control gates (none by default).
    pub flow: FlowSpec,
    /// What this trigger's events do when the durable backlog is full.
    pub when_backlog_full: WhenFull,
    /// Guaranteed share of the durable backlog (`None` values: the default share).
    pub max_pending: MaxPending,
}

impl TriggerConfig {
    /// The trigger as ingest sees it: route, edge checks, backlog policy and share, and
    /// whether its events can reach a batch (its `batch` gate, or its handler's, among
    /// `destinations`).
    pub fn ingest_spec(&self, destinations: &[DestinationSpec]) -> TriggerSpec {
        let batching_handler = self
            .handler
            .and_then(|d| destinations.get(d))
            .is_some_and(|d| d.batch.is_some());
        TriggerSpec {
            id: self.id.clone(),
            provider: self.provider.clone(),
            path: self.path.clone(),
            verifier: self.auth.verify.clone(),
            dedupe: self.auth.dedupe,
            when_backlog_full: self.when_backlog_full,
            max_pending: self.max_pending,
            batched: self.flow.batch.is_some() || batching_handler,
        }
    }
}

/// The validated configuration. Built once at startup; never mutated.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerConfig,
    pub ingest: IngestSpec,
    pub wal: WalSettings,
    pub triggers: Vec<TriggerConfig>,
    /// One per distinct trigger handler URI, in order of first use; indices are stable.
    pub destinations: Vec<DestinationSpec>,
    pub pump: PumpConfig,
    pub dispatch: DispatchConfig,
    /// `[flow]`: bounds of the per-core flow-control state.
    pub flow: FlowBounds,
    /// `SLUICE_ADMIN_TOKEN`; `None`: the `/admin/` routes are off (404).
    pub admin_token: Option<crate::ingest::secrets::Secret>,
    /// `[replication]`: the JetStream mirror of each core's log; `None` (the default): off.
    pub replication: Option<crate::replication::ReplicationSpec>,
}

impl Config {
    /// Reads and parses the manifest at `path`.
    pub fn read_manifest(path: &Path) -> Result<RawManifest, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read config {}: {e}", path.display())))?;
        Self::parse_manifest(&text)
            .map_err(|e| ConfigError(format!("config {}: {}", path.display(), e.0)))
    }

    /// Parses manifest text.
    pub fn parse_manifest(text: &str) -> Result<RawManifest, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError(e.to_string()))
    }

    /// Validates `raw`, overlaying the environment (read through `env`) and `overrides`.
    pub fn build(
        raw: RawManifest,
        env: &dyn Fn(&str) -> Option<String>,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let ui_explicit = raw.server.ui.is_some();
        let mut server = build_server(raw.server, overrides)?;
        if overrides.io.is_none() {
            if let Some(v) = env(ENV_IO) {
                server.io = crate::net::io::IoMode::parse(&v)
                    .map_err(|e| ConfigError(format!("environment variable {ENV_IO}: {e}")))?;
            }
        }
        let mut ingest = build_ingest(raw.ingest, env, !raw.triggers.is_empty())?;
        let mut wal = build_wal(raw.wal, overrides, server.max_body_bytes)?;
        if let Some(v) = env(ENV_WAL_COMMIT) {
            wal.commit = v
                .parse()
                .map_err(|e| ConfigError(format!("environment variable {ENV_WAL_COMMIT}: {e}")))?;
        }
        check_commit_path(&wal, server.io)?;
        let replication = build_replication(raw.replication, &host_name)?;
        check_replication_commit(replication.as_ref(), &wal)?;
        let handlers: Vec<(String, Option<String>)> = raw
            .triggers
            .iter()
            .map(|t| (t.id.clone(), t.handler.clone()))
            .collect();
        let mut triggers = build_triggers(raw.triggers, env)?;
        let (destinations, handler_index) =
            dispatch::build_destinations(&handlers, raw.destinations, env)?;
        for (t, h) in triggers.iter_mut().zip(handler_index) {
            t.handler = h;
        }
        let pump = dispatch::build_pump(raw.orchestrator, env, overrides)?;
        let dispatch = dispatch::build_dispatch(raw.dispatch, wal.segment_bytes, server.workers)?;
        let flow = flow::build_flow_settings(raw.flow)?;
        flow::check_batch_sizes(triggers.iter().map(|t| (t.id.as_str(), &t.flow)), &flow)?;
        let trigger_shares: Vec<MaxPending> = triggers.iter().map(|t| t.max_pending).collect();
        shares::check_sums(&trigger_shares, ingest.default_route_max_pending, &dispatch)?;
        store_gate_headers(&triggers, &mut ingest.stored_headers)?;
        let admin_token = auth::admin_token(env)?;
        if ui_explicit && server.ui == ui::UiMode::Token && admin_token.is_none() {
            return err(format!(
                "server.ui = \"token\" needs the admin token: set {ENV_ADMIN_TOKEN}"
            ));
        }
        Ok(Config {
            server,
            ingest,
            wal,
            triggers,
            destinations,
            pump,
            dispatch,
            flow,
            admin_token,
            replication,
        })
    }

    /// Reads the manifest at `path` (embedded defaults when `None`) and validates it with the
    /// process environment and `overrides`: what `sluice serve` and `sluice check` start from,
    /// and what a reload re-reads.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let raw = match path {
            Some(p) => Self::read_manifest(p)?,
            None => RawManifest::default(),
        };
        Self::build(raw, &|k| std::env::var(k).ok(), overrides)
            .map_err(|e| ConfigError(format!("invalid configuration: {e}")))
    }

    /// Embedded defaults with the process environment: what `sluice serve` runs without a file.
    pub fn from_env_defaults() -> Result<Config, ConfigError> {
        Self::build(
            RawManifest::default(),
            &|k| std::env::var(k).ok(),
            &Overrides::default(),
        )
    }

    /// Start-up warnings: settings that are valid but cannot work as written (printed by
    /// `serve` on stderr). Today: a destination whose `max_in_flight` exceeds the pump's
    /// `max_outstanding`, i.e. permits it can never reach (the pump has at most
    /// `max_outstanding` jobs out in all); `wal.ring_capacity`, which no longer sizes anything;
    /// flow-control gates on a trigger without a handler (they never see an event).
    pub fn warnings(&self) -> Vec<String> {
        let cap = self.pump.max_outstanding;
        let mut warnings: Vec<String> = self
            .destinations
            .iter()
            .filter(|d| d.max_in_flight > cap)
            .map(|d| {
                let what = match d.adaptive {
                    Some(_) => "max_in_flight_cap",
                    None => "max_in_flight",
                };
                format!(
                    "destination {}: {what} = {} exceeds orchestrator.pumps.max_outstanding = {cap}; \
                     at most {cap} calls can be in flight",
                    d.handler.uri, d.max_in_flight
                )
            })
            .collect();
        for t in self.triggers.iter().filter(|t| t.handler.is_none()) {
            let gates = t.flow.names();
            if !gates.is_empty() {
                warnings.push(format!(
                    "trigger {:?}: {} {} no effect: the trigger has no handler, so its events \
                     are stored and marked done without a call (give it a handler, or remove \
                     the gates)",
                    t.id,
                    gates.join(", "),
                    if gates.len() == 1 { "has" } else { "have" }
                ));
            }
        }
        if let Some(n) = self.wal.ring_capacity {
            warnings.push(format!(
                "wal.ring_capacity = {n} has no effect: each core commits its own log; the group \
                 commit is bounded by wal.max_batch = {}",
                self.wal.max_batch
            ));
        }
        warnings
    }

    /// The triggers as ingest sees them, in config order (the router's, the checks' and the
    /// backlog shares' input; a reload rebuilds those from the new config's).
    pub fn ingest_triggers(&self) -> Vec<TriggerSpec> {
        self.triggers
            .iter()
            .map(|t| t.ingest_spec(&self.destinations))
            .collect()
    }

    /// Where the WAL segments live.
    pub fn wal_dir(&self) -> PathBuf {
        self.server.data_dir.join("wal")
    }

    /// The destinations whose budget is shared through Redis, as the cluster takes them.
    pub fn shared_destinations(&self) -> Vec<crate::cluster::SharedDestSpec> {
        let shared = self.destinations.iter().enumerate();
        shared
            .filter_map(|(dest, d)| {
                Some(crate::cluster::SharedDestSpec {
                    dest,
                    shared: d.shared.clone()?,
                    limit: d.max_in_flight,
                    rate: d.rate.map(|r| crate::cluster::SharedRate {
                        per_sec: r.per_sec,
                        burst: r.burst,
                    }),
                    uri: d.handler.uri.clone(),
                })
            })
            .collect()
    }
}

/// The headers the triggers' gate keys read, added to the stored set (a gate key can only
/// read headers stored with the event); room kept for the dedupe key when a trigger dedupes.
fn store_gate_headers(
    triggers: &[TriggerConfig],
    stored: &mut Vec<String>,
) -> Result<(), ConfigError> {
    for t in triggers {
        for h in t.flow.headers() {
            if !stored.iter().any(|s| s == h) {
                if stored.len() >= MAX_STORED_HEADERS {
                    return err(format!(
                        "trigger {:?}: a flow-control key reads header {h:?}, which would be \
                         stored header number {} besides content-type (at most {}: \
                         ingest.stored_headers and the headers gate keys read share the \
                         {MAX_STORED_HEADERS} stored per event, content-type included)",
                        t.id,
                        stored.len(),
                        MAX_STORED_HEADERS - 1
                    ));
                }
                stored.push(h.to_string());
            }
        }
    }
    if triggers.iter().any(|t| t.auth.dedupe.is_some()) && stored.len() >= MAX_STORED_HEADERS {
        return err(format!(
            "ingest.stored_headers and the headers flow-control keys read come to {} headers \
             besides content-type; with dedupe at most {} (the dedupe key is stored too)",
            stored.len() - 1,
            MAX_STORED_HEADERS - 2
        ));
    }
    Ok(())
}

fn build_wal(r: RawWal, o: &Overrides, max_body: u64) -> Result<WalSettings, ConfigError> {
    let durability = match o.durability.clone().or(r.durability) {
        None => crate::wal::Durability::default(),
        Some(t) => t
            .parse()
            .map_err(|e| ConfigError(format!("wal.durability {e}")))?,
    };
    let write_path = match r.write_path {
        None => crate::wal::WritePath::default(),
        Some(t) => t
            .parse()
            .map_err(|e| ConfigError(format!("wal.write_path {e}")))?,
    };
    // The largest record must fit in an empty segment.
    let min_segment = crate::wal::min_segment_bytes_for(max_body as usize);
    let segment_bytes = r.segment_bytes.unwrap_or(64 << 20);
    if segment_bytes < min_segment || segment_bytes > 1 << 30 {
        return err(format!(
            "wal.segment_bytes = {segment_bytes} is out of range ({min_segment}..={}): a segment must hold \
             the largest record (server.max_body_bytes = {max_body} plus up to {} bytes of head and commit marker)",
            1u64 << 30,
            crate::wal::max_record_bytes_for(0) + crate::wal::format::marker::MARKER_RECORD_BYTES
        ));
    }
    Ok(WalSettings {
        durability,
        segment_bytes,
        write_path,
        ring_capacity: r
            .ring_capacity
            .map(|v| ranged("wal.ring_capacity", Some(v), v, 2, 1 << 20))
            .transpose()?,
        max_batch: ranged("wal.max_batch", r.max_batch, 1024, 1, 65536)?,
        commit: match r.commit {
            None => crate::wal::CommitPath::default(),
            Some(t) => t
                .parse()
                .map_err(|e| ConfigError(format!("wal.commit {e}")))?,
        },
        accept_loss: o.accept_wal_loss,
    })
}

/// A trigger's id, provider and path: well-formed, not reserved, and not taken by an earlier
/// trigger (`out`).
fn check_trigger_route(t: &RawTrigger, out: &[TriggerConfig]) -> Result<(), ConfigError> {
    if !is_valid_id(&t.id) {
        return err(format!(
            "triggers: id {:?} must match [A-Za-z0-9._-]{{1,64}}",
            t.id
        ));
    }
    if t.id == crate::ingest::router::DEFAULT_TRIGGER_ID {
        return err(format!(
            "triggers: id {:?} is reserved for the default route POST /webhooks/{{source}}",
            t.id
        ));
    }
    if !is_valid_id(&t.provider) {
        return err(format!(
            "trigger {:?}: provider {:?} must match [A-Za-z0-9._-]{{1,64}}",
            t.id, t.provider
        ));
    }
    if !t.path.starts_with('/') || t.path.len() > 1024 || t.path.contains(['?', '#', ' ']) {
        return err(format!(
            "trigger {:?}: path {:?} must be an absolute path without query (≤ 1024 bytes)",
            t.id, t.path
        ));
    }
    if let Some(route) = crate::ingest::router::reserved_route(&t.path) {
        return err(format!(
            "trigger {:?}: path {:?} is taken by the built-in route {route} \
             (reserved: /healthz, /readyz, /metrics, /admin, /ui, /api and everything under them)",
            t.id, t.path
        ));
    }
    if let Some(other) = out.iter().find(|o| o.id == t.id) {
        return err(format!("triggers: id {:?} is defined twice", other.id));
    }
    if let Some(other) = out.iter().find(|o| o.path == t.path) {
        return err(format!(
            "triggers {:?} and {:?} both use path {:?}",
            other.id, t.id, t.path
        ));
    }
    Ok(())
}

fn build_triggers(
    raw: Vec<RawTrigger>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<TriggerConfig>, ConfigError> {
    let mut out: Vec<TriggerConfig> = Vec::with_capacity(raw.len());
    for t in raw {
        check_trigger_route(&t, &out)?;
        let auth = auth::build_trigger_auth(
            &t.id,
            auth::RawAuth {
                verify: t.verify.as_deref(),
                secrets: t.secrets.as_deref(),
                tolerance: t.tolerance.as_deref(),
                hmac: t.hmac.as_ref(),
                dedupe: t.dedupe.as_ref(),
            },
            env,
        )?;
        let flow = flow::build_flow(
            &t.id,
            flow::RawFlow {
                concurrency: t.concurrency,
                ordering: t.ordering,
                priority: t.priority,
                throttle: t.throttle,
                rate_limit: t.rate_limit,
                debounce: t.debounce,
                singleton: t.singleton,
                batch: t.batch,
            },
        )?;
        let when_backlog_full =
            dispatch::when_backlog_full(&t.id, t.when_backlog_full.as_deref(), &auth)?;
        let max_pending = shares::build(&t.id, t.max_pending)?;
        out.push(TriggerConfig {
            id: t.id,
            provider: t.provider,
            path: t.path,
            handler: None,
            auth,
            flow,
            when_backlog_full,
            max_pending,
        });
    }
    Ok(out)
}

impl Config {
    /// A core's server bounds from `[server]` (`net::server::ServerSpec`).
    pub fn server_spec(&self) -> crate::net::server::ServerSpec {
        let s = &self.server;
        crate::net::server::ServerSpec {
            limits: crate::net::http::Limits {
                max_head_bytes: s.max_head_bytes,
                max_uri_bytes: s.max_uri_bytes,
                max_body_bytes: s.max_body_bytes,
                ..crate::net::http::Limits::default()
            },
            max_connections: s.max_connections_per_core,
            max_pipeline_depth: s.max_pipeline_depth,
            max_queued_response_bytes: s.max_queued_response_bytes,
            timeouts: crate::net::conns::Timeouts::new(
                s.header_timeout,
                s.body_timeout,
                s.idle_timeout,
            ),
        }
    }

    /// What dispatch needs of this configuration, as dispatch defines it: the destinations
    /// (by id), each trigger's route and gates, the `[flow]` bounds and the few server settings
    /// the dispatcher reads. Built for each core at start and at each reload.
    pub fn dispatch_spec(&self) -> crate::dispatch::spec::DispatchSpec {
        use crate::dispatch::spec::{DispatchSpec, TriggerRoute};
        DispatchSpec {
            destinations: self.destinations.clone(),
            triggers: (self.triggers.iter())
                .map(|t| TriggerRoute {
                    id: t.id.clone(),
                    dest: t.handler,
                    flow: t.flow.clone(),
                })
                .collect(),
            flow: self.flow,
            workers: self.server.workers,
            flow_dir: self.server.data_dir.join("flow"),
            idle_timeout: self.server.idle_timeout,
        }
    }
}

#[cfg(test)]
mod limits_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn build(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        Config::build(Config::parse_manifest(text)?, env, &Overrides::default())
    }

    #[test]
    fn embedded_defaults() {
        let c = build("", &no_env).unwrap();
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.server.data_dir, PathBuf::from("./sluice-data"));
        assert_eq!(c.ingest.global_capacity, 4096);
        assert_eq!(c.ingest.per_source_capacity, 1024);
        assert_eq!(c.ingest.refill_per_sec, 1024);
        assert_eq!(c.ingest.offer_timeout, Duration::from_millis(50));
        assert_eq!(c.server.max_body_bytes, 10 << 20);
        assert_eq!(c.server.shutdown_timeout, Duration::from_secs(30));
        assert_eq!(c.wal.durability, crate::wal::Durability::Fsync);
        assert!(c.server.workers >= 1);
        assert_eq!(c.ingest.stored_headers[0], "content-type");
    }

    #[test]
    fn env_wins_over_manifest() {
        let env = |k: &str| (k == ENV_PER_SOURCE_CAPACITY).then(|| "2".to_string());
        let c = build(
            "[ingest]\nper_source_capacity = 50\nglobal_capacity = 77\n",
            &env,
        )
        .unwrap();
        assert_eq!(c.ingest.per_source_capacity, 2);
        assert_eq!(c.ingest.global_capacity, 77);
    }

    #[test]
    fn invalid_env_fails_with_the_variable_name() {
        for bad in ["0", "-3", "abc", "1.5", ""] {
            let env = move |k: &str| (k == ENV_REFILL_PER_SEC).then(|| bad.to_string());
            let e = build("", &env).unwrap_err();
            assert!(e.0.contains(ENV_REFILL_PER_SEC), "{e}");
        }
    }

    #[test]
    fn invalid_manifest_values_fail_with_the_key() {
        let cases = [
            ("[ingest]\nglobal_capacity = 0\n", "ingest.global_capacity"),
            ("[ingest]\nrefill_per_sec = 2000000000\n", "refill_per_sec"),
            ("[server]\nheader_timeout = \"0s\"\n", "server.header_timeout"),
            ("[server]\nworkers = 0\n", "server.workers"),
            ("[server]\nlisten = \"nope\"\n", "listen"),
            ("[wal]\ndurability = \"sometimes\"\n", "durability"),
            ("[wal]\nwrite_path = \"carrier-pigeon\"\n", "wal.write_path"),
            ("[wal]\ncommit = \"disk\"\n", "wal.commit must be \"helper\" or \"ring\""),
            (
                "[wal]\ncommit = \"ring\"\ndurability = \"os\"\n",
                "wal.commit = \"ring\" needs wal.durability = \"fsync\"",
            ),
            (
                "[wal]\ncommit = \"ring\"\nwrite_path = \"mmap\"\n",
                "wal.write_path = \"pwrite\"",
            ),
            (
                "[server]\nio = \"mio\"\n[wal]\ncommit = \"ring\"\n",
                "needs the io_uring backend",
            ),
            ("[server]\nbogus = 1\n", "bogus"),
            ("[[triggers]]\nid = \"a b\"\nprovider = \"x\"\npath = \"/x\"\n", "id"),
            ("[[triggers]]\nid = \"a\"\nprovider = \"x\"\npath = \"x\"\n", "path"),
            (
                "[[triggers]]\nid = \"a\"\nprovider = \"x\"\npath = \"/x\"\n[[triggers]]\nid = \"b\"\nprovider = \"x\"\npath = \"/x\"\n",
                "both use path",
            ),
        ];
        for (text, needle) in cases {
            let e = build(text, &no_env).unwrap_err();
            assert!(e.0.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn the_commit_path_comes_from_the_manifest_or_the_environment() {
        use crate::wal::CommitPath;
        assert_eq!(build("", &no_env).unwrap().wal.commit, CommitPath::Helper);
        let ring = build("[wal]\ncommit = \"ring\"\n", &no_env).unwrap();
        assert_eq!(ring.wal.commit, CommitPath::Ring);
        let env = |k: &str| (k == ENV_WAL_COMMIT).then(|| "ring".to_string());
        assert_eq!(build("", &env).unwrap().wal.commit, CommitPath::Ring);
        let bad = |k: &str| (k == ENV_WAL_COMMIT).then(|| "rings".to_string());
        let e = build("", &bad).unwrap_err();
        assert!(
            e.0.contains("environment variable SLUICE_WAL_COMMIT"),
            "{e}"
        );
    }

    #[test]
    fn overrides_win() {
        let o = Overrides {
            listen: Some("127.0.0.1:0".into()),
            workers: Some(3),
            durability: Some("os".into()),
            data_dir: Some(PathBuf::from("/tmp/x")),
            pump_max_outstanding: None,
            ..Overrides::default()
        };
        let raw =
            Config::parse_manifest("[server]\nlisten = \"127.0.0.1:9\"\nworkers = 1\n").unwrap();
        let c = Config::build(raw, &no_env, &o).unwrap();
        assert_eq!(c.server.listen.port(), 0);
        assert_eq!(c.server.workers, 3);
        assert_eq!(c.wal.durability, crate::wal::Durability::Os);
        assert_eq!(c.wal_dir(), PathBuf::from("/tmp/x/wal"));
    }

    #[test]
    fn segment_size_follows_the_body_limit() {
        let small = "[server]\nmax_body_bytes = 65536\n[wal]\nsegment_bytes = 1048576\n";
        assert_eq!(build(small, &no_env).unwrap().wal.segment_bytes, 1 << 20);
        let too_small = "[server]\nmax_body_bytes = 2097152\n[wal]\nsegment_bytes = 2097152\n";
        let e = build(too_small, &no_env).unwrap_err();
        assert!(
            e.0.contains("wal.segment_bytes") && e.0.contains("max_body_bytes"),
            "{e}"
        );
        let tiny = "[wal]\nsegment_bytes = 4096\n[server]\nmax_body_bytes = 10\n";
        assert!(build(tiny, &no_env)
            .unwrap_err()
            .0
            .contains("wal.segment_bytes"));
    }

    #[test]
    fn uri_limit_defaults_within_a_small_head_limit() {
        let c = build("[server]\nmax_head_bytes = 1024\n", &no_env).unwrap();
        assert_eq!(c.server.max_uri_bytes, 1024);
    }

    #[test]
    fn triggers_parse() {
        let c = build(
            "[[triggers]]\nid = \"gh\"\nprovider = \"github\"\npath = \"/hooks/github\"\n",
            &no_env,
        )
        .unwrap();
        assert_eq!(
            c.triggers,
            vec![TriggerConfig {
                id: "gh".into(),
                provider: "github".into(),
                path: "/hooks/github".into(),
                handler: None,
                auth: TriggerAuth::default(),
                flow: FlowSpec::default(),
                when_backlog_full: WhenFull::Refuse,
                max_pending: Default::default(),
            }]
        );
        assert_eq!(
            c.ingest_triggers(),
            vec![TriggerSpec::plain("gh", "github", "/hooks/github")]
        );
    }
}
