//! Hot reload of the configuration: SIGHUP and `POST /admin/reload`.
//!
//! **Protocol.** A reload re-reads the manifest and the environment ([`ReloadSource`]) and
//! validates them completely ([`Config::load`]), then checks that every difference from the
//! running configuration is one this version can apply live ([`diff`]). Only then is a new
//! [`Generation`] — the validated `Arc<Config>`, the router built from it and a number — published
//! in [`Published`]: one mutex-guarded `Arc` plus an atomic generation number. Each core's loop
//! compares the number with its own at the top of every turn ([`CoreView::pick_up`], one
//! `Acquire` load; the lock is taken only when the number changed) and applies the new generation
//! to what it owns at that loop boundary (the core's `follow_reload`: its pump learns the new
//! trigger → destination map, its dispatcher the new destinations), and compares again before it
//! routes each request (so a request sent after the reload's `200` meets the new generation on
//! any core). A core's loop turns at least every 100 ms (its poll timeout), so every core runs
//! the new generation within about 100 ms of the publication; until then it runs the old one,
//! whole: a request never meets two generations. An
//! invalid manifest, or a change that needs a restart, publishes nothing: the old configuration
//! keeps serving, the failing key is logged (`sluice: reload refused: …`) and answered, and
//! `sluice_config_reloads_total{result="error"}` counts it.
//!
//! **What a reload applies** (everything else is refused with a message naming the key):
//! - triggers added (with flow gates too: their metric cells, which bound what the gates hold,
//!   are claimed before the publication, `FlowMetrics::claim`; without `max_pending`, as they
//!   have no backlog slot of their own), removed, or with new `verify`/`secrets`/`dedupe`/
//!   `when_backlog_full` (the generation's `ingest::GuardTable`, built before publication),
//!   `max_pending` (`Backlog::resize_shares`, the last check before publication: a cut share
//!   waits for its events to drain), or with a new `path`, `provider`, `handler` (to any
//!   destination, new ones included) or new flow-control gates (re-keyed without losing a
//!   waiting event: `dispatch::flow::rekey`). A removed trigger's path answers 404; its events
//!   already accepted are still delivered (each core keeps the handler of every trigger it has
//!   known).
//! - destinations added or removed: the new configuration is laid out by stable destination
//!   ids first ([`crate::ops::reload::ids`]: kept URIs keep their id and state, new ones take the next
//!   id, bounded per run, removed ones keep theirs and their settings to finish their events);
//!   the new ones' metric cells are named before publication, the removed ones' stop being
//!   rendered after it.
//! - per destination: `max_in_flight` (fixed limits; a raise applies at once, a cut applies as
//!   calls return — no call in flight is cancelled, [`crate::dispatch::deliver::permits::Permits::set_max`]),
//!   `rate` (a new budget, starting full), `timeout`, `retry` and `headers`, `signing_secret`
//!   (for the next attempts), `batch` (the batch being filled goes as it is, the next ones
//!   follow the new settings; added or removed alike).
//! - Refused as restart-only: `server.listen`, `server.data_dir`, `server.workers`,
//!   `server.io` (the cores' I/O backend), the `[wal]`
//!   settings (durability, write path, segment size), and the bounds sized at start (every
//!   other `[server]`, `[ingest]`, `[orchestrator]`, `[dispatch]`, `[flow]` key, the admin
//!   token, a destination's `circuit`, `tls` and adaptive limits, a new destination's shared
//!   budget, a shared destination's `shared`, `max_in_flight` and `rate`, more destinations
//!   than the per-run bound, a share for a trigger added by a reload, a gated trigger's new
//!   handler on a destination another core owns).
//!
//! Reloads are serialized (a `try_lock`: a reload while one runs is refused as busy). The
//! generation gauge and the result counters are plain atomics (`Relaxed`: counts carry no data).

#![forbid(unsafe_code)]

