//! `[ingest]`: the token buckets (manifest or the Harn orchestrator's environment), the source
//! registry, the WAL offer timeout, the default route, the stored headers and the dedupe index.
//! Stage 1 ([`RawIngest`], every field documented) and stage 2 (ingest's own
//! [`IngestSpec`]), validated by
//! [`build_ingest`]; split from `config/mod.rs` by section.

use std::time::Duration;

use serde::Deserialize;

use super::{duration_or, err, ranged, ConfigError};
use crate::ingest::spec::{IngestSpec, MaxPending};

/// Environment variable names (Harn orchestrator contract).
pub const ENV_GLOBAL_CAPACITY: &str = "HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY";
pub const ENV_PER_SOURCE_CAPACITY: &str = "HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY";
pub const ENV_REFILL_PER_SEC: &str = "HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC";

/// `[ingest]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIngest {
    /// Global bucket capacity. Default: 4096. Range: ≥ 1. Env `HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY`.
    pub global_capacity: Option<u64>,
    /// Per-source bucket capacity. Default: 1024. Range: ≥ 1. Env `HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY`.
    pub per_source_capacity: Option<u64>,
    /// Tokens per second added to every bucket. Default: 1024. Range: ≥ 1. Env `HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC`.
    pub refill_per_sec: Option<u64>,
    /// Distinct sources with their own bucket; later sources share the `_overflow` bucket.
    /// Default: 10000. Range: 1..=1_000_000.
    pub max_sources: Option<usize>,
    /// Sources with their own per-source series in `/metrics` (the N with the most accepted
    /// plus refused requests at scrape time); all others are summed into `source="_other"`.
    /// Default: 100. Range: 0..=10_000.
    pub metrics_top_sources: Option<usize>,
    /// How long a request waits for room in the core's full next group-commit batch before `503 wal_busy`.
    /// Default: `50ms`.
    pub offer_timeout: Option<String>,
    /// Serve the embedded route `POST /webhooks/{source}`. Default: true when no `[[triggers]]`
    /// are configured, false when some are (set it to serve both).
    pub default_route: Option<bool>,
    /// The default route's guaranteed share of the durable backlog, as a trigger's
    /// `max_pending` (`{}`: a default share like a trigger's). Default: none (it borrows from
    /// the common pool only, and does not count for `/readyz`). Only with the route on.
    pub default_route_max_pending: Option<super::shares::RawMaxPending>,
    /// Request headers stored with each event (case-insensitive names), besides
    /// `content-type`, which is always kept: at most 31 names (32 headers per event with
    /// `content-type`; 30 when a trigger has `dedupe`, whose key is stored as one more; the
    /// headers flow-control keys read count too). Default: a list of common provider delivery
    /// and signature headers.
    pub stored_headers: Option<Vec<String>>,
    /// Most dedupe keys held across triggers; past it the oldest are evicted (README
    /// "Signatures and dedupe"). Default: 1_000_000. Range: 1..=100_000_000.
    pub dedupe_max_keys: Option<usize>,
}

/// Default headers stored with each event besides `content-type`.
pub const DEFAULT_STORED_HEADERS: &[&str] = &[
    "user-agent",
    "x-request-id",
    "x-github-event",
    "x-github-delivery",
    "x-hub-signature-256",
    "stripe-signature",
    "x-slack-signature",
    "x-slack-request-timestamp",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
];

/// Most stored headers per event, `content-type` included (bounds the per-event header block
/// in the WAL): 31 names besides it.
pub const MAX_STORED_HEADERS: usize = 32;

/// Reads a positive integer from the environment; a set but invalid value is an error.
fn env_u64(env: &dyn Fn(&str) -> Option<String>, key: &str) -> Result<Option<u64>, ConfigError> {
    match env(key) {
        None => Ok(None),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => err(format!(
                "environment variable {key}={v:?} must be a positive integer"
            )),
        },
    }
}

