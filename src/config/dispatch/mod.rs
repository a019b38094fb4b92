//! Dispatch configuration: trigger handler URIs, `[[destinations]]`, `[orchestrator] pumps` and
//! `[dispatch]`.
//!
//! Same two stages as the rest of [`super`]: the `Raw*` serde images (every field documented with
//! its default and range, unknown keys rejected) are validated once into immutable structs: the
//! destination specs dispatch defines ([`crate::dispatch::spec`], re-exported here) and the pump
//! and backlog bounds. [`crate::config::Config::dispatch_spec`] hands dispatch its whole view.
//!
//! Destinations are keyed by the *normalized* handler URI ([`HandlerUri::uri`]). Every distinct
//! handler named by a trigger gets exactly one [`DestinationSpec`], in order of first appearance
//! among the triggers, so its index in [`crate::config::Config::destinations`] is stable for a given
//! manifest; a `[[destinations]]` entry only overrides that destination's defaults, and one that
//! no trigger uses is an error (a typo must not silently leave the real destination on defaults).
//!
//! Handler URIs (kind `http`, plain or over TLS) are parsed and normalized by their grammar beside
//! the outbound client ([`crate::net::http::client::uri`]); an `https` destination may carry
//! `tls = { … }` ([`crate::config::tls`]).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::config::error::{duration_or, err, ranged, ConfigError};
use crate::config::overrides::Overrides;
use crate::net::http::client::is_token;

/// Environment variable for the pump bound (Harn orchestrator contract).
pub const ENV_PUMP_MAX_OUTSTANDING: &str = "HARN_ORCHESTRATOR_PUMP_MAX_OUTSTANDING";

/// Most custom headers per destination.
pub const MAX_DESTINATION_HEADERS: usize = 64;
/// Longest custom header value, in bytes.
pub const MAX_HEADER_VALUE_BYTES: usize = 8 * 1024;
pub use crate::net::http::client::uri::MAX_HANDLER_URI_BYTES;

/// Headers sluice writes itself on every outbound request (framing, routing, connection
/// management); a destination may not set them.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
];

// ---------------------------------------------------------------------------------------------
// Stage 1: raw manifest tables.
// ---------------------------------------------------------------------------------------------

/// `[[destinations]]`: overrides for the destination of one handler URI. `Default`: a handler
/// without an entry (every key at its default).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDestination {
    /// The handler URI this entry configures; compared after normalization. Required; must be the
    /// `handler` of at least one trigger, and listed at most once.
    pub uri: String,
    /// Calls in flight to this destination at once (its permit set): an integer, or `"auto"`
    /// for a limit that follows the downstream's latency and overload signals
    /// (`dispatch::adaptive`) between `min_in_flight` and `max_in_flight_cap`. Default: 64.
    /// Range: 1..=10000 or `"auto"`.
    pub max_in_flight: Option<RawMaxInFlight>,
    /// With `max_in_flight = "auto"` only: the largest limit. Default: 256. Range: 1..=10000.
    pub max_in_flight_cap: Option<usize>,
    /// With `max_in_flight = "auto"` only: the smallest limit. Default: 1. Range:
    /// 1..=`max_in_flight_cap`.
    pub min_in_flight: Option<usize>,
    /// Time allowed for one delivery attempt (connect, send, response). Past it the attempt is a
    /// retryable timeout. Default: `10s`. Range: any positive duration.
    pub timeout: Option<String>,
    /// Outbound rate budget (GCRA). Default: none (only `max_in_flight` bounds the rate).
    pub rate: Option<RawRate>,
    /// Circuit breaker. Default: `{ failures = 5, open_for = "60s" }`.
    pub circuit: Option<RawCircuit>,
    /// Extra request headers sent with every delivery, e.g. `{ "x-api-key" = "…" }`.
    /// Default: none. Range: at most 64; names are HTTP tokens, unique case-insensitively, not a
    /// header sluice sets itself (`host`, `content-length`, `transfer-encoding`, `connection`,
    /// …); values ≤ 8 KiB without control characters other than tab.
    pub headers: Option<BTreeMap<String, String>>,
    /// Retry schedule. Default: `{ max_attempts = 7, base = "1s", cap = "10m" }`.
    pub retry: Option<RawRetry>,
    /// Sign every delivery with the Standard Webhooks scheme (`webhook-signature: v1,<b64>`
    /// over `id.timestamp.body`). The secret is `whsec_<base64>` (the key is the decoded
    /// base64), or a key used as read when marked `encoding = "raw"`; read from
    /// `{ env = "NAME" }` or `{ file = "/path" }`; never inline, never logged. Default: unsigned.
    pub signing_secret: Option<crate::config::auth::RawSecretRef>,
    /// TLS settings of an `https://` destination (see [`crate::config::tls::RawTls`] for each key's
    /// default). Default: the compiled-in Mozilla roots, no client certificate, the handler's
    /// host as server name. An error on an `http://` destination.
    pub tls: Option<crate::config::tls::RawTls>,
    /// Share this destination's `max_in_flight` and `rate` with other nodes through Redis
    /// (see [`crate::config::shared::RawShared`] for each key). Default: none (this node's own budget).
    /// An error with `max_in_flight = "auto"`.
    pub shared: Option<crate::config::shared::RawShared>,
    /// Deliver in batched calls: one signed `POST` of up to `max_events` events
    /// (`dispatch::batch`, README "Batched deliveries"). Default: none (one event per call).
    pub batch: Option<RawBatch>,
}