pub(super) mod diff;
pub mod ids;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::config::{Config, ConfigError, Overrides};
use crate::ingest::backlog::{trigger_shares, Backlog};
use crate::ingest::router::Router;
use crate::ingest::{GuardTable, Guards};
use crate::metrics::auth::AuthMetrics;
use crate::metrics::prom::{MetricType, PromWriter};
use crate::sync::publish::{Publisher, Subscription, Versioned};

pub use crate::ops::reload::diff::diff;
use crate::ops::reload::ids::assign;

/// Where a reload reads its configuration: the `--config` file (or none: embedded defaults) and
/// the command-line overrides of this run; the environment is re-read.
#[derive(Debug, Clone)]
pub struct ReloadSource {
    pub path: Option<PathBuf>,
    pub overrides: Overrides,
}

/// One published configuration (its number, 1 at start and +1 per successful reload, is the
/// [`Versioned::number`] it is published under).
#[derive(Debug)]
pub struct Generation {
    pub config: Arc<Config>,
    pub router: Arc<Router>,
    /// The triggers' signature verifiers and dedupe rules (`ingest::GuardTable`).
    pub guards: Arc<GuardTable>,
}

/// A generation as the cores hold it.
pub type Current = crate::sync::Arc<Versioned<Generation>>;

/// Why a reload published nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadError {
    /// The manifest or the environment is invalid (the message names the key).
    Invalid(String),
    /// Valid, but a difference needs a restart (the message names the key).
    NeedsRestart(String),
    /// Another reload is running.
    Busy,
    /// This process was started without a reload source (library use).
    NoSource,
}

impl std::fmt::Display for ReloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReloadError::Invalid(m) => f.write_str(m),
            ReloadError::NeedsRestart(m) => write!(f, "{m}; restart sluice to apply it"),
            ReloadError::Busy => f.write_str("another reload is in progress"),
            ReloadError::NoSource => {
                f.write_str("this server has no configuration source to reload")
            }
        }
    }
}

impl From<ConfigError> for ReloadError {
    fn from(e: ConfigError) -> Self {
        ReloadError::Invalid(e.0)
    }
}

/// The published generation (one per process, in `Shared`).
#[derive(Debug)]
pub struct Published {
    /// The generations (`sync::publish`: the protocol and its loom model).
    generations: Publisher<Generation>,
    source: OnceLock<ReloadSource>,
    /// Serializes reloads.
    reloading: Mutex<()>,
    /// The durable backlog, whose trigger shares a reload resizes (`Backlog::resize_shares`).
    backlog: Option<Arc<Backlog>>,
    /// Destinations at start (the id bound is this plus `ids::RELOAD_DESTINATIONS`).
    start_destinations: usize,
    /// The flow-control metric cells, which a reload extends for triggers it gives gates
    /// ([`crate::dispatch::flow::metrics::FlowMetrics::claim`]) before it publishes.
    flow_cells: Option<Arc<crate::dispatch::metrics::DispatchMetrics>>,
    /// The signature/dedupe counters a reload's guard table counts in (cells claimed before
    /// it publishes, `AuthMetrics::cell_for`).
    auth_cells: Arc<AuthMetrics>,
    ok: AtomicU64,
    errors: AtomicU64,
}

