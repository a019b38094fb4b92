//! Per-source admission state: the bounded source registry, per-core caches, and per-source
//! refusal accounting. The all-or-nothing admission itself is [`super::bucket::Admission`].
//!
//! # Lookup
//! A source (provider id) maps to one [`SourceEntry`]: its [`TokenBucket`] and its counters.
//! The shared [`SourceTable`] keeps the entries in a `parking_lot::Mutex<HashMap>` that is
//! touched only when a worker core sees a source name for the first time (or after its cache
//! was cleared). Each worker owns a [`SourceCache`], a plain map from name to entry; for a known
//! source the hot path is one hash lookup and the bucket's compare-and-swap, with no lock.
//!
//! # Trigger sources are separate from default-route sources
//! Traffic that has not passed a trigger's verification must never spend that trigger's
//! per-source bucket. So every `[[triggers]]` entry gets a **reserved entry of its own**, keyed
//! by trigger id and named `<provider>@<trigger-id>` (the name in metrics labels; `@` cannot
//! occur in a default-route source, which is `[A-Za-z0-9._-]{1,64}`). Requests on the default
//! route `POST /webhooks/{source}` use the entry named `{source}`: `/webhooks/github` and a
//! `provider = "github"` trigger never share a bucket, and neither do two triggers. Reserved
//! entries are created at start-up, are not counted against `max_sources`, and never fall into
//! the overflow entry (default-route traffic cannot push a trigger there). The global bucket is
//! shared by everything, as before.
//!
//! # Bounds
//! - The table holds at most `max_sources` entries (default [`DEFAULT_MAX_SOURCES`]) plus one
//!   overflow entry named [`OVERFLOW_SOURCE`]. Entries are never evicted (a bucket that vanished
//!   and came back full would hand out a fresh burst). Once `max_sources` names are registered,
//!   every further name shares the overflow entry: one bucket with the per-source parameters and
//!   one set of counters, so all new sources together get one source's budget. A source literally
//!   named `_overflow`, and any name longer than [`MAX_SOURCE_NAME_LEN`] bytes, also map there.
//!   Memory: an entry is 512 bytes in its `Arc` (the bucket word has a padded cache-line pair to
//!   itself) plus its name, kept twice (≤ 2 × 128 bytes): at most about 8 MiB at the default.
//! - A [`SourceCache`] holds at most `max(max_sources, 1)` names (about 50 bytes plus the name
//!   each); inserting past that clears it (it refills from the table, under the lock, one name
//!   at a time). Only a core that sees more distinct names than the bound, i.e. only while the
//!   overflow entry is in use, ever clears its cache. Names longer than [`MAX_SOURCE_NAME_LEN`]
//!   are neither cached nor looked up under the lock: they go straight to the overflow entry.
//! - Metrics cardinality: the per-source families (`sluice_ingest_refusals_total{reason,source}`,
//!   `sluice_ingest_accepted_total{source}`) have series for at most `metrics_top_sources`
//!   entries (default [`DEFAULT_METRICS_TOP_SOURCES`]; the ones with the most accepted plus
//!   refused requests at scrape time) plus one [`OTHER_SERIES`] that sums all the others, i.e.
//!   at most `(metrics_top_sources + 1) × (Refusal::COUNT + 1)` series however many
//!   sources clients create. `sluice_metrics_sources_folded` says how many were summed. The
//!   name `_other` is reserved like `_overflow`: a source of that name shares the overflow
//!   entry, so its series cannot be confused with the sum.
//!
//! Counters are [`crate::metrics::Counter`]s (std atomics, `Relaxed`; metrics bypass the shim).
//! The registry uses `std::sync::Arc` and a `parking_lot` lock: it is a cold path loom does not
//! model; the bucket inside an entry is the part a loom model covers.
#![forbid(unsafe_code)]

use super::respond::Refusal;
use super::schedule::SourcePromise;
use crate::metrics::{Counter, MetricType, PromWriter};
use crate::sync::gcra::{BucketParams, TokenBucket};
use parking_lot::Mutex;
use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;