/// `batch = { max_events, max_bytes, linger }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBatch {
    /// Most events in one call (and in the batch being filled, per destination). Default: 100.
    /// Range: 1..=10000. Batches fill only from the events dispatched at once, so keep
    /// `orchestrator.pumps.max_outstanding` a few times larger.
    pub max_events: Option<usize>,
    /// Most bytes of one call's body (the batch JSON); an event larger on its own is sent
    /// alone. Default: 1048576 (1 MiB). Range: 1024..=67108864 (64 MiB).
    pub max_bytes: Option<usize>,
    /// Longest a batch waits for more events after its first one. Default: `"5ms"`.
    /// Range: `1ms`..=`60s`.
    pub linger: Option<String>,
}

/// `max_in_flight`: a number or `"auto"`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawMaxInFlight {
    Fixed(i64),
    Word(String),
}

/// `rate = { per_sec, burst }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRate {
    /// Sustained calls per second. Required. Range: 1..=1_000_000_000.
    pub per_sec: u64,
    /// Calls allowed back to back after idleness. Default: `per_sec`. Range: ≥ 1 (and
    /// `burst / per_sec` under 584 years).
    pub burst: Option<u64>,
}

/// `circuit = { failures, open_for, on_open }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCircuit {
    /// Consecutive retryable failures that open the circuit. Default: 5. Range: 1..=10000.
    pub failures: Option<u32>,
    /// How long an open circuit fails fast before one half-open probe. Default: `60s`.
    /// Range: any positive duration.
    pub open_for: Option<String>,
    /// What happens to events while the circuit is open: `"dlq"` dead-letters them
    /// (`circuit_open`, the Harn contract), `"hold"` keeps them pending until the half-open
    /// probe succeeds (the backlog bound then refuses at the edge). Default: `"dlq"`.
    pub on_open: Option<String>,
}

/// `retry = { max_attempts, base, cap }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetry {
    /// Total attempts, the first included (Harn `retry.max`). Default: 7. Range: 1..=100.
    pub max_attempts: Option<u32>,
    /// Backoff base: the delay before attempt `n ≥ 2` is uniform in
    /// `[0, min(cap, base · 2^(n-2))]` (full jitter). Default: `1s`. Range: positive, ≤ `cap`.
    pub base: Option<String>,
    /// Largest delay between two attempts. Default: `10m`. Range: positive, ≥ `base`.
    pub cap: Option<String>,
}

/// `[orchestrator]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOrchestrator {
    /// `pumps = { max_outstanding = N }` or `[orchestrator.pumps]`.
    #[serde(default)]
    pub pumps: RawPumps,
}