impl Published {
    /// Generation 1: the start-up configuration, its router and its guards (`guards`: the
    /// start-up table and the shared counters).
    pub fn new(config: Arc<Config>, router: Router, guards: &Guards) -> Published {
        Published {
            start_destinations: config.destinations.len(),
            generations: Publisher::new(Generation {
                config,
                router: Arc::new(router),
                guards: Arc::clone(guards.start_table()),
            }),
            source: OnceLock::new(),
            reloading: Mutex::new(()),
            flow_cells: None,
            backlog: None,
            auth_cells: Arc::clone(guards.shared_metrics()),
            ok: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    /// The flow-control metric cells the cores count in (see `flow_cells`).
    pub fn with_flow_cells(
        mut self,
        metrics: Arc<crate::dispatch::metrics::DispatchMetrics>,
    ) -> Published {
        self.flow_cells = Some(metrics);
        self
    }

    /// The backlog whose shares reloads resize (see `backlog`).
    pub fn with_backlog(mut self, backlog: Arc<Backlog>) -> Published {
        self.backlog = Some(backlog);
        self
    }

    /// Sets where reloads read from (once, before serving).
    pub fn set_source(&self, source: ReloadSource) {
        let _ = self.source.set(source);
    }

    /// The current generation.
    pub fn current(&self) -> Current {
        self.generations.current()
    }

    pub fn number(&self) -> u64 {
        self.generations.number()
    }

    /// `sluice_config_generation`, `sluice_config_reloads_total{result}`.
    pub fn render_prometheus(&self, w: &mut PromWriter) {
        w.gauge(
            "sluice_config_generation",
            "Configuration generation: 1 at start, +1 per successful reload.",
            self.number() as f64,
        );
        w.header(
            "sluice_config_reloads_total",
            "Configuration reloads (SIGHUP, POST /admin/reload) by result.",
            MetricType::Counter,
        );
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        w.sample_u64(
            "sluice_config_reloads_total",
            &[("result", "ok")],
            n(&self.ok),
        );
        w.sample_u64(
            "sluice_config_reloads_total",
            &[("result", "error")],
            n(&self.errors),
        );
    }

    /// Re-reads, validates, checks and publishes; returns the new generation number. Counts
    /// and logs the result either way.
    pub fn reload(&self) -> Result<u64, ReloadError> {
        let result = self.try_reload();
        match &result {
            Ok(n) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
                eprintln!("sluice: configuration reloaded: generation {n}");
            }
            Err(e) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("sluice: reload refused, the previous configuration keeps serving: {e}");
            }
        }
        result
    }

    fn try_reload(&self) -> Result<u64, ReloadError> {
        let Ok(_serial) = self.reloading.try_lock() else {
            return Err(ReloadError::Busy);
        };
        let source = self.source.get().ok_or(ReloadError::NoSource)?;
        let next = Config::load(source.path.as_deref(), &source.overrides)?;
        let current = self.current();
        // Destinations by stable id: kept URIs keep theirs (and their state), removed ones stay
        // to finish their events (`ids`).
        let next = assign(&current.value.config, next, self.start_destinations)
            .map_err(ReloadError::NeedsRestart)?;
        diff(&current.value.config, &next).map_err(ReloadError::NeedsRestart)?;
        // Every check that changes nothing comes before anything is claimed for the new
        // configuration: a refused reload must leave no trace (a destination's metric cell,
        // named once per run, would otherwise carry the refused URI for good).
        let ingest_triggers = next.ingest_triggers();
        let shares = trigger_shares(&ingest_triggers);
        if let Some(b) = &self.backlog {
            b.check_shares(&shares).map_err(ReloadError::NeedsRestart)?;
        }
        // Cells for every trigger with gates before any core can run them: a core finds them
        // by id. A claim that cannot be met publishes nothing.
        let spec = next.dispatch_spec();
        if let Some(m) = &self.flow_cells {
            m.flow
                .claim(&spec.triggers)
                .map_err(ReloadError::NeedsRestart)?;
        }
        // The new verifiers (their secrets read by `Config::load` above) and dedupe rules.
        let guards = GuardTable::build(&ingest_triggers, &self.auth_cells)
            .map_err(ReloadError::NeedsRestart)?;
        // Applies what it accepts (checked above): the triggers' `max_pending` shares, resized
        // live (a shrunk share waits for its events to drain).
        if let Some(b) = &self.backlog {
            b.resize_shares(&shares)
                .map_err(ReloadError::NeedsRestart)?;
        }
        // Last: the new destinations' metric cells are named (once per run, by id), which
        // cannot fail within `assign`'s bound.
        if let Some(m) = &self.flow_cells {
            m.claim_destinations(&spec.destinations)
                .map_err(ReloadError::NeedsRestart)?;
        }
        let router = Router::new(&ingest_triggers, next.ingest.default_route)
            .with_admin(next.admin_token.is_some());
        let config = Arc::new(next);
        // Reloads are serialized by `reloading`, so `current` is still the latest here.
        let n = self.generations.publish(Generation {
            config: Arc::clone(&config),
            router: Arc::new(router),
            guards: Arc::new(guards),
        });
        if let Some(m) = &self.flow_cells {
            m.export_destinations(&spec.in_use());
        }
        let warned = current.value.config.warnings();
        for w in config
            .warnings()
            .into_iter()
            .filter(|w| !warned.contains(w))
        {
            eprintln!("sluice: reload: warning: {w}");
        }
        for id in crate::ops::reload::diff::handlers_dropped(&current.value.config, &config) {
            eprintln!(
                "sluice: reload: trigger {id:?} has no handler from generation {n} on: its \
                 events not yet dispatched are recorded no_handler, not delivered"
            );
        }
        Ok(n)
    }
}