/// Default bound on distinct per-source buckets.
pub const DEFAULT_MAX_SOURCES: usize = 10_000;
/// The name of the entry shared by sources past the bound.
pub const OVERFLOW_SOURCE: &str = "_overflow";
/// The `source` label value of the series that sums the sources outside the top
/// `metrics_top_sources` (reserved: a source of this name shares the overflow entry).
pub const OTHER_SERIES: &str = "_other";
/// Default `[ingest] metrics_top_sources`.
pub const DEFAULT_METRICS_TOP_SOURCES: usize = 100;
/// Longest source name with its own entry; longer names share the overflow entry.
pub const MAX_SOURCE_NAME_LEN: usize = 128;

/// One source's bucket and counters. Shared by all cores (`Arc`), never removed.
#[derive(Debug)]
pub struct SourceEntry {
    name: Box<str>,
    /// Cache-padded internally, so counter writes do not bounce the bucket's line.
    bucket: TokenBucket,
    refusals: [Counter; Refusal::COUNT],
    accepted: Counter,
    /// The latest return promised by `Retry-After` and the early-return counter
    /// ([`super::schedule`]); one word and one counter, bounded with the table.
    returns: SourcePromise,
}

impl SourceEntry {
    fn new(name: &str, params: BucketParams) -> Self {
        SourceEntry {
            name: name.into(),
            // Full from the clock's origin on, i.e. full whenever it is first used.
            bucket: TokenBucket::new(params, 0),
            refusals: Default::default(),
            accepted: Counter::new(),
            returns: SourcePromise::new(),
        }
    }

    /// This source's part of the return schedule.
    pub fn returns(&self) -> &SourcePromise {
        &self.returns
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn bucket(&self) -> &TokenBucket {
        &self.bucket
    }

    #[inline]
    pub fn count_refusal(&self, reason: Refusal) {
        self.refusals[reason as usize].incr();
    }

    /// Count one accepted request (call once it is answered 2xx).
    #[inline]
    pub fn count_accepted(&self) {
        self.accepted.incr();
    }

    pub fn refusals(&self, reason: Refusal) -> u64 {
        self.refusals[reason as usize].get()
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.get()
    }
}

/// The shared registry of per-source entries (see the module docs for its bound).
#[derive(Debug)]
pub struct SourceTable {
    per_source: BucketParams,
    max_sources: usize,
    /// Entries with per-source series of their own (module docs, "Metrics cardinality").
    metrics_top: usize,
    registry: Mutex<HashMap<Box<str>, Arc<SourceEntry>>>,
    overflow: Arc<SourceEntry>,
    /// Reserved entries of the triggers, by trigger id (module docs). Immutable after
    /// [`SourceTable::with_triggers`]: read without a lock.
    triggers: HashMap<Box<str>, Arc<SourceEntry>>,
}

impl SourceTable {
    /// At most `max_sources` entries of their own (`0` is allowed: every source then shares the
    /// overflow entry), each bucket with the `per_source` parameters.
    pub fn new(max_sources: usize, per_source: BucketParams) -> Self {
        SourceTable {
            per_source,
            max_sources,
            metrics_top: DEFAULT_METRICS_TOP_SOURCES,
            registry: Mutex::new(HashMap::new()),
            overflow: Arc::new(SourceEntry::new(OVERFLOW_SOURCE, per_source)),
            triggers: HashMap::new(),
        }
    }

    /// Reserves one entry per trigger `(id, provider)`, named `<provider>@<id>` (module docs).
    pub fn with_triggers<'a>(
        mut self,
        triggers: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Self {
        for (id, provider) in triggers {
            let name = trigger_source_name(provider, id);
            let entry = Arc::new(SourceEntry::new(&name, self.per_source));
            self.triggers.insert(id.into(), entry);
        }
        self
    }

    /// The reserved entry of trigger `trigger_id`, if it is a configured trigger.
    #[inline]
    pub fn trigger(&self, trigger_id: &str) -> Option<&Arc<SourceEntry>> {
        self.triggers.get(trigger_id)
    }

    pub fn per_source_params(&self) -> &BucketParams {
        &self.per_source
    }

    pub fn max_sources(&self) -> usize {
        self.max_sources
    }

