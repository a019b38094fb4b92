//! Ingest: routes, admission, signatures, dedupe and the refusal policy.
//!
//! - [`pipeline`]: the ingest sequence below, sans-IO: a routed request in; an append (record +
//!   pending reply) or an immediate response out; [`front`] applies it.
//! - [`front`]: a core's ingest front: a routed request from admission to its reply on the
//!   core's connections (applies the pipeline's output, keeps claims and orphans until settled,
//!   stages through [`stage::Stage`], answers on the commit's outcome).
//! - [`stage`]: the core's commit batch as ingest stages into it ([`stage::CommitStage`] over
//!   `wal::group::Staging`), with what the core keeps per ticket ([`stage::Holds`]).
//! - [`serve`]: the core's request handler (`net::server::Handler`): routes, runs ingest
//!   requests through the front, decides the body gate; other routes go to the core
//!   ([`serve::Rest`]).
//! - [`router`]: path + method → ops endpoint, admin route, trigger or the default route.
//! - [`bucket`]: GCRA token bucket in one atomic word, and the all-or-nothing
//!   [`bucket::Admission`] through the global and a per-source bucket.
//! - [`sources`]: bounded per-source registry, per-core caches, per-source refusal counters.
//! - [`respond`]: the 202/503 bodies; `event_id` (from `wal`): ULID-shaped event ids.
//! - [`schedule`]: the return schedule: `Retry-After` of `queue_full` and `ingest_saturated`
//!   refusals from a ring of the coming seconds, so refused senders return spread out.
//! - [`verify`]: per-trigger signature verification (`401`); the HMAC primitives are the leaf
//!   `src/sign.rs`'s, which also signs outbound deliveries (called from dispatch's request,
//!   `dispatch::deliver::request`); [`secrets`]: where signing secrets come from; [`dedupe`]:
//!   the sharded dedupe index.
//! - [`Guards`]: the per-trigger checks above, assembled from the trigger specs for the workers.
//! - [`spec`]: what ingest needs of the configuration ([`spec::IngestSpec`],
//!   [`spec::TriggerSpec`], …); `config` builds these, ingest imports nothing of it.
//! - [`backlog`]: the durable-backlog bound (reserved at ingest, released by the pumps), in
//!   per-trigger shares plus a common pool ([`shares`]); its shared atomics cache-padded by
//!   writer, modelled with loom (`loom-tests/tests/backlog.rs`).
//!
//! Order of the checks on an ingest request: stored-header bounds (`431`) → **signature**
//! (`401`) → token buckets (`503`) → **dedupe claim** (`200 duplicate_dropped` / `503
//! duplicate_in_flight`) → WAL. The signature is checked *before* the buckets, unlike the Harn
//! orchestrator (reference §12, weakness 5): a flood of forged requests for a source must not
//! drain the tokens of that source's legitimate deliveries. The price is one HMAC per forged
//! request before any rate limit applies; the per-core connection cap and the HTTP limits still
//! bound that work. Dedupe comes after the buckets so that only admitted requests hold claims.

pub mod backlog;
pub mod bucket;
pub mod dedupe;
pub mod front;
/// The event id lives with the record that stores it (`wal::event_id`); ingest mints them.
pub use crate::wal::event_id;
pub mod pending;
pub mod pipeline;
pub mod respond;
pub mod router;
pub mod schedule;
pub mod secrets;
pub mod serve;
pub mod shares;
pub mod short_str;
pub mod sources;
pub mod spec;
pub mod stage;
pub mod verify;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::metrics::auth::AuthMetrics;
use crate::metrics::PromWriter;
use crate::net::http::RequestHead;
use dedupe::{Claim, ClaimToken, DedupeIndex, DedupeRule, KeyDigest};
use spec::TriggerSpec;
use verify::{Failure, Verifier};

/// One trigger's checks (only triggers with `verify` or `dedupe` have one).
#[derive(Debug)]
pub struct TriggerGuard {
    /// Position in the metrics table.
    index: usize,
    pub verifier: Option<Verifier>,
    pub dedupe: Option<DedupeRule>,
}

impl TriggerGuard {
    /// A provider handshake to answer instead of storing the request: for `verify = "slack"`,
    /// a `url_verification` body → the `200` JSON body echoing its challenge. Call only after
    /// the request verified.
    pub fn handshake(&self, body: &[u8]) -> Option<String> {
        match self.verifier.as_ref()?.scheme() {
            verify::Scheme::Slack => verify::slack_challenge(body),
            _ => None,
        }
    }
}

/// One configuration generation's per-trigger checks: trigger id → verifier and dedupe rule
/// (only triggers with `verify` or `dedupe`). Immutable; a reload builds a new one
/// ([`GuardTable::build`]) and publishes it with its generation (`ops::reload`), so a core
/// checks every request with the table of the generation it runs.
#[derive(Debug, Default)]
pub struct GuardTable {
    by_trigger: HashMap<Box<str>, TriggerGuard>,
    /// The triggers with `when_backlog_full = "absorb"` (`Backlog::reserve_as`).
    absorbing: std::collections::HashSet<Box<str>>,
    /// The triggers whose events can reach a batch ([`TriggerSpec::batched`]): ingest decides
    /// whether their bodies are JSON (`wal::BodyJson`).
    batching: std::collections::HashSet<Box<str>>,
}