/// `POST /admin/reload` (token already checked): runs the reload on the calling core (a file
/// read and a validation, a few milliseconds) and answers `200 {"status":"ok","generation":N}`,
/// `400 {"reason":"invalid",…}` or `409 {"reason":"needs_restart"|"busy"|"no_source",…}`.
pub fn admin_answer(published: &Published) -> (u16, String) {
    let (status, reason, detail) = match published.reload() {
        Ok(n) => {
            return (
                200,
                serde_json::json!({"status": "ok", "generation": n}).to_string(),
            )
        }
        Err(e @ ReloadError::Invalid(_)) => (400, "invalid", e.to_string()),
        Err(e @ ReloadError::NeedsRestart(_)) => (409, "needs_restart", e.to_string()),
        Err(e @ ReloadError::Busy) => (409, "busy", e.to_string()),
        Err(e @ ReloadError::NoSource) => (409, "no_source", e.to_string()),
    };
    let body = serde_json::json!({
        "status": "refused",
        "reason": reason,
        "detail": detail,
        "generation": published.number(),
    });
    (status, body.to_string())
}

/// A core's view: the generation it runs.
#[derive(Debug)]
pub struct CoreView {
    sub: Subscription<Generation>,
}

impl CoreView {
    pub fn new(published: &Published) -> CoreView {
        CoreView {
            sub: Subscription::new(&published.generations),
        }
    }

    /// At the top of a loop turn and before a request is routed: the newer generation, if one
    /// was published since the last call (then this view runs it).
    #[inline]
    pub fn pick_up(&mut self, published: &Published) -> Option<Current> {
        self.sub.pick_up(&published.generations)
    }

    pub fn router(&self) -> &Arc<Router> {
        &self.sub.held().value.router
    }

    pub fn config(&self) -> &Arc<Config> {
        &self.sub.held().value.config
    }

    /// The signature/dedupe checks of the generation this core runs.
    pub fn guards(&self) -> &GuardTable {
        &self.sub.held().value.guards
    }
}