    /// Registered sources, not counting the overflow entry.
    pub fn len(&self) -> usize {
        self.registry.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn overflow(&self) -> &Arc<SourceEntry> {
        &self.overflow
    }

    /// The entry for `name`, registering it if there is room. Takes the lock: the slow path
    /// behind [`SourceCache::get`].
    pub fn lookup(&self, name: &str) -> Arc<SourceEntry> {
        if name.len() > MAX_SOURCE_NAME_LEN || name == OVERFLOW_SOURCE || name == OTHER_SERIES {
            return Arc::clone(&self.overflow);
        }
        let mut registry = self.registry.lock();
        if let Some(entry) = registry.get(name) {
            return Arc::clone(entry);
        }
        if registry.len() >= self.max_sources {
            return Arc::clone(&self.overflow);
        }
        let entry = Arc::new(SourceEntry::new(name, self.per_source));
        registry.insert(name.into(), Arc::clone(&entry));
        entry
    }

    /// Visit every entry, sorted by name, the overflow entry last. The lock is held only while
    /// the entries are collected, not while `f` runs.
    pub fn for_each(&self, mut f: impl FnMut(&str, &SourceEntry)) {
        let mut entries = self.entries();
        entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        for entry in entries.iter().chain(std::iter::once(&self.overflow)) {
            f(&entry.name, entry);
        }
    }

    /// The registered entries and the triggers' reserved ones (not the overflow entry).
    fn entries(&self) -> Vec<Arc<SourceEntry>> {
        let mut entries: Vec<Arc<SourceEntry>> = self.registry.lock().values().cloned().collect();
        entries.extend(self.triggers.values().cloned());
        entries
    }

    /// Sets how many sources get series of their own in [`render_prometheus`]
    /// (`[ingest] metrics_top_sources`; default [`DEFAULT_METRICS_TOP_SOURCES`]).
    ///
    /// [`render_prometheus`]: Self::render_prometheus
    pub fn with_metrics_top(mut self, n: usize) -> Self {
        self.metrics_top = n;
        self
    }

    /// Append `sluice_ingest_refusals_total{reason,source}` (non-zero series only),
    /// `sluice_ingest_accepted_total{source}`, `sluice_ingest_early_returns_total{source}`
    /// (non-zero series only) and `sluice_metrics_sources_folded`.
    ///
    /// Cardinality bound (module docs): the `metrics_top` entries (the overflow entry included)
    /// with the most accepted plus refused requests get their own series, sorted by name; every
    /// other entry is summed into one `source="_other"` series per family. Membership is
    /// decided per scrape, so a source entering or leaving the top makes its own series and
    /// `_other` jump (a decrease reads as a counter reset to Prometheus).
    pub fn render_prometheus(&self, w: &mut PromWriter) {
        const REFUSALS: &str = "sluice_ingest_refusals_total";
        const ACCEPTED: &str = "sluice_ingest_accepted_total";
        const EARLY: &str = "sluice_ingest_early_returns_total";
        let mut top = self.entries();
        top.push(Arc::clone(&self.overflow));
        let folded = top_by_traffic(&mut top, self.metrics_top);
        top.sort_unstable_by(|a, b| {
            let last = |e: &SourceEntry| e.name.as_ref() == OVERFLOW_SOURCE;
            (last(a), &a.name).cmp(&(last(b), &b.name))
        });
        let mut other = Totals::default();
        for entry in &folded {
            other.add(entry);
        }
        w.header(
            REFUSALS,
            "Ingest refusals by reason and source.",
            MetricType::Counter,
        );
        let series = top.iter().map(|e| (e.name(), Totals::of(e)));
        let series: Vec<(&str, Totals)> = if folded.is_empty() {
            series.collect()
        } else {
            series
                .chain(std::iter::once((OTHER_SERIES, other)))
                .collect()
        };
        for (name, t) in &series {
            for reason in Refusal::ALL {
                let v = t.refusals[reason as usize];
                if v != 0 {
                    w.sample_u64(
                        REFUSALS,
                        &[("reason", reason.as_str()), ("source", name)],
                        v,
                    );
                }
            }
        }
        w.header(
            ACCEPTED,
            "Ingest requests accepted, by source.",
            MetricType::Counter,
        );
        for (name, t) in &series {
            w.sample_u64(ACCEPTED, &[("source", name)], t.accepted);
        }
        w.header(
            EARLY,
            "Refusals of requests that came back before the Retry-After promised to their source.",
            MetricType::Counter,
        );
        for (name, t) in &series {
            if t.early != 0 {
                w.sample_u64(EARLY, &[("source", name)], t.early);
            }
        }
        w.gauge(
            "sluice_metrics_sources_folded",
            "Sources without series of their own, summed into source=\"_other\" (ingest.metrics_top_sources).",
            folded.len() as f64,
        );
    }
}

/// Splits `entries` into the `n` with the most traffic (kept in `entries`, unordered) and the
/// rest (returned). Ties go to the smaller name, so membership does not flap between scrapes.
fn top_by_traffic(entries: &mut Vec<Arc<SourceEntry>>, n: usize) -> Vec<Arc<SourceEntry>> {
    if entries.len() <= n {
        return Vec::new();
    }
    let key = |e: &Arc<SourceEntry>| (Reverse(Totals::of(e).traffic()), e.name.clone());
    let mut keyed: Vec<_> = entries.drain(..).map(|e| (key(&e), e)).collect();
    if n > 0 {
        keyed.select_nth_unstable_by(n - 1, |a, b| a.0.cmp(&b.0));
    }
    let rest = keyed.split_off(n);
    entries.extend(keyed.into_iter().map(|(_, e)| e));
    rest.into_iter().map(|(_, e)| e).collect()
}

/// One entry's counters as read at scrape time (or a sum of several).
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    refusals: [u64; Refusal::COUNT],
    accepted: u64,
    /// Early returns: not traffic, only summed for `_other`.
    early: u64,
}

impl Totals {
    fn of(e: &SourceEntry) -> Totals {
        let mut t = Totals::default();
        t.add(e);
        t
    }

