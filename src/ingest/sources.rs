//! Per-source admission: the source registry, per-core caches, refusal accounting, and the
//! all-or-nothing admission through the global and the per-source bucket.
//!
//! # Lookup
//! A source (provider id) maps to one [`SourceEntry`]: its [`TokenBucket`] and its counters.
//! The shared [`SourceTable`] keeps the entries in a `parking_lot::Mutex<HashMap>` that is
//! touched only when a worker core sees a source name for the first time (or after its cache
//! was cleared). Each worker owns a [`SourceCache`], a plain map from name to entry; for a known
//! source the hot path is one hash lookup and the bucket's compare-and-swap, with no lock.
//!
//! # Bounds
//! - The table holds at most `max_sources` entries (default [`DEFAULT_MAX_SOURCES`]) plus one
//!   overflow entry named [`OVERFLOW_SOURCE`]. Entries are never evicted (a bucket that vanished
//!   and came back full would hand out a fresh burst). Once `max_sources` names are registered,
//!   every further name shares the overflow entry: one bucket with the per-source parameters and
//!   one set of counters, so all new sources together get one source's budget. A source literally
//!   named `_overflow`, and any name longer than [`MAX_SOURCE_NAME_LEN`] bytes, also map there.
//!   Memory: at most `max_sources + 1` entries of about 250 bytes plus a name of at most 128 bytes.
//! - A [`SourceCache`] holds at most `max(max_sources, 1)` names; inserting past that clears it
//!   (it refills from the table, under the lock, one name at a time). Names longer than
//!   [`MAX_SOURCE_NAME_LEN`] are never cached or locked for: they go straight to overflow.
//! - Metrics cardinality: `sluice_ingest_refusals_total{reason,source}` has at most
//!   `(max_sources + 1) × RefusalReason::COUNT` series.
//!
//! Counters are [`crate::metrics::Counter`]s (std atomics, `Relaxed`; metrics bypass the shim).
//! The registry uses `std::sync::Arc` and a `parking_lot` lock: it is a cold path loom does not
//! model; the bucket inside an entry is the part a loom model should cover.
#![forbid(unsafe_code)]

use super::bucket::{BucketParams, RetryAfter, TokenBucket};
use crate::metrics::{Counter, MetricType, PromWriter};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Default bound on distinct per-source buckets.
pub const DEFAULT_MAX_SOURCES: usize = 10_000;
/// The name of the entry shared by sources past the bound.
pub const OVERFLOW_SOURCE: &str = "_overflow";
/// Longest source name with its own entry; longer names share the overflow entry.
pub const MAX_SOURCE_NAME_LEN: usize = 128;

/// Why a request from a source was refused (`reason` label of
/// `sluice_ingest_refusals_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum RefusalReason {
    /// A token bucket (global or per-source) was empty: 503 + Retry-After.
    IngestSaturated,
    /// The WAL ring stayed full past `offer_timeout`.
    WalBusy,
    /// The WAL cannot accept writes (I/O error, shutting down the writer).
    WalUnavailable,
    /// Reserved: the durable backlog bound (`max_pending`) refused.
    BacklogFull,
    /// Reserved: the server is draining for shutdown.
    Draining,
}

impl RefusalReason {
    pub const ALL: [RefusalReason; 5] = [
        RefusalReason::IngestSaturated,
        RefusalReason::WalBusy,
        RefusalReason::WalUnavailable,
        RefusalReason::BacklogFull,
        RefusalReason::Draining,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub const fn as_str(self) -> &'static str {
        match self {
            RefusalReason::IngestSaturated => "ingest_saturated",
            RefusalReason::WalBusy => "wal_busy",
            RefusalReason::WalUnavailable => "wal_unavailable",
            RefusalReason::BacklogFull => "backlog_full",
            RefusalReason::Draining => "draining",
        }
    }
}

/// One source's bucket and counters. Shared by all cores (`Arc`), never removed.
#[derive(Debug)]
pub struct SourceEntry {
    name: Box<str>,
    /// Cache-padded internally, so counter writes do not bounce the bucket's line.
    bucket: TokenBucket,
    refusals: [Counter; RefusalReason::COUNT],
    accepted: Counter,
}