/// The main thread's SIGHUP check (every 20 ms while it waits): a reload per signal received
/// (signals arriving during one reload coalesce into the next).
pub fn on_signal(hup: &std::sync::atomic::AtomicBool, published: &Published) {
    if hup.swap(false, Ordering::Relaxed) {
        eprintln!("sluice: SIGHUP: reloading the configuration");
        let _ = published.reload();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = "[[triggers]]\nid = \"a\"\nprovider = \"p\"\npath = \"/a\"\n\
                       handler = \"http://127.0.0.1:9/a\"\n";
    const TWO: &str = "[[triggers]]\nid = \"a\"\nprovider = \"p\"\npath = \"/a\"\n\
                       handler = \"http://127.0.0.1:9/a\"\n\n[[triggers]]\nid = \"b\"\n\
                       provider = \"p\"\npath = \"/b\"\nhandler = \"http://127.0.0.1:9/a\"\n";

    /// A `Published` started from `text`, reading reloads from the file it returns.
    fn published(text: &str) -> (Published, tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sluice.toml");
        std::fs::write(&path, text).unwrap();
        let overrides = Overrides::default();
        let config = Config::load(Some(&path), &overrides).unwrap();
        let guards = Guards::new(&config.ingest_triggers(), config.ingest.dedupe_max_keys);
        let router = Router::new(&config.ingest_triggers(), config.ingest.default_route);
        let p = Published::new(Arc::new(config), router, &guards);
        p.set_source(ReloadSource {
            path: Some(path.clone()),
            overrides,
        });
        (p, dir, path)
    }

    fn reloads(p: &Published) -> String {
        let mut w = PromWriter::new();
        p.render_prometheus(&mut w);
        w.finish()
    }

    #[test]
    fn a_valid_reload_publishes_the_next_generation_once_to_each_view() {
        let (p, _dir, path) = published(ONE);
        let mut view = CoreView::new(&p);
        assert!(
            view.pick_up(&p).is_none(),
            "the view starts on generation 1"
        );
        std::fs::write(&path, TWO).unwrap();
        assert_eq!(p.reload(), Ok(2));
        let next = view.pick_up(&p).expect("generation 2 is picked up");
        assert_eq!(next.number, 2);
        assert_eq!(view.config().triggers.len(), 2);
        assert!(view.pick_up(&p).is_none(), "picked up once");
        assert!(reloads(&p).contains("sluice_config_reloads_total{result=\"ok\"} 1"));
        assert!(reloads(&p).contains("sluice_config_generation 2"));
    }

    #[test]
    fn an_invalid_manifest_publishes_nothing_and_is_counted() {
        let (p, _dir, path) = published(ONE);
        std::fs::write(&path, "[[triggers]]\nid = \"a\"\n").unwrap();
        assert!(matches!(p.reload(), Err(ReloadError::Invalid(_))));
        assert_eq!(p.number(), 1);
        let (status, body) = admin_answer(&p);
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("\"reason\":\"invalid\"") && body.contains("\"generation\":1"));
        assert!(reloads(&p).contains("sluice_config_reloads_total{result=\"error\"} 2"));
    }

    #[test]
    fn a_change_that_needs_a_restart_is_refused_with_409() {
        let (p, _dir, path) = published(ONE);
        let moved = format!("{ONE}[server]\nlisten = \"127.0.0.1:9999\"\n");
        std::fs::write(&path, moved).unwrap();
        let (status, body) = admin_answer(&p);
        assert_eq!(status, 409, "{body}");
        assert!(body.contains("needs_restart"), "{body}");
        assert_eq!(p.number(), 1);
    }

    #[test]
    fn a_reload_that_adds_batching_makes_ingest_decide_json_for_the_trigger() {
        let (p, _dir, path) = published(ONE);
        let mut view = CoreView::new(&p);
        assert!(!view.guards().batches("a"), "no batch: nothing decided");
        let gated = ONE.replace("handler", "batch = { size = 2, timeout = \"1s\" }\nhandler");
        std::fs::write(&path, gated).unwrap();
        assert_eq!(p.reload(), Ok(2));
        view.pick_up(&p).expect("generation 2");
        assert!(view.guards().batches("a"), "a batch gate");
        let dest =
            format!("{ONE}\n[[destinations]]\nuri = \"http://127.0.0.1:9/a\"\nbatch = {{}}\n");
        std::fs::write(&path, dest).unwrap();
        assert_eq!(p.reload(), Ok(3));
        view.pick_up(&p).expect("generation 3");
        assert!(view.guards().batches("a"), "a batching destination");
        std::fs::write(&path, ONE).unwrap();
        assert_eq!(p.reload(), Ok(4));
        view.pick_up(&p).expect("generation 4");
        assert!(!view.guards().batches("a"), "batching removed");
    }

    #[test]
    fn without_a_source_a_reload_says_so() {
        let config = Config::load(None, &Overrides::default()).unwrap();
        let guards = Guards::new(&config.ingest_triggers(), config.ingest.dedupe_max_keys);
        let router = Router::new(&config.ingest_triggers(), config.ingest.default_route);
        let p = Published::new(Arc::new(config), router, &guards);
        assert_eq!(p.reload(), Err(ReloadError::NoSource));
        assert_eq!(admin_answer(&p).0, 409);
    }
}