    fn add(&mut self, e: &SourceEntry) {
        for reason in Refusal::ALL {
            self.refusals[reason as usize] += e.refusals(reason);
        }
        self.accepted += e.accepted();
        self.early += e.returns.early_returns();
    }

    fn traffic(&self) -> u64 {
        self.refusals
            .iter()
            .fold(self.accepted, |a, &r| a.saturating_add(r))
    }
}

/// The metrics name of trigger `id`'s reserved entry.
pub fn trigger_source_name(provider: &str, id: &str) -> String {
    format!("{provider}@{id}")
}

/// A worker core's private map from source name to entry: the lock-free hot path.
///
/// Owned by one thread (`&mut self`); bounded by the table's `max_sources` (module docs).
#[derive(Debug)]
pub struct SourceCache {
    table: Arc<SourceTable>,
    /// Name → index into `entries` (an index, so a hit needs a single hash lookup).
    index: HashMap<Box<str>, usize>,
    entries: Vec<Arc<SourceEntry>>,
    limit: usize,
}

impl SourceCache {
    pub fn new(table: Arc<SourceTable>) -> Self {
        let limit = table.max_sources.max(1);
        SourceCache {
            table,
            index: HashMap::new(),
            entries: Vec::new(),
            limit,
        }
    }

    pub fn table(&self) -> &Arc<SourceTable> {
        &self.table
    }

    /// The entry whose buckets a request to `trigger_id` spends: the trigger's reserved entry,
    /// or for the default route the entry of `source` (module docs).
    #[inline]
    pub fn get_for(&mut self, trigger_id: &str, source: &str) -> Arc<SourceEntry> {
        match self.table.trigger(trigger_id) {
            Some(entry) => Arc::clone(entry),
            None => self.get(source),
        }
    }

    /// The entry for `name`: a local hash lookup, or on a miss [`SourceTable::lookup`].
    ///
    /// Returns a clone of the `Arc` so the caller can keep it until the request's outcome is
    /// known (one reference-count increment per request).
    #[inline]
    pub fn get(&mut self, name: &str) -> Arc<SourceEntry> {
        if name.len() > MAX_SOURCE_NAME_LEN {
            return Arc::clone(self.table.overflow());
        }
        let i = match self.index.get(name) {
            Some(&i) => i,
            None => self.fill(name),
        };
        Arc::clone(&self.entries[i])
    }

    #[cold]
    fn fill(&mut self, name: &str) -> usize {
        if self.entries.len() >= self.limit {
            self.index.clear();
            self.entries.clear();
        }
        self.entries.push(self.table.lookup(name));
        let i = self.entries.len() - 1;
        self.index.insert(name.into(), i);
        i
    }

    /// Cached names.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(max_sources: usize) -> Arc<SourceTable> {
        Arc::new(SourceTable::new(
            max_sources,
            BucketParams::new(1, 1).unwrap(),
        ))
    }

    #[test]
    fn reasons_index_their_table() {
        for (i, r) in Refusal::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
    }