impl GuardTable {
    /// The checks of `triggers`, counting in `metrics`' cells (claimed for a trigger that has
    /// none yet, marked to render). `Err`: no spare cell left (nothing is published then).
    pub fn build(triggers: &[TriggerSpec], metrics: &AuthMetrics) -> Result<GuardTable, String> {
        let mut by_trigger = HashMap::new();
        let mut marks = Vec::new();
        for t in triggers.iter().filter(|t| t.guarded()) {
            let index = metrics.cell_for(&t.id)?;
            marks.push((index, t.verifier.is_some(), t.dedupe.is_some()));
            let g = TriggerGuard {
                index,
                verifier: t.verifier.clone(),
                dedupe: t.dedupe,
            };
            by_trigger.insert(t.id.as_str().into(), g);
        }
        for (index, v, d) in marks {
            metrics.mark_configured(index, v, d);
        }
        let absorbing = backlog::absorbing_triggers(triggers)
            .into_iter()
            .map(Into::into)
            .collect();
        let batching = triggers
            .iter()
            .filter(|t| t.batched)
            .map(|t| t.id.as_str().into())
            .collect();
        Ok(GuardTable {
            by_trigger,
            absorbing,
            batching,
        })
    }

    /// The checks of `trigger_id`, if it has any.
    #[inline]
    pub fn get(&self, trigger_id: &str) -> Option<&TriggerGuard> {
        if self.by_trigger.is_empty() {
            return None;
        }
        self.by_trigger.get(trigger_id)
    }

    /// True when `trigger_id` absorbs past its share (`when_backlog_full = "absorb"`).
    #[inline]
    pub fn absorbs(&self, trigger_id: &str) -> bool {
        !self.absorbing.is_empty() && self.absorbing.contains(trigger_id)
    }

    /// True when `trigger_id`'s events can reach a batch (a `batch` gate, or a handler whose
    /// destination batches): ingest decides whether their bodies are JSON.
    #[inline]
    pub fn batches(&self, trigger_id: &str) -> bool {
        !self.batching.is_empty() && self.batching.contains(trigger_id)
    }
}

/// The start-up generation's [`GuardTable`], the shared dedupe index and the counters. The
/// index and the counters are shared by all workers and all generations; the table a request
/// is checked with is its core's generation's (`Node::table`).
#[derive(Debug)]
pub struct Guards {
    start: Arc<GuardTable>,
    index: DedupeIndex,
    metrics: Arc<AuthMetrics>,
}

impl Guards {
    pub fn new(triggers: &[TriggerSpec], dedupe_max_keys: usize) -> Guards {
        let metrics = AuthMetrics::new(
            triggers
                .iter()
                .filter(|t| t.guarded())
                .map(|t| (t.id.as_str(), t.verifier.is_some(), t.dedupe.is_some())),
        );
        // Every guarded start-up trigger has its cells (above): the build claims none, so it
        // cannot fail — and a table without a trigger's verifier must never be used.
        let start = GuardTable::build(triggers, &metrics)
            .expect("AuthMetrics::new gave every guarded start-up trigger its cells");
        Guards {
            start: Arc::new(start),
            index: DedupeIndex::new(dedupe_max_keys),
            metrics: Arc::new(metrics),
        }
    }

    /// The start-up generation's checks.
    pub fn start_table(&self) -> &Arc<GuardTable> {
        &self.start
    }

    /// The counters (a reload builds its generation's table over them).
    pub fn shared_metrics(&self) -> &Arc<AuthMetrics> {
        &self.metrics
    }

    /// The start-up checks of `trigger_id`, if it has any.
    #[inline]
    pub fn get(&self, trigger_id: &str) -> Option<&TriggerGuard> {
        self.start.get(trigger_id)
    }

    /// Verifies the request's signature (if the trigger has a verifier), counting failures.
    pub fn verify(
        &self,
        g: &TriggerGuard,
        head: &RequestHead,
        body: &[u8],
        now_unix_secs: u64,
    ) -> Result<(), Failure> {
        let Some(v) = &g.verifier else { return Ok(()) };
        v.verify(head, body, now_unix_secs).inspect_err(|f| {
            self.metrics.incr_signature_failure(g.index, *f as usize);
        })
    }

    /// Claims `key` of trigger `trigger_id` (guard `g`, dedupe `rule`) for `event_id`.
    /// Counts dropped duplicates.
    pub fn claim(
        &self,
        g: &TriggerGuard,
        rule: DedupeRule,
        trigger_id: &str,
        key: &str,
        event_id: &str,
        now_unix_secs: u64,
    ) -> Claim {
        let c = self.index.claim(
            KeyDigest::new(trigger_id, key),
            event_id,
            now_unix_secs,
            rule.window,
        );
        if matches!(c, Claim::Duplicate(_)) {
            self.metrics.incr_dedupe_dropped(g.index);
        }
        c
    }

    /// Settles a claim: confirmed when the event is durable, else released.
    pub fn settle(&self, token: ClaimToken, durable: bool) {
        if durable {
            self.index.confirm(token);
        } else {
            self.index.release(token);
        }
    }

    /// Rebuilds the dedupe index from the WAL in `wal_dir` at startup.
    pub fn rebuild_dedupe(
        &self,
        wal_dir: &Path,
        now_unix_secs: u64,
    ) -> Result<u64, crate::wal::WalError> {
        let rules: HashMap<String, DedupeRule> = self
            .start
            .by_trigger
            .iter()
            .filter_map(|(id, g)| g.dedupe.map(|r| (id.to_string(), r)))
            .collect();
        self.index.rebuild(wal_dir, &rules, now_unix_secs)
    }

    pub fn dedupe_index(&self) -> &DedupeIndex {
        &self.index
    }

    pub fn metrics(&self) -> &AuthMetrics {
        &self.metrics
    }

    pub fn render_prometheus(&self, w: &mut PromWriter) {
        self.metrics.render_prometheus(w);
    }
}
