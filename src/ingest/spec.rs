//! What ingest needs to know of the configuration, as `config` validated it: the `[ingest]`
//! section ([`IngestSpec`]), each trigger as ingest sees it ([`TriggerSpec`]: its route, its
//! edge checks, its backlog policy and share) and the default route's place in the backlog
//! ([`DefaultRoute`]). `config` parses the manifest and the environment and builds these
//! (`config::Config::ingest_triggers`); ingest imports nothing of `config`, so a reload can
//! rebuild the router, the checks and the shares from specs alone.

use std::time::Duration;

use super::dedupe::DedupeRule;
use super::verify::Verifier;

/// `[ingest]`, validated: the token buckets, the source registry, the WAL offer timeout, the
/// default route, the stored headers and the dedupe index. Every value is in its range (the
/// ranges are documented on `config::RawIngest`).
#[derive(Debug, Clone)]
pub struct IngestSpec {
    pub global_capacity: u64,
    pub per_source_capacity: u64,
    pub refill_per_sec: u64,
    pub max_sources: usize,
    pub metrics_top_sources: usize,
    /// How long a request waits for room in its core's group commit before `503 wal_busy`.
    pub offer_timeout: Duration,
    pub default_route: bool,
    /// The default route's guaranteed share of the durable backlog (`None`: none, it borrows
    /// from the common pool only).
    pub default_route_max_pending: Option<MaxPending>,
    /// Lower-cased header names stored with each event (always includes `content-type`).
    pub stored_headers: Vec<String>,
    pub dedupe_max_keys: usize,
}

impl IngestSpec {
    /// The default route as the backlog sees it.
    pub fn default_route_spec(&self) -> DefaultRoute {
        DefaultRoute {
            on: self.default_route,
            share: self.default_route_max_pending.map(|m| (m.events, m.bytes)),
        }
    }
}

/// One trigger as ingest sees it: its route (`path` → `id`, events from `provider`), its edge
/// checks, what its events do when the backlog is full, and its share of the backlog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerSpec {
    pub id: String,
    /// The event's source (and the name of its per-source bucket).
    pub provider: String,
    /// Exact request path.
    pub path: String,
    /// Signature verification (`401` on failure); `None`: none.
    pub verifier: Option<Verifier>,
    /// The dedupe rule; `None`: no dedupe.
    pub dedupe: Option<DedupeRule>,
    pub when_backlog_full: WhenFull,
    pub max_pending: MaxPending,
    /// Its events can reach a batch: a `batch` flow gate, or a handler whose destination has
    /// `batch`. Ingest then decides, once, whether each body is JSON (`wal::BodyJson`).
    pub batched: bool,
}

impl TriggerSpec {
    /// A trigger with no checks, refusing when the backlog is full, with the default share.
    pub fn plain(id: &str, provider: &str, path: &str) -> TriggerSpec {
        TriggerSpec {
            id: id.into(),
            provider: provider.into(),
            path: path.into(),
            verifier: None,
            dedupe: None,
            when_backlog_full: WhenFull::Refuse,
            max_pending: MaxPending::default(),
            batched: false,
        }
    }

    /// True when the trigger has a check ([`super::TriggerGuard`]): `verify` or `dedupe`.
    pub fn guarded(&self) -> bool {
        self.verifier.is_some() || self.dedupe.is_some()
    }
}

/// What a trigger's events do when the durable backlog is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// `503 queue_full` with `Retry-After` (the sender retries).
    Refuse,
    /// Keep accepting into the WAL up to `absorb_max_bytes` more (the sender never retries).
    Absorb,
}

impl WhenFull {
    /// Parses the manifest value `"refuse"` | `"absorb"`.
    pub fn parse(text: &str) -> Option<WhenFull> {
        match text {
            "refuse" => Some(WhenFull::Refuse),
            "absorb" => Some(WhenFull::Absorb),
            _ => None,
        }
    }
}

/// A route's guaranteed share of `dispatch.max_pending_events` / `max_pending_bytes` (`None`
/// values: the default share; each given value is ≥ 1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaxPending {
    pub events: Option<u64>,
    pub bytes: Option<u64>,
}

/// The default route as the backlog sees it (built from `ingest.default_route` and
/// `ingest.default_route_max_pending`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DefaultRoute {
    /// Served (`POST /webhooks/{source}`).
    pub on: bool,
    /// Its share, `(events, bytes)` as a trigger's `max_pending` (`None` values: the default
    /// share), when it is given one; `None`: no share, it borrows from the pool only, and it
    /// does not count for readiness.
    pub share: Option<(Option<u64>, Option<u64>)>,
}

impl From<bool> for DefaultRoute {
    /// On or off, without a share.
    fn from(on: bool) -> DefaultRoute {
        DefaultRoute { on, share: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_full_parses_the_two_manifest_values_only() {
        assert_eq!(WhenFull::parse("refuse"), Some(WhenFull::Refuse));
        assert_eq!(WhenFull::parse("absorb"), Some(WhenFull::Absorb));
        assert_eq!(WhenFull::parse("Absorb"), None);
        assert_eq!(WhenFull::parse(""), None);
    }

    #[test]
    fn the_default_route_takes_a_share_only_when_given_one() {
        let mut spec = IngestSpec {
            global_capacity: 1,
            per_source_capacity: 1,
            refill_per_sec: 1,
            max_sources: 1,
            metrics_top_sources: 0,
            offer_timeout: Duration::from_millis(50),
            default_route: true,
            default_route_max_pending: None,
            stored_headers: vec!["content-type".into()],
            dedupe_max_keys: 1,
        };
        assert_eq!(spec.default_route_spec(), DefaultRoute::from(true));
        spec.default_route_max_pending = Some(MaxPending {
            events: Some(3),
            bytes: None,
        });
        assert_eq!(spec.default_route_spec().share, Some((Some(3), None)));
        assert!(!TriggerSpec::plain("t", "p", "/t").guarded());
    }
}