impl SourceEntry {
    fn new(name: &str, params: BucketParams) -> Self {
        SourceEntry {
            name: name.into(),
            bucket: TokenBucket::new(params),
            refusals: Default::default(),
            accepted: Counter::new(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn bucket(&self) -> &TokenBucket {
        &self.bucket
    }

    #[inline]
    pub fn record_refusal(&self, reason: RefusalReason) {
        self.refusals[reason as usize].incr();
    }

    /// Count one accepted request (call once it is answered 2xx).
    #[inline]
    pub fn record_accepted(&self) {
        self.accepted.incr();
    }

    pub fn refusals(&self, reason: RefusalReason) -> u64 {
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
    registry: Mutex<HashMap<Box<str>, Arc<SourceEntry>>>,
    overflow: Arc<SourceEntry>,
}

impl SourceTable {
    /// `max_sources == 0` is allowed: every source then shares the overflow entry.
    pub fn new(per_source: BucketParams, max_sources: usize) -> Self {
        SourceTable {
            per_source,
            max_sources,
            registry: Mutex::new(HashMap::new()),
            overflow: Arc::new(SourceEntry::new(OVERFLOW_SOURCE, per_source)),
        }
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
        if name.len() > MAX_SOURCE_NAME_LEN || name == OVERFLOW_SOURCE {
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
        let mut entries: Vec<Arc<SourceEntry>> = self.registry.lock().values().cloned().collect();
        entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        for entry in entries.iter().chain(std::iter::once(&self.overflow)) {
            f(&entry.name, entry);
        }
    }

    /// Append `sluice_ingest_refusals_total{reason,source}` (non-zero series only) and
    /// `sluice_ingest_accepted_total{source}` (every entry).
    pub fn write_prom(&self, w: &mut PromWriter) {
        const REFUSALS: &str = "sluice_ingest_refusals_total";
        const ACCEPTED: &str = "sluice_ingest_accepted_total";
        let mut accepted = Vec::new();
        w.header(
            REFUSALS,
            "Ingest refusals by reason and source.",
            MetricType::Counter,
        );
        self.for_each(|name, entry| {
            for reason in RefusalReason::ALL {
                let v = entry.refusals(reason);
                if v != 0 {
                    w.sample_u64(
                        REFUSALS,
                        &[("reason", reason.as_str()), ("source", name)],
                        v,
                    );
                }
            }
            accepted.push((name.to_owned(), entry.accepted()));
        });
        w.header(
            ACCEPTED,
            "Ingest requests accepted, by source.",
            MetricType::Counter,
        );
        for (name, v) in &accepted {
            w.sample_u64(ACCEPTED, &[("source", name)], *v);
        }
    }
}

/// A worker core's private map from source name to entry: the lock-free hot path.
///
/// Owned by one thread (`&mut self`); bounded by the table's `max_sources` (module docs).
#[derive(Debug)]
pub struct SourceCache {
    /// Name → index into `entries` (an index, so a hit returns without re-hashing).
    index: HashMap<Box<str>, usize>,
    entries: Vec<Arc<SourceEntry>>,
    limit: usize,
}

impl SourceCache {
    pub fn new(table: &SourceTable) -> Self {
        SourceCache {
            index: HashMap::new(),
            entries: Vec::new(),
            limit: table.max_sources.max(1),
        }
    }

    /// The entry for `name`: a local hash lookup, or on a miss [`SourceTable::lookup`].
    #[inline]
    pub fn get<'a>(&'a mut self, table: &'a SourceTable, name: &str) -> &'a Arc<SourceEntry> {
        if name.len() > MAX_SOURCE_NAME_LEN {
            return table.overflow();
        }
        let i = match self.index.get(name) {
            Some(&i) => i,
            None => self.fill(table, name),
        };
        &self.entries[i]
    }

    #[cold]
    fn fill(&mut self, table: &SourceTable, name: &str) -> usize {
        if self.entries.len() >= self.limit {
            self.index.clear();
            self.entries.clear();
        }
        self.entries.push(table.lookup(name));
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

/// Which bucket refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BucketKind {
    Global,
    Source,
}

/// An admission refusal: answer 503 with `Retry-After: retry_after.retry_after_secs()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// Time until the refusing bucket has a token; when both buckets are empty, the longer of
    /// the two, so the client is not invited back into a second refusal.
    pub retry_after: RetryAfter,
    /// The refusing bucket; when both are empty, the one with the longer wait (`Global` on a tie).
    pub bucket: BucketKind,
}

/// Admission parameters. Defaults follow the Harn contract: global 4096, per source 1024, both
/// refilling at 1024/s; at most [`DEFAULT_MAX_SOURCES`] per-source buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionConfig {
    pub global: BucketParams,
    pub per_source: BucketParams,
    pub max_sources: usize,
}

const fn params(capacity: u32, refill: u32) -> BucketParams {
    match BucketParams::new(capacity, refill) {
        Ok(p) => p,
        Err(_) => panic!("invalid default bucket parameters"),
    }
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            global: params(4096, 1024),
            per_source: params(1024, 1024),
            max_sources: DEFAULT_MAX_SOURCES,
        }
    }
}

/// The global bucket plus the per-source table: all-or-nothing admission.
#[derive(Debug)]
pub struct Admission {
    global: TokenBucket,
    sources: SourceTable,
}

impl Admission {
    pub fn new(config: AdmissionConfig) -> Self {
        Admission {
            global: TokenBucket::new(config.global),
            sources: SourceTable::new(config.per_source, config.max_sources),
        }
    }

    pub fn global(&self) -> &TokenBucket {
        &self.global
    }

    pub fn sources(&self) -> &SourceTable {
        &self.sources
    }

    /// Take one token from the global bucket and one from `source`'s, or neither.
    ///
    /// Order: acquire global; if the source bucket then refuses, refund the global token. A
    /// global refusal leaves the source bucket untouched (it is only read, for the max wait).
    /// The caller does the counting (`record_refusal(IngestSaturated)`, backpressure metrics).
    ///
    /// The refund window: between the global acquire and its refund (a few nanoseconds, nothing
    /// blocks in between) the global bucket holds one token less than it should. A request on
    /// another core that meets the global bucket at exactly its last token in that window is
    /// refused with a wait of about one emission interval (1/refill; 1 ms at the default rate,
    /// so `Retry-After: 1`). This errs only toward refusing, never toward admitting more than
    /// the budget; the token itself is returned exactly (refunds are not lost and cannot
    /// overfill); and making the two buckets one atomic step would need a lock or a double-word
    /// CAS across all cores on every request, which costs far more than the rare spurious 503.
    pub fn try_admit(&self, source: &SourceEntry, now: u64) -> Result<(), Refusal> {
        if let Err(global_wait) = self.global.try_acquire(now) {
            return Err(match source.bucket.check(now) {
                Err(source_wait) if source_wait > global_wait => Refusal {
                    retry_after: source_wait,
                    bucket: BucketKind::Source,
                },
                _ => Refusal {
                    retry_after: global_wait,
                    bucket: BucketKind::Global,
                },
            });
        }
        if let Err(source_wait) = source.bucket.try_acquire(now) {
            self.global.refund(now);
            return Err(Refusal {
                retry_after: source_wait,
                bucket: BucketKind::Source,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::clock::{Clock, ManualClock};
    use std::time::Duration;

    const SEC: u64 = 1_000_000_000;

    fn admission(global: (u32, u32), source: (u32, u32), max_sources: usize) -> Admission {
        Admission::new(AdmissionConfig {
            global: BucketParams::new(global.0, global.1).unwrap(),
            per_source: BucketParams::new(source.0, source.1).unwrap(),
            max_sources,
        })
    }

    #[test]
    fn default_config_matches_the_contract() {
        let c = AdmissionConfig::default();
        assert_eq!(
            (c.global.capacity(), c.global.refill_per_sec()),
            (4096, 1024)
        );
        assert_eq!(
            (c.per_source.capacity(), c.per_source.refill_per_sec()),
            (1024, 1024)
        );
        assert_eq!(c.max_sources, 10_000);
    }

    #[test]
    fn source_capacity_two_refill_one_third_refused_with_retry_after_one() {
        let clock = ManualClock::new(0);
        let adm = admission((100, 100), (2, 1), 10);
        let mut cache = SourceCache::new(adm.sources());
        let src = cache.get(adm.sources(), "github");
        adm.try_admit(src, clock.now_nanos()).unwrap();
        adm.try_admit(src, clock.now_nanos()).unwrap();
        let r = adm.try_admit(src, clock.now_nanos()).unwrap_err();
        assert_eq!(r.bucket, BucketKind::Source);
        assert_eq!(r.retry_after.retry_after_secs(), 1);
        clock.advance(Duration::from_secs(1));
        adm.try_admit(src, clock.now_nanos()).unwrap();
    }

    #[test]
    fn empty_source_refunds_the_global_token() {
        let adm = admission((3, 1), (1, 1), 10);
        let a = adm.sources().lookup("a");
        let b = adm.sources().lookup("b");
        adm.try_admit(&a, 0).unwrap();
        assert_eq!(adm.global().available(0), 2.0);
        for _ in 0..5 {
            let r = adm.try_admit(&a, 0).unwrap_err();
            assert_eq!(r.bucket, BucketKind::Source);
        }
        assert_eq!(
            adm.global().available(0),
            2.0,
            "refused requests must not leak tokens"
        );
        adm.try_admit(&b, 0).unwrap();
        assert_eq!(adm.global().available(0), 1.0);
    }

    #[test]
    fn empty_global_leaves_the_source_untouched() {
        let adm = admission((1, 1), (5, 1), 10);
        let a = adm.sources().lookup("a");
        let b = adm.sources().lookup("b");
        adm.try_admit(&a, 0).unwrap();
        let r = adm.try_admit(&b, 0).unwrap_err();
        assert_eq!(r.bucket, BucketKind::Global);
        assert_eq!(r.retry_after, RetryAfter::from_nanos(SEC));
        assert_eq!(b.bucket().available(0), 5.0);
        assert_eq!(a.bucket().available(0), 4.0);
    }

    #[test]
    fn retry_after_comes_from_the_refusing_bucket_and_is_at_least_one() {
        // Source refuses (capacity 1, 1/s): half a second after its token went, half to wait.
        let adm = admission((1000, 1000), (1, 1), 10);
        let s = adm.sources().lookup("s");
        adm.try_admit(&s, 0).unwrap();
        let r = adm.try_admit(&s, SEC / 2).unwrap_err();
        assert_eq!(
            (r.bucket, r.retry_after),
            (BucketKind::Source, RetryAfter::from_nanos(SEC / 2))
        );
        assert_eq!(r.retry_after.retry_after_secs(), 1);

        // Global refuses with a short wait (1 ms): the header is still 1.
        let adm = admission((1, 1000), (10, 1), 10);
        let s = adm.sources().lookup("s");
        adm.try_admit(&s, 0).unwrap();
        let r = adm.try_admit(&s, 0).unwrap_err();
        assert_eq!(
            (r.bucket, r.retry_after),
            (BucketKind::Global, RetryAfter::from_nanos(SEC / 1000))
        );
        assert_eq!(r.retry_after.retry_after_secs(), 1);

        // Both empty: the longer wait wins, and names its bucket.
        let adm = admission((1, 1000), (1, 1), 10);
        let s = adm.sources().lookup("s");
        adm.try_admit(&s, 0).unwrap();
        let r = adm.try_admit(&s, 0).unwrap_err();
        assert_eq!(
            (r.bucket, r.retry_after),
            (BucketKind::Source, RetryAfter::from_nanos(SEC))
        );
    }

    #[test]
    fn sources_past_the_bound_share_the_overflow_entry() {
        let adm = admission((1000, 1), (1, 1), 2);
        let table = adm.sources();
        let mut cache = SourceCache::new(table);
        assert_eq!(cache.get(table, "a").name(), "a");
        assert_eq!(cache.get(table, "b").name(), "b");
        let c = Arc::clone(cache.get(table, "c"));
        let d = Arc::clone(cache.get(table, "d"));
        assert!(Arc::ptr_eq(&c, &d) && Arc::ptr_eq(&c, table.overflow()));
        assert_eq!(c.name(), OVERFLOW_SOURCE);
        assert_eq!(table.len(), 2);
        // The overflow entry is one bucket with the per-source parameters.
        adm.try_admit(&c, 0).unwrap();
        assert_eq!(adm.try_admit(&d, 0).unwrap_err().bucket, BucketKind::Source);
        // Spoofing the overflow name or sending a huge name cannot add entries.
        assert!(Arc::ptr_eq(
            &table.lookup(OVERFLOW_SOURCE),
            table.overflow()
        ));
        let long = "x".repeat(MAX_SOURCE_NAME_LEN + 1);
        assert!(Arc::ptr_eq(cache.get(table, &long), table.overflow()));
        // Known sources keep their own bucket.
        assert!(Arc::ptr_eq(cache.get(table, "a"), &table.lookup("a")));
    }

    #[test]
    fn cache_is_cleared_past_its_bound_and_refills_from_the_table() {
        let table = SourceTable::new(BucketParams::new(1, 1).unwrap(), 3);
        let mut cache = SourceCache::new(&table);
        for name in ["a", "b", "c"] {
            cache.get(&table, name);
        }
        assert_eq!(cache.len(), 3);
        let over = Arc::clone(cache.get(&table, "d"));
        assert!(Arc::ptr_eq(&over, table.overflow()));
        assert_eq!(cache.len(), 1);
        assert!(Arc::ptr_eq(cache.get(&table, "a"), &table.lookup("a")));
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn zero_max_sources_sends_everything_to_overflow() {
        let table = SourceTable::new(BucketParams::new(1, 1).unwrap(), 0);
        let mut cache = SourceCache::new(&table);
        assert!(Arc::ptr_eq(cache.get(&table, "a"), table.overflow()));
        assert!(table.is_empty());
    }

    #[test]
    fn refusal_counters_render_with_bounded_labels() {
        let table = SourceTable::new(BucketParams::new(1, 1).unwrap(), 1);
        let b = table.lookup("b\"q");
        let o = table.lookup("zzz");
        b.record_refusal(RefusalReason::IngestSaturated);
        b.record_refusal(RefusalReason::IngestSaturated);
        b.record_accepted();
        o.record_refusal(RefusalReason::WalBusy);
        assert_eq!(b.refusals(RefusalReason::IngestSaturated), 2);
        let mut names = Vec::new();
        table.for_each(|n, _| names.push(n.to_owned()));
        assert_eq!(names, ["b\"q", OVERFLOW_SOURCE]);
        let mut w = PromWriter::new();
        table.write_prom(&mut w);
        assert_eq!(
            w.as_str(),
            "# HELP sluice_ingest_refusals_total Ingest refusals by reason and source.\n\
             # TYPE sluice_ingest_refusals_total counter\n\
             sluice_ingest_refusals_total{reason=\"ingest_saturated\",source=\"b\\\"q\"} 2\n\
             sluice_ingest_refusals_total{reason=\"wal_busy\",source=\"_overflow\"} 1\n\
             # HELP sluice_ingest_accepted_total Ingest requests accepted, by source.\n\
             # TYPE sluice_ingest_accepted_total counter\n\
             sluice_ingest_accepted_total{source=\"b\\\"q\"} 1\n\
             sluice_ingest_accepted_total{source=\"_overflow\"} 0\n"
        );
    }

    #[test]
    fn concurrent_admission_admits_exactly_the_smaller_budget() {
        const THREADS: usize = 4;
        const ATTEMPTS: usize = 5_000;
        let adm = admission((10_000, 1), (300, 1), 10);
        let table = adm.sources();
        let admitted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        let mut cache = SourceCache::new(table);
                        (0..ATTEMPTS)
                            .filter(|_| adm.try_admit(cache.get(table, "hot"), 7).is_ok())
                            .count()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, 300);
        // Every refunded global token came back: exactly 300 spent.
        assert_eq!(adm.global().available(7), 10_000.0 - 300.0);
    }
}