/// `[orchestrator.pumps]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPumps {
    /// Events admitted to dispatch and not yet done; a full pump stops reading the WAL.
    /// Default: 64. Range: 1..=100000. Env `HARN_ORCHESTRATOR_PUMP_MAX_OUTSTANDING`
    /// (wins over the manifest); the command line wins over both. Alias `max-outstanding`.
    #[serde(alias = "max-outstanding")]
    pub max_outstanding: Option<usize>,
}

/// `[dispatch]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDispatch {
    /// Committed-but-not-done events past which ingest refuses with 503. Default: 100000.
    /// Range: 1..=2^40.
    pub max_pending_events: Option<u64>,
    /// Committed-but-not-done bytes past which ingest refuses with 503. Default: 1 GiB.
    /// Range: 1 MiB..=2^50.
    pub max_pending_bytes: Option<u64>,
    /// Backlog fraction (of either bound) at which `/readyz` reports saturated. Default: 0.9.
    /// Range: `saturated_low < saturated_high ≤ 1`.
    pub saturated_high: Option<f64>,
    /// Backlog fraction under which `/readyz` reports ready again. Default: 0.7.
    /// Range: `0 < saturated_low < saturated_high`.
    pub saturated_low: Option<f64>,
    /// Done segments older than this are deleted. Default: `7d`. Range: any positive duration.
    pub retention: Option<String>,
    /// Bound on the WAL's size on disk. Default: 64 GiB. Range: 2 × `wal.segment_bytes`..=2^50.
    pub max_wal_bytes: Option<u64>,
    /// Dead-letter entries kept. Default: 100000. Range: 1..=2^32.
    pub max_dlq_entries: Option<u64>,
    /// Bytes that triggers with `when_backlog_full = "absorb"` may add past
    /// `max_pending_bytes` (and past `max_pending_events` while bytes allow). Default: a tenth
    /// of `max_wal_bytes`. Range: 0..=`max_wal_bytes`.
    pub absorb_max_bytes: Option<u64>,
    /// Fraction of `max_pending_events` / `max_pending_bytes` reserved, by default, for the
    /// triggers (and the default route) without `max_pending`, in equal shares; the rest is the
    /// common pool. Default: 0.5. Range: 0..=1 (0: no default shares, one shared pool).
    pub reserved_fraction: Option<f64>,
}

// ---------------------------------------------------------------------------------------------
// Stage 2: validated config.
// ---------------------------------------------------------------------------------------------

pub use crate::dispatch::deliver::rate::RateSpec;
pub use crate::dispatch::spec::{
    AdaptiveSpec, BatchSpec, CircuitSpec, DestinationSpec, HandlerUri, OnOpen, RetrySpec,
    TlsSource, TlsSpec,
};

/// `circuit.on_open`: `"dlq"` (the default) or `"hold"`.
fn parse_on_open(key: &str, text: Option<&str>) -> Result<OnOpen, ConfigError> {
    match text {
        None | Some("dlq") => Ok(OnOpen::Dlq),
        Some("hold") => Ok(OnOpen::Hold),
        Some(other) => err(format!(
            "{key}: circuit.on_open must be \"dlq\" or \"hold\", not {other:?}"
        )),
    }
}

/// The pump's admission bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PumpConfig {
    pub max_outstanding: usize,
}

/// Bounds of the durable backlog, readiness hysteresis, retention.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DispatchConfig {
    pub max_pending_events: u64,
    pub max_pending_bytes: u64,
    pub saturated_high: f64,
    pub saturated_low: f64,
    pub retention: Duration,
    pub max_wal_bytes: u64,
    pub max_dlq_entries: u64,
    pub absorb_max_bytes: u64,
    pub reserved_fraction: f64,
}

/// Parses and normalizes a handler URI ([`HandlerUri::parse`], beside the outbound client). The
/// error text names what is wrong, not the key; the caller prefixes the key.
pub fn parse_handler(text: &str) -> Result<HandlerUri, String> {
    HandlerUri::parse(text)
}

// ---------------------------------------------------------------------------------------------
// Builders (called from `Config::build`).
// ---------------------------------------------------------------------------------------------