/// `has_triggers`: the manifest configures `[[triggers]]` (the default route's default).
pub(super) fn build_ingest(
    mut r: RawIngest,
    env: &dyn Fn(&str) -> Option<String>,
    has_triggers: bool,
) -> Result<IngestSpec, ConfigError> {
    let default_route = r.default_route.unwrap_or(!has_triggers);
    let default_route_max_pending =
        default_route_share(default_route, r.default_route_max_pending)?;
    let stored_headers = stored_headers(r.stored_headers.take())?;
    let buckets = bucket_sizes(&r, env)?;
    Ok(IngestSpec {
        global_capacity: buckets.global_capacity,
        per_source_capacity: buckets.per_source_capacity,
        refill_per_sec: buckets.refill_per_sec,
        max_sources: ranged("ingest.max_sources", r.max_sources, 10_000, 1, 1_000_000)?,
        metrics_top_sources: ranged(
            "ingest.metrics_top_sources",
            r.metrics_top_sources,
            crate::ingest::sources::DEFAULT_METRICS_TOP_SOURCES,
            0,
            10_000,
        )?,
        offer_timeout: duration_or(
            "ingest.offer_timeout",
            r.offer_timeout,
            Duration::from_millis(50),
        )?,
        default_route,
        default_route_max_pending,
        stored_headers,
        dedupe_max_keys: ranged(
            "ingest.dedupe_max_keys",
            r.dedupe_max_keys,
            crate::ingest::dedupe::DEFAULT_MAX_KEYS,
            1,
            100_000_000,
        )?,
    })
}

/// `ingest.default_route_max_pending`: only with the default route on.
fn default_route_share(
    default_route: bool,
    raw: Option<super::shares::RawMaxPending>,
) -> Result<Option<MaxPending>, ConfigError> {
    match raw {
        Some(_) if !default_route => err(
            "ingest.default_route_max_pending is set but the default route is off \
             (set ingest.default_route = true to serve it)"
                .to_string(),
        ),
        Some(raw) => Ok(Some(super::shares::build("default route", Some(raw))?)),
        None => Ok(None),
    }
}

/// `ingest.stored_headers`: `content-type` first, then the names given (or the defaults),
/// lower-cased, each once; at most [`MAX_STORED_HEADERS`] in all.
fn stored_headers(names: Option<Vec<String>>) -> Result<Vec<String>, ConfigError> {
    let mut stored = vec!["content-type".to_string()];
    let names: Vec<String> = match names {
        Some(list) => list,
        None => DEFAULT_STORED_HEADERS
            .iter()
            .map(|s| s.to_string())
            .collect(),
    };
    for n in names {
        let lower = n.to_ascii_lowercase();
        if lower.is_empty()
            || lower.len() > 256
            || !lower
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return err(format!("ingest.stored_headers: {n:?} is not a header name"));
        }
        if !stored.contains(&lower) {
            stored.push(lower);
        }
    }
    if stored.len() > MAX_STORED_HEADERS {
        // `content-type` is always stored: it is not one of the names the operator gave.
        return err(format!(
            "ingest.stored_headers lists {} headers besides content-type (always stored); at \
             most {} are kept per event, content-type included: list at most {}",
            stored.len() - 1,
            MAX_STORED_HEADERS,
            MAX_STORED_HEADERS - 1
        ));
    }
    Ok(stored)
}

/// The token buckets' sizes, validated together.
struct BucketSizes {
    global_capacity: u64,
    per_source_capacity: u64,
    refill_per_sec: u64,
}

/// The buckets' capacities and refill: each from its environment variable, else the manifest,
/// else the default; each in `1..=2^40`, and each capacity a valid GCRA with the refill.
fn bucket_sizes(
    r: &RawIngest,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<BucketSizes, ConfigError> {
    let positive = |key: &str, env_key: &str, manifest: Option<u64>, default: u64| {
        let v = match env_u64(env, env_key)? {
            Some(v) => v,
            None => manifest.unwrap_or(default),
        };
        if v == 0 || v > 1 << 40 {
            return err(format!(
                "ingest.{key} = {v} is out of range (1..={})",
                1u64 << 40
            ));
        }
        Ok(v)
    };
    let sizes = BucketSizes {
        global_capacity: positive(
            "global_capacity",
            ENV_GLOBAL_CAPACITY,
            r.global_capacity,
            4096,
        )?,
        per_source_capacity: positive(
            "per_source_capacity",
            ENV_PER_SOURCE_CAPACITY,
            r.per_source_capacity,
            1024,
        )?,
        refill_per_sec: positive("refill_per_sec", ENV_REFILL_PER_SEC, r.refill_per_sec, 1024)?,
    };
    for (key, capacity) in [
        ("global_capacity", sizes.global_capacity),
        ("per_source_capacity", sizes.per_source_capacity),
    ] {
        crate::sync::gcra::BucketParams::new(capacity, sizes.refill_per_sec)
            .map_err(|e| ConfigError(format!("ingest.{key} / refill_per_sec: {e}")))?;
    }
    Ok(sizes)
}