    #[test]
    fn known_sources_keep_their_own_entry() {
        let t = table(10);
        let mut cache = SourceCache::new(t.clone());
        let a = cache.get("a");
        assert_eq!(a.name(), "a");
        assert!(Arc::ptr_eq(&a, &cache.get("a")));
        assert!(Arc::ptr_eq(&a, &t.lookup("a")));
        let mut other_core = SourceCache::new(t.clone());
        assert!(Arc::ptr_eq(&a, &other_core.get("a")));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn sources_past_the_bound_share_the_overflow_entry() {
        let t = table(2);
        let mut cache = SourceCache::new(t.clone());
        assert_eq!(cache.get("a").name(), "a");
        assert_eq!(cache.get("b").name(), "b");
        let (c, d) = (cache.get("c"), cache.get("d"));
        assert!(Arc::ptr_eq(&c, &d) && Arc::ptr_eq(&c, t.overflow()));
        assert_eq!(c.name(), OVERFLOW_SOURCE);
        assert_eq!(t.len(), 2);
        // One bucket with the per-source parameters (capacity 1) for all of them.
        c.bucket().try_acquire(0).unwrap();
        assert!(d.bucket().try_acquire(0).is_err());
        // Spoofing the overflow name or sending a huge name cannot add entries.
        assert!(Arc::ptr_eq(&t.lookup(OVERFLOW_SOURCE), t.overflow()));
        let long = "x".repeat(MAX_SOURCE_NAME_LEN + 1);
        assert!(Arc::ptr_eq(&cache.get(&long), t.overflow()));
        let longest = "y".repeat(MAX_SOURCE_NAME_LEN);
        assert_eq!(table(5).lookup(&longest).name(), longest);
        // Known sources keep their own bucket.
        assert!(Arc::ptr_eq(&cache.get("a"), &t.lookup("a")));
    }

    #[test]
    fn cache_is_cleared_past_its_bound_and_refills_from_the_table() {
        let t = table(3);
        let mut cache = SourceCache::new(t.clone());
        for name in ["a", "b", "c"] {
            cache.get(name);
        }
        assert_eq!(cache.len(), 3);
        assert!(Arc::ptr_eq(&cache.get("d"), t.overflow()));
        assert_eq!(cache.len(), 1);
        assert!(Arc::ptr_eq(&cache.get("a"), &t.lookup("a")));
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn zero_max_sources_sends_everything_to_overflow() {
        let t = table(0);
        let mut cache = SourceCache::new(t.clone());
        assert!(Arc::ptr_eq(&cache.get("a"), t.overflow()));
        assert!(t.is_empty());
    }

    #[test]
    fn trigger_sources_are_separate_from_default_route_sources() {
        let t = Arc::new(
            SourceTable::new(1, BucketParams::new(1, 1).unwrap())
                .with_triggers([("gh", "github"), ("gh2", "github")]),
        );
        let mut cache = SourceCache::new(t.clone());
        let route = cache.get_for(crate::ingest::router::DEFAULT_TRIGGER_ID, "github");
        let trig = cache.get_for("gh", "github");
        let trig2 = cache.get_for("gh2", "github");
        assert_eq!(route.name(), "github");
        assert_eq!(trig.name(), "github@gh");
        assert!(!Arc::ptr_eq(&route, &trig) && !Arc::ptr_eq(&trig, &trig2));
        // Spending the default route's bucket leaves the trigger's full.
        route.bucket().try_acquire(0).unwrap();
        assert!(route.bucket().try_acquire(0).is_err());
        trig.bucket().try_acquire(0).unwrap();
        // Reserved entries do not count against max_sources (1): "github" took the one slot.
        assert_eq!(t.len(), 1);
        assert!(Arc::ptr_eq(&cache.get("y"), t.overflow()));
        // Filling the table never moves a trigger to the overflow entry.
        assert!(Arc::ptr_eq(&cache.get_for("gh", "github"), &trig));
        let mut names = Vec::new();
        t.for_each(|n, _| names.push(n.to_owned()));
        assert_eq!(
            names,
            ["github", "github@gh", "github@gh2", OVERFLOW_SOURCE]
        );
    }

    #[test]
    fn refusal_counters_render_with_bounded_labels() {
        let t = table(1);
        let b = t.lookup("b\"q");
        let o = t.lookup("zzz");
        b.count_refusal(Refusal::IngestSaturated);
        b.count_refusal(Refusal::IngestSaturated);
        b.count_accepted();
        o.count_refusal(Refusal::WalBusy);
        assert_eq!(b.refusals(Refusal::IngestSaturated), 2);
        let mut names = Vec::new();
        t.for_each(|n, _| names.push(n.to_owned()));
        assert_eq!(names, ["b\"q", OVERFLOW_SOURCE]);
        let mut w = PromWriter::new();
        t.render_prometheus(&mut w);
        assert_eq!(
            w.as_str(),
            "# HELP sluice_ingest_refusals_total Ingest refusals by reason and source.\n\
             # TYPE sluice_ingest_refusals_total counter\n\
             sluice_ingest_refusals_total{reason=\"ingest_saturated\",source=\"b\\\"q\"} 2\n\
             sluice_ingest_refusals_total{reason=\"wal_busy\",source=\"_overflow\"} 1\n\
             # HELP sluice_ingest_accepted_total Ingest requests accepted, by source.\n\
             # TYPE sluice_ingest_accepted_total counter\n\
             sluice_ingest_accepted_total{source=\"b\\\"q\"} 1\n\
             sluice_ingest_accepted_total{source=\"_overflow\"} 0\n\
             # HELP sluice_ingest_early_returns_total Refusals of requests that came back before the Retry-After promised to their source.\n\
             # TYPE sluice_ingest_early_returns_total counter\n\
             # HELP sluice_metrics_sources_folded Sources without series of their own, summed into source=\"_other\" (ingest.metrics_top_sources).\n\
             # TYPE sluice_metrics_sources_folded gauge\n\
             sluice_metrics_sources_folded 0\n"
        );
    }

    #[test]
    fn only_the_top_sources_get_series_and_the_rest_sum_into_other() {
        let t =
            Arc::new(SourceTable::new(100, BucketParams::new(1, 1).unwrap()).with_metrics_top(2));
        for (name, accepted, refused) in [("a", 1, 0), ("b", 5, 0), ("c", 0, 3), ("d", 2, 1)] {
            let e = t.lookup(name);
            (0..accepted).for_each(|_| e.count_accepted());
            (0..refused).for_each(|_| e.count_refusal(Refusal::BodyBudget));
        }
        // A client cannot pose as the sum.
        assert!(Arc::ptr_eq(&t.lookup(OTHER_SERIES), t.overflow()));
        let mut w = PromWriter::new();
        t.render_prometheus(&mut w);
        let text = w.as_str();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        // Top 2 by accepted + refused: b (5) and c (3); a, d and the idle overflow entry fold.
        assert_eq!(
            lines,
            [
                "sluice_ingest_refusals_total{reason=\"body_budget\",source=\"c\"} 3",
                "sluice_ingest_refusals_total{reason=\"body_budget\",source=\"_other\"} 1",
                "sluice_ingest_accepted_total{source=\"b\"} 5",
                "sluice_ingest_accepted_total{source=\"c\"} 0",
                "sluice_ingest_accepted_total{source=\"_other\"} 3",
                "sluice_metrics_sources_folded 3",
            ]
        );
    }

    #[test]
    fn three_thousand_sources_render_a_bounded_text() {
        let t = SourceTable::new(10_000, BucketParams::new(1, 1).unwrap());
        for i in 0..3000 {
            t.lookup(&format!("source-{i:04}")).count_accepted();
        }
        let mut w = PromWriter::new();
        t.render_prometheus(&mut w);
        let series = w
            .as_str()
            .lines()
            .filter(|l| l.starts_with("sluice_ingest"))
            .count();
        assert_eq!(series, DEFAULT_METRICS_TOP_SOURCES + 1);
        assert!(w.as_str().len() < 16 * 1024, "{} bytes", w.as_str().len());
        // Ties go to the smaller name: the same sources every scrape.
        assert!(w.as_str().contains("source=\"source-0000\""));
        assert!(!w.as_str().contains("source=\"source-2999\""));
        let zero = SourceTable::new(5, BucketParams::new(1, 1).unwrap()).with_metrics_top(0);
        zero.lookup("x").count_accepted();
        let mut w = PromWriter::new();
        zero.render_prometheus(&mut w);
        assert!(w
            .as_str()
            .contains("sluice_ingest_accepted_total{source=\"_other\"} 1"));
    }
}