/// Builds one destination per distinct trigger handler. `handlers` is `(trigger id, handler)` in
/// trigger order. Returns the destinations and, per trigger, the index of its destination.
pub(super) fn build_destinations(
    handlers: &[(String, Option<String>)],
    raw: Vec<RawDestination>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Vec<DestinationSpec>, Vec<Option<usize>>), ConfigError> {
    let mut uris: Vec<HandlerUri> = Vec::new();
    let mut index = Vec::with_capacity(handlers.len());
    for (id, handler) in handlers {
        let Some(text) = handler else {
            index.push(None);
            continue;
        };
        let h = parse_handler(text)
            .map_err(|e| ConfigError(format!("trigger {id:?}: handler: {e}")))?;
        let i = match uris.iter().position(|u| u.uri == h.uri) {
            Some(i) => i,
            None => {
                uris.push(h);
                uris.len() - 1
            }
        };
        index.push(Some(i));
    }
    let mut listed: Vec<Option<RawDestination>> = uris.iter().map(|_| None).collect();
    for d in raw {
        let h = parse_handler(&d.uri)
            .map_err(|e| ConfigError(format!("destinations: uri {:?}: {e}", d.uri)))?;
        let Some(i) = uris.iter().position(|u| u.uri == h.uri) else {
            return err(format!(
                "destination {:?} is not the handler of any trigger",
                d.uri
            ));
        };
        if listed[i].is_some() {
            return err(format!(
                "destination {:?} is listed twice (as {:?} after normalization)",
                d.uri, h.uri
            ));
        }
        listed[i] = Some(d);
    }
    let destinations = uris
        .into_iter()
        .zip(listed)
        .map(|(h, d)| build_destination(h, d, env))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((destinations, index))
}

/// One destination: the handler's `[[destinations]]` entry (defaults when it has none), each
/// key validated in manifest order, so the first wrong key is the one reported.
fn build_destination(
    handler: HandlerUri,
    raw: Option<RawDestination>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<DestinationSpec, ConfigError> {
    let key = format!("destination {:?}", handler.uri);
    let r = raw.unwrap_or_default();
    let (max_in_flight, adaptive) = build_max_in_flight(&key, &r)?;
    let shared = build_dest_shared(&key, &handler.uri, r.shared, adaptive.is_some())?;
    let timeout = duration_or(
        &format!("{key}: timeout"),
        r.timeout,
        Duration::from_secs(10),
    )?;
    let rate = r.rate.map(|rr| build_rate(&key, rr)).transpose()?;
    let circuit = build_circuit(&key, r.circuit)?;
    let retry = build_retry(&key, r.retry)?;
    let headers = build_headers(&key, r.headers.unwrap_or_default())?;
    let (signing_key, signing_secret) = build_signing(&key, r.signing_secret.as_ref(), env)?;
    let tls = build_dest_tls(&key, &handler, r.tls)?;
    let batch = r.batch.map(|b| build_batch(&key, b)).transpose()?;
    Ok(DestinationSpec {
        handler,
        tls,
        shared,
        batch,
        max_in_flight,
        adaptive,
        timeout,
        rate,
        circuit,
        headers,
        retry,
        signing_key,
        signing_secret,
    })
}

/// `shared = { … }`: only with a fixed `max_in_flight`.
fn build_dest_shared(
    key: &str,
    uri: &str,
    raw: Option<crate::config::shared::RawShared>,
    adaptive: bool,
) -> Result<Option<crate::config::shared::SharedSpec>, ConfigError> {
    match raw {
        None => Ok(None),
        Some(_) if adaptive => err(format!(
            "{key}: shared budgets take a fixed max_in_flight, not \"auto\" (each node's \
             adaptive limit sees only its own calls; see README \"Several nodes\")"
        )),
        Some(raw) => Ok(Some(crate::config::shared::build_shared(key, uri, raw)?)),
    }
}

/// `rate = { per_sec, burst }`: both at least 1, and parameters the GCRA accepts.
fn build_rate(key: &str, rr: RawRate) -> Result<RateSpec, ConfigError> {
    let burst = rr.burst.unwrap_or(rr.per_sec);
    if rr.per_sec == 0 {
        return err(format!("{key}: rate.per_sec must be at least 1"));
    }
    if burst == 0 {
        return err(format!("{key}: rate.burst must be at least 1"));
    }
    crate::sync::gcra::BucketParams::new(burst, rr.per_sec)
        .map_err(|e| ConfigError(format!("{key}: rate: {e}")))?;
    Ok(RateSpec {
        per_sec: rr.per_sec,
        burst,
    })
}

/// `batch = { max_events, max_bytes, linger }`, each key defaulted on its own, none clamped.
fn build_batch(key: &str, raw: RawBatch) -> Result<BatchSpec, ConfigError> {
    let linger = duration_or(
        &format!("{key}: batch.linger"),
        raw.linger,
        BatchSpec::DEFAULT_LINGER,
    )?;
    if linger > BatchSpec::MAX_LINGER {
        return err(format!(
            "{key}: batch.linger = {linger:?} is out of range (1ms..=60s)"
        ));
    }
    Ok(BatchSpec {
        max_events: ranged(
            &format!("{key}: batch.max_events"),
            raw.max_events,
            BatchSpec::DEFAULT_EVENTS,
            1,
            BatchSpec::MAX_EVENTS,
        )?,
        max_bytes: ranged(
            &format!("{key}: batch.max_bytes"),
            raw.max_bytes,
            BatchSpec::DEFAULT_BYTES,
            BatchSpec::MIN_BYTES,
            BatchSpec::MAX_BYTES,
        )?,
        linger,
    })
}

/// `circuit = { failures, open_for, on_open }`, each key defaulted on its own.
fn build_circuit(key: &str, raw: Option<RawCircuit>) -> Result<CircuitSpec, ConfigError> {
    let (failures, open_for, on_open) = match raw {
        None => (None, None, None),
        Some(c) => (c.failures, c.open_for, c.on_open),
    };
    Ok(CircuitSpec {
        failures: ranged(&format!("{key}: circuit.failures"), failures, 5, 1, 10_000)?,
        open_for: duration_or(
            &format!("{key}: circuit.open_for"),
            open_for,
            Duration::from_secs(60),
        )?,
        on_open: parse_on_open(key, on_open.as_deref())?,
    })
}

/// `retry = { max_attempts, base, cap }` with `base <= cap`.
fn build_retry(key: &str, raw: Option<RawRetry>) -> Result<RetrySpec, ConfigError> {
    let (max_attempts, base, cap) = match raw {
        None => (None, None, None),
        Some(rt) => (rt.max_attempts, rt.base, rt.cap),
    };
    let retry = RetrySpec {
        max_attempts: ranged(
            &format!("{key}: retry.max_attempts"),
            max_attempts,
            7,
            1,
            100,
        )?,
        base: duration_or(&format!("{key}: retry.base"), base, Duration::from_secs(1))?,
        cap: duration_or(&format!("{key}: retry.cap"), cap, Duration::from_secs(600))?,
    };
    if retry.base > retry.cap {
        return err(format!(
            "{key}: retry.base ({:?}) must not exceed retry.cap ({:?})",
            retry.base, retry.cap
        ));
    }
    Ok(retry)
}

/// `signing_secret`: the decoded key and where it was read from.
fn build_signing(
    key: &str,
    raw: Option<&crate::config::auth::RawSecretRef>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Option<crate::sign::Secret>, Option<String>), ConfigError> {
    let Some(secret_ref) = raw else {
        return Ok((None, None));
    };
    let fail = |e: String| ConfigError(format!("{key}: signing_secret: {e}"));
    let (source, secret) = crate::config::auth::load_secrets(std::slice::from_ref(secret_ref), env)
        .map_err(fail)?
        .remove(0);
    let key_bytes = source.signing_key(&secret, "the secret").map_err(fail)?;
    Ok((Some(key_bytes), Some(source.toml())))
}

/// `tls = { … }`: required settings of an `https://` handler (defaults when absent), an error
/// on an `http://` one.
fn build_dest_tls(
    key: &str,
    handler: &HandlerUri,
    raw: Option<crate::config::tls::RawTls>,
) -> Result<Option<TlsSpec>, ConfigError> {
    match (handler.tls, raw) {
        (true, raw) => Ok(Some(crate::config::tls::build_tls(
            key,
            &handler.host,
            raw.unwrap_or_default(),
        )?)),
        (false, None) => Ok(None),
        (false, Some(_)) => err(format!("{key}: tls applies to https:// destinations only")),
    }
}

/// `max_in_flight` (a number or `"auto"`), `max_in_flight_cap`, `min_in_flight`.
fn build_max_in_flight(
    key: &str,
    r: &RawDestination,
) -> Result<(usize, Option<AdaptiveSpec>), ConfigError> {
    let fixed = match &r.max_in_flight {
        None => Some(64),
        Some(RawMaxInFlight::Fixed(n)) => match usize::try_from(*n) {
            Ok(n) if (1..=10_000).contains(&n) => Some(n),
            _ => {
                return err(format!(
                    "{key}: max_in_flight = {n} is out of range 1..=10000 (or \"auto\")"
                ))
            }
        },
        Some(RawMaxInFlight::Word(w)) if w == "auto" => None,
        Some(RawMaxInFlight::Word(w)) => {
            return err(format!(
                "{key}: max_in_flight must be a number in 1..=10000 or \"auto\", not {w:?}"
            ))
        }
    };
    if let Some(n) = fixed {
        if r.max_in_flight_cap.is_some() || r.min_in_flight.is_some() {
            return err(format!(
                "{key}: max_in_flight_cap and min_in_flight apply only to max_in_flight = \"auto\""
            ));
        }
        return Ok((n, None));
    }
    let cap = ranged(
        &format!("{key}: max_in_flight_cap"),
        r.max_in_flight_cap,
        256,
        1,
        10_000,
    )?;
    let min = ranged(
        &format!("{key}: min_in_flight"),
        r.min_in_flight,
        1,
        1,
        10_000,
    )?;
    if min > cap {
        return err(format!(
            "{key}: min_in_flight ({min}) must not exceed max_in_flight_cap ({cap})"
        ));
    }
    Ok((cap, Some(AdaptiveSpec { min, cap })))
}

fn build_headers(
    key: &str,
    raw: BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, ConfigError> {
    if raw.len() > MAX_DESTINATION_HEADERS {
        return err(format!(
            "{key}: headers lists {} headers (at most {MAX_DESTINATION_HEADERS})",
            raw.len()
        ));
    }
    let mut out: Vec<(String, String)> = Vec::with_capacity(raw.len());
    for (name, value) in raw {
        if !is_token(name.as_bytes()) || name.len() > 256 {
            return err(format!(
                "{key}: headers: {name:?} is not a header name (token characters, ≤ 256 bytes)"
            ));
        }
        let lower = name.to_ascii_lowercase();
        if RESERVED_HEADERS.contains(&lower.as_str()) {
            return err(format!(
                "{key}: headers: {name:?} is set by sluice and cannot be configured"
            ));
        }
        if let Some((other, _)) = out.iter().find(|(o, _)| o.eq_ignore_ascii_case(&name)) {
            return err(format!(
                "{key}: headers: {other:?} and {name:?} are the same header"
            ));
        }
        if value.len() > MAX_HEADER_VALUE_BYTES {
            return err(format!(
                "{key}: headers.{name}: value is longer than {MAX_HEADER_VALUE_BYTES} bytes"
            ));
        }
        if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return err(format!(
                "{key}: headers.{name}: value contains a control character (CR, LF, NUL, …)"
            ));
        }
        out.push((name, value));
    }
    Ok(out)
}

/// Precedence: command line, then environment, then manifest, then 64.
pub(super) fn build_pump(
    r: RawOrchestrator,
    env: &dyn Fn(&str) -> Option<String>,
    o: &Overrides,
) -> Result<PumpConfig, ConfigError> {
    const HI: usize = 100_000;
    if let Some(n) = o.pump_max_outstanding {
        if !(1..=HI).contains(&n) {
            return err(format!(
                "pump_max_outstanding (command line) = {n} is out of range (1..={HI})"
            ));
        }
        return Ok(PumpConfig { max_outstanding: n });
    }
    if let Some(v) = env(ENV_PUMP_MAX_OUTSTANDING) {
        return match v.trim().parse::<usize>() {
            Ok(n) if (1..=HI).contains(&n) => Ok(PumpConfig { max_outstanding: n }),
            _ => err(format!(
                "environment variable {ENV_PUMP_MAX_OUTSTANDING}={v:?} must be an integer in 1..={HI}"
            )),
        };
    }
    Ok(PumpConfig {
        max_outstanding: ranged(
            "orchestrator.pumps.max_outstanding",
            r.pumps.max_outstanding,
            64,
            1,
            HI,
        )?,
    })
}

/// `workers` matters for `max_wal_bytes`: each core's log holds at least one preallocated
/// segment, and one more is needed to roll.
pub(super) fn build_dispatch(
    r: RawDispatch,
    segment_bytes: u64,
    workers: usize,
) -> Result<DispatchConfig, ConfigError> {
    let high = r.saturated_high.unwrap_or(0.9);
    let low = r.saturated_low.unwrap_or(0.7);
    if !(high.is_finite() && high > 0.0 && high <= 1.0) {
        return err(format!(
            "dispatch.saturated_high = {high} is out of range (0 < saturated_high <= 1)"
        ));
    }
    if !(low.is_finite() && low > 0.0 && low < high) {
        return err(format!(
            "dispatch.saturated_low = {low} is out of range (0 < saturated_low < saturated_high = {high})"
        ));
    }
    let max_wal_bytes = ranged(
        "dispatch.max_wal_bytes (at least (server.workers + 1) × wal.segment_bytes)",
        r.max_wal_bytes,
        64 << 30,
        segment_bytes.saturating_mul(workers as u64 + 1),
        1 << 50,
    )?;
    let absorb_max_bytes = ranged(
        "dispatch.absorb_max_bytes (at most dispatch.max_wal_bytes)",
        r.absorb_max_bytes,
        max_wal_bytes / 10,
        0,
        max_wal_bytes,
    )?;
    let reserved_fraction = r
        .reserved_fraction
        .unwrap_or(crate::ingest::shares::DEFAULT_RESERVED);
    if !(0.0..=1.0).contains(&reserved_fraction) {
        return err(format!(
            "dispatch.reserved_fraction = {reserved_fraction} is out of range (0 <= reserved_fraction <= 1)"
        ));
    }
    Ok(DispatchConfig {
        reserved_fraction,
        max_pending_events: ranged(
            "dispatch.max_pending_events",
            r.max_pending_events,
            100_000,
            1,
            1 << 40,
        )?,
        max_pending_bytes: ranged(
            "dispatch.max_pending_bytes",
            r.max_pending_bytes,
            1 << 30,
            1 << 20,
            1 << 50,
        )?,
        saturated_high: high,
        saturated_low: low,
        retention: duration_or(
            "dispatch.retention",
            r.retention,
            Duration::from_secs(7 * 86_400),
        )?,
        max_wal_bytes,
        absorb_max_bytes,
        max_dlq_entries: ranged(
            "dispatch.max_dlq_entries",
            r.max_dlq_entries,
            100_000,
            1,
            1 << 32,
        )?,
    })
}

/// `when_backlog_full`: as given, else `absorb` for `verify = "github"`, `refuse` otherwise.
pub(super) fn when_backlog_full(
    id: &str,
    v: Option<&str>,
    auth: &crate::config::auth::TriggerAuth,
) -> Result<crate::ingest::backlog::WhenFull, ConfigError> {
    use crate::ingest::backlog::WhenFull;
    match v {
        Some(text) => WhenFull::parse(text).ok_or_else(|| {
            ConfigError(format!(
                "trigger {id:?}: when_backlog_full must be \"refuse\" or \"absorb\", got {text:?}"
            ))
        }),
        None => Ok(match auth.verify.as_ref().map(|v| v.scheme()) {
            Some(crate::ingest::verify::Scheme::Github) => WhenFull::Absorb,
            _ => WhenFull::Refuse,
        }),
    }
}

#[cfg(test)]
mod tests;
